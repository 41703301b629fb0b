"""What every adapter's exercise test checks, in one place (nine adapters, one list).

Each adapter's test builds its agent inside the real framework; these run it against the
shipped scenarios and check the report: the guarded agent holds every promise and met
every fault; the same agent without toolbreaker fails, so the report can fail.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp_shared import HERE, SharedUpstream
from toolbreaker import Breaker, Registry
from toolbreaker.testing import exercise, shipped_scenarios
from toolbreaker.testing._exercise import ScenarioReport

SHIPPED = shipped_scenarios()
IDS = [p.stem for p in SHIPPED]
#: What an agent without toolbreaker is run against: one read outage, one lost write
#: answer, one loop a simple identical-call detector misses.
UNGUARDED = ("outage", "commit-then-timeout", "alternate")


def shipped(name: str) -> Path:
    """The shipped scenario file called ``name``."""
    return next(p for p in SHIPPED if p.stem == name)


def shop_breakers(registry: Registry) -> dict[str, Breaker]:
    """The breakers of the bundled service's tools, by tool, as the reference agent has
    them: one ``catalog`` breaker for both catalog tools (its fallback the snapshot), one
    for the snapshot, the orders and the ticket write."""
    snapshot = registry.get("catalog-snapshot", "read", tool="search_catalog_snapshot")
    catalog = registry.get(
        "catalog", "read", tool="search_catalog", fallback="search_catalog_snapshot"
    )
    return {
        "search_catalog": catalog,
        "refine_search": catalog,
        "search_catalog_snapshot": snapshot,
        "get_order": registry.get("orders", "read"),
        "create_ticket": registry.get("tickets", "write"),
    }


def result_of(text: str) -> Any:
    """A tool result as the model read it: toolbreaker's JSON, a framework's ``str()`` of a
    tool's dict, or else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text


def holds_every_promise(path: Path, agent: Callable[[Any], Any]) -> ScenarioReport:
    """``agent`` against the scenario ``path``: every promise held, measured at the
    service; every fault was really met; a looping model was stopped as a loop."""
    (report,) = exercise([path], agent).scenarios
    assert report.held, report.to_dict()
    assert report.measured.agent_error is None
    counts = {t.target: t for t in report.measured.targets}
    for target in report.scenario.targets:
        assert counts[target].failed >= 1
    if report.scenario.behaviour in ("alternate", "insist"):
        assert report.measured.packet is not None
        assert report.measured.packet["condition"] in ("loop", "repeated-action")
    return report


def fails_without_toolbreaker(name: str, agent: Callable[[Any], Any]) -> ScenarioReport:
    """The same agent without toolbreaker against the shipped scenario ``name``: it ran
    to its end, and the report fails: no packet, and a failing route hit too often or a
    write committed twice."""
    (report,) = exercise([shipped(name)], agent).scenarios
    assert report.measured.agent_error is None  # the failure is its own, not a crash
    assert not report.held
    before, understandable, _ = report.judgement.promises
    assert not before.held
    assert not understandable.held
    return report


# -- an MCP stdio shop whose faults ctx.mcp_stdio injects on the wire -----------------------
#: A shop server run as ``python -c STDIO_SHOP``: it keeps its tickets by the idempotency key
#: the host sends in ``_meta`` (the MCP exercise test, and the gateway's). Run as
#: ``python -c STDIO_SHOP shared DIR`` (``shop_server``), one process serves a fresh shop,
#: no tickets yet, to each host that launches its relay (``mcp_shared``).
STDIO_SHOP = """
import sys

from typing_extensions import TypedDict

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)


class Item(TypedDict):
    sku: str
    price: float


class Catalog(TypedDict):  # a declared result: the tool's output schema
    query: str
    results: list[Item]


class Ticket(TypedDict):
    id: str
    title: str


def build():
    server = MCPServer("shop")
    tickets = {}

    @server.tool(annotations=READ)
    def search_catalog(query: str) -> Catalog:
        return {"query": query, "results": [{"sku": "SKU-1", "price": 9.99}]}

    @server.tool(annotations=READ)
    def search_catalog_snapshot(query: str) -> dict:
        return {"query": query, "results": [], "stale": True}

    @server.tool(annotations=READ)
    def get_order(order_id: str) -> dict:
        return {"id": order_id, "status": "shipped"}

    @server.tool(annotations=WRITE)
    def create_ticket(customer: str, title: str, context: Context) -> Ticket:
        key = dict(context.request_context.meta or {}).get("toolbreaker/idempotency-key")
        if key in tickets:
            return tickets[key]
        ticket = {"id": "T-%d" % (len(tickets) + 1), "title": title}
        tickets[key or ticket["id"]] = ticket
        return ticket

    return server


if sys.argv[1:2] == ["shared"]:
    sys.path.insert(0, sys.argv[2])
    from mcp_shared import serve_shared

    serve_shared(build)
else:
    build().run("stdio")
"""


def shop_server() -> SharedUpstream:
    """One process of ``STDIO_SHOP`` for a module's tests; its ``command`` launches a shop."""
    return SharedUpstream([sys.executable, "-c", STDIO_SHOP, "shared", HERE])


WIRE_FAULTS = {
    "outage": ("search_catalog", 'kind = "outage"'),
    "slow": ("search_catalog", 'kind = "slow"\ndelay = 1.5'),
    "rate-limit": ("search_catalog", 'kind = "rate-limit"\nretry_after = 30'),
    "credential": ("get_order", 'kind = "credential"'),
    "commit-then-timeout": ("create_ticket", 'kind = "commit-then-timeout"\nsteps = [1]'),
    "late-success": ("create_ticket", 'kind = "late-success"\nsteps = [1]\ndelay = 1.5'),
}


def wire_scenario(kind: str, tool: str, fault: str) -> Any:
    """A scenario of one fault that ``ctx.mcp_stdio`` injects on the wire of ``STDIO_SHOP``."""
    from toolbreaker.testing._scenario import parse_scenario

    text = f'name = "wire-{kind}"\ntimeout = 0.5\n[faults.f]\ntool = "{tool}"\n{fault}\n'
    return parse_scenario(text + '[business_key]\ncreate_ticket = ["customer", "title"]\n', "x")
