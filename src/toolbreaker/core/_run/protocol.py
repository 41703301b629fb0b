"""The write protocol: one write's journal entry, from intent to a known outcome.

Theory of operation
-------------------
Every write a run guard makes has one journal entry, under its idempotency key, whose
``status`` says what is known about it. The shells report facts (*moves*); this module
says where each fact takes the entry, and what every reader does with every status.
Nothing else in the package keeps a list of statuses or compares one.

The statuses::

    (no entry) ─attempt─► pending ─proven────► confirmed   made; answered from
        │                    │    ─not-made──► failed      the journal forever
        │                    │    ─maybe-made► unknown ─found─────► confirmed
        │                    │                    └───not-found─► reconciled-absent
        │                    │                                   └─found─► confirmed
        ├─queued────────► queued        (a drainer makes it)
        ├─queue-unknown─► maybe-queued  (the queue's own write was ambiguous)
        └─handed-off────► handed-off    (a person took it over)

- ``pending``: journaled just before the write runs; while it is in flight, or after its
  run crashed, nobody knows whether it happened;
- ``confirmed``: a result proved it, a reconcile check found it, a drainer made it, or an
  operator said so;
- ``failed``: it certainly did not happen (a failure that cannot have committed, a call
  that never started, or an operator's word): it may be made again;
- ``unknown``: it may have committed (a timeout, a lost reply, a result that proves
  nothing): never replayed;
- ``reconciled-absent``: the read-only status check did not find it. Not proof of
  absence (an index may lag): it stays unresolved until an operator decides;
- ``queued``: the degradation matrix saved it for a drainer, which makes it once;
- ``maybe-queued``: saving it for a drainer got no answer from the store: it may be
  queued (and then a drain makes it) or not. Never made by the run, never handed to a
  person: a drain, or an operator who looked at the queue, settles it;
- ``handed-off``: a person took the write over (a reconciliation id: the degradation's
  ``handoff``, or its ``stop``, whose packet gives the attempted write to a person); no
  run and no drain makes it until an operator says it was not made.

Unresolved (:func:`unresolved`) is everything but ``confirmed`` and ``failed``: the stop
packet lists those writes. Uncertain (:func:`uncertain`) is the subset that counts
against ``Budget.max_uncertain_side_effects``: the writes that may have happened without
anyone knowing (``pending``, ``unknown``, ``reconciled-absent``, ``maybe-queued``). A
queued or handed-off write is known not to have been made by the run, and someone owns
it, so it blocks nothing.

What each reader does:

- a request for the write (the same run, or a resumed one) gets :func:`on_request`:
  ``run`` (no entry, or ``failed``), ``journal`` (answered from the journal), ``reconcile``
  (never replayed: the read-only check looks), ``queued`` or ``handed-off`` (answered
  so: its owner makes it);
- a resumed run counts the uncertain entries (the run machine's ``resume`` event);
- a drainer that made a queued write reports ``drained``: confirmed, whatever the entry
  said (the fact wins);
- an operator's ``RunGuard.resolve`` reports ``operator-made`` or ``operator-not-made``.
  Saying a confirmed write was not made, or that a queued write will not be (a drain may
  still make it), is refused.

A move the table does not hold raises :class:`~toolbreaker.errors.WriteTransitionError`.
Old journals keep working: :func:`read` takes an entry as stored, and a ``pending`` entry
with a ``queue_id`` (how queued writes were journaled before ``queued`` existed) reads as
``queued``; a status this version does not know reads as ``unknown`` (fail closed: it may
have happened).

What proves a write (:func:`proves`): the tool's ``verify`` answer when it has one, else
a result that is not ``None``. A verify check that raised proves nothing.

Pure: no clock, no I/O; entries are plain dicts the shell read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

from toolbreaker.errors import WriteTransitionError

__all__ = [
    "MOVES",
    "REQUEST_ANSWERS",
    "STATUSES",
    "TRANSITIONS",
    "Move",
    "RequestAnswer",
    "Status",
    "after",
    "degraded_move",
    "made",
    "on_request",
    "proves",
    "queue_id",
    "read",
    "reconciliation_id",
    "resolves",
    "settled_by",
    "settled_move",
    "uncertain",
    "unresolved",
]

Status = Literal[
    "pending",
    "confirmed",
    "failed",
    "unknown",
    "reconciled-absent",
    "queued",
    "maybe-queued",
    "handed-off",
]
#: Every journal status, in the order of the lifecycle.
STATUSES: Final[tuple[Status, ...]] = get_args(Status)

Move = Literal[
    "attempt",
    "proven",
    "not-made",
    "maybe-made",
    "found",
    "not-found",
    "queued",
    "queue-unknown",
    "handed-off",
    "drained",
    "operator-made",
    "operator-not-made",
]
#: Every fact a shell reports about a write.
MOVES: Final[tuple[Move, ...]] = get_args(Move)

RequestAnswer = Literal["run", "journal", "reconcile", "queued", "handed-off"]
REQUEST_ANSWERS: Final[tuple[RequestAnswer, ...]] = get_args(RequestAnswer)

_ANY: Final[tuple[Status | None, ...]] = (None, *STATUSES)
_OPEN: Final[tuple[Status | None, ...]] = (None, "failed", "pending")


def _table() -> dict[tuple[Status | None, Move], Status]:
    rows: dict[tuple[Status | None, Move], Status] = {}

    def row(befores: tuple[Status | None, ...], move: Move, status: Status) -> None:
        for before in befores:
            rows[(before, move)] = status

    # A write runs only from no entry or a certain failure (the run machine's "run").
    row((None, "failed"), "attempt", "pending")
    row(("pending",), "proven", "confirmed")
    row(("pending",), "not-made", "failed")
    row(("pending",), "maybe-made", "unknown")
    # The read-only status check: a finding is proof; not finding it is not.
    row(("pending", "unknown", "reconciled-absent", "maybe-queued"), "found", "confirmed")
    row(("pending", "unknown", "reconciled-absent"), "not-found", "reconciled-absent")
    # The degradation matrix answered instead of the dependency (before it ran).
    row(_OPEN, "queued", "queued")
    row(_OPEN, "queue-unknown", "maybe-queued")
    row(_OPEN, "handed-off", "handed-off")
    # A drainer made it: the fact wins over whatever the entry said.
    row(_ANY, "drained", "confirmed")
    # An operator's word. Never "not made" against proof, nor while a drain may make it.
    row(_ANY, "operator-made", "confirmed")
    row(
        (None, "pending", "failed", "unknown", "reconciled-absent", "maybe-queued", "handed-off"),
        "operator-not-made",
        "failed",
    )
    return rows


#: The lifecycle: ``(status before, move) -> status after``; ``None`` is "no entry yet".
TRANSITIONS: Final[Mapping[tuple[Status | None, Move], Status]] = _table()

_UNRESOLVED: Final = frozenset(STATUSES) - {"confirmed", "failed"}
_UNCERTAIN: Final = frozenset({"pending", "unknown", "reconciled-absent", "maybe-queued"})
_ON_REQUEST: Final[Mapping[Status | None, RequestAnswer]] = {
    None: "run",
    "failed": "run",
    "confirmed": "journal",
    "pending": "reconcile",
    "unknown": "reconcile",
    "reconciled-absent": "reconcile",
    "queued": "queued",
    "maybe-queued": "queued",
    "handed-off": "handed-off",
}
_WHY: Final[Mapping[Move, str]] = {
    "attempt": "a write runs only when it has no entry or certainly failed",
    "proven": "only a write in flight is proven by its result",
    "not-made": "only a write in flight can certainly fail",
    "maybe-made": "only a write in flight can have an unknown outcome",
    "found": "only a write whose outcome is not known can be found",
    "not-found": "only a write whose outcome is not known is looked for",
    "queued": "only a write not yet made can be queued",
    "queue-unknown": "only a write not yet made can be queued",
    "handed-off": "only a write not yet made can be handed to a person",
    "drained": "",
    "operator-made": "",
    "operator-not-made": "a confirmed write was made, and a queued one may still be made "
    "by a drain",
}


def read(entry: Mapping[str, object] | None) -> Status | None:
    """The status of a journal entry as stored (``None``: there is no entry).

    A ``pending`` entry with a queue id is ``queued`` (journals before ``queued``
    existed); a status this version does not know is ``unknown`` (fail closed).
    """
    if entry is None:
        return None
    status = entry.get("status")
    if status == "pending" and queue_id(entry) is not None:
        return "queued"
    for known in STATUSES:
        if status == known:
            return known
    return "unknown"


def after(status: Status | None, move: Move) -> Status:
    """Where ``move`` takes an entry at ``status``.

    Raises:
        WriteTransitionError: the lifecycle has no such move from ``status``.
    """
    found = TRANSITIONS.get((status, move))
    if found is None:
        raise WriteTransitionError(
            f"a write that is {status or 'not journaled'} cannot move by {move!r}: {_WHY[move]}",
            status=status,
            move=move,
        )
    return found


def on_request(status: Status | None) -> RequestAnswer:
    """What a request for a write whose entry is at ``status`` gets (see the module)."""
    return _ON_REQUEST[status]


def unresolved(status: Status | None) -> bool:
    """Whether the write's outcome is not settled: listed in the stop packet."""
    return status in _UNRESOLVED


def uncertain(status: Status | None) -> bool:
    """Whether the write counts against ``max_uncertain_side_effects``."""
    return status in _UNCERTAIN


def settled_by(status: Status | None) -> Literal["status-check", "drain", "person"] | None:
    """Who settles an unresolved write: a status check (then an operator), a drain, a person.

    ``None`` for a settled write (or no entry).
    """
    return _SETTLED_BY.get(status)


_SETTLED_BY: Final[Mapping[Status | None, Literal["status-check", "drain", "person"]]] = {
    "pending": "status-check",
    "unknown": "status-check",
    "reconciled-absent": "status-check",
    "queued": "drain",
    "maybe-queued": "drain",
    "handed-off": "person",
}


def made(status: Status | None) -> bool:
    """Whether the write is known to have been made (answered from the journal)."""
    return status == "confirmed"


def resolves(before: Status | None, status: Status) -> bool:
    """Whether a move from ``before`` to ``status`` settles an uncertain write."""
    return uncertain(before) and not uncertain(status)


def proves(result: object, verified: bool | None) -> bool:
    """Whether a write's result proves it happened.

    Args:
        result: what the tool returned.
        verified: the tool's ``verify`` answer (``False`` too when the check raised), or
            ``None`` when the tool has no check.
    """
    if verified is not None:
        return verified
    return result is not None


def settled_move(outcome: str) -> Move | None:
    """The move a run's recorded outcome of a write makes (``check-run``, the guard).

    ``success`` is proven (the caller checked the proof), ``unknown`` may have been made,
    ``failure`` certainly was not; ``ignored`` (never sent) makes no move.
    """
    return _SETTLED.get(outcome)


_SETTLED: Final[Mapping[str, Move]] = {
    "success": "proven",
    "unknown": "maybe-made",
    "failure": "not-made",
}


def degraded_move(mode: object, *, maybe: bool = False) -> Move | None:
    """The move a degradation answer for a write makes, or ``None``.

    ``queue`` is ``queued`` (``queue-unknown`` when the store's write of the item was
    ambiguous, ``maybe``); ``handoff`` and ``stop`` (whose packet gives the write to a
    person) are ``handed-off``. Other modes leave no entry: the write was not made, and
    nobody owns it.
    """
    if mode == "queue":
        return "queue-unknown" if maybe else "queued"
    if mode in ("handoff", "stop"):
        return "handed-off"
    return None


def queue_id(entry: Mapping[str, object] | None) -> str | None:
    """The queue id a queued (or maybe queued) write's entry keeps, if any."""
    return _kept(entry, "queue_id")


def reconciliation_id(entry: Mapping[str, object] | None) -> str | None:
    """The reconciliation id a handed-off write's entry keeps, if any."""
    return _kept(entry, "reconciliation_id")


def _kept(entry: Mapping[str, object] | None, name: str) -> str | None:
    if entry is None:
        return None
    found = entry.get(name)
    result = entry.get("result")
    if found is None and isinstance(result, Mapping):
        found = result.get(name)
    return found if isinstance(found, str) else None
