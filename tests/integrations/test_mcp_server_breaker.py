"""The MCP server's own transport breaker, against a real MCP server over stdio.

One breaker per server (``registry.get(server, "default")``), shared by every tool of
that server, beside the per-tool breakers: a completed round trip (an ``is_error`` result
included) is a success for it; a dead server (its process killed) is a failure, learned
once: then every tool of the server is rejected locally, naming the server.

Attempts are counted where they leave the proxy: a thin wrapper around the SDK client's
``call_tool`` (the server process is dead, so it cannot count them itself).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from toolbreaker import Policy, Registry, RunGuard
from toolbreaker.core._breaker.state import CLOSED, HALF_OPEN, OPEN
from toolbreaker.integrations.mcp import ANSWER_META_KEY, GuardedClient
from toolbreaker.testing import FakeClock

pytestmark = pytest.mark.slow

STDIO_SERVER = """
import os
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
server = MCPServer("catalog")

@server.tool()
def pid() -> int:
    return os.getpid()

@server.tool()
def search(q: str) -> str:
    return "results for " + q

@server.tool()
def billing(customer: str) -> str:
    raise ToolError("upstream billing said HTTP 503 Service Unavailable")

server.run("stdio")
"""
PARAMS = StdioServerParameters(command=sys.executable, args=["-c", STDIO_SERVER])


class Counting:
    """The SDK client, counting every ``call_tool`` that goes out on its transport."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.sent: Counter[str] = Counter()

    async def call_tool(self, name: str, *args: Any, **kwargs: Any) -> CallToolResult:
        self.sent[name] += 1
        return await self.client.call_tool(name, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def payload(result: CallToolResult) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


def make_registry(clock: FakeClock | None = None) -> Registry:
    policy = Policy(failure_threshold=2, cooldown_ms=30_000)
    return Registry(policy, clock=clock) if clock is not None else Registry(policy)


def test_is_error_results_open_the_tool_breaker_but_never_the_servers():
    """(a) billing's 503s (``is_error`` results) open ``catalog:billing``; every one of
    them was a completed round trip, a success of the server's breaker, which stays
    closed: search still reaches the server."""
    registry = make_registry()

    async def main() -> tuple[list[CallToolResult], CallToolResult, Counter[str]]:
        async with Client(PARAMS) as client:
            wire = Counting(client)
            proxy = GuardedClient(wire, server="catalog", registry=registry, timeout=10)  # type: ignore[arg-type]
            results = [await proxy.call_tool("billing", {"customer": "c1"}) for _ in range(4)]
            search = await proxy.call_tool("search", {"q": "usb"})
            return results, search, wire.sent

    results, search, sent = anyio.run(main)
    assert [r.is_error for r in results] == [True] * 4
    assert "HTTP 503" in results[0].content[0].text  # the server's own error
    rejected = payload(results[2])
    assert rejected["tool_unavailable"] is True
    assert rejected["tool"] == "billing"
    assert "server" not in rejected  # the tool is out, not the server
    assert sent == {"billing": 2, "search": 1}
    assert registry.get("catalog", "billing").state.phase == OPEN
    server = registry.get("catalog", "default")
    assert server.state.phase == CLOSED
    # No failure counts against the server; the two billing calls its own open breaker
    # rejected were admitted by the server's first and let go unsent ("ignored").
    assert server.stats.failures == {"ignored": 2}
    assert server.stats.admitted == 5
    assert search.is_error is False
    assert search.content[0].text == "results for usb"


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


async def _dead_server(registry: Registry, *, guard: RunGuard | None = None) -> dict[str, Any]:
    """Kill the server; call search twice (opening the server's breaker), then billing."""
    async with Client(PARAMS) as client:
        wire = Counting(client)
        proxy = GuardedClient(  # type: ignore[arg-type]
            wire, server="catalog", registry=registry, timeout=10, guard=guard
        )
        if guard is not None:
            await proxy.list_tools()
        pid = int((await proxy.call_tool("pid")).content[0].text)
        _kill(pid)
        first = await proxy.call_tool("search", {"q": "a"})
        opening = await proxy.call_tool("search", {"q": "b"})
        sent_before = dict(wire.sent)
        other = await proxy.call_tool("billing", {"customer": "c1"})
        again = await proxy.call_tool("pid")
        return {
            "first": first,
            "opening": opening,
            "other": other,
            "again": again,
            "sent_before": sent_before,
            "sent": dict(wire.sent),
        }


@pytest.mark.parametrize("guarded", [False, True], ids=["breakers-only", "run-guard"])
def test_a_dead_server_is_learned_once_and_its_other_tools_are_rejected_locally(guarded):
    """(b) The server process is killed: two failed searches open the server's breaker
    (threshold 2); billing and pid, never called since, are rejected without a round
    trip, and the model reads that the server is out of service."""
    registry = make_registry()
    guard = RunGuard("dead-server") if guarded else None
    seen = anyio.run(lambda: _dead_server(registry, guard=guard))

    assert seen["first"].is_error is True
    assert seen["first"].meta[ANSWER_META_KEY] == "error"
    # The failure that opened the server's breaker says so at once, naming the server.
    opening = payload(seen["opening"])
    assert opening["tool_unavailable"] is True
    assert opening["server"] == "catalog"
    # billing and pid: nothing more went out on the transport.
    assert seen["sent"] == seen["sent_before"] == {"pid": 1, "search": 2}
    for name, tool in (("other", "billing"), ("again", "pid")):
        result = seen[name]
        assert result.is_error is True
        assert result.meta[ANSWER_META_KEY] == "tool_unavailable"
        data = payload(result)
        assert data["tool_unavailable"] is True
        assert data["tool"] == tool
        assert data["server"] == "catalog"
        assert '"catalog" is out of service' in data["instruction"]
    server = registry.get("catalog", "default")
    assert server.state.phase == OPEN
    assert server.stats.failures == {"network:ConnectionError": 2}
    assert server.stats.rejected == 2
    # The tools never called against the dead server have no evidence against them.
    assert registry.get("catalog", "billing").state.phase == CLOSED
    # (A run guard hears the local rejection as an ignored outcome of the tool's step.)
    assert set(registry.get("catalog", "billing").stats.failures) <= {
        "unknown-exception:CircuitOpen"
    }


def test_after_the_cooldown_one_probe_closes_the_servers_breaker_when_it_is_back():
    """(c) The killed server is started again (a new connection; the breakers live in the
    shared registry): before the cooldown it is still rejected locally; after it, the
    first call is the probe under the core's lease, a concurrent second call is refused
    (``probe-limit``), and the probe's success closes the server's breaker."""
    clock = FakeClock()
    registry = make_registry(clock)
    anyio.run(lambda: _dead_server(registry))
    server = registry.get("catalog", "default")
    assert server.state.phase == OPEN

    async def back() -> dict[str, Any]:
        async with Client(PARAMS) as client:
            wire = Counting(client)
            proxy = GuardedClient(wire, server="catalog", registry=registry, timeout=10)  # type: ignore[arg-type]
            early = await proxy.call_tool("search", {"q": "early"})
            hiding = GuardedClient(  # type: ignore[arg-type]
                wire, server="catalog", registry=registry, timeout=10, hide_open_tools=True
            )
            listed = await hiding.list_tools()  # every tool of an open server is hidden
            hidden = ([tool.name for tool in listed.tools], hiding.hidden_tools_line())
            clock.advance(seconds=31)
            probe = server.allow()  # someone else's probe holds the lease
            assert server.state.phase == HALF_OPEN
            refused = await proxy.call_tool("search", {"q": "refused"})
            probe.record("ignored")  # lets the lease go: the next call probes
            probed = await proxy.call_tool("search", {"q": "back"})
            after = await proxy.call_tool("billing", {"customer": "c1"})
            return {
                "early": early,
                "hidden": hidden,
                "refused": refused,
                "probed": probed,
                "after": after,
                "sent": dict(wire.sent),
            }

    seen = anyio.run(back)
    assert payload(seen["early"])["server"] == "catalog"
    shown, line = seen["hidden"]
    assert shown == []
    assert '"billing"' in line
    assert '"search"' in line
    refused = payload(seen["refused"])
    assert refused["reason"] == "recovering"
    assert refused["server"] == "catalog"
    assert seen["probed"].is_error is False
    assert seen["probed"].content[0].text == "results for back"
    assert server.state.phase == CLOSED
    assert "HTTP 503" in seen["after"].content[0].text  # reaches the live server again
    assert seen["sent"] == {"search": 1, "billing": 1}


def test_the_servers_sheet_row_configures_its_breaker(tmp_path):
    """The server's breaker is the sheet's ``[catalog.default]`` row (key ``catalog``):
    with ``failure_threshold = 1`` one lost connection opens it, and the other tools are
    rejected without a round trip. ``server_breaker=False`` leaves it out."""
    sheet = tmp_path / "breakers.toml"
    sheet.write_text(
        "[catalog.default]\nfailure_threshold = 1\ncooldown_ms = 30000\ntimeout_ms = 10000\n",
        encoding="utf-8",
    )

    async def main(registry: Registry, server_breaker: bool) -> tuple[CallToolResult, dict]:
        async with Client(PARAMS) as client:
            wire = Counting(client)
            proxy = GuardedClient(  # type: ignore[arg-type]
                wire,
                server="catalog",
                registry=registry,
                server_breaker=server_breaker,
                # The tools' deadline is the server's row's; without it, timeout=.
                timeout=None if server_breaker else 10,
            )
            _kill(int((await proxy.call_tool("pid")).content[0].text))
            await proxy.call_tool("search", {"q": "a"})
            other = await proxy.call_tool("billing", {"customer": "c1"})
            return other, dict(wire.sent)

    registry = Registry.from_toml(sheet)
    other, sent = anyio.run(main, registry, True)
    assert registry.get("catalog", "default").state.phase == OPEN
    assert payload(other)["server"] == "catalog"
    assert sent == {"pid": 1, "search": 1}

    registry = Registry.from_toml(sheet)
    other, sent = anyio.run(main, registry, False)
    assert registry.get("catalog", "default").state.phase == CLOSED
    assert "server" not in payload(other)  # billing's own failed round trip
    assert sent == {"pid": 1, "search": 1, "billing": 1}
