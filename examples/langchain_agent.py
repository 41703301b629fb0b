"""A LangChain agent behind toolbreaker, offline: ``python examples/langchain_agent.py``.

The tools call a real local HTTP service (toolbreaker's ToolService) whose catalog search
is down (503). The model is LangChain's ``GenericFakeChatModel``, taught to accept tools
and to react to what it reads, like a careful model would:

1. it searches; three 503s open the ``catalog`` breaker, and the model reads a
   tool-unavailable result naming the fallback, so it switches to the snapshot;
2. a second run finds the breaker open: its search never reaches the service;
3. a third model keeps asking the same thing; the run guard stops it and the agent ends
   with a stop packet instead of looping until the recursion limit.

Needs ``pip install '.[langchain]'``; no network, no API key.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import Field

from toolbreaker import Breaker, Policy, Registry, Transition
from toolbreaker.core import changed_phase
from toolbreaker.integrations.langchain import STOP_KEY, ToolbreakerMiddleware
from toolbreaker.testing import ToolService, request_json


class ReactiveModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to take tools, answering via a policy."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ReactiveModel:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def model_with(policy: Callable[[list[ToolMessage]], AIMessage]) -> ReactiveModel:
    def replies() -> Iterator[AIMessage]:
        while True:
            results = [m for m in model.prompts[-1] if isinstance(m, ToolMessage)]
            yield policy(results)

    model = ReactiveModel(messages=replies())
    return model


def call(name: str, n: int, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"{name}-{n}"}])


def careful_shopper(results: list[ToolMessage]) -> AIMessage:
    """Retries a transient failure; follows a tool-unavailable instruction to the fallback."""
    last = json.loads(results[-1].content) if results else None
    if last and last.get("tool_unavailable"):
        return call(last["fallback"], len(results), q="usb cable")
    if results and results[-1].name == "search_snapshot":
        names = ", ".join(item["name"] for item in last["results"])
        return AIMessage(f"From yesterday's snapshot (prices may be out of date): {names}")
    return call("search", len(results), q="usb cable")


def show(out: dict[str, Any]) -> None:
    for message in out["messages"]:
        if isinstance(message, HumanMessage):
            print(f"user:  {message.content}")
        elif isinstance(message, ToolMessage):
            print(f"tool:  [{message.status}] {message.content[:150]}")
        elif message.tool_calls:
            for c in message.tool_calls:
                print(f"model: calls {c['name']}({c['args']})")
        else:
            print(f"model: {message.content[:200]}")


def main() -> None:
    with ToolService() as service:
        service.outage("GET /search")  # the live catalog answers 503 to everything
        entered: list[str] = []

        @tool
        def search(q: str) -> dict:
            """Search the live catalog."""
            entered.append("search")
            return request_json("GET", f"{service.url}/search?q={urllib.parse.quote(q)}", timeout=2)

        @tool
        def search_snapshot(q: str) -> dict:
            """Search yesterday's catalog snapshot."""
            path = f"/search_snapshot?q={urllib.parse.quote(q)}"
            return request_json("GET", service.url + path, timeout=2)

        registry = Registry(Policy(failure_threshold=3), default_timeout=2.0)
        guard = ToolbreakerMiddleware(
            registry=registry,
            tools={
                "search": {
                    "dependency": "catalog",
                    "fallback": "search_snapshot",
                    "fallback_note": "say that prices may be out of date",
                },
                "search_snapshot": {"dependency": "catalog-snapshot"},
            },
        )

        def report(record: Transition, _breaker: Breaker) -> None:
            if changed_phase(record):
                print(f"  >> breaker {record.dependency}: {record.from_phase} -> {record.to_phase}")

        guard.breaker_of("search").add_listener(report)
        tools = [search, search_snapshot]
        prompt = "You help customers shop."  # the middleware appends system_prompt_line()

        agent = create_agent(
            model_with(careful_shopper), tools, middleware=[guard], system_prompt=prompt
        )
        print("\n=== run 1: three 503s open the breaker, the model moves to the fallback")
        out = agent.invoke(
            {"messages": [HumanMessage("a usb cable, please")]}, context={"task_id": "run-1"}
        )
        show(out)
        print(f"search entered {len(entered)} times; the service saw {service.hits['GET /search']}")

        agent = create_agent(
            model_with(careful_shopper), tools, middleware=[guard], system_prompt=prompt
        )
        print("\n=== run 2: the breaker is open, search is answered locally")
        out = agent.invoke(
            {"messages": [HumanMessage("and another one")]}, context={"task_id": "run-2"}
        )
        show(out)
        print(f"search entered {len(entered)} times; the service saw {service.hits['GET /search']}")

        stubborn = model_with(lambda results: call("search_snapshot", len(results), q="usb"))
        agent = create_agent(stubborn, tools, middleware=[guard], system_prompt=prompt)
        print("\n=== run 3: the same action again and again; the run guard ends the run")
        out = agent.invoke({"messages": [HumanMessage("usb?")]}, context={"task_id": "run-3"})
        show(out)
        print("\nstop packet (state['toolbreaker_stop']):")
        print(json.dumps(out[STOP_KEY], indent=2))


if __name__ == "__main__":
    main()
