"""Calibrating a run budget on recorded runs: the pure search (issue 33, item 6).

Profiles are built by hand here, one request at a time, through the run machine's own
``needs``; ``tests/runtime/run/test_calibrate.py`` measures real replays and checks that
what the search predicts is what a live guard does.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from toolbreaker._tuning._budgets import (
    LIMITS,
    Profile,
    limits_of,
    probe,
    stops_at,
    suggest,
    with_limits,
)
from toolbreaker.core._run.budget import Action, Budget, ClassLimits, RunState
from toolbreaker.core._run.limits import begin, finish, needs
from toolbreaker.errors import PolicyError


def profile(name: str, outcome: str | None, actions: list[Action], **extra) -> Profile:
    """A run of ``actions``, each returning a new result, measured under the probe."""
    budget = probe(Budget())
    run = RunState.start(name, 0)
    found = []
    for i, action in enumerate(actions):
        found.append((action.risk, needs(run, action, budget, i * 1000)))
        run = begin(run, action, i * 1000)
        run = finish(run, action, "success", i * 1000, evidence=f"{name}-{i}", cost="0.01")
    return Profile(
        name,
        outcome,
        tuple(found),
        extra.get("touched", False),
        len(actions),
        Decimal("0.01") * len(actions),
    )


def reads(n: int, prefix: str = "q") -> list[Action]:
    return [Action("search", f"{prefix}-{i}") for i in range(n)]


WRITE = Action("update", "fp-update", risk="reversible_write")


def test_the_loosest_candidate_stops_no_successful_run():
    """With a rate of 0 the suggestion lets every successful run through, however long,
    and is as tight as the longest of them allows: the failed run that goes on stops."""
    runs = [
        profile("ok-short", "success", reads(3)),
        profile("ok-long", "success", reads(12)),
        profile("lost", "failure", reads(30, "x")),
    ]
    found = suggest(runs, 0.0, Budget())
    assert found.false_stops == 0
    assert found.budget.max_tool_calls == 12
    assert found.budget.classes["read"].max_calls == 12
    assert found.saved == 18  # the failed run's calls 13 to 30
    for run in runs[:2]:
        assert stops_at(run, dict(found.limits), found.budget) is None
    assert stops_at(runs[2], dict(found.limits), found.budget) == 12


def test_a_rate_lets_the_search_stop_the_longest_successes():
    """Allowed one false stop in ten, the search tightens past the longest successful run
    when that saves calls of failed runs; never past what the rate allows."""
    runs = [profile(f"ok-{n}", "success", reads(n)) for n in (2, 3, 3, 4, 4, 5, 5, 6, 6, 40)]
    runs += [profile(f"lost-{n}", "failure", reads(n, f"l{n}")) for n in (30, 35)]
    strict = suggest(runs, 0.0, Budget())
    loose = suggest(runs, 0.1, Budget())
    assert strict.budget.max_tool_calls == 40
    assert (loose.allowed, loose.false_stops) == (1, 1)
    assert loose.budget.max_tool_calls == 6
    assert loose.saved > strict.saved


def test_limits_no_successful_run_reaches_are_left_as_they_were():
    """A class no successful run calls keeps the base budget's limits, cost and deadline
    are left alone when the runs report none (here: no clock), and the other fields of
    the base budget are kept."""
    base = Budget(max_tool_failures=2, classes={"irreversible": ClassLimits(max_calls=1)})
    runs = [profile("ok", "success", [*reads(3), WRITE])]
    runs[0] = Profile("ok", "success", runs[0].needs, False, 4, Decimal(0))
    found = suggest(runs, 0.0, base).budget
    assert found.classes["irreversible"] == base.classes["irreversible"]
    assert found.max_tool_failures == 2
    assert found.classes["reversible_write"].max_calls == 1


def test_costs_and_deadlines_are_rounded_up_to_two_digits():
    """A run that spent 0.03 before its last call and ran 3 s gets limits above both,
    rounded up to two significant digits."""
    runs = [profile("ok", "success", reads(4))]
    found = suggest(runs, 0.0, Budget())
    assert found.budget.max_cost == Decimal("0.031")
    assert found.budget.deadline_ms == 3100
    assert stops_at(runs[0], dict(found.limits), found.budget) is None


def test_a_run_touched_whatever_the_search_counts_against_the_rate():
    """A successful run a limit the search leaves alone touches (a stopped tool, blocked
    writes) is a false stop of every candidate: beyond the rate, the suggestion says no
    budget meets it."""
    runs = [
        profile("ok", "success", reads(3)),
        profile("touched", "success", reads(3, "t"), touched=True),
    ]
    found = suggest(runs, 0.0, Budget())
    assert found.fixed == 1
    assert found.false_stops == 1
    assert not found.meets_rate


def test_runs_of_unknown_outcome_are_not_calibrated_on():
    """A run whose outcome is not known neither loosens nor tightens anything."""
    runs = [profile("ok", "success", reads(3)), profile("?", None, reads(50, "u"))]
    assert suggest(runs, 0.0, Budget()).budget.max_tool_calls == 3


@pytest.mark.parametrize("rate", [-0.1, 1.5, "1%", True])
def test_a_rate_outside_0_to_1_is_refused(rate):
    with pytest.raises(PolicyError, match="from 0 to 1"):
        suggest([profile("ok", "success", reads(1))], rate, Budget())


def test_failures_alone_calibrate_nothing():
    with pytest.raises(PolicyError, match="no run succeeded"):
        suggest([profile("lost", "failure", reads(3))], 0.5, Budget())


def test_limits_round_trip_through_a_budget():
    """The searched limits of a budget, set on it again, give the same budget; the probe
    opens every one of them."""
    budget = Budget(classes={"read": ClassLimits(max_calls=7, max_repeats=4)}, max_cost="2")
    assert with_limits(budget, limits_of(budget)) == budget
    opened = limits_of(probe(budget))
    assert set(opened) == set(LIMITS)
    assert opened["max_cost"] is None
    assert opened["classes.read.max_calls"] is None
