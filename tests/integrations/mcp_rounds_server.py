"""A stdio MCP server speaking the 2026-07-28 revision, for test_mcp_rounds.py.

- ``confirm_refund`` asks for input once (an ``InputRequiredResult`` with an elicitation),
  then answers with the answer it got;
- ``export`` runs as a task (the tasks extension's ``resultType: "task"``) for a client
  that declares the extension: ``tasks/get`` reports it ``working`` for ``after`` polls,
  then ``outcome`` (``completed``, ``failed`` or ``cancelled``);
- ``entered`` says how many times a tool's body was entered (rounds included).

Run as ``python mcp_rounds_server.py`` (stdio).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from mcp import MCPError
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    CLIENT_CAPABILITIES_META_KEY,
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    RequestParams,
    TextContent,
)

TASKS = "io.modelcontextprotocol/tasks"
entered: Counter[str] = Counter()
tasks: dict[str, dict[str, Any]] = {}
ids = itertools.count(1)


class GetTaskParams(RequestParams):
    task_id: str


def _public(task: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in task.items() if not k.startswith("_")}


class Tasks(Extension):
    """The server side of the tasks extension, for ``export`` only."""

    identifier = TASKS

    def methods(self) -> list[MethodBinding]:
        async def get(_ctx: Any, params: GetTaskParams) -> dict[str, Any]:
            task = tasks.get(params.task_id)
            if task is None:
                raise MCPError(code=-32602, message=f"no task {params.task_id}")
            task["_polls"] += 1
            if task["_polls"] >= task["_after"]:
                task["status"] = task["_outcome"]
                if task["status"] == "completed":
                    text = f"exported {task['_args'].get('table', '?')} as {params.task_id}"
                    task["result"] = {"content": [{"type": "text", "text": text}]}
                elif task["status"] == "failed":
                    task["error"] = {"code": -32603, "message": "the export crashed"}
            return _public(task)

        return [MethodBinding("tasks/get", GetTaskParams, get)]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: Any, call_next: Any
    ) -> Any:
        if params.name != "export":
            return await call_next(ctx)
        declared = ((params.meta or {}).get(CLIENT_CAPABILITIES_META_KEY) or {}).get(
            "extensions"
        ) or {}
        if TASKS not in declared:  # the spec's MUST: no task for a client without it
            raise MCPError(code=-32021, message="Missing required client capability")
        entered["export"] += 1
        args = params.arguments or {}
        task_id = f"task-{next(ids)}"
        tasks[task_id] = {
            "taskId": task_id,
            "status": "working",
            "createdAt": "2026-07-28T00:00:00Z",
            "lastUpdatedAt": "2026-07-28T00:00:00Z",
            "ttlMs": 60_000,
            "pollIntervalMs": 10,
            "_polls": 0,
            "_after": int(args.get("after", 2)),
            "_outcome": args.get("outcome", "completed"),
            "_args": args,
        }
        return {"resultType": "task", **_public(tasks[task_id])}


server = MCPServer("rounds", extensions=[Tasks()])


@server.tool()
async def confirm_refund(order: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    """Refund an order once the user confirmed it."""
    entered["confirm_refund"] += 1
    answers = ctx.input_responses
    if not answers:
        ask = ElicitRequestFormParams(
            message=f"Refund order {order}?",
            requested_schema={"type": "object", "properties": {"yes": {"type": "boolean"}}},
        )
        return InputRequiredResult(
            input_requests={"confirm": ElicitRequest(params=ask)}, request_state="asked"
        )
    answer = answers["confirm"]
    confirmed = getattr(answer, "content", None) or {}
    text = f"refunded {order}" if confirmed.get("yes") else f"kept {order}"
    return CallToolResult(content=[TextContent(type="text", text=text)])


@server.tool()
def export(table: str, outcome: str = "completed", after: int = 2) -> str:
    """Export a table (runs as a task; the tasks extension answers)."""
    return f"never reached for {table} {outcome} {after}"


@server.tool()
def entered_count(tool: str) -> str:
    """How many times ``tool``'s body was entered."""
    return str(entered[tool])


if __name__ == "__main__":
    server.run("stdio")
