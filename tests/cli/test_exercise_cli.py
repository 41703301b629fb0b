"""toolbreaker exercise: the table, --json, --junit, exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from toolbreaker.cli import main
from toolbreaker.testing import shipped_scenarios

SHIPPED = {p.stem: str(p) for p in shipped_scenarios()}
GUARDED = "toolbreaker.testing:scripted_agent"
NAKED = "toolbreaker.testing:unprotected_agent"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["exercise", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_guarded_agent_holds_and_exits_0(capsys):
    """Every promise held: one row per scenario, 'held' three times, exit 0."""
    code, out, err = run(capsys, SHIPPED["outage"], SHIPPED["reword"], "--agent", GUARDED)
    assert code == 0, out + err
    rows = out.splitlines()
    assert rows[0].split()[:4] == ["scenario", "before-damage", "understandable", "resumption"]
    assert rows[1].split()[:4] == ["outage", "held", "held", "held"]
    assert rows[2].split()[:4] == ["reword", "held", "held", "held"]
    assert "told catalog:read unavailable" in rows[1]
    assert out.rstrip().endswith("2 of 2 scenario(s) held every promise")


def test_an_unprotected_agent_fails_with_exit_1_and_says_why(capsys, tmp_path):
    """Promises that failed are FAILED in the table, with a line each saying why, exit 1;
    --junit writes one failing test case per broken promise."""
    junit = tmp_path / "exercise.xml"
    code, out, _ = run(
        capsys, SHIPPED["commit-then-timeout"], "--agent", NAKED, "--junit", str(junit)
    )
    assert code == 1
    assert "commit-then-timeout  FAILED         FAILED          FAILED" in out
    assert (
        "commit-then-timeout: before-damage: 0 attempt(s) after a breaker opened; 1 duplicate(s)"
        in out
    )
    assert "no stop packet" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "3"
    assert suite.get("failures") == "3"
    failures = [case.find("failure") for case in suite.iter("testcase")]
    assert all(f is not None for f in failures)
    assert "1 duplicate(s)" in failures[0].get("message")


def test_json_report(capsys):
    """--json prints the whole report: the promises, the counts at the service, the packet."""
    code, out, _ = run(capsys, SHIPPED["insist"], "--agent", GUARDED, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["schema"] == "toolbreaker.exercise/v1"
    (entry,) = report["scenarios"]
    assert entry["held"] is True
    assert entry["packet"]["condition"] == "repeated-action"
    (search,) = entry["targets"]
    assert search["target"] == "GET /search"
    assert search["after_open"] == 0


def test_untrusted_text_is_escaped_in_the_table(capsys, tmp_path):
    """A scenario name with a terminal escape is printed escaped; JSON keeps it exact."""
    path = tmp_path / "evil.toml"
    path.write_text(
        'name = "evil\\u001b[2J"\ntimeout = 0.3\n[faults.down]\nroute = "GET /orders"\n'
        'kind = "outage"\n',
        encoding="utf-8",
    )
    code, out, _ = run(capsys, str(path), "--agent", GUARDED)
    assert code == 0
    assert "\x1b" not in out
    assert "evil\\x1b[2J" in out


def test_a_fault_no_attempt_got_is_a_warning(capsys, tmp_path):
    """A misspelt route is never met: the promises hold vacuously, and a warning says so."""
    path = tmp_path / "typo.toml"
    path.write_text(
        'name = "typo"\ntimeout = 0.5\n[faults.down]\nroute = "GET /serch"\nkind = "outage"\n',
        encoding="utf-8",
    )
    code, out, _ = run(capsys, str(path), "--agent", GUARDED, "--json")
    assert code == 0
    assert json.loads(out)["scenarios"][0]["unmet_faults"] == ["down"]
    code, out, _ = run(capsys, str(path), "--agent", GUARDED)
    assert "warning: typo: no attempt got the fault down" in out


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[faults.a]\nroute = 'GET /search'\nkind = 'explode'\n", 3, "faults.a.kind"),
        ("name = 'x'\nwhat = 1\n", 2, "unknown scenario field"),
        ("[faults.a\n", 1, "invalid TOML"),
    ],
)
def test_a_bad_scenario_is_one_line_with_file_and_line_and_exit_2(
    capsys, tmp_path, text, line, words
):
    """Nothing runs: every file is checked first; the error names the file and line."""
    good = SHIPPED["outage"]
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, good, str(path), "--agent", GUARDED)
    assert code == 2
    assert out == ""
    assert err.startswith(f"error: {path}:{line}: ")
    assert words in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--agent", GUARDED], "needs a SCENARIO file or --shipped"),
        (["missing.toml", "--agent", GUARDED], "missing.toml: cannot read"),
        (["OUTAGE", "--agent", "no_colon"], "--agent must be MODULE:FUNCTION"),
        (["OUTAGE", "--agent", "no_such_module_xyz:run"], "no module named 'no_such_module_xyz'"),
        (["OUTAGE", "--agent", "toolbreaker.testing:nothing"], "has no function 'nothing'"),
        (["OUTAGE", "--agent", GUARDED, "--service", "ftp://x"], "--service must be an http"),
        (["OUTAGE", "--agent", GUARDED, "--junit", "/no/such/dir/x.xml"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    argv = [SHIPPED["outage"] if a == "OUTAGE" else a for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert words in err
    assert err.startswith("error: ")
    assert err.count("\n") == 1


def test_the_agent_is_imported_from_the_current_directory(capsys, tmp_path, monkeypatch):
    """module:function is found from where the command runs; a module that fails to
    import is one line."""
    (tmp_path / "exercise_cli_agent.py").write_text(
        "from toolbreaker.testing import scripted_agent as run\n", encoding="utf-8"
    )
    (tmp_path / "exercise_cli_broken.py").write_text("raise ImportError('boom')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    code, _, _ = run(capsys, SHIPPED["credential"], "--agent", "exercise_cli_agent:run")
    assert code == 0
    code, _, err = run(capsys, SHIPPED["credential"], "--agent", "exercise_cli_broken:run")
    assert code == 2
    assert "raised ImportError: boom" in err


def test_the_examples_command_exercises_the_refund_agent(capsys, monkeypatch):
    """The command docs/exercise.md gives for examples/exercise_refunds.py, run where it
    says: the guarded refund agent holds both of its own scenarios; the naive one fails."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    monkeypatch.chdir(examples)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(examples))])
    scenarios = sorted(str(p.relative_to(examples)) for p in examples.glob("scenarios/*.toml"))
    code, out, err = run(capsys, *scenarios, "--agent", "exercise_refunds:guarded")
    assert code == 0, out + err
    assert out.rstrip().endswith("2 of 2 scenario(s) held every promise")
    code, out, _ = run(capsys, *scenarios, "--agent", "exercise_refunds:naive")
    assert code == 1
    assert "refund-lost-answer: resumption: 3 completed write(s) repeated of 1 committed" in out


def test_the_pytest_fixture_passes_a_guarded_agent_and_fails_an_unprotected_one(tmp_path):
    """The plugin's fixture (pytest_plugins in a conftest): a test of the guarded agent
    passes, one of the unprotected agent fails naming the broken promises (a real
    pytest run)."""
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["toolbreaker.testing.pytest_plugin"]\n', encoding="utf-8"
    )
    tests = tmp_path / "test_mine.py"
    tests.write_text(
        textwrap.dedent(
            f"""
            from toolbreaker.testing._agents import scripted_agent, unprotected_agent

            SCENARIOS = [{SHIPPED["outage"]!r}]

            def test_guarded(toolbreaker_exercise):
                report = toolbreaker_exercise(scripted_agent, SCENARIOS)
                assert report.held

            def test_unprotected(toolbreaker_exercise):
                toolbreaker_exercise(unprotected_agent, SCENARIOS)
            """
        ),
        encoding="utf-8",
    )
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            str(tests),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "outage: understandable: no stop packet" in done.stdout
