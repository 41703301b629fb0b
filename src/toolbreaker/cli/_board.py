"""The dashboard's board: everything the page shows, folded from stream entries.

Pure of I/O and of clocks (a shell passes the time in), so the page, the JSON API and the
tests read one model; :mod:`toolbreaker.cli._dashboard` serves it. Every text from the
stream is bounded and masked here, where the board's items are built.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from toolbreaker._tuning._signals import (
    Signals,
    calibrate,
    count_class,
    covered_by,
    findings,
)
from toolbreaker.cli._history import add_line, add_notice
from toolbreaker.core._breaker.history import record_of, wall_of
from toolbreaker.core._breaker.machine import OPERATOR_TYPES
from toolbreaker.core._breaker.state import Transition, changed_phase, opened
from toolbreaker.core._run.redact import redact, redact_text

__all__ = ["Board", "policy_label"]

_PROBE_RESULTS: Final = {
    "probe-success": "ok",
    "probe-quorum": "ok",
    "probe-failed": "failed",
    "lease-expired": "expired",
}

#: Degradation modes a ``toolbreaker.degrade/v1`` notice may name (``None``: the plain
#: unavailable answer, counted as ``plain``); limit kinds of ``toolbreaker.limit/v1``.
#: Anything else from the stream is counted as ``other``, so names from other processes
#: cannot grow the board without bound.
_DEGRADE_MODES: Final = frozenset({"omit", "stale", "degraded", "queue", "handoff", "stop"})
_LIMIT_KINDS: Final = frozenset({"saturated", "hung", "deferred"})
_NOTICE_KINDS: Final = frozenset({"degrade", "limit"})
#: How long a text from the stream may be on the page (tool, reason, task); keys stay
#: whole, as the page names breakers by them.
_MAX_TEXT: Final = 200
#: How far into a text the board masks before cutting it to :data:`_MAX_TEXT`.
_MASK_WINDOW: Final = 4 * _MAX_TEXT


def policy_label(sheet: str | None, policy: Mapping[str, Any] | None) -> str:
    """What the page names a breaker's policy by (its version, a hash, is the tooltip).

    The sheet its row came from (``boundaries.toml``, ``default rev. 3``: the stream's
    ``sheet``), or, for a breaker configured in code, what the policy does: ``3
    failures · 20 s`` (a failure rate: ``40% of 10 calls · 20 s``; ``shadow`` when it
    only watches). Empty when the stream said neither.
    """
    if sheet:
        return sheet
    if not isinstance(policy, Mapping):
        return ""
    rate = policy.get("failure_rate_permille")
    if isinstance(rate, int) and not isinstance(rate, bool):
        trips = f"{rate / 10:g}% of {policy.get('window_calls')} calls"
    else:
        trips = f"{policy.get('failure_threshold')} failures"
    cooldown = policy.get("cooldown_ms")
    parts = [trips]
    if isinstance(cooldown, int) and not isinstance(cooldown, bool):
        parts.append(f"{cooldown / 1000:g} s")
    if policy.get("mode") == "shadow":
        parts.append("shadow")
    return " · ".join(parts)


class Board:
    """Everything the page shows, folded from stream entries (no I/O, no clock reads).

    Args:
        history: lines of history kept per breaker, newest first (a run of rejections,
            or of calls that changed nothing, is one line: :mod:`toolbreaker.cli._history`).
        seconds: seconds of the demand / admitted / rejected series, and the window the
            degradation choices and limit notices are counted over. Both end at the
            newest second the stream holds or, once a shell has called :meth:`advance`
            with the current time (or passed ``now`` to :meth:`snapshot`), at that
            second if it is later: counts leave the window while the stream is quiet.
        records: transition records kept for the calibration findings.
        recent: lines of degradation choices and limit notices kept for the page's list
            (identical notices are one line with a count).
    """

    def __init__(
        self,
        *,
        history: int = 20,
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
        # Per key, the exceptions the classifier never counted, by type (the rows' too).
        self._unclassified: dict[str, dict[str, int]] = {}
        self._policies: dict[str, dict[str, Any]] = {}
        self.findings: list[dict[str, Any]] = []
        self.signals: dict[str, dict[str, Any]] = {}
        self._signals: dict[str, Signals] = {}
        # Degraded answers served per breaker key and mode, over the whole stream read:
        # what the model already had, for the findings' advice.
        self._served: dict[str, dict[str, int]] = {}
        # The newest degradation choices and limit notices, newest first, identical ones
        # one line (masked items, each with its breaker's row key in "row").
        self._recent: list[dict[str, Any]] = []
        self._recent_limit = recent
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
            record = record_of(entry, text=_shown)
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
        recent = [item for item in self._recent if item["row"] == key]
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
        # Masked by the process that built it, if it is ours: the board cannot know.
        self.stops.appendleft(
            {
                "wall": _wall(entry),
                "task": _text(entry.get("task")) or "",
                "source": _text(entry.get("source")) or "",
                "packet": redact(packet) if isinstance(packet, dict) else {},
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
        key = _shown(key) if isinstance(key, str) else ""  # rows are keyed masked
        row = self.breakers.get(key)
        item = _notice_item(
            category,
            notice,
            wall,
            str(entry.get("source", "")),
            row or {},
        )
        item["row"] = key
        self.revision += 1
        self.notices_rev = self.revision
        self._recent = add_notice(self._recent, item, self._recent_limit)
        if category == "degrade" and key:
            per = self._served.setdefault(key, {})
            per[item["name"]] = per.get(item["name"], 0) + 1
            if per[item["name"]] == 1:
                self._find()  # the model now has something: the advice says so
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
                "dependency": _text(entry.get("dependency")) or key,
                "operation": _text(entry.get("operation")) or "default",
                "tool": _text(entry.get("tool")) or key,
                "phase": record.from_phase,
                "since": wall,
                "since_known": False,
                "demand": 0,
                "admitted": 0,
                "rejected": 0,
                "opens": {},
                "probes": {"ok": 0, "failed": 0, "expired": 0},
                "isolated": False,
                "operator": None,
                "on_defaults": False,
                "unclassified": self._unclassified.setdefault(key, {}),
                "last": [],
            }
        row["rev"] = self.revision
        row["policy_version"] = _text(entry.get("policy_version")) or ""
        row["fallback"] = _text(entry.get("fallback"))
        row["on_defaults"] = entry.get("on_defaults") is True
        policy = entry.get("policy")
        if isinstance(policy, dict):
            self._policies[key] = policy
        row["policy"] = policy_label(_text(entry.get("sheet")), self._policies.get(key))
        if changed_phase(record):
            row["since"], row["since_known"] = wall, True
            if opened(record):
                row["opens"][record.reason] = row["opens"].get(record.reason, 0) + 1
        row["phase"] = record.to_phase
        row["isolated"] = record.reason == "isolated" or (
            row["isolated"] and record.reason != "released"
        )
        if record.event.type in OPERATOR_TYPES:
            # Who held it and why, on the row: the reason masked where it was made (and
            # again here: another process wrote it), the source the stream names.
            row["operator"] = (
                None
                if record.event.type == "release"
                else {
                    "action": record.event.type,
                    "reason": _text(record.event.reason) or "",
                    "by": _text(entry.get("source")) or "",
                    "wall": wall,
                }
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
        last = {
            "wall": wall,
            "policy_version": row["policy_version"],
            "policy": row["policy"],
            **record.to_dict(),
        }
        # The breaker's clock is its own (monotonic, or the Redis server's): a person
        # reads the open-until time on the wall clock of the entry that carries it.
        last["open_until_wall"] = wall_of(wall, record.event.at, record.open_until)
        failure_class = _text(entry.get("class"))
        if failure_class is not None:
            last["class"] = failure_class
            count_class(self._classes, self._unclassified, record, failure_class)
        row["last"] = add_line(row["last"], last, self.history)
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
        self._signals = calibrate(self._records, self._classes, unclassified=self._unclassified)
        self.signals = {key: s.to_dict() for key, s in self._signals.items()}
        self._find()

    def _find(self) -> None:
        """The findings over the signals, knowing what each breaker's model already has."""
        covered = {}
        for key in self._signals:
            row = self.breakers.get(key, {})
            has = covered_by(row.get("fallback"), (), self._served.get(key))
            if has is not None:
                covered[key] = has
        self.findings = [
            {**f.to_dict(), "tool": self.breakers.get(f.key, {}).get("tool", f.key)}
            for f in findings(self._signals, covered)
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
        # Rows carry their newest history line only; the page asks for one breaker's history.
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
        return {
            "window_s": self.seconds,
            "as_of": self._newest,
            "counts": counts,
            "recent": self._recent,
        }


_MASKED: dict[str, str] = {}
_MASKED_KEEP: Final = 4096


def _text(value: object) -> str | None:
    """A string from the stream, masked and bounded; ``None`` for anything else.

    Masked before it is cut, so a secret the cut would split is masked whole (up to
    :data:`_MASK_WINDOW` characters in).
    """
    return _shown(value[:_MASK_WINDOW])[:_MAX_TEXT] if isinstance(value, str) else None


def _shown(value: str) -> str:
    """A text from the stream masked, whole: a key, a call id, a reason.

    Masking is the costly part of the fold and the same few keys, tool names and reasons
    come again and again (a saturated bulkhead answers thousands of calls), so the
    masked text of each is kept, for up to :data:`_MASKED_KEEP` texts.
    """
    masked = _MASKED.get(value)
    if masked is None:
        if len(_MASKED) >= _MASKED_KEEP:
            _MASKED.clear()
        masked = _MASKED[value] = redact_text(value)
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
