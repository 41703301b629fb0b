"""A Pydantic AI agent behind toolbreaker, offline: no API key, a scripted FunctionModel.

The catalog search is down (real HTTP 503s from the local tool service): the breaker
opens, the next search never leaves the process, and the model switches to the snapshot
fallback it was told about. A second run loops on one lookup and is stopped by the run
guard through Pydantic AI's own cancellation, with a stop packet for the operator.

Run: python examples/pydantic_ai_agent.py
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from toolbreaker import Breaker, Budget, Registry, RunGuard, Transition
from toolbreaker.core import changed_phase
from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, run_stop, tool_metadata
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import ToolService, request_json

SHEET = Path(__file__).with_name("breakers.toml")


def received(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results in the newest request, printed as the model reads them."""
    parts = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    for part in parts:
        text = part.content if isinstance(part.content, str) else json.dumps(part.content)
        print(f"  model <- {part.tool_name} [{part.outcome}]: {text[:150]}")
    return parts


def call(tool: str, **args: Any) -> ModelResponse:
    print(f"  model -> {tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
    return ModelResponse(parts=[ToolCallPart(tool, args)])


def shopping_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Retries the search (rephrasing) until told it is unavailable, then follows the advice."""
    parts = received(messages)
    if not parts:
        return call("search_catalog", q="usb cable")
    last = parts[0]
    if last.tool_name == "search_catalog":
        answer = json.loads(last.content) if isinstance(last.content, str) else last.content
        if answer.get("tool_unavailable"):
            return call(answer["fallback"], q="usb cable")
        return call("search_catalog", q=f"usb cable ({len(messages) // 2})")
    if last.tool_name == "search_catalog_snapshot":
        return call("create_ticket", title="catalog search is down", body="seen by the agent")
    answer = "Found cables in yesterday's snapshot; prices may be out of date."
    return ModelResponse(parts=[TextPart(answer)])


def looping_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for the same order again and again, as a confused model does."""
    received(messages)
    return call("get_order", order_id="A-1001")


def build_agent(model: FunctionModel, base: str) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model)

    @agent.tool_plain
    def search_catalog(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        return request_json("GET", f"{base}/search?q={urllib.parse.quote(q)}", timeout=4.0)

    @agent.tool_plain
    def search_catalog_snapshot(q: str) -> dict[str, Any]:
        """Search yesterday's snapshot of the catalog."""
        url = f"{base}/search_snapshot?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=4.0)

    @agent.tool_plain
    def get_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return request_json("GET", f"{base}/orders/{order_id}", timeout=4.0)

    @agent.tool_plain(
        metadata=tool_metadata(risk="reversible_write", dependency="tickets", operation="write")
    )
    def create_ticket(title: str, body: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a ticket for the operations team."""
        print(f"  create_ticket runs with Idempotency-Key {idempotency_key}")
        payload = {"title": title, "body": body}
        headers = {"Idempotency-Key": idempotency_key}
        return request_json("POST", f"{base}/tickets", body=payload, headers=headers, timeout=4.0)

    return agent


def show_transition(record: Transition, breaker: Breaker) -> None:
    if changed_phase(record):
        print(
            f"  breaker {breaker.key}: {record.from_phase} -> {record.to_phase} ({record.reason})"
        )


def main() -> None:
    with ToolService() as service:
        registry = Registry.from_toml(SHEET)  # process-wide: every run shares these breakers
        registry.get("search", "read").add_listener(show_transition)
        journal = MemoryStore()
        service.outage("GET /search")

        for n, user in enumerate(["alice", "bob"], start=1):
            print(f"run {n} ({user}): the catalog search answers 503")
            guard = RunGuard(f"order-help-{user}", journal=journal)
            agent = build_agent(FunctionModel(shopping_model), service.url)
            result = agent.run_sync(
                "find me a usb cable",
                capabilities=[ToolbreakerCapability(guard, registry=registry)],
            )
            print(f"  answer: {result.output}")
            print(f"  searches that reached the service so far: {service.hits['GET /search']}\n")

        print("run 3: a model that repeats itself")
        guard = RunGuard("order-help-carol", budget=Budget(max_repeats=2), journal=journal)
        agent = build_agent(FunctionModel(looping_model), service.url)
        try:
            agent.run_sync(
                "where is A-1001?",
                capabilities=[ToolbreakerCapability(guard, registry=registry)],
            )
        except RunCancelled as exc:
            stop = run_stop(exc, guard)
            if stop is None:
                raise
            print(f"  run cancelled by the guard; {len(stop.messages)} messages kept")
            print("  stop packet:")
            print("\n".join("    " + line for line in stop.packet.to_json().splitlines()))


if __name__ == "__main__":
    main()
