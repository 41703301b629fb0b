"""Async means async: every adapter's async path leaves the event loop free of store I/O.

Each adapter is driven through its real framework's async entry point (LangChain's
``ainvoke``, a hand-built LangGraph's ``ainvoke``, the OpenAI Agents SDK's
``Runner.run``, an MCP client session, Pydantic AI's ``agent.run``, Google ADK's
``Runner.run_async``) with the run's
journal in a real SQLite file. :class:`~loop_helpers.LoopSpy` notes every blocking call
of that store made on a thread running an event loop: the stop packet's journal read,
a write's journal entries, its reconcile. On the async paths they all run in a worker
thread, so the spy's ``on_loop`` stays empty; nothing is timed. The sync entry points
(``invoke``, ``stop_packet()``, ``run_stop()``) are left as they are.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loop_helpers import LoopSpy
from toolbreaker import Budget, Policy, Registry, RunGuard
from toolbreaker.stores import SQLiteStore


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[SQLiteStore]:
    """The run's journal: a real shared store, whose every round trip may wait."""
    with SQLiteStore(tmp_path / "runs.db") as store:
        yield store


def registry() -> Registry:
    """Breakers in this process (their store never waits): only the journal is watched."""
    return Registry(Policy(failure_threshold=5), default_timeout=2.0, default_enforce="cooperative")


# -- LangChain: create_agent and a hand-built LangGraph, through ainvoke ------------------------


def langchain_model(plan: Any) -> Any:
    """LangChain's own fake chat model, taught to take tools; ``plan(n)`` is reply n."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
            return self

    return Scripted(messages=(plan(n) for n in itertools.count()))


def repeating_search(n: int) -> Any:
    from langchain_core.messages import AIMessage

    return AIMessage("", tool_calls=[{"name": "search", "args": {"q": "usb"}, "id": f"c{n}"}])


def langchain_tools() -> list[Any]:
    from langchain_core.tools import tool

    @tool
    async def search(q: str) -> dict:
        """Search the catalog."""
        return {"q": q, "hits": 0}

    return [search]


def test_a_langchain_agent_stopped_on_the_loop_reads_its_journal_off_it(journal):
    """``create_agent(...).ainvoke``: a model repeating one search is stopped; the
    middleware's ``abefore_model`` ends the run with the stop packet, whose journal read
    ran in a worker thread; so did every other journal round trip of the run."""
    pytest.importorskip("langchain", reason="the langchain extra is not installed")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from toolbreaker.integrations.langchain import STOP_KEY, ToolbreakerMiddleware

    middleware = ToolbreakerMiddleware(
        registry=registry(), journal=journal, budget=Budget(max_repeats=2)
    )
    spy = LoopSpy(journal)
    agent = create_agent(
        langchain_model(repeating_search), langchain_tools(), middleware=[middleware]
    )

    state = asyncio.run(
        agent.ainvoke({"messages": [HumanMessage("usb cable")]}, context={"task_id": "lc-1"})
    )
    assert state[STOP_KEY]["condition"] == "repeated-action"
    assert spy.called("journal_entries") >= 1  # the stop's packet
    assert spy.on_loop == [], spy.on_loop

    packet = asyncio.run(middleware.astop_packet("lc-1"))
    assert packet.to_dict() == middleware.stop_packet("lc-1").to_dict()  # the sync twin
    assert spy.on_loop == [], spy.on_loop


def test_a_hand_built_langgraph_stopped_on_the_loop_reads_its_journal_off_it(journal):
    """A LangGraph of our ``tool_node``, ``route`` and ``astop_node`` run with ``ainvoke``:
    the stop node adds the stop message, its packet built off the loop (LangGraph runs a
    sync node on the loop under ``ainvoke``: ``astop_node`` is the async graph's node)."""
    pytest.importorskip("langchain", reason="the langchain extra is not installed")
    from langchain_core.messages import HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from toolbreaker.integrations.langchain import STOP_KEY, ToolbreakerMiddleware

    middleware = ToolbreakerMiddleware(
        registry=registry(), journal=journal, budget=Budget(max_repeats=2)
    )
    spy = LoopSpy(journal)
    model = langchain_model(repeating_search)
    tools = langchain_tools()

    async def agent_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node)
    builder.add_node("tools", middleware.tool_node(tools))
    builder.add_node("stopped", middleware.astop_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_conditional_edges(
        "tools", middleware.route("agent", stop="stopped"), ["agent", "stopped"]
    )
    builder.add_edge("stopped", END)
    graph = builder.compile()

    out = asyncio.run(
        graph.ainvoke(
            {"messages": [HumanMessage("usb cable")]}, config={"configurable": {"thread_id": "g-1"}}
        )
    )
    assert out["messages"][-1].additional_kwargs[STOP_KEY]["condition"] == "repeated-action"
    assert spy.called("journal_entries") >= 1
    assert spy.on_loop == [], spy.on_loop


# -- OpenAI Agents SDK: Runner.run ---------------------------------------------------------------


@pytest.fixture
def _no_tracing() -> None:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


@pytest.mark.usefixtures("_no_tracing")
def test_an_openai_agent_stopped_on_the_loop_reads_its_journal_off_it(journal):
    """``Runner.run`` of a protected agent whose model repeats one search: the tool input
    guardrail asks the run guard without blocking the loop, and the tripwire that ends
    the run carries the stop packet, built off the loop."""
    pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    from agents import Agent, Runner, ToolInputGuardrailTripwireTriggered, function_tool
    from agents.testing import ScriptedModel, function_call

    from toolbreaker.integrations.openai_agents import protect, run_config

    @function_tool
    async def search(query: str) -> dict[str, Any]:
        """Search the catalog."""
        return {"query": query, "hits": 0}

    steps = [[function_call("search", {"query": "usb"}, call_id=f"c{n}")] for n in range(8)]
    guard = RunGuard("oa-1", budget=Budget(max_repeats=2), journal=journal)
    agent = protect(
        Agent(name="shop", model=ScriptedModel(steps), tools=[search]),
        registry=registry(),
        guard=guard,
    )
    spy = LoopSpy(journal)

    with pytest.raises(ToolInputGuardrailTripwireTriggered) as tripped:
        asyncio.run(Runner.run(agent, "usb cable", run_config=run_config()))

    packet = tripped.value.output.output_info
    assert packet["condition"] == "repeated-action"
    assert spy.called("journal_entries") >= 1
    assert spy.on_loop == [], spy.on_loop


@pytest.mark.usefixtures("_no_tracing")
@pytest.mark.parametrize("how", ["reset", "timeout", "success"])
def test_an_openai_agents_write_journals_off_the_loop(journal, how):
    """A protected write through ``Runner.run``: its journal entry before it runs, and its
    settlement (a success, a reset answered by the run's error formatter, a deadline
    answered by the tool's timeout function, each an unknown outcome that is reconciled)
    reach the journal from worker threads, never from the loop."""
    pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    from agents import Agent, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect, run_config

    seen: list[bool] = []

    @function_tool(timeout=0.05 if how == "timeout" else None)
    async def create_ticket(title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        if how == "reset":
            raise ConnectionResetError("the provider reset the connection")
        if how == "timeout":
            await asyncio.Event().wait()  # only the SDK's deadline ends it
        return {"id": "T-1", "key": idempotency_key}

    def reconcile(key: str, args: Any) -> Any:
        seen.append(asyncio._get_running_loop() is not None)

    guard = RunGuard("oa-write", journal=journal)
    guard.ensure_tool("create_ticket", risk="reversible_write", reconcile=reconcile)
    steps = [
        [function_call("create_ticket", {"title": "refund"}, call_id="w1")],
        [assistant_message("done")],
    ]
    agent = protect(
        Agent(name="desk", model=ScriptedModel(steps), tools=[create_ticket]),
        registry=registry(),
        guard=guard,
    )
    spy = LoopSpy(journal)

    result = asyncio.run(Runner.run(agent, "refund A-1", run_config=run_config()))

    assert result.final_output == "done"
    entries = journal.journal_entries("oa-write")
    assert [e["status"] for e in entries] == (
        ["confirmed"] if how == "success" else ["reconciled-absent"]
    )
    assert seen == ([] if how == "success" else [False])
    assert spy.called("journal_put") >= 2
    assert spy.on_loop == [], spy.on_loop


# -- MCP: a client session ---------------------------------------------------------------------


def test_an_mcp_clients_stop_result_is_built_off_the_loop(journal):
    """``GuardedClient.call_tool`` of a run that repeats one search: the stop result
    carries the stop packet in its ``_meta``, its journal read made in a worker thread, as
    is ``astop_packet()``'s."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    import anyio
    from mcp import Client
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from toolbreaker.integrations.mcp import ANSWER_META_KEY, STOP_PACKET_META_KEY, GuardedClient

    server = MCPServer("catalog")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search(q: str) -> dict[str, Any]:
        return {"q": q, "hits": 0}

    guard = RunGuard("mcp-1", budget=Budget(max_repeats=2), journal=journal)
    spy = LoopSpy(journal)

    async def main() -> Any:
        async with Client(server) as client:
            proxy = GuardedClient(client, server="catalog", guard=guard, timeout=2.0)
            for _ in range(8):
                result = await proxy.call_tool("search", {"q": "usb"})
                if proxy.stopped is not None:
                    return result, await proxy.astop_packet()
        raise AssertionError("never stopped")

    stop, packet = anyio.run(main)
    assert stop.meta[ANSWER_META_KEY] == "run_stopped"
    assert stop.meta[STOP_PACKET_META_KEY]["condition"] == "repeated-action"
    assert packet is not None
    assert packet.condition == "repeated-action"
    assert spy.called("journal_entries") >= 2
    assert spy.on_loop == [], spy.on_loop


# -- Pydantic AI: agent.run and arun_stop -----------------------------------------------------


def test_a_pydantic_ai_run_stopped_on_the_loop_reads_its_journal_off_it(journal):
    """``agent.run`` with the capability and a model repeating one lookup: the run ends
    with ``RunCancelled``, and ``arun_stop()`` (``run_stop()``'s async twin) gives the
    stop packet, its journal read made off the loop."""
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, arun_stop, run_stop

    def model(messages: Any, info: Any) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "renewal"})])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    async def lookup(q: str) -> dict[str, Any]:
        """A read that always answers the same."""
        return {"q": q, "hits": 0}

    guard = RunGuard("pa-1", budget=Budget(max_repeats=2), journal=journal)
    spy = LoopSpy(journal)

    async def main() -> Any:
        try:
            await agent.run("renew", capabilities=[ToolbreakerCapability(guard)])
        except RunCancelled as exc:
            return await arun_stop(exc, guard), exc
        raise AssertionError("never stopped")

    stop, cancelled = asyncio.run(main())
    assert stop is not None
    assert stop.packet.condition == "repeated-action"
    assert stop.turn is not None
    assert spy.called("journal_entries") >= 1
    assert spy.on_loop == [], spy.on_loop
    sync = run_stop(cancelled, guard)  # the sync twin, outside any loop, says the same
    assert sync is not None
    assert sync.packet.to_dict() == stop.packet.to_dict()


# -- Google ADK: the Runner's run_async with the plugin ----------------------------------------


def test_a_google_adk_run_stopped_on_the_loop_reads_its_journal_off_it(journal):
    """An ADK ``Runner.run_async`` whose app carries the plugin: a write, then a model
    repeating one lookup until the guard stops it; the write's journal entries, the
    settlements and the stop packet's journal read (in ``before_model_callback``, which
    ends the run) were all made in worker threads."""
    pytest.importorskip("google.adk", reason="the google-adk extra is not installed")
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.function_tool import FunctionTool
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, stop_of, tool_metadata

    asked = itertools.count()

    class Model(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            if next(asked) == 0:
                call = types.FunctionCall(name="note", args={"text": "renewal asked"})
            else:
                call = types.FunctionCall(name="lookup", args={"q": "renewal"})
            parts = [types.Part(function_call=call)]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    async def note(text: str, idempotency_key: str = "") -> dict[str, Any]:
        """Write a note on the ticket."""
        return {"noted": text, "key": idempotency_key}

    async def lookup(q: str) -> dict[str, Any]:
        """A read that always answers the same."""
        return {"q": q, "hits": 0}

    write = FunctionTool(note)
    write.custom_metadata = tool_metadata(risk="reversible_write")
    agent = LlmAgent(name="desk", model=Model(model="scripted"), tools=[write, lookup])
    guard = RunGuard("adk-1", budget=Budget(max_repeats=2), journal=journal)
    plugin = ToolbreakerPlugin(guard)
    spy = LoopSpy(journal)

    async def main() -> list[Any]:
        runner = InMemoryRunner(app=App(name="desk", root_agent=agent, plugins=[plugin]))
        try:
            session = await runner.session_service.create_session(app_name="desk", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="renew")])
            return [
                e
                async for e in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                )
            ]
        finally:
            await runner.close()

    events = asyncio.run(main())
    packet = stop_of(events)
    assert packet is not None
    assert packet["condition"] == "repeated-action"
    assert [e["status"] for e in journal.journal_entries("adk-1")] == ["confirmed"]
    assert spy.called("journal_put") >= 2  # the write: pending, then confirmed
    assert spy.called("journal_entries") >= 1  # the stop's packet
    assert spy.on_loop == [], spy.on_loop


# -- LlamaIndex: the agent workflow's run, and arun_stop -----------------------------------------


@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
@pytest.mark.parametrize("write", [False, True], ids=["read", "write"])
def test_a_llama_index_workflow_stopped_on_the_loop_reads_its_journal_off_it(journal, write):
    """A protected ``FunctionAgent`` run whose model repeats one call (a read, or a write
    whose journal entries are written before and after it runs): the run ends with the
    stop packet built in the agent's ``take_step``, and ``arun_stop()`` (``run_stop()``'s
    async twin) reads it again; every journal round trip ran in a worker thread."""
    pytest.importorskip("llama_index.core", reason="the llama-index extra is not installed")
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    from toolbreaker.integrations.llama_index import STOP_KEY, arun_stop, protect, run_stop

    counter = itertools.count()
    name = "create_ticket" if write else "search"

    def model(messages: Any, **kwargs: Any) -> ChatMessage:
        block = ToolCallBlock(
            tool_call_id=f"c{next(counter)}", tool_name=name, tool_kwargs={"q": "usb"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    async def search(q: str) -> dict[str, Any]:
        """Search the catalog."""
        return {"q": q, "hits": 0}

    async def create_ticket(q: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a ticket."""
        return {"id": "T-1", "key": idempotency_key}

    guard = RunGuard("li-1", budget=Budget(max_repeats=2), journal=journal)
    if write:
        guard.ensure_tool("create_ticket", risk="reversible_write")
    tool = FunctionTool.from_defaults(create_ticket if write else search)
    agent = FunctionAgent(tools=[tool], llm=MockFunctionCallingLLM(response_generator=model))
    guarded = protect(agent, guard=guard, registry=registry())
    spy = LoopSpy(journal)

    async def main() -> Any:
        result = await guarded.run(user_msg="usb cable")
        return result, await arun_stop(result, guard)

    result, stop = asyncio.run(main())
    assert stop is not None
    assert result.response.additional_kwargs[STOP_KEY]["condition"] == "repeated-action"
    assert stop.packet.condition == "repeated-action"
    assert spy.called("journal_entries") >= 2  # take_step's packet and arun_stop's
    if write:
        assert spy.called("journal_put") >= 2  # the write's entries, before and after
        assert stop.packet.confirmed
    assert spy.on_loop == [], spy.on_loop
    sync = run_stop(result, guard)  # the sync twin, outside any loop, says the same
    assert sync is not None
    assert sync.packet.to_dict() == stop.packet.to_dict()


# -- hide open tools: each model request asks the breakers, off the loop -----------------------


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[SQLiteStore]:
    """The breakers' shared store, polling for other processes' changes once an hour: its
    views are never trusted, so every look at a breaker's state is a round trip (what
    any shared store does until its feed confirms a key, and after a fault)."""
    with SQLiteStore(tmp_path / "fleet.db", poll_interval=3600) as store:
        yield store


def isolated(store: SQLiteStore, *names: str) -> Registry:
    """A registry on ``store`` whose breakers of ``names`` an operator isolated."""
    made = Registry(
        Policy(failure_threshold=5), store=store, default_timeout=2.0, default_enforce="cooperative"
    )
    for name in names:
        made.get(name, tool=name).isolate("maintenance")
    return made


def test_langchain_hides_open_tools_without_blocking_the_loop(fleet):
    """``awrap_model_call`` with ``hide_open_tools``: the isolated tool is left out of the
    model's tools and named in its system prompt; each breaker's state was read from the
    store in a worker thread."""
    pytest.importorskip("langchain", reason="the langchain extra is not installed")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    prompts: list[Any] = []
    offered: list[list[str]] = []

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
            offered.append([getattr(t, "name", None) or t["name"] for t in tools])
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
            prompts.append(list(messages))
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

    from langchain_core.tools import tool

    @tool
    async def lookup(q: str) -> dict:
        """Look an order up."""
        return {"q": q}

    registry = isolated(fleet, "search")
    middleware = ToolbreakerMiddleware(
        registry=registry, tools={"search": {}, "lookup": {}}, hide_open_tools=True
    )
    spy = LoopSpy(fleet)
    agent = create_agent(
        Scripted(messages=iter([AIMessage("done")])),
        [*langchain_tools(), lookup],
        middleware=[middleware],
    )
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("hi")]}, context={"task_id": "h-1"}))

    assert offered[-1] == ["lookup"]
    assert '"search"' in prompts[0][0].content
    assert spy.called("load") >= 2
    assert spy.on_loop == [], spy.on_loop


@pytest.mark.usefixtures("_no_tracing")
def test_openai_agents_hides_open_tools_without_blocking_the_loop(fleet):
    """``protect(..., hide_open_tools=True)``: the isolated tool's ``is_enabled`` and the
    instructions' hidden line ask its breaker, each from a worker thread."""
    pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    from agents import Agent, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from toolbreaker.integrations.openai_agents import protect, run_config

    @function_tool
    async def search(query: str) -> dict[str, Any]:
        """Search the catalog."""
        return {"query": query}

    @function_tool
    async def lookup(order: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order": order}

    seen: list[Any] = []

    def respond(call: Any) -> list[Any]:
        seen.append(call)
        return [assistant_message("ok")]

    registry = isolated(fleet, "search")
    registry.get("lookup", tool="lookup")
    agent = Agent(
        name="shop",
        instructions="You sell cables.",
        model=ScriptedModel([ModelStep.respond(respond)]),
        tools=[search, lookup],
    )
    spy = LoopSpy(fleet)
    asyncio.run(
        Runner.run(
            protect(agent, registry=registry, hide_open_tools=True), "hi", run_config=run_config()
        )
    )

    assert {tool.name for tool in seen[0].tools} == {"lookup"}
    assert '"search"' in (seen[0].system_instructions or "")
    assert spy.called("load") >= 2
    assert spy.on_loop == [], spy.on_loop


def test_mcp_hides_open_tools_without_blocking_the_loop(fleet):
    """``list_tools`` with ``hide_open_tools``: the isolated tool is left out and named by
    ``hidden_tools_line()``; every breaker was asked from a worker thread."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    import anyio
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from toolbreaker.integrations.mcp import GuardedClient

    server = MCPServer("catalog")

    @server.tool()
    async def search(q: str) -> str:
        return q

    @server.tool()
    async def lookup(order: str) -> str:
        return order

    registry = Registry(Policy(failure_threshold=5), store=fleet, default_timeout=2.0)
    registry.get("catalog", "search", tool="search").isolate("maintenance")
    spy = LoopSpy(fleet)

    async def main() -> Any:
        async with Client(server) as client:
            proxy = GuardedClient(client, server="catalog", registry=registry, hide_open_tools=True)
            listing = await proxy.list_tools()
            return [t.name for t in listing.tools], proxy.hidden_tools_line()

    names, line = anyio.run(main)
    assert names == ["lookup"]
    assert '"search"' in line
    assert spy.called("load") >= 2
    assert spy.on_loop == [], spy.on_loop


def test_pydantic_ai_hides_open_tools_without_blocking_the_loop(fleet):
    """``prepare_tools`` with ``hide_open_tools``: the isolated tool is not offered to the
    model; its breaker was asked from a worker thread (the hidden line's instruction
    function is a plain one, which Pydantic AI runs in its executor)."""
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    offered: list[set[str]] = []

    def model(messages: Any, info: Any) -> ModelResponse:
        offered.append({tool.name for tool in info.function_tools})
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    async def search(q: str) -> str:
        """Search the catalog."""
        return q

    @agent.tool_plain
    async def lookup(order: str) -> str:
        """Look an order up."""
        return order

    registry = isolated(fleet, "search", "lookup")
    registry.get("lookup", tool="lookup").release()
    capability = ToolbreakerCapability(RunGuard("h-pa"), registry=registry, hide_open_tools=True)
    spy = LoopSpy(fleet)
    asyncio.run(agent.run("hi", capabilities=[capability]))

    assert offered == [{"lookup"}]
    assert spy.called("load") >= 2
    assert spy.on_loop == [], spy.on_loop


# -- httpx: the async transport ------------------------------------------------------------------


def test_the_async_httpx_transport_never_blocks_the_loop_on_the_store(fleet):
    """``AsyncBreakerTransport`` over real HTTP to a failing service, its breaker on a
    shared SQLite store: the admissions, the failures that open the breaker and the
    rejection after it reach the store from worker threads or awaited, never inline on
    the loop (the sync transport keeps its blocking ``allow()``/``record()``)."""
    import httpx

    from toolbreaker.errors import CircuitOpen
    from toolbreaker.integrations.httpx import AsyncBreakerTransport
    from toolbreaker.testing import ToolService

    registry = Registry(Policy(failure_threshold=2, cooldown_ms=60_000), store=fleet)
    spy = LoopSpy(fleet)

    async def main(url: str) -> list[Any]:
        transport = AsyncBreakerTransport(registry=registry)
        seen: list[Any] = []
        async with httpx.AsyncClient(transport=transport, base_url=url) as client:
            for _ in range(3):
                try:
                    seen.append((await client.get("/search", params={"q": "x"})).status_code)
                except CircuitOpen as refused:
                    seen.append(refused.reason)
        return seen

    with ToolService() as service:
        service.outage("GET /search")
        seen = asyncio.run(main(service.url))
        assert service.hits["GET /search"] == 2
    assert seen == [503, 503, "cooldown"]  # the opening went through the store (aapply)
    assert spy.on_loop == [], spy.on_loop


# -- and a look at the source: no coroutine of an adapter calls a blocking twin ---------------

#: The methods of the run guard, its steps and the breaker that may wait on a store and
#: have an async twin (``astop_packet``, ``abegin``, ``asucceeded`` ...).
BLOCKING_TWINS = frozenset(
    {"stop_packet", "begin", "succeeded", "failed", "run_step", "admit", "record", "hidden_for_ms"}
)


def _blocking_calls(source: str, label: str) -> list[str]:
    """Calls of a blocking twin made directly in the body of an ``async def``."""
    import ast

    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in BLOCKING_TWINS
            ):
                found.append(f"{label}:{node.lineno}: {fn.name}: {ast.unparse(node.func)}")
    return found


def test_no_adapter_coroutine_calls_a_blocking_twin():
    """Every ``async def`` of ``toolbreaker.integrations`` awaits the async twin of a run
    guard's, a step's or a breaker's store-touching method, never the blocking one (the
    tests above drive each path; this catches a new one)."""
    import toolbreaker.integrations as package

    root = Path(package.__file__).parent
    wrong = []
    for path in sorted(root.glob("*.py")):
        wrong.extend(_blocking_calls(path.read_text(encoding="utf-8"), path.name))
    assert wrong == []


def test_the_blocking_twin_finder_finds_them():
    """The finder sees a blocking call in a coroutine, nested ones too, and leaves sync
    functions and awaited twins alone."""
    code = (
        "async def hook(guard, step):\n"
        "    packet = guard.stop_packet()\n"
        "    def inner():\n"
        "        return step.succeeded(1)\n"
        "    await step.afailed(None)\n"
        "def sync(guard):\n"
        "    return guard.stop_packet()\n"
    )
    found = _blocking_calls(code, "sample.py")
    assert [line.split(": ")[0] for line in found] == ["sample.py:2", "sample.py:4"]
