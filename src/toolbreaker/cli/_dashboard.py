"""``toolbreaker dashboard``: a live page of every breaker, read from the event stream.

Needs the ``dashboard`` extra (Starlette and uvicorn), imported only here. The page and
its chart library ship in the wheel (``dashboard_assets/``), so it works offline.

What it serves, on 127.0.0.1 only: ``/`` (the page), ``/api/events`` (Server-Sent Events:
a full snapshot first, then the breakers that changed, the per-second demand, admitted
and rejected series, calibration findings, recent run stops with their masked packets,
and the degradation choices and limit notices: counts per breaker over the series'
window and the most recent ones, masked), ``/api/snapshot`` (the same as one JSON
document), ``/api/breaker?key=K`` (one breaker's last transitions with their receipt
fields, its calibration signals and its recent notices) and, only with
``--allow-actions``, ``POST /api/action`` to isolate or release a breaker with an operator
reason. An action needs the token printed at start-up in ``X-Toolbreaker-Token``, a JSON
body, and an ``Origin`` that is this server; the Host header must be ``127.0.0.1`` or
``localhost`` (no DNS rebinding), and the page may not be framed. The board only reads the
stream: it never takes part in a breaker's decision.

The series and the counts are over the 600 s ending at ``as_of`` (Unix seconds, in
every document): the later of the stream's newest entry and the server's current time,
so while the stream is quiet they fall off with real time, and a connected page is
pushed the change (its event stream ticks every 0.25 s and moves the window; the board
works only when the second changed and pushes only when something left the window).
"""

from __future__ import annotations

import collections
import hmac
import json
import math
import secrets
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from importlib import resources
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from toolbreaker._extras import require
from toolbreaker.core.breaker.calibration import calibrate, findings
from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.state import Transition, changed_phase, opened
from toolbreaker.core.run.redact import redact_text
from toolbreaker.errors import PolicyError, ToolbreakerError
from toolbreaker.instrumentation.stream import (
    EventStream,
    StreamPublisher,
    open_stream,
    record_of,
)

__all__ = ["Board", "StoreActor", "build_app", "serve", "store_actor"]

_PROBE_RESULTS: Final = {
    "probe-success": "ok",
    "probe-quorum": "ok",
    "probe-failed": "failed",
    "lease-expired": "expired",
}
_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_ASSETS: Final = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "LICENSE.uPlot.txt": "text/plain",
}

#: Degradation modes a ``toolbreaker.degrade/v1`` notice may name (``None``: the plain
#: unavailable answer, counted as ``plain``); limit kinds of ``toolbreaker.limit/v1``.
#: Anything else from the stream is counted as ``other``, so names from other processes
#: cannot grow the board without bound.
_DEGRADE_MODES: Final = frozenset({"omit", "stale", "degraded", "queue", "handoff", "stop"})
_LIMIT_KINDS: Final = frozenset({"saturated", "hung", "deferred"})
_NOTICE_KINDS: Final = frozenset({"degrade", "limit"})
#: How long a text from the stream may be on the page (tool, reason, task, key).
_MAX_TEXT: Final = 200

#: ``act(key, action, reason)`` carries out an operator action and returns its record.
Actor = Callable[[str, str, str], Mapping[str, Any]]


class Board:
    """Everything the page shows, folded from stream entries (no I/O, no clock reads).

    Args:
        history: last transitions kept per breaker.
        seconds: seconds of the demand / admitted / rejected series, and the window the
            degradation choices and limit notices are counted over. Both end at the
            newest second the stream holds or, once a shell has called :meth:`advance`
            with the current time (or passed ``now`` to :meth:`snapshot`), at that
            second if it is later: counts leave the window while the stream is quiet.
        records: transition records kept for the calibration findings.
        recent: degradation choices and limit notices kept for the page's list.
    """

    def __init__(
        self,
        *,
        history: int = 12,
        seconds: int = 600,
        records: int = 50_000,
        recent: int = 50,
    ) -> None:
        self.breakers: dict[str, dict[str, Any]] = {}
        self.revision = 0
        self.entries = 0
        self.history = history
        self.seconds = seconds
        self.series: dict[int, list[int]] = {}
        self.stops: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self.stops_rev = 0
        self._records: collections.deque[Transition] = collections.deque(maxlen=records)
        self._classes: dict[str, dict[str, int]] = {}
        self._policies: dict[str, dict[str, Any]] = {}
        self.findings: list[dict[str, Any]] = []
        self.signals: dict[str, dict[str, Any]] = {}
        # The newest degradation choices and limit notices, newest first: (key, masked item).
        self._recent: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(
            maxlen=recent
        )
        self.notices_rev = 0
        # Notice counts per second, and their sums over the window, per breaker key ("" for
        # a run guard's deferral of a tool without a breaker): {key: {"degrade": {mode: n}}}.
        self._notice_seconds: dict[int, dict[tuple[str, str, str], int]] = {}
        self._notice_counts: dict[str, dict[str, dict[str, int]]] = {}
        self._newest = 0

    def feed(self, entries: Iterable[Mapping[str, Any]]) -> None:
        """Fold entries in, in stream order."""
        changed = False
        for entry in entries:
            self.entries += 1
            kind = entry.get("kind")
            if kind == "stop":
                self._stop(entry)
                changed = True
                continue
            if kind in _NOTICE_KINDS:
                self._notice(entry)
                continue
            record = record_of(entry)
            if record is not None:
                self._transition(entry, record)
                changed = True
        if changed:
            self._calibrate()

    def advance(self, now: float) -> bool:
        """Move the window's end to the wall time ``now`` (Unix seconds) if that is later.

        The board reads no clock: its shell passes the current time, a test its own. The
        counts and series seconds that leave the window are dropped; returns whether any
        did (the revision moved, so connected pages are pushed the change). Cheap when
        the second has not changed or nothing is in the window. A time that is not a
        finite number is ignored (the window stays where the stream put it).
        """
        if not isinstance(now, (int, float)) or not math.isfinite(now):
            return False
        before = self.revision
        self._slide(int(now))
        return self.revision != before

    @property
    def as_of(self) -> int:
        """The second the window ends at (Unix seconds; 0 before anything was seen)."""
        return self._newest

    def breaker(self, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        """One breaker's row with its last transitions, calibration signals and notices.

        ``now`` (Unix seconds), if given, first moves the window's end (:meth:`advance`).
        """
        if now is not None:
            self.advance(now)
        row = self.breakers.get(key)
        if row is None:
            return None
        recent = [item for k, item in self._recent if k == key]
        return {
            **self._row(row),
            "signals": self.signals.get(key),
            "recent_notices": recent,
            "as_of": self._newest,
            "window_s": self.seconds,
        }

    def notice_counts(self, key: str) -> dict[str, dict[str, int]]:
        """Degradation choices by mode and limit notices by kind for ``key``, in the window."""
        found = self._notice_counts.get(key, {})
        return {kind: dict(found.get(kind, {})) for kind in ("degrade", "limit")}

    def _row(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "notices": self.notice_counts(row["key"])}

    def policy_of(self, key: str) -> dict[str, Any] | None:
        """The policy last seen in force for ``key``."""
        return self._policies.get(key)

    def _stop(self, entry: Mapping[str, Any]) -> None:
        self.revision += 1
        self.stops_rev = self.revision
        packet = entry.get("packet")
        self.stops.appendleft(
            {
                "wall": _wall(entry),
                "task": str(entry.get("task", "")),
                "source": str(entry.get("source", "")),
                "packet": packet if isinstance(packet, dict) else {},
            }
        )

    def _notice(self, entry: Mapping[str, Any]) -> None:
        """Fold one ``degrade`` or ``limit`` entry: count it, keep it for the list."""
        notice = entry.get("notice")
        if not isinstance(notice, dict):
            return
        wall = _wall(entry)
        category = "degrade" if entry.get("kind") == "degrade" else "limit"
        # Other processes wrote it: keep only known fields, bounded and masked (a degrade
        # record carries the model's tool name and reason as they were).
        key = notice.get("breaker")
        key = key if isinstance(key, str) else ""
        row = self.breakers.get(key)
        item = _notice_item(
            category,
            notice,
            wall,
            str(entry.get("source", "")),
            row or {},
        )
        self.revision += 1
        self.notices_rev = self.revision
        self._recent.appendleft((key, item))
        second = int(wall)
        self._slide(second)
        if second <= self._newest - self.seconds:
            return  # older than the window (a stream read from its start): listed only
        slot = (key, category, item["name"])
        bucket = self._notice_seconds.setdefault(second, {})
        bucket[slot] = bucket.get(slot, 0) + 1
        self._add(slot, 1)

    def _add(self, slot: tuple[str, str, str], n: int) -> None:
        key, category, name = slot
        per = self._notice_counts.setdefault(key, {}).setdefault(category, {})
        per[name] = per.get(name, 0) + n
        if per[name] <= 0:
            del per[name]
            if not any(self._notice_counts[key].values()):
                del self._notice_counts[key]
        row = self.breakers.get(key)
        if row is not None:
            row["rev"] = self.revision

    def _slide(self, second: int) -> None:
        """Move the window's end to ``second`` (if newer); drop the counts it leaves."""
        if second <= self._newest:
            return
        self._newest = second
        horizon = second - self.seconds
        old = [s for s in self._notice_seconds if s <= horizon]
        if old:
            self.revision += 1
            self.notices_rev = self.revision
            for s in old:
                for slot, n in self._notice_seconds.pop(s).items():
                    self._add(slot, -n)
        gone = [s for s in self.series if s <= horizon]
        if gone:
            # The chart's seconds left the window: a new revision pushes the shorter series.
            self.revision += 1
            for s in gone:
                del self.series[s]

    def _transition(self, entry: Mapping[str, Any], record: Transition) -> None:
        wall = _wall(entry)
        self._slide(int(wall))
        key = record.dependency
        row = self.breakers.get(key)
        self.revision += 1
        if row is None:
            row = self.breakers[key] = {
                "key": key,
                "dependency": str(entry.get("dependency") or key),
                "operation": str(entry.get("operation") or "default"),
                "tool": str(entry.get("tool") or key),
                "phase": record.from_phase,
                "since": wall,
                "since_known": False,
                "demand": 0,
                "admitted": 0,
                "rejected": 0,
                "opens": {},
                "probes": {"ok": 0, "failed": 0, "expired": 0},
                "isolated": False,
                "last": [],
            }
        row["rev"] = self.revision
        row["policy_version"] = str(entry.get("policy_version", ""))
        fallback = entry.get("fallback")
        row["fallback"] = fallback if isinstance(fallback, str) else None
        policy = entry.get("policy")
        if isinstance(policy, dict):
            self._policies[key] = policy
        if changed_phase(record):
            row["since"], row["since_known"] = wall, True
            if opened(record):
                row["opens"][record.reason] = row["opens"].get(record.reason, 0) + 1
        row["phase"] = record.to_phase
        row["isolated"] = record.reason == "isolated" or (
            row["isolated"] and record.reason != "released"
        )
        if record.event.type == "request":
            row["demand"] += 1
            self._count(wall, 0)
        if record.attempted:
            row["admitted"] += 1
            self._count(wall, 1)
        if record.rejected:
            row["rejected"] += 1
            self._count(wall, 2)
        probe = _PROBE_RESULTS.get(record.reason)
        if probe is not None:
            row["probes"][probe] += 1
        last = {"wall": wall, "policy_version": row["policy_version"], **record.to_dict()}
        if isinstance(entry.get("class"), str):
            last["class"] = entry["class"]
            if record.event.type == "failure":
                per = self._classes.setdefault(key, {})
                per[entry["class"]] = per.get(entry["class"], 0) + 1
        row["last"] = [last, *row["last"][: self.history - 1]]
        self._records.append(record)

    def _count(self, wall: float, column: int) -> None:
        second = int(wall)
        if second <= self._newest - self.seconds:
            return  # older than the window (the clock moved it past this entry)
        bucket = self.series.get(second)
        if bucket is None:
            bucket = self.series[second] = [0, 0, 0]
            if len(self.series) > self.seconds:
                for old in sorted(self.series)[: len(self.series) - self.seconds]:
                    del self.series[old]
        bucket[column] += 1

    def _calibrate(self) -> None:
        signals = calibrate(self._records, self._classes)
        self.signals = {key: s.to_dict() for key, s in signals.items()}
        self.findings = [
            {**f.to_dict(), "tool": self.breakers.get(f.key, {}).get("tool", f.key)}
            for f in findings(signals)
        ]

    def snapshot(self, since: int = 0, *, now: float | None = None) -> dict[str, Any]:
        """What changed after revision ``since`` (everything for 0), as one document.

        ``now`` (Unix seconds), if given, first moves the window's end (:meth:`advance`).
        ``as_of`` is the second the window ends at: the series and the notice counts are
        over the ``seconds`` before it; a row's demand, admitted, rejected, opens and
        probes are totals over what the stream held when the board read it.
        """
        if now is not None:
            self.advance(now)
        # Rows carry their newest transition only; the page asks for one breaker's history.
        rows = [
            {**self._row(row), "last": row["last"][:1]}
            for row in self.breakers.values()
            if row["rev"] > since
        ]
        # A continuous window of at least two minutes ending at the window's end, so the
        # chart shows quiet seconds as zeros rather than joining distant points.
        # Once the clock has moved every second out, the chart is a quiet window of zeros.
        last = max(self._newest, max(self.series, default=0))
        first = min(self.series, default=last)
        width = min(self.seconds, max(120, last - first + 1))
        seconds = list(range(last - width + 1, last + 1)) if last else []
        empty = (0, 0, 0)
        return {
            "revision": self.revision,
            "full": since == 0,
            "as_of": self._newest,
            "window_s": self.seconds,
            "breakers": rows,
            "total": len(self.breakers),
            "entries": self.entries,
            "series": {
                "t": seconds,
                "demand": [self.series.get(s, empty)[0] for s in seconds],
                "admitted": [self.series.get(s, empty)[1] for s in seconds],
                "rejected": [self.series.get(s, empty)[2] for s in seconds],
            },
            "findings": self.findings,
            "stops": list(self.stops) if since == 0 or self.stops_rev > since else None,
            "notices": self._notices_document() if since == 0 or self.notices_rev > since else None,
        }

    def _notices_document(self) -> dict[str, Any]:
        counts = [
            {"key": key or None, **self.notice_counts(key)}
            for key in sorted(self._notice_counts)
            if any(self._notice_counts[key].values())
        ]
        recent = [item for _, item in self._recent]
        return {"window_s": self.seconds, "as_of": self._newest, "counts": counts, "recent": recent}


_MASKED: dict[str, str] = {}
_MASKED_KEEP: Final = 4096


def _text(value: object) -> str | None:
    """A string from the stream, bounded and masked; ``None`` for anything else.

    Masking is the costly part of the fold and the same few tool names and reasons come
    again and again (a saturated bulkhead answers thousands of calls), so the masked
    text of each is kept, for up to :data:`_MASKED_KEEP` texts.
    """
    if not isinstance(value, str):
        return None
    text = value[:_MAX_TEXT]
    masked = _MASKED.get(text)
    if masked is None:
        if len(_MASKED) >= _MASKED_KEEP:
            _MASKED.clear()
        masked = _MASKED[text] = redact_text(text)
    return masked


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _notice_item(
    category: str,
    notice: Mapping[str, Any],
    wall: float,
    source: str,
    row: Mapping[str, Any],
) -> dict[str, Any]:
    """What the page lists of one notice: known fields, bounded, masked.

    ``row`` is the notice's breaker row, if the board has one: it names the dependency
    and tool a ``saturated`` or ``degrade`` record does not carry.
    """
    item: dict[str, Any] = {
        "wall": wall,
        "kind": category,
        "key": _text(notice.get("breaker")),
        "dependency": _text(notice.get("dependency")) or _text(row.get("dependency")),
        "tool": _text(notice.get("tool")) or _text(row.get("tool")),
        "source": _text(source),
    }
    if category == "degrade":
        mode = notice.get("mode")
        item["name"] = "plain" if mode is None else mode if mode in _DEGRADE_MODES else "other"
        item["reason"] = _text(notice.get("reason")) or ""
        age = _int(notice.get("stale_age_ms"))
        if age is not None:
            item["stale_age_ms"] = age
        skipped = notice.get("skipped")
        if isinstance(skipped, list):
            item["skipped"] = [
                [_text(s[0]) or "", _text(s[1]) or ""]
                for s in skipped[:8]
                if isinstance(s, list) and len(s) == 2
            ]
    else:
        kind = notice.get("kind")
        item["name"] = kind if kind in _LIMIT_KINDS else "other"
        limit = _int(notice.get("limit"))
        item["limit"] = limit
        if kind == "saturated":
            by = _text(notice.get("by")) or "bulkhead"
            item["by"] = by
            item["retry_after_ms"] = _int(notice.get("retry_after_ms"))
            item["reason"] = f"{by} full (limit {limit})"
        elif kind == "hung":
            hung = _int(notice.get("hung"))
            item["hung"] = hung
            item["retry_after_ms"] = _int(notice.get("retry_after_ms"))
            item["reason"] = f"calls still running past their deadline: {hung} (limit {limit})"
        elif kind == "deferred":
            item["task"] = _text(notice.get("task"))
            item["reason"] = f"max_calls_per_turn {limit} reached"
        else:
            item["reason"] = ""
    return item


def _wall(entry: Mapping[str, Any]) -> float:
    wall = entry.get("wall")
    return float(wall) if isinstance(wall, (int, float)) else 0.0


_T = TypeVar("_T")


class _Feed:
    """Reads new stream entries into the board, at most every ``interval`` seconds.

    Every call also moves the board's window to ``clock()`` (wall time, Unix seconds).
    Refreshes run on worker threads while requests read the board on the event loop, so
    the board is only folded into and read under :meth:`look`'s lock (held for the fold
    or the read, never for the stream's I/O).
    """

    def __init__(
        self,
        stream: EventStream,
        board: Board,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stream = stream
        self.board = board
        self.interval = interval
        self.clock = clock
        self.cursor: str | None = None
        self.error: str | None = None
        self._lock = threading.Lock()  # one refresh at a time
        self._board = threading.Lock()  # one use of the board at a time
        self._last = 0.0

    def look(self, read: Callable[[], _T]) -> _T:
        """``read()``, while no refresh changes the board."""
        with self._board:
            return read()

    def refresh(self) -> None:
        with self._lock:
            try:
                self._read()
            finally:
                # After the read, so the window ends at least at the newest entry; a no-op
                # within the same second, so at most once a second does it do any work.
                now = self.clock()
                with self._board:
                    self.board.advance(now)

    def _read(self) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        try:
            while True:
                rows = self.stream.read(self.cursor, 5_000)
                if rows:
                    self.cursor = rows[-1][0]
                    with self._board:
                        self.board.feed(entry for _, entry in rows)
                if len(rows) < 5_000:
                    break
            self.error = None
        except ToolbreakerError as exc:
            self.error = str(exc)


class StoreActor:
    """Isolates and releases breakers through a store, and publishes what it did."""

    def __init__(self, store: Any, board: Board, stream: EventStream) -> None:
        self.store = store
        self.board = board
        self.publisher = StreamPublisher(stream)

    def __call__(self, key: str, action: str, reason: str) -> Mapping[str, Any]:
        """Apply ``action`` (``isolate`` or ``release``) to ``key`` with ``reason``."""
        from toolbreaker.runtime.breaker._breaker import Breaker

        row = self.board.breakers.get(key)
        if row is None:
            raise PolicyError(f"no breaker {key!r} in the stream", field="key")
        policy = Policy.from_dict(self.board.policy_of(key) or {})
        breaker = Breaker(
            row["dependency"], operation=row["operation"], policy=policy, store=self.store
        )
        detach = self.publisher.attach(breaker)  # one action's breaker: detached after it
        try:
            record = breaker.isolate(reason) if action == "isolate" else breaker.release(reason)
        finally:
            detach()
        return record.to_dict()

    def close(self) -> None:
        """Close the store (its connections and feed)."""
        self.store.close()


def store_actor(url: str, board: Board, stream: EventStream) -> StoreActor | None:
    """Isolate and release through the breaker store at ``url`` (SQLite file or Redis).

    The action is applied with the policy last seen for the key (the defaults when the
    stream no longer holds one; isolate and release force their outcome whatever it is)
    and published to the stream like any transition. ``None`` for ``memory://``: another
    process's memory cannot be reached.
    """
    from toolbreaker.cli._policy import open_store

    if urlsplit(url).scheme not in ("sqlite", "redis", "rediss", "unix"):
        return None  # the stream's URL: memory is unreachable, postgres is no stream
    store = open_store(url)
    return None if store is None else StoreActor(store, board, stream)


async def _pushes(
    feed: _Feed,
    board: Board,
    document: Callable[[int], dict[str, Any]],
    interval: float,
    since: int,
) -> AsyncIterator[str]:
    """Server-Sent Events: what changed after revision ``since`` (everything for -1)."""
    import anyio

    # A page from before a restart of this server asks for a revision it never reached.
    seen, idle = (since if since <= board.revision else -1), 0
    while True:
        await anyio.to_thread.run_sync(feed.refresh)
        if board.revision != seen:
            payload = document(max(seen, 0))
            seen, idle = board.revision, 0
            yield f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
        else:
            idle += 1
            if idle % 40 == 0:
                yield ": idle\n\n"
        await anyio.sleep(interval)


_NOT_JSON: Final = "actions are JSON"


def _refused(headers: Mapping[str, str], token: str) -> str | None:
    """Why a request may not act: another site, not JSON, no token; ``None`` if it may.

    A cross-site form cannot send JSON or a custom header without a CORS preflight this
    server never grants, and a browser always names the page's origin on a POST.
    """
    if headers.get("origin") != f"http://{headers.get('host', '')}":
        return "cross-site request refused (Origin is not this dashboard)"
    if headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return _NOT_JSON
    if not hmac.compare_digest(headers.get("x-toolbreaker-token", "").encode(), token.encode()):
        return "missing or wrong token"
    return None


def _parse_action(raw: bytes) -> tuple[str, str, str] | str:
    """``(key, action, reason)`` from a request body, or what is wrong with it."""
    try:
        body = json.loads(raw)
        key, kind, reason = body["key"], body["action"], body["reason"]
    except (ValueError, KeyError, TypeError):
        return "body must be {key, action, reason}"
    if kind not in ("isolate", "release"):
        return "action must be isolate or release"
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 200:
        return "an operator reason (1-200 characters) is required"
    if not isinstance(key, str):
        return "key must be a string"
    return key, kind, reason.strip()


def build_app(
    stream: EventStream,
    *,
    actor: Actor | None = None,
    token: str | None = None,
    interval: float = 0.25,
    board: Board | None = None,
    clock: Callable[[], float] = time.time,
) -> Any:
    """The Starlette application; actions are enabled when ``actor`` and ``token`` are.

    ``clock`` gives the current wall time (Unix seconds; a test passes its own): every
    request and every tick of a connected page's event stream (each ``interval``) move
    the board's window to it, so counts leave the window while the stream is quiet and
    connected pages are pushed the change.
    """
    require("starlette", "dashboard")
    import anyio
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    board = board or Board()
    feed = _Feed(stream, board, interval, clock)
    assets = resources.files("toolbreaker.cli") / "dashboard_assets"
    actions = actor is not None and token is not None

    def asset(name: str, media: str) -> Response:
        body = (assets / name).read_bytes()
        return Response(body, media_type=media, headers=_SECURITY_HEADERS)

    async def index(request: Request) -> Response:
        # The first snapshot rides in the page as inert JSON (CSP allows no inline script),
        # so the table renders without waiting for the event stream to connect.
        await anyio.to_thread.run_sync(feed.refresh)
        initial = json.dumps(document(0), separators=(",", ":")).replace("<", "\\u003c")
        page = (assets / "index.html").read_text(encoding="utf-8")
        body = page.replace("<!--initial-->", initial, 1)
        return Response(body, media_type="text/html", headers=_SECURITY_HEADERS)

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _ASSETS:
            return Response("not found", status_code=404)
        return asset(name, _ASSETS[name])

    def document(since: int) -> dict[str, Any]:
        return {
            **feed.look(lambda: board.snapshot(since)),
            "actions": actions,
            "stream": stream.url,
            "error": feed.error,
        }

    async def snapshot(request: Request) -> Response:
        await anyio.to_thread.run_sync(feed.refresh)
        return JSONResponse(document(0), headers=_SECURITY_HEADERS)

    async def one(request: Request) -> Response:
        await anyio.to_thread.run_sync(feed.refresh)
        key = request.query_params.get("key", "")
        row = feed.look(lambda: board.breaker(key))
        if row is None:
            return JSONResponse({"error": "no such breaker"}, status_code=404)
        return JSONResponse(row, headers=_SECURITY_HEADERS)

    async def events(request: Request) -> Response:
        headers = {**_SECURITY_HEADERS, "X-Accel-Buffering": "no"}
        raw = request.query_params.get("since", "-1")
        since = int(raw) if raw.lstrip("-").isdigit() else -1
        body = _pushes(feed, board, document, interval, max(since, -1))
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)

    async def action(request: Request) -> Response:
        def refuse(status: int, why: str) -> Response:
            return JSONResponse({"ok": False, "error": why}, status_code=status)

        if not actions or actor is None or token is None:
            return refuse(403, "read-only: start the dashboard with --allow-actions")
        why = _refused(request.headers, token)
        if why is not None:
            return refuse(415 if why == _NOT_JSON else 403, why)
        parsed = _parse_action(await request.body())
        if isinstance(parsed, str):
            return refuse(400, parsed)
        key, kind, reason = parsed
        try:
            record = await anyio.to_thread.run_sync(actor, key, kind, reason)
        except ToolbreakerError as exc:
            return refuse(409, str(exc))
        return JSONResponse({"ok": True, "record": dict(record)})

    routes = [
        Route("/", index),
        Route("/assets/{name}", static),
        Route("/favicon.ico", favicon),
        Route("/api/snapshot", snapshot),
        Route("/api/events", events),
        Route("/api/breaker", one),
        Route("/api/action", action, methods=["POST"]),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost"]),
    ]
    return Starlette(routes=routes, middleware=middleware)


def serve(url: str, *, port: int = 8765, allow_actions: bool = False) -> int:
    """Serve the dashboard for the stream at ``url`` on 127.0.0.1 until interrupted."""
    uvicorn = require("uvicorn", "dashboard")
    stream = open_stream(url)
    board = Board()
    token = actor = None
    if allow_actions:
        actor = store_actor(url, board, stream)
        if actor is None:
            raise PolicyError(
                "--allow-actions needs the breakers' store (sqlite:///PATH or redis://...)",
                field="allow-actions",
            )
        token = secrets.token_urlsafe(24)
    app = build_app(stream, actor=actor, token=token, board=board)
    print(f"toolbreaker dashboard: http://127.0.0.1:{port}/  (stream {stream.url})")
    if token:
        print(f"actions enabled; operator token: {token}", flush=True)
    sys.stdout.flush()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    return 0
