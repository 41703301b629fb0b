"""A tool whose risk is a function of its arguments: one generic ``bash`` tool, each call
judged by its command (issue 33, item 4).

The tool is a real shell: every call runs ``bash -c`` in a temporary directory. Reads
(``cat``, ``pytest``-like checks) and writes (``sed -i``, redirects) of the one tool are
counted in their own classes, an edit between two identical checks is new evidence, the
same command after a change runs again, and an irreversible command needs the tool's
authority check.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from toolbreaker import Breaker, Budget, ClassLimits, GuardedTool, RunGuard, shell_risk_of
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._run._guard import ActionRequest
from toolbreaker.stores import MemoryStore


def bash_guard(
    workdir: Path, *, budget: Budget | None = None, authorize: Any = None
) -> tuple[RunGuard, list[str], Any]:
    """A guard with one ``bash`` tool whose calls are judged by their command; the commands
    the shell ran; the tool's function."""
    guard = RunGuard("fix-issue-42", budget=budget or Budget(), journal=MemoryStore())
    ran: list[str] = []

    def bash(command: str) -> dict[str, Any]:
        ran.append(command)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return {"exit": done.returncode, "output": done.stdout + done.stderr}

    guard.add_tool(
        GuardedTool(
            "bash", bash, risk=shell_risk_of("command"), idempotency_arg=None, authorize=authorize
        )
    )
    return guard, ran, bash


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return tmp_path


def test_each_call_is_counted_in_the_class_of_its_command(repo):
    """cat and grep are reads, sed -i and a redirect are writes: the class tallies of the
    one tool follow its calls, and the journal entry of a write names its class."""
    guard, _ran, _ = bash_guard(repo)
    guard.call("bash", {"command": "cat calc.py"})
    guard.call("bash", {"command": "grep -n 'return' calc.py"})
    guard.call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py"})
    guard.call("bash", {"command": "echo ok > notes.txt"})
    assert dict(guard.state.class_calls) == {
        "read": 2,
        "reversible_write": 2,
        "irreversible": 0,
    }
    assert "a + b" in (repo / "calc.py").read_text()
    entries = guard.journal.journal_entries("fix-issue-42")
    assert [entry["risk"] for entry in entries] == ["reversible_write", "reversible_write"]


def test_a_check_rerun_after_an_edit_is_iteration_not_a_repeat(repo):
    """The same check printing the same thing after each edit runs on: every edit is new
    evidence. The same check with nothing changed in between stops the run."""
    check = {"command": 'python3 -c "import calc; print(calc.add(1, 1) == 2)"'}
    budget = Budget(classes={"reversible_write": ClassLimits(max_calls=10, max_repeats=1)})
    guard, _, _ = bash_guard(repo, budget=budget)
    for n in range(5):
        guard.call("bash", check)  # prints False each time
        guard.call("bash", {"command": f"echo '# try {n}' >> calc.py"})
    assert guard.stopped is None
    for _ in range(4):
        guard.call("bash", check)  # the fourth is the third repeat: max_repeats=2
    packet = guard.stop_packet()
    assert packet.condition == "repeated-action"
    assert "repeated 3 times without new evidence" in packet.detail


def test_the_same_write_command_runs_again_each_time(repo):
    """A shell write is no business action to be made once: the same command runs again
    (appending twice appends twice), and comes back as a repeat when nothing changed in
    between but its own change."""
    guard, ran, bash = bash_guard(repo)
    first = guard.begin("bash", {"command": "echo x >> log.txt"})
    first.succeeded(bash(**first.args))
    second = guard.begin("bash", {"command": "echo x >> log.txt"})
    assert second.answer is None  # not answered from the journal: it runs
    second.succeeded(bash(**second.args))
    assert second.decision is not None
    assert second.decision.repeat == 1
    assert (repo / "log.txt").read_text() == "x\nx\n"
    assert ran == ["echo x >> log.txt", "echo x >> log.txt"]


def test_an_irreversible_command_needs_the_authority_check(repo):
    """git push is irreversible: without an authorize callback it is denied and never
    runs; with one, the check is asked with the call's class."""
    guard, ran, _ = bash_guard(repo)
    answer = guard.call("bash", {"command": "git push origin main"})
    assert ran == []
    assert "authoriz" in str(answer).lower()
    asked: list[ActionRequest] = []

    def approve(request: ActionRequest) -> bool:
        asked.append(request)
        return False

    guard, ran, _ = bash_guard(repo, authorize=approve)
    guard.call("bash", {"command": "git push origin main"})
    assert ran == []
    assert [(r.tool, r.risk) for r in asked] == [("bash", "irreversible")]
    guard.call("bash", {"command": "git status"})  # a read asks nothing
    assert len(asked) == 1


def test_a_call_whose_risk_cannot_be_told_is_refused(repo):
    """No command to judge, or a risk function that answers no class: the call is refused
    with an answer that says why, and the tool never runs."""
    guard, ran, _ = bash_guard(repo)
    answer = guard.call("bash", {"script": "ls"})
    assert ran == []
    assert "no shell command in 'command'" in str(answer)

    def odd(_args: Any) -> Any:
        return "dangerous"

    guard.add_tool(GuardedTool("odd", lambda **_: "ran", risk=odd))
    answer = guard.call("odd", {})
    assert answer != "ran"
    assert "dangerous" in str(answer)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"risk": "dangerous"}, "risk"),
        ({"risk": 42}, "risk"),
        ({"risk": shell_risk_of(), "recovery": True}, "recovery"),
        (
            {
                "risk": shell_risk_of(),
                "breaker": Breaker(
                    "sandbox", operation="read", degrade=["stale"], max_stale=60, timeout=1.0
                ),
            },
            "stale",
        ),
    ],
)
def test_a_risk_is_a_class_or_a_function_checked_when_the_tool_is_added(options, message):
    """A risk that is neither a known class nor a function is refused when the tool is
    described; a tool whose calls may write cannot be a recovery read, nor fall back to a
    stale answer."""
    guard = RunGuard("t")
    with pytest.raises(PolicyError, match=message):
        guard.ensure_tool("bash", **options)
