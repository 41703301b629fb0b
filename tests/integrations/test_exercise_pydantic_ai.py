"""toolbreaker exercise against a real Pydantic AI agent, in every shipped scenario.

``FunctionModel`` plays the model: at each step it replays the tool returns it has read
into the scripted model's plan (``model_plan``); the tools call the fault proxy over real
HTTP and are guarded by ``ToolbreakerCapability`` with the exercise's registry and guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel


from exercise_checks import IDS, SHIPPED, holds_every_promise
from toolbreaker.testing import ExerciseContext, next_call, service_tools
from toolbreaker.testing._agents import ticket_options

needs(
    "pydantic_ai",
    reason="the pydantic-ai extra is not installed (it installs nothing before Python 3.11)",
)
frameworks_imported = imported(
    "pydantic_ai",
    "pydantic_ai.exceptions",
    "pydantic_ai.messages",
    "pydantic_ai.models.function",
    "toolbreaker.integrations.pydantic_ai",
)


def payload(part: ToolReturnPart) -> Any:
    content = part.content
    if isinstance(content, str):
        with contextlib.suppress(ValueError):
            return json.loads(content)
    return content


def following(behaviour: str) -> FunctionModel:
    """The scripted model's plan, replayed at each step from every tool return so far."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def step(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            payload(part)
            for message in messages
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        call = next_call(behaviour, returns)
        if call is None:
            return ModelResponse(parts=[TextPart("Done.")])
        name, args = call
        return ModelResponse(parts=[ToolCallPart(name, args)])

    return FunctionModel(step)


def pydantic_agent(ctx: ExerciseContext) -> Any:
    """The user's Pydantic AI agent with the capability, the exercise's registry and guard."""
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import RunCancelled

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    raw = service_tools(ctx)
    registry = ctx.registry
    registry.get("catalog-snapshot", tool="search_catalog_snapshot")
    registry.get("catalog", tool="search_catalog", fallback="search_catalog_snapshot")
    guard = ctx.run_guard()
    tickets = registry.get("tickets", "write")
    guard.ensure_tool("create_ticket", breaker=tickets, **ticket_options(ctx))
    agent: Agent[Any, str] = Agent(following(ctx.scenario.behaviour))
    catalog = tool_metadata(dependency="catalog")

    @agent.tool_plain(metadata=catalog)
    def search_catalog(query: str) -> dict[str, Any]:
        """Search the live catalog."""
        return raw["search_catalog"](query)

    @agent.tool_plain(metadata=catalog)
    def refine_search(query: str) -> dict[str, Any]:
        """Refine a catalog search."""
        return raw["refine_search"](query)

    @agent.tool_plain(metadata=tool_metadata(dependency="catalog-snapshot"))
    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        return raw["search_catalog_snapshot"](query)

    @agent.tool_plain(metadata=tool_metadata(dependency="orders"))
    def get_order(order_id: str) -> dict[str, Any]:
        """Track an order."""
        return raw["get_order"](order_id)

    @agent.tool_plain
    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        return raw["create_ticket"](customer, title, idempotency_key)

    capability = ToolbreakerCapability(guard, registry=registry)
    # A run the guard stopped ends with RunCancelled; the packet says why.
    with contextlib.suppress(RunCancelled):
        asyncio.run(agent.run(ctx.scenario.prompt, capabilities=[capability]))
    return guard


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_guarded_pydantic_ai_agent_holds_every_promise(path):
    """ToolbreakerCapability: every shipped scenario's three promises hold, measured at
    the service, and every fault was really met."""
    holds_every_promise(path, pydantic_agent)
