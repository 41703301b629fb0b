"""The run machine is pure: applying an event leaves the state it was given as it was.

A transition shares parts of the old state with the new one (its tallies, digests and
history are not copied whole on every event), so these tests hold every state a run went
through, and states that branch from one another, to their values and their JSON.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker.core._run._values import Recent
from toolbreaker.core._run.budget import Action, Budget, RunState
from toolbreaker.core._run.machine import RunDecision, RunEvent, apply
from toolbreaker.core._run.state import TALLY_LIMIT, checked

BUDGET = Budget(max_tool_calls=10_000, max_repeats=10_000, loop_cycles=8, max_cost="1000")

_ACTIONS = [Action("search", f"fp-search-{i}") for i in range(6)] + [
    Action("update", "fp-update", risk="reversible_write"),
    Action("send", "fp-send", risk="irreversible"),
    Action("status", "fp-status", recovery=True),
]

_event = st.one_of(
    st.tuples(
        st.just("call"),
        st.sampled_from(_ACTIONS),
        st.sampled_from(["success", "failure", "unknown", "ignored"]),
        st.sampled_from([None, "a", "b", "c"]),
        st.sampled_from([None, "0.5"]),
        st.sampled_from([None, "0.25"]),
    ),
    st.tuples(st.just("cost"), st.sampled_from(["0.1", "2"])),
    st.tuples(st.just("turn")),
    st.tuples(st.just("stop")),
    st.tuples(st.just("resolved")),
)


def _frozen(run: RunState) -> str:
    return json.dumps(run.to_dict(), sort_keys=True)


def _feed(run: RunState, spec: tuple[Any, ...], at: int) -> list[tuple[RunState, RunEvent]]:
    """The states and events one spec makes: a call's request and outcome, or one fact."""
    kind = spec[0]
    if kind != "call":
        event = {
            "cost": lambda: RunEvent("cost", at, cost=spec[1]),
            "turn": lambda: RunEvent("turn", at),
            "stop": lambda: RunEvent("stop", at, detail="enough"),
            "resolved": lambda: RunEvent("resolved", at, count=1),
        }[kind]()
        return [(run, event)]
    _, action, outcome, evidence, reserve, cost = spec
    request = RunEvent("request", at, action, reserve=reserve)
    after, decision = apply(run, request, BUDGET)
    out = [(run, request)]
    if decision.runs:
        held = decision.reservation
        outcome_event = RunEvent(
            "outcome",
            at,
            action,
            outcome=outcome,
            evidence=evidence,
            step=decision.step,
            cost=cost,
            reserve=reserve if held else None,
            reservation=held,
        )
        out.append((after, outcome_event))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(_event, max_size=60), st.integers(0, 59))
def test_applying_an_event_never_changes_the_state_it_was_given(specs, branch_at):
    """Every state a run passed through keeps its value and its JSON after the run moved
    on, including a state a second event was applied to (two runs branching from it);
    every new state is one :class:`RunState` would accept, and loads back equal."""
    run = RunState.start("task", 0)
    seen: list[tuple[RunState, str, RunState]] = []
    for at, spec in enumerate(specs, start=1):
        for state, event in _feed(run, spec, at):
            before = _frozen(state)
            copy = RunState.from_dict(json.loads(before))
            run, decision = apply(state, event, BUDGET)
            assert isinstance(decision, RunDecision)
            assert _frozen(state) == before  # the old state unchanged
            assert state == copy
            assert checked(run) == run  # the new state is a valid one
            assert RunState.from_dict(run.to_dict()) == run
            seen.append((state, before, copy))
    if seen:
        # A branch: another event applied to an old state leaves it, and the run, as they were.
        old, before, copy = seen[branch_at % len(seen)]
        latest = _frozen(run)
        apply(old, RunEvent("request", len(specs) + 1, Action("fork", "fp-fork")), BUDGET)
        assert _frozen(old) == before
        assert _frozen(run) == latest
    for state, before, copy in seen:
        assert _frozen(state) == before
        assert state == copy
        assert hash(state.tallies) == hash(copy.tallies)


def test_a_long_run_keeps_every_state_it_passed_through():
    """Past :data:`TALLY_LIMIT` distinct actions (the oldest tallies go), every earlier
    state still reads as it did, and a state loaded from its JSON equals it."""
    run = RunState.start("task", 0)
    kept: list[tuple[RunState, str]] = []
    for i in range(TALLY_LIMIT * 2 + 17):
        action = Action("search", f"fp-{i % (TALLY_LIMIT + 40)}")
        run, decision = apply(run, RunEvent("request", i + 1, action), BUDGET)
        assert decision.runs
        run, _ = apply(
            run,
            RunEvent("outcome", i + 1, action, outcome="success", evidence=f"r{i % 7}"),
            BUDGET,
        )
        if i % 13 == 0:
            kept.append((run, _frozen(run)))
    assert len(run.tallies) == TALLY_LIMIT
    for state, frozen in kept:
        assert _frozen(state) == frozen
        assert RunState.from_dict(json.loads(frozen)) == state


_KEYS = 20
_op = st.one_of(
    st.tuples(st.just("latest"), st.integers(0, _KEYS - 1)),
    st.tuples(st.just("replaced"), st.integers(0, _KEYS - 1)),
    st.tuples(st.just("fork"), st.integers(0, 1_000)),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.lists(_op, max_size=150))
def test_recent_behaves_as_an_ordered_dict_and_never_changes_an_old_version(limit, ops):
    """:class:`Recent` against a model (an ordered dict copied on every step): the same
    values in the same order, found by the same keys, after any mix of updates under one
    limit, with every older version (some updated again: a branch) unchanged."""
    _recent_against_the_model(limit, ops)


def _recent_against_the_model(limit: int, ops: list[tuple[Any, ...]]) -> None:
    versions: list[tuple[Recent[str], OrderedDict[str, str]]] = [(Recent(), OrderedDict())]
    for n, op in enumerate(ops):
        if op[0] == "fork":
            versions.append(versions[op[1] % len(versions)])
            continue
        recent, model = versions[-1]
        key = f"k{op[1]}"
        value = f"{key}={n}"  # every value its own: a value out of place shows
        model = OrderedDict(model)
        if op[0] == "latest":
            model.pop(key, None)
            model[key] = value
            while len(model) > limit:
                model.popitem(last=False)
            recent = recent.latest(key, value, limit)
        else:
            if key not in model:
                continue
            model[key] = value
            recent = recent.replaced(key, value)
        versions.append((recent, model))
    for recent, model in versions:
        assert tuple(recent) == tuple(model.values())
        assert recent == tuple(model.values())
        assert len(recent) == len(model)
        assert recent.newest() == next(reversed(model), None)
        for i in range(_KEYS):
            key = f"k{i}"
            assert recent.get(key) == model.get(key)
            assert recent.holds(key) == (key in model)
