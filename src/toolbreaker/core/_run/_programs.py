"""The programs a shell command may run, and what each may change (see ``shell.py``).

The table of programs :func:`toolbreaker.core._run.shell.shell_risk` knows: those that
only look (:data:`READS`), those that change local state whatever their arguments
(:data:`WRITES`), and those whose arguments decide (:data:`HANDLERS`: ``sed -i``,
``git push``, ``pip install``, ``python -c CODE`` ...). A handler judges one program's
arguments; one that runs another command (``find -exec``, ``bash -c``) hands it back to
the parser through its :class:`Call`. Pure: nothing is run.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from toolbreaker.core._run._values import RISK_CLASSES, RiskClass

__all__ = [
    "EXTERNAL",
    "HANDLERS",
    "READ",
    "READS",
    "SINKS",
    "TEST_SCRIPT",
    "WRITE",
    "WRITES",
    "Call",
    "code_risk",
    "highest",
    "script",
]

READ: Final[RiskClass] = "read"
WRITE: Final[RiskClass] = "reversible_write"
EXTERNAL: Final[RiskClass] = "irreversible"
RANK: Final = {risk: i for i, risk in enumerate(RISK_CLASSES)}


def _names(text: str) -> frozenset[str]:
    """The words of ``text``: a table of names written as a paragraph."""
    return frozenset(text.split())


#: Programs that only look (their options cannot make them write, or are handled below).
READS: Final = _names(
    """
    cat head tail less more nl wc grep egrep fgrep rg ag ack ls ll dir tree find locate which
    whereis type command file stat du df pwd cd pushd popd echo printf true false test [ [[
    sleep date env printenv export set unset alias hash id whoami groups uname hostname ps
    pgrep top free uptime lsof netstat ss cut tr paste join comm diff cmp colordiff column
    fold fmt rev tac od xxd hexdump strings md5sum sha1sum sha256sum sha512sum cksum base64
    uniq jq basename dirname realpath readlink seq expr bc let read history man help info apropos
    kill dig nslookup host ping tshark objdump readelf nm ldd pylint flake8 mypy pyright dmypy
    pycodestyle pydocstyle pyflakes bandit vulture radon pytest py.test tox nox nosetests
    coverage shellcheck wait jobs source_highlight tput clear stty ulimit umask
    open goto scroll_up scroll_down search_dir search_file find_file filemap
    """
)
#: Programs that change local state whatever their arguments.
WRITES: Final = _names(
    """
    rm rmdir mv cp mkdir touch chmod chown chgrp ln install dd truncate shred mktemp patch
    ed ex vi vim nvim nano emacs gunzip bunzip2 unxz gzip bzip2 xz zip 7z
    mongo mongosh redis-cli cmake ninja bazel meson
    edit insert append create submit
    """
)
#: Where output may go without changing anything.
SINKS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
TEST_SCRIPT: Final = re.compile(r"^(run_?tests?|tests?)(\.py|\.sh)?$")

# -- what code run by an interpreter does ----------------------------------------------------

_CODE_WRITES: Final = re.compile(
    r"""
    \bopen\s*\([^()]*?,\s*(?:mode\s*=\s*)?[rb]?['"][rbtU]*[wax+]
    | \bopen\s*\([^(),]*?\bmode\s*=\s*['"][rbtU]*[wax+]
    | \.open\s*\(\s*(?:mode\s*=\s*)?['"][rbtU]*[wax+]
    | \.(?:write_text|write_bytes|touch|mkdir|unlink|rmdir|rename|symlink_to|hardlink_to
        |savefig|to_csv|to_excel|to_parquet|save)\s*\(
    | \bos\.(?:remove|unlink|rename|replace|renames|makedirs|mkdir|rmdir|removedirs|system
        |popen|chmod|chown|symlink|link|truncate|utime|exec\w*|spawn\w*|kill|write)\b
    | \bshutil\.(?!which\b|disk_usage\b|get_terminal_size\b)\w+
    | \bsubprocess\b | \bcall_command\s*\(
    | \b(?:json|pickle|yaml|marshal|toml|tomli_w|tomlkit)\.dump\s*\(
    | \b(?:writeFile|writeFileSync|appendFile\w*|unlinkSync|rmSync|mkdirSync|execSync)\b
    | (?i:\b(?:insert\s+into|update\s+\w+\s+set|delete\s+from|create\s+table|drop\s+table
        |alter\s+table|replace\s+into)\b)
    """,
    re.X,
)


def code_risk(code: str) -> RiskClass:
    """What inline code (``python -c``, a here-document) may change: read or write."""
    return WRITE if _CODE_WRITES.search(code) else READ


def highest(*risks: RiskClass) -> RiskClass:
    return max(risks, key=RANK.__getitem__, default=READ)


# -- programs whose arguments decide -----------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One program's arguments and the here-documents fed to it, with the parser's hands.

    Attributes:
        args: the words after the program's name.
        fed: the bodies of the here-documents fed to it.
        program: judges a command given as words (``find -exec``'s).
        command: judges a command line (``bash -c``'s).
    """

    args: list[str]
    fed: list[str]
    program: Callable[[list[str]], RiskClass]
    command: Callable[[str], RiskClass]


def _positional(args: Sequence[str]) -> list[str]:
    return [a for a in args if not a.startswith("-")]


def _flagged(args: Sequence[str], pattern: str) -> bool:
    """Whether an option cluster matches ``pattern`` (``-ni`` for sed's ``-[nrE]*i``)."""
    flag = re.compile(pattern)
    return any(flag.match(a) for a in args if not a.startswith("--"))


def _fed(call: Call) -> RiskClass:
    """An interpreter reading its program from standard input: a here-document, or unknown."""
    return highest(*(code_risk(body) for body in call.fed)) if call.fed else WRITE


def _sed(call: Call) -> RiskClass:
    args = call.args
    values = {i + 1 for i, a in enumerate(args) if a in ("-e", "-f", "--expression", "--file")}
    options = [a for i, a in enumerate(args) if i not in values]
    edits = _flagged(options, r"^-[nrEsuz]*i") or any(a.startswith("--in-place") for a in options)
    return WRITE if edits else READ


def _inline(call: Call, *flags: str) -> RiskClass:
    """perl, ruby, node: in-place edits write, inline code is read, a script may do anything."""
    args = call.args
    if flags[0] != "--eval" and _flagged(args, r"^-[pnlaswTtWXU0]*i"):
        return WRITE
    for i, arg in enumerate(args):
        if arg in flags or ("-e" in flags and re.match(r"^-[a-zA-Z]*[eE]$", arg)):
            return code_risk(args[i + 1] if i + 1 < len(args) else "")
        if arg in ("--version", "-v", "-V", "--help", "-h"):
            return READ
        if not arg.startswith("-"):
            return script(arg, args[i + 1 :])
    return _fed(call)


def script(path: str, args: list[str]) -> RiskClass:
    name = path.rsplit("/", 1)[-1]
    if TEST_SCRIPT.match(name):
        return READ
    if name == "manage.py":
        read = {"test", "check", "showmigrations", "sqlmigrate", "diffsettings", "help"}
        return READ if args and args[0] in read else WRITE
    return WRITE


#: Python's options that take a value.
_PYTHON_VALUES: Final = frozenset({"-W", "-X", "-Q", "--check-hash-based-pycs"})
#: Modules that only look (``python -m pytest``); ``pip`` and the formatters are judged on.
_PYTHON_READS: Final = _names(
    """
    pytest unittest doctest json.tool pydoc tabnanny pyclbr site sysconfig platform this
    tokenize ast dis pickletools
    """
)


def _python(call: Call) -> RiskClass:
    args = call.args
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-c" or (arg.startswith("-c") and len(arg) > 2):
            return code_risk(arg[2:] or (args[i + 1] if i + 1 < len(args) else ""))
        if arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            module = arg[2:] or (args[i + 1] if i + 1 < len(args) else "")
            rest = args[i + 1 :] if arg[2:] else args[i + 2 :]
            if module in _PYTHON_READS:
                return READ
            handler = HANDLERS.get(module)
            if handler is not None:
                return handler(dataclasses.replace(call, args=rest))
            return READ if module in READS else WRITE
        if arg in ("--version", "-V", "-VV", "--help", "-h"):
            return READ
        if arg == "-":
            break  # the program comes from standard input
        if arg in _PYTHON_VALUES:
            i += 2
            continue
        if not arg.startswith("-"):
            return script(arg, args[i + 1 :])
        i += 1
    return _fed(call)


def _subcommand(args: Sequence[str], values: frozenset[str] = frozenset()) -> tuple[str, list[str]]:
    """The first word that is no option (skipping options' values), and what follows it."""
    i = 0
    while i < len(args):
        if args[i] in values:
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return args[i], list(args[i + 1 :])
    return "", []


_GIT_READS: Final = _names(
    """
    diff log status show blame grep ls-files ls-tree ls-remote rev-parse rev-list describe
    shortlog cat-file reflog whatchanged help version var check-ignore check-attr
    merge-base name-rev show-ref show-branch cherry count-objects fsck verify-commit
    """
)
_GIT_VALUES: Final = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})


def _git(call: Call) -> RiskClass:
    sub, rest = _subcommand(call.args, _GIT_VALUES)
    if sub in _GIT_READS or not sub:
        return READ  # git --version, git --help
    if sub in ("push", "send-email", "request-pull"):
        return EXTERNAL
    if sub == "config":
        looks = {"--get", "--get-all", "--get-regexp", "--list", "-l", "--show-origin"}
        return READ if looks & set(rest) or len(_positional(rest)) <= 1 else WRITE
    if sub in ("branch", "tag"):
        listing = {"-l", "--list", "-a", "-r", "-v", "-vv", "--show-current", "--contains"}
        return READ if not _positional(rest) or listing & set(rest) else WRITE
    looks_at = {"remote": ("-v", "show", "get-url"), "stash": ("list", "show")}
    if sub in looks_at:
        return (
            READ
            if (not rest and sub == "remote") or (rest[:1] and rest[0] in looks_at[sub])
            else WRITE
        )
    return WRITE  # add, commit, checkout, apply, reset, stash, merge, rebase, clean ...


#: What package managers (pip, npm, conda, poetry, apt ...) only look with.
_INSTALLER_READS: Final = _names(
    """
    list show freeze check search help info view outdated why explain ls audit env inspect
    debug doctor policy depends rdepends config-list cache-dir version
    """
)


def _installer(call: Call) -> RiskClass:
    """Installing changes the environment; listing looks; publishing leaves the machine."""
    sub, rest = _subcommand(call.args)
    if sub in ("test", "t"):
        return READ  # npm test, yarn test
    if sub == "run":
        script, _ = _subcommand(rest)
        return READ if script in ("test", "lint", "check", "typecheck") else WRITE
    if sub == "publish":
        return EXTERNAL
    if sub == "pip":
        return _installer(dataclasses.replace(call, args=rest))  # uv pip install
    return READ if sub in _INSTALLER_READS or not sub else WRITE


def _build(call: Call) -> RiskClass:
    """cargo, go, mvn, gradle: tests and checks look; builds, runs and installs write."""
    sub, _ = _subcommand(call.args)
    if sub == "fmt":
        return READ if {"--check", "-l"} & set(call.args) else WRITE
    looks = {"test", "check", "clippy", "vet", "version", "list", "doc", "verify", "help"}
    return READ if sub in looks else WRITE


def _make(call: Call) -> RiskClass:
    targets = _positional(call.args)
    tests = {"test", "tests", "check", "lint", "help"}
    dry = "-n" in call.args or "--dry-run" in call.args
    return READ if dry or (targets and all(t in tests for t in targets)) else WRITE


def _formatter(call: Call) -> RiskClass:
    """black, isort, ruff, autopep8 ...: a check or a diff looks; anything else rewrites."""
    args = call.args
    if args[:1] == ["check"]:
        return WRITE if "--fix" in args else READ  # ruff check
    looks = {"--check", "--diff", "--check-only", "--list-different", "-l"}
    return READ if looks & set(args) else WRITE


def _tee(call: Call) -> RiskClass:
    return WRITE if [a for a in _positional(call.args) if a not in SINKS] else READ


def _find(call: Call) -> RiskClass:
    args = call.args
    risk = READ
    for i, arg in enumerate(args):
        if arg in ("-delete", "-fprint", "-fprint0", "-fprintf", "-fls"):
            risk = WRITE
        elif arg in ("-exec", "-execdir", "-ok", "-okdir"):
            command = []
            for word in args[i + 1 :]:
                if word in (";", "+", "\\;"):
                    break
                command.append(word)
            risk = highest(risk, call.program(command))
    return risk


def _sort(call: Call) -> RiskClass:
    output = _flagged(call.args, r"^-[bdfgiMhnRrVcCmsuz]*o") or any(
        a.startswith("--output") for a in call.args
    )
    return WRITE if output else READ


def _awk(call: Call) -> RiskClass:
    args = call.args
    in_place = any(a == "-i" and args[i + 1 : i + 2] == ["inplace"] for i, a in enumerate(args))
    return WRITE if in_place or "-iinplace" in args else READ


_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SENDS: Final = _names(
    """
    -d --data --data-raw --data-binary --data-urlencode --data-ascii -F --form -T
    --upload-file --json
    """
)


def _curl(call: Call) -> RiskClass:
    args = call.args
    for i, arg in enumerate(args):
        method = arg[2:] if arg.startswith("-X") and len(arg) > 2 else ""
        if arg in ("-X", "--request") and i + 1 < len(args):
            method = args[i + 1]
        if method.upper() in _METHODS or arg.split("=", 1)[0] in _SENDS:
            return EXTERNAL
    saves = {"-o", "-O", "--output", "--remote-name", "--remote-name-all", "-OJ"}
    return WRITE if saves & set(args) or any(a.startswith("--output=") for a in args) else READ


def _wget(call: Call) -> RiskClass:
    args = call.args
    if any(a.startswith(("--post-data", "--post-file", "--method", "--body-")) for a in args):
        return EXTERNAL
    stdout = any(a in ("-O-", "-qO-", "--output-document=-") for a in args) or any(
        a == "-O" and args[i + 1 : i + 2] == ["-"] for i, a in enumerate(args)
    )
    return READ if stdout or "--spider" in args else WRITE


_REMOTE_LOOKS: Final = _names(
    """
    view list ls status get describe show diff plan version help logs top explain search
    validate output history whoami api-resources
    """
)


def _remote_tool(call: Call) -> RiskClass:
    """gh, kubectl, terraform, helm, aws, gcloud, az: looking is a read; the rest acts."""
    words = _positional(call.args)[:3]
    if any(w in _REMOTE_LOOKS or w.startswith(("describe-", "list-", "get-")) for w in words):
        return READ
    return EXTERNAL


def _rsync(call: Call) -> RiskClass:
    """To another machine (``host:path``) it acts there; locally it writes."""
    target = (_positional(call.args) or [""])[-1]
    return EXTERNAL if re.match(r"^[^/]*:", target) else WRITE


def _docker(call: Call) -> RiskClass:
    sub, _ = _subcommand(call.args)
    if sub == "push":
        return EXTERNAL
    return READ if sub in ("ps", "images", "logs", "inspect", "version", "info") else WRITE


def _archive(call: Call) -> RiskClass:
    """unzip, tar: listing or testing an archive looks; extracting or making one writes."""
    args = call.args
    lists = {"-l", "-v", "-t", "-Z", "--list", "--test"} & set(args)
    tar_lists = bool(args) and re.match(r"^-?[a-zA-Z]*t[a-zA-Z]*$", args[0]) is not None
    return READ if lists or (tar_lists and "x" not in args[0] and "c" not in args[0]) else WRITE


def _sql(call: Call) -> RiskClass:
    """sqlite3, psql, mysql: the SQL it is given is read for what it does; none: unknown."""
    args = call.args
    code = [a for i, a in enumerate(args) if args[i - 1 : i] in (["-c"], ["-e"], ["--command"])]
    if call.args[:1] and not code:
        code = _positional(args)[1:]  # sqlite3 DB "SQL"
    sql = "\n".join(code + call.fed)
    return code_risk(sql) if sql.strip() else WRITE


def _apt(call: Call) -> RiskClass:
    sub, _ = _subcommand(call.args)
    return READ if sub in _INSTALLER_READS or not sub else WRITE


def _shell(call: Call) -> RiskClass:
    """``bash -c "..."`` is the command it runs; ``bash script.sh`` a script."""
    args = call.args
    for i, arg in enumerate(args):
        if re.match(r"^-[a-zA-Z]*c[a-zA-Z]*$", arg):
            return call.command(args[i + 1] if i + 1 < len(args) else "")
        if not arg.startswith("-"):
            return script(arg, args[i + 1 :])
    return _fed(call)


def _always(risk: RiskClass) -> Callable[[Call], RiskClass]:
    return lambda _call: risk


HANDLERS: Final[Mapping[str, Callable[[Call], RiskClass]]] = {
    **dict.fromkeys(("sed", "gsed"), _sed),
    "perl": lambda call: _inline(call, "-e", "-E"),
    "ruby": lambda call: _inline(call, "-e"),
    "node": lambda call: _inline(call, "--eval", "-e", "-p", "--print"),
    **dict.fromkeys(("python", "pypy", "ipython"), _python),
    "git": _git,
    **dict.fromkeys(
        ("pip", "uv", "conda", "mamba", "poetry", "pipenv", "npm", "yarn", "pnpm", "gem", "brew"),
        _installer,
    ),
    **dict.fromkeys(("apt", "apt-get", "yum", "dnf", "apk"), _apt),
    **dict.fromkeys(("cargo", "go", "mvn", "gradle"), _build),
    "make": _make,
    **dict.fromkeys(("black", "isort", "ruff", "autopep8", "yapf", "prettier"), _formatter),
    "tee": _tee,
    "find": _find,
    "sort": _sort,
    **dict.fromkeys(("awk", "gawk"), _awk),
    "curl": _curl,
    "wget": _wget,
    **dict.fromkeys(
        ("gh", "hub", "kubectl", "terraform", "helm", "aws", "gcloud", "az"), _remote_tool
    ),
    "rsync": _rsync,
    **dict.fromkeys(("unzip", "tar"), _archive),
    **dict.fromkeys(("sqlite3", "psql", "mysql"), _sql),
    **dict.fromkeys(("docker", "podman"), _docker),
    "twine": lambda call: EXTERNAL if call.args[:1] == ["upload"] else READ,
    **dict.fromkeys(("ssh", "scp", "sftp", "mail", "sendmail"), _always(EXTERNAL)),
    # SWE-agent's editor: ``view`` looks; its other commands edit.
    "str_replace_editor": lambda call: READ if call.args[:1] == ["view"] else WRITE,
    **dict.fromkeys(("bash", "sh", "zsh", "dash"), _shell),
}
