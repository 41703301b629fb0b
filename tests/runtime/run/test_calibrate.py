"""Recorded runs judged by a budget, and measured to calibrate one (issue 33, item 6).

The calibration search predicts, from one replay under the probe, where every candidate
budget would stop a run. The property here holds it to the live guard: for generated
runs (:mod:`recorded_runs`: unknown writes, failures, costs, deadlines, alternations,
recovery reads) and budgets that vary every searched limit and the ones it leaves
alone, the predicted stop is the live guard's, at the same call.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorded_runs import recorded_runs
from toolbreaker._tuning._budgets import limits_of, stops_at
from toolbreaker.core._run.budget import Budget, ClassLimits
from toolbreaker.runtime._run._calibrate import judge, measure
from toolbreaker.runtime._run._recorded import RecordedStep


def steps_of(records: list[dict[str, Any]]) -> list[RecordedStep]:
    out = []
    for r in records:
        if "tool" not in r:
            out.append(RecordedStep(at=r["at"], cost=r.get("cost", "0")))
            continue
        key = r.get("business_key")
        out.append(
            RecordedStep(
                at=r["at"],
                tool=r["tool"],
                args=r["args"],
                risk=r.get("risk", "read"),
                recovery=r.get("recovery", False),
                business_key=tuple(key) if key else None,
                outcome=r.get("outcome", "success"),
                result=r.get("result"),
                cost=r.get("cost"),
            )
        )
    return out


budgets = st.builds(
    Budget,
    max_tool_calls=st.integers(3, 14),
    max_repeats=st.integers(0, 3),
    max_cost=st.one_of(st.none(), st.sampled_from(["0.3", "1"])),
    deadline_ms=st.one_of(st.none(), st.integers(300, 3000)),
    max_uncertain_side_effects=st.integers(0, 2),
    loop_cycles=st.integers(2, 8),
    max_tool_failures=st.one_of(st.none(), st.integers(1, 3)),
    classes=st.fixed_dictionaries(
        {},
        optional={
            "reversible_write": st.builds(
                ClassLimits, max_calls=st.integers(0, 4), max_repeats=st.integers(0, 2)
            ),
            "read": st.builds(
                ClassLimits,
                max_calls=st.one_of(st.none(), st.integers(1, 8)),
                max_cost=st.sampled_from([None, "0.2"]),
            ),
        },
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=recorded_runs(), budget=budgets)
def test_property_the_predicted_stop_is_the_live_guards(records, budget):
    """Measured once under the probe, a run is predicted to stop under ``budget`` exactly
    when a live guard stops it, after the same number of calls."""
    steps = steps_of(records)
    profile = measure("run", "success", steps, budget)
    judged = judge("run", "success", steps, budget)
    at = stops_at(profile, limits_of(budget), budget)
    predicted = None if at is None else profile.needs[at][1].calls - 1
    assert predicted == judged.stopped_after


def call(at: int, tool: str, **extra: Any) -> RecordedStep:
    return RecordedStep(at=at, tool=tool, args=extra.pop("args", {"q": at}), **extra)


def test_a_stopped_run_spends_nothing_after_its_stop():
    """Stopped at its third call, a run saves that call and every one after it, and the
    cost of them and of the model steps after the stop; before it, everything is spent."""
    steps = [
        RecordedStep(at=0, cost="0.10"),
        call(1, "search", result={"n": 1}, cost="0.01"),
        call(2, "search", args={"q": 2}, result={"n": 2}, cost="0.01"),
        call(3, "search", args={"q": 3}, result={"n": 3}, cost="0.01"),
        RecordedStep(at=4, cost="0.10"),
        call(5, "search", args={"q": 5}, result={"n": 5}, cost="0.01"),
    ]
    judged = judge("run", "failure", steps, Budget(max_tool_calls=2))
    assert (judged.condition, judged.effect) == ("max-tool-calls", "stopped")
    assert (judged.calls, judged.saved_calls, judged.stopped_after) == (4, 2, 2)
    assert (judged.cost, judged.saved_cost) == (Decimal("0.24"), Decimal("0.12"))


def test_a_stopped_tool_and_blocked_writes_touch_the_run_without_stopping_it():
    """A tool stopped by max_tool_failures, or writes blocked by an unknown outcome, are
    the first condition of the run; it goes on, and only the refused calls are saved."""
    failing = [call(i, "fetch", args={"u": i}, outcome="failure") for i in range(4)]
    judged = judge("run", "success", [*failing, call(9, "search")], Budget(max_tool_failures=2))
    assert (judged.condition, judged.effect, judged.stopped_after) == (
        "tool-failures",
        "tool-stopped",
        None,
    )
    assert judged.saved_calls == 2
    send = {"risk": "reversible_write"}
    writes = [
        call(0, "send", args={"to": "a"}, outcome="unknown", **send),
        call(1, "send", args={"to": "b"}, **send),
    ]
    judged = judge("run", "success", writes, Budget())
    assert (judged.condition, judged.effect, judged.saved_calls) == (
        "uncertain-side-effect",
        "writes-blocked",
        1,
    )
    assert measure("run", "success", writes, Budget()).touched
