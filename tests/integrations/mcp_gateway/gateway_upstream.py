"""A Python MCP server (the SDK's ``MCPServer``, stdio) for the gateway's tests.

Run as ``python gateway_upstream.py`` (stdio), ``python gateway_upstream.py http PORT``
(streamable HTTP on 127.0.0.1), or ``python gateway_upstream.py shared`` (one process, a
fresh server for each host that launches the relay: ``mcp_shared``). Every tool is
deterministic, so the answers the gateway relays can be compared byte for byte with the
server's own:

- ``echo`` (read-only), ``search`` (read-only, a declared output schema);
- ``billing``: fails as an upstream 503 would (``isError``, ``HTTP 503``);
- ``create_ticket`` (a reversible write): returns the idempotency key it was sent;
  ``delete_ticket`` (destructive);
- ``pid``: the server's process id; ``crash``: the process exits mid-call; ``hang``:
  never answers (a cancellation is counted: ``cancels``);
- ``progress``: reports progress three times; ``ask``: elicits a yes from the user
  (a server-to-host request on 2025-11-25; an ``input_required`` round on 2026-07-28);
- a resource ``res://greeting``, a prompt ``greet``, a completion for it, and a log line
  from ``echo``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CallToolResult,
    Completion,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel
from typing_extensions import TypedDict

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
KEY = "toolbreaker/idempotency-key"


class Hits(TypedDict):
    query: str
    hits: list[str]


class Confirm(BaseModel):
    yes: bool


def build() -> MCPServer:
    """A fresh server: its own list of cancelled calls."""
    server = MCPServer("catalog", instructions="A catalog for the gateway's tests.")
    cancelled: list[str] = []

    @server.tool(annotations=READ)
    async def echo(text: str, ctx: Context) -> str:
        """Say the text back."""
        await ctx.info(f"echoing {text}")
        return "echo: " + text

    @server.tool(annotations=READ)
    def search(query: str) -> Hits:
        """Search the catalog."""
        return {"query": query, "hits": [f"{query}-1", f"{query}-2"]}

    @server.tool(annotations=READ)
    def billing(customer: str) -> str:
        """The billing upstream: down."""
        raise ToolError(f"upstream billing said HTTP 503 Service Unavailable for {customer}")

    @server.tool(annotations=WRITE)
    def create_ticket(title: str, ctx: Context) -> str:
        """File a ticket; answers with the idempotency key it was sent."""
        key = dict(ctx.request_context.meta or {}).get(KEY)
        return f"ticket {title!r} key={key}"

    @server.tool(annotations=DESTRUCTIVE)
    def delete_ticket(ticket: str) -> str:
        """Delete a ticket for good."""
        return f"deleted {ticket}"

    @server.tool()
    def pid(attempt: int = 0) -> int:
        """The server's process id (``attempt`` tells polls apart for the run guard)."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """The process dies in the middle of the call."""
        sys.stdout.flush()
        os._exit(3)

    @server.tool(annotations=READ)
    async def hang(label: str = "") -> str:
        """Never answers (until cancelled)."""
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(label)
        return "never"

    @server.tool(annotations=READ)
    def cancels(attempt: int = 0) -> list[str]:
        """The labels of the ``hang`` calls cancelled so far (``attempt``: as for ``pid``)."""
        return list(cancelled)

    @server.tool(annotations=READ)
    async def progress(steps: int, ctx: Context) -> str:
        """Report progress ``steps`` times, then answer."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
        return f"done in {steps} steps"

    @server.tool(annotations=READ)
    async def ask(question: str, ctx: Context) -> Any:
        """Ask the user a yes-or-no question."""
        if ctx.protocol_version == "2026-07-28":
            answers = ctx.input_responses
            if not answers:
                ask_params = ElicitRequestFormParams(
                    message=question,
                    requested_schema={"type": "object", "properties": {"yes": {"type": "boolean"}}},
                )
                return InputRequiredResult(
                    input_requests={"confirm": ElicitRequest(params=ask_params)},
                    request_state="asked",
                )
            content = getattr(answers["confirm"], "content", None) or {}
            said = "yes" if content.get("yes") else "no"
        else:
            answer = await ctx.elicit(question, Confirm)
            data = getattr(answer, "data", None)
            said = "yes" if data is not None and data.yes else "no"
        return CallToolResult(content=[TextContent(type="text", text=f"the user said {said}")])

    @server.resource("res://greeting")
    def greeting() -> str:
        """A greeting."""
        return "hello from the catalog"

    @server.prompt()
    def greet(name: str) -> str:
        """Greet someone."""
        return f"Say hello to {name}."

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion:
        """Names that start with what was typed."""
        names = ["ada", "alan", "grace"]
        return Completion(values=[n for n in names if n.startswith(argument.value)])

    return server


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        build().run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:] == ["shared"]:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from mcp_shared import serve_shared

        serve_shared(build)
    else:
        build().run("stdio")
