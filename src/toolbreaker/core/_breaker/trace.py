"""Traces: JSON Lines of events, parsed strictly with errors that name the line.

One event per line::

    {"at": 0, "dependency": "search", "type": "request", "call": "c1"}
    {"at": 5, "dependency": "search", "type": "failure", "call": "c1"}

``at`` is integer milliseconds on a monotonic clock; ``call`` is optional (a request
without one gets a generated id, an outcome without one settles the oldest unsettled
call of its dependency); ``retry_after_ms`` may accompany a failure and ``duration_ms``
(how long the call took, for slow-call rules) a success. Blank lines are
skipped. Anything else is a :class:`~toolbreaker.errors.TraceError` naming the line.
A trace that holds no event at all judges nothing: the commands that replay one refuse
it (:func:`no_events`), since an empty receipt would read as an all-clear.

Limits: a line holds at most :data:`~toolbreaker.core._files.MAX_LINE_BYTES`; times and
``retry_after_ms`` are at most :data:`MAX_TIME_MS` (2**53 - 1, the largest integer every
JSON reader keeps exact); duplicate keys and lone surrogates are errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from toolbreaker.core._breaker.machine import OPERATOR_TYPES
from toolbreaker.core._breaker.state import EVENT_TYPES, MAX_TIME_MS, Event, Transition
from toolbreaker.core._files import iter_lines, loads_json, shown
from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import TraceError

__all__ = [
    "MAX_TIME_MS",
    "PLAIN_LINE",
    "TRACE_TYPES",
    "iter_trace",
    "no_events",
    "parse_event",
    "parse_line",
    "parse_lines",
    "plain_fields",
    "read_trace",
    "trace_event",
]

#: Every event type a trace may hold.
TRACE_TYPES = EVENT_TYPES | OPERATOR_TYPES
_FIELDS = (
    "at",
    "dependency",
    "type",
    "call",
    "retry_after_ms",
    "duration_ms",
    "reason",
    "health_check",
)
_REQUIRED = ("at", "dependency", "type")
_FIELD_SET = frozenset(_FIELDS)
_REQUIRED_SET = frozenset(_REQUIRED)


def parse_event(data: object) -> Event:
    """Validate one decoded trace object and return its event (without a generation)."""
    if not isinstance(data, dict):
        raise TraceError(f"an event must be a JSON object, got {type(data).__name__}")
    keys = data.keys()
    if not (keys <= _FIELD_SET and keys >= _REQUIRED_SET):
        for key in data:
            if key not in _FIELD_SET:
                raise TraceError(f"unknown field {shown(key)} (allowed: {', '.join(_FIELDS)})")
        for key in _REQUIRED:
            if key not in data:
                raise TraceError(f"missing field {key!r}")
    kind, at, dependency = data["type"], data["at"], data["dependency"]
    if kind not in TRACE_TYPES:
        raise TraceError(
            f"unknown event type {shown(kind)} (allowed: {', '.join(sorted(TRACE_TYPES))})"
        )
    if type(at) is not int:
        raise TraceError(f"time must be an integer number of milliseconds, got {shown(at)}")
    if at < 0:
        raise TraceError(f"time must not be negative, got {shown(at)}")
    if at > MAX_TIME_MS:
        raise TraceError(f"time must be at most {MAX_TIME_MS} ms, got {shown(at)}")
    if not isinstance(dependency, str) or not dependency:
        raise TraceError(f"dependency must be a non-empty string, got {shown(dependency)}")
    call = data.get("call")
    if call is not None and (not isinstance(call, str) or not call):
        raise TraceError(f"call must be a non-empty string, got {shown(call)}")
    retry_after = data.get("retry_after_ms")
    if retry_after is not None:
        if kind != "failure":
            raise TraceError("retry_after_ms belongs on failure events only")
        if type(retry_after) is not int or not 0 <= retry_after <= MAX_TIME_MS:
            raise TraceError(
                f"retry_after_ms must be an integer between 0 and {MAX_TIME_MS}, "
                f"got {shown(retry_after)}"
            )
    duration = data.get("duration_ms")
    if duration is not None:
        if kind != "success":
            raise TraceError("duration_ms belongs on success events only")
        if type(duration) is not int or not 0 <= duration <= MAX_TIME_MS:
            raise TraceError(
                f"duration_ms must be an integer between 0 and {MAX_TIME_MS}, got {shown(duration)}"
            )
    reason = data.get("reason")
    if reason is not None:
        if kind not in ("isolate", "force-closed"):
            raise TraceError("reason belongs on isolate and force-closed events only")
        if not isinstance(reason, str) or not reason or len(reason) > 300:
            raise TraceError("reason must be a non-empty string of at most 300 characters")
    health = data.get("health_check", False)
    if health is not False and (health is not True or kind != "request"):
        raise TraceError("health_check is true, on request events only")
    return Event(
        type=kind,
        at=at,
        dependency=dependency,
        call=call,
        retry_after_ms=retry_after,
        duration_ms=duration,
        reason=reason,
        health_check=health,
    )


def no_events(path: str | Path) -> TraceError:
    """The error of a trace file without a single event (empty, or blank lines only)."""
    return TraceError(
        "the trace holds no event, so there is nothing to judge (an empty trace is not "
        "an all-clear)",
        file=str(path),
    )


def parse_line(line: str, file: str | None = None, number: int | None = None) -> Event | None:
    """The event of one trace line (``None`` for a blank one); errors carry file and line."""
    text = line.strip()
    if not text:
        return None
    data = loads_json(text, TraceError, file=file, line=number, max_depth=1)
    try:
        return parse_event(data)
    except TraceError as exc:
        exc.file, exc.line = file, number
        raise


# A string without anything JSON escapes or refuses: no quote, backslash or control.
_NAME: Final = r'"([^"\\\x00-\x1f]+)"'
_TYPE: Final = r'"(request|success|failure|ignored|ambiguous)"'
#: The shapes trace writers produce for a request or an outcome with a call id: the
#: order of the documentation (``at``, ``dependency``, ``type``, ``call``) or sorted keys
#: (``TraceRecorder``), with or without a space after ``:`` and ``,``; a time without a
#: sign, leading zero or more than 16 digits; no escape anywhere.
PLAIN_LINE: Final = re.compile(
    r'\{"at": ?(0|[1-9][0-9]{0,15}), ?(?:'
    rf'"dependency": ?{_NAME}, ?"type": ?{_TYPE}, ?"call": ?{_NAME}'
    rf'|"call": ?{_NAME}, ?"dependency": ?{_NAME}, ?"type": ?{_TYPE}'
    r")\}"
)


def plain_fields(line: str) -> tuple[str, int, str, str] | None:
    """``(type, at, dependency, call)`` of a line in a plain shape, else ``None``.

    A line this answers for is one :func:`parse_line` parses to ``Event(type, at,
    dependency, call)``, exactly; any other line (escapes, other fields, another order,
    odd whitespace, a time over :data:`MAX_TIME_MS`) needs :func:`parse_line`. Lines are
    given without their newline.
    """
    found = PLAIN_LINE.fullmatch(line)
    if found is None:
        return None
    at, dependency, kind, call, call2, dependency2, kind2 = found.groups()
    if dependency is None:
        dependency, kind, call = dependency2, kind2, call2
    value = int(at)
    return None if value > MAX_TIME_MS else (kind, value, dependency, call)


def _numbered(lines: Iterable[tuple[int, str]], file: str | None) -> Iterator[tuple[int, Event]]:
    for number, raw in lines:
        text = raw.strip()
        if not text:
            continue
        data = loads_json(text, TraceError, file=file, line=number, max_depth=1)
        try:
            yield number, parse_event(data)
        except TraceError as exc:
            exc.file, exc.line = file, number
            raise


def parse_lines(lines: Iterable[str]) -> Iterator[tuple[int, Event]]:
    """Yield ``(line number, event)`` for each non-blank line."""
    return _numbered(enumerate(lines, start=1), None)


def iter_trace(path: str | Path) -> Iterator[tuple[int, Event]]:
    """Stream ``(line number, event)`` from a trace file; errors carry file and line."""
    return _numbered(iter_lines(path, TraceError), str(path))


def read_trace(path: str | Path) -> list[tuple[int, Event]]:
    """Read and parse a whole trace file; errors carry the file name and line."""
    return list(iter_trace(path))


def _text(value: str) -> str:
    """``value`` as valid Unicode: lone surrogates (``os.fsdecode`` of bad bytes) escaped."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def trace_event(record: Transition) -> dict[str, Any] | None:
    r"""The trace line that reproduces ``record``'s input event.

    ``None`` for events the core makes itself (``lease-expired``): a replay makes them
    again. Lines written from a breaker's records replay to the same transitions.
    A name holding lone surrogates (``os.fsdecode(b"search-\xff")``) is written with
    them escaped (``search-\udcff``), so a recorded trace always replays.

    Every text a person reads (the dependency, the call id, an operator's reason) is
    masked here, where the line is built (:func:`~toolbreaker.core._run.redact.redact_text`:
    a key or a call id that carries a token or a URL's password is written with it
    masked; masking is deterministic, so the line still replays).
    """
    if record.event.type not in TRACE_TYPES:
        return None
    line = {**record.event.to_dict(), "dependency": redact_text(_text(record.dependency))}
    for field in ("call", "reason"):
        if field in line:
            line[field] = redact_text(_text(line[field]))
    return line
