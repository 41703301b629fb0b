"""A breaker's history: the transition entries a store writes with the state they made.

The entry schema (``toolbreaker.stream/v1``, ``kind`` ``transition``) has this one home.
A shared store appends :func:`history_texts` of the records an ``apply()`` produced to
its history in the same atomic step as the state (the SQLite or PostgreSQL transaction,
the Redis script), and only when that step writes a new state: the history is the log of
a breaker's state versions, in the store's order, and a write that fails (or whose
outcome is unknown) is failed or unknown for both at once. The event stream
(:mod:`toolbreaker.instrumentation.stream`) builds its transition entries on
:func:`transition_entry` too and adds what only a process knows (the tool, the
fallback, the failure class...).

Why the history alone replays. Each entry's event is the one the core applied to the
state the store held at that moment, and every event missing from the history changed
nothing (the core said the new state equals the old one: a request admitted while
closed, a request rejected while open). Applying the history's events in its order to a
new breaker under the same policy therefore passes through exactly the states the store
held. A state-changing outcome settles a call admitted in the current generation; when
its request changed nothing (a call admitted while closed) the history has no entry for
it, so :func:`replayable` writes one just before the outcome, which a replay admits in
the same generation, as the store did.

Time in the store's order. Each process reads its own clock before its event reaches the
store, so a process may apply an event stamped a little before the event that wrote the
state it applies to (another process read its clock later and wrote first). A store
applies such an event at that later instant (:func:`in_store_order`): a breaker's times
never go backwards in its history, as :class:`~toolbreaker.core._breaker.state.Event`
promises per dependency, and a replay of the history meets every deadline where the
store met it. The shift is the time the two writes raced by (well under a millisecond
on a healthy store) and only ever later.

Quiet calls. Most calls change nothing (a request admitted while closed and its success,
a request rejected while open): a process decides them from its view of the state without
a write, so no transition entry records them, and a replay of the transitions alone
would see none of the remote attempts and local rejections they were. Each process
therefore counts them per *segment*: the version of the state it decided them on (a
request and its outcome may meet two versions), the outcome's type and the generation
of the call. It writes its counts as a ``quiet`` entry (:func:`quiet_entry`) with its
next write of the breaker, in the same atomic step, and on its own every second or so
and when it closes. Counts are running totals per process (``source``) and segment, so
an entry written twice (a write whose answer was lost, then written again) is counted
once: the largest total wins. Each entry a store writes carries ``version``, the version
of the state that write made, and :func:`replayable` puts each segment's calls right
after the entry of the version they met, at that entry's instant: the core decides them
there exactly as the process did (a rejection while open stays one before the cooldown
ends; a request and success on a quiet state change nothing), so a replay of the export
counts the same remote attempts and local rejections the processes made, and passes
through the same states.

Every text a person reads is masked where the entry is built: the key with
:func:`~toolbreaker.core._run.redact.redact_text`; an operator's reason was masked where
its event was made.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, NamedTuple

from toolbreaker.core._breaker.state import (
    CLOSED,
    OUTCOME_TYPES,
    Event,
    Transition,
    changed_phase,
)
from toolbreaker.core._run.redact import redact_text

__all__ = [
    "DEFAULT_HISTORY",
    "QUIET",
    "STREAM_SCHEMA",
    "QuietCall",
    "history_texts",
    "in_store_order",
    "quiet_entry",
    "record_of",
    "replayable",
    "transition_entry",
    "wall_of",
]

STREAM_SCHEMA: Final = "toolbreaker.stream/v1"
#: The ``kind`` of an entry that counts quiet calls (see the module's docstring).
QUIET: Final = "quiet"
#: Entries a store keeps by default (all breakers of an SQLite or PostgreSQL store; each
#: breaker of a Redis store: its history is one stream per breaker, in the breaker's slot).
DEFAULT_HISTORY: Final = 100_000


def transition_entry(record: Transition, wall: float) -> dict[str, Any]:
    """The fields of a ``transition`` entry that the record alone decides.

    ``wall`` is Unix seconds (what ``--since`` filters on). ``policy_version`` is the
    record's when a breaker stamped one.
    """
    entry: dict[str, Any] = {
        "schema": STREAM_SCHEMA,
        "kind": "transition",
        # Names are configuration, yet a name built from a URL can carry a password.
        "key": redact_text(record.dependency),
        "wall": wall,
        "record": record.to_dict(),
    }
    if record.policy_version is not None:
        entry["policy_version"] = record.policy_version
    return entry


class QuietCall(NamedTuple):
    """The segment of quiet calls: what one process's running total counts.

    Attributes:
        request: the version of the state the request was admitted on (0: a breaker the
            store never wrote; -1: not known, then the call's ``generation`` places it).
        outcome: the version of the state its outcome met.
        type: the outcome's type (``success``, ``ignored``...).
        generation: the generation the call was admitted in.
    """

    request: int
    outcome: int
    type: str
    generation: int


def quiet_entry(
    key: str,
    source: str,
    calls: Mapping[QuietCall, int],
    *,
    rejected: Mapping[int, int],
    first_at: Mapping[int, int],
    wall: float,
) -> dict[str, Any]:
    """A ``quiet`` entry: one process's running totals of a breaker's quiet calls.

    Args:
        key: the breaker's key (masked here, as a transition entry's is).
        source: who counted (a process's store, unique among the writers).
        calls: admitted calls whose request and outcome changed nothing, per segment.
        rejected: requests rejected without a change, per version of the state.
        first_at: per version, the instant of the first quiet event on it (where a
            replay puts the calls of a version no entry of the history holds: a breaker
            the store never wrote).
        wall: Unix seconds.
    """
    return {
        "schema": STREAM_SCHEMA,
        "kind": QUIET,
        "key": redact_text(key),
        "wall": wall,
        "source": source,
        "calls": [[*segment, count] for segment, count in sorted(calls.items())],
        "rejected": [[version, count] for version, count in sorted(rejected.items())],
        "first_at": [[version, at] for version, at in sorted(first_at.items())],
    }


def in_store_order(event: Event, floor: int) -> Event:
    """``event`` as a store applies it after the event stamped ``floor`` wrote the state.

    The same event when it is not earlier; otherwise the same event at ``floor``.
    """
    return event if event.at >= floor else dataclasses.replace(event, at=floor)


def history_texts(records: Iterable[Transition], wall: float) -> tuple[str, ...]:
    """The JSON text of each record's entry, as a store appends them to its history."""
    return tuple(
        json.dumps(transition_entry(record, wall), separators=(",", ":")) for record in records
    )


def wall_of(wall: float, at: int, instant: int | None) -> float | None:
    """The wall time (Unix seconds) of ``instant``, a time on a breaker's clock (ms).

    The one rule for it: a breaker's clock is monotonic (SQLite, memory) or the Redis
    server's, never the wall clock, so an instant of a record (its ``open_until``) is
    read against the entry that carries it: the entry's ``wall`` plus the instant's
    offset from the record's event time ``at``. ``None`` for no instant.
    """
    if instant is None:
        return None
    return wall + (instant - at) / 1000


def _same(text: str) -> str:
    return text


def record_of(entry: Mapping[str, Any], *, text: Callable[[str], str] = _same) -> Transition | None:
    """The :class:`Transition` of a ``transition`` entry, or ``None`` if it is not one.

    Entries come from other processes: anything malformed gives ``None``. ``text`` is
    applied to each text the record takes from the entry (the key, the call id, the
    reasons): the dashboard passes its masking, as it cannot know who wrote an entry.
    """
    try:
        if entry.get("kind") != "transition":
            return None
        key, rec = entry["key"], entry["record"]
        event = rec["event"]
        at = event["at"]
        if not (isinstance(key, str) and type(at) is int and isinstance(event["type"], str)):
            return None
        key = text(key)

        def optional(name: str, kind: type) -> Any:
            value = event.get(name)
            return value if type(value) is kind else None

        call, note = optional("call", str), optional("reason", str)
        return Transition(
            dependency=key,
            event=Event(
                type=event["type"],
                at=at,
                dependency=key,
                call=None if call is None else text(call),
                retry_after_ms=optional("retry_after_ms", int),
                duration_ms=optional("duration_ms", int),
                reason=None if note is None else text(note),
                health_check=event.get("health_check") is True,
            ),
            from_phase=str(rec["from"]),
            to_phase=str(rec["to"]),
            attempted=rec["attempted"] is True,
            rejected=rec["rejected"] is True,
            reason=text(str(rec["reason"])),
            generation=int(rec["generation"]),
            open_until=rec["open_until"] if type(rec["open_until"]) is int else None,
            would_reject=rec.get("would_reject") is True,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def replayable(
    entries: Iterable[Mapping[str, Any]], *, unplaced: list[int] | None = None
) -> Iterator[Mapping[str, Any]]:
    """A store history's entries, with what a replay needs written in.

    For each outcome whose call's request is not in the history (it changed nothing, so
    the store wrote nothing), a ``request`` entry of that call at the outcome's instant
    comes just before it (with the outcome's ``wall`` and ``seq``): a replay under the
    store's policy admits it in the generation the store admitted it in (see the
    module's docstring). Each ``quiet`` entry's calls and rejections (the largest total
    per process and segment) become request and outcome entries right after the entry of
    the state they met, at its instant; ``unplaced``, when given, gets the number of
    quiet calls and rejections whose state the history no longer holds (trimmed), if any.
    Entries come out in the order they went in; an entry that is no transition passes as
    it is.
    """
    listed = list(entries)
    placed = _Placements(listed)
    if unplaced is not None and placed.lost:
        unplaced.append(placed.lost)
    requested: dict[str, set[str]] = {}
    for index, entry in enumerate(listed):
        yield from placed.before.get(index, ())
        record = record_of(entry)
        event = record.event if record is not None else None
        if record is not None and event is not None and event.call is not None:
            calls = requested.setdefault(record.dependency, set())
            if event.type == "request":
                calls.add(event.call)
            elif event.type in OUTCOME_TYPES and event.call not in calls:
                request = Transition(
                    record.dependency,
                    Event("request", event.at, record.dependency, event.call),
                    record.from_phase,
                    record.from_phase,
                    True,
                    False,
                    "call-admitted",
                    record.generation - 1 if changed_phase(record) else record.generation,
                    None,
                )
                wall = entry.get("wall")
                made = transition_entry(request, wall if isinstance(wall, (int, float)) else 0.0)
                yield {**made, "seq": entry.get("seq")}
            elif event.type in OUTCOME_TYPES:
                calls.discard(event.call)
        yield entry
        yield from placed.after.get(index, ())
    yield from placed.orphans


class _Anchor(NamedTuple):
    """Where a version of a breaker's state is in the history: its last entry."""

    position: int
    at: int
    wall: float
    seq: object
    phase: str
    generation: int


#: Where quiet calls go when no entry holds their version: before the breaker's first
#: entry (the state the store never wrote), or at the end (a breaker with no entry).
_FIRST: Final = "first"
_END: Final = "end"
_Where = _Anchor | str


def _totals(
    entry: Mapping[str, Any],
) -> tuple[list[tuple[QuietCall, int]], list[tuple[int, int]], dict[int, int]] | None:
    """A quiet entry's segments and totals, or ``None`` when it does not validate."""
    try:
        calls = [
            (QuietCall(int(a), int(b), str(kind), int(g)), int(n))
            for a, b, kind, g, n in entry["calls"]
            if kind in OUTCOME_TYPES and int(n) > 0
        ]
        rejected = [(int(v), int(n)) for v, n in entry["rejected"] if int(n) > 0]
        first_at = {int(v): int(at) for v, at in entry.get("first_at", ())}
    except (KeyError, TypeError, ValueError):
        return None
    return calls, rejected, first_at


class _Placements:
    """The synthesized entries of every quiet call, by where they go in the history."""

    def __init__(self, listed: list[Mapping[str, Any]]) -> None:
        self.after: dict[int, list[dict[str, Any]]] = {}
        self.before: dict[int, list[dict[str, Any]]] = {}
        self.orphans: list[dict[str, Any]] = []
        self.lost = 0
        self._anchors: dict[str, dict[int, _Anchor]] = {}
        self._entries: dict[str, list[_Anchor]] = {}
        self._calls: dict[tuple[str, str, QuietCall], int] = {}
        self._rejected: dict[tuple[str, str, int], int] = {}
        self._first_at: dict[tuple[str, int], int] = {}
        self._walls: dict[str, float] = {}
        for index, entry in enumerate(listed):
            self._read(index, entry)
        numbered = 0
        for (key, source, segment), count in sorted(self._calls.items()):
            numbered += 1
            self._place_calls(key, f"quiet.{source}.{numbered}", segment, count)
        for (key, source, version), count in sorted(self._rejected.items()):
            numbered += 1
            self._place_rejections(key, f"quiet.{source}.{numbered}", version, count)

    def _read(self, index: int, entry: Mapping[str, Any]) -> None:
        key = entry.get("key")
        if not isinstance(key, str):
            return
        wall = entry.get("wall")
        wall = float(wall) if isinstance(wall, (int, float)) else 0.0
        if entry.get("kind") == QUIET:
            totals = _totals(entry)
            if totals is None:
                return
            source = str(entry.get("source", ""))
            for segment, count in totals[0]:
                name = (key, source, segment)
                self._calls[name] = max(self._calls.get(name, 0), count)
            for version, count in totals[1]:
                where = (key, source, version)
                self._rejected[where] = max(self._rejected.get(where, 0), count)
            for version, at in totals[2].items():
                seen = self._first_at.get((key, version))
                self._first_at[key, version] = at if seen is None else min(seen, at)
            self._walls.setdefault(key, wall)
            return
        record = record_of(entry)
        if record is None:
            return
        anchor = _Anchor(
            index, record.event.at, wall, entry.get("seq"), record.to_phase, record.generation
        )
        self._entries.setdefault(key, []).append(anchor)
        stored = entry.get("version")
        if type(stored) is int:
            self._anchors.setdefault(key, {})[stored] = anchor  # the version's last entry

    def _where(
        self, key: str, version: int, generation: int | None = None, upto: int | None = None
    ) -> _Where | None:
        """Where events that met ``version`` go; ``None`` when the history lost it."""
        if version > 0:
            return self._anchors.get(key, {}).get(version)
        if version < 0:
            # Not known: the last entry up to ``upto`` that left the breaker closed in the
            # call's generation (where the store admitted it without a write).
            for anchor in reversed(self._entries.get(key, [])):
                if upto is not None and anchor.position > upto:
                    continue
                if anchor.phase == CLOSED and anchor.generation == generation:
                    return anchor
            if generation != 0:
                return None
        return _FIRST if key in self._entries else _END

    def _at(self, where: _Where, key: str, version: int) -> tuple[int, float]:
        """The instant and wall time of events put at ``where``."""
        if isinstance(where, _Anchor):
            return where.at, where.wall
        noted = self._first_at.get((key, version), 0)
        if where == _FIRST:
            head = self._entries[key][0]
            return min(noted, head.at), head.wall
        return noted, self._walls.get(key, 0.0)

    def _put(self, where: _Where, key: str, made: dict[str, Any]) -> None:
        if isinstance(where, _Anchor):
            self.after.setdefault(where.position, []).append({**made, "seq": where.seq})
        elif where == _FIRST:
            self.before.setdefault(self._entries[key][0].position, []).append(made)
        else:
            self.orphans.append(made)

    def _place_calls(self, key: str, name: str, segment: QuietCall, count: int) -> None:
        out = self._where(key, segment.outcome)
        if out is None:
            self.lost += count
            return
        upto = out.position if isinstance(out, _Anchor) else None
        into = (
            out
            if segment.request == segment.outcome
            else self._where(key, segment.request, segment.generation, upto)
        )
        if into is None:
            self.lost += count
            return
        request_at, request_wall = self._at(into, key, segment.request)
        outcome_at, outcome_wall = self._at(out, key, segment.outcome)
        outcome_at = max(request_at, outcome_at)
        for n in range(count):
            call = f"{name}.{n}"
            self._put(into, key, _made(key, "request", request_at, call, request_wall))
            made = _made(
                key, segment.type, outcome_at, call, outcome_wall, generation=segment.generation
            )
            self._put(out, key, made)

    def _place_rejections(self, key: str, name: str, version: int, count: int) -> None:
        where = self._where(key, version)
        if where is None:
            self.lost += count
            return
        at, wall = self._at(where, key, version)
        for n in range(count):
            self._put(where, key, _made(key, "request", at, f"{name}.{n}", wall, rejected=True))


def _made(
    key: str,
    kind: str,
    at: int,
    call: str,
    wall: float,
    *,
    generation: int | None = None,
    rejected: bool = False,
) -> dict[str, Any]:
    """A transition entry that carries one synthesized event (what an export reads)."""
    request = kind == "request"
    record = Transition(
        key,
        Event(kind, at, key, call, None if request else generation),
        CLOSED,
        CLOSED,
        request and not rejected,
        rejected,
        QUIET,
        generation or 0,
        None,
    )
    return {**transition_entry(record, wall), "key": key}
