"""A run keeps every condition that stopped it or blocked its writes, in order, with its step."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

from toolbreaker.core._run.budget import Action, Budget, RunState, Stop
from toolbreaker.core._run.machine import RunDecision, RunEvent, apply
from toolbreaker.core._run.state import FIRED_LIMIT, Fired
from toolbreaker.errors import RunStateError

SEND = Action(tool="send", fingerprint="s" * 64, risk="reversible_write")
OTHER = Action(tool="send", fingerprint="o" * 64, risk="reversible_write")
STATUS = Action(tool="status", fingerprint="r" * 64)


def feed(run: RunState, budget: Budget, *events: RunEvent) -> tuple[RunState, list[str]]:
    verdicts = []
    for event in events:
        run, decision = apply(run, event, budget)
        verdicts.append(decision.verdict)
    return run, verdicts


def shown(run: RunState) -> list[tuple[str, str, int, str | None]]:
    return [(f.stop.condition, f.effect, f.step, f.tool) for f in run.conditions]


def test_writes_blocked_then_a_stop_keeps_both_in_order_with_their_steps():
    """An unknown write blocks writes at step 1; a refused write changes nothing (the block
    in force stays the one kept); repeated status reads then stop the run at step 5. Both
    conditions stay, in the order they fired."""
    budget = Budget(max_repeats=1)
    run = RunState.start("t", 0)
    run, verdicts = feed(
        run,
        budget,
        RunEvent("request", 1, SEND),
        RunEvent("outcome", 2, SEND, outcome="unknown", detail="TimeoutError", step=1),
        RunEvent("request", 3, OTHER),
        *(RunEvent("request", 4 + n, STATUS) for n in range(2)),
        RunEvent("request", 9, STATUS),
    )
    assert verdicts == ["run", "recorded", "writes-blocked", "run", "run", "stopped"]
    assert run.steps == 5
    assert shown(run) == [
        ("uncertain-side-effect", "writes-blocked", 1, "send"),
        ("repeated-action", "stopped", 5, "status"),
    ]
    assert run.conditions[0].stop == run.writes_blocked
    assert run.conditions[1].stop == run.stopped


def test_a_request_decision_carries_its_step_number():
    """Every request is a step, whatever its verdict: refused and answered ones count too."""
    budget = Budget(max_tool_calls=1)
    run = RunState.start("t", 0)
    steps = []
    for at in range(3):
        run, decision = apply(run, RunEvent("request", at, STATUS), budget)
        steps.append((decision.verdict, decision.step))
    assert steps == [("run", 1), ("stopped", 2), ("stopped", 3)]
    assert shown(run) == [("max-tool-calls", "stopped", 2, "status")]


def test_the_first_stop_is_the_only_stop_kept():
    """After the run stopped, later stops (an operator's, a dependency down) fire nothing."""
    run = RunState.start("t", 0)
    run, _ = feed(
        run,
        Budget(),
        RunEvent("stop", 1, detail="halt"),
        RunEvent("dependency-down", 2, SEND, required=True, reason="opened", detail="down"),
        RunEvent("stop", 3, detail="again"),
    )
    assert shown(run) == [("operator", "stopped", 0, None)]


def test_a_block_lifted_and_fired_again_is_kept_twice():
    """Writes blocked, the block lifted by a resolved write, blocked again: two conditions."""
    run = RunState.start("t", 0)
    run, _ = feed(
        run,
        Budget(),
        RunEvent("request", 1, SEND),
        RunEvent("outcome", 2, SEND, outcome="unknown", step=1),
        RunEvent("resolved", 3, count=1),
        RunEvent("request", 4, OTHER),
        RunEvent("outcome", 5, OTHER, outcome="unknown", step=2),
    )
    assert run.writes_blocked is not None
    assert shown(run) == [
        ("uncertain-side-effect", "writes-blocked", 1, "send"),
        ("uncertain-side-effect", "writes-blocked", 2, "send"),
    ]


def test_a_resumed_runs_block_fires_before_the_first_step():
    """Writes an earlier run left unresolved block writes at step 0."""
    run, _ = feed(
        RunState.start("t", 0), Budget(), RunEvent("resume", 0, count=2, detail="earlier")
    )
    assert shown(run) == [("uncertain-side-effect", "writes-blocked", 0, None)]


def test_an_outcome_names_the_step_of_its_request():
    """A write whose outcome arrives after later requests fires at its own step."""
    run = RunState.start("t", 0)
    run, _ = feed(
        run,
        Budget(),
        RunEvent("request", 1, SEND),
        RunEvent("request", 2, STATUS),
        RunEvent("outcome", 3, SEND, outcome="unknown", step=1),
    )
    assert shown(run) == [("uncertain-side-effect", "writes-blocked", 1, "send")]


def test_conditions_are_bounded_and_keep_the_first_of_each_effect():
    """Beyond FIRED_LIMIT the oldest is forgotten, never the first block nor the stop."""
    run = RunState.start("t", 0)
    budget = Budget()
    run, _ = feed(run, budget, RunEvent("request", 0, SEND))
    run, _ = feed(run, budget, RunEvent("outcome", 0, SEND, outcome="unknown", step=1))
    run, _ = feed(run, budget, RunEvent("stop", 0, detail="halt"))
    for n in range(FIRED_LIMIT + 5):
        run, _ = feed(
            run,
            budget,
            RunEvent("resolved", n, count=1),
            RunEvent("uncertain", n, SEND, detail=f"q-{n}", step=1),
        )
    assert len(run.conditions) == FIRED_LIMIT
    assert run.conditions[0].effect == "writes-blocked"
    assert run.conditions[0].step == 1
    assert run.conditions[1].effect == "stopped"
    assert "q-20" in run.conditions[-1].stop.detail


def test_conditions_round_trip_through_json():
    """to_dict keeps the steps and conditions; from_dict restores an equal state; a run
    without any serialises as before (no new keys)."""
    assert "conditions" not in RunState.start("t", 0).to_dict()
    assert "steps" not in RunState.start("t", 0).to_dict()
    run = RunState.start("t", 0)
    run, _ = feed(
        run,
        Budget(),
        RunEvent("request", 1, SEND),
        RunEvent("outcome", 2, SEND, outcome="unknown", step=1),
        RunEvent("stop", 3, detail="halt"),
    )
    data = json.loads(json.dumps(run.to_dict()))
    assert data["steps"] == 1
    assert [c["effect"] for c in data["conditions"]] == ["writes-blocked", "stopped"]
    assert RunState.from_dict(data) == run


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"condition": "loop"}, "conditions[0]"),
        (
            {
                **Stop("loop", "x", 1).to_dict(),
                "effect": "paused",
                "step": 1,
                "tool": None,
            },
            "conditions[0].effect",
        ),
        (
            {**Stop("loop", "x", 1).to_dict(), "effect": "stopped", "step": -1, "tool": None},
            "conditions[0].step",
        ),
    ],
)
def test_a_corrupt_condition_is_refused_naming_its_place(entry, field):
    """from_dict validates every condition; the error's field names the place."""
    data = RunState.start("t", 0).to_dict()
    data["conditions"] = [entry]
    with pytest.raises(RunStateError) as info:
        RunState.from_dict(data)
    assert info.value.field == field


def test_fired_validates_its_parts():
    """A Fired condition needs a Stop, a known effect and a non-negative step."""
    with pytest.raises(RunStateError):
        Fired("loop", "stopped", 1)  # type: ignore[arg-type]
    with pytest.raises(RunStateError):
        Fired(Stop("loop", "x", 1), "stopped", -1)


@pytest.mark.parametrize(
    "event",
    [
        lambda: RunEvent("resume", 1, count=1.5),
        lambda: RunEvent("resolved", 1, count="2"),
        lambda: RunEvent("request", 1, ("search", "fp-1")),
    ],
)
def test_an_event_is_checked_where_it_is_built(event):
    """The run machine builds the next state from an event's values without checking the
    state again, so an event whose values the state would keep is refused as it is built:
    a count that is no integer, an action that is no :class:`Action`."""
    with pytest.raises(RunStateError) as info:
        event()
    assert info.value.field in {"count", "action"}


def test_an_events_own_init_takes_exactly_its_fields():
    # RunEvent sets its fields as one dict (a shell builds two per call): its
    # hand-written __init__ must take every field, in order, with its default.
    params = list(inspect.signature(RunEvent.__init__).parameters.values())[1:]
    fields = dataclasses.fields(RunEvent)
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        assert param.default == default, field.name
    event = RunEvent("outcome", 2, SEND, outcome="unknown", step=1)
    assert dataclasses.replace(event) == event
    assert hash(dataclasses.replace(event)) == hash(event)
    assert vars(event) == {f.name: getattr(event, f.name) for f in fields}
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.at = 3  # type: ignore[misc]


def test_a_decisions_own_init_takes_exactly_its_fields():
    # RunDecision sets its fields as one dict (the run machine makes one per request):
    # its hand-written __init__ must take every field, in order, with its default.
    params = list(inspect.signature(RunDecision.__init__).parameters.values())[1:]
    fields = dataclasses.fields(RunDecision)
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        assert param.default == default, field.name
    decision = RunDecision("run", None, 2, 5, 1)
    assert dataclasses.replace(decision) == decision
    assert hash(dataclasses.replace(decision)) == hash(decision)
    assert vars(decision) == {f.name: getattr(decision, f.name) for f in fields}
    assert decision.to_dict() == {
        "verdict": "run",
        "stop": None,
        "repeat": 2,
        "step": 5,
        "reservation": 1,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.step = 3  # type: ignore[misc]
