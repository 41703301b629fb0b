"""Agent tools that call an HTTP API through httpx and toolbreaker, offline.

The tools share one ``httpx.Client`` whose transport is ``BreakerTransport``. The catalog
search answers real HTTP 503s from the local tool service: the search route's breaker
opens, the next request is never sent, the tool raises ``CircuitOpen`` and the run guard
hands the scripted model the tool-unavailable result, which names the fallback from the
boundary sheet. The model switches to the snapshot. An async client sharing the registry
meets the same open breaker. A second run repeats itself and is stopped with a packet.

Run: python examples/httpx_client.py
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx

from toolbreaker import Registry, RunGuard
from toolbreaker.errors import CircuitOpen
from toolbreaker.integrations.httpx import AsyncBreakerTransport, BreakerTransport
from toolbreaker.testing import ToolService

# The boundary sheet, as Registry.from_toml() would read it.
SHEET = {
    "defaults": {"cooldown_ms": 30_000, "timeout_ms": 4000},
    "catalog": {
        "search": {"tool": "search", "fallback": "search_snapshot", "failure_threshold": 2},
        "search_snapshot": {"tool": "search_snapshot"},
    },
}

Model = Callable[[list[tuple[str, Any]]], tuple[str, Any]]


def route(request: httpx.Request) -> tuple[str, str]:
    """One breaker per route of the catalog API: ("catalog", "search") ..."""
    return "catalog", request.url.path.strip("/").split("/")[0]


def build_guard(task: str, client: httpx.Client) -> RunGuard:
    guard = RunGuard(task)

    @guard.tool()
    def search(q: str) -> Any:
        response = client.get("/search", params={"q": q})
        response.raise_for_status()
        return response.json()

    @guard.tool()
    def search_snapshot(q: str) -> Any:
        response = client.get("/search_snapshot", params={"q": q})
        response.raise_for_status()
        return response.json()

    return guard


def run(guard: RunGuard, model: Model) -> str | None:
    transcript: list[tuple[str, Any]] = []
    for _ in range(10):
        action, detail = model(transcript)
        if action == "answer":
            return str(detail)
        tool, args = detail
        print(f"  model -> {tool}({json.dumps(args)})")
        result = guard.call(tool, args)
        print(f"  model <- {json.dumps(result)[:150]}")
        transcript.append((tool, result))
        if guard.stopped is not None:
            return None
    return None


def shopping_model(transcript: list[tuple[str, Any]]) -> tuple[str, Any]:
    """Retries the search until told it is unavailable, then uses the fallback it names."""
    if not transcript:
        return "call", ("search", {"q": "usb cable"})
    tool, last = transcript[-1]
    if tool == "search" and last.get("tool_unavailable"):
        return "call", (last["fallback"], {"q": "usb cable"})
    if tool == "search":
        return "call", ("search", {"q": f"usb cable {len(transcript)}"})
    return "answer", f"{len(last['results'])} cables in yesterday's snapshot (prices may be stale)"


def looping_model(transcript: list[tuple[str, Any]]) -> tuple[str, Any]:
    return "call", ("search_snapshot", {"q": "usb cable"})


async def another_client(registry: Registry, url: str) -> None:
    transport = AsyncBreakerTransport(registry=registry, key=route)
    async with httpx.AsyncClient(transport=transport, base_url=url) as client:
        try:
            await client.get("/search", params={"q": "usb cable"})
        except CircuitOpen as exc:
            print(f"  async client: {exc}")


def main() -> None:
    with ToolService() as service:
        service.outage("GET /search")
        registry = Registry.from_dict(SHEET)
        transport = BreakerTransport(registry=registry, key=route)
        with httpx.Client(transport=transport, base_url=service.url, timeout=4.0) as client:
            print("run 1: the catalog search is down")
            print("  answer:", run(build_guard("shopping-1", client), shopping_model))
            print(f"  GET /search reached the service {service.hits['GET /search']} times")
            anyio.run(another_client, registry, service.url)
            print(f"  GET /search reached the service {service.hits['GET /search']} times")

            print("\nrun 2: a model that repeats itself")
            guard = build_guard("loop-1", client)
            print("  answer:", run(guard, looping_model))
            packet = guard.stop_packet().to_dict()
            summary = {k: packet[k] for k in ("condition", "detail", "next_safe_action")}
            print("  stop packet:", json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
