"""What a shell command may change: the risk class of one call of a generic ``bash`` tool.

Coding agents call one generic tool: every ``cat``, ``sed -i``, ``pytest`` and ``git commit``
is a ``bash`` call. Its risk class is a property of the command, not of the tool, so the
tool's ``risk=`` is a function of its arguments (:func:`shell_risk_of`) and each call is
judged by :func:`shell_risk`. Pure: the command is parsed (``shlex``, quote-aware; comments,
line continuations and here-documents handled), never run.

The rule
--------
A command is split into simple commands at ``;``, ``&&``, ``||``, ``|``, ``&``, new lines
and parentheses (subshells and ``$(...)``); the command's class is the highest of its
parts' (``read`` < ``reversible_write`` < ``irreversible``). A part is:

- ``reversible_write`` when it redirects output to a file (``>``, ``>>``, ``&>``, ``>|``;
  not ``2>&1`` or ``>/dev/null``), or its program changes local state: ``sed -i``,
  ``perl -i``, ``tee FILE``, ``rm``, ``mv``, ``cp``, ``mkdir``, ``touch``, ``patch``,
  editors (``ed``), ``git commit|checkout|apply|reset|stash|add ...``, ``pip install``,
  ``make``, ``find -delete`` ...;
- ``irreversible`` when it reaches outside the machine with an effect: ``git push``,
  ``curl -X POST`` (or with data), ``gh pr create``, ``npm publish``, ``twine upload``,
  ``docker push``, ``ssh``, ``scp``, ``kubectl apply``, ``terraform apply`` ... (an
  irreversible call needs the tool's authority check, as any irreversible call does);
- ``read`` for programs that only look: ``cat``, ``grep``, ``ls``, ``find``, ``head``,
  ``tail``, ``sed -n``, ``git diff|log|status|show``, ``pip list`` ..., and for test
  runners and linters (below).

Decisions, and why:

- **Test runners are reads** (``pytest``, ``python -m pytest``, ``tox``, ``runtests.py``,
  ``bin/test``, ``manage.py test``, ``go test``, ``cargo test``, ``npm test``,
  ``make test``). They write caches (``.pytest_cache``, ``__pycache__``), not the state
  the agent reasons about. Counting them as writes would make every rerun new evidence
  and hide the loop a run guard is for: the same test run again and again with nothing
  changed in between. An edit between two runs is a write, so it is new evidence and the
  rerun is iteration (:mod:`toolbreaker.core._run.limits`).
- **Programs it does not know, and scripts, are writes** (``python script.py``,
  ``bash script.sh``, ``./build``, ``sphinx-build``, ``python -m mypkg``): a script may do
  anything, and the cautious answer for a run guard is that it may change the state.
  ``python -c CODE`` and a here-document fed to ``python`` are read for what they do:
  a write when the code opens a file for writing, removes, moves or makes files or
  directories (``os.remove``, ``shutil``, ``Path.write_text``...), runs other commands
  (``subprocess``, ``os.system``) or saves (``json.dump``, ``.save(``, SQL that changes
  rows); else a read (``python -c "import x; print(x.__file__)"``).
- **A command it cannot parse is a write** (an unclosed quote): what it would do is
  unknown.
- The default tools of the SWE-agent harness are known (``open``, ``goto``,
  ``scroll_up``, ``scroll_down``, ``search_dir``, ``search_file``, ``find_file``,
  ``filemap`` read; ``edit``, ``insert``, ``append``, ``create``, ``submit`` write;
  ``str_replace_editor view`` reads, its other commands write).

``programs`` (a mapping of program names to classes) adds to or overrides the table for
a command's program: ``shell_risk(command, programs={"deploy": "irreversible"})``.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from toolbreaker.core._run._programs import (
    HANDLERS,
    READ,
    READS,
    SINKS,
    TEST_SCRIPT,
    WRITE,
    WRITES,
    Call,
    highest,
)
from toolbreaker.core._run._values import RISK_CLASSES, RiskClass
from toolbreaker.errors import PolicyError

__all__ = ["shell_risk", "shell_risk_of"]

#: Programs that wrap another command: the command they run is what counts.
_WRAPPERS: Final = frozenset(
    {"sudo", "env", "timeout", "time", "nice", "nohup", "exec", "builtin", "stdbuf", "xargs"}
)
#: Words that open or close a compound command; the command follows them.
_KEYWORDS: Final = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "esac"}
)
#: Compound-command headers that run nothing themselves.
_HEADERS: Final = frozenset({"for", "case", "select", "function", "in"})
_SEPARATORS: Final = frozenset({";", ";;", "&&", "||", "|", "|&", "&", "\n", "(", ")"})
#: A token made of these alone separates commands (``;\n``, ``)\n\n``).
_PUNCTUATION: Final = ";&|()\n"
_OUTPUT: Final = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
_INPUT: Final = frozenset({"<", "<<", "<<<", "<&"})
#: Options that ask a program about itself.
_ASKS: Final = frozenset({"--version", "-V", "--help", "-h", "-help", "version"})
_ASSIGNMENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_HEREDOC: Final = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;|&<>()]+))")
_BLOCK: Final = re.compile(
    r"^((?:edit|insert|append|create)\b[^\n]*)\n.*?^end_of_edit[ \t]*$", re.M | re.S
)
_BODY: Final = "__toolbreaker_heredoc_"

# -- the command, prepared for shlex -----------------------------------------------------------


def _prepare(command: str) -> tuple[str, list[str], list[str]]:
    """The command without comments, line continuations and here-document bodies.

    Each here-document (``<<EOF`` ... ``EOF``) is replaced by a marker word naming its
    body, and the bodies are returned in order: ``cat <<EOF > f.py`` stays a redirect to
    ``f.py``, and the lines of its body are never read as commands. Commands substituted
    inside double quotes or backquotes (``"$(rm x)"``, `` `rm x` ``) are taken out and
    returned too (unquoted ``$(...)`` is split at its parentheses like a subshell).
    """
    scan = _Scan(_BLOCK.sub(r"\1", command))  # SWE-agent's edit blocks: bodies too
    while scan.i < len(scan.text):
        scan.step()
    return "".join(scan.out), scan.bodies, scan.substituted


@dataclasses.dataclass(slots=True)
class _Scan:
    """A quote-aware pass over a command (:func:`_prepare`), one character or span a step."""

    text: str
    i: int = 0
    quote: str = ""
    prev: str = "\n"
    out: list[str] = dataclasses.field(default_factory=list)
    bodies: list[str] = dataclasses.field(default_factory=list)
    substituted: list[str] = dataclasses.field(default_factory=list)
    pending: list[tuple[str, bool, int]] = dataclasses.field(default_factory=list)

    def step(self) -> None:
        text, i = self.text, self.i
        c = text[i]
        if self.quote == "'":
            self.quote = "" if c == "'" else self.quote
            self.keep(c)
        elif c == "\\" and i + 1 < len(text):
            self.escape()
        elif c == "`" or (self.quote == '"' and text.startswith("$(", i)):
            end = _closing(text, i)
            self.substituted.append(text[i + (1 if c == "`" else 2) : end])
            self.i = end + 1
        elif self.quote == '"':
            self.quote = "" if c == '"' else self.quote
            self.keep(c)
        elif c == "#" and self.prev in " \t\n;|&()":
            end = text.find("\n", i)
            self.i = len(text) if end < 0 else end  # a comment: to the end of the line
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            self.heredoc()
        elif c == "\n" and self.pending:
            self.keep(c)
            self.i = _bodies(text, self.i, self.pending, self.bodies)
            self.pending = []
        else:
            self.quote = c if c in "'\"" else ""
            self.keep(c)

    def keep(self, c: str) -> None:
        self.out.append(c)
        self.prev = c
        self.i += 1

    def escape(self) -> None:
        if self.text[self.i + 1] != "\n":  # else a line continuation: dropped
            self.out.append(self.text[self.i : self.i + 2])
            self.prev = self.text[self.i + 1]
        self.i += 2

    def heredoc(self) -> None:
        found = _HEREDOC.match(self.text, self.i)
        if found is None:
            self.keep(self.text[self.i])
            return
        delimiter = found.group(2) or found.group(3) or found.group(4) or ""
        self.pending.append((delimiter, bool(found.group(1)), len(self.bodies)))
        self.bodies.append("")
        self.out.append(f" << {_BODY}{len(self.bodies) - 1} ")
        self.prev = " "
        self.i = found.end()


def _closing(command: str, i: int) -> int:
    """Where the substitution opening at ``i`` (a backquote or ``$(``) closes."""
    if command[i] == "`":
        found = re.compile(r"(?<!\\)`").search(command, i + 1)
        return len(command) if found is None else found.start()
    depth = 0
    for j in range(i + 1, len(command)):
        depth += {"(": 1, ")": -1}.get(command[j], 0)
        if depth == 0:
            return j
    return len(command)


def _bodies(command: str, i: int, pending: list[tuple[str, bool, int]], bodies: list[str]) -> int:
    """Read the bodies of the pending here-documents from ``i``; where the command goes on."""
    n = len(command)
    for delimiter, strip_tabs, index in pending:
        lines = []
        while i < n:
            end = command.find("\n", i)
            line = command[i : n if end < 0 else end]
            i = n if end < 0 else end + 1
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                break
            lines.append(line)
        bodies[index] = "\n".join(lines)
    return i


def _tokens(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""  # comments were removed, quote-aware, by _prepare
    return list(lexer)


def _parts(tokens: Sequence[str]) -> Iterator[list[str]]:
    part: list[str] = []
    for token in tokens:
        if token in _SEPARATORS or not token.strip(_PUNCTUATION):
            if part:
                yield part
            part = []
        else:
            part.append(token)
    if part:
        yield part


# -- one simple command ------------------------------------------------------------------------


def _simple(part: list[str], bodies: Sequence[str], programs: Mapping[str, RiskClass]) -> RiskClass:
    """The class of one simple command: its redirections, then its program."""
    words: list[str] = []
    fed: list[str] = []  # here-documents fed to it
    risk = READ
    j = 0
    while j < len(part):
        word = part[j]
        target = part[j + 1] if j + 1 < len(part) else ""
        if (word in _OUTPUT or word in _INPUT) and words and words[-1].isdigit():
            words.pop()  # the descriptor of ``2>&1``, not an argument
        if word in _OUTPUT:
            j += 2
            duplicate = word == ">&" and (target.isdigit() or target == "-")
            if not duplicate and target not in SINKS and not target.startswith("/dev/fd/"):
                risk = WRITE
            continue
        if word in _INPUT:
            j += 2
            if word == "<<" and target.startswith(_BODY):
                fed.append(bodies[int(target[len(_BODY) :])])
            continue
        if word == "<>":
            risk = WRITE  # opened for reading and writing
            j += 2
            continue
        words.append(word)
        j += 1
    return highest(risk, _program(words, fed, programs))


def _program(words: list[str], fed: list[str], programs: Mapping[str, RiskClass]) -> RiskClass:
    """The class of a command's program with its arguments."""
    while words and (words[0] in _KEYWORDS or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words or words[0] in _HEADERS:
        return READ
    name = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    if words[0] in programs:
        return programs[words[0]]
    if name in programs:
        return programs[name]
    if name in _WRAPPERS:
        return _program(_unwrapped(name, args), fed, programs)
    if args and all(a in _ASKS for a in args):
        return READ  # msgfmt --version, psql --help: any program only asked about itself
    handler = HANDLERS.get(name) or HANDLERS.get(re.sub(r"[\d.]+$", "", name))
    if handler is not None:
        return handler(
            Call(
                args,
                fed,
                lambda command: _program(command, fed, programs),
                lambda line: _command(line, programs),
            )
        )
    if name in READS:
        return READ
    if name in WRITES:
        return WRITE
    if TEST_SCRIPT.match(name):
        return READ  # a project's test runner (runtests.py, bin/test)
    return WRITE  # a program or script it does not know: it may change anything


#: Options of the wrappers that take a value (``timeout -s KILL``, ``xargs -I {}``).
_WRAPPER_VALUES: Final = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}),
    "env": frozenset({"-u", "-C", "-S"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "nice": frozenset({"-n"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "xargs": frozenset({"-I", "-n", "-P", "-d", "-a", "-L", "-s", "-E", "-e", "-i"}),
}


def _unwrapped(name: str, args: list[str]) -> list[str]:
    """The command a wrapper runs: its own options (and ``timeout``'s duration) skipped."""
    values = _WRAPPER_VALUES.get(name, frozenset())
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg in values:
            i += 2
        elif (arg.startswith("-") and arg != "-") or (name == "env" and _ASSIGNMENT.match(arg)):
            i += 1
        else:
            break
    rest = args[i:]
    if name == "timeout" and rest:
        rest = rest[1:]  # the duration
    return rest


# -- the public helpers ------------------------------------------------------------------------


def _command(command: str, programs: Mapping[str, RiskClass]) -> RiskClass:
    text, bodies, substituted = _prepare(command)
    try:
        tokens = _tokens(text)
    except ValueError:
        return WRITE  # an unclosed quote: what it would run is unknown
    inner = (_command(code, programs) for code in substituted)
    return highest(*(_simple(part, bodies, programs) for part in _parts(tokens)), *inner)


def shell_risk(command: str, *, programs: Mapping[str, RiskClass] | None = None) -> RiskClass:
    """The risk class of a shell command: ``read``, ``reversible_write`` or ``irreversible``.

    Pure: the command is parsed, never run (see the module for the rule and why).

    Args:
        command: the command line, as a shell tool receives it (several lines, pipes,
            ``&&`` chains and here-documents included).
        programs: program names mapped to their class, added to (or overriding) the
            built-in table: ``{"deploy": "irreversible", "lint": "read"}``.

    Raises:
        PolicyError: ``command`` is no string, or ``programs`` names an unknown class.
    """
    if not isinstance(command, str):
        raise PolicyError(f"a shell command must be text, got {command!r}", field="command")
    return _command(command, _checked(programs))


def _checked(programs: Mapping[str, RiskClass] | None) -> Mapping[str, RiskClass]:
    if programs is None:
        return {}
    for name, risk in programs.items():
        if risk not in RISK_CLASSES:
            raise PolicyError(
                f"programs.{name} must be one of {', '.join(RISK_CLASSES)}, got {risk!r}",
                field=f"programs.{name}",
            )
    return dict(programs)


def shell_risk_of(
    argument: str = "command", *, programs: Mapping[str, RiskClass] | None = None
) -> Callable[[Mapping[str, Any]], RiskClass]:
    """A tool's ``risk=``: each call's class, from the shell command in ``argument``.

    ``guard.tool(risk=shell_risk_of("command"))`` on a ``bash(command)`` tool judges
    every call by its command (:func:`shell_risk`): ``cat`` reads, ``sed -i`` writes,
    ``git push`` is irreversible. A command given as a list of words (``["ls", "-la"]``)
    is judged as the line they make.

    Raises:
        PolicyError: ``programs`` names an unknown class (here, when the tool is
            described); at a call, the arguments have no command (the call is refused).
    """
    table = _checked(programs)

    def risk(args: Mapping[str, Any]) -> RiskClass:
        value = args.get(argument) if isinstance(args, Mapping) else None
        if isinstance(value, list) and all(isinstance(word, str) for word in value):
            value = shlex.join(value)
        if not isinstance(value, str):
            raise PolicyError(
                f"the call has no shell command in {argument!r} (got {type(value).__name__})",
                field=argument,
            )
        return _command(value, table)

    risk.__qualname__ = risk.__name__ = f"shell_risk_of({argument!r})"
    return risk
