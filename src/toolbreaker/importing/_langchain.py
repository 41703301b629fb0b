"""LangChain and LangGraph message histories.

A file is the messages of one run, as JSON: LangChain's ``messages_to_dict`` list
(``{"type": "ai", "data": {...}}``), ``dumpd`` objects (``{"lc": 1, "type":
"constructor", "id": [..., "AIMessage"], "kwargs": {...}}``), or plain message dicts
(``{"type": "ai", ...}``); or a LangGraph state holding them under ``messages``.

- every AI message is a model step: its model (``response_metadata.model_name`` or
  ``model``) and usage (``usage_metadata``); LangChain keeps no clock or cost, so every
  step is at 0 and costs nothing;
- its ``tool_calls`` are the calls, with their ``args``; each call's result is the tool
  message with its ``tool_call_id`` (JSON text is decoded);
- a tool message with ``status`` ``error`` is a failure LangChain wrote as text (the tool
  raised, or its arguments did not validate): the tool's own refusal, class
  ``unknown-exception:ToolReportedError``, as the LangChain adapter settles it;
- a call without a tool message, and an ``invalid_tool_calls`` entry, are left out with a
  warning (the tool never ran).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.core._run.budget import RiskClass
from toolbreaker.importing._common import ImportedRun, RunBuilder, decoded

__all__ = ["read_langchain"]

_KINDS: Final = {
    "ai": "ai",
    "AIMessage": "ai",
    "AIMessageChunk": "ai",
    "assistant": "ai",
    "tool": "tool",
    "ToolMessage": "tool",
}
#: The class a failure LangChain wrote as text has: the tool's own, nothing made.
TOOL_ERROR: Final = "unknown-exception:ToolReportedError"


def read_langchain(
    data: Any, source: str, *, risks: Mapping[str, RiskClass], trim: int | None
) -> list[ImportedRun]:
    """The run of a decoded message history.

    Raises:
        ValueError: naming the message that is wrong.
    """
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list):
        raise TypeError("a message history is a list of messages, or an object with messages")
    name = source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    builder = RunBuilder(name, source, risks=risks, trim=trim)
    plain = [_plain(message, index) for index, message in enumerate(messages, 1)]
    answers = {
        m["tool_call_id"]: m
        for m in plain
        if m["kind"] == "tool" and isinstance(m.get("tool_call_id"), str)
    }
    for message in plain:
        if message["kind"] == "ai":
            _ai(builder, message, answers)
        elif message["kind"] == "tool" and message.get("tool_call_id") not in answers:
            builder.warn("a tool message without a call id is left out")
    return [builder.build()]


def _plain(message: Any, index: int) -> dict[str, Any]:
    """A message in any of the accepted spellings as one dict, with its ``kind``."""
    where = f"message {index}"
    if not isinstance(message, dict):
        raise TypeError(f"{where} is not an object")
    if message.get("lc") == 1 and isinstance(message.get("kwargs"), dict):
        ids = message.get("id")
        kind = ids[-1] if isinstance(ids, list) and ids else None
        body = dict(message["kwargs"])
    elif isinstance(message.get("data"), dict) and "type" in message:
        kind, body = message["type"], dict(message["data"])
    else:
        kind, body = message.get("type", message.get("role")), dict(message)
    if not isinstance(kind, str):
        raise TypeError(f"{where} has no type")
    body["kind"] = _KINDS.get(kind, "other")
    body["where"] = where
    return body


def _ai(builder: RunBuilder, message: Mapping[str, Any], answers: Mapping[str, Any]) -> None:
    metadata = message.get("response_metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    model = metadata.get("model_name") or metadata.get("model")
    usage = message.get("usage_metadata")
    usage = usage if isinstance(usage, dict) else {}
    builder.model(
        0,
        model if isinstance(model, str) and model.strip() else None,
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
    )
    for _ in message.get("invalid_tool_calls") or []:
        builder.warn("an invalid tool call (its arguments did not parse) is left out")
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise TypeError(f"{message['where']}: a tool call without a name")
        args = call.get("args")
        if not isinstance(args, dict):
            raise TypeError(f"{message['where']}: the arguments of {call['name']} are no object")
        call_id = call.get("id")
        answer = answers.get(call_id) if isinstance(call_id, str) else None
        if answer is None:
            builder.warn("a tool call without a tool message is left out")
            continue
        if answer.get("status") == "error":
            builder.tool(0, call["name"], args, error=TOOL_ERROR)
        else:
            builder.tool(0, call["name"], args, result=decoded(answer.get("content")))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
