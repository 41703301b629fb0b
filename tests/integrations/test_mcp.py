"""The MCP client proxy against real MCP servers: the SDK's in-process transport (no
network between client and server) and, for a dying server, a stdio subprocess.

The server's tools call the local tool service over 127.0.0.1, so the 503s and 404s are
real HTTP answers that the server turns into ``is_error`` results, as MCP servers do.

MCP has no model and no run: the "scripted model" is a tiny host loop (:func:`host_loop`)
that reads each result the proxy returns and decides the next call from it, the way an
MCP host forwards results to its model. Its stop path is the only one MCP offers: the
proxy answers a stopped run with a stop result, and the loop ends on ``proxy.stopped``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.parse
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client, MCPError, StdioServerParameters
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    TextContent,
    ToolAnnotations,
)

from toolbreaker import Policy, Registry, RunGuard, shell_risk_of
from toolbreaker.core._breaker.state import CLOSED, OPEN
from toolbreaker.errors import PolicyError
from toolbreaker.integrations._mcp_results import result_error
from toolbreaker.integrations.mcp import (
    ANSWER_META_KEY,
    IDEMPOTENCY_META_KEY,
    STOP_PACKET_META_KEY,
    GuardedClient,
    risk_from_annotations,
)
from toolbreaker.runtime._run._guard import ActionRequest
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

READ = ToolAnnotations(read_only_hint=True)
ADDITIVE_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
DESTRUCTIVE = ToolAnnotations(destructive_hint=True, idempotent_hint=True)


class Catalog:
    """An MCP server in front of the tool service; counts every tool body it enters."""

    def __init__(self, service: ToolService) -> None:
        self.entered: Counter[str] = Counter()
        self.meta_seen: list[dict[str, Any]] = []
        base = service.url
        server = MCPServer("catalog")

        def get(path: str) -> dict[str, Any]:
            try:
                return request_json("GET", base + path, timeout=2.0)
            except urllib.error.HTTPError as exc:
                wait = exc.headers.get("Retry-After")
                hint = f"; Retry-After: {wait}" if wait else ""
                raise ToolError(f"HTTP {exc.code} {exc.reason}{hint}") from None

        @server.tool(annotations=READ)
        def search(q: str) -> dict[str, Any]:
            self.entered["search"] += 1
            return get("/search?q=" + urllib.parse.quote(q))

        @server.tool(annotations=READ)
        def search_snapshot(q: str) -> dict[str, Any]:
            self.entered["search_snapshot"] += 1
            return get("/search_snapshot?q=" + urllib.parse.quote(q))

        @server.tool(annotations=READ)
        def lookup_order(order_id: str) -> dict[str, Any]:
            self.entered["lookup_order"] += 1
            return get("/orders/" + urllib.parse.quote(order_id))

        @server.tool(annotations=ADDITIVE_WRITE)
        def create_ticket(customer: str, title: str, ctx: Context) -> dict[str, Any]:
            self.entered["create_ticket"] += 1
            meta = dict(ctx.request_context.meta or {})
            self.meta_seen.append(meta)
            try:
                return request_json(
                    "POST",
                    base + "/tickets",
                    body={"title": title, "body": f"for {customer}"},
                    headers={"Idempotency-Key": meta[IDEMPOTENCY_META_KEY]},
                    timeout=2.0,
                )
            except urllib.error.HTTPError as exc:
                raise ToolError(f"HTTP {exc.code} {exc.reason}") from None

        @server.tool(annotations=DESTRUCTIVE)
        def delete_ticket(ticket_id: str) -> str:
            self.entered["delete_ticket"] += 1
            return f"deleted {ticket_id}"

        @server.tool()
        async def slow_report() -> str:
            self.entered["slow_report"] += 1
            await anyio.sleep(5)
            return "too late"

        self.server = server


def make_registry(**policy: int) -> Registry:
    return Registry(Policy(**{"failure_threshold": 2, "cooldown_ms": 30_000, **policy}))


Decide = Callable[[list[tuple[str, dict[str, Any], CallToolResult]]], tuple[str, Any, Any]]


async def host_loop(proxy: GuardedClient, decide: Decide, max_steps: int = 12) -> tuple[Any, list]:
    """A minimal MCP host: the scripted model decides, the proxy calls, the model reads.

    Returns the model's answer (``None`` when the run guard stopped the run) and the
    transcript of (tool, arguments, result).
    """
    transcript: list[tuple[str, dict[str, Any], CallToolResult]] = []
    for _ in range(max_steps):
        action, name, args = decide(transcript)
        if action == "answer":
            return name, transcript
        result = await proxy.call_tool(name, args)
        transcript.append((name, args, result))
        if proxy.stopped is not None:
            return None, transcript
    raise AssertionError("the scripted model never answered")


def payload(result: CallToolResult) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


def test_503s_open_the_breaker_and_the_model_switches_to_the_fallback(service):
    """Requirement 1: real 503s open ``catalog:search`` (threshold 2); the third search is
    not run and the model reads a tool-unavailable result naming the fallback, calls the
    fallback and answers."""
    catalog = Catalog(service)
    service.outage("GET /search")
    registry = make_registry()
    queries = ["usb cable", "usb-c cable", "cable"]

    def model(transcript):
        if len(transcript) < 3:  # the model insists on searching three times
            return "call", "search", {"q": queries[len(transcript)]}
        tool, _, last = transcript[-1]
        if tool == "search":  # it reads the tool-unavailable result and follows it
            return "call", payload(last)["fallback"], {"q": "usb cable"}
        items = last.structured_content["results"]
        return "answer", f"{len(items)} cables (prices may be stale)", None

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client,
                server="catalog",
                registry=registry,
                guard=RunGuard("task-1"),
                timeout=2.0,
                fallbacks={"search": "search_snapshot"},
            )
            return await host_loop(proxy, model)

    answer, transcript = anyio.run(main)
    assert [name for name, _, _ in transcript] == ["search"] * 3 + ["search_snapshot"]
    assert catalog.entered["search"] == 2  # the third search never ran
    assert service.hits["GET /search"] == 2
    first, opened, rejected = (result for _, _, result in transcript[:3])
    assert "HTTP 503" in first.content[0].text  # the server's own error, unchanged
    assert payload(opened)["tool_unavailable"] is True  # the failure that opened it
    message = payload(rejected)
    assert rejected.is_error is True
    assert rejected.meta[ANSWER_META_KEY] == "tool_unavailable"
    assert message["fallback"] == "search_snapshot"
    assert 'Use "search_snapshot" instead' in message["instruction"]
    assert answer.endswith("(prices may be stale)")
    assert registry.get("catalog", "search").state.phase == OPEN


def test_404_and_validation_errors_do_not_open_the_breaker(service):
    """Requirement 2: real 404s and an argument validation error reach the server every
    time and leave the breaker closed; the model reads the server's own errors."""
    catalog = Catalog(service)
    registry = make_registry(failure_threshold=1)

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(client, server="catalog", registry=registry, timeout=2.0)
            results = [
                await proxy.call_tool("lookup_order", {"order_id": f"NOPE-{n}"}) for n in range(4)
            ]
            results.append(await proxy.call_tool("lookup_order", {"order_id": ["not", "a str"]}))
            return results

    results = anyio.run(main)
    assert all(r.is_error for r in results)
    assert "HTTP 404" in results[0].content[0].text
    assert all(r.meta is None or ANSWER_META_KEY not in r.meta for r in results)
    assert service.hits["GET /orders"] == 4
    breaker = registry.get("catalog", "lookup_order")
    assert breaker.state.phase == CLOSED
    assert breaker.stats.failures["http-404"] == 4


def test_repeated_action_is_stopped_with_a_stop_packet(service):
    """Requirement 3: a model that repeats the same search is stopped by the run guard;
    the host's loop ends on the stop result, which carries the stop packet in ``_meta``."""
    catalog = Catalog(service)

    def stubborn(transcript):
        return "call", "search", {"q": "usb cable"}

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client, server="catalog", registry=make_registry(), guard=RunGuard("t"), timeout=2
            )
            answer, transcript = await host_loop(proxy, stubborn)
            after = await proxy.call_tool("search_snapshot", {"q": "usb cable"})
            return proxy, answer, transcript, after

    proxy, answer, transcript, after = anyio.run(main)
    assert answer is None
    # The first result is new evidence; calls 3 and 4 are repeats 1 and 2 (max_repeats=2);
    # call 5 would be repeat 3 and is refused.
    assert len(transcript) == 5
    assert catalog.entered["search"] == 4
    stop = transcript[-1][2]
    assert stop.is_error is True
    assert stop.meta[ANSWER_META_KEY] == "run_stopped"
    assert stop.meta[STOP_PACKET_META_KEY]["condition"] == "repeated-action"
    assert payload(stop)["run_stopped"] is True
    packet = proxy.stop_packet()
    assert packet is not None
    assert packet.condition == "repeated-action"
    assert "looping" in packet.next_safe_action
    assert after.meta[ANSWER_META_KEY] == "run_stopped"  # nothing runs after the stop
    assert catalog.entered["search_snapshot"] == 0


def test_alternating_actions_are_stopped_as_a_loop(service):
    """Requirement 3: a model alternating two searches without new evidence is a loop."""
    catalog = Catalog(service)

    def alternating(transcript):
        tool = "search_snapshot" if len(transcript) % 2 else "search"
        return "call", tool, {"q": "usb cable"}

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client, server="catalog", registry=make_registry(), guard=RunGuard("t"), timeout=2
            )
            return proxy, await host_loop(proxy, alternating)

    proxy, (answer, transcript) = anyio.run(main)
    assert answer is None
    assert proxy.stopped is not None
    assert proxy.stopped.condition == "loop"
    assert sum(catalog.entered.values()) == len(transcript) - 1


def test_write_carries_a_stable_idempotency_key_across_retries_and_resumed_runs(service):
    """Requirement 4: the write's key rides in the request ``_meta``; a retry after a 503
    and a resumed run (same task id, same journal) send the same key, and once the write
    is confirmed a resumed run answers it from the journal without calling the server."""
    catalog = Catalog(service)
    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    journal = MemoryStore()
    registry = make_registry(failure_threshold=3)
    args = {"customer": "c-1842", "title": "Refund order A-1001"}

    async def run(attempts: int) -> list[CallToolResult]:
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client,
                server="catalog",
                registry=registry,
                guard=RunGuard("ticket-task", journal=journal),
                timeout=2.0,
            )
            return [
                await proxy.call_tool("create_ticket", args, meta={"trace": "abc"})
                for _ in range(attempts)
            ]

    first_run = anyio.run(run, 2)  # a 503, then the retry: another 503
    resumed = anyio.run(run, 1)  # the resumed run sends the write once more: it succeeds
    again = anyio.run(run, 1)  # a second resume: answered from the journal

    keys = [meta[IDEMPOTENCY_META_KEY] for meta in catalog.meta_seen]
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert all(meta["trace"] == "abc" for meta in catalog.meta_seen)  # the caller's meta too
    assert [r.is_error for r in first_run] == [True, True]
    assert resumed[0].is_error is False
    assert again[0].structured_content == resumed[0].structured_content
    assert again[0].meta[ANSWER_META_KEY] == "journal"
    assert catalog.entered["create_ticket"] == 3
    tickets = service.created("tickets")
    assert len(tickets) == 1
    assert tickets[0]["idempotency_key"] == keys[0]


def test_a_write_that_times_out_blocks_further_writes(service):
    """A write whose call passes its deadline may have committed: the model is told the
    outcome is unknown, the next write is refused without reaching the server, and the
    stop packet lists the uncertain write."""
    catalog = Catalog(service)

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client,
                server="catalog",
                guard=RunGuard("t"),
                timeout=0.2,
                risk={"slow_report": "reversible_write"},
            )
            unknown = await proxy.call_tool("slow_report")
            blocked = await proxy.call_tool("create_ticket", {"customer": "c", "title": "t"})
            return proxy, unknown, blocked

    # returned at the deadline, not when the tool ended: its outcome is unknown
    proxy, unknown, blocked = anyio.run(main)
    assert payload(unknown)["outcome_unknown"] is True
    assert unknown.meta[ANSWER_META_KEY] == "outcome_unknown"
    assert blocked.meta[ANSWER_META_KEY] == "writes_blocked"
    assert blocked.meta[STOP_PACKET_META_KEY]["condition"] == "uncertain-side-effect"
    assert catalog.entered["create_ticket"] == 0
    packet = proxy.stop_packet()
    assert packet is not None
    assert packet.uncertain[0]["tool"] == "slow_report"


def test_two_proxies_sharing_a_registry_share_the_breaker(service):
    """Requirement 5: one proxy's 503s open the breaker a second proxy, on another
    connection and without a run guard, then meets: its call is not sent."""
    catalog = Catalog(service)
    service.outage("GET /search")
    registry = make_registry()

    async def main():
        async with Client(catalog.server) as first, Client(catalog.server) as second:
            a = GuardedClient(first, server="catalog", registry=registry, guard=RunGuard("a"))
            b = GuardedClient(second, server="catalog", registry=registry)
            for q in ("one", "two"):
                await a.call_tool("search", {"q": q}, read_timeout_seconds=2.0)
            return await b.call_tool("search", {"q": "three"}, read_timeout_seconds=2.0)

    rejected = anyio.run(main)
    assert payload(rejected)["tool_unavailable"] is True
    assert rejected.meta[ANSWER_META_KEY] == "tool_unavailable"
    assert catalog.entered["search"] == 2
    assert len([b for b in registry if b.key == "catalog:search"]) == 1


def test_without_a_run_guard_the_breaker_still_opens_and_rejects(service):
    """Breaker-only mode (MCP has no run): the failure that opens the breaker already
    answers tool-unavailable with the fallback, and the next call is not sent."""
    catalog = Catalog(service)
    service.outage("GET /search", retry_after=45)

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client,
                server="catalog",
                registry=make_registry(),
                timeout=2.0,
                fallbacks={"search": "search_snapshot"},
            )
            return [await proxy.call_tool("search", {"q": q}) for q in ("a", "b", "c")]

    plain, opened, rejected = anyio.run(main)
    assert "HTTP 503" in plain.content[0].text
    assert payload(opened)["fallback"] == "search_snapshot"
    assert payload(opened)["retry_after_seconds"] == 45  # Retry-After from the error text
    assert payload(rejected)["tool_unavailable"] is True
    assert catalog.entered["search"] == 2
    assert STOP_PACKET_META_KEY not in (rejected.meta or {})


def test_one_breaker_per_server_names_the_tool_that_was_called(service):
    """With ``key`` grouping every tool into one breaker per server, search's 503s
    sideline lookup_order too, and its rejection names lookup_order, not search."""
    catalog = Catalog(service)
    service.outage("GET /search")
    registry = make_registry()

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client,
                server="catalog",
                registry=registry,
                timeout=2.0,
                key=lambda tool: ("catalog", "default"),
            )
            for q in ("a", "b"):
                await proxy.call_tool("search", {"q": q})
            return await proxy.call_tool("lookup_order", {"order_id": "A-1001"})

    rejected = anyio.run(main)
    assert payload(rejected)["tool"] == "lookup_order"
    assert catalog.entered["lookup_order"] == 0
    assert [b.key for b in registry] == ["catalog"]


def test_list_tools_teaches_the_proxy_and_other_attributes_pass_through(service, monkeypatch):
    """Listing through the proxy teaches it the annotations (no second listing before the
    first call), and attributes other than call_tool/list_tools are the client's."""
    catalog = Catalog(service)
    listings: list[Any] = []

    async def main():
        async with Client(catalog.server) as client:
            original = client.list_tools

            async def counting(*args: Any, **kwargs: Any) -> Any:
                listings.append(kwargs)
                return await original(*args, **kwargs)

            monkeypatch.setattr(client, "list_tools", counting)
            proxy = GuardedClient(client, server="catalog", guard=RunGuard("t"), timeout=2)
            listed = await proxy.list_tools()
            denied = await proxy.call_tool("delete_ticket", {"ticket_id": "T-9"})
            assert proxy.server_info == client.server_info
            return listed, denied

    listed, denied = anyio.run(main)
    assert "delete_ticket" in {tool.name for tool in listed.tools}
    assert len(listings) == 1
    assert denied.meta[ANSWER_META_KEY] == "denied"
    assert catalog.entered["delete_ticket"] == 0


def test_destructive_tool_is_denied_without_authorize_and_runs_with_it(service):
    """A tool annotated destructive is irreversible: without ``authorize`` the call is
    denied and never runs (fail closed); an authority check sees the action and may allow
    it. Annotations are read through the SDK's ClientSession as well."""
    catalog = Catalog(service)
    seen: list[ActionRequest] = []

    def approve(request: ActionRequest) -> bool:
        seen.append(request)
        return True

    async def main():
        async with Client(catalog.server) as client:
            denied = await GuardedClient(
                client.session, server="catalog", guard=RunGuard("a"), timeout=2
            ).call_tool("delete_ticket", {"ticket_id": "T-1"})
            allowed = await GuardedClient(
                client, server="catalog", guard=RunGuard("b"), timeout=2, authorize=approve
            ).call_tool("delete_ticket", {"ticket_id": "T-1"})
            return denied, allowed

    denied, allowed = anyio.run(main)
    assert denied.is_error is True
    assert denied.meta[ANSWER_META_KEY] == "denied"
    assert "needs approval" in payload(denied)["instruction"]
    assert allowed.is_error is False
    assert catalog.entered["delete_ticket"] == 1
    assert seen[0].risk == "irreversible"
    assert seen[0].idempotency_key


def test_hung_server_call_returns_at_the_deadline_as_a_timeout(service):
    """A tool that hangs returns at the deadline as an ``is_error`` result and counts as a
    timeout failure of its breaker."""
    catalog = Catalog(service)
    registry = make_registry()

    async def main():
        async with Client(catalog.server) as client:
            proxy = GuardedClient(client, server="catalog", registry=registry, timeout=0.2)
            return await proxy.call_tool("slow_report")

    result = anyio.run(main)  # a timeout failure: the deadline ended it, not the tool
    assert result.is_error is True
    assert payload(result)["retryable"] is True
    assert registry.get("catalog", "slow_report").stats.failures == {"timeout": 1}


STDIO_SERVER = """
import os, time
from mcp.server.mcpserver import MCPServer
server = MCPServer("dying")

@server.tool()
def pid() -> int:
    return os.getpid()

@server.tool()
def slow() -> str:
    time.sleep(30)
    return "never"

server.run("stdio")
"""


@pytest.mark.slow
def test_server_that_dies_mid_call_returns_within_the_deadline_as_a_failure():
    """A stdio server killed while a call is in flight: the call returns well within its
    deadline as a network failure; the next call fails as fast, and both count."""
    registry = make_registry(failure_threshold=3)
    params = StdioServerParameters(command=sys.executable, args=["-c", STDIO_SERVER])

    async def main():
        async with Client(params) as client:
            proxy = GuardedClient(client, server="dying", registry=registry, timeout=5.0)
            pid = int((await proxy.call_tool("pid")).content[0].text)

            async def kill_soon() -> None:
                await anyio.sleep(0.05)
                os.kill(pid, signal.SIGKILL)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_soon)
                in_flight = await proxy.call_tool("slow")
            after = await proxy.call_tool("pid")
            return in_flight, after

    # a network failure, not a timeout: the death ended the call, not its deadline
    in_flight, after = anyio.run(main)
    assert in_flight.is_error is True
    assert "connection closed" in payload(in_flight)["error"]
    assert after.is_error is True
    failures = registry.get("dying", "slow").stats.failures
    assert failures == {"network:ConnectionError": 1}
    assert registry.get("dying", "pid").stats.failures == {"network:ConnectionError": 1}


class Failing:
    """A stand-in client whose call_tool raises what the SDK raises, or hangs."""

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc

    async def call_tool(self, *args: Any, **kwargs: Any) -> CallToolResult:
        if self.exc is None:
            await anyio.sleep(10)  # ignores its read timeout: only the backstop ends it
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "detail"),
    [
        (MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out"), "timeout"),
        (MCPError(CONNECTION_CLOSED, "Connection closed"), "network:ConnectionError"),
        (anyio.BrokenResourceError(), "network:ConnectionError"),
        (None, "timeout"),
    ],
    ids=["sdk-timeout", "connection-closed", "broken-stream", "backstop"],
)
def test_sdk_timeouts_and_lost_connections_become_failure_results(exc, detail):
    """The SDK's timeout, a closed connection, a broken stream and a call that outlives
    its deadline (the anyio backstop) are failures of the breaker and come back as an
    ``is_error`` result, never as an exception or a hang."""
    registry = make_registry()
    proxy = GuardedClient(Failing(exc), server="fake", registry=registry, timeout=0.05)  # type: ignore[arg-type]
    # No clock: unless the backstop cuts it off, the hanging stand-in ends with `raise None`
    # (a TypeError the proxy re-raises), so a "timeout" result is the backstop's.
    result = anyio.run(proxy.call_tool, "anything")
    assert result.is_error is True
    assert result.meta[ANSWER_META_KEY] == "error"
    assert payload(result)["retryable"] is True
    assert registry.get("fake", "anything").stats.failures == {detail: 1}


def test_protocol_errors_are_raised_and_a_deadline_is_required():
    """An SDK error that says nothing about health (invalid params) is raised unchanged
    and ignored by the breaker; a proxy without any deadline refuses to call."""
    rejecting = Failing(MCPError(-32602, "invalid params"))
    registry = make_registry(failure_threshold=1)
    proxy = GuardedClient(rejecting, server="fake", registry=registry, timeout=1)  # type: ignore[arg-type]
    with pytest.raises(MCPError):
        anyio.run(proxy.call_tool, "anything")
    assert registry.get("fake", "anything").state.phase == CLOSED
    with pytest.raises(PolicyError, match="no deadline"):
        anyio.run(GuardedClient(rejecting, server="fake").call_tool, "anything")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("annotations", "risk"),
    [
        (None, "read"),
        (ToolAnnotations(title="Search"), "read"),
        (ToolAnnotations(read_only_hint=True, destructive_hint=True), "read"),
        (ToolAnnotations(destructive_hint=False), "reversible_write"),
        (ToolAnnotations(read_only_hint=False, destructive_hint=False), "reversible_write"),
        (ToolAnnotations(destructive_hint=True), "irreversible"),
        (ToolAnnotations(read_only_hint=False), "irreversible"),
        (ToolAnnotations(idempotent_hint=True), "irreversible"),
    ],
)
def test_risk_from_annotations(annotations, risk):
    """Annotations map to risk classes by the MCP spec's defaults."""
    assert risk_from_annotations(annotations) == risk


@pytest.mark.parametrize(
    ("text", "structured", "status", "wait"),
    [
        ("Error executing tool search: HTTP 503 Service Unavailable", None, 503, None),
        ("HTTP Error 429: Too Many Requests; Retry-After: 30", None, 429, "30"),
        ("upstream said HTTP/1.1 502 Bad Gateway", None, 502, None),
        ("status code: 404", None, 404, None),
        ("boom", {"status": 503, "retry_after": 2}, 503, "2"),
        ("Error executing tool crash", None, None, None),
    ],
)
def test_result_error_reads_status_and_retry_after(text, structured, status, wait):
    """The default classifier finds the status and Retry-After in text or structure."""
    result = CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=True
    )
    error = result_error(result)
    assert error is not None
    assert error.status_code == status
    assert error.headers.get("retry-after") == wait
    assert result_error(CallToolResult(content=[])) is None


def test_hide_open_tools_leaves_them_out_of_the_listing_with_a_line_for_the_host(service):
    """With hide_open_tools, list_tools leaves out a tool whose breaker is open and
    hidden_tools_line() names it and until when; by default the listing is the server's."""
    catalog = Catalog(service)

    async def main(hide: bool) -> tuple[set[str], str]:
        registry = make_registry(failure_threshold=1)
        async with Client(catalog.server) as client:
            proxy = GuardedClient(
                client, server="catalog", registry=registry, timeout=2, hide_open_tools=hide
            )
            proxy.breaker_for("search").allow().record("failure")
            listed = await proxy.list_tools()
            return {tool.name for tool in listed.tools}, proxy.hidden_tools_line()

    shown, line = anyio.run(main, False)
    assert "search" in shown
    assert line == ""
    shown, line = anyio.run(main, True)
    assert "search" not in shown
    assert "lookup_order" in shown
    assert line.startswith('These tools are out of service and hidden from you: "search" (for')


def test_a_tools_risk_may_be_a_function_of_its_arguments():
    """Issue 33: ``risk={"bash": shell_risk_of("command")}`` judges each call of a server's
    shell tool by its command: ``cat`` is counted a read, ``sed -i`` a write (whatever the
    server's annotations say), and ``git push`` is denied without an authority check."""
    server = MCPServer("sandbox")
    ran: list[str] = []

    @server.tool()
    def bash(command: str) -> str:
        ran.append(command)
        return "ok"

    guard = RunGuard("fix-issue")

    async def main() -> Any:
        async with Client(server) as client:
            proxy = GuardedClient(
                client,
                server="sandbox",
                guard=guard,
                timeout=10,
                risk={"bash": shell_risk_of("command")},
            )
            await proxy.call_tool("bash", {"command": "cat calc.py"})
            await proxy.call_tool("bash", {"command": "sed -i 's/-/+/' calc.py"})
            return await proxy.call_tool("bash", {"command": "git push origin main"})

    pushed = anyio.run(main)
    assert ran == ["cat calc.py", "sed -i 's/-/+/' calc.py"]
    assert dict(guard.state.class_calls) == {"read": 1, "reversible_write": 1, "irreversible": 1}
    assert payload(pushed)["denied"] is True
