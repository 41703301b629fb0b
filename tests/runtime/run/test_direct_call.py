"""``guard.call`` of a tool without a breaker takes a direct path: the same run as the flow.

The direct path (``RunGuard._direct``) calls the parts the general flow drives (the plan,
a write's pending entry, the tool in the step's block, the settle) without the flow's
generators and effects. It must decide, answer, count and journal exactly as the general
flow (``RunGuard._calling``, what a tool with a breaker, a watched call or a call of a
model turn takes) does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from recorded_runs import budgets, live, recorded_runs
from toolbreaker import Budget, RunGuard
from toolbreaker.errors import AsyncCallError
from toolbreaker.runtime._flow import drive


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=recorded_runs(), budget=budgets)
def test_the_direct_call_runs_as_the_general_flow(records, budget):
    """Reads, writes (verified, unverified, of unknown outcome), irreversible calls,
    failures of every class, costs, stops, loops and repeats: every answer the model
    reads, the counters and the stop packet (the journal's confirmed and uncertain
    writes, the conditions in order) are the same on both paths."""
    direct = live(records, budget, settle=False)
    general = live(records, budget, settle=False, general=True)
    assert direct == general


def _guard() -> tuple[RunGuard, dict[str, Any]]:
    ticks = itertools.count(1000)
    guard = RunGuard("direct", budget=Budget(max_tool_calls=6), clock=lambda: next(ticks))
    seen: dict[str, Any] = {}

    def returns_awaitable(q: str) -> Any:
        return asyncio.sleep(0)  # a sync tool that returns a coroutine: never run

    def interrupted(q: str) -> Any:
        raise KeyboardInterrupt  # a cancellation: settled, then raised again

    def write(to: str, idempotency_key: str) -> dict[str, str]:
        seen["key"] = idempotency_key
        return {"id": f"m-{to}"}

    guard.tool("awaitable")(returns_awaitable)
    guard.tool("interrupted")(interrupted)
    guard.tool("send", risk="reversible_write", verify=lambda r: "id" in r)(write)
    return guard, seen


def _call(guard: RunGuard, tool: str, args: dict[str, Any], *, general: bool) -> Any:
    if general:
        return drive(guard._calling(tool, dict(args)))  # the general flow
    return guard.call(tool, args)


@pytest.mark.parametrize(
    ("tool", "args", "raises"),
    [
        ("awaitable", {"q": "a"}, AsyncCallError),
        ("interrupted", {"q": "a"}, KeyboardInterrupt),
        ("send", {"to": "ann"}, None),
        ("send", {"to": "ann", "idempotency_key": "the model's"}, None),
    ],
)
def test_what_the_direct_call_raises_and_journals_is_the_general_flows(tool, args, raises):
    """A tool that returns an awaitable (the program's mistake: raised, not counted), a
    cancellation (settled, raised again), a write (journaled with the guard's key, the
    model's own dropped): both paths raise, answer and record the same."""
    runs = []
    for general in (False, True):
        guard, seen = _guard()
        answers = []
        for _ in range(2):
            if raises is None:
                answers.append(_call(guard, tool, args, general=general))
            else:
                with pytest.raises(raises):
                    _call(guard, tool, args, general=general)
        runs.append(
            (
                answers,
                seen,
                guard.state.to_dict(),
                dataclasses.asdict(guard.stop_packet()),
                guard.journal.journal_entries("direct"),
            )
        )
    assert runs[0] == runs[1]
