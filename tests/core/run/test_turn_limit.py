"""The per-turn tool-call limit of the run machine (issue 12: one agent issued 792 calls
in one model turn)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._run.budget import Action, Budget, RunState
from toolbreaker.core._run.machine import RunEvent, apply
from toolbreaker.errors import PolicyError


def request(n: int, at: int = 1) -> RunEvent:
    return RunEvent("request", at, Action(tool="search", fingerprint=f"fp-{n}"))


def test_calls_beyond_the_turn_limit_are_deferred_and_counted():
    """With 3 calls per turn, the 4th to 10th of one turn are deferred; a new turn runs
    3 more. Deferred calls count against nothing else."""
    budget = Budget(max_calls_per_turn=3, max_tool_calls=100)
    run = RunState.start("t", 0)
    verdicts = []
    for n in range(10):
        run, decision = apply(run, request(n), budget)
        verdicts.append(decision.verdict)
    assert verdicts == ["run"] * 3 + ["deferred"] * 7
    assert (run.calls, run.turn_calls, run.deferred) == (3, 3, 7)
    run, _ = apply(run, RunEvent("turn", 2), budget)
    assert (run.turn, run.turn_calls) == (1, 0)
    run, decision = apply(run, request(99, 2), budget)
    assert decision.verdict == "run"
    assert run.counters()["deferred"] == 7


def test_without_a_turn_limit_turns_change_nothing():
    """No ``max_calls_per_turn``: a turn event is a no-op and the state serialises as
    before (no turn keys), so existing traces and packets stay byte-identical."""
    budget = Budget()
    run = RunState.start("t", 0)
    after, _ = apply(run, RunEvent("turn", 1), budget)
    assert after == run
    run, _ = apply(run, request(1), budget)
    assert not {"turn", "turn_calls", "deferred"} & set(run.to_dict())
    assert "max_calls_per_turn" not in Budget().to_dict()
    assert Budget().version == Budget(max_calls_per_turn=None).version


def test_the_turn_counters_round_trip():
    budget = Budget(max_calls_per_turn=1)
    run = RunState.start("t", 0)
    for n in range(3):
        run, _ = apply(run, request(n), budget)
    run, _ = apply(run, RunEvent("turn", 1), budget)
    assert RunState.from_dict(run.to_dict()) == run
    assert run.to_dict()["deferred"] == 2


def test_a_run_limit_stops_before_the_turn_limit_defers():
    """A call that crosses a run limit stops the run even when the turn is full; a
    stopped run answers stopped, never deferred."""
    budget = Budget(max_calls_per_turn=1, max_tool_calls=2)
    run = RunState.start("t", 0)
    verdicts = []
    for n, turn in enumerate([False, False, True, False, False, True, False]):
        if turn:
            run, _ = apply(run, RunEvent("turn", n + 1), budget)
            continue
        run, decision = apply(run, request(n, n + 1), budget)
        verdicts.append(decision.verdict)
    assert verdicts == ["run", "deferred", "run", "stopped", "stopped"]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_the_limit_is_validated(bad):
    with pytest.raises(PolicyError, match="max_calls_per_turn"):
        Budget(max_calls_per_turn=bad)


@given(
    st.integers(1, 6),
    st.lists(st.one_of(st.just("turn"), st.integers(0, 20)), max_size=120),
)
def test_no_turn_ever_runs_more_than_its_limit(limit, events):
    """Whatever the interleaving of requests and turns: each turn runs at most ``limit``
    calls, every request is run, deferred or stopped, and deferring begins nothing."""
    budget = Budget(max_calls_per_turn=limit, max_tool_calls=10_000, max_repeats=10_000)
    run = RunState.start("t", 0)
    in_turn = ran = deferred = 0
    for at, event in enumerate(events, start=1):
        if event == "turn":
            run, _ = apply(run, RunEvent("turn", at), budget)
            in_turn = 0
            continue
        calls = run.calls
        run, decision = apply(run, request(event, at), budget)
        assert decision.verdict in ("run", "deferred", "stopped")
        if decision.verdict == "run":
            ran += 1
            in_turn += 1
        elif decision.verdict == "deferred":
            deferred += 1
            assert run.calls == calls
        assert in_turn <= limit
        assert run.turn_calls == in_turn
    assert (run.deferred, run.calls) == (deferred, ran)


def test_a_budget_file_sets_the_turn_limit(tmp_path):
    path = tmp_path / "budget.toml"
    path.write_text("max_tool_calls = 40\nmax_calls_per_turn = 8\n")
    budget = Budget.from_toml(path)
    assert budget.max_calls_per_turn == 8
    assert budget.to_dict()["max_calls_per_turn"] == 8
