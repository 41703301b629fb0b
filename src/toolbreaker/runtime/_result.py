"""What the model reads: structured, LLM-readable tool results.

A local rejection is never worded as a remote failure: the model is told which tool is
out of service, for how many whole seconds, that retrying is pointless and why, which
fallback to use, and not to invent the data.
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.errors import PolicyError

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "SYSTEM_PROMPT_LINE",
    "error_result",
    "retry_after_seconds",
    "system_prompt_line",
    "unavailable_result",
    "validate_template",
]

#: Model-facing reason per local rejection.
_REASONS: Final = {
    "cooldown": "open",
    "opened": "open",
    "probe-limit": "recovering",
    "isolated": "isolated",
    "store-unavailable": "store-unavailable",
}

_NO_REPEAT: Final = (
    "Do not call it again for {seconds} seconds: every call will be rejected without "
    "reaching the provider."
)

#: Instruction templates per model-facing reason. Placeholders: ``{tool}``, ``{seconds}``,
#: ``{fallback_sentence}``.
DEFAULT_INSTRUCTIONS: Final = {
    "open": 'The tool "{tool}" is out of service after repeated provider failures. '
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
    "recovering": 'The tool "{tool}" is being tested after an outage and has no free slot. '
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
    "isolated": 'The tool "{tool}" was taken out of service by an operator. '
    "Do not call it again in this run. {fallback_sentence} Do not estimate or invent the data.",
    "store-unavailable": 'The tool "{tool}" cannot be checked for health right now, so it '
    "is not being called (this is not a provider failure). "
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
}

_FIELDS: Final = frozenset({"tool", "seconds", "fallback_sentence", "fallback"})

#: The one line to add to a system prompt so the model knows the protocol.
SYSTEM_PROMPT_LINE: Final = (
    'If a tool result contains "tool_unavailable": true, that tool is out of service: do not '
    'call it again before "retry_after_seconds" have passed, follow its "instruction", use '
    "the fallback tool it names if there is one, and tell the user which data is unavailable "
    "instead of estimating or inventing it."
)


def system_prompt_line() -> str:
    """The system-prompt sentence that explains tool-unavailable results to the model."""
    return SYSTEM_PROMPT_LINE


def retry_after_seconds(ms: int | None) -> int:
    """Whole seconds, rounded up, and at least 1."""
    if ms is None or ms <= 0:
        return 1
    return max(1, math.ceil(ms / 1000))


def validate_template(template: str, *, where: str = "instruction") -> str:
    """Check an instruction template's placeholders; raise :class:`PolicyError` if unknown."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError as exc:
        raise PolicyError(f"{where}: malformed template ({exc})", field=where) from None
    unknown = names - _FIELDS
    if unknown:
        raise PolicyError(
            f"{where}: unknown placeholder(s) {sorted(unknown)}; use {sorted(_FIELDS)}",
            field=where,
        )
    return template


def unavailable_result(
    *,
    tool: str,
    reason: str,
    retry_after_ms: int | None,
    fallback: str | None = None,
    fallback_note: str = "",
    templates: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The tool-unavailable result for a local rejection (or the failure that opened it)."""
    public = _REASONS.get(reason, "open")
    seconds = retry_after_seconds(retry_after_ms)
    if fallback:
        note = f" and {fallback_note.strip().rstrip('.')}" if fallback_note.strip() else ""
        fallback_sentence = f'Use "{fallback}" instead{note}.'
    else:
        fallback_sentence = "There is no substitute tool: tell the user this data is unavailable."
    template = (templates or {}).get(public) or DEFAULT_INSTRUCTIONS[public]
    instruction = template.format(
        tool=tool, seconds=seconds, fallback_sentence=fallback_sentence, fallback=fallback or ""
    )
    result: dict[str, Any] = {
        "ok": False,
        "tool_unavailable": True,
        "tool": tool,
        "retry_after_seconds": seconds,
        "reason": public,
        "instruction": " ".join(instruction.split()),
    }
    if fallback:
        result["fallback"] = fallback
    return result


def error_result(tool: str, exc: BaseException, *, retryable: bool) -> dict[str, Any]:
    """A failure the model may act on: a transient error (retryable) or a bad request."""
    message = str(exc) or type(exc).__name__
    return {
        "ok": False,
        "tool": tool,
        "error": f"{type(exc).__name__}: {message}"[:500],
        "retryable": retryable,
    }
