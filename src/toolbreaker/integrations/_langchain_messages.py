"""What the LangChain adapter writes into LangChain's messages, and reads from them.

The final ``AIMessage`` of a stopped run (:func:`stop_message`) and the state update
that carries it; the system-prompt line added to a model request, the names of its
tools and the usage read off the model's response; the id and turn read off a tool call,
the ``ToolMessage`` the model reads for a guard's answer, and the tool's own value read
back from its message. None of them keeps state or decides anything: they live apart
from the middleware so that :mod:`toolbreaker.integrations.langchain` holds the
middleware, its options and its hooks, and every message the model reads is worded in
one place. That module re-exports the public names (:data:`STOP_KEY`, :data:`TURN_KEY`,
:func:`stop_message`); import them from there.

Imported by :mod:`toolbreaker.integrations.langchain` after it checked the ``langchain``
extra.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from langchain.agents.middleware import ModelRequest
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from toolbreaker.errors import NotSent
from toolbreaker.integrations import count_usage
from toolbreaker.integrations._kit import (
    StopPacket,
    hook_failed,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        RunGuard,
        SiblingOutcome,
    )


__all__ = [
    "STOP_KEY",
    "TURN_KEY",
    "answer_message",
    "call_id_of",
    "content_text",
    "count_response",
    "failed_reply",
    "settles_with",
    "stop_message",
    "stop_update",
    "tool_name_of",
    "tool_reply",
    "tool_value",
    "turn_of",
    "with_system_line",
]

STOP_KEY: Final = "toolbreaker_stop"
"""The state key (and ``additional_kwargs`` key) that carries the stop packet dict."""
#: The state key (and ``additional_kwargs`` key) that carries the last turn's outcome
#: (``SiblingOutcome.to_result()``) when the run stopped.
TURN_KEY: Final = "toolbreaker_turn"


# -- a stopped run ---------------------------------------------------------------------------


def stop_message(packet: StopPacket, turn: SiblingOutcome | None = None) -> AIMessage:
    """The final message of a stopped run: the reason in words, the packet in kwargs.

    ``turn``: the last model turn's calls (``RunGuard.turn_outcome()``); when given, the
    text says which completed and which did not, and ``additional_kwargs[TURN_KEY]``
    holds ``turn.to_result()``.
    """
    data = packet.to_dict()
    text = packet.final_text(turn)
    kwargs: dict[str, Any] = {STOP_KEY: data}
    if turn is not None and turn.branches:
        kwargs[TURN_KEY] = turn.to_result()
    return AIMessage(content=text, additional_kwargs=kwargs)


def stop_update(packet: StopPacket, turn: SiblingOutcome | None) -> dict[str, Any]:
    """The state update that ends a stopped run: the jump, the stop message, the packet."""
    update: dict[str, Any] = {
        "jump_to": "end",
        "messages": [stop_message(packet, turn)],
        STOP_KEY: packet.to_dict(),
    }
    if turn is not None and turn.branches:
        update[TURN_KEY] = turn.to_result()
    return update


# -- model calls ------------------------------------------------------------------------------


def with_system_line(request: ModelRequest[Any], line: str) -> ModelRequest[Any]:
    """``request`` with ``line`` appended to its system message (or as the message)."""
    current = request.system_message
    if current is None:
        return request.override(system_message=SystemMessage(line))
    content: str | list[str | dict[str, Any]]
    if isinstance(current.content, str):
        content = f"{current.content}\n\n{line}" if current.content else line
    else:
        content = [*current.content, {"type": "text", "text": line}]
    return request.override(system_message=current.model_copy(update={"content": content}))


def tool_name_of(tool: Any) -> str | None:
    """A model request's tool's name (a tool object or a provider's dict)."""
    name = tool.get("name") if isinstance(tool, Mapping) else getattr(tool, "name", None)
    return name if isinstance(name, str) else None


def count_response(
    guard: Callable[[], RunGuard], request: ModelRequest[Any], response: object
) -> None:
    """Report the usage of every ``AIMessage`` the model call returned (never raises)."""
    try:
        _counted(guard(), request, response)
    except Exception as exc:  # noqa: BLE001 - usage never changes a response
        hook_failed("the model's usage could not be counted; the response stands", exc)


def _counted(guard: RunGuard, request: ModelRequest[Any], response: object) -> None:
    found = getattr(response, "model_response", response)
    messages = [found] if isinstance(found, AIMessage) else getattr(found, "result", [])
    fallback = getattr(request.model, "model_name", None) or getattr(request.model, "model", None)
    for message in messages:
        usage = getattr(message, "usage_metadata", None)
        if not isinstance(message, AIMessage) or not usage:
            continue
        meta = message.response_metadata or {}
        model = meta.get("model_name") or meta.get("model") or fallback
        count_usage(guard, model, usage.get("input_tokens"), usage.get("output_tokens"))


# -- tool calls -------------------------------------------------------------------------------


def call_id_of(request: ToolCallRequest) -> str | None:
    """The model's id of this tool call (the span's ``gen_ai.tool.call.id``), if it gave one."""
    found = request.tool_call.get("id")
    return found if isinstance(found, str) and found else None


def description_of(request: ToolCallRequest) -> str | None:
    """The called tool's description as the model reads it, if the tool is known.

    A span's ``gen_ai.tool.description``.
    """
    tool = request.tool
    description = getattr(tool, "description", None) if tool is not None else None
    return description if isinstance(description, str) and description else None


def turn_of(request: ToolCallRequest) -> str | None:
    """The id of the model message that issued the call, if the state shows it."""
    state = request.state
    messages = state.get("messages") if isinstance(state, Mapping) else state
    if not isinstance(messages, list):
        return None
    call_id = request.tool_call.get("id")
    for message in reversed(messages):
        if isinstance(message, AIMessage) and any(
            c.get("id") == call_id for c in message.tool_calls
        ):
            return message.id
    return None


def tool_reply(
    call: Mapping[str, Any], result: ToolMessage | Command[Any], value: Any, answer: Any
) -> ToolMessage | Command[Any]:
    """The tool's own message when the guard let its value through, else the guard's."""
    return result if answer is value else answer_message(call, answer)


def failed_reply(call: Mapping[str, Any], exc: BaseException, answer: Any) -> ToolMessage:
    """What the model reads once the handler raised (the step is settled already).

    A cancellation (``KeyboardInterrupt``, ``CancelledError``) was raised again by the
    step; a LangGraph interrupt is raised again here, so the framework stops or pauses as
    it would without us.
    """
    if isinstance(exc, GraphBubbleUp):
        raise exc
    return answer_message(call, answer)


def settles_with(exc: BaseException) -> BaseException:
    """What the step settles with when the handler raised.

    A LangGraph interrupt (``GraphBubbleUp``: a human-in-the-loop pause) settles as
    :class:`~toolbreaker.errors.NotSent`: LangGraph runs the tool again from its start on resume,
    with the same idempotency key, so a write is not uncertain.
    """
    if isinstance(exc, GraphBubbleUp):
        paused = NotSent("paused by a LangGraph interrupt")
        paused.__cause__ = exc
        return paused
    return exc


def answer_message(call: Mapping[str, Any], answer: Any) -> ToolMessage:
    """A guard answer as the tool message the model reads."""
    failed = isinstance(answer, Mapping) and answer.get("ok") is False
    content = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    return ToolMessage(
        content=content,
        tool_call_id=call.get("id") or "",
        name=call.get("name"),
        status="error" if failed else "success",
    )


def tool_value(result: ToolMessage | Command[Any]) -> Any:
    """A tool's output as the model reads it, JSON-decoded when it is JSON."""
    if not isinstance(result, ToolMessage):
        return result
    content = result.content
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def content_text(content: Any) -> str:
    """A message's content as text: a string as it is, content blocks as JSON."""
    return content if isinstance(content, str) else json.dumps(content, default=str)
