"""toolbreaker exercise against a real OpenAI Agents SDK agent, in every shipped scenario.

The model is the SDK's own ``agents.testing.ScriptedModel``, each step replaying the
tool results it read into the scripted model's plan (``model_plan``); the tools are
``function_tool``s calling the fault proxy over real HTTP, guarded by ``protect()`` with
the exercise's registry and run guard.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from agents.testing import ModelCall, ScriptedModel


from exercise_checks import IDS, SHIPPED, holds_every_promise, result_of, shop_breakers
from toolbreaker.testing import ExerciseContext, exercise, next_call, service_tools
from toolbreaker.testing._agents import ticket_options

needs("agents", reason="the openai-agents extra is not installed")
frameworks_imported = imported("agents", "agents.testing", "toolbreaker.integrations.openai_agents")

MAX_STEPS = 100


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK exports traces to OpenAI unless told not to; these tests stay offline."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


def following(behaviour: str) -> ScriptedModel:
    """The scripted model's plan, replayed at each step from the results read so far."""
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    def respond(call: ModelCall) -> list[Any]:
        items = call.input if isinstance(call.input, list) else []
        results = [
            result_of(item["output"])
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        call = next_call(behaviour, results)
        if call is None:
            return [assistant_message("Done.")]
        name, args = call
        return [function_call(name, args, call_id=f"c{len(results) + 1}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(MAX_STEPS)])


def sdk_tools(ctx: ExerciseContext) -> list[Any]:
    from agents import function_tool

    raw = service_tools(ctx)

    @function_tool
    def search_catalog(query: str) -> dict[str, Any]:
        """Search the live catalog."""
        return raw["search_catalog"](query)

    @function_tool
    def refine_search(query: str) -> dict[str, Any]:
        """Refine a catalog search."""
        return raw["refine_search"](query)

    @function_tool
    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        return raw["search_catalog_snapshot"](query)

    @function_tool
    def get_order(order_id: str) -> dict[str, Any]:
        """Track an order."""
        return raw["get_order"](order_id)

    @function_tool
    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        return raw["create_ticket"](customer, title, idempotency_key)

    return [search_catalog, refine_search, search_catalog_snapshot, get_order, create_ticket]


def sdk_agent(ctx: ExerciseContext) -> Any:
    """The user's OpenAI Agents SDK agent, protected with the exercise's registry and guard."""
    from agents import Agent, Runner, ToolInputGuardrailTripwireTriggered

    from toolbreaker.integrations.openai_agents import protect, run_config

    registry = ctx.registry
    breakers = shop_breakers(registry)
    guard = ctx.run_guard()
    guard.ensure_tool("create_ticket", **ticket_options(ctx))
    agent = Agent(name="shop", model=following(ctx.scenario.behaviour), tools=sdk_tools(ctx))
    protected = protect(agent, registry=registry, guard=guard, breakers=breakers)
    # The SDK ends a run the guard stopped with this exception; the packet says why.
    with contextlib.suppress(ToolInputGuardrailTripwireTriggered):
        asyncio.run(
            Runner.run(protected, ctx.scenario.prompt, run_config=run_config(), max_turns=MAX_STEPS)
        )
    return guard


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_protected_sdk_agent_holds_every_promise(path):
    """protect(agent): every shipped scenario's three promises hold, measured at the
    service, and every fault was really met."""
    holds_every_promise(path, sdk_agent)


def test_the_same_sdk_agent_unprotected_fails():
    """Without protect() (the SDK's default error handler gives the model each failure)
    a lost write's answer makes the model open the ticket twice."""
    from agents import Agent, Runner

    def bare(ctx: ExerciseContext) -> None:
        agent = Agent(name="shop", model=following(ctx.scenario.behaviour), tools=sdk_tools(ctx))
        asyncio.run(Runner.run(agent, ctx.scenario.prompt, max_turns=MAX_STEPS))

    path = next(p for p in SHIPPED if p.stem == "commit-then-timeout")
    (report,) = exercise([path], bare).scenarios
    assert not report.held
    assert report.measured.targets[0].duplicates >= 1
