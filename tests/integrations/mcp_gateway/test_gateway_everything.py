"""The gateway in front of the official reference server, ``@modelcontextprotocol/
server-everything`` (from npm, installed into the tests' cache by ``mcp_everything``).

What it adds to the Python server's tests: a server in another language and SDK, its
tools' annotations, images, structured content, resources, prompts and completions
byte for byte, its sampling and elicitation requests to the host, its progress, and a
dead node process learned once.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import PATIENCE, RawHost, gateway_argv, gateway_params, text_of
from mcp import Client, StdioServerParameters
from mcp.types import CreateMessageResult, ElicitResult, TextContent

from mcp_everything import everything_server

pytestmark = pytest.mark.slow  # node processes

CAPABLE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"sampling": {}, "elicitation": {"form": {}}},
    "clientInfo": {"name": "raw-host", "version": "1"},
}


def sheet(tmp_path: Path) -> str:
    path = tmp_path / "breakers.toml"
    path.write_text(
        f"[mcp.servers.everything]\ncommand = {json.dumps(everything_server())}\n\n"
        "[everything.default]\nfailure_threshold = 1\ncooldown_ms = 60000\n",
        encoding="utf-8",
    )
    return str(path)


def test_the_reference_servers_answers_pass_byte_for_byte(tmp_path):
    """Its handshake, listings, tools (text, numbers, an image, structured content),
    resources, prompts and completions come through the gateway as the bytes it wrote."""
    script: list[tuple[int, str, dict[str, Any] | None]] = [
        (1, "initialize", CAPABLE),
        (2, "tools/list", None),
        (3, "tools/call", {"name": "echo", "arguments": {"message": "héllo ✓"}}),
        (4, "tools/call", {"name": "get-sum", "arguments": {"a": 2, "b": 3.5}}),
        (5, "tools/call", {"name": "get-structured-content", "arguments": {"location": "Chicago"}}),
        (6, "tools/call", {"name": "get-tiny-image", "arguments": {}}),
        (7, "resources/list", None),
        (8, "resources/templates/list", None),
        (9, "resources/read", {"uri": "demo://resource/static/document/features.md"}),
        (10, "prompts/list", None),
        (11, "prompts/get", {"name": "args-prompt", "arguments": {"city": "Paris"}}),
        (
            12,
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "completable-prompt"},
                "argument": {"name": "department", "value": "E"},
            },
        ),
        (13, "tools/call", {"name": "get-sum", "arguments": {"a": "two"}}),
        (14, "ping", None),
    ]

    def run(argv: list[str]) -> list[bytes]:
        with RawHost(argv) as host:
            answers = []
            for rid, method, params in script:
                answers.append(host.request(rid, method, params))
                if method == "initialize":
                    host.notify("notifications/initialized")
            return answers

    direct = run(everything_server())
    relayed = run(gateway_argv("--sheet", sheet(tmp_path)))
    assert relayed == direct
    assert b'"readOnlyHint":true' in relayed[1]
    assert b'"type":"image"' in relayed[5]


def test_its_progress_sampling_and_elicitation_reach_the_host(tmp_path):
    """The SDK's client through the gateway: the long operation's progress arrives, and
    the server's sampling and elicitation requests are the host's to answer."""
    progress: list[float] = []
    asked: list[str] = []

    async def on_progress(value: float, _total: float | None, _message: str | None) -> None:
        progress.append(value)

    async def sample(_context: Any, params: Any) -> CreateMessageResult:
        asked.append("sampling")
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="sampled!"), model="test"
        )

    async def elicit(_context: Any, _params: Any) -> ElicitResult:
        asked.append("elicitation")
        return ElicitResult(action="decline")

    async def host(params: StdioServerParameters) -> dict[str, Any]:
        async with Client(params, sampling_callback=sample, elicitation_callback=elicit) as client:
            tools = (await client.list_tools()).tools
            return {
                "annotations": {t.name: t.annotations for t in tools},
                "long": text_of(
                    await client.call_tool(
                        "trigger-long-running-operation",
                        {"duration": 1, "steps": 3},
                        progress_callback=on_progress,
                    )
                ),
                "sampled": text_of(
                    await client.call_tool(
                        "trigger-sampling-request", {"prompt": "hi", "maxTokens": 5}
                    )
                ),
                "elicited": text_of(await client.call_tool("trigger-elicitation-request", {})),
            }

    argv = everything_server()
    direct = anyio.run(lambda: host(StdioServerParameters(command=argv[0], args=argv[1:])))
    direct_progress, progress[:] = list(progress), []
    relayed = anyio.run(lambda: host(gateway_params("--sheet", sheet(tmp_path))))
    assert relayed == direct
    assert progress == direct_progress == [1, 2, 3]
    assert "sampled!" in relayed["sampled"]
    assert asked == ["sampling", "elicitation"] * 2


def _child_of(pid: int) -> int:
    """The first child process of ``pid`` (the gateway's server)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        if children:
            return int(children[0])
    raise AssertionError(f"process {pid} has no child")


def test_a_dead_node_server_is_learned_once_for_all_its_tools(tmp_path):
    """The node process is killed while the long operation runs: that call comes back as
    a lost connection, opening the server's breaker; every other tool is then answered
    locally, naming the server."""
    with RawHost(gateway_argv("--sheet", sheet(tmp_path))) as host:
        host.request(1, "initialize", CAPABLE)
        host.notify("notifications/initialized")
        node = _child_of(host.proc.pid)
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 60}},
            }
        )
        os.kill(node, signal.SIGKILL)
        lost = json.loads(_answer_of(host, 2))
        echo = json.loads(
            host.request(4, "tools/call", {"name": "echo", "arguments": {"message": "x"}})
        )
        total = json.loads(
            host.request(5, "tools/call", {"name": "get-sum", "arguments": {"a": 1, "b": 2}})
        )
    assert lost["result"]["isError"] is True
    for answer, tool in ((echo, "echo"), (total, "get-sum")):
        result = answer["result"]
        assert result["isError"] is True
        said = json.loads(result["content"][0]["text"])
        assert said["tool_unavailable"] is True
        assert said["tool"] == tool
        assert said["server"] == "everything"


def _answer_of(host: RawHost, rid: int) -> bytes:
    """The response to ``rid`` among the lines read so far (or still to come)."""
    for line in list(host.notes):
        if json.loads(line).get("id") == rid:
            return line
    while True:
        line = host.lines.get(timeout=PATIENCE)
        if json.loads(line).get("id") == rid:
            return line
        host.notes.append(line)
