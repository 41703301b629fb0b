"""toolbreaker exercise against a real LlamaIndex agent, in every shipped scenario.

The agent is what a user writes: a ``FunctionAgent`` whose model is LlamaIndex's own
``MockFunctionCallingLLM``, its response generator replaying every tool result it has
read into the scripted model's plan (``model_plan``) and answering with the next call;
the tools are ``FunctionTool``s calling the fault proxy over real HTTP, guarded by
``protect()`` with the exercise's registry and run guard. Its report holds in every
scenario; the same agent without toolbreaker fails.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool


from exercise_checks import (
    IDS,
    SHIPPED,
    UNGUARDED,
    fails_without_toolbreaker,
    holds_every_promise,
    result_of,
    shop_breakers,
)
from toolbreaker.testing import ExerciseContext, next_call, service_tools
from toolbreaker.testing._agents import ticket_options, unguarded

needs("llama_index.core", reason="the llama-index extra is not installed")
frameworks_imported = imported(
    "llama_index.core.agent.workflow",
    "llama_index.core.base.llms.types",
    "llama_index.core.llms",
    "llama_index.core.tools",
    "toolbreaker.integrations.llama_index",
)

#: Far more model requests than any scenario's plan makes: the guard, or the plan's end,
#: finishes a run long before LlamaIndex's own iteration limit would.
MAX_ITERATIONS = 100

#: The workflows package finds an agent's steps by walking all its attributes, pydantic's
#: deprecated ones included: their warnings are LlamaIndex's, not ours.
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")


def following(behaviour: str) -> MockFunctionCallingLLM:
    """LlamaIndex's mock LLM as the scripted model: at each request it replays the tool
    results in the messages it is sent into the plan and answers with the next call (or a
    final answer once the plan is done)."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms import MockFunctionCallingLLM

    ids = itertools.count(1)

    def respond(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        results = [result_of(m.content or "") for m in messages if m.role == MessageRole.TOOL]
        call = next_call(behaviour, results)
        if call is None:
            return ChatMessage(role=MessageRole.ASSISTANT, content="Done.")
        name, args = call
        block = ToolCallBlock(tool_call_id=f"call-{next(ids)}", tool_name=name, tool_kwargs=args)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    return MockFunctionCallingLLM(response_generator=respond)


def llama_tools(
    ctx: ExerciseContext, wrap: Callable[[Any], Any] = lambda fn: fn
) -> list[FunctionTool]:
    """The agent's tools: sync functions over HTTP (the workflow runs them off its loop)."""
    from llama_index.core.tools import FunctionTool

    raw = {name: wrap(fn) for name, fn in service_tools(ctx).items()}

    def search_catalog(query: str) -> dict[str, Any]:
        """Search the live catalog."""
        return raw["search_catalog"](query)

    def refine_search(query: str) -> dict[str, Any]:
        """Refine a catalog search."""
        return raw["refine_search"](query)

    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        return raw["search_catalog_snapshot"](query)

    def get_order(order_id: str) -> dict[str, Any]:
        """Track an order."""
        return raw["get_order"](order_id)

    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        return raw["create_ticket"](customer, title, idempotency_key)

    tools = (search_catalog, refine_search, search_catalog_snapshot, get_order, create_ticket)
    return [FunctionTool.from_defaults(fn) for fn in tools]


def run(workflow: Any, ctx: ExerciseContext) -> Any:
    """The workflow run, awaited on a loop of its own."""

    async def main() -> Any:
        return await workflow.run(user_msg=ctx.scenario.prompt, max_iterations=MAX_ITERATIONS)

    return asyncio.run(main())


def llama_agent(ctx: ExerciseContext) -> Any:
    """The user's LlamaIndex agent, protected with the exercise's registry and guard."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    registry = ctx.registry
    breakers = shop_breakers(registry)
    guard = ctx.run_guard()
    guard.ensure_tool("create_ticket", **ticket_options(ctx))
    agent = FunctionAgent(tools=llama_tools(ctx), llm=following(ctx.scenario.behaviour))
    # A run the guard stopped ends through the workflow's own path; the packet says why.
    run(protect(agent, guard=guard, registry=registry, breakers=breakers), ctx)
    return guard


def bare_llama_agent(ctx: ExerciseContext) -> None:
    """The same agent without toolbreaker; a failing tool's error goes back to the model,
    as an error it may retry."""
    from llama_index.core.agent.workflow import FunctionAgent

    agent = FunctionAgent(tools=llama_tools(ctx, unguarded), llm=following(ctx.scenario.behaviour))
    run(agent, ctx)


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_protected_llama_index_agent_holds_every_promise(path):
    """protect(FunctionAgent): every shipped scenario's three promises hold, measured at
    the service, and every fault was really met."""
    holds_every_promise(path, llama_agent)


@pytest.mark.parametrize("name", UNGUARDED)
def test_the_same_llama_index_agent_without_toolbreaker_fails(name):
    """Without protect() the report fails: no packet, and the provider hit too often or a
    ticket opened twice."""
    fails_without_toolbreaker(name, bare_llama_agent)
