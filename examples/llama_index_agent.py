"""A LlamaIndex FunctionAgent behind toolbreaker, offline: no API key, LlamaIndex's mock LLM.

The catalog search is down (real HTTP 503s from the local tool service): the breaker
opens, the next search never leaves the process, and the model switches to the snapshot
fallback it was told about, then opens a ticket (a write, with its idempotency key). A
second run loops on one lookup and is stopped by the run guard: the workflow ends through
its own path with a final message that carries the stop packet for the operator.

Run: python examples/llama_index_agent.py
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from toolbreaker import Breaker, Budget, Registry, RunGuard, Transition, idempotency_key
from toolbreaker.core import changed_phase
from toolbreaker.integrations.llama_index import protect, run_stop
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import ToolService, request_json

SHEET = Path(__file__).with_name("breakers.toml")


class Model:
    """A scripted model: ``decide(tool, result)`` picks the next call from the last result."""

    def __init__(self, decide: Callable[[str | None, Any], ChatMessage]) -> None:
        self.decide = decide
        self.issued: dict[str, str] = {}

    def __call__(self, messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        last = messages[-1]
        if last.role != MessageRole.TOOL:
            return self.decide(None, None)
        tool = self.issued[last.additional_kwargs["tool_call_id"]]
        text = last.content or ""
        print(f"  model <- {tool}: {text[:140]}")
        try:
            result: Any = json.loads(text)
        except ValueError:
            result = text  # a tool's own result, as LlamaIndex writes it (str())
        return self.decide(tool, result)

    def call(self, tool: str, **args: Any) -> ChatMessage:
        print(f"  model -> {tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
        call_id = f"call-{len(self.issued)}"
        self.issued[call_id] = tool
        block = ToolCallBlock(tool_call_id=call_id, tool_name=tool, tool_kwargs=args)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


def shopping_model() -> Model:
    """Retries the search until told it is unavailable, then follows the advice."""

    def decide(tool: str | None, result: Any) -> ChatMessage:
        if tool is None:
            return model.call("search_catalog", q="usb cable")
        if tool == "search_catalog":
            if isinstance(result, dict) and result.get("tool_unavailable"):
                return model.call(result["fallback"], q="usb cable")
            return model.call("search_catalog", q="usb-c cable")
        if tool == "search_catalog_snapshot":
            return model.call("create_ticket", title="catalog search is down", body="seen")
        text = "Found cables in yesterday's snapshot; prices may be out of date."
        return ChatMessage(role=MessageRole.ASSISTANT, content=text)

    model = Model(decide)
    return model


def looping_model() -> Model:
    """Asks for the same order again and again, as a confused model does."""
    model = Model(lambda tool, result: model.call("get_order", order_id="A-1001"))
    return model


def tools(base: str) -> list[FunctionTool]:
    def search_catalog(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        return request_json("GET", f"{base}/search?q={urllib.parse.quote(q)}", timeout=4.0)

    def search_catalog_snapshot(q: str) -> dict[str, Any]:
        """Search yesterday's snapshot of the catalog."""
        url = f"{base}/search_snapshot?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=4.0)

    def get_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return request_json("GET", f"{base}/orders/{order_id}", timeout=4.0)

    def create_ticket(title: str, body: str) -> dict[str, Any]:
        """Open a ticket for the operations team."""
        key = idempotency_key()  # the run guard's, never the model's
        print(f"  create_ticket runs with Idempotency-Key {key}")
        headers = {"Idempotency-Key": key or ""}
        payload = {"title": title, "body": body}
        return request_json("POST", f"{base}/tickets", body=payload, headers=headers, timeout=4.0)

    made = (search_catalog, search_catalog_snapshot, get_order, create_ticket)
    return [FunctionTool.from_defaults(fn) for fn in made]


def show_transition(record: Transition, breaker: Breaker) -> None:
    if changed_phase(record):
        print(
            f"  breaker {breaker.key}: {record.from_phase} -> {record.to_phase} ({record.reason})"
        )


def new_guard(task: str, registry: Registry, journal: MemoryStore, **budget: Any) -> RunGuard:
    guard = RunGuard(task, budget=Budget(**budget), journal=journal)
    guard.ensure_tool(
        "create_ticket", risk="reversible_write", breaker=registry.get("tickets", "write")
    )
    return guard


async def main() -> None:
    with ToolService() as service:
        registry = Registry.from_toml(SHEET)  # process-wide: every run shares these breakers
        registry.get("search", "read").add_listener(show_transition)
        journal = MemoryStore()
        service.outage("GET /search")

        for n, user in enumerate(["alice", "bob"], start=1):
            print(f"run {n} ({user}): the catalog search answers 503")
            llm = MockFunctionCallingLLM(response_generator=shopping_model())
            agent = FunctionAgent(tools=tools(service.url), llm=llm)
            guard = new_guard(f"order-help-{user}", registry, journal)
            result = await protect(agent, guard=guard, registry=registry).run(user_msg="usb?")
            print(f"  answer: {result.response.content}")
            print(f"  searches that reached the service so far: {service.hits['GET /search']}\n")

        print("run 3: a model that repeats itself")
        llm = MockFunctionCallingLLM(response_generator=looping_model())
        agent = FunctionAgent(tools=tools(service.url), llm=llm)
        guard = new_guard("order-help-carol", registry, journal, max_repeats=2)
        result = await protect(agent, guard=guard, registry=registry).run(user_msg="A-1001?")
        stop = run_stop(result, guard)
        if stop is None:
            raise SystemExit("the guard should have stopped this run")
        print(f"  final message: {str(result.response.content)[:100]}...")
        print("  stop packet:")
        print("\n".join("    " + line for line in stop.packet.to_json().splitlines()))


if __name__ == "__main__":
    asyncio.run(main())
