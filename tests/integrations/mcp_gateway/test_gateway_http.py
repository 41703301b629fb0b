"""The gateway over streamable HTTP: the SDK's client as the host, and the local-server
rules of the MCP spec (loopback, ``Origin``, ``Host``, a bearer token elsewhere, only
the servers the sheet names)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import INITIALIZE, PATIENCE, payload, text_of, upstream_argv
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from toolbreaker import Registry
from toolbreaker.integrations.mcp_gateway import Gateway, UpstreamSpec

pytestmark = pytest.mark.slow  # a server process per session

TOKEN = "a-token-of-32-characters-or-so!!"


def gateway(**options: Any) -> Gateway:
    registry = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 10_000},
            "catalog": {"billing": {"failure_threshold": 2, "cooldown_ms": 60_000}},
        }
    )
    servers = [
        UpstreamSpec(name="catalog", command=tuple(upstream_argv())),
        UpstreamSpec(name="spare", command=tuple(upstream_argv())),
    ]
    return Gateway(servers, registry=registry, **options)


@asynccontextmanager
async def serving(gw: Gateway, **options: Any) -> AsyncIterator[str]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(
            lambda task_status: gw.serve_http(port=0, task_status=task_status, **options)
        )
        yield f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()


def run(body: Callable[[str], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        async with serving(gateway(), **options) as base:
            return await body(base)

    return anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_over_http_reaches_the_server_through_the_breakers(mode):
    """Over HTTP the host lists, calls (with progress) and reads the tool-unavailable
    result once billing's breaker opens, on both protocol eras."""
    progress: list[float] = []

    async def on_progress(value: float, _total: float | None, _message: str | None) -> None:
        progress.append(value)

    async def body(base: str) -> dict[str, Any]:
        async with Client(f"{base}/mcp/catalog", mode=mode) as client:
            return {
                "version": client.protocol_version,
                "tools": [t.name for t in (await client.list_tools()).tools],
                "search": (await client.call_tool("search", {"query": "usb"})).structured_content,
                "progress": text_of(
                    await client.call_tool("progress", {"steps": 2}, progress_callback=on_progress)
                ),
                "billing": [
                    await client.call_tool("billing", {"customer": f"c{i}"}) for i in range(3)
                ],
            }

    seen = run(body)
    assert seen["version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert "search" in seen["tools"]
    assert seen["search"] == {"query": "usb", "hits": ["usb-1", "usb-2"]}
    assert seen["progress"] == "done in 2 steps"
    assert progress == [1, 2]
    assert payload(seen["billing"][2])["tool_unavailable"] is True


def test_each_server_of_the_sheet_has_its_own_path():
    """/mcp/catalog and /mcp/spare are two servers (two processes); a name the sheet does
    not give is 404."""

    async def body(base: str) -> tuple[int, int, int]:
        pids = []
        for name in ("catalog", "spare"):
            async with Client(f"{base}/mcp/{name}", mode="legacy") as client:
                pids.append(int(text_of(await client.call_tool("pid", {}))))
        async with httpx2.AsyncClient(timeout=PATIENCE) as http:
            missing = await http.post(f"{base}/mcp/elsewhere", json=_init(), headers=_accept())
        return pids[0], pids[1], missing.status_code

    first, second, missing = run(body)
    assert first != second
    assert missing == 404


def _init() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}


def _accept(**extra: str) -> dict[str, str]:
    return {"accept": "application/json, text/event-stream", **extra}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"origin": "https://evil.example"}, 403),
        ({"origin": "http://127.0.0.1.evil.example:8080"}, 403),
        ({"host": "evil.example"}, 421),
        ({"host": "rebound.example:80"}, 421),
    ],
)
def test_a_foreign_origin_or_host_is_refused(headers, status):
    """A page elsewhere (its Origin) or behind a rebound DNS name (its Host) is refused
    before anything reaches a server."""

    async def body(base: str) -> int:
        async with httpx2.AsyncClient(timeout=PATIENCE) as http:
            answer = await http.post(
                f"{base}/mcp/catalog", json=_init(), headers=_accept(**headers)
            )
            return answer.status_code

    assert run(body) == status


def test_a_loopback_origin_is_served():
    """A page on localhost (the host's own UI) is served."""

    async def body(base: str) -> tuple[int, str]:
        async with httpx2.AsyncClient(timeout=PATIENCE) as http:
            answer = await http.post(
                f"{base}/mcp/catalog", json=_init(), headers=_accept(origin="http://localhost:3000")
            )
            return answer.status_code, answer.text

    status, text = run(body)
    assert status == 200
    assert '"protocolVersion"' in text


def test_with_a_token_a_request_without_it_is_refused():
    """A gateway with a token answers 401 to a request without it, and serves one with it."""

    async def body(base: str) -> tuple[int, int, str]:
        async with httpx2.AsyncClient(timeout=PATIENCE) as http:
            without = await http.post(f"{base}/mcp/catalog", json=_init(), headers=_accept())
            wrong = await http.post(
                f"{base}/mcp/catalog", json=_init(), headers=_accept(authorization="Bearer nope")
            )
        auth = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=PATIENCE)
        transport = streamable_http_client(f"{base}/mcp/catalog", http_client=auth)
        async with auth, Client(transport, mode="legacy") as client:
            echo = text_of(await client.call_tool("echo", {"text": "in"}))
        return without.status_code, wrong.status_code, echo

    without, wrong, echo = run(body, token=TOKEN)
    assert (without, wrong) == (401, 401)
    assert echo == "echo: in"


def test_a_session_ends_with_delete():
    """DELETE ends a session: its id answers 404 afterwards."""

    async def body(base: str) -> tuple[int, int, int]:
        async with httpx2.AsyncClient(timeout=PATIENCE) as http:
            opened = await http.post(f"{base}/mcp/catalog", json=_init(), headers=_accept())
            session = opened.headers["mcp-session-id"]
            headers = _accept(**{"mcp-session-id": session})
            deleted = await http.delete(f"{base}/mcp/catalog", headers=headers)
            after = await http.post(
                f"{base}/mcp/catalog",
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers=headers,
            )
            return opened.status_code, deleted.status_code, after.status_code

    assert run(body) == (200, 200, 404)


def test_a_session_that_ends_takes_its_run_guard_with_it():
    """A long-running HTTP gateway keeps no run guard of a session that ended (nor its
    observers): one session's guard while it is open, none after its DELETE."""
    gw = gateway()

    async def main() -> tuple[int, int]:
        async with serving(gw) as base:
            async with Client(f"{base}/mcp/catalog", mode="legacy") as client:
                await client.call_tool("echo", {"text": "x"})
                during = len(gw.guards)
            with anyio.fail_after(PATIENCE):
                while gw.guards:
                    await anyio.sleep(0.01)
            return during, len(gw.guards)

    assert anyio.run(main) == (1, 0)
