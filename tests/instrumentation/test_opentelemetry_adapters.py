"""Tool-call spans through real framework adapters, read from the SDK's in-memory exporter.

The frameworks run offline with their own test models (LangChain's fake chat model,
Pydantic AI's FunctionModel); the tools call the local ToolService over real HTTP, so a
503 is a real response. ``instrument(registry)`` is all the user does: the spans come
from the run guard's steps, whichever adapter begins them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from toolbreaker import Policy, Registry, RunGuard
from toolbreaker.testing import request_json

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from toolbreaker.instrumentation.opentelemetry import REJECTED, instrument

TIMEOUT = 2.0


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    provider.shutdown()


def registry() -> Registry:
    """Two qualifying failures open the search breaker."""
    breakers = Registry(
        Policy(failure_threshold=2), default_timeout=TIMEOUT, default_enforce="cooperative"
    )
    breakers.get("search", tool="search")
    return breakers


def tool_spans(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in memory.get_finished_spans() if s.name.startswith("execute_tool ")]


def assert_outage_spans(spans: list[ReadableSpan], ids: list[str]) -> None:
    """Two remote failures (the second opens the breaker), then a local rejection."""
    assert [s.name for s in spans] == ["execute_tool search"] * 3
    assert [s.attributes["gen_ai.tool.call.id"] for s in spans] == ids
    for span in spans:
        assert span.kind is SpanKind.INTERNAL
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "search"
        assert span.attributes["toolbreaker.dependency"] == "search"
        assert span.status.status_code is StatusCode.ERROR
    first, opened, rejected = spans
    for remote in (first, opened):
        assert remote.attributes["toolbreaker.outcome"] == "failure"
        assert remote.attributes["error.type"] == "urllib.error.HTTPError"  # the real 503
    assert first.attributes["toolbreaker.breaker.state"] == "closed"
    assert opened.attributes["toolbreaker.breaker.state"] == "open"
    assert rejected.attributes["error.type"] == REJECTED
    assert rejected.attributes["toolbreaker.outcome"] == "rejected"
    assert rejected.attributes["toolbreaker.reason"] == "cooldown"


# -- LangChain: create_agent, the middleware, GenericFakeChatModel ---------------------------


def test_langchain_agent_calls_are_execute_tool_spans(service, exporter):
    """A LangChain agent whose search provider is down: each tool call the model makes is
    one span carrying the model's tool-call id; the two real 503s are remote failures,
    the call the open breaker refuses is toolbreaker.rejected; the HTTP span the tool
    makes while the guard runs it is the tool span's child."""
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    provider, memory = exporter
    tracer = provider.get_tracer("shop")
    service.outage("GET /search")

    @tool
    def search(q: str) -> dict:
        """Search the live catalog."""
        with tracer.start_as_current_span("GET /search"):
            return request_json(
                "GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=TIMEOUT
            )

    ids = [f"call_{n}" for n in range(1, 4)]
    numbers = itertools.count()

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

    def replies() -> Iterator[AIMessage]:
        for call_id in ids:
            args = {"q": f"cable {next(numbers)}"}
            yield AIMessage("", tool_calls=[{"name": "search", "args": args, "id": call_id}])
        yield AIMessage("The catalog is down; try later.")

    breakers = registry()
    undo = instrument(breakers, tracer_provider=provider)
    agent = create_agent(
        Model(messages=replies()),
        [search],
        middleware=[ToolbreakerMiddleware(registry=breakers)],
    )
    out = agent.invoke({"messages": [("user", "a cable")]}, context={"task_id": "lc-1"})
    undo()

    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(answers[-1].content)["tool_unavailable"] is True
    spans = tool_spans(memory)
    assert_outage_spans(spans, ids)
    http = [s for s in memory.get_finished_spans() if s.name == "GET /search"]
    assert len(http) == 2  # the third call never ran
    for child, parent in zip(http, spans, strict=False):
        assert child.parent is not None
        assert child.parent.span_id == parent.context.span_id


# -- Pydantic AI: the capability, FunctionModel ----------------------------------------------


def test_pydantic_ai_agent_calls_are_execute_tool_spans(service, exporter):
    """The same outage through Pydantic AI: the spans carry the framework's tool_call_id,
    and remote failures and the local rejection are told apart by error.type."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    provider, memory = exporter
    ids = [f"pyd_{n}" for n in range(1, 4)]
    asked: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(1)
        n = len(asked)
        if n <= len(ids):
            part = ToolCallPart("search", {"q": f"cable {n}"}, tool_call_id=ids[n - 1])
            return ModelResponse(parts=[part])
        return ModelResponse(parts=[TextPart("The catalog is down; try later.")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        url = f"{service.url}/search?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=TIMEOUT)

    service.outage("GET /search")
    breakers = registry()
    undo = instrument(breakers, tracer_provider=provider)
    capability = ToolbreakerCapability(RunGuard("pyd-1"), registry=breakers)
    result = asyncio.run(agent.run("a cable", capabilities=[capability]))
    undo()

    assert result.output == "The catalog is down; try later."
    assert_outage_spans(tool_spans(memory), ids)


def test_pydantic_ai_parallel_calls_keep_their_own_spans(service, exporter):
    """One model response with two tool calls run concurrently: each call's span has its
    own call id and outcome, neither is the other's parent, and both are ended."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    provider, memory = exporter
    turns: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turns.append(1)
        if len(turns) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("search", {"q": "cable"}, tool_call_id="p-search"),
                    ToolCallPart("order_status", {"order_id": "A-1001"}, tool_call_id="p-order"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        url = f"{service.url}/search?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=TIMEOUT)

    @agent.tool_plain
    def order_status(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return request_json("GET", f"{service.url}/orders/{order_id}", timeout=TIMEOUT)

    service.outage("GET /search")
    breakers = registry()
    breakers.get("orders", tool="order_status")
    undo = instrument(breakers, tracer_provider=provider)
    capability = ToolbreakerCapability(RunGuard("pyd-2"), registry=breakers)
    assert asyncio.run(agent.run("a cable", capabilities=[capability])).output == "done"
    undo()

    spans = {s.attributes["gen_ai.tool.call.id"]: s for s in tool_spans(memory)}
    assert set(spans) == {"p-search", "p-order"}
    assert spans["p-search"].attributes["error.type"] == "urllib.error.HTTPError"
    assert spans["p-order"].attributes["toolbreaker.outcome"] == "success"
    assert spans["p-order"].attributes["toolbreaker.dependency"] == "orders"
    ids = {s.context.span_id for s in spans.values()}
    assert all(s.parent is None or s.parent.span_id not in ids for s in spans.values())


# -- OpenAI Agents SDK: protect(), the SDK's ScriptedModel -----------------------------------


def test_openai_agents_calls_are_execute_tool_spans(service, exporter):
    """The same outage through the OpenAI Agents SDK: the spans carry the SDK's call ids
    (the adapter begins the call in one hook and settles it in another)."""
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect, run_config

    set_tracing_disabled(True)  # the SDK's own tracing would try to reach OpenAI
    provider, memory = exporter

    @function_tool
    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        url = f"{service.url}/search?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=TIMEOUT)

    ids = ["oa_1", "oa_2", "oa_3"]
    steps: list[Any] = [
        [function_call("search", {"q": f"cable {n}"}, call_id=call_id)]
        for n, call_id in enumerate(ids)
    ]
    steps.append(ModelStep.respond(lambda call: [assistant_message("The catalog is down.")]))
    service.outage("GET /search")
    breakers = registry()
    undo = instrument(breakers, tracer_provider=provider)
    agent = protect(
        Agent(name="shop", model=ScriptedModel(steps), tools=[search]),
        registry=breakers,
        guard=RunGuard("oa-1"),
    )
    result = asyncio.run(Runner.run(agent, "a cable", run_config=run_config()))
    undo()

    assert result.final_output == "The catalog is down."
    assert_outage_spans(tool_spans(memory), ids)
