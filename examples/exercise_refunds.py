"""Exercise your own agent under scripted faults, from a test or CI.

A refund agent with two plain Python tools (an order lookup and a refund that pays
money) is run against two scenario files of its own (``scenarios/*.toml``): the
payments API makes a refund and its answer is lost; the order system is down. The
exercise wraps each tool with the scenario's faults, runs the agent twice (the second
time resumed, as a new process would be, the faults gone) and measures the three
promises where the damage happens: in the ledger of refunds.

The guarded agent holds both. The same agent with a plain retry loop refunds twice and
hammers the dead order system, so its report fails: that is what the report is for.

Run it: ``python examples/exercise_refunds.py``; from the command line the same is
``toolbreaker exercise examples/scenarios/*.toml --agent exercise_refunds:guarded``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolbreaker.testing import ExerciseContext, exercise

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.toml"))


def tools(ctx: ExerciseContext, refunds: list[str]) -> tuple[Any, Any]:
    """Your tools, wrapped with the scenario's faults (a refund commits when it returns)."""

    def get_order(order: str) -> dict[str, Any]:
        return {"order": order, "total": "24.90", "status": "delivered"}

    def refund(order: str, idempotency_key: str = "") -> dict[str, Any]:
        refunds.append(order)
        return {"refund": f"R-{len(refunds)}", "order": order}

    return ctx.wrap("get_order", get_order), ctx.wrap("refund", refund, write=True)


def guarded(ctx: ExerciseContext) -> None:
    """The agent under toolbreaker: a breaker per dependency, a run guard for the run."""
    get_order, refund = tools(ctx, [])
    guard = ctx.run_guard()  # ctx.task and ctx.journal: the resumed run finds the first
    guard.tool("get_order", breaker=ctx.registry.get("orders"))(get_order)
    guard.tool(
        "refund",
        risk="reversible_write",
        breaker=ctx.registry.get("payments", "write"),
        business_key=["order"],
        verify=lambda result: "refund" in result,
    )(refund)
    for _ in range(3):  # a model that insists, as models do
        order = guard.call("get_order", {"order": "A-1001"})
        if order.get("status") == "delivered":
            guard.call("refund", {"order": "A-1001"})


def naive(ctx: ExerciseContext) -> None:
    """The same agent with a plain retry loop and no toolbreaker."""
    get_order, refund = tools(ctx, [])
    for _ in range(3):
        for _attempt in range(3):
            try:
                get_order(order="A-1001")
                refund(order="A-1001")
                break
            except Exception:  # noqa: BLE001 - what a naive agent does
                continue


if __name__ == "__main__":
    reports = {agent.__name__: exercise(SCENARIOS, agent) for agent in (guarded, naive)}
    for name, report in reports.items():
        print(f"{name}: {'every promise held' if report.held else 'FAILED'}")
        for scenario in report.scenarios:
            for promise in scenario.judgement.promises:
                mark = "ok  " if promise.held else "FAIL"
                print(f"  {mark} {scenario.scenario.name}: {promise.name}: {promise.detail}")
    assert reports["guarded"].held
    assert not reports["naive"].held
