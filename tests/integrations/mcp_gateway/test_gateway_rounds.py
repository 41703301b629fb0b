"""The 2026-07-28 revision's results through the gateway: input-required rounds and tasks.

The server is ``tests/integrations/mcp_rounds_server.py`` (the MCP proxy's own rounds
server); the host is the SDK's client on 2026-07-28, or a raw one declaring the tasks
extension. An
input-required round reaches the host, which answers it, and the call sent again is the
same call for the run guard; a call the server runs as a task is followed by the gateway
(``tasks/get``) and answered with the task's result; a write run as a task is journaled
once it completed, so a restarted host's session is answered from the journal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import RawHost, gateway_argv, gateway_params, text_of
from mcp import Client
from mcp.types import ElicitResult

pytestmark = pytest.mark.slow  # a gateway and a server process per session

ROUNDS = Path(__file__).resolve().parents[1] / "mcp_rounds_server.py"


def sheet(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "breakers.toml"
    path.write_text(
        f'[mcp.servers.shop]\ncommand = ["{sys.executable}", "{ROUNDS}"]\n'
        'risk = { export = "reversible_write" }\n' + extra,
        encoding="utf-8",
    )
    return str(path)


async def yes(_context: Any, _params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"yes": True})


def test_an_input_required_round_is_the_hosts_to_answer_and_one_call(tmp_path):
    """The server asks for a confirmation (an input-required round): the host's SDK
    answers it and sends the call again; the gateway relays both, and the run guard
    counts one call, not a repeat (max_repeats = 0 would stop a second)."""
    text = "\n[mcp.budget]\nmax_repeats = 0\n"

    async def host() -> tuple[str, str, str]:
        async with Client(
            gateway_params("--sheet", sheet(tmp_path, text)), elicitation_callback=yes
        ) as client:
            assert client.protocol_version == "2026-07-28"
            first = text_of(await client.call_tool("confirm_refund", {"order": "A-1"}))
            second = text_of(await client.call_tool("confirm_refund", {"order": "A-2"}))
            rounds = text_of(await client.call_tool("entered_count", {"tool": "confirm_refund"}))
            return first, second, rounds

    first, second, rounds = anyio.run(host)
    assert (first, second) == ("refunded A-1", "refunded A-2")
    assert rounds == "4"  # two calls of two rounds each


MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-host", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}


def call(host: RawHost, rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": MODERN}
    answer: dict[str, Any] = json.loads(host.request(rid, "tools/call", params))
    return answer


def test_a_task_is_followed_to_its_result_and_a_completed_write_is_journaled(tmp_path):
    """export runs as a task (a host that declares the extension, on 2026-07-28): the
    host receives the task's result as the call's; a failed task is a failure the model
    reads; the completed write is confirmed in the run's journal, so the restarted host's
    session answers it from there without sending it.

    (A raw host: the SDK's client would refuse this server's task result, which lacks
    the structured content its tool's output schema asks for.)"""
    store = f"sqlite:///{tmp_path / 'tb.db'}"
    argv = gateway_argv("--sheet", sheet(tmp_path), "--store", store, "--run", "exports")

    def session(*, fail: bool) -> dict[str, Any]:
        with RawHost(argv) as host:
            seen = {"done": call(host, 1, "export", {"table": "orders"})}
            if fail:
                seen["failed"] = call(host, 2, "export", {"table": "lines", "outcome": "failed"})
            seen["entered"] = call(host, 3, "entered_count", {"tool": "export"})
            return seen

    first, again = session(fail=True), session(fail=False)
    done = first["done"]["result"]
    assert done["content"][0]["text"] == "exported orders as task-1"
    assert done.get("isError") is not True
    failed = first["failed"]["result"]
    assert failed["isError"] is True
    assert json.loads(failed["content"][0]["text"])["ok"] is False
    assert first["entered"]["result"]["content"][0]["text"] == "2"
    assert again["done"]["result"]["_meta"]["toolbreaker/answer"] == "journal"
    assert again["done"]["result"]["content"][0]["text"] == "exported orders as task-1"
    assert again["entered"]["result"]["content"][0]["text"] == "0"  # a new server: not sent
