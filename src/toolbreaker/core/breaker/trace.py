"""Traces: JSON Lines of events, parsed strictly with errors that name the line.

One event per line::

    {"at": 0, "dependency": "search", "type": "request", "call": "c1"}
    {"at": 5, "dependency": "search", "type": "failure", "call": "c1"}

``at`` is integer milliseconds on a monotonic clock; ``call`` is optional (a request
without one gets a generated id, an outcome without one settles the oldest unsettled
call of its dependency); ``retry_after_ms`` may accompany a failure and ``duration_ms``
(how long the call took, for slow-call rules) a success. Blank lines are
skipped. Anything else is a :class:`~toolbreaker.errors.TraceError` naming the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolbreaker.core.breaker.machine import OPERATOR_TYPES
from toolbreaker.core.breaker.state import EVENT_TYPES, Event, Transition
from toolbreaker.errors import TraceError

__all__ = ["TRACE_TYPES", "parse_event", "parse_lines", "read_trace", "trace_event"]

#: Every event type a trace may hold.
TRACE_TYPES = EVENT_TYPES | OPERATOR_TYPES
_FIELDS = ("at", "dependency", "type", "call", "retry_after_ms", "duration_ms", "reason")
_REQUIRED = ("at", "dependency", "type")


def parse_event(data: object) -> Event:
    """Validate one decoded trace object and return its event (without a generation)."""
    if not isinstance(data, dict):
        raise TraceError(f"an event must be a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in _FIELDS:
            raise TraceError(f"unknown field {key!r} (allowed: {', '.join(_FIELDS)})")
    for key in _REQUIRED:
        if key not in data:
            raise TraceError(f"missing field {key!r}")
    kind, at, dependency = data["type"], data["at"], data["dependency"]
    if kind not in TRACE_TYPES:
        raise TraceError(f"unknown event type {kind!r} (allowed: {', '.join(sorted(TRACE_TYPES))})")
    if type(at) is not int:
        raise TraceError(f"time must be an integer number of milliseconds, got {at!r}")
    if at < 0:
        raise TraceError(f"time must not be negative, got {at}")
    if not isinstance(dependency, str) or not dependency:
        raise TraceError(f"dependency must be a non-empty string, got {dependency!r}")
    call = data.get("call")
    if call is not None and (not isinstance(call, str) or not call):
        raise TraceError(f"call must be a non-empty string, got {call!r}")
    retry_after = data.get("retry_after_ms")
    if retry_after is not None:
        if kind != "failure":
            raise TraceError("retry_after_ms belongs on failure events only")
        if type(retry_after) is not int or retry_after < 0:
            raise TraceError(f"retry_after_ms must be a non-negative integer, got {retry_after!r}")
    duration = data.get("duration_ms")
    if duration is not None:
        if kind != "success":
            raise TraceError("duration_ms belongs on success events only")
        if type(duration) is not int or duration < 0:
            raise TraceError(f"duration_ms must be a non-negative integer, got {duration!r}")
    reason = data.get("reason")
    if reason is not None:
        if kind not in ("isolate", "force-closed"):
            raise TraceError("reason belongs on isolate and force-closed events only")
        if not isinstance(reason, str) or not reason or len(reason) > 300:
            raise TraceError("reason must be a non-empty string of at most 300 characters")
    return Event(
        type=kind,
        at=at,
        dependency=dependency,
        call=call,
        retry_after_ms=retry_after,
        duration_ms=duration,
        reason=reason,
    )


def parse_lines(lines: Iterable[str]) -> Iterator[tuple[int, Event]]:
    """Yield ``(line number, event)`` for each non-blank line."""
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(
                f"malformed JSON: {exc.msg} (column {exc.colno})", line=number
            ) from None
        try:
            yield number, parse_event(data)
        except TraceError as exc:
            exc.line = number
            raise


def read_trace(path: str | Path) -> list[tuple[int, Event]]:
    """Read and parse a whole trace file; errors carry the file name and line."""
    name = str(path)
    try:
        with Path(path).open(encoding="utf-8") as handle:
            return list(parse_lines(handle))
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except UnicodeDecodeError:
        raise TraceError("not UTF-8 text", file=name) from None
    except TraceError as exc:
        exc.file = name
        raise


def trace_event(record: Transition) -> dict[str, Any] | None:
    """The trace line that reproduces ``record``'s input event.

    ``None`` for events the core makes itself (``lease-expired``): a replay makes them
    again. Lines written from a breaker's records replay to the same transitions.
    """
    if record.event.type not in TRACE_TYPES:
        return None
    return {**record.event.to_dict(), "dependency": record.dependency}
