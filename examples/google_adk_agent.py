"""A Google ADK agent behind toolbreaker, offline: no API key, a scripted model.

The catalog search is down (real HTTP 503s from the local tool service): the breaker
opens, the next search never leaves the process, and the model switches to the snapshot
fallback it was told about. A second user's run never reaches the service. A third run
loops on one lookup and is stopped by the run guard through ADK's own path: the model is
not asked again, and the run's final event carries the stop packet for the operator.

Run: python examples/google_adk_agent.py
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool
from google.genai import types
from pydantic import ConfigDict

from toolbreaker import Breaker, Budget, Registry, RunGuard, Transition
from toolbreaker.core import changed_phase
from toolbreaker.integrations.google_adk import ToolbreakerPlugin, stop_of, tool_metadata
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import ToolService, request_json

SHEET = Path(__file__).with_name("breakers.toml")

Brain = Callable[[list[types.FunctionResponse]], types.Part]


class ScriptedModel(BaseLlm):
    """ADK's model interface, answered offline by a plain function (the "brain")."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    brain: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        answers = [p.function_response for p in last.parts or () if p.function_response]
        for answer in answers:
            print(f"  model <- {answer.name}: {json.dumps(answer.response)[:150]}")
        part = self.brain(answers)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=800, candidates_token_count=40
        )
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


def call(tool: str, **args: Any) -> types.Part:
    print(f"  model -> {tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
    return types.Part(function_call=types.FunctionCall(name=tool, args=args))


def shopping(answers: list[types.FunctionResponse]) -> types.Part:
    """Retries the search (rephrasing) until told it is unavailable, then follows the advice."""
    if not answers:
        return call("search_catalog", q="usb cable")
    last = answers[0]
    result = dict(last.response or {})
    if last.name == "search_catalog":
        if result.get("tool_unavailable"):
            return call(result["fallback"], q="usb cable")
        return call("search_catalog", q="usb-c cable")
    if last.name == "search_catalog_snapshot":
        return call("create_ticket", title="catalog search is down", body="seen by the agent")
    return types.Part(text="Found cables in yesterday's snapshot; prices may be out of date.")


def looping(answers: list[types.FunctionResponse]) -> types.Part:
    """Asks for the same order again and again, as a confused model does."""
    return call("get_order", order_id="A-1001")


def build_agent(brain: Brain, base: str) -> LlmAgent:
    async def fetch(method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        # The standard-library client in a worker thread: the tool never blocks the loop.
        return await asyncio.to_thread(request_json, method, url, timeout=4.0, **kwargs)

    async def search_catalog(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        return await fetch("GET", f"{base}/search?q={urllib.parse.quote(q)}")

    async def search_catalog_snapshot(q: str) -> dict[str, Any]:
        """Search yesterday's snapshot of the catalog."""
        return await fetch("GET", f"{base}/search_snapshot?q={urllib.parse.quote(q)}")

    async def get_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return await fetch("GET", f"{base}/orders/{order_id}")

    async def create_ticket(title: str, body: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a ticket for the operations team."""
        print(f"  create_ticket runs with Idempotency-Key {idempotency_key}")
        payload = {"title": title, "body": body}
        headers = {"Idempotency-Key": idempotency_key}
        return await fetch("POST", f"{base}/tickets", body=payload, headers=headers)

    ticket = FunctionTool(create_ticket)
    ticket.custom_metadata = tool_metadata(
        risk="reversible_write", dependency="tickets", operation="write"
    )
    return LlmAgent(
        name="shop",
        model=ScriptedModel(model="scripted", brain=brain),
        instruction="You help shoppers find cables.",
        tools=[search_catalog, search_catalog_snapshot, get_order, ticket],
    )


async def run(agent: LlmAgent, plugin: ToolbreakerPlugin, prompt: str) -> list[Any]:
    """One invocation in an in-memory runner whose app carries the plugin."""
    runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[plugin]))
    try:
        session = await runner.session_service.create_session(app_name="shop", user_id="user")
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        return [
            event
            async for event in runner.run_async(
                user_id="user", session_id=session.id, new_message=message
            )
        ]
    finally:
        await runner.close()


def show_transition(record: Transition, breaker: Breaker) -> None:
    if changed_phase(record):
        print(
            f"  breaker {breaker.key}: {record.from_phase} -> {record.to_phase} ({record.reason})"
        )


async def main() -> None:
    with ToolService() as service:
        registry = Registry.from_toml(SHEET)  # process-wide: every run shares these breakers
        registry.get("search", "read").add_listener(show_transition)
        journal = MemoryStore()
        service.outage("GET /search")

        for n, user in enumerate(["alice", "bob"], start=1):
            print(f"run {n} ({user}): the catalog search answers 503")
            guard = RunGuard(f"order-help-{user}", journal=journal)
            plugin = ToolbreakerPlugin(guard, registry=registry)
            events = await run(build_agent(shopping, service.url), plugin, "a usb cable?")
            print(f"  answer: {events[-1].content.parts[0].text}")
            print(f"  searches that reached the service so far: {service.hits['GET /search']}\n")

        print("run 3: a model that repeats itself")
        guard = RunGuard("order-help-carol", budget=Budget(max_repeats=2), journal=journal)
        plugin = ToolbreakerPlugin(guard, registry=registry)
        events = await run(build_agent(looping, service.url), plugin, "where is A-1001?")
        packet = stop_of(events)
        if packet is None:
            raise SystemExit("the guard should have stopped this run")
        print(f"  final event: {events[-1].content.parts[0].text}")
        print("  stop packet:")
        print("\n".join("    " + line for line in json.dumps(packet, indent=2).splitlines()))


if __name__ == "__main__":
    asyncio.run(main())
