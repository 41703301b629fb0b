"""toolbreaker check-run: where and why a recorded run would stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolbreaker.cli import main


def write_run(tmp_path: Path, *steps: dict) -> str:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    return str(path)


def call(at: int, tool: str, **extra) -> dict:
    return {"at": at, "tool": tool, "args": extra.pop("args", {"q": "x"}), **extra}


def test_alternation_stops_with_a_packet(tmp_path, capsys):
    """search/refine alternation without new evidence stops at the fourth call."""
    run = write_run(
        tmp_path,
        *(call(i * 10, t, result={"same": 1}) for i, t in enumerate(["search", "refine"] * 3)),
    )
    assert main(["check-run", run]) == 1
    out = capsys.readouterr().out
    assert f"the run would stop at {run}:4" in out
    packet = json.loads(out.split(f"{run}:4\n", 1)[1])
    assert packet["condition"] == "loop"
    assert packet["attempted"]["tool"] == "refine"


def test_tuned_budget_lets_the_run_complete(tmp_path, capsys):
    """The same run under a looser budget completes; exit 0."""
    run = write_run(
        tmp_path,
        *(call(i * 10, t, result={"n": i}) for i, t in enumerate(["search", "refine"] * 3)),
    )
    budget = tmp_path / "budget.toml"
    budget.write_text("max_tool_calls = 10\nloop_cycles = 4\n")
    assert main(["check-run", run, "--budget", str(budget)]) == 0
    assert "completes within the budget" in capsys.readouterr().out


def test_unknown_write_blocks_the_next_write(tmp_path, capsys):
    """One unknown write outcome stops further writes (default max_uncertain 0)."""
    email = {"risk": "reversible_write", "business_key": ["to"]}
    run = write_run(
        tmp_path,
        call(0, "send_email", args={"to": "a"}, outcome="unknown", **email),
        call(5, "lookup", args={"id": 1}),
        call(9, "send_email", args={"to": "b"}, **email),
    )
    assert main(["check-run", run]) == 1
    out = capsys.readouterr().out
    assert "BLOCKED uncertain-side-effect" in out.splitlines()[3]
    # Writes were blocked where the unknown outcome came back (line 3 was refused).
    packet = json.loads(out.split(f"writes would be blocked at {run}:1\n", 1)[1])
    assert packet["uncertain"][0]["idempotency_key"].startswith("tb1-")


def test_cost_lines_count(tmp_path, capsys):
    """Model-step costs count toward max_cost."""
    run = write_run(tmp_path, {"at": 0, "cost": "0.30"}, call(1, "search"))
    budget = tmp_path / "b.toml"
    budget.write_text('max_cost = "0.25"\n')
    assert main(["check-run", run, "--budget", str(budget)]) == 1
    assert "STOP max-cost" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('{"at": 0, "tool": "a"}\n{"at": -1, "tool": "b"}\n', 2, "non-negative integer"),
        ('{"at": 5, "tool": "a"}\n{"at": 1, "tool": "b"}\n', 2, "time went backwards"),
        ('{"at": 0, "tool": "a", "colour": 1}\n', 1, "unknown field"),
        ('{"at": 0, "tool": "a", "outcome": "maybe"}\n', 1, "outcome"),
        ('{"at": 0, "tool": "a", "risk": "dangerous"}\n', 1, "risk"),
        ("{nope\n", 1, "malformed JSON"),
        # Issue 33, item 7: in the user's terms, not "got a Decimal" or a FingerprintError.
        ('{"at": 0.5, "tool": "a"}\n', 1, "at is whole milliseconds since the run started"),
        ('{"at": 0, "tool": "a"}\n{"at": 2.25, "tool": "a"}\n', 2, "got 2.25 (seconds?"),
        ('{"at": "5", "tool": "a"}\n', 1, "at must be a number of milliseconds, got '5'"),
        ('{"at": 0, "tool": ""}\n', 1, "tool must name the tool that was called, got ''"),
        ('{"at": 0, "tool": "  "}\n', 1, "tool must name the tool that was called, got '  '"),
        ('{"at": 0, "tool": 7}\n', 1, "tool must name the tool that was called, got 7"),
    ],
)
def test_bad_run_files_are_one_line_errors(tmp_path, capsys, text, line, message):
    """Bad input gives exit 2 and the file and line."""
    path = tmp_path / "run.jsonl"
    path.write_text(text)
    assert main(["check-run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:{line}: ")
    assert err.count("\n") == 1
    assert message in err
    assert "Decimal" not in err
    assert "FingerprintError" not in err


def test_whole_milliseconds_written_as_decimals_are_taken(tmp_path, capsys):
    """An exporter that writes every number with a point (``1500.0``) is understood: a
    whole number of milliseconds is one, however it is written."""
    run = write_run(tmp_path, {"at": 0.0, "tool": "a"}, {"at": 1500.0, "tool": "b"})
    budget = tmp_path / "b.toml"
    budget.write_text("deadline_ms = 1500\n")
    assert main(["check-run", run, "--budget", str(budget)]) == 1
    assert "STOP deadline: 1500 ms since the run started" in capsys.readouterr().out


def test_model_steps_are_shown_with_the_cost_so_far(tmp_path, capsys):
    """Issue 33, item 7: a line that is only a model step is printed, with its cost and
    the run's cost so far, so cost growth is visible (before: never printed)."""
    run = write_run(
        tmp_path,
        {"at": 0, "cost": "0.10"},
        call(1, "search", args={"q": "a"}, result={"n": 1}, cost="0.05"),
        {"at": 2, "cost": "0.25"},
    )
    assert main(["check-run", run]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["1", "0", "(model", "step)", "cost", "0.1,", "run", "cost", "0.1"]
    assert "allowed (success)" in lines[2]
    assert lines[3].split()[4:] == ["cost", "0.25,", "run", "cost", "0.4"]


def test_check_run_derives_the_same_keys_as_a_run_guard(tmp_path, capsys):
    """A write without a business key gets the key RunGuard would give it in that task."""
    from toolbreaker import RunGuard

    args = {"to": "a", "body": "hi", "requested_at": "10:00"}
    run = write_run(
        tmp_path,
        call(0, "send", args=args, risk="reversible_write", outcome="unknown"),
        call(1, "send", args={"to": "b"}, risk="reversible_write"),
    )
    assert main(["check-run", run, "--task", "t-9"]) == 1
    packet = json.loads(capsys.readouterr().out.split(f"{run}:1\n", 1)[1])
    guard = RunGuard("t-9")
    guard.ensure_tool("send", risk="reversible_write")
    step = guard.begin("send", {**args, "requested_at": "11:00"})
    assert packet["uncertain"][0]["idempotency_key"] == step.idempotency_key


def test_writes_follow_the_write_protocol(tmp_path, capsys):
    """A certainly failed write may run again; one whose outcome is unknown is never
    replayed (reconcile); the packet lists the confirmed and the unresolved writes.

    (Line 3 was "repeat 1" before check-run ran the live guard: line 2's call returned
    nothing, and a live guard counts that first result as new evidence.)"""
    email = {"risk": "reversible_write", "business_key": ["to"]}
    run = write_run(
        tmp_path,
        call(0, "send_email", args={"to": "a"}, outcome="failure", **email),
        call(1, "send_email", args={"to": "b"}, **email),
        call(2, "send_email", args={"to": "a"}, **email),
        call(3, "send_email", args={"to": "c"}, outcome="unknown", **email),
        call(4, "send_email", args={"to": "c"}, **email),
        call(5, "send_email", args={"to": "d"}, **email),
    )
    assert main(["check-run", run]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "allowed (failure)" in lines[1]
    assert "allowed (success)" in lines[3]
    assert "reconcile" in lines[5]
    assert "BLOCKED uncertain-side-effect" in lines[6]
    packet = json.loads(out.split(f"{run}:4\n", 1)[1])
    assert sorted(step["at"] for step in packet["confirmed"]) == [1, 2]
    assert [(step["at"], step["status"]) for step in packet["uncertain"]] == [(3, "unknown")]


def test_one_unknown_write_blocks_writes_even_when_no_write_follows(tmp_path, capsys):
    """Issue 21, defect 3: a run whose one write has an unknown outcome, followed by reads
    only, blocks writes, as a live guard decides: exit 1, the block at the write's line
    and in the packet's history (before: exit 0, "completes within the budget")."""
    run = write_run(
        tmp_path,
        call(0, "send", args={"to": "a"}, risk="reversible_write", outcome="unknown"),
        call(5, "lookup", args={"id": 1}, result={"id": 1}),
    )
    assert main(["check-run", run]) == 1
    out = capsys.readouterr().out
    packet = json.loads(out.split(f"writes would be blocked at {run}:1\n", 1)[1])
    assert packet["condition"] == "uncertain-side-effect"
    assert [(c["condition"], c["effect"], c["step"]) for c in packet["history"]] == [
        ("uncertain-side-effect", "writes-blocked", 1)
    ]
    assert packet["counters"]["uncertain"] == 1


def test_a_refused_step_spends_nothing_and_says_so(tmp_path, capsys):
    """Issue 21, defect 3: a tool call's cost is spent by the call, against its class; a
    call the budget refused did not run and spends nothing, and its line says so. A model
    step's cost counts toward the total only."""
    run = write_run(
        tmp_path,
        {"at": 0, "cost": "0.05"},
        call(1, "search", args={"q": "a"}, result={"n": 1}, cost="0.10"),
        call(2, "search", args={"q": "b"}, result={"n": 2}, cost="0.40"),
    )
    budget = tmp_path / "b.toml"
    budget.write_text("max_tool_calls = 1\n")
    assert main(["check-run", run, "--budget", str(budget)]) == 1
    out = capsys.readouterr().out
    assert "STOP max-tool-calls" in out.splitlines()[3]  # after the model step's line
    assert "its cost is not spent: the call did not run" in out.splitlines()[3]
    packet = json.loads(out.split(f"the run would stop at {run}:3\n", 1)[1])
    assert packet["counters"]["cost"] == "0.15"
    assert packet["counters"]["class_cost"]["read"] == "0.1"


def test_check_run_prints_the_packet_a_live_guard_gives(tmp_path, capsys):
    """Issue 21, defect 3: the packet check-run prints is the live guard's for the same
    run (the same steps, counters, next safe action and history), not one of its own."""
    from toolbreaker import RunGuard
    from toolbreaker.testing import FakeClock

    records = [
        call(0, "search", args={"q": "a"}, result={"n": 1}),
        call(10, "send", args={"to": "a"}, risk="reversible_write", result={"id": 1}),
        call(20, "send", args={"to": "b"}, risk="reversible_write", outcome="unknown"),
        *(call(30 + i, "search", args={"q": "b"}, result={"n": 2}) for i in range(5)),
    ]
    run = write_run(tmp_path, *records)
    assert main(["check-run", run, "--task", "t-live"]) == 1
    printed = json.loads(capsys.readouterr().out.split(f"{run}:8\n", 1)[1])

    clock = FakeClock()
    guard = RunGuard("t-live", clock=clock)
    answers = iter(records)

    def tool(**_kwargs):
        record = next(answers)
        if record.get("outcome") == "unknown":
            raise TimeoutError("no reply")
        return record["result"]

    guard.tool("search")(tool)
    guard.tool("send", risk="reversible_write")(tool)
    for record in records:
        clock.set(record["at"])
        guard.call(record["tool"], record["args"])
    live = json.loads(guard.stop_packet().to_json())
    assert printed == live
    assert [c["condition"] for c in live["history"]] == [
        "uncertain-side-effect",
        "repeated-action",
    ]


def test_a_tools_risk_may_vary_per_call(tmp_path, capsys):
    """Issue 33, item 4: one generic tool (a shell) reads with some calls and writes with
    others, as a live guard whose tool's risk is a function of its arguments: each line's
    risk counts in its class, and the edit between two identical test runs is new
    evidence (before: exit 2, "a tool has one risk class")."""
    test = {"args": {"command": "pytest -q"}, "result": {"exit": 1, "output": "1 failed"}}
    run = write_run(
        tmp_path,
        call(0, "bash", args={"command": "cat calc.py"}, result={"exit": 0}),
        *(call(1 + n, "bash", **test) for n in range(3)),
        call(4, "bash", args={"command": "sed -i 's/-/+/' calc.py"}, risk="reversible_write"),
        call(5, "bash", **test),
        call(6, "bash", args={"command": "sed -i 's/+/*/' calc.py"}, risk="reversible_write"),
        call(7, "bash", **test),
    )
    assert main(["check-run", run]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "allowed (success, repeat 1)" in lines[4]  # the same failure, nothing changed
    assert "repeat" not in lines[6]  # after an edit: not a repeat
    assert "repeat" not in lines[8]
    counters = json.loads(out.split("the run completes within the budget: ", 1)[1])
    assert counters["class_calls"] == {"read": 6, "reversible_write": 2, "irreversible": 0}


def test_a_tool_keeps_one_business_key_and_recovery_flag(tmp_path, capsys):
    """What a live guard knows of a tool once: its writes' business key, and whether it is
    a recovery read (which never writes). A run that says otherwise is bad input (exit 2,
    the line named); a read's business key, which names nothing, may come and go."""
    run = write_run(
        tmp_path,
        call(0, "send", args={"to": "a"}, risk="reversible_write", business_key=["to"]),
        call(1, "send", args={"to": "b"}, business_key=["id"]),
        call(2, "send", args={"to": "c"}, risk="reversible_write", business_key=["to", "cc"]),
    )
    assert main(["check-run", run]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run}:3: ")
    assert "tool 'send' was recorded with business key ['to'] before" in err
    run = write_run(
        tmp_path,
        call(0, "status", args={"id": 1}, recovery=True),
        call(1, "status", args={"id": 1}, risk="reversible_write"),
    )
    assert main(["check-run", run]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run}:2: ")
    assert "a recovery read never writes" in err
    run = write_run(
        tmp_path,
        call(0, "status", args={"id": 1}, recovery=True),
        call(1, "status", args={"id": 2}),
    )
    assert main(["check-run", run]) == 2
    assert "was recorded as a recovery read before" in capsys.readouterr().err
