"""Cost reservations and failures per tool and error class in the run machine (issue 23)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._run.budget import Action, Budget, ClassLimits, RunState
from toolbreaker.core._run.costs import token_cost
from toolbreaker.core._run.machine import RunEvent, apply
from toolbreaker.errors import PolicyError, RunStateError


def request(n: int, *, reserve: str | None = "0.01", at: int = 1, tool: str = "search"):
    return RunEvent("request", at, Action(tool=tool, fingerprint=f"fp-{n}"), reserve=reserve)


def outcome(n: int, held: int, *, cost: str | None = None, at: int = 2, tool: str = "search"):
    action = Action(tool=tool, fingerprint=f"fp-{n}")
    return RunEvent(
        "outcome", at, action, outcome="success", cost=cost, reservation=held, reserve="0.01"
    )


BUDGET = Budget(max_cost=Decimal("0.05"), max_tool_calls=1000, max_repeats=1000)


def test_concurrent_requests_are_admitted_only_as_far_as_the_budget_covers():
    """Ten calls begun before any settles, at 0.01 each under 0.05: five are admitted,
    five refused before they run; the run is not stopped."""
    run = RunState.start("t", 0)
    verdicts = []
    for n in range(10):
        run, decision = apply(run, request(n), BUDGET)
        verdicts.append(decision.verdict)
    assert verdicts == ["run"] * 5 + ["over-budget"] * 5
    assert run.stopped is None
    assert (run.calls, run.over_budget, run.reserved(), run.cost) == (5, 5, Decimal("0.05"), 0)
    assert [f.effect for f in run.conditions] == ["refused"]  # once per tool


def test_refusal_names_the_tool_and_what_is_left():
    """The refusal's detail says which call cannot be covered and how much is left."""
    run = RunState.start("t", 0)
    for n in range(4):
        run, _ = apply(run, request(n), BUDGET)
    run, decision = apply(run, request(9, reserve="0.02"), BUDGET)
    assert decision.verdict == "over-budget"
    assert decision.left == "0.01"
    assert decision.stop is not None
    assert decision.stop.condition == "over-budget"
    assert "cannot cover another call of search (0.02); 0.01 left of max_cost=0.05" in (
        decision.stop.detail
    )


def test_settling_lower_releases_the_rest_and_higher_is_counted():
    """Settling commits the actual cost and releases the hold: a lower cost frees room
    for another call, a higher one is counted in full."""
    run = RunState.start("t", 0)
    holds = []
    for n in range(5):
        run, decision = apply(run, request(n), BUDGET)
        holds.append(decision.reservation)
    run, decision = apply(run, request(5), BUDGET)
    assert decision.verdict == "over-budget"
    run, _ = apply(run, outcome(0, holds[0], cost="0"), BUDGET)
    run, decision = apply(run, request(6), BUDGET)
    assert decision.verdict == "run"
    run, _ = apply(run, outcome(1, holds[1], cost="0.03"), BUDGET)
    assert run.cost == Decimal("0.03")
    assert run.reserved() == Decimal("0.04")


def test_an_outcome_without_an_actual_cost_spends_the_amount_held():
    """No actual reported: the reserved estimate is what was spent."""
    run = RunState.start("t", 0)
    run, decision = apply(run, request(0), BUDGET)
    run, _ = apply(run, outcome(0, decision.reservation), BUDGET)
    assert (run.cost, run.reserved(), run.class_cost["read"]) == (
        Decimal("0.01"),
        0,
        Decimal("0.01"),
    )


def test_settling_twice_counts_once():
    """A duplicate settle of one reservation commits nothing more."""
    run = RunState.start("t", 0)
    run, decision = apply(run, request(0), BUDGET)
    for _ in range(2):
        run, _ = apply(run, outcome(0, decision.reservation), BUDGET)
    assert run.cost == Decimal("0.01")


def test_an_unsettled_reservation_expires_by_its_lease_spent_at_its_amount():
    """A killed worker never settles: at the end of the lease its hold is spent at the
    amount held (its cost is unknown, never free); a late settle adds only the excess."""
    budget = Budget(max_cost=Decimal("0.05"), reservation_lease_ms=100, max_tool_calls=100)
    run = RunState.start("t", 0)
    run, decision = apply(run, request(0, at=0), budget)
    run, _ = apply(run, RunEvent("turn", 99), budget)
    assert run.reserved() == Decimal("0.01")
    run, _ = apply(run, RunEvent("turn", 100), budget)
    assert (run.reserved(), run.cost, run.expired) == (0, Decimal("0.01"), 1)
    run, _ = apply(run, outcome(0, decision.reservation, cost="0.015", at=150), budget)
    assert run.cost == Decimal("0.015")


def test_class_max_cost_binds_reservations_of_its_class():
    """A class's ``max_cost`` refuses a reservation of that class, not of others."""
    budget = Budget(
        classes={"read": ClassLimits(max_calls=100, max_cost=Decimal("0.02"))},
        max_tool_calls=100,
        max_repeats=100,
    )
    run = RunState.start("t", 0)
    verdicts = []
    for n in range(3):
        run, decision = apply(run, request(n), budget)
        verdicts.append(decision.verdict)
    assert verdicts == ["run", "run", "over-budget"]
    assert "classes.read.max_cost=0.02" in (decision.stop.detail if decision.stop else "")


def test_a_model_step_reserves_and_settles():
    """A model step (no tool) reserves against ``max_cost`` and settles its actual."""
    run = RunState.start("t", 0)
    run, decision = apply(run, RunEvent("reserve", 1, reserve="0.04"), BUDGET)
    assert decision.verdict == "reserved"
    run, refused = apply(run, RunEvent("reserve", 1, reserve="0.02"), BUDGET)
    assert refused.verdict == "over-budget"
    run, _ = apply(
        run, RunEvent("settle", 2, cost="0.03", reservation=decision.reservation), BUDGET
    )
    assert (run.cost, run.class_cost["read"], run.reserved()) == (Decimal("0.03"), 0, 0)


def test_calls_without_a_declared_cost_keep_counting_after_the_fact():
    """No ``reserve``: nothing is held, the call's cost counts when reported, and the
    state serialises as before (no reservation keys)."""
    run = RunState.start("t", 0)
    run, decision = apply(run, request(0, reserve=None), BUDGET)
    assert decision.reservation == 0
    action = Action("search", "fp-0")
    run, _ = apply(run, RunEvent("outcome", 2, action, outcome="success", cost="0.01"), BUDGET)
    assert run.cost == Decimal("0.01")
    assert "reserved" not in run.counters()
    assert "reservations" not in run.to_dict()


def test_a_state_with_reservations_round_trips():
    """Reservations, refusals and stopped tools survive ``to_dict``/``from_dict``."""
    budget = Budget(max_cost=Decimal("0.02"), max_tool_failures=1, max_tool_calls=100)
    run = RunState.start("t", 0)
    for n in range(3):
        run, _ = apply(run, request(n), budget)
    failing = Action("lookup", "fp-x")
    run, _ = apply(run, RunEvent("request", 1, failing), budget)
    run, _ = apply(
        run, RunEvent("outcome", 2, failing, outcome="ignored", error="validation"), budget
    )
    data = run.to_dict()
    assert RunState.from_dict(data) == run
    assert data["reservations"][0]["amount"] == "0.01"
    assert run.counters()["reserved"] == "0.02"


def test_reservation_amounts_are_checked():
    """A float, a negative or a non-number to reserve is a typed error naming the field."""
    run = RunState.start("t", 0)
    for bad in (0.01, "-1", "lots"):
        with pytest.raises(RunStateError) as caught:
            apply(run, request(0, reserve=bad), BUDGET)  # type: ignore[arg-type]
        assert caught.value.field == "reserve"


def test_token_cost_is_exact():
    """Maximum tokens times a price per million, exactly."""
    assert token_cost(4096, "15") == Decimal("0.06144")
    with pytest.raises(RunStateError):
        token_cost(-1, "1")


@given(
    st.lists(
        st.tuples(st.sampled_from(["req", "settle"]), st.integers(0, 3)), min_size=1, max_size=60
    )
)
def test_committed_plus_held_never_exceeds_max_cost_when_actuals_stay_within(ops):
    """Whatever the interleaving of requests and settles at or below the estimate, spent
    plus reserved never exceeds ``max_cost``."""
    budget = Budget(max_cost=Decimal("0.1"), max_tool_calls=10_000, max_repeats=10_000)
    run = RunState.start("t", 0)
    holds: list[int] = []
    for n, (op, cents) in enumerate(ops):
        if op == "req":
            run, decision = apply(run, request(n, reserve=f"0.0{cents + 1}"), budget)
            if decision.reservation:
                holds.append(decision.reservation)
        elif holds:
            run, _ = apply(
                run, RunEvent("settle", 1, cost=f"0.00{cents}", reservation=holds.pop(0)), budget
            )
        assert run.cost + run.reserved() <= Decimal("0.1")


# -- failures per tool and error class -------------------------------------------------


def failing_call(run: RunState, n: int, budget: Budget, error: str = "validation"):
    action = Action("lookup", f"fp-lookup-{n}")  # rewritten arguments: a new fingerprint
    run, decision = apply(run, RunEvent("request", n, action), budget)
    if decision.verdict != "run":
        return run, decision
    run, _ = apply(run, RunEvent("outcome", n, action, outcome="ignored", error=error), budget)
    return run, decision


def test_the_nth_failure_of_one_class_stops_the_tool_whatever_its_arguments():
    """With ``max_tool_failures=3``, three validation failures of ``lookup`` with three
    different argument sets stop calling it; the run goes on with other tools."""
    budget = Budget(max_tool_failures=3)
    run = RunState.start("t", 0)
    verdicts = []
    for n in range(1, 5):
        run, decision = failing_call(run, n, budget)
        verdicts.append(decision.verdict)
    assert verdicts == ["run", "run", "run", "tool-stopped"]
    assert decision.stop is not None
    assert decision.stop.condition == "tool-failures"
    assert "3 failures of class validation" in decision.stop.detail
    assert run.stopped is None
    run, other = apply(run, RunEvent("request", 9, Action("search", "fp-s")), budget)
    assert other.verdict == "run"
    assert [(f.effect, f.tool) for f in run.conditions] == [("tool-stopped", "lookup")]


def test_failures_of_different_classes_count_apart():
    """Two validation failures and two timeouts under a limit of 3 stop nothing."""
    budget = Budget(max_tool_failures=3)
    run = RunState.start("t", 0)
    for n, error in enumerate(["validation", "timeout", "validation", "timeout"], 1):
        run, decision = failing_call(run, n, budget, error)
        assert decision.verdict == "run"
    assert run.tools_stopped == ()


def test_without_the_setting_failures_stop_no_tool():
    """``max_tool_failures`` unset: nothing counted or stopped; the budget keeps its version."""
    budget = Budget()
    run = RunState.start("t", 0)
    for n in range(1, 8):
        run, decision = failing_call(run, n, budget)
        assert decision.verdict == "run"
    assert run.failures == ()
    assert "max_tool_failures" not in budget.to_dict()
    with pytest.raises(PolicyError):
        Budget(max_tool_failures=0)


def test_a_budget_file_names_the_new_limits(tmp_path):
    """``reservation_lease_ms`` and ``max_tool_failures`` load from TOML; a bad value is an
    error naming the file and the field."""
    good = tmp_path / "budget.toml"
    good.write_text('max_cost = "1"\nreservation_lease_ms = 60000\nmax_tool_failures = 3\n')
    loaded = Budget.from_toml(good)
    assert (loaded.reservation_lease_ms, loaded.max_tool_failures) == (60000, 3)
    assert loaded.to_dict()["max_tool_failures"] == 3
    bad = tmp_path / "bad.toml"
    bad.write_text("max_tool_failures = 0\n")
    with pytest.raises(PolicyError) as caught:
        Budget.from_toml(bad)
    assert caught.value.field == "max_tool_failures"
