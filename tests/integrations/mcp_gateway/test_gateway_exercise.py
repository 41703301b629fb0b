"""``toolbreaker exercise`` with the gateway between an MCP host and its server.

Two ways the faults reach the server behind the gateway: the shipped scenarios' faults
at the tool service the shop's tools call (``examples/mcp_gateway_exercise.py``, the
agent ``toolbreaker exercise --agent`` takes), and a scenario's ``tool = ...`` faults on
the wire of a stdio server that keeps its own tickets (``ctx.mcp_stdio``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client

from exercise_checks import WIRE_FAULTS, shipped, shop_server, wire_scenario
from toolbreaker.integrations.mcp import IDEMPOTENCY_META_KEY
from toolbreaker.integrations.mcp_gateway import Gateway, UpstreamSpec
from toolbreaker.testing import ExerciseContext, exercise, model_plan

pytestmark = pytest.mark.slow  # a server process per run

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_gateway_exercise.py"


def example() -> Any:
    spec = importlib.util.spec_from_file_location("mcp_gateway_exercise", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The shipped scenarios run behind the gateway: a read outage, a slow one, a lost write
#: answer, a late one, a write's answer cut short, and a loop.
BEHIND = ("outage", "slow", "commit-then-timeout", "late-success", "malformed-write", "alternate")


@pytest.mark.parametrize("name", BEHIND)
def test_the_shipped_scenarios_hold_behind_the_gateway(name):
    """The example's host, gateway and shop hold every promise, measured at the service."""
    (report,) = exercise([shipped(name)], example().agent).scenarios
    assert report.held, report.to_dict()
    assert not report.judgement.unmet, report.judgement.unmet


#: The wire faults behind the gateway: a read outage, a slow read, a lost write answer.
BEHIND_WIRE = ("outage", "slow", "commit-then-timeout")


@pytest.fixture(scope="module")
def shop() -> Iterator[list[str]]:
    """The command that launches the stdio shop (a fresh one each launch)."""
    with shop_server() as server:
        yield server.command


def wire_agent(ctx: ExerciseContext, shop: list[str]) -> Any:
    """The host and the gateway; the shop launched through ctx.mcp_stdio."""
    guard = ctx.run_guard()
    command = ctx.mcp_stdio(shop, meta_key=IDEMPOTENCY_META_KEY)
    shop = UpstreamSpec(
        name="shop", command=tuple(command), fallbacks={"search_catalog": "search_catalog_snapshot"}
    )
    gateway = Gateway([shop], registry=ctx.registry, run_guard=lambda _s, _c: guard)
    seen = example().seen

    async def host() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(
                lambda task_status: gateway.serve_http(port=0, task_status=task_status)
            )
            async with Client(f"http://127.0.0.1:{port}/mcp/shop", mode="legacy") as client:
                plan = model_plan(ctx.scenario.behaviour)
                try:
                    name, args = next(plan)
                    for _ in range(100):
                        result = await client.call_tool(name, args)
                        if (result.meta or {}).get("toolbreaker/answer") == "run_stopped":
                            break
                        name, args = plan.send(seen(result))
                except StopIteration:
                    pass
            tg.cancel_scope.cancel()

    try:
        anyio.run(host)
    finally:
        gateway.close()
    return guard


@pytest.mark.parametrize("kind", BEHIND_WIRE)
def test_faults_on_the_wire_behind_the_gateway_are_held(kind, shop):
    """The wrapper counts each tools/call the gateway sends as an attempt and carries its
    fault out on the wire; every promise holds and every fault was met."""
    tool, fault = WIRE_FAULTS[kind]
    (report,) = exercise(
        [wire_scenario(kind, tool, fault)], lambda ctx: wire_agent(ctx, shop)
    ).scenarios
    assert report.held, report.to_dict()
    counts = {t.target: t for t in report.measured.targets}
    assert counts[tool].failed >= 1
    if tool == "create_ticket":
        assert counts[tool].commits == 1
        assert counts[tool].duplicates == 0
