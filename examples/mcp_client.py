"""An MCP host behind toolbreaker, offline: an in-process MCP server, a scripted model.

The catalog MCP server fronts the local tool service, whose search is down (real HTTP
503s). The host calls tools through ``GuardedClient``: the second 503 opens the breaker
``catalog:search`` and already answers with the tool-unavailable result, the model
switches to the snapshot fallback it names (no further search reaches the server), then
files a ticket whose idempotency key travels in the request ``_meta``. A second run
loops on one call and is stopped by the run guard, with a stop packet for the operator.

MCP has no model of its own: the "model" here is a scripted function that reads each
result the host hands it, as an LLM would.

Run: python examples/mcp_client.py
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
from collections.abc import Callable
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from toolbreaker import Breaker, Policy, Registry, RunGuard, Transition, system_prompt_line
from toolbreaker.core import changed_phase
from toolbreaker.integrations.mcp import IDEMPOTENCY_META_KEY, GuardedClient
from toolbreaker.testing import ToolService, request_json

Transcript = list[tuple[str, CallToolResult]]
Model = Callable[[Transcript], tuple[str, Any]]


def build_server(base: str) -> MCPServer:
    """An MCP server in front of the tool service, as MCP servers wrap HTTP APIs."""
    server = MCPServer("catalog")

    def get(path: str) -> dict[str, Any]:
        try:
            return request_json("GET", base + path, timeout=4.0)
        except urllib.error.HTTPError as exc:
            raise ToolError(f"HTTP {exc.code} {exc.reason}") from None

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        return get("/search?q=" + urllib.parse.quote(q))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search_snapshot(q: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot (prices may be stale)."""
        return get("/search_snapshot?q=" + urllib.parse.quote(q))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def create_ticket(title: str, body: str, ctx: Context) -> dict[str, Any]:
        """Open a support ticket; the idempotency key comes in the request _meta."""
        key = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY, "")
        return request_json(
            "POST",
            base + "/tickets",
            body={"title": title, "body": body},
            headers={"Idempotency-Key": key},
            timeout=4.0,
        )

    return server


def text(result: CallToolResult) -> str:
    block = result.content[0] if result.content else None
    return block.text if isinstance(block, TextContent) else ""


async def host(proxy: GuardedClient, model: Model) -> str | None:
    """The host loop: the model decides, the proxy calls, the model reads the result."""
    transcript: Transcript = []
    for _ in range(12):
        action, detail = model(transcript)
        if action == "answer":
            return str(detail)
        tool, args = detail
        print(f"  model -> {tool}({json.dumps(args)})")
        result = await proxy.call_tool(tool, args)
        shown = " ".join(text(result).split())[:150]
        print(f"  model <- {'error' if result.is_error else 'ok'}: {shown}")
        transcript.append((tool, result))
        if proxy.stopped is not None:  # MCP has no run to stop: the host ends it here
            return None
    return None


def shopping_model(transcript: Transcript) -> tuple[str, Any]:
    """Retries the search (rephrasing) until told it is unavailable, then follows advice."""
    if not transcript:
        return "call", ("search", {"q": "usb cable"})
    tool, last = transcript[-1]
    if tool == "search":
        answer = json.loads(text(last)) if last.is_error and text(last).startswith("{") else {}
        if answer.get("tool_unavailable"):
            return "call", (answer["fallback"], {"q": "usb cable"})
        return "call", ("search", {"q": f"usb cable {len(transcript)}"})
    if tool == "search_snapshot":
        return "call", ("create_ticket", {"title": "search is down", "body": "seen by the agent"})
    return "answer", "Found cables in yesterday's snapshot; prices may be out of date."


def looping_model(transcript: Transcript) -> tuple[str, Any]:
    """Asks the same question again and again, as a confused model does."""
    return "call", ("search_snapshot", {"q": "usb cable"})


def show(record: Transition, breaker: Breaker) -> None:
    if changed_phase(record):
        print(f"  [breaker {breaker.key}: {record.from_phase} -> {record.to_phase}]")


async def main() -> None:
    print("system prompt line:", system_prompt_line(), "\n")
    with ToolService() as service:
        service.outage("GET /search")
        registry = Registry(Policy(failure_threshold=2))
        server = build_server(service.url)
        async with Client(server) as client:
            proxy = GuardedClient(
                client,
                server="catalog",
                registry=registry,
                guard=RunGuard("shopping-1"),
                timeout=4.0,
                fallbacks={"search": "search_snapshot"},
            )
            proxy.breaker_for("search").add_listener(show)
            await proxy.list_tools()  # the proxy learns each tool's annotations
            print("run 1: the catalog search is down")
            print("  answer:", await host(proxy, shopping_model))
        print(f"  the search service was hit {service.hits['GET /search']} times")
        ticket = service.created("tickets")[0]
        print(f"  ticket {ticket['id']} carries idempotency key {ticket['idempotency_key']}")

        print("\nrun 2: a model that repeats itself")
        async with Client(server) as client:
            proxy = GuardedClient(
                client, server="catalog", registry=registry, guard=RunGuard("loop-1"), timeout=4
            )
            answer = await host(proxy, looping_model)
            packet = proxy.stop_packet()
        print("  answer:", answer)
        if packet is not None:
            summary = {k: packet.to_dict()[k] for k in ("condition", "detail", "next_safe_action")}
            print("  stop packet:", json.dumps(summary, indent=2))


if __name__ == "__main__":
    anyio.run(main)
