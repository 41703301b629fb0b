"""``toolbreaker run show``'s lines: a stop packet read against the run's budget."""

from __future__ import annotations

from toolbreaker import Budget
from toolbreaker.cli._runs import summary


def packet(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "task": "refund-7",
        "condition": "uncertain-side-effect",
        "detail": "1 write with unknown outcome (pay\x1b[2J: TimeoutError)",
        "confirmed": [{"tool": "ticket", "status": "confirmed", "idempotency_key": "k-1"}],
        "uncertain": [{"tool": "pay\nnow", "status": "unknown", "idempotency_key": "k-2", "at": 5}],
        "counters": {
            "calls": 3,
            "class_calls": {"read": 1, "reversible_write": 2, "irreversible": 0},
            "cost": "0.30",
            "reserved": "0.10",
        },
        "next_safe_action": "reconcile k-2 with a read-only status check",
    }
    doc.update(changes)
    return doc


def test_the_lines_name_the_stop_the_limits_and_each_uncertain_write():
    lines = summary(packet(), Budget(max_cost="1", max_tool_calls=20)).splitlines()
    assert lines[0] == (
        "run 'refund-7': stopped (uncertain-side-effect): "
        "1 write with unknown outcome (pay\\x1b[2J: TimeoutError)"
    )
    assert lines[1].split() == ["cost", "0.30", "of", "1", "(0.10", "reserved)"]
    assert lines[2].split(maxsplit=1) == [
        "calls",
        "3 of 20 (read 1 of no limit, reversible_write 2 of 5, irreversible 0 of 3)",
    ]
    assert lines[3].split() == ["confirmed", "1", "step(s)"]
    assert lines[4].split() == ["uncertain", "1", "write(s):"]
    assert lines[5] == "    pay\\nnow: unknown, key k-2"  # escaped: one line per write
    assert lines[6].split(maxsplit=1) == ["next", "reconcile k-2 with a read-only status check"]
    assert len(lines) == 7


def test_a_running_run_without_limits_says_so():
    doc = packet(condition="running", detail="the run has not stopped", uncertain=[])
    lines = summary(doc, Budget(max_tool_calls=20)).splitlines()
    assert lines[0] == "run 'refund-7': running: the run has not stopped"
    assert lines[1].split() == ["cost", "0.30", "of", "no", "limit", "(0.10", "reserved)"]
    assert lines[4].split() == ["uncertain", "0", "write(s)"]


def test_the_docs_show_what_the_command_prints(tmp_path, capsys):
    """docs/concurrency.md's `run show` lines are this run's, to the character."""
    import re
    from pathlib import Path

    from toolbreaker import RunGuard
    from toolbreaker.cli import main
    from toolbreaker.stores import SQLiteStore

    docs = (Path(__file__).parents[2] / "docs" / "concurrency.md").read_text(encoding="utf-8")
    (shown,) = re.findall(r"```text\n(run 'task-42'.*?)```", docs, re.S)
    with SQLiteStore(tmp_path / "runs.db") as store:
        guard = RunGuard("task-42", budget=Budget(max_cost="0.25"), journal=store, shared=True)
        guard.tool("search", cost="0.01")(lambda q: {"hits": 1})
        for n in range(30):
            guard.call("search", {"q": n})
    assert main(["run", "show", "task-42", "--store", f"sqlite://{tmp_path / 'runs.db'}"]) == 0
    assert capsys.readouterr().out == shown
