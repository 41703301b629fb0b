"""``toolbreaker mcp`` over stdio, with the SDK's own client as the host.

The host launches the gateway as it would any MCP server (a subprocess with a bare
environment); the gateway launches the Python test server (``gateway_upstream.py``): its
own process in the tests about that process (killed, crashed and started again), else a
relay to the module's one server process (``mcp_shared``: a fresh server for each launch).
Both protocol eras run where the behaviour could differ: ``legacy`` is the 2025-11-25
handshake, ``auto`` negotiates 2026-07-28 with this SDK's server.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import (
    INITIALIZE,
    PATIENCE,
    RawHost,
    gateway_argv,
    gateway_params,
    payload,
    text_of,
    upstream_argv,
    write_sheet,
)
from mcp import Client
from mcp.types import ElicitResult, ToolListChangedNotification

from mcp_shared import SharedUpstream

pytestmark = pytest.mark.slow  # a gateway process per test, and a server process

ERAS = ["legacy", "auto"]

SHEET = """
[mcp.servers.catalog]
command = {upstream}

[catalog.default]
failure_threshold = 1
cooldown_ms = 60000

[catalog.billing]
failure_threshold = 2
cooldown_ms = 60000

[catalog.hang]
timeout_ms = 300

[mcp.budget]                  # room for the tests that poll the server for a condition
max_tool_calls = 1000
[mcp.budget.classes.read]
max_calls = 1000
"""


@pytest.fixture(scope="module")
def shared() -> Iterator[list[str]]:
    """The command that launches the module's test server, a fresh one each launch."""
    with SharedUpstream(upstream_argv("shared")) as upstream:
        yield upstream.command


def sheet(tmp_path: Path, upstream: list[str] | None, text: str = SHEET) -> str:
    """The sheet ``text`` whose server is launched by ``upstream`` (None: its own process)."""
    return write_sheet(tmp_path / "breakers.toml", text, upstream)


async def yes(_context: Any, _params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"yes": True})


def test_a_healthy_exchange_is_the_servers_answer_byte_for_byte(tmp_path, shared):
    """The same lines sent to the server and to the gateway in front of it come back as
    the same bytes: the handshake, the listing, calls (with their log notification),
    a resource, a prompt, a completion, and a call of a tool that does not exist."""
    script: list[tuple[object, str, dict[str, Any] | None]] = [
        (1, "initialize", INITIALIZE),
        (2, "tools/list", None),
        (3, "tools/call", {"name": "search", "arguments": {"query": "usb"}}),
        ("four", "tools/call", {"name": "echo", "arguments": {"text": "héllo ✓"}}),
        (5, "resources/read", {"uri": "res://greeting"}),
        (6, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
        (
            7,
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "name", "value": "a"},
            },
        ),
        (8, "tools/call", {"name": "no_such_tool", "arguments": {}}),
        (9, "resources/read", {"uri": "res://nowhere"}),
    ]

    def run(argv: list[str]) -> tuple[list[bytes], list[bytes]]:
        with RawHost(argv) as host:
            answers = []
            for rid, method, params in script:
                answers.append(host.request(rid, method, params))
                if method == "initialize":
                    host.notify("notifications/initialized")
            return answers, host.notes

    direct, direct_notes = run(shared)
    relayed, relayed_notes = run(gateway_argv("--sheet", sheet(tmp_path, shared)))
    assert relayed == direct
    assert relayed_notes == direct_notes
    assert any(b"notifications/message" in note for note in relayed_notes)  # echo's log line


@pytest.mark.parametrize("mode", ERAS)
def test_the_sdk_client_sees_the_server_through_the_gateway(tmp_path, shared, mode):
    """Listing, a call, a resource, a prompt, a completion, progress, a log line and an
    elicitation (a server-to-host request in 2025, an input-required round in 2026)
    reach the SDK's client through the gateway as they do without it."""
    from mcp import StdioServerParameters

    seen: dict[str, list[Any]] = {"progress": [], "logs": []}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen["progress"].append((progress, total, message))

    async def on_log(params: Any) -> None:
        seen["logs"].append(params.data)

    async def session(params: StdioServerParameters) -> dict[str, Any]:
        async with Client(
            params, mode=mode, elicitation_callback=yes, logging_callback=on_log
        ) as client:
            return {
                "version": client.protocol_version,
                "tools": [t.model_dump() for t in (await client.list_tools()).tools],
                "search": (await client.call_tool("search", {"query": "usb"})).model_dump(),
                "resource": (await client.read_resource("res://greeting")).model_dump(),
                "prompt": (await client.get_prompt("greet", {"name": "Ada"})).model_dump(),
                "ask": text_of(await client.call_tool("ask", {"question": "Refund?"})),
                "progress": text_of(
                    await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
                ),
            }

    direct = anyio.run(lambda: session(StdioServerParameters(command=shared[0], args=shared[1:])))
    direct_progress, seen["progress"] = seen["progress"], []
    direct_logs, seen["logs"] = seen["logs"], []
    relayed = anyio.run(lambda: session(gateway_params("--sheet", sheet(tmp_path, shared))))
    assert seen["logs"] == direct_logs
    assert (
        relayed["version"]
        == direct["version"]
        == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    )
    assert relayed == direct
    assert relayed["ask"] == "the user said yes"
    assert seen["progress"] == direct_progress
    assert [p for p, _, _ in seen["progress"]] == [1, 2, 3]


@pytest.mark.parametrize("mode", ERAS)
def test_a_failing_tool_opens_its_breaker_and_the_host_reads_the_unavailable_result(
    tmp_path, shared, mode
):
    """billing answers 503 twice (its row's threshold): the host reads the server's own
    errors, then the tool-unavailable result as an isError result, and the call is not
    sent again; the server's other tools go on."""

    async def host() -> dict[str, Any]:
        async with Client(gateway_params("--sheet", sheet(tmp_path, shared)), mode=mode) as client:
            results = [await client.call_tool("billing", {"customer": f"c{i}"}) for i in range(3)]
            return {"results": results, "echo": await client.call_tool("echo", {"text": "x"})}

    seen = anyio.run(host)
    first, second, third = seen["results"]
    assert first.is_error
    assert "HTTP 503" in text_of(first)
    assert second.is_error
    assert third.is_error is True
    answer = payload(third)
    assert answer["tool_unavailable"] is True
    assert answer["tool"] == "billing"
    assert answer["retry_after_seconds"] > 0
    assert third.meta["toolbreaker/answer"] == "tool_unavailable"
    assert text_of(seen["echo"]) == "echo: x"


@pytest.mark.parametrize("mode", ERAS)
def test_a_killed_server_is_learned_once_for_all_its_tools(tmp_path, mode):
    """The server is killed while a call waits on it: that call comes back as a lost
    connection, which opens the server's transport breaker (threshold 1); every other
    tool, called or not, is then answered locally, naming the server."""

    async def host() -> dict[str, Any]:
        async with Client(gateway_params("--sheet", sheet(tmp_path, None)), mode=mode) as client:
            pid = int(text_of(await client.call_tool("pid", {})))
            seen: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:

                async def waiting() -> None:
                    seen["waiting"] = await client.call_tool("progress", {"steps": 0})
                    seen["hung"] = await client.call_tool(
                        "hang", {"label": "k"}, read_timeout_seconds=PATIENCE
                    )

                tg.start_soon(waiting)
                while "waiting" not in seen:
                    await anyio.sleep(0.01)
                os.kill(pid, signal.SIGKILL)
            seen["echo"] = await client.call_tool("echo", {"text": "x"})
            seen["search"] = await client.call_tool("search", {"query": "y"})
            return seen

    seen = anyio.run(host)
    assert seen["hung"].is_error is True
    lost = payload(seen["hung"])
    assert lost["ok"] is False
    for name, tool in (("echo", "echo"), ("search", "search")):
        answer = payload(seen[name])
        assert answer["tool_unavailable"] is True, answer
        assert answer["tool"] == tool
        assert answer["server"] == "catalog"
        assert '"catalog" is out of service' in answer["instruction"]


def test_a_dead_server_is_started_again_and_the_probe_closes_its_breaker(tmp_path):
    """After the server died, it is started again (a new process) with the host's
    session said to it again; once the cooldown has passed, a call probes it and goes
    through."""
    text = SHEET.replace(
        "cooldown_ms = 60000\n\n[catalog.billing]", "cooldown_ms = 300\n\n[catalog.billing]"
    )

    async def host() -> tuple[int, int, str]:
        async with Client(gateway_params("--sheet", sheet(tmp_path, None, text))) as client:
            first = int(text_of(await client.call_tool("pid", {})))
            crashed = await client.call_tool("crash", {})
            assert crashed.is_error
            with anyio.fail_after(PATIENCE):
                for attempt in itertools.count(1):  # rejected while open, then the probe
                    result = await client.call_tool("pid", {"attempt": attempt})
                    if not result.is_error:
                        break
                    await anyio.sleep(0.05)
            return (
                first,
                int(text_of(result)),
                text_of(await client.call_tool("echo", {"text": "z"})),
            )

    first, second, echo = anyio.run(host)
    assert second != first
    assert echo == "echo: z"


@pytest.mark.parametrize("mode", ERAS)
def test_a_hung_tool_comes_back_at_its_deadline_and_the_server_is_told(tmp_path, shared, mode):
    """hang never answers; its row's deadline is 300 ms: the host gets an isError result
    (a timeout), the server hears notifications/cancelled for it, and its other tools
    still answer."""

    text = SHEET.replace(
        "[catalog.default]\nfailure_threshold = 1", "[catalog.default]\nfailure_threshold = 3"
    )

    async def host() -> tuple[Any, list[str], str]:
        async with Client(
            gateway_params("--sheet", sheet(tmp_path, shared, text)), mode=mode
        ) as client:
            with anyio.fail_after(PATIENCE):
                hung = await client.call_tool("hang", {"label": "slow"})
            with anyio.fail_after(PATIENCE):
                for attempt in itertools.count():
                    found = await client.call_tool("cancels", {"attempt": attempt})
                    cancels = found.structured_content
                    if cancels and "slow" in cancels["result"]:
                        break
                    await anyio.sleep(0.1)
            echo = text_of(await client.call_tool("echo", {"text": "still"}))
            return hung, cancels["result"], echo

    hung, cancels, echo = anyio.run(host)
    assert hung.is_error is True
    assert "Timeout" in text_of(hung)
    assert cancels == ["slow"]
    assert echo == "echo: still"


def test_a_sessions_budget_stops_it_with_a_packet(tmp_path, shared):
    """[mcp.budget] allows two calls: the third is answered with the stop result, and
    its _meta carries the stop packet for the host; so is every call after it."""
    text = SHEET.replace("max_tool_calls = 1000", "max_tool_calls = 2")

    async def host() -> list[Any]:
        async with Client(gateway_params("--sheet", sheet(tmp_path, shared, text))) as client:
            return [await client.call_tool("echo", {"text": str(i)}) for i in range(4)]

    results = anyio.run(host)
    assert [r.is_error for r in results] == [False, False, True, True]
    stopped = payload(results[2])
    assert stopped["run_stopped"] is True
    assert stopped["condition"] == "max-tool-calls"
    packet = results[2].meta["toolbreaker/stop-packet"]
    assert packet["condition"] == "max-tool-calls"
    assert packet["schema"].startswith("toolbreaker.stop/")
    assert results[3].meta["toolbreaker/answer"] == "run_stopped"


def test_a_write_carries_the_same_key_across_a_host_restart(tmp_path, shared):
    """With a store and a run id, a restarted host's session resumes the run: the ticket
    it files again is answered from the journal (the key it was made with), never sent
    twice; another ticket gets a key of its own."""
    store = f"sqlite:///{tmp_path / 'tb.db'}"
    args = ("--sheet", sheet(tmp_path, shared), "--store", store, "--run", "tickets-{server}")

    async def host(title: str) -> Any:
        async with Client(gateway_params(*args)) as client:
            return await client.call_tool("create_ticket", {"title": title})

    first = anyio.run(lambda: host("printer"))
    again = anyio.run(lambda: host("printer"))
    other = anyio.run(lambda: host("scanner"))
    key = text_of(first).split("key=")[1]
    assert key.startswith("tb1-")
    assert text_of(again) == text_of(first)
    assert again.meta["toolbreaker/answer"] == "journal"
    assert text_of(other).split("key=")[1] not in ("None", key)


def test_a_destructive_tool_is_denied_unless_the_sheet_allows_it(tmp_path, shared):
    """delete_ticket is destructive (irreversible): denied without an authority, run
    once the sheet's allow names it."""

    async def host(text: str) -> Any:
        async with Client(gateway_params("--sheet", sheet(tmp_path, shared, text))) as client:
            return await client.call_tool("delete_ticket", {"ticket": "T-1"})

    denied = anyio.run(lambda: host(SHEET))
    allowed = anyio.run(
        lambda: host(
            SHEET.replace("command = {upstream}", 'command = {upstream}\nallow = ["delete_ticket"]')
        )
    )
    assert denied.is_error is True
    assert payload(denied)["denied"] is True
    assert text_of(allowed) == "deleted T-1"


def test_hidden_open_tools_are_announced_with_list_changed(tmp_path, shared):
    """With hide_open_tools, billing's breaker opening is announced to the host
    (notifications/tools/list_changed) and the next listing leaves billing out."""
    text = SHEET.replace("command = {upstream}", "command = {upstream}\nhide_open_tools = true")
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    async def host() -> tuple[list[str], list[str], bool]:
        async with Client(
            gateway_params("--sheet", sheet(tmp_path, shared, text)),
            mode="legacy",
            message_handler=on_message,
        ) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            declared = bool(client.session.initialize_result.capabilities.tools.list_changed)
            for i in range(2):
                await client.call_tool("billing", {"customer": f"c{i}"})
            with anyio.fail_after(PATIENCE):
                while not any(isinstance(m, ToolListChangedNotification) for m in heard):
                    await anyio.sleep(0.01)
            after = [t.name for t in (await client.list_tools()).tools]
            return before, after, declared

    before, after, declared = anyio.run(host)
    assert declared is True
    assert "billing" in before
    assert "billing" not in after
    assert set(before) - set(after) == {"billing"}


@pytest.mark.parametrize("mode", ERAS)
def test_a_call_the_host_cancels_gets_no_answer_and_the_server_is_told(tmp_path, shared, mode):
    """The host gives up on a hung call (notifications/cancelled, or on 2026-07-28 the
    SDK's spelling of it): the gateway relays the cancellation to the server and the
    host's session goes on."""
    text = SHEET.replace("[catalog.hang]\ntimeout_ms = 300", "[catalog.hang]\ntimeout_ms = 30000")

    async def host() -> tuple[list[str], str]:
        async with Client(
            gateway_params("--sheet", sheet(tmp_path, shared, text)), mode=mode
        ) as client:
            with anyio.move_on_after(0.5):
                await client.call_tool("hang", {"label": "gave-up"})
            with anyio.fail_after(PATIENCE):
                for attempt in itertools.count():
                    found = (
                        await client.call_tool("cancels", {"attempt": attempt})
                    ).structured_content
                    if found and found["result"]:
                        break
                    await anyio.sleep(0.1)
            return found["result"], text_of(await client.call_tool("echo", {"text": "on"}))

    cancels, echo = anyio.run(host)
    assert cancels == ["gave-up"]
    assert echo == "echo: on"


def test_the_gateway_answers_json_lines_and_nothing_else_on_stdout(tmp_path, shared):
    """Every line the gateway writes to stdout is one JSON-RPC message (its operator's
    lines, a breaker that opened, go to stderr)."""
    with RawHost(gateway_argv("--sheet", sheet(tmp_path, shared))) as host:
        host.request(1, "initialize", INITIALIZE)
        host.notify("notifications/initialized")
        for i in range(3):
            host.request(
                10 + i, "tools/call", {"name": "billing", "arguments": {"customer": str(i)}}
            )
    for line in host.notes:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert b"breaker catalog:billing opened" in host.stderr
