"""MCP's tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28) for the MCP proxy.

A server that negotiated the extension may answer ``tools/call`` with a task handle
(``resultType: "task"``): it accepted the call and runs it in the background; the client
polls ``tasks/get`` until the task's status is final. The SDK (``mcp`` 2.3) parses the
handle only for a client that declares the extension with a result claim:
:class:`TasksExtension` is that claim. Its resolver hands the handle over to the proxy
(:func:`task_of`), which keeps the call open, polls the task (:func:`await_task`) and
settles the call by the task's final status (the decision is the core's
:func:`toolbreaker.core._run.rounds.task_outcome`).

Imported by :mod:`toolbreaker.integrations.mcp` after it checked the ``mcp`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import anyio
from mcp import ClientSession, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    GetTaskRequest,
    GetTaskRequestParams,
    Result,
    TextContent,
)
from pydantic import ValidationError

from toolbreaker.errors import ToolbreakerError, ToolReportedError
from toolbreaker.integrations._kit import task_outcome

__all__ = [
    "TASKS_EXTENSION",
    "TASK_META_KEY",
    "RoundsAbandoned",
    "TaskFailedError",
    "TaskHandle",
    "TaskOutcomeUnknown",
    "TaskState",
    "TasksExtension",
    "await_task",
    "result_type_of",
    "rounds_key",
    "task_of",
]

#: The extension's identifier, as the client and the server advertise it.
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: The result ``_meta`` key under which :class:`TasksExtension` hands a task handle over.
TASK_META_KEY: Final = "toolbreaker/task"
# Polling: the server's pollIntervalMs, within these bounds (seconds).
_POLL_DEFAULT: Final = 1.0
_POLL_MIN: Final = 0.01
_POLL_MAX: Final = 30.0


class TaskHandle(Result):
    """A task handle: the server's answer to a call it runs as a task (``CreateTaskResult``).

    ``status`` is kept as the server sent it (a status this version does not know is
    judged by :func:`~toolbreaker.core._run.rounds.task_outcome`: unknown, fail closed).
    """

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskState(Result):
    """A task as ``tasks/get`` reports it: its status, and its result or error once final."""

    result_type: str = "complete"
    task_id: str
    status: str
    status_message: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskFailedError(ToolReportedError):
    """A task whose status is ``failed``: the server's word that the call failed.

    A certain failure (a write that may be made again); the breaker ignores it, as it
    ignores a protocol error: the server answered. Never raised to the caller.

    Attributes:
        task_id: the task's id.
        error: the JSON-RPC error the task reports (``code``, ``message``), if any.
    """

    def __init__(self, task_id: str, error: dict[str, Any] | None) -> None:
        message = str((error or {}).get("message") or "the task failed")
        super().__init__(f"task {task_id} failed: {message}")
        self.task_id = task_id
        self.error = error


class TaskOutcomeUnknown(ToolbreakerError):
    """A task whose outcome nobody knows: cancelled, lost by the server, or still running.

    A write's outcome is then unknown (never replayed; reconciled). The breaker's
    default classifier ignores it. Never raised to the caller.

    Attributes:
        task_id: the task's id.
        status: the last status seen (``None``: the task could not be read).
    """

    def __init__(self, task_id: str, status: str | None, why: str) -> None:
        super().__init__(f"task {task_id}: {why}")
        self.task_id = task_id
        self.status = status


class RoundsAbandoned(ToolbreakerError):
    """A call left waiting for its input-required answers, closed by the caller.

    Ignored by the breaker's default classifier; a write's outcome is unknown (a server
    may have acted before it asked). Never raised to the caller.
    """


async def _hand_over(handle: TaskHandle, _ctx: ClaimContext) -> CallToolResult:
    """The claim's resolver: the handle, carried to the proxy in the result's ``_meta``.

    ``is_error`` so that the SDK does not check it against the tool's output schema; a
    caller without the proxy reads that the call runs as a task.
    """
    return CallToolResult(
        content=[TextContent(type="text", text=f"the call runs as task {handle.task_id}")],
        is_error=True,
        _meta={TASK_META_KEY: handle.model_dump(mode="json", by_alias=True, exclude_none=True)},
    )


class TasksExtension(ClientExtension):
    """The client side of MCP's tasks extension, for :class:`mcp.Client`.

    Pass it to the client (``Client(server, extensions=[TasksExtension()])``): the
    client then declares the extension, a server may answer a call with a task, and
    :class:`~toolbreaker.integrations.mcp.GuardedClient` waits for the task's outcome.
    """

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        """The ``task`` result shape of ``tools/call``."""
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=_hand_over),)


def task_of(result: object) -> TaskHandle | None:
    """The task handle ``result`` is (or carries, from :class:`TasksExtension`), else ``None``."""
    if isinstance(result, TaskHandle):
        return result
    if not isinstance(result, CallToolResult) or not result.meta:
        return None
    carried = result.meta.get(TASK_META_KEY)
    if carried is None:
        return None
    try:
        return TaskHandle.model_validate(carried)
    except ValidationError:
        return None


async def await_task(
    session: ClientSession, handle: TaskHandle, *, read_timeout: float, wait: float
) -> CallToolResult:
    """Poll ``tasks/get`` until the task's status is final; its call's result.

    Each poll has ``read_timeout``; the whole wait ``wait`` seconds.

    Raises:
        TaskFailedError: the task failed.
        TaskOutcomeUnknown: it was cancelled, the server lost it (a ``tasks/get`` error),
            its result is unreadable, or it still ran after ``wait`` seconds.
        MCPError: a poll timed out or lost the connection (the proxy's usual failures).
    """
    task_id = handle.task_id
    status, interval = handle.status, handle.poll_interval_ms
    state: TaskState | None = None
    with anyio.move_on_after(wait) as waited:
        while task_outcome(status) == "running":
            await anyio.sleep(_interval(interval))
            try:
                state = await session.send_request(
                    GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)),
                    TaskState,
                    request_read_timeout_seconds=read_timeout,
                )
            except MCPError as exc:
                if _lost_reply(exc):
                    raise
                raise TaskOutcomeUnknown(task_id, None, f"tasks/get failed: {exc}") from exc
            except ValidationError as exc:
                raise TaskOutcomeUnknown(task_id, None, "tasks/get answered nonsense") from exc
            status, interval = state.status, state.poll_interval_ms or interval
    if waited.cancelled_caught:
        raise TaskOutcomeUnknown(task_id, status, f"still {status} after {wait:g} s")
    outcome = task_outcome(status)
    if outcome == "failure":
        raise TaskFailedError(task_id, state.error if state is not None else None)
    if outcome == "success" and state is not None and state.result is not None:
        try:
            return CallToolResult.model_validate(state.result)
        except ValidationError as exc:
            raise TaskOutcomeUnknown(task_id, status, "its result is no tool result") from exc
    raise TaskOutcomeUnknown(task_id, status, f"it ended {status}")


def _interval(poll_interval_ms: int | None) -> float:
    if poll_interval_ms is None:
        return _POLL_DEFAULT
    return min(max(poll_interval_ms / 1000, _POLL_MIN), _POLL_MAX)


def _lost_reply(exc: MCPError) -> bool:
    """A poll that timed out or lost its connection: the proxy's own failure handling."""
    return exc.code in (REQUEST_TIMEOUT, CONNECTION_CLOSED)


def rounds_key(name: str, args: Mapping[str, Any]) -> str:
    """Which open call a call sent again continues: the same tool with the same arguments."""
    return name + "\x00" + json.dumps(args, sort_keys=True, default=str)


def result_type_of(result: object) -> object:
    """A result's ``resultType`` tag (``None`` when it has none)."""
    return getattr(result, "result_type", None)
