"""The degradation matrix: what a caller gets while a dependency may not be called.

Theory of operation
-------------------
A sheet row may name a *chain* of modes (``degrade = ["stale", "omit"]``). When the
breaker rejects a call (open, isolated, a spent retry budget ...), the shell gathers what
it can offer (:class:`Offer`: the age of the last good answer it keeps, whether a local
degraded tool is registered, whether queued work can be kept) and :func:`choose` walks
the chain, first mode that can be served wins:

- ``omit``: go on without the data and say which data is missing (always servable);
- ``stale``: the last good result, only when one is kept and it is at most ``max_stale_ms``
  old (a read row only: a write never falls back to a stale answer);
- ``degraded``: the row's ``fallback`` tool, run locally, when its callable is registered;
- ``queue``: the work is kept durably with its idempotency key and run later by a drainer;
- ``handoff``: a packet for a person, with a reconciliation id (always servable);
- ``stop``: the run stops, with its packet (always servable).

No mode servable (or no chain): the plain tool-unavailable result. A mode the shell then
fails to serve (the store refused the queued item, the degraded tool raised) is reported
back with :meth:`Offer.without` and the chain walked again, with one exception
(:func:`walks_past`): a queued item whose write may have reached the store (its reply
was lost) may be queued, so the chain stops there and the caller is told the work may
already be queued. Walking on to ``handoff`` or ``stop`` would give the same work to a
person while a drainer may make it.

Queued work has one record per idempotency key, and its lifecycle
(:data:`QUEUE_TRANSITIONS`) gives it one owner at a time: the drainers, or a person it
was handed to. Pure: time arrives as arguments; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final, Literal

from toolbreaker.errors import PolicyError, WriteTransitionError

__all__ = [
    "MODES",
    "QUEUE_STATUSES",
    "QUEUE_TRANSITIONS",
    "Choice",
    "Offer",
    "QueueMove",
    "attempt_move",
    "check_chain",
    "choose",
    "is_done",
    "owner",
    "passing",
    "prunable",
    "queue_action",
    "queue_after",
    "refuses_stale",
    "settled",
    "stale_label",
    "stale_write_due",
    "walks_past",
]

#: Every mode, in the order the docs list them.
MODES: Final = ("omit", "stale", "degraded", "queue", "handoff", "stop")
#: Modes that can always be served: nothing after one of them in a chain is ever reached.
_ALWAYS: Final = frozenset({"omit", "handoff", "stop"})
#: Rejection reasons that are not the dependency being out: a full bulkhead clears in
#: seconds. No mode is served for them, and they stop no run.
_PASSING: Final = frozenset({"saturated"})
#: The longest ``max_stale`` a row may set: 30 days, in milliseconds.
MAX_STALE_MS: Final = 30 * 24 * 3600 * 1000


def passing(reason: object) -> bool:
    """Whether a rejection ``reason`` passes by itself (``saturated``): not degraded.

    The caller is told to resubmit; a run guard does not count the tool as down.
    """
    return reason in _PASSING


def check_chain(
    value: object, *, operation: str, fallback: str | None, max_stale_ms: int | None
) -> tuple[str, ...]:
    """Validate a row's ``degrade`` value (a mode or a list of modes); the chain as a tuple.

    Raises:
        PolicyError: naming ``degrade`` (or ``max_stale``): an unknown or repeated mode, a
            mode after one that is always served, ``stale`` on a row that is not a read,
            ``stale`` without ``max_stale``, ``degraded`` without a ``fallback`` tool.
    """
    chain = (value,) if isinstance(value, str) else value
    if not isinstance(chain, (list, tuple)) or not all(isinstance(m, str) for m in chain):
        raise PolicyError(
            f"degrade must be a mode or a list of modes ({', '.join(MODES)})", field="degrade"
        )
    seen: set[str] = set()
    for index, mode in enumerate(chain):
        if mode not in MODES:
            raise PolicyError(
                f"unknown degrade mode {mode!r} (known: {', '.join(MODES)})", field="degrade"
            )
        if mode in seen:
            raise PolicyError(f"degrade names {mode!r} twice", field="degrade")
        seen.add(mode)
        if mode in _ALWAYS and index < len(chain) - 1:
            raise PolicyError(
                f"degrade mode {mode!r} is always served: the modes after it are never reached",
                field="degrade",
            )
    if "stale" in seen:
        if refuses_stale(operation, chain):
            raise PolicyError(
                f"a {operation!r} row never falls back to 'stale' (only a read row may: "
                "a write is queued, handed off or stopped instead)",
                field="degrade",
            )
        if max_stale_ms is None:
            raise PolicyError(
                "degrade 'stale' needs max_stale_ms (the oldest answer it may serve; "
                "max_stale, in seconds, in code)",
                field="degrade",
            )
    elif max_stale_ms is not None:
        raise PolicyError("max_stale is set but degrade has no 'stale'", field="max_stale")
    if "degraded" in seen and fallback is None:
        raise PolicyError(
            "degrade 'degraded' needs fallback = the local tool to run instead",
            field="degrade",
        )
    return tuple(chain)


@dataclasses.dataclass(frozen=True, slots=True)
class Offer:
    """What the shell can serve right now, as facts (no I/O happens here).

    Attributes:
        stale_at_ms: wall-clock time the kept last good answer was recorded, or ``None``.
        degraded: a degraded local tool is registered and may be run.
        queue: the store can keep queued work.
    """

    stale_at_ms: int | None = None
    degraded: bool = False
    queue: bool = False

    def without(self, mode: str) -> Offer:
        """The same offer once ``mode`` failed to serve (so the chain goes on past it)."""
        if mode == "stale":
            return dataclasses.replace(self, stale_at_ms=None)
        if mode == "degraded":
            return dataclasses.replace(self, degraded=False)
        if mode == "queue":
            return dataclasses.replace(self, queue=False)
        return self


@dataclasses.dataclass(frozen=True, slots=True)
class Choice:
    """The mode chosen, and why each earlier mode of the chain was passed over.

    Attributes:
        mode: the mode to serve, or ``None``: the plain tool-unavailable result.
        skipped: ``(mode, why)`` for every earlier mode of the chain.
        stale_age_ms: the age of the stale answer served (``stale`` only).
    """

    mode: str | None
    skipped: tuple[tuple[str, str], ...] = ()
    stale_age_ms: int | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready; ``skipped`` and ``stale_age_ms`` only when set."""
        out: dict[str, object] = {"mode": self.mode}
        if self.skipped:
            out["skipped"] = [list(s) for s in self.skipped]
        if self.stale_age_ms is not None:
            out["stale_age_ms"] = self.stale_age_ms
        return out


def choose(chain: Sequence[str], offer: Offer, *, now_ms: int, max_stale_ms: int | None) -> Choice:
    """The first mode of ``chain`` that ``offer`` can serve at wall-clock ``now_ms``."""
    skipped: list[tuple[str, str]] = []
    for mode in chain:
        if mode == "stale":
            at = offer.stale_at_ms
            if at is None:
                skipped.append((mode, "no last good answer is kept"))
                continue
            age = max(0, now_ms - at)
            if max_stale_ms is None or age > max_stale_ms:
                skipped.append((mode, "the last good answer is older than max_stale"))
                continue
            return Choice(mode, tuple(skipped), age)
        if mode == "degraded" and not offer.degraded:
            skipped.append((mode, "the degraded tool is not available"))
            continue
        if mode == "queue" and not offer.queue:
            skipped.append((mode, "the work could not be queued"))
            continue
        return Choice(mode, tuple(skipped))
    return Choice(None, tuple(skipped))


def walks_past(mode: str, *, maybe_written: bool) -> bool:
    """Whether the chain goes on past ``mode`` when serving it failed.

    ``maybe_written``: the failure was a store write that may have been made. A queued
    item that may exist is never walked past (see the module); every other failure is.
    """
    return not (mode == "queue" and maybe_written)


def refuses_stale(kind: str, chain: Sequence[str]) -> bool:
    """Whether ``chain`` could answer a call of ``kind`` with a stale result it must not get.

    ``kind`` is a sheet row's operation class or a tool's risk class: only a ``read``
    (the same word in both) may be answered from the last good result. A stale answer to
    a write would tell the model a change happened that did not. Sheets (a row's chain)
    and run guards (a write tool behind a row) both ask this.
    """
    return kind != "read" and "stale" in chain


def stale_write_due(last_ms: int | None, now_ms: int, every_ms: int) -> bool:
    """Whether a success should refresh the kept answer (at most once per ``every_ms``)."""
    return last_ms is None or now_ms - last_ms >= every_ms or now_ms < last_ms


def stale_label(at_ms: int, now_ms: int) -> str:
    """``"as of 14:02 UTC, 7 minutes old"`` for an answer kept at wall-clock ``at_ms``."""
    import datetime  # a stale answer's label: datetime loads with the first

    when = datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.timezone.utc)
    age_s = max(0, now_ms - at_ms) // 1000
    if age_s < 60:
        age = f"{age_s} second{'' if age_s == 1 else 's'}"
    elif age_s < 2 * 3600:
        minutes = age_s // 60
        age = f"{minutes} minute{'' if minutes == 1 else 's'}"
    elif age_s < 2 * 86400:
        age = f"{age_s // 3600} hours"
    else:
        age = f"{age_s // 86400} days"
    today = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.timezone.utc).date()
    stamp = (
        when.strftime("%H:%M UTC") if when.date() == today else when.strftime("%Y-%m-%d %H:%M UTC")
    )
    return f"as of {stamp}, {age} old"


#: The statuses of a queued item: ``queued`` (waiting), ``claimed`` (a drainer holds its
#: lease and has not started it), ``running`` (started: its outcome is not known until the
#: drainer records it), ``done``, ``failed`` (certainly not made, and not worth retrying),
#: ``unknown`` (started, outcome unknown: never replayed, reconciled instead),
#: ``handed-off`` (a person took the work over: no drainer ever runs it).
QUEUE_STATUSES: Final = (
    "queued",
    "claimed",
    "running",
    "done",
    "failed",
    "unknown",
    "handed-off",
)

QueueMove = Literal[
    "enqueue",
    "hand-off",
    "claim",
    "release",
    "start",
    "finish",
    "requeue",
    "fail",
    "lose",
    "found",
    "not-found",
]
#: The queued item's lifecycle, ``(status before, move) -> status after`` (``None``: no
#: record yet). One record per idempotency key, every move a compare-and-set on it, so
#: the work has one owner at a time: a drainer (``claimed``, ``running``) or a person
#: (``handed-off``), never both.
QUEUE_TRANSITIONS: Final[Mapping[tuple[str | None, QueueMove], str]] = {
    (None, "enqueue"): "queued",
    (None, "hand-off"): "handed-off",
    ("queued", "claim"): "claimed",
    ("claimed", "claim"): "claimed",  # its holder's lease ran out before it started
    ("claimed", "release"): "queued",  # never started (the breaker refused it)
    ("claimed", "start"): "running",
    ("running", "finish"): "done",
    ("running", "release"): "queued",  # no worker was free: it never started
    ("running", "requeue"): "queued",  # certainly not made, and a retry may help
    ("running", "fail"): "failed",  # certainly not made, and no retry can help
    ("running", "lose"): "unknown",  # may have been made: never replayed
    ("running", "found"): "done",
    ("unknown", "found"): "done",
    ("running", "not-found"): "unknown",
    ("unknown", "not-found"): "unknown",
}
#: Statuses a drainer neither runs nor reports: the work is settled or a person's.
_SETTLED: Final = frozenset({"done", "failed", "handed-off"})


def queue_after(status: object, move: QueueMove) -> str:
    """Where ``move`` takes a queued item at ``status``.

    Raises:
        WriteTransitionError: the item's lifecycle has no such move from ``status``.
    """
    known = status if status is None or isinstance(status, str) else "?"
    found = QUEUE_TRANSITIONS.get((known, move))
    if found is None:
        raise WriteTransitionError(
            f"a queued item that is {known or 'absent'} cannot move by {move!r}",
            status=known,
            move=move,
        )
    return found


def attempt_move(*, may_have_committed: bool, retryable: bool) -> QueueMove:
    """How a drained item's failed attempt ends: ``lose``, ``requeue`` or ``fail``."""
    if may_have_committed:
        return "lose"
    return "requeue" if retryable else "fail"


def is_done(item: Mapping[str, object]) -> bool:
    """Whether ``item`` was made (``done``): the queue's dedupe marker for its key."""
    return item.get("status") == "done"


def settled(item: Mapping[str, object]) -> bool:
    """Whether no drainer has anything to do or report about ``item``.

    Done, failed, or handed to a person. (Items held by a live drainer, or that do not
    validate, are skipped too, but reported: :func:`queue_action`.)
    """
    return item.get("status") in _SETTLED


def owner(item: Mapping[str, object]) -> Literal["queue", "person"]:
    """Who owns the work of an existing item: the queue's drainers, or a person."""
    return "person" if item.get("status") == "handed-off" else "queue"


def queue_action(item: Mapping[str, object], now_ms: int) -> str:
    """What a drainer does with a queued item at wall-clock ``now_ms``.

    ``claim`` (queued, or claimed by a drainer whose lease ran out before it started
    the work), ``reconcile`` (started by a drainer whose lease ran out, or unknown: the
    work may have happened, so it is never run again; a read-only check decides) or
    ``skip`` (done, failed, or held by a live drainer). A record that does not validate
    is ``skip``: fail closed, an operator looks at it.
    """
    status = item.get("status")
    until = item.get("until")
    expired = isinstance(until, int) and not isinstance(until, bool) and until <= now_ms
    if status == "queued":
        return "claim"
    if status == "claimed":
        return "claim" if expired else "skip"
    if status == "running":
        return "reconcile" if expired else "skip"
    if status == "unknown":
        return "reconcile"
    return "skip"


def prunable(item: Mapping[str, object], now_ms: int, older_than_ms: int) -> bool:
    """Whether a queued item may be deleted at wall-clock ``now_ms``.

    Only ``done`` work (made, or found made by a reconcile check) whose ``finished_at``
    is at least ``older_than_ms`` in the past. Everything else is kept, however old:
    pending and in-flight work must still run or be reconciled, and ``failed`` and
    ``unknown`` items wait for a person. A done item is the queue's dedupe marker: once
    it is deleted, the same idempotency key can be queued again. A finish time that is
    not a whole number keeps the item (fail closed: the marker stays).
    """
    finished = item.get("finished_at")
    return (
        item.get("status") == "done"
        and type(finished) is int
        and finished <= now_ms - older_than_ms
    )
