"""The model counts (issue 23): each adapter feeds the model's own usage object into the
run's budget, priced by the user's table, inside the real framework with its own
scripted model; the stop packet shows the models' part of the cost."""

from __future__ import annotations

import asyncio
import itertools
import sys
from decimal import Decimal
from typing import Any

import pytest

from toolbreaker import Budget, ModelPrice, RunGuard

PRICES = {"*": ModelPrice("1", "2")}  # $1 / $2 per million input / output tokens


def search_tool(entered: list[str]) -> Any:
    def search(q: str) -> dict[str, str]:
        """Search the catalog."""
        entered.append(q)
        return {"hits": q}

    return search


def test_langchain_counts_each_ai_messages_usage():
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
            return self

    usage = {"input_tokens": 1_000, "output_tokens": 500, "total_tokens": 1_500}
    meta = {"model_name": "gpt-4o-mini"}
    replies = iter(
        [
            AIMessage(
                "",
                tool_calls=[{"name": "search", "args": {"q": "usb"}, "id": "c1"}],
                usage_metadata=usage,
                response_metadata=meta,
            ),
            AIMessage("found it", usage_metadata=usage, response_metadata=meta),
        ]
    )
    guard = RunGuard("t", budget=Budget(max_cost="1", prices=PRICES))
    middleware = ToolbreakerMiddleware(guard=guard)
    entered: list[str] = []
    agent = create_agent(
        Scripted(messages=replies), [tool(search_tool(entered))], middleware=[middleware]
    )
    agent.invoke({"messages": [{"role": "user", "content": "find a usb cable"}]})
    counters = guard.stop_packet().counters
    assert entered == ["usb"]
    assert counters["usage"] == [
        {
            "model": "gpt-4o-mini",
            "input_tokens": 2000,
            "output_tokens": 1000,
            "requests": 2,
            "cost": "0.004",
        }
    ]
    assert counters["model_cost"] == "0.004"
    assert guard.state.cost == Decimal("0.004")


def test_openai_agents_counts_each_responses_usage():
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    from agents.usage import Usage

    from toolbreaker.integrations.openai_agents import protect, run_config

    entered: list[str] = []
    used = Usage(requests=1, input_tokens=1_000, output_tokens=500, total_tokens=1_500)
    steps = [
        ModelStep(output=[function_call("search", {"q": "usb"}, call_id="c1")], usage=used),
        ModelStep(output=[assistant_message("found it")], usage=used),
    ]
    guard = RunGuard("t", budget=Budget(max_cost="1", prices=PRICES))
    agent = protect(
        Agent(name="shop", model=ScriptedModel(steps), tools=[function_tool(search_tool(entered))]),
        guard=guard,
    )
    asyncio.run(Runner.run(agent, "find a usb cable", run_config=run_config()))
    counters = guard.stop_packet().counters
    assert entered == ["usb"]
    assert counters["usage"][0]["input_tokens"] == 2000
    assert counters["usage"][0]["output_tokens"] == 1000
    assert counters["usage"][0]["model"] == "ScriptedModel"
    assert counters["model_cost"] == "0.004"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="pydantic-ai-slim 2.60+ needs 3.11")
def test_pydantic_ai_counts_each_responses_usage():
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    turns = itertools.count()

    def brain(messages: list[Any], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=1_000, output_tokens=500)
        if next(turns) == 0:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "usb"})], usage=usage)
        return ModelResponse(parts=[TextPart("found it")], usage=usage)

    entered: list[str] = []
    agent = Agent(FunctionModel(brain), tools=[search_tool(entered)])
    guard = RunGuard("t", budget=Budget(max_cost="1", prices=PRICES))
    asyncio.run(agent.run("find a usb cable", capabilities=[ToolbreakerCapability(guard)]))
    counters = guard.stop_packet().counters
    assert entered == ["usb"]
    assert [u["input_tokens"] for u in counters["usage"]] == [2000]
    assert counters["model_cost"] == "0.004"


def test_google_adk_counts_each_responses_usage():
    pytest.importorskip("google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    turns = itertools.count()

    class Model(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            if next(turns) == 0:
                call = types.FunctionCall(name="search", args={"q": "usb"})
                parts = [types.Part(function_call=call)]
            else:
                parts = [types.Part(text="found it")]
            usage = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1_000, candidates_token_count=500
            )
            yield LlmResponse(
                content=types.Content(role="model", parts=parts), usage_metadata=usage
            )

    entered: list[str] = []
    agent = LlmAgent(name="shop", model=Model(model="gemini-x"), tools=[search_tool(entered)])
    guard = RunGuard("t", budget=Budget(max_cost="1", prices=PRICES))
    app = App(name="shop", root_agent=agent, plugins=[ToolbreakerPlugin(guard)])

    async def main() -> None:
        runner = InMemoryRunner(app=app)
        try:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="find a usb cable")])
            async for _ in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                pass
        finally:
            await runner.close()

    asyncio.run(main())
    counters = guard.stop_packet().counters
    assert entered == ["usb"]
    assert counters["usage"] == [
        {
            "model": "gemini-x",
            "input_tokens": 2000,
            "output_tokens": 1000,
            "requests": 2,
            "cost": "0.004",
        }
    ]
    assert counters["model_cost"] == "0.004"


@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_llama_index_counts_each_responses_usage():
    pytest.importorskip("llama_index.core")
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        MessageRole,
        ToolCallBlock,
    )
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.llms.callbacks import llm_chat_callback

    from toolbreaker.integrations.llama_index import protect

    turns = itertools.count()
    usage = {"prompt_tokens": 1_000, "completion_tokens": 500, "total_tokens": 1_500}

    class Metered(MockFunctionCallingLLM):
        """LlamaIndex's mock, reporting usage as its OpenAI integration does."""

        @llm_chat_callback()
        async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
            if next(turns) == 0:
                block = ToolCallBlock(
                    tool_call_id="c1", tool_name="search", tool_kwargs={"q": "usb"}
                )
                message = ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
            else:
                message = ChatMessage(role=MessageRole.ASSISTANT, content="found it")

            async def stream() -> Any:
                yield ChatResponse(
                    message=message, raw={"model": "gpt-4o-mini"}, additional_kwargs=usage
                )

            return stream()

    entered: list[str] = []
    guard = RunGuard("t", budget=Budget(max_cost="1", prices=PRICES))
    agent = FunctionAgent(tools=[search_tool(entered)], llm=Metered())

    async def main() -> Any:
        return await protect(agent, guard=guard).run(user_msg="find a usb cable")

    result = asyncio.run(main())
    counters = guard.stop_packet().counters
    assert result.response.content == "found it"
    assert entered == ["usb"]
    assert counters["usage"] == [
        {
            "model": "gpt-4o-mini",
            "input_tokens": 2000,
            "output_tokens": 1000,
            "requests": 2,
            "cost": "0.004",
        }
    ]
    assert counters["model_cost"] == "0.004"


def test_a_usage_the_guard_cannot_count_never_changes_the_response(caplog):
    """A framework's odd usage (no counts, a negative one) is logged, never raised."""
    from toolbreaker.integrations import count_usage

    guard = RunGuard("t", budget=Budget(prices=PRICES))
    count_usage(guard, None, None, None)
    count_usage(guard, "m", -1, 5)
    assert [u.model for u in guard.state.usage] == ["unknown"]
    assert "could not be counted" in caplog.text
