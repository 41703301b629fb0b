"""The gateway with ``--store``: the operator's commands see its breakers and its runs.

One host session against a gateway with an SQLite store and a named run: billing's
breaker opens, then the run's budget stops it. Afterwards, from the store alone:
``toolbreaker export`` has billing's transitions, the event stream the run's stop packet,
``toolbreaker advise`` billing's signals, and ``toolbreaker run show`` the stopped run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import gateway_params, payload, write_sheet
from mcp import Client

from toolbreaker.cli import main
from toolbreaker.instrumentation.stream import iter_entries, open_stream

pytestmark = pytest.mark.slow  # a gateway and a server process

SHEET = """
[mcp.servers.catalog]
command = {upstream}

[mcp.budget]
max_tool_calls = 4

[catalog.billing]
failure_threshold = 2
cooldown_ms = 60000
"""
RUN = "nightly-{server}"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One session's store: billing opened, then the run stopped."""
    tmp = tmp_path_factory.mktemp("gateway-store")
    url = f"sqlite:///{tmp / 'tb.db'}"
    sheet = write_sheet(tmp / "breakers.toml", SHEET)

    async def host() -> list[Any]:
        async with Client(gateway_params("--sheet", sheet, "--store", url, "--run", RUN)) as client:
            return [await client.call_tool("billing", {"customer": f"c{i}"}) for i in range(5)]

    results = anyio.run(host)
    assert payload(results[2])["tool_unavailable"] is True
    assert payload(results[4])["run_stopped"] is True
    return url


def test_export_has_the_gateways_breaker_transitions(store, capsys):
    """The trace export names billing's breaker and its opening."""
    assert main(["export", "--store", store]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    keys = {event.get("dependency") for event in events}
    assert "catalog:billing" in keys


def test_the_stream_keeps_the_runs_stop_packet(store):
    """The event stream has the stop of the run, with its packet."""
    stream = open_stream(store, create=False)
    try:
        stops = [entry for _, entry in iter_entries(stream) if entry.get("kind") == "stop"]
    finally:
        stream.close()
    assert [stop["task"] for stop in stops] == ["nightly-catalog"]
    assert stops[0]["packet"]["condition"] == "max-tool-calls"


def test_advise_reads_the_gateways_breakers(store, capsys):
    """advise finds billing's signals in the store."""
    assert main(["advise", "--store", store, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "catalog:billing" in {signal["key"] for signal in doc["signals"]}


def test_run_show_reads_the_stopped_run(store, capsys):
    """The run, shared through the store, is the operator's to read (and to extend)."""
    assert main(["run", "show", "nightly-catalog", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "stopped (max-tool-calls)" in out


def test_a_new_host_session_of_the_run_is_still_stopped(store, tmp_path: Path):
    """The run is the store's: another host session of it reads the stop at once, until
    an operator extends it."""
    sheet = write_sheet(tmp_path / "breakers.toml", SHEET)

    async def host() -> Any:
        async with Client(
            gateway_params("--sheet", sheet, "--store", store, "--run", RUN)
        ) as client:
            return await client.call_tool("echo", {"text": "again"})

    again = anyio.run(host)
    assert payload(again)["run_stopped"] is True
