"""Run budgets and loop detection: every limit at its boundary, precedence, round trips."""

from __future__ import annotations

import copy
import decimal
import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core.run.budget import (
    DEFAULT_CLASSES,
    EVIDENCE_LIMIT,
    HISTORY_LIMIT,
    PRECEDENCE,
    STOP_CONDITIONS,
    TALLY_LIMIT,
    Action,
    Budget,
    ClassLimits,
    Decision,
    RunState,
    RunStateError,
    Stop,
    add_cost,
    admit,
    begin,
    check,
    finish,
    stop,
)
from toolbreaker.errors import PolicyError, ToolbreakerError

SEARCH = Action("search", "fp-search")
REFINE = Action("refine", "fp-refine")
FETCH = Action("fetch", "fp-fetch")
RANK = Action("rank", "fp-rank")
UPDATE = Action("update_ticket", "fp-update", risk="reversible_write")
SEND = Action("send_email", "fp-send", risk="irreversible")
STATUS = Action("ticket_status", "fp-status", recovery=True)

#: A budget whose class limits never bind, to test one run-wide limit at a time.
OPEN_CLASSES = {risk: ClassLimits() for risk in DEFAULT_CLASSES}


def done(
    run: RunState,
    action: Action,
    now: int = 0,
    *,
    evidence: str | None = None,
    outcome: Any = "success",
    cost: Any = None,
) -> RunState:
    """Begin and finish one action."""
    run = begin(run, action, now)
    return finish(run, action, outcome, now, evidence=evidence, cost=cost)


def allowed_run(
    budget: Budget, actions: Sequence[Action], *, evidence: Sequence[str | None] | None = None
) -> RunState:
    """Run actions through check, begin and finish, asserting each one is allowed."""
    run = RunState.start("task-1", 0)
    for i, action in enumerate(actions):
        decision = check(run, action, budget, i)
        assert decision.allowed, (i, decision)
        run = done(run, action, i, evidence=None if evidence is None else evidence[i])
    return run


def fresh(n: int) -> list[str]:
    """n distinct results: every call brings new evidence."""
    return [f"result-{i}" for i in range(n)]


# --- Budget: defaults and validation ------------------------------------------------------


def test_defaults_match_the_documented_table():
    """The defaults: generous reads, tight reversible writes, tighter irreversible ones."""
    assert Budget().to_dict() == {
        "max_tool_calls": 50,
        "max_repeats": 2,
        "max_cost": None,
        "deadline_ms": None,
        "max_uncertain_side_effects": 0,
        "loop_cycles": 3,
        "max_recovery_calls": 10,
        "classes": {
            "read": {"max_calls": 40, "max_repeats": None, "max_cost": None},
            "reversible_write": {"max_calls": 5, "max_repeats": 1, "max_cost": None},
            "irreversible": {"max_calls": 3, "max_repeats": 0, "max_cost": None},
        },
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tool_calls", 0),
        ("max_tool_calls", True),
        ("max_tool_calls", 1.5),
        ("max_tool_calls", "50"),
        ("max_repeats", -1),
        ("max_cost", 0),
        ("max_cost", 0.5),
        ("max_cost", "abc"),
        ("max_cost", "-1"),
        ("max_cost", "NaN"),
        ("max_cost", "Infinity"),
        ("max_cost", "1e18"),
        ("max_cost", "0.0000000000000000001"),
        ("max_cost", True),
        ("deadline_ms", 0),
        ("max_uncertain_side_effects", -1),
        ("loop_cycles", 1),
        ("loop_cycles", 9),
        ("max_recovery_calls", -1),
        ("classes", "read"),
    ],
)
def test_invalid_values_raise_naming_the_field(field, value):
    """Out-of-range, boolean, float and malformed values are refused with the field named."""
    with pytest.raises(PolicyError) as info:
        Budget(**{field: value})
    assert info.value.field == field
    assert field in str(info.value)


def test_a_float_cost_is_refused_with_a_hint():
    """A float cost is an error that says how to write it exactly."""
    with pytest.raises(PolicyError, match=r'"0.1" in quotes') as info:
        Budget(max_cost=0.1)  # type: ignore[arg-type]
    assert info.value.field == "max_cost"


def test_costs_accept_decimal_strings_and_integers():
    """max_cost takes a Decimal, a decimal string or an integer, all exactly."""
    assert Budget(max_cost="2.50").max_cost == Decimal("2.5")  # type: ignore[arg-type]
    assert Budget(max_cost=3).max_cost == Decimal(3)  # type: ignore[arg-type]
    assert Budget(max_cost=Decimal("0.1")).max_cost == Decimal("0.1")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_tool_call": 5}, "max_tool_call"),
        ({"classes": {"write": {}}}, "classes.write"),
        ({"classes": {"read": {"max_call": 5}}}, "classes.read.max_call"),
        ({"classes": {"read": {"max_calls": -1}}}, "classes.read.max_calls"),
        ({"classes": {"irreversible": {"max_repeats": False}}}, "classes.irreversible.max_repeats"),
        ({"classes": {"read": {"max_cost": 1.5}}}, "classes.read.max_cost"),
        ({"classes": {"read": 5}}, "classes.read"),
        ({"classes": []}, "classes"),
    ],
)
def test_from_dict_errors_name_the_dotted_field(data, field):
    """Unknown keys and invalid class limits are errors naming the dotted field."""
    with pytest.raises(PolicyError) as info:
        Budget.from_dict(data)
    assert info.value.field == field
    assert field in str(info.value)


def test_a_class_table_changes_only_the_keys_it_names():
    """From a dict, [classes.X] overrides the named keys and keeps the other defaults."""
    budget = Budget.from_dict({"classes": {"reversible_write": {"max_calls": 10}}})
    assert budget.classes["reversible_write"] == ClassLimits(max_calls=10, max_repeats=1)
    assert budget.classes["read"] == DEFAULT_CLASSES["read"]


def test_classes_left_out_keep_their_defaults():
    """Budget(classes=...) replaces the classes it names; the others keep the defaults."""
    budget = Budget(classes={"read": ClassLimits()})
    assert budget.classes["read"] == ClassLimits()
    assert budget.classes["irreversible"] == DEFAULT_CLASSES["irreversible"]
    assert list(budget.classes) == ["read", "reversible_write", "irreversible"]


def test_version_is_a_content_hash():
    """Equal budgets share a version ("1.50" equals "1.5"); any change alters it."""
    assert len(Budget().version) == 12
    assert Budget(max_cost="1.50").version == Budget(max_cost="1.5").version  # type: ignore[arg-type]
    assert Budget().version != Budget(max_repeats=3).version
    changed = Budget(classes={"irreversible": ClassLimits(max_calls=2)})
    assert Budget().version != changed.version


def test_budget_is_hashable_and_immutable():
    """A budget can key a dict, and its classes cannot be changed in place."""
    assert hash(Budget()) == hash(Budget())
    with pytest.raises(TypeError):
        Budget().classes["read"] = ClassLimits()  # type: ignore[index]


def test_toml_loads_top_level_fields_and_class_tables(tmp_path: Path):
    """Top-level keys are fields and [classes.<risk>] tables are class limits."""
    path = tmp_path / "budget.toml"
    path.write_text(
        'max_tool_calls = 20\nmax_cost = "2.50"\ndeadline_ms = 60000\n'
        "[classes.irreversible]\nmax_calls = 1\n"
    )
    budget = Budget.from_toml(path)
    assert budget.max_tool_calls == 20
    assert budget.max_cost == Decimal("2.5")
    assert budget.deadline_ms == 60_000
    assert budget.classes["irreversible"] == ClassLimits(max_calls=1, max_repeats=0)


def test_toml_error_in_a_class_table_names_file_and_line(tmp_path: Path):
    """An invalid class limit is reported with the file and the line of its key."""
    path = tmp_path / "budget.toml"
    path.write_text("max_tool_calls = 20\n\n[classes.read]\nmax_calls = 10\nmax_repeats = -2\n")
    with pytest.raises(PolicyError) as info:
        Budget.from_toml(path)
    assert (info.value.file, info.value.line) == (str(path), 5)
    assert info.value.field == "classes.read.max_repeats"
    assert str(info.value).startswith(f"{path}:5: classes.read.max_repeats")


def test_toml_float_cost_names_file_and_line(tmp_path: Path):
    """A TOML float cost is refused at its line: binary rounding has no place in money."""
    path = tmp_path / "budget.toml"
    path.write_text("max_tool_calls = 20\nmax_cost = 0.1\n")
    with pytest.raises(PolicyError) as info:
        Budget.from_toml(path)
    assert (info.value.line, info.value.field) == (2, "max_cost")


# --- call limits --------------------------------------------------------------------------


def test_the_nth_call_is_allowed_and_the_next_denied():
    """With max_tool_calls=N, call N is allowed and call N+1 is denied."""
    budget = Budget(max_tool_calls=3, classes=OPEN_CLASSES)
    run = allowed_run(budget, [SEARCH, REFINE, FETCH])
    decision = check(run, RANK, budget, 10)
    assert not decision.allowed
    assert decision.stop == Stop(
        "max-tool-calls", "tool call 4 exceeds max_tool_calls=3", 10, "read", "fp-rank"
    )


def test_a_class_limit_binds_before_the_total():
    """The sixth reversible write is denied by its class while reads go on."""
    writes = [Action("update_ticket", f"fp-update-{i}", risk="reversible_write") for i in range(6)]
    budget = Budget()
    run = allowed_run(budget, writes[:5], evidence=fresh(5))
    decision = check(run, writes[5], budget, 10)
    assert decision.stop is not None
    assert decision.stop.condition == "class-max-calls"
    assert decision.stop.detail == (
        "reversible_write call 6 (update_ticket) exceeds classes.reversible_write.max_calls=5"
    )
    assert check(run, SEARCH, budget, 10).allowed


def test_the_total_binds_across_classes():
    """Calls of every class count toward max_tool_calls."""
    budget = Budget(max_tool_calls=3, classes=OPEN_CLASSES)
    run = allowed_run(budget, [SEARCH, UPDATE, SEND], evidence=fresh(3))
    assert dict(run.class_calls) == {"read": 1, "reversible_write": 1, "irreversible": 1}
    decision = check(run, REFINE, budget, 5)
    assert decision.stop is not None
    assert decision.stop.condition == "max-tool-calls"


def test_the_total_wins_when_both_are_crossed():
    """When the class and the total limit are crossed together, the stop names the total."""
    budget = Budget(max_tool_calls=2, classes={"read": ClassLimits(max_calls=2)})
    run = allowed_run(budget, [SEARCH, REFINE])
    decision = check(run, FETCH, budget, 5)
    assert decision.stop is not None
    assert decision.stop.condition == "max-tool-calls"


def test_a_class_limit_of_zero_forbids_the_class():
    """classes.irreversible.max_calls=0 makes the run unable to do irreversible things."""
    budget = Budget(classes={"irreversible": ClassLimits(max_calls=0)})
    decision = check(RunState.start("t", 0), SEND, budget, 0)
    assert decision.stop is not None
    assert decision.stop.detail == (
        "irreversible call 1 (send_email) exceeds classes.irreversible.max_calls=0"
    )


# --- repeats ------------------------------------------------------------------------------


def test_repeats_up_to_max_repeats_are_allowed_and_the_next_denied():
    """A read that keeps returning the same result: repeat 2 is allowed, repeat 3 denied."""
    budget = Budget()
    run = allowed_run(budget, [SEARCH] * 4, evidence=["same"] * 4)
    assert run.tallies[-1].repeats == 2
    decision = check(run, SEARCH, budget, 9)
    assert (decision.allowed, decision.repeat) == (False, 3)
    assert decision.stop is not None
    assert decision.stop.condition == "repeated-action"
    assert decision.stop.detail == "search repeated 3 times without new evidence (max_repeats=2)"


def test_a_writes_own_result_does_not_license_writing_again():
    """A write that returned a fresh receipt is a repeat when it comes back right away."""
    run = done(RunState.start("t", 0), UPDATE, evidence="ticket 17 updated")
    assert check(run, UPDATE, Budget(), 1).repeat == 1


def test_a_reads_own_new_result_licenses_reading_again():
    """A read whose result was new may run again; once its result stops changing it repeats."""
    run = done(RunState.start("t", 0), STATUS, evidence="pending")
    assert check(run, STATUS, Budget(), 1).repeat == 0
    run = done(run, STATUS, 1, evidence="pending")
    assert check(run, STATUS, Budget(), 2).repeat == 1


def test_new_evidence_resets_the_repeat_count():
    """An action whose every run brings a new result is never a repeat."""
    budget = Budget(classes=OPEN_CLASSES)
    run = allowed_run(budget, [SEARCH] * 10, evidence=fresh(10))
    assert check(run, SEARCH, budget, 10).repeat == 0


def test_evidence_from_another_action_counts():
    """New evidence from any action since the last occurrence means it is not a repeat."""
    run = done(RunState.start("t", 0), SEARCH, evidence="a")
    run = done(run, REFINE, evidence="b")
    assert check(run, SEARCH, Budget(), 2).repeat == 0


def test_a_failure_retried_without_new_evidence_is_a_repeat():
    """Failures bring no evidence, so retrying a failing call counts repeats."""
    run = done(RunState.start("t", 0), UPDATE, outcome="failure")
    run = done(run, UPDATE, outcome="failure")
    decision = check(run, UPDATE, Budget(), 2)
    assert decision.repeat == 2
    assert decision.stop is not None
    assert decision.stop.detail == (
        "update_ticket repeated 2 times without new evidence "
        "(classes.reversible_write.max_repeats=1)"
    )


def test_a_class_repeat_limit_wins_over_the_budget_one():
    """Irreversible actions allow 0 repeats although the budget allows 2."""
    budget = Budget()
    run = done(RunState.start("t", 0), SEND, evidence="sent")
    decision = check(run, SEND, budget, 1)
    assert decision.stop is not None
    assert decision.stop.condition == "repeated-action"
    assert decision.stop.detail.endswith("(classes.irreversible.max_repeats=0)")
    read = done(RunState.start("t", 0), SEARCH, evidence="found")
    read = done(read, SEARCH, 1, evidence="found")
    assert check(read, SEARCH, budget, 2) == Decision(allowed=True, repeat=1)


def test_an_allowed_decision_still_reports_the_repeat():
    """Decision.repeat is reported for transparency even when the action may run."""
    run = done(RunState.start("t", 0), UPDATE, evidence="x")
    assert check(run, UPDATE, Budget(), 1) == Decision(allowed=True, repeat=1)


# --- loops --------------------------------------------------------------------------------


def test_alternation_without_new_evidence_is_a_loop_after_two_cycles():
    """A-B-A-B with nothing new on the second pass stops at the second B."""
    budget = Budget()
    run = allowed_run(budget, [SEARCH, REFINE, SEARCH], evidence=["a", "b", "a"])
    decision = check(run, REFINE, budget, 3)
    assert decision.stop is not None
    assert decision.stop.condition == "loop"
    assert decision.stop.detail == "cycle [search, refine] repeated 2 times without new evidence"


def test_alternation_with_new_evidence_is_a_loop_after_loop_cycles():
    """A-B alternation that keeps finding new things stops at the loop_cycles-th cycle."""
    budget = Budget()
    run = allowed_run(budget, [SEARCH, REFINE] * 2 + [SEARCH], evidence=fresh(5))
    decision = check(run, REFINE, budget, 5)
    assert decision.stop is not None
    assert decision.stop.detail == "cycle [search, refine] repeated 3 times (loop_cycles=3)"


def test_a_three_cycle_is_a_loop():
    """A-B-C-A-B-C without new evidence is a loop."""
    budget = Budget()
    run = allowed_run(budget, [SEARCH, REFINE, FETCH, SEARCH, REFINE], evidence=list("abcab"))
    decision = check(run, FETCH, budget, 5)
    assert decision.stop is not None
    assert decision.stop.detail == (
        "cycle [search, refine, fetch] repeated 2 times without new evidence"
    )


def test_a_four_cycle_is_a_loop():
    """A-B-C-D repeated loop_cycles times is a loop even with new evidence."""
    budget = Budget(loop_cycles=2)
    cycle = [SEARCH, REFINE, FETCH, RANK]
    run = allowed_run(budget, cycle + cycle[:3], evidence=fresh(7))
    decision = check(run, RANK, budget, 7)
    assert decision.stop is not None
    assert decision.stop.detail == (
        "cycle [search, refine, fetch, rank] repeated 2 times (loop_cycles=2)"
    )


def test_aabb_is_not_a_cycle():
    """A-A-B-B repeated is not a cycle of distinct actions, even with loop_cycles=2."""
    budget = Budget(loop_cycles=2, classes=OPEN_CLASSES)
    run = allowed_run(budget, [SEARCH, SEARCH, REFINE, REFINE] * 3, evidence=fresh(12))
    assert run.calls == 12


def test_a_cycle_broken_by_another_action_is_not_a_loop():
    """Repetitions must be in a row: A-B-C-A-B is not two cycles of [A, B]."""
    budget = Budget()
    run = allowed_run(budget, [SEARCH, REFINE, FETCH, SEARCH], evidence=list("abca"))
    assert check(run, REFINE, budget, 4).allowed


# --- stops and recovery -------------------------------------------------------------------


def test_a_stopped_run_allows_recovery_reads_and_denies_the_rest():
    """After a stop, a recovery read runs; writes and ordinary reads get the original stop."""
    halt = Stop("operator", "stopped by an operator", 5)
    run = stop(RunState.start("t", 0), halt)
    budget = Budget()
    assert check(run, STATUS, budget, 6).allowed
    for action in (UPDATE, SEND, SEARCH, Action("undo", "fp-undo", "irreversible", True)):
        assert check(run, action, budget, 6) == Decision(allowed=False, stop=halt)


def test_recovery_reads_after_a_stop_are_bounded():
    """At most max_recovery_calls recovery reads run after a stop."""
    budget = Budget(max_recovery_calls=2)
    run = stop(RunState.start("t", 0), Stop("operator", "halt", 0))
    for i in range(2):
        assert check(run, STATUS, budget, i).allowed
        run = done(run, STATUS, i, evidence=f"status-{i}")
    assert not check(run, STATUS, budget, 3).allowed
    assert run.recovery_calls == 2


def test_a_recovery_read_runs_after_the_budget_is_exhausted():
    """A run stopped by max-tool-calls can still check a status."""
    budget = Budget(max_tool_calls=1)
    run = allowed_run(budget, [SEARCH])
    decision = check(run, REFINE, budget, 1)
    assert decision.stop is not None
    run = stop(run, decision.stop)
    assert check(run, STATUS, budget, 2).allowed


def test_the_first_stop_wins():
    """stop() keeps the first stop and drops later ones."""
    first = Stop("deadline", "late", 1)
    run = stop(stop(RunState.start("t", 0), first), Stop("operator", "halt", 2))
    assert run.stopped == first


def test_an_unknown_condition_is_refused():
    """A Stop's condition must be one of the documented set."""
    with pytest.raises(RunStateError) as info:
        Stop("tired", "no", 0)
    assert info.value.field == "condition"
    assert set(PRECEDENCE) < set(STOP_CONDITIONS)


# --- uncertain side effects ---------------------------------------------------------------


def test_one_unknown_write_blocks_writes_but_not_reads():
    """With the default 0, one unknown write outcome denies every further write; reads run."""
    budget = Budget()
    run = done(RunState.start("t", 0), UPDATE, outcome="unknown")
    assert run.uncertain == 1
    decision = check(run, SEND, budget, 1)
    assert decision.stop is not None
    assert decision.stop.condition == "uncertain-side-effect"
    assert decision.stop.detail == (
        "1 write with unknown outcome, more than max_uncertain_side_effects=0: "
        "send_email (irreversible) may not run until reconciled"
    )
    assert check(run, SEARCH, budget, 1).allowed


def test_an_unknown_read_is_not_a_side_effect():
    """A read with an unknown outcome changes nothing outside, so it is not counted."""
    run = done(RunState.start("t", 0), SEARCH, outcome="unknown")
    assert run.uncertain == 0


def test_tolerated_unknown_writes_are_counted_to_the_boundary():
    """With max_uncertain_side_effects=1, the first unknown write is tolerated, not the second."""
    budget = Budget(max_uncertain_side_effects=1)
    writes = [Action("update_ticket", f"fp-u{i}", risk="reversible_write") for i in range(3)]
    run = done(RunState.start("t", 0), writes[0], outcome="unknown")
    assert check(run, writes[1], budget, 1).allowed
    run = done(run, writes[1], 1, outcome="unknown")
    assert not check(run, writes[2], budget, 2).allowed


# --- cost ---------------------------------------------------------------------------------


def test_cost_below_the_limit_runs_and_reaching_it_stops():
    """Spent cost equal to max_cost denies the next call; a cent less does not."""
    budget = Budget(max_cost="1.00", classes=OPEN_CLASSES)  # type: ignore[arg-type]
    run = RunState.start("t", 0)
    for i in range(10):
        assert check(run, SEARCH, budget, i).allowed
        run = done(run, SEARCH, i, evidence=str(i), cost="0.10")
    assert run.cost == Decimal("1.00")
    decision = check(run, SEARCH, budget, 10)
    assert decision.stop is not None
    assert decision.stop.detail == "cost 1 reaches max_cost=1"


def test_a_class_cost_limit_denies_only_that_class():
    """classes.irreversible.max_cost stops irreversible calls; reads go on."""
    budget = Budget(classes={"irreversible": ClassLimits(max_cost=Decimal(5))})
    run = done(RunState.start("t", 0), SEND, evidence="sent", cost=Decimal("5"))
    assert run.class_cost["irreversible"] == Decimal(5)
    other = Action("wire_money", "fp-wire", risk="irreversible")
    decision = check(run, other, budget, 1)
    assert decision.stop is not None
    assert decision.stop.condition == "class-max-cost"
    assert decision.stop.detail == "irreversible cost 5 reaches classes.irreversible.max_cost=5"
    assert check(run, SEARCH, budget, 1).allowed


def test_a_model_step_cost_counts_toward_the_total_only():
    """add_cost without a risk class raises the total and no class."""
    run = add_cost(RunState.start("t", 0), "0.25")
    run = add_cost(run, 1, risk="read")
    assert run.cost == Decimal("1.25")
    assert run.class_cost == {
        "read": Decimal(1),
        "reversible_write": Decimal(0),
        "irreversible": Decimal(0),
    }


@pytest.mark.parametrize("amount", [0.1, -1, "NaN", "abc", True, "1e18"])
def test_an_invalid_cost_is_refused(amount):
    """Floats, negative, non-finite and non-numeric costs raise a typed error."""
    with pytest.raises(RunStateError) as info:
        add_cost(RunState.start("t", 0), amount)
    assert info.value.field == "cost"
    assert isinstance(info.value, ToolbreakerError)


def test_costs_add_exactly_whatever_the_decimal_context():
    """Costs never round, even under a thread context with 3 digits of precision."""
    with decimal.localcontext(decimal.Context(prec=3)):
        run = add_cost(RunState.start("t", 0), "1000.01")
        run = add_cost(run, "0.001")
    assert run.cost == Decimal("1000.011")


# --- deadline -----------------------------------------------------------------------------


def test_deadline_boundary():
    """With deadline_ms=500 from a start at 1000, 1499 is allowed and 1500 denied."""
    budget = Budget(deadline_ms=500)
    run = RunState.start("t", 1000)
    assert check(run, SEARCH, budget, 1499).allowed
    decision = check(run, SEARCH, budget, 1500)
    assert decision.stop == Stop(
        "deadline",
        "500 ms since the run started reaches deadline_ms=500",
        1500,
        "read",
        "fp-search",
    )


def test_time_before_the_start_is_refused():
    """A time before the run's start is an error, not a shorter elapsed time."""
    with pytest.raises(RunStateError) as info:
        check(RunState.start("t", 1000), SEARCH, Budget(), 999)
    assert info.value.field == "now"


# --- precedence ---------------------------------------------------------------------------


def _everything_crossed() -> tuple[RunState, Action]:
    """A run where the next write crosses every limit of the full budget below at once."""
    run = RunState.start("t", 0)
    run = done(run, SEARCH, 0, evidence="a")
    run = done(run, UPDATE, 1, evidence="w", outcome="unknown", cost="1")
    run = done(run, SEARCH, 2, evidence="a")
    return run, UPDATE


FULL = Budget(
    max_tool_calls=3,
    max_cost=Decimal(1),
    deadline_ms=100,
    classes={"reversible_write": ClassLimits(max_calls=1, max_repeats=0, max_cost=Decimal(1))},
)
RELAX = [
    ("deadline", {"deadline_ms": None}),
    ("uncertain-side-effect", {"max_uncertain_side_effects": 1}),
    ("max-cost", {"max_cost": None}),
    ("class-max-cost", {"classes": {"reversible_write": ClassLimits(max_calls=1, max_repeats=0)}}),
    ("max-tool-calls", {"max_tool_calls": 50}),
    ("class-max-calls", {"classes": {"reversible_write": ClassLimits(max_repeats=0)}}),
    ("loop", {}),
]


def test_precedence_when_every_limit_is_crossed_at_once():
    """Relaxing the winning limit each time reveals the documented order."""
    run, action = _everything_crossed()
    budget = FULL
    seen = []
    for expected, relaxed in RELAX:
        decision = check(run, action, budget, 100)
        assert decision.stop is not None
        seen.append(decision.stop.condition)
        assert decision.stop.condition == expected
        budget = Budget(**{**_fields(budget), **relaxed})
    assert seen == list(PRECEDENCE[:-1])
    # The repeat limit was crossed too (repeat 1 > 0), yet the loop was named.
    assert check(run, action, FULL, 100).repeat == 1


def test_an_earlier_stop_outranks_everything():
    """A stopped run answers with its stop, whatever else is crossed."""
    run, action = _everything_crossed()
    halt = Stop("operator", "halt", 50)
    assert check(stop(run, halt), action, FULL, 100).stop == halt


def _fields(budget: Budget) -> dict[str, Any]:
    return {
        "max_tool_calls": budget.max_tool_calls,
        "max_repeats": budget.max_repeats,
        "max_cost": budget.max_cost,
        "deadline_ms": budget.deadline_ms,
        "max_uncertain_side_effects": budget.max_uncertain_side_effects,
        "loop_cycles": budget.loop_cycles,
        "max_recovery_calls": budget.max_recovery_calls,
        "classes": budget.classes,
    }


# --- consistency, admission, bounds -------------------------------------------------------


def test_the_stop_detail_matches_the_recorded_counters():
    """The numbers in a stop's detail agree with the counters of the stopped run."""
    budget = Budget(max_tool_calls=4, classes=OPEN_CLASSES)
    run = allowed_run(budget, [SEARCH, REFINE, FETCH, RANK], evidence=fresh(4))
    decision = check(run, SEARCH, budget, 9)
    assert decision.stop is not None
    run = stop(run, decision.stop)
    counters = run.counters()
    assert counters["calls"] == 4
    assert decision.stop.detail == f"tool call {counters['calls'] + 1} exceeds max_tool_calls=4"
    assert counters["stopped"] == decision.stop.to_dict()


def test_admit_begins_only_an_allowed_action():
    """admit() is check() then begin() when allowed, and leaves a denied run unchanged."""
    budget = Budget(max_tool_calls=1)
    run = RunState.start("t", 0)
    decision, after = admit(run, SEARCH, budget, 0)
    assert decision.allowed
    assert after == begin(run, SEARCH, 0)
    decision, again = admit(after, REFINE, budget, 1)
    assert not decision.allowed
    assert again is after


def test_evidence_digests_are_bounded_and_counted():
    """Distinct results keep counting while only the last EVIDENCE_LIMIT digests are kept."""
    run = RunState.start("t", 0)
    for i in range(EVIDENCE_LIMIT + 44):
        run = finish(run, SEARCH, "success", 0, evidence=f"r{i}")
    assert run.evidence == EVIDENCE_LIMIT + 44
    assert len(run.digests) == EVIDENCE_LIMIT
    seen = finish(run, SEARCH, "success", 0, evidence=f"r{EVIDENCE_LIMIT + 43}")
    assert seen.evidence == run.evidence


def test_history_and_tallies_are_bounded():
    """However long the run, the history and the tallies stay within their limits."""
    run = RunState.start("t", 0)
    for i in range(TALLY_LIMIT + 10):
        run = begin(run, Action("t", f"fp-{i}"), 0)
    assert len(run.history) == HISTORY_LIMIT
    assert len(run.tallies) == TALLY_LIMIT
    assert run.tallies[-1].fingerprint == f"fp-{TALLY_LIMIT + 9}"


def test_raw_results_never_reach_the_state():
    """Evidence is hashed again, so a raw result handed in as evidence is not journaled."""
    run = finish(RunState.start("t", 0), SEARCH, "success", 0, evidence="card 4111-1111")
    assert "4111" not in json.dumps(run.to_dict())


def test_finish_refuses_an_unknown_outcome():
    """An outcome outside the documented four is an error."""
    with pytest.raises(RunStateError) as info:
        finish(RunState.start("t", 0), SEARCH, "timeout", 0)  # type: ignore[arg-type]
    assert info.value.field == "outcome"


def test_a_decision_carries_a_stop_exactly_when_it_denies():
    """Decision refuses an allowed decision with a stop and a denial without one."""
    with pytest.raises(RunStateError):
        Decision(allowed=True, stop=Stop("operator", "halt", 0))
    with pytest.raises(RunStateError):
        Decision(allowed=False)


def test_an_action_with_an_unknown_risk_class_is_refused():
    """Action validates its risk class at construction."""
    with pytest.raises(RunStateError) as info:
        Action("x", "fp", risk="write")  # type: ignore[arg-type]
    assert info.value.field == "risk"


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
        ("tallies.0.repeats", 5, "tallies[0].occurrences"),
        ("tallies.0.surprise", 1, "tallies[0]"),
        (
            "tallies",
            [{"fingerprint": "x", "occurrences": 1, "evidence": 0, "repeats": 0}] * 2,
            "tallies",
        ),
        ("history.0.evidence", 50, "history[0].evidence"),
        ("history", [{"tool": "t", "fingerprint": "f", "evidence": 0}] * 33, "history"),
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


def test_from_dict_refuses_a_non_object():
    """A run state must be a JSON object."""
    with pytest.raises(RunStateError):
        RunState.from_dict([1, 2])


# --- properties ---------------------------------------------------------------------------

_TOOLS = ("search", "refine", "fetch", "update", "send")
actions = st.builds(
    lambda tool, risk, recovery: Action(tool, f"{tool}/{risk}", risk, recovery),
    tool=st.sampled_from(_TOOLS),
    risk=st.sampled_from(("read", "reversible_write", "irreversible")),
    recovery=st.booleans(),
)
steps = st.tuples(
    actions,
    st.sampled_from(("success", "failure", "unknown", "ignored")),
    st.one_of(st.none(), st.sampled_from(("r1", "r2", "r3", "r4"))),
    st.one_of(st.none(), st.sampled_from(("0.5", "1", "0.001"))),
    st.integers(0, 40),
)
limits = st.builds(
    ClassLimits,
    max_calls=st.one_of(st.none(), st.integers(0, 8)),
    max_repeats=st.one_of(st.none(), st.integers(0, 2)),
    max_cost=st.one_of(st.none(), st.sampled_from((Decimal(1), Decimal("2.5")))),
)
budgets = st.builds(
    Budget,
    max_tool_calls=st.integers(1, 12),
    max_repeats=st.integers(0, 3),
    max_cost=st.one_of(st.none(), st.sampled_from((Decimal(2), Decimal("7.5")))),
    deadline_ms=st.one_of(st.none(), st.integers(50, 600)),
    max_uncertain_side_effects=st.integers(0, 2),
    loop_cycles=st.integers(2, 4),
    max_recovery_calls=st.integers(0, 3),
    classes=st.fixed_dictionaries(
        {}, optional=dict.fromkeys(("read", "reversible_write", "irreversible"), limits)
    ),
)


def drive(
    budget: Budget, plan: Sequence[tuple[Any, ...]], *, record_stops: bool
) -> tuple[RunState, list[tuple[Decision, Action, bool]]]:
    """Feed a plan through check/begin/finish like a run guard; return what was decided."""
    run = RunState.start("prop", 0)
    now = 0
    decided = []
    for action, outcome, evidence, cost, dt in plan:
        now += dt
        was_stopped = run.stopped is not None
        decision = check(run, action, budget, now)
        decided.append((decision, action, was_stopped))
        if decision.allowed:
            run = begin(run, action, now)
            run = finish(run, action, outcome, now, evidence=evidence, cost=cost)
        elif record_stops:
            assert decision.stop is not None
            run = stop(run, decision.stop)
        assert RunState.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    return run, decided


@given(budget=budgets, before=st.lists(steps, max_size=15), after=st.lists(steps, max_size=15))
def test_property_a_stopped_run_allows_only_recovery_reads(budget, before, after):
    """Whatever happened before, a stopped run never allows anything but a recovery read."""
    run, _ = drive(budget, before, record_stops=True)
    run = stop(run, Stop("operator", "halt", 10_000))
    for action, outcome, evidence, cost, _ in after:
        decision = check(run, action, budget, 10_000)
        if not (action.recovery and action.risk == "read"):
            assert not decision.allowed
            assert decision.stop == run.stopped
        if decision.allowed:
            run = done(run, action, 10_000, outcome=outcome, evidence=evidence, cost=cost)


@given(budget=budgets, plan=st.lists(steps, max_size=40))
def test_property_allowed_calls_never_exceed_max_tool_calls(budget, plan):
    """Without recorded stops, at most max_tool_calls calls are ever allowed."""
    run, decided = drive(budget, plan, record_stops=False)
    assert sum(d.allowed for d, _, _ in decided) <= budget.max_tool_calls
    assert run.calls <= budget.max_tool_calls


@given(budget=budgets, plan=st.lists(steps, max_size=40))
def test_property_only_bounded_recovery_reads_run_beyond_the_budget(budget, plan):
    """With stops recorded, calls beyond max_tool_calls are recovery reads, at most
    max_recovery_calls of them, all after the stop."""
    _, decided = drive(budget, plan, record_stops=True)
    before = [d for d, _, stopped in decided if d.allowed and not stopped]
    after = [(d, a) for d, a, stopped in decided if d.allowed and stopped]
    assert len(before) <= budget.max_tool_calls
    assert len(after) <= budget.max_recovery_calls
    assert all(a.recovery and a.risk == "read" for _, a in after)


@given(budget=budgets, plan=st.lists(steps, max_size=20), action=actions, dt=st.integers(0, 99))
def test_property_check_is_pure(budget, plan, action, dt):
    """check gives the same answer twice and changes neither the run nor the budget."""
    run, _ = drive(budget, plan, record_stops=True)
    run_before, budget_before = copy.deepcopy(run), copy.deepcopy(budget)
    now = run.started_at + sum(step[-1] for step in plan) + dt
    first = check(run, action, budget, now)
    assert check(run, action, budget, now) == first
    assert run == run_before
    assert run.to_dict() == run_before.to_dict()
    assert budget == budget_before
