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
never go backwards in its history, as :class:`~toolbreaker.core.breaker.state.Event`
promises per dependency, and a replay of the history meets every deadline where the
store met it. The shift is the time the two writes raced by (well under a millisecond
on a healthy store) and only ever later.

Every text a person reads is masked where the entry is built: the key with
:func:`~toolbreaker.core.run.redact.redact_text`; an operator's reason was masked where
its event was made.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from toolbreaker.core.breaker.state import OUTCOME_TYPES, Event, Transition, changed_phase
from toolbreaker.core.run.redact import redact_text

__all__ = [
    "DEFAULT_HISTORY",
    "STREAM_SCHEMA",
    "history_texts",
    "in_store_order",
    "record_of",
    "replayable",
    "transition_entry",
    "wall_of",
]

STREAM_SCHEMA: Final = "toolbreaker.stream/v1"
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


def replayable(entries: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """A store history's entries, with the requests a replay needs written in.

    For each outcome whose call's request is not in the history (it changed nothing, so
    the store wrote nothing), a ``request`` entry of that call at the outcome's instant
    comes just before it (with the outcome's ``wall`` and ``seq``): a replay under the
    store's policy admits it in the generation the store admitted it in (see the
    module's docstring). Entries come out in the order they went in; an entry that is
    no transition passes as it is.
    """
    requested: dict[str, set[str]] = {}
    for entry in entries:
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
