"""toolbreaker exercise against an MCP host, in every shipped scenario.

The MCP server is the SDK's ``MCPServer`` (in process, through the SDK's own transport);
its tools call the fault proxy over real HTTP and turn failures into ``is_error`` results
as MCP servers do. MCP has no model: the host loop drives the scripted model's plan
(``model_plan``) with what ``GuardedClient`` returns, and ends on ``proxy.stopped``.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from exercise_checks import (
    IDS,
    SHIPPED,
    WIRE_FAULTS,
    holds_every_promise,
    shop_server,
    wire_scenario,
)
from toolbreaker.integrations.mcp import IDEMPOTENCY_META_KEY, GuardedClient
from toolbreaker.testing import (
    ExerciseContext,
    exercise,
    model_plan,
    service_tools,
)

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
MAX_STEPS = 100


def server_error(call: Callable[[], Any]) -> Any:
    """Run an upstream call; its failure becomes the MCP tool error a server reports."""
    try:
        return call()
    except urllib.error.HTTPError as exc:
        wait = exc.headers.get("Retry-After")
        raise ToolError(
            f"HTTP {exc.code} {exc.reason}" + (f"; Retry-After: {wait}" if wait else "")
        ) from None
    except TimeoutError:
        raise ToolError("HTTP 504 upstream timed out") from None
    except Exception as exc:  # noqa: BLE001 - a malformed answer, a reset: a bad gateway
        raise ToolError(f"HTTP 502 {type(exc).__name__}: {exc}") from None


def mcp_server(ctx: ExerciseContext) -> MCPServer:
    raw = service_tools(ctx)
    server = MCPServer("shop")

    @server.tool(annotations=READ)
    def search_catalog(query: str) -> dict[str, Any]:
        return server_error(lambda: raw["search_catalog"](query))

    @server.tool(annotations=READ)
    def refine_search(query: str) -> dict[str, Any]:
        return server_error(lambda: raw["refine_search"](query))

    @server.tool(annotations=READ)
    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        return server_error(lambda: raw["search_catalog_snapshot"](query))

    @server.tool(annotations=READ)
    def get_order(order_id: str) -> dict[str, Any]:
        return server_error(lambda: raw["get_order"](order_id))

    @server.tool(annotations=WRITE)
    def create_ticket(customer: str, title: str, context: Context) -> dict[str, Any]:
        key = dict(context.request_context.meta or {}).get(IDEMPOTENCY_META_KEY, "")
        return server_error(lambda: raw["create_ticket"](customer, title, key))

    return server


def seen(result: CallToolResult) -> Any:
    """What the host hands its model: toolbreaker's JSON, the tool's data, or its error."""
    block = result.content[0] if result.content else None
    text = block.text if isinstance(block, TextContent) else ""
    try:
        return json.loads(text)
    except ValueError:
        pass
    if result.is_error:
        return {"ok": False, "error": text, "retryable": True}
    return result.structured_content or text


KEYS = {"search_catalog": ("catalog", "read"), "refine_search": ("catalog", "read")}


def mcp_agent(ctx: ExerciseContext) -> Any:
    """The user's MCP host: GuardedClient with the exercise's registry and run guard."""
    guard = ctx.run_guard()
    find_ticket = service_tools(ctx)["find_ticket"]
    guard.ensure_tool(
        "create_ticket",
        risk="reversible_write",
        business_key=["customer", "title"],
        verify=lambda r: isinstance(r, dict) and str(r.get("id", "")).startswith("T-"),
        reconcile=lambda key, _args: find_ticket(key),
    )

    async def host() -> None:
        async with Client(mcp_server(ctx)) as client:
            proxy = GuardedClient(
                client,
                server="shop",
                registry=ctx.registry,
                guard=guard,
                fallbacks={"search_catalog": "search_catalog_snapshot"},
                key=lambda tool: KEYS.get(tool, ("shop", tool)),
            )
            plan = model_plan(ctx.scenario.behaviour)
            try:
                name, args = next(plan)
                for _ in range(MAX_STEPS):
                    result = await proxy.call_tool(name, args)
                    if proxy.stopped is not None:
                        return
                    name, args = plan.send(seen(result))
            except StopIteration:
                return

    anyio.run(host)
    return guard


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_guarded_mcp_host_holds_every_promise(path):
    """GuardedClient around a real MCP client: every shipped scenario's three promises
    hold, measured at the service, and every fault was really met."""
    holds_every_promise(path, mcp_agent)


# -- a stdio server, its faults injected on the wire by ctx.mcp_stdio ---------------------


@pytest.fixture(scope="module")
def shop() -> Iterator[list[str]]:
    """The command that launches the stdio shop (a fresh one each launch)."""
    with shop_server() as server:
        yield server.command


def stdio_host(ctx: ExerciseContext, shop: list[str]) -> Any:
    """A host that launches its stdio server through ctx.mcp_stdio: the same host code."""
    from mcp import StdioServerParameters

    from toolbreaker.integrations.mcp import IDEMPOTENCY_META_KEY

    guard = ctx.run_guard()
    command = ctx.mcp_stdio(shop, meta_key=IDEMPOTENCY_META_KEY)
    params = StdioServerParameters(command=command[0], args=command[1:])

    async def host() -> None:
        async with Client(params) as client:
            proxy = GuardedClient(
                client,
                server="shop",
                registry=ctx.registry,
                guard=guard,
                fallbacks={"search_catalog": "search_catalog_snapshot"},
            )
            await proxy.list_tools()
            plan = model_plan(ctx.scenario.behaviour)
            try:
                name, args = next(plan)
                for _ in range(MAX_STEPS):
                    result = await proxy.call_tool(name, args)
                    if proxy.stopped is not None:
                        return
                    name, args = plan.send(seen(result))
            except StopIteration:
                return

    anyio.run(host)
    return guard


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(WIRE_FAULTS))
def test_faults_injected_into_a_stdio_server_are_held(kind, shop):
    """The wrapper counts each tools/call as an attempt and carries its fault out on the
    wire; the guarded host holds every promise, and every fault was met. No fault here
    takes the server down (a slow tool included: the server answers its liveness ping), so
    the server's transport breaker never opens."""
    tool, fault = WIRE_FAULTS[kind]
    (report,) = exercise(
        [wire_scenario(kind, tool, fault)], lambda ctx: stdio_host(ctx, shop)
    ).scenarios
    assert report.held, report.to_dict()
    assert "shop" not in report.measured.opened
    counts = {t.target: t for t in report.measured.targets}
    assert counts[tool].failed >= 1
    if tool == "create_ticket":
        assert counts[tool].commits == 1
        assert len(report.measured.committed_keys) == 1


@pytest.mark.slow
@pytest.mark.parametrize("malformed", ["shape", "truncated"])
def test_a_malformed_success_over_stdio_is_a_failure_of_the_tool(malformed, shop):
    """The wrapper answers every search with a success its output schema refuses (the
    wrong shape, or text without the structured result): the SDK's own check refuses it,
    GuardedClient counts it against the tool's breaker (a bad gateway, never raised to
    the host), the breaker opens and the model is sent to the snapshot."""
    fault = f'kind = "malformed"\nmalformed = "{malformed}"'
    scenario = wire_scenario("malformed", "search_catalog", fault)
    (report,) = exercise([scenario], lambda ctx: stdio_host(ctx, shop)).scenarios
    assert report.held, report.to_dict()
    assert report.measured.agent_error is None
    assert report.measured.opened == ("shop:search_catalog",)
    (search,) = [t for t in report.measured.targets if t.target == "search_catalog"]
    assert 1 <= search.failed <= report.scenario.max_failed_attempts
    assert search.after_open == 0


@pytest.mark.slow
def test_a_malformed_answer_to_a_write_is_an_unknown_outcome_never_sent_again(shop):
    """The ticket is made, then its answer is cut off: whether it was made is unknown, so
    neither the model's next try nor the resumed run sends it again."""
    fault = 'kind = "malformed"\nmalformed = "truncated"\nsteps = [1]'
    scenario = wire_scenario("malformed-write", "create_ticket", fault)
    (report,) = exercise([scenario], lambda ctx: stdio_host(ctx, shop)).scenarios
    assert report.held, report.to_dict()
    (ticket,) = [t for t in report.measured.targets if t.target == "create_ticket"]
    assert ticket.commits == 1
    assert ticket.duplicates == 0
    assert report.measured.packet["condition"] == "uncertain-side-effect"
    assert report.measured.packet["counters"]["uncertain"] == 1
    assert "MalformedResult" in report.measured.packet["counters"]["writes_blocked"]["detail"]
