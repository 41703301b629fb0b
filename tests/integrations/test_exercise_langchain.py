"""toolbreaker exercise against a real LangChain agent, in every shipped scenario.

The agent is what a user writes: ``create_agent`` with LangChain's own
``GenericFakeChatModel`` (taught to take tools) following the scenario's behaviour, its
tools calling the fault proxy over real HTTP, guarded by ``ToolbreakerMiddleware`` with
the exercise's registry and journal. Its report holds in every scenario; the same agent
without the middleware fails.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_exercise_parts import ScriptedModel

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware


from exercise_checks import IDS, SHIPPED, UNGUARDED, fails_without_toolbreaker, holds_every_promise
from toolbreaker.testing import ExerciseContext, next_call, service_tools
from toolbreaker.testing._agents import ticket_options, unguarded

needs("langchain", reason="the langchain extra is not installed")
frameworks_imported = imported(
    "langchain.agents",
    "langchain_core.messages",
    "langchain_core.tools",
    "langchain_exercise_parts",
    "toolbreaker.integrations.langchain",
)


_ids = itertools.count(1)


def payload(message: ToolMessage) -> Any:
    try:
        return json.loads(message.content)
    except ValueError:
        return message.content


def following(behaviour: str) -> ScriptedModel:
    """A model that replays the turn's tool results into the scripted model's plan and
    answers with its next call (or a final answer once the plan is done)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_exercise_parts import ScriptedModel

    def replies() -> Iterator[AIMessage]:
        while True:
            prompt = model.prompts[-1]
            turn = max(i for i, m in enumerate(prompt) if isinstance(m, HumanMessage))
            results = [m for m in prompt[turn:] if isinstance(m, ToolMessage)]
            found = next_call(behaviour, (payload(message) for message in results))
            if found is None:
                yield AIMessage("Done.")
                continue
            name, args = found
            call = {"name": name, "args": args, "id": f"call-{next(_ids)}"}
            yield AIMessage("", tool_calls=[call])

    model = ScriptedModel(messages=replies())
    return model


def langchain_tools(
    ctx: ExerciseContext, wrap: Callable[[Any], Any] = lambda fn: fn
) -> list[BaseTool]:
    from langchain_core.tools import tool

    from toolbreaker import idempotency_key

    raw = {name: wrap(fn) for name, fn in service_tools(ctx).items()}

    @tool
    def search_catalog(query: str) -> dict:
        """Search the live catalog."""
        return raw["search_catalog"](query)

    @tool
    def refine_search(query: str) -> dict:
        """Refine a catalog search."""
        return raw["refine_search"](query)

    @tool
    def search_catalog_snapshot(query: str) -> dict:
        """Search yesterday's catalog snapshot."""
        return raw["search_catalog_snapshot"](query)

    @tool
    def get_order(order_id: str) -> dict:
        """Track an order."""
        return raw["get_order"](order_id)

    @tool
    def create_ticket(customer: str, title: str) -> dict:
        """Open a support ticket."""
        return raw["create_ticket"](customer, title, idempotency_key() or "")

    return [search_catalog, refine_search, search_catalog_snapshot, get_order, create_ticket]


def options(ctx: ExerciseContext) -> dict[str, Any]:
    return {
        "search_catalog": {
            "dependency": "catalog",
            "fallback": "search_catalog_snapshot",
            "fallback_note": "say that prices may be out of date",
        },
        "refine_search": {"dependency": "catalog"},
        "search_catalog_snapshot": {"dependency": "catalog-snapshot"},
        "get_order": {"dependency": "orders"},
        "create_ticket": {"dependency": "tickets", "operation": "write", **ticket_options(ctx)},
    }


def langchain_agent(ctx: ExerciseContext) -> ToolbreakerMiddleware:
    """The user's LangChain agent under toolbreaker: three names come from the exercise
    (the registry, the journal, the task id); the rest is ordinary LangChain."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    middleware = ToolbreakerMiddleware(
        registry=ctx.registry, journal=ctx.journal, tools=options(ctx)
    )
    agent = create_agent(
        following(ctx.scenario.behaviour), langchain_tools(ctx), middleware=[middleware]
    )
    agent.invoke({"messages": [HumanMessage(ctx.scenario.prompt)]}, context={"task_id": ctx.task})
    return middleware


def bare_langchain_agent(ctx: ExerciseContext) -> None:
    """The same agent without toolbreaker; a failing tool's error goes back to the model,
    as an error it may retry (what a framework's error handler does)."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    agent = create_agent(following(ctx.scenario.behaviour), langchain_tools(ctx, unguarded))
    agent.invoke({"messages": [HumanMessage(ctx.scenario.prompt)]}, context={"task_id": ctx.task})


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_guarded_langchain_agent_holds_every_promise(path):
    """create_agent + ToolbreakerMiddleware: every shipped scenario's three promises hold,
    measured at the service, and every fault was really met."""
    holds_every_promise(path, langchain_agent)


@pytest.mark.parametrize("name", UNGUARDED)
def test_the_same_langchain_agent_without_toolbreaker_fails(name):
    """Without the middleware the report fails: no packet, and the provider hit too often
    or a ticket opened twice."""
    fails_without_toolbreaker(name, bare_langchain_agent)
