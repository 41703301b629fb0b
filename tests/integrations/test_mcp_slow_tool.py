"""A slow tool never takes down a healthy MCP server: against the official reference server.

The server is ``@modelcontextprotocol/server-everything`` from npm (see
``tests/mcp_everything.py``), over stdio on the 2025-11-25 revision, and a Python server
with the same two tools on the 2026-07-28 revision (which answers ``server/discover``,
not ``ping``). Its ``trigger-long-running-operation`` runs past
the call's deadline; its ``echo`` answers at once. A tool's own deadline is no proof the
server is gone: after a timeout the proxy pings the server (MCP ``ping``, with a short
deadline of its own), and only a ping that gets no answer counts against the server's
transport breaker. The tool's own breaker counts its timeouts as ever.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from mcp_everything import everything_server
from toolbreaker import Policy, Registry
from toolbreaker.core._breaker.state import CLOSED, OPEN
from toolbreaker.integrations.mcp import ANSWER_META_KEY, GuardedClient

pytestmark = pytest.mark.slow

SLOW = "trigger-long-running-operation"
SLOW_ARGS = {"duration": 30, "steps": 1}  # no answer for 30 s; the deadline is 0.5 s
DEADLINE = 0.5


# The same two tools in a Python server on the 2026-07-28 revision, which has no ``ping``:
# its liveness check is ``server/discover``.
MODERN_SERVER = """
import anyio
from mcp.server.mcpserver import MCPServer
server = MCPServer("everything")

@server.tool(name="trigger-long-running-operation")
async def long_running(duration: float = 10, steps: int = 5) -> str:
    await anyio.sleep(duration)
    return "done"

@server.tool()
def echo(message: str) -> str:
    return "Echo: " + message

server.run("stdio")
"""


@pytest.fixture(params=["server-everything", "python-2026-07-28"])
def everything(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[StdioServerParameters, Path]]:
    """The server's stdio parameters, and the file its process id is written to."""
    if request.param == "server-everything":
        argv = everything_server()
    else:
        argv = [sys.executable, "-c", MODERN_SERVER]
    pid_file = tmp_path / "server.pid"
    script = 'echo $$ > "$0"; exec "$@"'
    yield StdioServerParameters(command="sh", args=["-c", script, str(pid_file), *argv]), pid_file
    if pid_file.exists():  # a stopped server is let go on, so the SDK can end it
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGCONT)


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def payload(result: CallToolResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text(result))
    return data


def registry() -> Registry:
    return Registry(Policy(failure_threshold=3, cooldown_ms=60_000))


def test_a_tool_past_its_deadline_three_times_never_refuses_the_servers_other_tools(
    everything,
):
    """The long-running operation times out three times: its own breaker opens, the
    server's stays closed (each timeout's ping was answered), and ``echo`` is answered
    by the server, not refused for the cooldown."""
    params, _ = everything
    breakers = registry()

    async def main() -> tuple[list[CallToolResult], CallToolResult]:
        async with Client(params) as client:
            proxy = GuardedClient(client, server="everything", registry=breakers, timeout=DEADLINE)
            slow = [await proxy.call_tool(SLOW, SLOW_ARGS) for _ in range(3)]
            return slow, await proxy.call_tool("echo", {"message": "still here"})

    slow, echo = anyio.run(main)
    assert echo.is_error is False, text(echo)
    assert text(echo) == "Echo: still here"
    assert [r.is_error for r in slow] == [True, True, True]
    assert slow[0].meta is not None
    assert slow[0].meta[ANSWER_META_KEY] == "error"
    opened = payload(slow[2])
    assert opened["tool_unavailable"] is True
    assert opened["tool"] == SLOW
    assert "server" not in opened  # the tool is out, not the server
    tool = breakers.get("everything", SLOW)
    assert tool.state.phase == OPEN
    assert tool.stats.failures == {"timeout": 3}
    server = breakers.get("everything", "default")
    assert server.state.phase == CLOSED
    assert server.stats.failures == {}


def test_a_server_that_answers_nothing_is_learned_through_its_failed_pings(everything):
    """The server process is stopped (SIGSTOP: alive, answering nothing): each timed-out
    call's ping gets no answer either, so each counts against the server; the third opens
    its breaker and ``echo`` is refused locally, naming the server."""
    params, pid_file = everything
    breakers = registry()

    async def main() -> tuple[list[CallToolResult], CallToolResult]:
        async with Client(params) as client:
            proxy = GuardedClient(client, server="everything", registry=breakers, timeout=DEADLINE)
            await proxy.call_tool("echo", {"message": "up"})
            os.kill(int(pid_file.read_text()), signal.SIGSTOP)
            slow = [await proxy.call_tool(SLOW, SLOW_ARGS) for _ in range(3)]
            echo = await proxy.call_tool("echo", {"message": "anyone?"})
            os.kill(int(pid_file.read_text()), signal.SIGCONT)
            return slow, echo

    slow, echo = anyio.run(main)
    assert [r.is_error for r in slow] == [True, True, True]
    opened = payload(slow[2])
    assert opened["tool_unavailable"] is True
    assert opened["server"] == "everything"
    server = breakers.get("everything", "default")
    assert server.state.phase == OPEN
    assert server.stats.failures == {"timeout": 3}
    assert echo.is_error is True
    assert echo.meta is not None
    assert echo.meta[ANSWER_META_KEY] == "tool_unavailable"
    refused = payload(echo)
    assert refused["tool"] == "echo"
    assert refused["server"] == "everything"
