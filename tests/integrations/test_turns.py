"""The per-turn tool-call limit through the framework adapters, with their offline models.

One Pydantic AI user saw 792 tool calls issued in one model turn. With
``Budget(max_calls_per_turn=3)`` a model response that issues 10 calls gets 3 run and 7
*deferred* answers (not made, not queued, "call it again next turn"); the model's next
turn may run 3 more. The tools call the real local service.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from toolbreaker import Budget, Policy, Registry, RunGuard
from toolbreaker.testing import request_json

QUERIES = [f"cable {n}" for n in range(10)]


def registry() -> Registry:
    return Registry(Policy(failure_threshold=5), default_timeout=2.0, default_enforce="cooperative")


def guard() -> RunGuard:
    return RunGuard("turns", budget=Budget(max_calls_per_turn=3, max_tool_calls=50))


def test_pydantic_ai_defers_calls_beyond_the_turn_limit(service):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    read: list[list[Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        read.append([_decoded(p.content) for p in returns])
        if len(read) == 1:  # turn 1: ten searches at once
            return ModelResponse(parts=[ToolCallPart("search", {"q": q}) for q in QUERIES])
        if len(read) == 2:  # turn 2: re-issue what was deferred
            again = [q for q, r in zip(QUERIES, read[1], strict=True) if r.get("deferred")]
            return ModelResponse(parts=[ToolCallPart("search", {"q": q}) for q in again])
        return ModelResponse(parts=[TextPart("done")])

    ran: list[str] = []
    agent: Any = Agent(FunctionModel(model))

    @agent.tool_plain
    def search(q: str) -> dict[str, Any]:
        """Search the catalog."""
        ran.append(q)
        return request_json("GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=2)

    run_guard = guard()
    capability = ToolbreakerCapability(run_guard, registry=registry())
    result = asyncio.run(agent.run("find cables", capabilities=[capability]))

    assert result.output == "done"
    first, second = read[1], read[2]
    deferred = [r for r in first if r.get("deferred")]
    assert len(deferred) == 7
    assert len(first) == 10
    assert deferred[0]["resubmit"] == "next-turn"
    assert deferred[0]["reason"] == "turn-limit"
    assert "next turn" in deferred[0]["instruction"]
    assert sum(1 for r in second if r.get("deferred")) == 4  # 3 of the 7 ran in turn 2
    assert len(ran) == 6
    assert service.hits["GET /search"] == 6
    assert run_guard.state.deferred == 11
    assert run_guard.state.calls == 6
    assert run_guard.stop_packet().counters["deferred"] == 11


def test_openai_agents_defers_calls_beyond_the_turn_limit(service):
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
    from agents.testing import function_call as fcall

    from toolbreaker.integrations.openai_agents import protect, run_config

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def search(query: str) -> dict[str, Any]:
        """Search the catalog."""
        ran.append(query)
        q = urllib.parse.quote(query)
        return request_json("GET", f"{service.url}/search?q={q}", timeout=2)

    read: list[dict[str, Any]] = []

    def second_turn(call: ModelCall) -> list[Any]:
        results = _outputs(call)
        read.append(results)
        again = [cid for cid, r in results.items() if isinstance(r, dict) and r.get("deferred")]
        return [fcall("search", {"query": f"again {cid}"}, call_id=f"r{cid}") for cid in again]

    def last_turn(call: ModelCall) -> list[Any]:
        read.append(_outputs(call))
        return [assistant_message("done")]

    steps = [
        [fcall("search", {"query": q}, call_id=f"c{n}") for n, q in enumerate(QUERIES)],
        ModelStep.respond(second_turn),
        ModelStep.respond(last_turn),
    ]
    run_guard = guard()
    agent = protect(
        Agent(name="shop", model=ScriptedModel(steps), tools=[search]),
        registry=registry(),
        guard=run_guard,
    )
    result = asyncio.run(Runner.run(agent, "find cables", run_config=run_config()))

    assert result.final_output == "done"
    first = read[0]
    deferred = {cid: r for cid, r in first.items() if isinstance(r, dict) and r.get("deferred")}
    assert len(first) == 10
    assert len(deferred) == 7
    assert all(r["reason"] == "turn-limit" for r in deferred.values())
    later = [r for cid, r in read[1].items() if cid.startswith("r")]
    assert sum(1 for r in later if isinstance(r, dict) and r.get("deferred")) == 4
    assert len(ran) == 6
    assert service.hits["GET /search"] == 6
    assert run_guard.state.deferred == 11


def test_langchain_defers_calls_beyond_the_turn_limit(service):
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    ran: list[str] = []

    @tool
    def search(q: str) -> dict:
        """Search the catalog."""
        ran.append(q)
        return request_json("GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=2)

    read: list[list[Any]] = []

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

    def replies() -> Iterator[AIMessage]:
        calls = [{"name": "search", "args": {"q": q}, "id": f"c{n}"} for n, q in enumerate(QUERIES)]
        yield AIMessage("", tool_calls=calls)
        again = [c for c in calls if read[-1][int(c["id"][1:])].get("deferred")]
        yield AIMessage("", tool_calls=[{**c, "id": "r" + c["id"]} for c in again])
        yield AIMessage("done")

    model = Model(messages=replies())
    middleware = ToolbreakerMiddleware(registry=registry(), guard=guard())
    agent = create_agent(model, [search], middleware=[middleware])

    original = model._generate

    def generate(messages: Any, *args: Any, **kwargs: Any) -> Any:
        last = max(i for i, m in enumerate(messages) if isinstance(m, (AIMessage, HumanMessage)))
        read.append([_decoded(m.content) for m in messages[last:] if isinstance(m, ToolMessage)])
        return original(messages, *args, **kwargs)

    object.__setattr__(model, "_generate", generate)
    out = agent.invoke({"messages": [HumanMessage("find cables")]}, context={"task_id": "t"})

    assert out["messages"][-1].content == "done"
    first = read[1]
    assert len(first) == 10
    assert sum(1 for r in first if isinstance(r, dict) and r.get("deferred")) == 7
    assert sum(1 for r in read[2] if isinstance(r, dict) and r.get("deferred")) == 4
    assert len(ran) == 6
    assert service.hits["GET /search"] == 6
    assert middleware.guard_for("t").state.deferred == 11


def _decoded(content: Any) -> Any:
    if not isinstance(content, str):
        return content
    try:
        return json.loads(content)
    except ValueError:
        return content


def _outputs(call: Any) -> dict[str, Any]:
    import ast

    found: dict[str, Any] = {}
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            text = item["output"]
            try:
                found[item["call_id"]] = json.loads(text)
            except ValueError:
                try:
                    found[item["call_id"]] = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    found[item["call_id"]] = text
    return found


def test_google_adk_defers_calls_beyond_the_turn_limit(service):
    pytest.importorskip("google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    ran: list[str] = []

    async def search(q: str) -> dict[str, Any]:
        """Search the catalog."""
        ran.append(q)
        url = f"{service.url}/search?q={urllib.parse.quote(q)}"
        return await asyncio.to_thread(request_json, "GET", url, timeout=2)

    read: list[list[dict[str, Any]]] = []

    def calls(queries: list[str]) -> list[Any]:
        return [
            types.Part(function_call=types.FunctionCall(name="search", args={"q": q}))
            for q in queries
        ]

    class Model(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            last = llm_request.contents[-1]
            read.append(
                [
                    dict(p.function_response.response or {})
                    for p in last.parts or ()
                    if p.function_response
                ]
            )
            if len(read) == 1:  # turn 1: ten searches at once
                parts = calls(QUERIES)
            elif len(read) == 2:  # turn 2: re-issue what was deferred
                again = [q for q, r in zip(QUERIES, read[1], strict=True) if r.get("deferred")]
                parts = calls(again)
            else:
                parts = [types.Part(text="done")]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    run_guard = guard()
    agent = LlmAgent(name="shop", model=Model(model="scripted"), tools=[search])
    plugin = ToolbreakerPlugin(run_guard, registry=registry())

    async def main() -> list[Any]:
        runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[plugin]))
        try:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="find cables")])
            return [
                e
                async for e in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                )
            ]
        finally:
            await runner.close()

    events = asyncio.run(main())

    assert events[-1].content.parts[0].text == "done"
    first, second = read[1], read[2]
    deferred = [r for r in first if r.get("deferred")]
    assert len(first) == 10
    assert len(deferred) == 7
    assert deferred[0]["reason"] == "turn-limit"
    assert sum(1 for r in second if r.get("deferred")) == 4  # 3 of the 7 ran in turn 2
    assert len(ran) == 6
    assert service.hits["GET /search"] == 6
    assert run_guard.state.deferred == 11
    assert run_guard.state.calls == 6


@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_llama_index_defers_calls_beyond_the_turn_limit(service):
    pytest.importorskip("llama_index.core")
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms import MockFunctionCallingLLM

    from toolbreaker.integrations.llama_index import protect

    ran: list[str] = []

    def search(q: str) -> dict[str, Any]:
        """Search the catalog."""
        ran.append(q)
        return request_json("GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=2)

    read: list[dict[str, Any]] = []

    def calls(queries: list[str], prefix: str) -> ChatMessage:
        blocks = [
            ToolCallBlock(tool_call_id=f"{prefix}{n}", tool_name="search", tool_kwargs={"q": q})
            for n, q in enumerate(queries)
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    def model(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        results: dict[str, Any] = {}
        for message in reversed(messages):
            if message.role != MessageRole.TOOL:
                break
            results[message.additional_kwargs["tool_call_id"]] = _decoded(message.content)
        read.append(results)
        if len(read) == 1:  # turn 1: ten searches at once
            return calls(QUERIES, "c")
        if len(read) == 2:  # turn 2: re-issue what was deferred
            again = [QUERIES[int(cid[1:])] for cid, r in sorted(results.items()) if _deferred(r)]
            return calls(again, "r")
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    run_guard = guard()
    agent = FunctionAgent(tools=[search], llm=MockFunctionCallingLLM(response_generator=model))
    guarded = protect(agent, guard=run_guard, registry=registry())

    async def main() -> Any:
        return await guarded.run(user_msg="find cables")

    result = asyncio.run(main())

    assert result.response.content == "done"
    first, second = read[1], read[2]
    deferred = [r for r in first.values() if _deferred(r)]
    assert len(first) == 10
    assert len(deferred) == 7
    assert all(r["reason"] == "turn-limit" for r in deferred)
    assert sum(1 for r in second.values() if _deferred(r)) == 4  # 3 of the 7 ran in turn 2
    assert len(ran) == 6
    assert service.hits["GET /search"] == 6
    assert run_guard.state.deferred == 11


def _deferred(result: Any) -> bool:
    return isinstance(result, dict) and bool(result.get("deferred"))
