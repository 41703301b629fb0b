"""A run cell decides as the run machine does, and holds the state the machine would make.

:class:`~toolbreaker.core._run.cell.RunCell` counts quiet calls in place instead of asking
:func:`~toolbreaker.core._run.machine.apply`; these tests feed the same events to a cell
and to the machine, under budgets whose limits bind within a few calls, and compare every
decision and every state (its value and its JSON), whether the state is read after each
event or only at the end.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker.core._run import cell as cell_module
from toolbreaker.core._run.budget import Action, Budget, ClassLimits, RunState
from toolbreaker.core._run.cell import RunCell
from toolbreaker.core._run.machine import RunDecision, RunEvent, apply
from toolbreaker.core._run.state import TALLY_LIMIT
from toolbreaker.errors import RunStateError

# Many reads (a few come back: repeats and loops), fewer writes.
_ACTIONS = [Action("search", f"fp-search-{i % 5 if i < 10 else i}") for i in range(40)] + [
    Action("fetch", "fp-fetch"),
    Action("status", "fp-status", recovery=True),
    Action("update", "fp-update", risk="reversible_write"),
    Action("send", "fp-send", risk="irreversible"),
]

_budget = st.builds(
    Budget,
    max_tool_calls=st.integers(1, 40),
    max_repeats=st.integers(0, 4),
    max_cost=st.sampled_from([None, None, "1", "3"]),
    deadline_ms=st.sampled_from([None, None, 10, 60]),
    max_uncertain_side_effects=st.integers(0, 1),
    loop_cycles=st.integers(2, 4),
    max_recovery_calls=st.integers(0, 2),
    classes=st.fixed_dictionaries(
        {
            "read": st.builds(
                ClassLimits,
                max_calls=st.sampled_from([None, None, 0, 3, 20]),
                max_repeats=st.sampled_from([None, 0, 1]),
                max_cost=st.sampled_from([None, "0.5"]),
            )
        }
    ),
    max_calls_per_turn=st.sampled_from([None, None, None, 2, 5]),
    reservation_lease_ms=st.sampled_from([None, 4]),
    max_tool_failures=st.sampled_from([None, 1, 2]),
)

_request = st.tuples(
    st.just("request"),
    st.sampled_from(_ACTIONS),
    st.sampled_from([None, None, None, "0.25"]),
    st.sampled_from([None, "confirmed", "pending", "failed"]),
)
_outcome = st.tuples(
    st.just("outcome"),
    st.sampled_from(_ACTIONS),
    st.sampled_from(["success", "success", "success", "failure", "unknown", "ignored"]),
    st.sampled_from([None, "a", "b", "c", "d"]),
    st.sampled_from([None, None, None, "0.3"]),
    st.sampled_from([None, None, None, "http-500"]),
    st.booleans(),  # settle the last reservation held
)
# Calls most of the time (so that runs go quiet for a while), the other facts now and then.
_fact = st.one_of(
    st.tuples(st.just("turn")),
    st.tuples(st.just("cost"), st.sampled_from(["0.1", "2"])),
    st.tuples(st.just("stop")),
    st.tuples(st.just("reserve"), st.sampled_from(["0.2", "5"])),
    st.tuples(st.just("resolved")),
    st.tuples(st.just("extend")),
    st.tuples(st.just("late")),  # a time before the run started: the machine refuses it
)
# A cycle of n reads made k times, each with its result: a loop (or not yet one).
_cycle = st.tuples(
    st.just("cycle"),
    st.integers(2, 4),
    st.integers(1, 4),
    st.sampled_from([None, "same", "new"]),
)
_event = st.one_of(
    _request,
    _outcome,
    _request,
    _outcome,
    _request,
    _outcome,
    st.tuples(st.just("turn")),
    _fact,
    _cycle,
)


def _expanded(spec: tuple[Any, ...], n: int) -> list[tuple[Any, ...]]:
    """A cycle's requests and outcomes, in order; any other event as it is."""
    if spec[0] != "cycle":
        return [spec]
    _, size, times, results = spec
    out: list[tuple[Any, ...]] = []
    for k in range(times):
        for action in _ACTIONS[20 : 20 + size]:
            evidence = {None: None, "same": "cycle", "new": f"cycle-{n}-{k}"}[results]
            out.append(("request", action, None, None))
            out.append(("outcome", action, "success", evidence, None, None, False))
    return out


def _event_of(spec: tuple[Any, ...], at: int, held: int) -> RunEvent:
    kind = spec[0]
    if kind == "request":
        _, action, reserve, journal = spec
        return RunEvent("request", at, action, journal=journal, reserve=reserve)
    if kind == "outcome":
        _, action, outcome, evidence, cost, error, settles = spec
        hold = held if settles else 0
        return RunEvent(
            "outcome",
            at,
            action,
            outcome=outcome,
            evidence=evidence,
            cost=cost,
            error=error,
            reserve="0.25" if hold else None,
            reservation=hold,
        )
    if kind == "cost":
        return RunEvent("cost", at, cost=spec[1], risk="read")
    if kind == "reserve":
        return RunEvent("reserve", at, reserve=spec[1])
    if kind == "resolved":
        return RunEvent("resolved", at, count=1)
    if kind == "stop":
        return RunEvent("stop", at, detail="enough")
    if kind == "late":
        return RunEvent("request", 0, _ACTIONS[0])
    return RunEvent(kind, at)


def _frozen(run: RunState) -> str:
    return json.dumps(run.to_dict(), sort_keys=True)


@settings(max_examples=400, deadline=None)
@given(
    _budget,
    st.lists(st.tuples(_event, st.integers(0, 4), st.booleans()), min_size=10, max_size=80),
)
def test_a_cell_decides_and_moves_as_the_run_machine(budget, steps):
    """Any sequence of events: the same decision from the cell as from the machine, and
    the same state (value and JSON) after each, read then or only later; an event the
    machine refuses is refused by the cell too, its state unchanged."""
    reference = RunState.start("task", 5)
    cell = RunCell(reference, budget)
    at, held = 5, 0
    expanded = [
        (part, tick if i == 0 else 0, look)
        for n, (spec, tick, look) in enumerate(steps)
        for i, part in enumerate(_expanded(spec, n))
    ]
    for spec, tick, look in expanded:
        at += tick
        if spec[0] == "extend":
            budget = budget.raised(max_tool_calls=budget.max_tool_calls + 3)
            cell.reset(cell.state, budget)
        event = _event_of(spec, at, held)
        try:
            reference, expected = apply(reference, event, budget)
        except RunStateError:
            before = _frozen(cell.state)
            with pytest.raises(RunStateError):
                cell.feed(event)
            assert _frozen(cell.state) == before
            continue
        decision = cell.feed(event)
        assert isinstance(decision, RunDecision)
        assert decision == expected
        assert cell.steps == reference.steps
        assert cell.stopped == reference.stopped
        assert cell.writes_blocked == reference.writes_blocked
        if decision.reservation:
            held = decision.reservation
        if look:
            assert cell.state == reference
            assert _frozen(cell.state) == _frozen(reference)
    assert cell.state == reference
    assert _frozen(cell.state) == _frozen(reference)
    assert RunState.from_dict(cell.state.to_dict()) == reference


def test_quiet_calls_never_reach_the_run_machine(monkeypatch):
    """Reads no limit can stop, each ending with a result: counted in place, the machine
    never asked; the state, built once when read, is the machine's."""
    budget = Budget(max_tool_calls=1_000)
    start = RunState.start("task", 0)
    reference = start
    events = []
    for i in range(TALLY_LIMIT + 30):
        action = Action("search", f"fp-{i}")
        events.append(RunEvent("request", i, action))
        events.append(RunEvent("outcome", i, action, outcome="success", evidence=f"r{i % 9}"))
    for event in events:
        reference, _ = apply(reference, event, budget)
    asked: list[RunEvent] = []

    def counting(run: RunState, event: RunEvent, limits: Budget) -> Any:
        asked.append(event)
        return apply(run, event, limits)

    monkeypatch.setattr(cell_module, "apply", counting)
    cell = RunCell(start, budget)
    for event in events:
        cell.feed(event)
    assert asked == []
    assert cell.state == reference
    assert _frozen(cell.state) == _frozen(reference)


@pytest.mark.parametrize(
    "budget",
    [
        Budget(max_tool_calls=2_000, max_repeats=5, loop_cycles=8),
        Budget(max_tool_calls=2_000, max_calls_per_turn=9, max_repeats=5),
        Budget(max_tool_calls=2_000, deadline_ms=1_500, max_repeats=5),
        Budget(
            max_tool_calls=2_000,
            classes={"read": ClassLimits(max_calls=700, max_repeats=1)},
            max_repeats=5,
        ),
    ],
)
def test_a_long_run_past_every_bound_moves_as_the_machine(budget):
    """Past :data:`TALLY_LIMIT` actions and :data:`EVIDENCE_LIMIT` results (the oldest
    go), results seen again, repeats, turns, a deadline and class limits reached: the
    cell's decisions and states are the machine's, read now and then or every time."""
    for every in (1, 7, 10_000):
        reference = RunState.start("task", 0)
        cell = RunCell(reference, budget)
        for i in range(1_200):
            at = i + 1
            action = Action("search", f"fp-{(i * 7) % 300 if i % 40 else 1}")
            evidence = f"r{i}" if i % 3 else f"r{i % 5}"  # new, or seen again
            events = [
                RunEvent("request", at, action),
                RunEvent("outcome", at, action, outcome="success", evidence=evidence),
            ]
            if i % 25 == 0:
                events.append(RunEvent("turn", at))
            for event in events:
                reference, expected = apply(reference, event, budget)
                assert cell.feed(event) == expected
            if i % every == 0:
                assert cell.state == reference
        assert _frozen(cell.state) == _frozen(reference)


def test_a_state_read_from_a_cell_never_changes_after(monkeypatch):
    """A state handed out is frozen: the quiet calls counted after it leave it as it was."""
    cell = RunCell(RunState.start("task", 0), Budget(max_tool_calls=100))
    kept = []
    for i in range(40):
        action = Action("search", f"fp-{i % 7}-{i}")
        cell.feed(RunEvent("request", i, action))
        cell.feed(RunEvent("outcome", i, action, outcome="success", evidence=f"r{i}"))
        state = cell.state
        kept.append((state, _frozen(state)))
    for state, frozen in kept:
        assert _frozen(state) == frozen


#: Every field of a budget, and how a quiet call is held to it: read by ``limits.quiet``
#: (the limits a call may cross), or why it cannot change a quiet call's decision. A
#: field added to the budget fails here until the quiet window is taught about it.
_QUIET_READS = {
    "max_tool_calls": "quiet: calls below it",
    "max_repeats": "quiet: repeats_for",
    "max_cost": "quiet: no class is quiet once the cost reaches it",
    "deadline_ms": "quiet: before",
    "max_uncertain_side_effects": "writes only: never quiet",
    "loop_cycles": "may_loop: no cycle at all",
    "max_recovery_calls": "a stopped run: nothing is quiet",
    "classes": "quiet: class max_calls, max_repeats, max_cost",
    "max_calls_per_turn": "quiet: turn_calls",
    "reservation_lease_ms": "a reservation: a request that holds one is never quiet",
    "max_tool_failures": "an outcome with an error: never quiet",
    "prices": "usage events: never quiet",
}
_CLASS_READS = {"max_calls", "max_repeats", "max_cost"}


def test_the_quiet_window_knows_every_field_of_a_budget():
    assert {f.name for f in dataclasses.fields(Budget)} == set(_QUIET_READS)
    assert {f.name for f in dataclasses.fields(ClassLimits)} == _CLASS_READS
