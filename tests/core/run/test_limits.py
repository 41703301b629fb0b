"""Run limits and loop detection: every limit at its boundary, precedence, stops, bounds.

The properties at the end drive random runs through ``check``, ``begin`` and ``finish``.
"""

from __future__ import annotations

import copy
import decimal
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from budget_helpers import (
    FETCH,
    OPEN_CLASSES,
    RANK,
    REFINE,
    SEARCH,
    SEND,
    STATUS,
    UPDATE,
    allowed_run,
    done,
    fresh,
)
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._run.budget import (
    EVIDENCE_LIMIT,
    HISTORY_LIMIT,
    PRECEDENCE,
    STOP_CONDITIONS,
    TALLY_LIMIT,
    Action,
    Budget,
    ClassLimits,
    RunState,
    RunStateError,
    Stop,
)
from toolbreaker.core._run.limits import (
    DIGEST_DIGITS,
    Decision,
    add_cost,
    admit,
    begin,
    check,
    finish,
    stop,
)
from toolbreaker.errors import ToolbreakerError

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


PYTEST = Action("bash", "fp-pytest")
EDIT = Action("bash", "fp-sed-i", risk="reversible_write")


def test_a_write_in_between_is_new_evidence():
    """Issue 33, item 4: an edit between two identical test runs is new evidence: the
    rerun follows a change of the world, although it prints the same thing."""
    run = done(RunState.start("t", 0), PYTEST, evidence="1 failed")
    run = done(run, PYTEST, 1, evidence="1 failed")
    assert check(run, PYTEST, Budget(), 2).repeat == 1  # nothing changed: a repeat
    run = done(run, EDIT, 2)  # an edit that prints nothing
    assert check(run, PYTEST, Budget(), 3).repeat == 0
    run = done(run, PYTEST, 3, evidence="1 failed")
    assert check(run, PYTEST, Budget(), 4).repeat == 1  # nothing changed since


def test_an_unknown_write_in_between_is_new_evidence():
    """A write whose outcome is unknown may have changed the world: new evidence too."""
    run = done(RunState.start("t", 0), PYTEST)
    run = done(run, EDIT, 1, outcome="unknown")
    assert check(run, PYTEST, Budget(), 2).repeat == 0
    assert check(done(RunState.start("t", 0), PYTEST), PYTEST, Budget(), 1).repeat == 1


@pytest.mark.parametrize("outcome", ["failure", "ignored"])
def test_a_write_that_certainly_did_not_happen_is_no_evidence(outcome):
    """A write that failed (nothing was sent) or was refused by its own check changed
    nothing: the rerun is a repeat."""
    run = done(RunState.start("t", 0), PYTEST)
    run = done(run, EDIT, 1, outcome=outcome)
    assert check(run, PYTEST, Budget(), 2).repeat == 1


def test_a_writes_own_change_does_not_license_it_again():
    """The same edit made twice in a row, nothing else between: a repeat (its own change
    is no reason to make it again)."""
    run = done(RunState.start("t", 0), EDIT)
    assert check(run, EDIT, Budget(), 1).repeat == 1
    run = done(run, EDIT, 1)
    assert check(run, EDIT, Budget(), 2).repeat == 2


def test_edit_and_test_is_iteration_not_a_loop():
    """edit/test/edit/test with the same output is not a loop after two passes: each
    edit changed the world. The same edit again after a test that printed the same thing
    is: nothing new since that test began."""
    budget = Budget(classes=OPEN_CLASSES)
    run = allowed_run(budget, [EDIT, PYTEST, EDIT], evidence=[None, "same", None])
    assert check(run, PYTEST, budget, 3).allowed
    run = done(run, PYTEST, 3, evidence="same")
    decision = check(run, EDIT, budget, 4)
    assert decision.stop is not None
    # One tool with other arguments: each call named by its fingerprint's first digits.
    named = ", ".join(f"bash (arguments {a.fingerprint[:DIGEST_DIGITS]})" for a in (PYTEST, EDIT))
    assert decision.stop.detail == f"cycle [{named}] repeated 2 times without new evidence"


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


SKU_A = "3f2a1c0d" + "0" * 56
SKU_B = "9b07de55" + "1" * 56


def test_a_cycle_of_one_tool_names_the_arguments_that_differed():
    """check_stock(A), check_stock(B), check_stock(A), then B again: the stop names each
    call by a short digest of its action (tool and arguments), so the two differ."""
    budget = Budget()
    a, b = Action("check_stock", SKU_A), Action("check_stock", SKU_B)
    run = RunState.start("t", 0)
    for n, action in enumerate((a, b, a)):
        assert check(run, action, budget, n).allowed
        run = done(run, action, n, evidence=None)
    decision = check(run, b, budget, 3)
    assert decision.stop is not None
    assert decision.stop.detail == (
        "cycle [check_stock (arguments 3f2a1c0d), check_stock (arguments 9b07de55)] "
        "repeated 2 times without new evidence"
    )


def test_a_cycle_of_different_tools_reads_as_before():
    """Tools that differ are named by name alone: nothing else to tell apart."""
    budget = Budget()
    a, b = Action("search", SKU_A), Action("refine", SKU_B)
    run = RunState.start("t", 0)
    for n, action in enumerate((a, b, a)):
        run = done(run, action, n, evidence=None)
    decision = check(run, b, budget, 3)
    assert decision.stop is not None
    assert decision.stop.detail == "cycle [search, refine] repeated 2 times without new evidence"


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
