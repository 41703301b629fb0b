"""Exercise an MCP host behind ``toolbreaker mcp``: the scenarios' faults, the gateway between.

The shop is a stdio MCP server whose tools call the exercise's tool service over HTTP,
where the shipped scenarios inject their faults (an outage, a lost write answer ...).
The gateway fronts it with the exercise's breakers and run guard; the host is the MCP
SDK's client over streamable HTTP, driven by the scripted model. Nothing in the host
knows about toolbreaker: what it reads is what any MCP host would. (A server that keeps
its own state takes its faults on the wire instead: launch it through
``ctx.mcp_stdio(command, meta_key=IDEMPOTENCY_META_KEY)``.)

Run it: ``python examples/mcp_gateway_exercise.py``; from the command line the same is
``toolbreaker exercise --shipped --agent mcp_gateway_exercise:agent`` (from examples/).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.types import CallToolResult, TextContent

from toolbreaker.integrations.mcp_gateway import Gateway, UpstreamSpec
from toolbreaker.testing import (
    ExerciseContext,
    exercise,
    model_plan,
    service_tools,
    shipped_scenarios,
)

SHOP = r"""
import json, sys, urllib.error, urllib.parse, urllib.request
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from typing_extensions import TypedDict

base, timeout = sys.argv[1], float(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
server = MCPServer("shop")
READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)

def call(method, path, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with opener.open(request, timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        wait = exc.headers.get("Retry-After")
        after = "; Retry-After: " + wait if wait else ""
        raise ToolError("HTTP %d %s%s" % (exc.code, exc.reason, after))
    except TimeoutError:
        raise ToolError("HTTP 504 the tool service timed out")
    except Exception as exc:
        raise ToolError("HTTP 502 %s" % type(exc).__name__)

def q(text):
    return urllib.parse.quote(text)

@server.tool(annotations=READ)
def search_catalog(query: str) -> dict:
    return call("GET", "/search?q=" + q(query))

@server.tool(annotations=READ)
def refine_search(query: str) -> dict:
    return call("GET", "/search?q=" + q(query + " refined"))

@server.tool(annotations=READ)
def search_catalog_snapshot(query: str) -> dict:
    return call("GET", "/search_snapshot?q=" + q(query))

@server.tool(annotations=READ)
def get_order(order_id: str) -> dict:
    return call("GET", "/orders/" + q(order_id))

class Ticket(TypedDict):  # a declared result: structured content the guard verifies
    id: str
    title: str

@server.tool(annotations=WRITE)
def create_ticket(customer: str, title: str, context: Context) -> Ticket:
    key = dict(context.request_context.meta or {}).get("toolbreaker/idempotency-key", "")
    body = {"title": title, "body": "for " + customer}
    return call("POST", "/tickets", body, {"Idempotency-Key": key} if key else {})

server.run("stdio")
"""

#: The catalog's fallback when its breaker is open.
FALLBACKS = {"search_catalog": "search_catalog_snapshot"}
MAX_STEPS = 100


def seen(result: CallToolResult) -> Any:
    """What the model reads: toolbreaker's JSON, the tool's data, or its error."""
    block = result.content[0] if result.content else None
    text = block.text if isinstance(block, TextContent) else ""
    try:
        return json.loads(text)
    except ValueError:
        pass
    if result.is_error:
        return {"ok": False, "error": text, "retryable": True}
    return result.structured_content or text


def agent(ctx: ExerciseContext) -> Any:
    """The host, the gateway in front of the shop, and the scripted model."""
    guard = ctx.run_guard()
    find_ticket = service_tools(ctx)["find_ticket"]
    guard.ensure_tool(
        "create_ticket",
        risk="reversible_write",
        business_key=["customer", "title"],
        verify=lambda r: str((r.get("structuredContent") or {}).get("id", "")).startswith("T-"),
        reconcile=lambda key, _args: find_ticket(key),
    )
    command = (sys.executable, "-c", SHOP, ctx.base_url, str(ctx.timeout))
    shop = UpstreamSpec(name="shop", command=command, fallbacks=FALLBACKS)
    gateway = Gateway([shop], registry=ctx.registry, run_guard=lambda _server, _client: guard)

    async def host() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(
                lambda task_status: gateway.serve_http(port=0, task_status=task_status)
            )
            async with Client(f"http://127.0.0.1:{port}/mcp/shop", mode="legacy") as client:
                plan = model_plan(ctx.scenario.behaviour)
                try:
                    name, args = next(plan)
                    for _ in range(MAX_STEPS):
                        result = await client.call_tool(name, args)
                        if (result.meta or {}).get("toolbreaker/answer") == "run_stopped":
                            break
                        name, args = plan.send(seen(result))
                except StopIteration:
                    pass
            tg.cancel_scope.cancel()

    try:
        anyio.run(host)
    finally:
        gateway.close()
    return guard


if __name__ == "__main__":
    chosen = [
        path for path in shipped_scenarios() if path.stem in ("outage", "commit-then-timeout")
    ]
    report = exercise(chosen, agent)
    for scenario in report.scenarios:
        print(f"{scenario.scenario.name}: {'held' if scenario.held else 'FAILED'}")
    report.assert_held()
