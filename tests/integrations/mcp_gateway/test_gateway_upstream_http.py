"""The gateway in front of a streamable-HTTP server (``--upstream URL``).

The Python test server listens on 127.0.0.1 (its own process, the SDK's HTTP
transport); the host launches ``toolbreaker mcp --upstream URL`` over stdio.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import PATIENCE, gateway_params, host_env, payload, text_of, upstream_argv
from mcp import Client

pytestmark = pytest.mark.slow  # an HTTP server process


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server over HTTP, once for the module; its URL and process."""
    port = free_port()
    proc = subprocess.Popen(
        upstream_argv("http", str(port)),
        env=host_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(_listening, port)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


async def _listening(port: int) -> None:
    with anyio.fail_after(PATIENCE):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
            else:
                await stream.aclose()
                return


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_remote_server_is_relayed_through_the_breakers(upstream, mode):
    """Listing, a call with progress, a resource and billing's breaker, through the
    gateway to a server it reaches over HTTP, on both protocol eras."""
    url, _proc = upstream
    progress: list[float] = []

    async def on_progress(value: float, _total: float | None, _message: str | None) -> None:
        progress.append(value)

    async def host() -> dict[str, Any]:
        params = gateway_params("--upstream", url, "--server", f"remote-{mode}")
        async with Client(params, mode=mode) as client:
            return {
                "version": client.protocol_version,
                "tools": [t.name for t in (await client.list_tools()).tools],
                "search": (await client.call_tool("search", {"query": "usb"})).structured_content,
                "progress": text_of(
                    await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
                ),
                "resource": (await client.read_resource("res://greeting")).contents[0].text,
                "billing": [
                    await client.call_tool("billing", {"customer": f"c{i}"}) for i in range(6)
                ],
            }

    seen = anyio.run(host)
    assert seen["version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert "billing" in seen["tools"]
    assert seen["search"] == {"query": "usb", "hits": ["usb-1", "usb-2"]}
    assert seen["progress"] == "done in 3 steps"
    assert progress == [1, 2, 3]
    assert seen["resource"] == "hello from the catalog"
    assert payload(seen["billing"][-1])["tool_unavailable"] is True


def test_a_remote_server_that_stops_answering_is_learned_once(upstream, tmp_path):
    """The server is killed: the next call is a lost connection, which opens the server's
    breaker (threshold 1); its other tools are answered locally, naming it."""
    url, proc = upstream
    sheet = tmp_path / "breakers.toml"
    sheet.write_text(
        f'[mcp.servers.remote]\nurl = "{url}"\n[remote.default]\nfailure_threshold = 1\n'
        "cooldown_ms = 60000\n",
        encoding="utf-8",
    )

    async def host() -> tuple[str, Any, Any]:
        async with Client(gateway_params("--sheet", str(sheet)), mode="legacy") as client:
            first = text_of(await client.call_tool("echo", {"text": "up"}))
            proc.kill()
            proc.wait()
            for attempt in itertools.count():
                lost = await client.call_tool("search", {"query": f"q{attempt}"})
                if lost.is_error:
                    break
            return first, lost, await client.call_tool("echo", {"text": "down"})

    first, lost, echo = anyio.run(host)
    assert first == "echo: up"
    assert lost.is_error is True
    answer = payload(echo)
    assert answer["tool_unavailable"] is True
    assert answer["server"] == "remote"
