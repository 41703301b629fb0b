"""Tool-call spans through real framework adapters, read from the SDK's in-memory exporter.

The frameworks run offline with their own test models (LangChain's fake chat model,
Pydantic AI's FunctionModel); the tools call the local ToolService over real HTTP, so a
503 is a real response. ``instrument(registry)`` is all the user does: the spans come
from the run guard's steps, whichever adapter begins them.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import sys
import urllib.parse
import warnings
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


def assert_described(span: ReadableSpan, tool_type: str, description: str) -> None:
    """The span carries the tool's type and description, as the framework knows them."""
    assert span.attributes["gen_ai.tool.type"] == tool_type
    assert span.attributes["gen_ai.tool.description"] == description


def assert_outage_spans(spans: list[ReadableSpan], ids: list[str]) -> None:
    """Two remote failures (the second opens the breaker), then a local rejection."""
    assert [s.name for s in spans] == ["execute_tool search"] * 3
    assert [s.attributes["gen_ai.tool.call.id"] for s in spans] == ids
    for span in spans:
        assert span.kind is SpanKind.INTERNAL
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "search"
        # a function tool of the application, described as the model reads it (the
        # rejected call's span too: the tool is the same, only it never ran)
        assert_described(span, "function", "Search the live catalog.")
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


# -- LlamaIndex: protect(), MockFunctionCallingLLM --------------------------------------------


@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_llama_index_tool_spans_carry_type_and_description(service, exporter):
    """A LlamaIndex FunctionAgent's function tool: its span says ``function`` and the
    tool's own description (its docstring, as LlamaIndex reads it)."""
    pytest.importorskip("llama_index.core")
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    from toolbreaker.integrations.llama_index import protect

    provider, memory = exporter

    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        return request_json(
            "GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=TIMEOUT
        )

    turns: list[int] = []

    def respond(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        turns.append(1)
        if len(turns) == 1:
            call = ToolCallBlock(tool_call_id="li-1", tool_name="search", tool_kwargs={"q": "x"})
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    tool = FunctionTool.from_defaults(search)
    agent = FunctionAgent(tools=[tool], llm=MockFunctionCallingLLM(response_generator=respond))
    breakers = registry()
    undo = instrument(breakers, tracer_provider=provider)
    guarded = protect(agent, guard=RunGuard("li-1"), registry=breakers)

    async def main() -> Any:
        return await guarded.run(user_msg="a cable")

    with warnings.catch_warnings():  # LlamaIndex's own pydantic deprecations
        warnings.simplefilter("ignore")
        asyncio.run(main())
    undo()

    (span,) = tool_spans(memory)
    assert span.attributes["toolbreaker.outcome"] == "success", dict(span.attributes)
    # LlamaIndex describes a function by its signature and docstring, and so does the span
    assert "Search the live catalog." in tool.metadata.description
    assert_described(span, "function", tool.metadata.description)


# -- Google ADK: the plugin, a scripted BaseLlm ------------------------------------------------


def test_google_adk_tool_spans_carry_type_and_description(service, exporter):
    """An ADK agent's function tool: its span says ``function`` and the tool's
    description (the function's docstring, as ADK declares it to the model); its
    retrieval tool's says ``datastore``."""
    pytest.importorskip("google.adk")
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.retrieval.base_retrieval_tool import BaseRetrievalTool
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    provider, memory = exporter

    class Manuals(BaseRetrievalTool):
        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            return {"passages": [f"how to use {args.get('query')}"]}

    async def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        url = f"{service.url}/search?q={urllib.parse.quote(q)}"
        return await asyncio.to_thread(request_json, "GET", url, timeout=TIMEOUT)

    class Model(BaseLlm):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            last = llm_request.contents[-1]
            if any(p.function_response for p in last.parts or ()):
                parts = [types.Part(text="done")]
            else:
                parts = [
                    types.Part(
                        function_call=types.FunctionCall(name="search", args={"q": "x"}, id="s")
                    ),
                    types.Part(
                        function_call=types.FunctionCall(
                            name="manuals", args={"query": "cable"}, id="m"
                        )
                    ),
                ]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    manuals = Manuals(name="manuals", description="Search the product manuals.")
    agent = LlmAgent(name="shop", model=Model(model="scripted"), tools=[search, manuals])
    breakers = registry()
    breakers.get("manuals", tool="manuals")
    undo = instrument(breakers, tracer_provider=provider)
    plugin = ToolbreakerPlugin(RunGuard("adk-1"), registry=breakers)

    async def main() -> None:
        runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[plugin]))
        try:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="a cable")])
            async for _ in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                pass
        finally:
            await runner.close()

    asyncio.run(main())
    undo()

    spans = {s.attributes["gen_ai.tool.name"]: s for s in tool_spans(memory)}
    assert set(spans) == {"search", "manuals"}
    for span in spans.values():
        assert span.attributes["toolbreaker.outcome"] == "success", dict(span.attributes)
    assert_described(spans["search"], "function", "Search the live catalog.")
    assert_described(spans["manuals"], "datastore", "Search the product manuals.")


# -- CrewAI: protect(), a scripted BaseLLM ------------------------------------------------------


@pytest.fixture
def crewai_connections_collected() -> Iterator[None]:
    """Collect the SQLite connections CrewAI 1.6 leaves open (its task-output storage)
    now, not in a later test of this worker: Python 3.13 warns when one is collected."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


# CrewAI 1.6 leaves the SQLite connections of its task-output storage open; on Python 3.13
# a collection during the test warns (seen once in CI, on 3.13, as an unraisable warning).
@pytest.mark.filterwarnings("ignore:unclosed database:ResourceWarning")
def test_crewai_tool_spans_carry_type_and_description(
    service, exporter, crewai_connections_collected
):
    """A CrewAI agent's tool: its span says ``function`` and the tool's own description
    (not the "Tool Name: ... Tool Arguments: ..." text CrewAI builds around it)."""
    if sys.version_info >= (3, 14):  # pragma: no cover - crewai 1.6 declares <3.14
        pytest.skip("crewai 1.6 supports Python 3.10 to 3.13")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("crewai")
        from crewai import Agent, Crew, Task
        from crewai.llms.base_llm import BaseLLM
        from crewai.tools import BaseTool
        from pydantic import BaseModel

    from toolbreaker.integrations.crewai import protect

    provider, memory = exporter

    class Query(BaseModel):
        q: str

    class SearchTool(BaseTool):
        name: str = "search"
        description: str = "Search the live catalog."
        args_schema: type[BaseModel] = Query

        def _run(self, q: str) -> Any:
            return request_json(
                "GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=TIMEOUT
            )

    class Model(BaseLLM):
        def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
            if "\nObservation:" in messages[-1]["content"]:
                return "Thought: I now know the final answer\nFinal Answer: done"
            return 'Thought: search\nAction: search\nAction Input: {"q": "x"}'

        def supports_function_calling(self) -> bool:
            return False

    agent = Agent(
        role="support",
        goal="help",
        backstory="careful",
        llm=Model(model="scripted"),
        tools=[SearchTool()],
        verbose=False,
    )
    crew = Crew(
        agents=[agent],
        tasks=[Task(description="help", expected_output="an answer", agent=agent)],
        verbose=False,
    )
    breakers = registry()
    undo = instrument(breakers, tracer_provider=provider)
    with warnings.catch_warnings():  # CrewAI's own deprecations and open SQLite files
        warnings.simplefilter("ignore")
        with protect(crew, guard=RunGuard("crew-1"), registry=breakers):
            crew.kickoff()
        gc.collect()
    undo()

    (span,) = tool_spans(memory)
    assert span.attributes["toolbreaker.outcome"] == "success", dict(span.attributes)
    assert_described(span, "function", "Search the live catalog.")


# -- MCP: GuardedClient, an MCP server through the SDK's own client ------------------------------


@pytest.mark.parametrize("guarded", [False, True], ids=["breakers-only", "run-guard"])
def test_mcp_tool_spans_carry_type_and_description(service, exporter, guarded):
    """An MCP server's tool runs on the server's side: its span says ``extension`` and
    the description the server lists for it, with or without a run guard."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from toolbreaker.integrations.mcp import GuardedClient

    provider, memory = exporter
    server = MCPServer("catalog")

    @server.tool(description="Search the live catalog.")
    def search(q: str) -> dict[str, Any]:
        return request_json(
            "GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=TIMEOUT
        )

    breakers = registry()
    undo = instrument(breakers, tracer_provider=provider)

    async def main() -> None:
        async with Client(server) as client:
            guard = RunGuard("mcp-1") if guarded else None
            proxy = GuardedClient(client, server="catalog", registry=breakers, guard=guard)
            await proxy.list_tools()  # what a host does first: the model needs the list
            result = await proxy.call_tool("search", {"q": "x"})
            assert result.is_error is False

    anyio.run(main)
    undo()

    (span,) = tool_spans(memory)
    assert span.attributes["toolbreaker.outcome"] == "success", dict(span.attributes)
    assert_described(span, "extension", "Search the live catalog.")
