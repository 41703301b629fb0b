"""toolbreaker exercise against a real Google ADK agent, in every shipped scenario.

The agent is an ``LlmAgent`` in ADK's ``InMemoryRunner``; its model is a ``BaseLlm``
subclass that, at each request, replays every function response ADK put in the request
into the scripted model's plan (``model_plan``) and answers with its next call. The tools
call the fault proxy over real HTTP (off ADK's loop) and are guarded by
``ToolbreakerPlugin`` with the exercise's registry and run guard. Its report holds in
every scenario; the same agent without the plugin fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from google.adk.plugins import BasePlugin


from exercise_checks import IDS, SHIPPED, UNGUARDED, fails_without_toolbreaker, holds_every_promise
from toolbreaker.testing import ExerciseContext, service_tools
from toolbreaker.testing._agents import ticket_options, unguarded

needs("google.adk", reason="the google-adk extra is not installed")
frameworks_imported = imported(
    "google.adk.agents",
    "google.adk.apps",
    "google.adk.plugins",
    "google.adk.runners",
    "google.adk.tools.function_tool",
    "google.genai",
    "google_adk_parts",
    "toolbreaker.integrations.google_adk",
)


def adk_tools(ctx: ExerciseContext, wrap: Callable[[Any], Any] = lambda fn: fn) -> list[Any]:
    """The shop's tools as a user writes them for ADK: async, the HTTP call in a thread."""
    from google.adk.tools.function_tool import FunctionTool

    from toolbreaker.integrations.google_adk import tool_metadata

    raw = {name: wrap(fn) for name, fn in service_tools(ctx).items()}

    async def search_catalog(query: str) -> dict[str, Any]:
        """Search the live catalog."""
        return await asyncio.to_thread(raw["search_catalog"], query)

    async def refine_search(query: str) -> dict[str, Any]:
        """Refine a catalog search."""
        return await asyncio.to_thread(raw["refine_search"], query)

    async def search_catalog_snapshot(query: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        return await asyncio.to_thread(raw["search_catalog_snapshot"], query)

    async def get_order(order_id: str) -> dict[str, Any]:
        """Track an order."""
        return await asyncio.to_thread(raw["get_order"], order_id)

    async def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        return await asyncio.to_thread(raw["create_ticket"], customer, title, idempotency_key)

    described = {
        search_catalog: tool_metadata(dependency="catalog"),
        refine_search: tool_metadata(dependency="catalog"),
        search_catalog_snapshot: tool_metadata(dependency="catalog-snapshot"),
        get_order: tool_metadata(dependency="orders"),
        create_ticket: None,  # described to the guard itself (verify, reconcile)
    }
    tools = []
    for fn, metadata in described.items():
        tool = FunctionTool(fn)
        tool.custom_metadata = metadata
        tools.append(tool)
    return tools


def run(ctx: ExerciseContext, tools: list[Any], plugins: list[BasePlugin]) -> None:
    """One invocation of the shop agent with the scenario's prompt, in a fresh runner."""
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner
    from google.genai import types
    from google_adk_parts import Following

    from toolbreaker.integrations.google_adk import stop_of

    model = Following(model="scripted-model", behaviour=ctx.scenario.behaviour)
    agent = LlmAgent(name="shop", model=model, instruction="You help shoppers.", tools=tools)

    async def main() -> None:
        runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=plugins))
        try:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text=ctx.scenario.prompt)])
            events = [
                event
                async for event in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                )
            ]
        finally:
            await runner.close()
        assert events[-1].is_final_response()
        if (packet := stop_of(events)) is not None:
            assert packet["schema"] == "toolbreaker.stop/v1"

    asyncio.run(main())


def adk_agent(ctx: ExerciseContext) -> Any:
    """The user's ADK agent with the plugin, the exercise's registry and run guard."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    registry = ctx.registry
    registry.get("catalog-snapshot", tool="search_catalog_snapshot")
    registry.get("catalog", tool="search_catalog", fallback="search_catalog_snapshot")
    guard = ctx.run_guard()
    tickets = registry.get("tickets", "write")
    guard.ensure_tool("create_ticket", breaker=tickets, **ticket_options(ctx))
    run(ctx, adk_tools(ctx), [ToolbreakerPlugin(guard, registry=registry)])
    return guard


def bare_adk_agent(ctx: ExerciseContext) -> None:
    """The same agent without toolbreaker; a failing tool's error goes back to the model,
    as an error it may retry (ADK would otherwise end the run on the exception)."""
    run(ctx, adk_tools(ctx, unguarded), [])


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_guarded_adk_agent_holds_every_promise(path):
    """LlmAgent + ToolbreakerPlugin: every shipped scenario's three promises hold,
    measured at the service, and every fault was really met."""
    holds_every_promise(path, adk_agent)


@pytest.mark.parametrize("name", UNGUARDED)
def test_the_same_adk_agent_without_toolbreaker_fails(name):
    """Without the plugin the report fails: no packet, and the provider hit too often
    or a ticket opened twice."""
    fails_without_toolbreaker(name, bare_adk_agent)
