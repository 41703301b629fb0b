"""A run's state round trips through JSON, and an invalid one is refused naming its field."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from budget_helpers import SEARCH, STATUS, UPDATE, done

from toolbreaker.core._run.budget import RunState, RunStateError, Stop
from toolbreaker.core._run.limits import add_cost, stop

# --- RunState round trip ------------------------------------------------------------------


def _busy_run() -> RunState:
    run = RunState.start("task-42", 100)
    run = done(run, SEARCH, 110, evidence="a", cost="0.25")
    run = done(run, SEARCH, 120, evidence="a")
    run = done(run, UPDATE, 130, outcome="unknown", cost=Decimal("1.10"))
    run = add_cost(run, "0.005")
    run = stop(run, Stop("uncertain-side-effect", "detail", 140, "irreversible", "fp-send"))
    return done(run, STATUS, 150, evidence="status")


def test_run_state_round_trips_through_json():
    """to_dict → JSON → from_dict gives an equal state, Decimals kept exact."""
    run = _busy_run()
    data = json.loads(json.dumps(run.to_dict()))
    assert data["cost"] == "1.355"
    assert RunState.from_dict(data) == run
    assert RunState.from_dict(data).to_dict() == run.to_dict()


def _broken(path: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(_busy_run().to_dict()))
    target = data
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is _DELETE:
        del target[last]
    else:
        target[int(last) if isinstance(target, list) else last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("schema", "toolbreaker.run/v0", "schema"),
        ("calls", _DELETE, "calls"),
        ("extra", 1, "extra"),
        ("task", "", "task"),
        ("calls", True, "calls"),
        ("calls", -1, "calls"),
        ("calls", 99, "class_calls"),
        ("class_calls.read", "2", "class_calls.read"),
        ("class_calls.write", 0, "class_calls"),
        ("cost", 1.355, "cost"),
        ("cost", "lots", "cost"),
        ("cost", "0.01", "class_cost"),
        ("class_cost.read", "-1", "class_cost.read"),
        ("digests.0", "not-a-digest", "digests[0]"),
        ("digests", ["0" * 16, "0" * 16], "digests"),
        ("evidence", 0, "digests"),
        ("tallies.0.3", 5, "tallies[0].occurrences"),  # repeats: a row's fourth
        ("tallies.0", ["x", 1, 0, 0, 1], "tallies[0]"),
        (
            "tallies.0",
            {"fingerprint": "x", "occurrences": 1, "evidence": 0, "repeats": 0},
            "tallies[0]",
        ),
        ("tallies", [["x", 1, 0, 0]] * 2, "tallies"),
        ("history.0.2", 50, "history[0].evidence"),
        ("history.0", ["t", "f"], "history[0]"),
        ("history.1.1", "", "history[1].fingerprint"),  # an item after a good one
        ("history.1", ["t"], "history[1]"),
        ("history", [["t", "f", 0]] * 33, "history"),
        ("stopped.condition", "tired", "stopped.condition"),
        ("stopped", "yes", "stopped"),
        ("recovery_calls", 5, "recovery_calls"),
        ("stopped", None, "recovery_calls"),
        ("digests", "0" * 16, "digests"),
        ("history", {}, "history"),
    ],
)
def test_from_dict_refuses_invalid_state_naming_the_field(path, value, field):
    """An invalid run state raises RunStateError naming the place; nothing is defaulted."""
    with pytest.raises(RunStateError) as info:
        RunState.from_dict(_broken(path, value))
    assert info.value.field == field


def test_a_state_written_before_v3_loads_equal():
    """v2 wrote the history and the tallies as objects; such a record (a shared run
    written by the previous release) loads to the same state, and is written back as v3."""
    run = _busy_run()
    data = json.loads(json.dumps(run.to_dict()))
    assert data["schema"] == "toolbreaker.run/v3"
    assert data["tallies"][0] == [
        run.tallies[0].fingerprint,
        run.tallies[0].occurrences,
        run.tallies[0].evidence,
        run.tallies[0].repeats,
    ]
    fields = {
        "history": ("tool", "fingerprint", "evidence"),
        "tallies": ("fingerprint", "occurrences", "evidence", "repeats"),
    }
    objects = {
        name: [dict(zip(keys, row, strict=True)) for row in data[name]]
        for name, keys in fields.items()
    }
    old = {**data, "schema": "toolbreaker.run/v2", **objects}
    assert RunState.from_dict(old) == run
    with pytest.raises(RunStateError) as info:  # rows under v2: the schema says objects
        RunState.from_dict({**data, "schema": "toolbreaker.run/v2"})
    assert info.value.field in {"history[0]", "tallies[0]"}


def test_from_dict_refuses_a_non_object():
    """A run state must be a JSON object."""
    with pytest.raises(RunStateError):
        RunState.from_dict([1, 2])


# --- how a transition makes the next state ---------------------------------------------------


def test_a_transition_keeps_the_state_a_checked_constructor_would_build():
    """Transitions build the next state without checking it again; what they build is
    exactly what the checked constructor and ``from_dict`` accept and rebuild."""
    run = _busy_run()
    assert RunState(**{f: getattr(run, f) for f in run.__dataclass_fields__}) == run
    assert RunState.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_tallies_and_digests_read_as_tuples_and_are_found_by_key():
    """A state's tallies and digests are sequences equal to the tuples they were built
    from (oldest first); a tally is found by its fingerprint, a digest by itself."""
    run = _busy_run()
    tallies = tuple(run.tallies)
    assert run.tallies == tallies
    assert run.tallies[-1] == tallies[-1]
    assert repr(run.tallies) == repr(tallies)
    assert run.tallies.get(tallies[0].fingerprint) is tallies[0]
    assert run.tallies.get("no-such-fingerprint") is None
    assert run.digests.holds(run.digests[0])
    built = RunState(task="t", started_at=0, evidence=5, tallies=tallies, digests=("a", "b"))
    assert built.tallies == tallies
    assert built.digests == ("a", "b")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tallies", "twice"),
        ("digests", ("a", "a")),
        ("tallies", ("not a tally",)),
        ("digests", [1]),
    ],
)
def test_the_constructor_refuses_tallies_or_digests_it_could_not_key(field, value):
    """A fingerprint twice among the tallies (or a digest twice), or items of the wrong
    kind, are refused where the state is built, naming the field."""
    run = _busy_run()
    if value == "twice":
        value = (run.tallies[0], run.tallies[0])
    with pytest.raises(RunStateError) as info:
        RunState(task="t", started_at=0, evidence=5, **{field: value})
    assert info.value.field == field


def test_a_transition_names_only_fields_a_state_has():
    """``changed`` (how the core's transitions make the next state) refuses a field the
    state does not have, rather than keeping it unseen."""
    from toolbreaker.core._run.state import changed

    with pytest.raises(TypeError, match="callz"):
        changed(RunState.start("t", 0), callz=1)


def test_begin_checks_what_its_caller_hands_it():
    """``begin``'s ``steps`` and ``also`` come from its caller, not from checked values:
    a state they would make invalid is refused, naming the field."""
    from toolbreaker.core._run.limits import begin

    run = RunState.start("t", 0)
    with pytest.raises(RunStateError) as info:
        begin(run, SEARCH, 1, steps=-1)
    assert info.value.field == "steps"
    with pytest.raises(RunStateError) as info:
        begin(run, SEARCH, 1, also={"uncertain": 1.5})
    assert info.value.field == "uncertain"
