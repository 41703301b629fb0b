"""shell_risk: what a shell command of a coding agent may change, judged on real commands.

The tables hold commands that real agents ran, copied from public trajectories:

- ``MINI``: mini-SWE-agent runs on SWE-bench Verified (a Gemini 3 Pro run), committed in
  github.com/gruckion/mini-swe-agent at d12a71affd95403b036b2bdbd827349b77bfffb9 under
  ``swebench_results/20251118_gemini-3-pro-74pct/trajs/<instance>/<instance>.traj.json``
  (each row names its instance); mini-swe-agent is MIT-licensed;
- ``SWE_AGENT``: SWE-agent's own trajectories, committed in github.com/SWE-agent/SWE-agent
  at 3ea751c087f32b16e039a2233dd6eefecef325d5 under ``trajectories/demonstrations/`` and
  ``tests/test_data/trajectories/`` (each row names its file); SWE-agent is MIT-licensed.

Each expected class was decided by reading the command, not by running the classifier.
The properties at the end hold for every command: composing never lowers a class, a
redirect to a file writes and one to ``/dev/null`` does not, wrappers change nothing.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker import shell_risk, shell_risk_of
from toolbreaker.errors import PolicyError

R, W, X = "read", "reversible_write", "irreversible"

#: (instance, command, class) from the mini-SWE-agent trajectories (see the module).
MINI = [
    ("sphinx-doc__sphinx-8475", "cat sphinx/builders/linkcheck.py", R),
    ("pytest-dev__pytest-5787", "cat -A src/_pytest/reports.py | head -n 230 | tail -n 10", R),
    (
        "django__django-11141",
        'nl -ba django/db/migrations/questioner.py | grep -C 10 "__file__"',
        R,
    ),
    (
        "scikit-learn__scikit-learn-11310",
        "nl -ba sklearn/model_selection/_search.py | sed -n '766,773p'",
        R,
    ),
    ("django__django-13569", "sed -n '125,150p' django/db/models/sql/compiler.py", R),
    (
        "scikit-learn__scikit-learn-10908",
        'grep -n "def _check_vocabulary" sklearn/feature_extraction/text.py',
        R,
    ),
    (
        "scikit-learn__scikit-learn-14629",
        'grep -r "MultiOutputClassifier" sklearn | grep "test" | cut -d: -f1 | sort | uniq',
        R,
    ),
    ("django__django-12193", "head -n 152 django/contrib/postgres/forms/array.py | tail -n 10", R),
    ("django__django-11749", 'ls -R django/core/management | grep ":$" | head -n 5', R),
    ("django__django-12308", "find django -name utils.py | grep admin", R),
    ("django__django-13343", 'find django -name "*.py" | xargs grep -l "class FileField"', R),
    ("django__django-13033", "wc -l tests/ordering/tests.py", R),
    ("sympy__sympy-13031", "git status", R),
    ("sympy__sympy-14976", "git diff", R),
    ("sympy__sympy-13031", "git show 2dff3502e99437c7b25720afb4f9bf7700329672", R),
    ("sphinx-doc__sphinx-8593", "pip list | grep sphinx", R),
    ("django__django-14376", "pip freeze | grep -i mysql", R),
    ("sphinx-doc__sphinx-9281", "which python", R),
    ("matplotlib__matplotlib-21568", 'which latex || echo "latex not found"', R),
    ("pytest-dev__pytest-5809", "curl -I https://bpaste.net", R),
    ("sphinx-doc__sphinx-10673", "tox --version", R),
    ("sphinx-doc__sphinx-8120", "msgfmt --version", R),
    ("django__django-15380", "export PYTHONPATH=$PYTHONPATH:.", R),
    ("django__django-12754", 'sqlite3 reproduce_issue/db.sqlite3 "PRAGMA table_info(myapp_c)"', R),
    ("sphinx-doc__sphinx-8721", "unzip -l reproduce_issue/build/epub/ReproduceIssue.epub", R),
    # Test runners and linters look (the module of shell_risk says why).
    ("sphinx-doc__sphinx-9258", "pytest tests/test_domain_py.py", R),
    ("pydata__xarray-6938", "pytest xarray/tests/test_dataset.py -k swap_dims", R),
    ("pytest-dev__pytest-7236", 'echo "c" | pytest -s --pdb verify_fail.py', R),
    ("sympy__sympy-21612", "/usr/bin/python3 -m pytest sympy/parsing/tests/test_latex.py", R),
    (
        "astropy__astropy-8707",
        (
            'PYTHONWARNINGS="ignore::pytest.PytestRemovedIn8Warning" pytest astropy/io/fi'
            "ts/tests/test_header.py"
        ),
        R,
    ),
    ("pytest-dev__pytest-7982", "timeout 5s python3 -m pytest reproduce_issue/loop_test", R),
    ("django__django-12325", "./tests/runtests.py model_inheritance", R),
    ("django__django-15098", "PYTHONPATH=. python3 tests/runtests.py i18n", R),
    ("django__django-15987", "cd tests && python3 runtests.py fixtures", R),
    ("sympy__sympy-13372", "bin/test sympy/core/tests/test_evalf.py", R),
    ("pylint-dev__pylint-6528", "cd reproduction && pylint --recursive=y --ignore=a .", R),
    ("pylint-dev__pylint-8898", "pylint --bad-names-rgxs='\"(foo{1,3})\"' foo.py", R),
    # Inline code is read for what it does.
    ("pydata__xarray-4695", 'python -c "import xarray; print(xarray.__file__)"', R),
    ("django__django-13590", "python3 -c \"print('hello')\"", R),
    (
        "django__django-14771",
        'python3 -X int_max_str_digits=1000 -c "import sys; print(sys.get_int_max_str_digits())"',
        R,
    ),
    (
        "pylint-dev__pylint-6528",
        "cd reproduction && python3 -c \"import os; print(list(os.walk('.')))\"",
        R,
    ),
    # Comments are no commands.
    (
        "sphinx-doc__sphinx-9461",
        (
            "# Find line number for get_real_modname\n"
            'grep -n "def get_real_modname" sphinx/ext/autodoc/__init__.py'
        ),
        R,
    ),
    # Writes: edits, files made, moved and removed, installs, the index.
    ("pydata__xarray-6599", "sed -i '/DEBUG:/d' xarray/core/computation.py", W),
    (
        "sympy__sympy-23534",
        (
            "sed -i '794s/symbols(name, \\*\\*args)/symbols(name, cls=cls, \\*\\*args)/' "
            "sympy/core/symbol.py"
        ),
        W,
    ),
    (
        "sphinx-doc__sphinx-8551",
        (
            "cat <<'EOF' > reproduction/conf.py\n"
            "extensions = ['sphinx.ext.autodoc']\n"
            "source_suffix = '.rst'\n"
            "master_doc = 'index'\n"
            "EOF"
        ),
        W,
    ),
    (
        "sphinx-doc__sphinx-9673",
        (
            "cat <<'EOF' >> reproduce_issue/index.rst\n"
            "\n"
            ".. autofunction:: example_manual_param.my_function_manual_param\n"
            "EOF"
        ),
        W,
    ),
    (
        "pytest-dev__pytest-7982",
        (
            "mkdir -p reproduce_issue/should_be_ignored\n"
            "cat <<'EOF' > reproduce_issue/should_be_ignored/test_ignored.py\n"
            "def test_ignored():\n"
            "    assert True\n"
            "EOF"
        ),
        W,
    ),
    (
        "django__django-14349",
        (
            "ed -s django/core/validators.py <<EOF\n"
            "114a\n"
            "                if any(x in value for x in ('\\n', '\\r', '\\t')):\n"
            "                    raise e\n"
            ".\n"
            "w\n"
            "EOF"
        ),
        W,
    ),
    (
        "django__django-14349",
        (
            "printf \"114a\\n                if any(x in value for x in ('\\\\\\\\n', '"
            "\\\\\\\\r', '\\\\\\\\t')):\\n                    raise e\\n.\\nw\\n\" | ed"
            " -s django/core/validators.py"
        ),
        W,
    ),
    (
        "sphinx-doc__sphinx-10466",
        'printf "..." > setup_repro_include.py && python3 setup_repro_include.py',
        W,
    ),
    (
        "django__django-15957",
        (
            "patch django/db/models/fields/related_descriptors.py django/db/models/fields"
            "/related_descriptors.py.patch"
        ),
        W,
    ),
    ("pylint-dev__pylint-8898", "cp pylint/utils/utils.py pylint/utils/utils.py.bak", W),
    ("psf__requests-6028", "mv requests/utils.py.bak requests/utils.py", W),
    ("django__django-14855", "rm -rf reproduce_app", W),
    ("pylint-dev__pylint-4661", "rmdir /root/.pylint.d", W),
    ("django__django-15569", "touch tests/schema/tests.py", W),
    ("pytest-dev__pytest-7982", "ln -s ../real_dir reproduce_issue/test_root/symlink_dir", W),
    ("pytest-dev__pytest-10356", "sort -o AUTHORS AUTHORS", W),
    ("django__django-16100", 'find . -name "*.pyc" -delete', W),
    ("sphinx-doc__sphinx-9229", 'find . -name "__pycache__" -type d -exec rm -rf {} +', W),
    ("sphinx-doc__sphinx-10449", "git checkout sphinx/ext/autodoc/typehints.py", W),
    (
        "sphinx-doc__sphinx-8056",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached",
        W,
    ),
    ("psf__requests-5414", "pip install pytest-httpbin", W),
    ("pytest-dev__pytest-5787", "pip install -e . && pip install pytest-xdist==1.34.0", W),
    ("matplotlib__matplotlib-21568", "apt-get update && apt-get install -y dvipng", W),
    ("pytest-dev__pytest-5809", "pytest test_dummy.py > pytest_output.txt 2>&1", W),
    (
        "django__django-13809",
        (
            "timeout 5s env PYTHONPATH=. python reproduction/manage.py runserver > output"
            "_normal.txt 2>&1 || true"
        ),
        W,
    ),
    # Scripts and programs it does not know may change anything.
    ("django__django-12209", "python reproduce_issue.py", W),
    ("django__django-13512", "PYTHONIOENCODING=utf-8 PYTHONPATH=. python3 reproduce_issue.py", W),
    ("sympy__sympy-13878", "time python3 debug_uniformsum_2.py", W),
    ("pytest-dev__pytest-6197", "./reproduce_issue.sh", W),
    ("sphinx-doc__sphinx-11445", "bash reproduce_issue.sh", W),
    (
        "sphinx-doc__sphinx-9602",
        "sphinx-build -n -W -b html reproduction reproduction/_build_fixed",
        W,
    ),
    ("django__django-13837", "timeout 5s python3 -m mypkg runserver", W),
    (
        "sympy__sympy-19637",
        (
            "bin/test sympy/core/tests/test_sympify.py && python reproduce_issue.py && py"
            "thon test_kernS_functionality.py"
        ),
        W,
    ),
]

#: (file, action, class) from SWE-agent's own trajectories (see the module).
SWE_AGENT = [
    ("marshmallow-code__marshmallow-1867.traj", 'find_file "fields.py" src', R),
    ("marshmallow-code__marshmallow-1867.traj", 'open "src/marshmallow/fields.py" 1474', R),
    ("pydicom__pydicom-1458.traj", "open pydicom/pixel_data_handlers/numpy_handler.py 293\n", R),
    ("marshmallow-code__marshmallow-1867.traj", "ls -F\n", R),
    ("i_got_id_demo.traj", "curl http://web.chal.csaw.io:8000/cgi-bin/forms.pl\n", R),
    ("katy.traj", "file release\n", R),
    ("marshmallow-code__marshmallow-1867.traj", "create reproduce.py\n", W),
    (
        "swe-agent__test-repo-i1.traj",
        "edit 4:4\ndef division(a: float, b: float) -> float:\nend_of_edit\n",
        W,
    ),
    (
        "humanevalfix-python-0.traj",
        "edit 15:15\n                distance = abs(elem - elem2)\nend_of_edit\n",
        W,
    ),
    ("marshmallow-code__marshmallow-1867.traj", "pip install -e .[dev]", W),
    ("BabyEncryption.traj", "submit 'HTB{l00k_47_y0u_r3v3rs1ng_3qu4710n5_c0ngr475}'\n", W),
    (
        "i_got_id_demo.traj",
        'curl -X POST -d "name=test&age=123" http://web.chal.csaw.io:8000/cgi-bin/forms.pl\n',
        X,
    ),
    (
        "i_got_id_demo.traj",
        'curl -X POST -F "file=@printenv.pl" http://web.chal.csaw.io:8000/cgi-bin/file.pl\n',
        X,
    ),
]


@pytest.mark.parametrize(("instance", "command", "expected"), MINI, ids=[r[0] for r in MINI])
def test_commands_of_a_coding_agent(instance, command, expected):
    """Each command of a real mini-SWE-agent run gets the class read off the command."""
    assert shell_risk(command) == expected


@pytest.mark.parametrize(
    ("source", "command", "expected"), SWE_AGENT, ids=[r[0] for r in SWE_AGENT]
)
def test_commands_of_swe_agent(source, command, expected):
    """SWE-agent's own tools (open, find_file, edit blocks, submit) are known."""
    assert shell_risk(command) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls -la 2>&1 | head", R),
        ("grep -rn foo . 2>/dev/null", R),
        ("grep -rn foo . > found.txt", W),
        ("echo x >&2", R),
        ("cat a >& out.txt", W),
        ("cat <<'EOF'\nrm -rf build\nEOF", R),  # a here-document's lines are no commands
        ("python - <<EOF\nprint(1)\nEOF", R),
        ("python - <<EOF\nimport shutil; shutil.rmtree('build')\nEOF", W),
        ("python -c \"open('out.txt', 'w').write('x')\"", W),
        ("python -c \"print(open('setup.py').read())\"", R),
        ('echo "$(rm x)"', W),
        ("ls `rm x`", W),
        ("echo 'a # b' > /dev/null", R),
        ("echo a # && rm -rf /", R),
        ('bash -c "rm -rf build"', W),
        ('bash -lc "git status"', R),
        ("for f in *.py; do sed -i 's/a/b/' $f; done", W),
        ("if [ -f x ]; then cat x; fi", R),
        ("sed -e 's/i/x/' f.py", R),
        ("sed -Ei 's/a/b/' f.py", W),
        ("sed --in-place=.bak 's/a/b/' f.py", W),
        ("perl -ne 'print if /x/' f", R),
        ("perl -pi -e 's/a/b/' f", W),
        ("awk -i inplace '{print}' f", W),
        ("tee /dev/null", R),
        ("git log --oneline | head -n 3", R),
        ("git -C repo stash list", R),
        ("git branch", R),
        ("git branch -D old", W),
        ("git reset --hard HEAD~1", W),
        ("git apply fix.patch", W),
        ("git commit -am fix", W),
        ("git push origin main", X),
        ("ruff check .", R),
        ("ruff check --fix .", W),
        ("black --check .", R),
        ("black .", W),
        ("make test", R),
        ("make", W),
        ("python manage.py test app", R),
        ("python manage.py migrate", W),
        ("npm test", R),
        ("npm install", W),
        ("npm publish", X),
        ("wget -qO- https://example.org", R),
        ("wget https://example.org/a.tgz", W),
        ("gh pr view 3", R),
        ("gh pr create --fill", X),
        ("ssh host uptime", X),
        ("rsync -a build/ host:/srv/site", X),
        ("rsync -a build/ /tmp/site", W),
        ("tar tzf a.tgz", R),
        ("tar xzf a.tgz", W),
        ('echo "unclosed', W),  # cannot be parsed: unknown, so a write
        ("", R),
    ],
)
def test_the_rules(command, expected):
    """Redirects, here-documents, substitutions, comments, wrappers and programs whose
    arguments decide (sed, git, make, package managers, formatters, remote tools)."""
    assert shell_risk(command) == expected


def test_a_table_adds_or_overrides_programs():
    """``programs`` names what the built-in table does not know, or judges otherwise."""
    assert shell_risk("deploy --prod") == W
    assert shell_risk("deploy --prod", programs={"deploy": "irreversible"}) == X
    assert shell_risk("make lint && deploy", programs={"deploy": "read"}) == R


def test_bad_input_is_a_typed_error():
    """A command that is no text, or a table naming an unknown class: PolicyError."""
    with pytest.raises(PolicyError, match="must be text"):
        shell_risk(["ls"])  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match=r"programs\.deploy"):
        shell_risk("deploy", programs={"deploy": "dangerous"})  # type: ignore[dict-item]


def test_shell_risk_of_reads_the_command_argument():
    """A tool's risk function: the class of each call's command; a list of words is the
    line they make; a call without a command is refused with a typed error."""
    risk = shell_risk_of("command")
    assert risk({"command": "cat a.py"}) == R
    assert risk({"command": ["sed", "-i", "s/a/b/", "f.py"]}) == W
    assert shell_risk_of("cmd", programs={"deploy": "irreversible"})({"cmd": "deploy"}) == X
    with pytest.raises(PolicyError, match="no shell command in 'command'"):
        risk({"script": "ls"})


# -- properties ---------------------------------------------------------------------------

_RANK = {R: 0, W: 1, X: 2}
ALL = [command for _, command, _ in MINI + SWE_AGENT]
#: One-line commands (no here-document), which compose with && and | as they are.
SIMPLE = [c for c in ALL if "\n" not in c.strip() and "<<" not in c and "#" not in c]
commands = st.sampled_from(SIMPLE)


@given(a=commands, b=commands, joiner=st.sampled_from([" && ", " || ", " ; ", " | ", "\n"]))
def test_property_composing_never_lowers_a_class(a, b, joiner):
    """A chain, a pipeline or a sequence has the highest class of its parts."""
    joined = shell_risk(a.strip() + joiner + b.strip())
    assert joined == max(shell_risk(a), shell_risk(b), key=_RANK.__getitem__)


@given(command=commands, sink=st.sampled_from(["2>&1", "> /dev/null", "2>/dev/null", ">&2"]))
def test_property_output_to_nowhere_changes_nothing(command, sink):
    """Redirecting to /dev/null or between descriptors writes no file."""
    assert shell_risk(f"{command.strip()} {sink}") == shell_risk(command)


@given(command=commands, target=st.sampled_from(["> out.txt", ">> log.txt", "&> all.log"]))
def test_property_output_to_a_file_is_at_least_a_write(command, target):
    """Output sent to a file writes it (an irreversible command stays irreversible)."""
    found = shell_risk(f"{command.strip()} {target}")
    assert found == (X if shell_risk(command) == X else W)


@given(
    command=commands,
    wrapper=st.sampled_from(["timeout 30 ", "env LANG=C ", "time ", "nice -n 5 ", "A=1 B=2 "]),
)
def test_property_wrappers_and_assignments_change_nothing(command, wrapper):
    """``timeout``, ``env``, ``time``, ``nice`` and variable assignments run the command."""
    assert shell_risk(wrapper + command.strip()) == shell_risk(command)


@given(command=commands)
def test_property_bash_c_is_the_command_it_runs(command):
    """``bash -c '<command>'`` has the class of the command."""
    assert shell_risk(f"bash -c {shlex.quote(command.strip())}") == shell_risk(command)


@given(text=st.text(max_size=200))
def test_property_any_text_gets_a_class(text):
    """Whatever the text (quotes left open, stray operators, binary junk), a class and
    never an exception; the same text always gets the same class."""
    found = shell_risk(text)
    assert found in _RANK
    assert shell_risk(text) == found
