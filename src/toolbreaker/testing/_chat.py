"""The tool service's model route: an OpenAI chat-completions answer, deterministic.

``POST /v1/chat/completions`` (route key ``"POST /v1"``) answers like an OpenAI-compatible
model server, so an LLM client (LiteLLM with ``api_base=service.url + "/v1"``, the OpenAI
SDK) calls a real socket instead of a provider. The reply echoes the last user message
and counts tokens as whitespace-separated words, so a test knows the ``usage`` it gets::

    {"id": "chatcmpl-1", "object": "chat.completion", "model": <the model asked>,
     "choices": [{"index": 0, "message": {"role": "assistant", "content": "echo: <text>"},
                  "finish_reason": "stop"}],
     "usage": {"prompt_tokens": P, "completion_tokens": C, "total_tokens": P + C}}

Faults are scripted on ``"POST /v1"`` like any route (a 503 outage, a 429 with
``Retry-After``, a 400 with an OpenAI error body, a ``delay`` that hangs past the client's
timeout). A body that is not a chat request answers 400 with an OpenAI error object.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["CHAT_ROUTE", "chat_reply", "openai_error"]

CHAT_ROUTE: Final = "POST /v1"
"""The route key of the model route, for ``inject`` and ``outage``."""

_IDS: Final = itertools.count(1)


def openai_error(message: str, *, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI error body (``{"error": {"message", "type", ...}}``), for a 4xx fault."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _words(value: object) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts: [{"type": "text", "text": ...}]
        return sum(_words(part.get("text")) for part in value if isinstance(part, Mapping))
    return 0


def chat_reply(body: bytes | None) -> tuple[int, dict[str, Any]]:
    """The status and JSON answer to one chat-completions request body."""
    try:
        request = json.loads(body or b"")
    except ValueError:
        request = None
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(request, dict):
        return 400, openai_error("the body must be a chat request with messages")
    asked = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    last = asked[-1].get("content") if asked else ""
    if isinstance(last, list):
        last = " ".join(str(p.get("text", "")) for p in last if isinstance(p, Mapping))
    text = last if isinstance(last, str) else ""
    content = f"echo: {text}".strip()
    prompt = sum(_words(m.get("content")) for m in messages if isinstance(m, Mapping))
    completion = _words(content)
    return 200, {
        "id": f"chatcmpl-{next(_IDS)}",
        "object": "chat.completion",
        "created": 0,
        "model": str(request.get("model", "")),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
