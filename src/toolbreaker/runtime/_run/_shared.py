"""One run's budget shared by every guard of its task, through a store's records.

A run served by several workers or processes (the same task id) must spend one budget:
each guard alone would let its own share of calls through. With ``RunGuard(...,
shared=True)`` the run's state (:class:`~toolbreaker.core._run.state.RunState`: counters,
reservations, stops) and its budget live in one record of the journal's store
(space ``toolbreaker.runs``, key the task), and every event the guard feeds the run
machine is applied to that record by compare-and-set: read it, apply the event with the
pure core (:func:`toolbreaker.core._run.machine.apply`), write it back at the version
read; a guard that lost the race reads again. A guard that wrote the record last skips
the read: it applies the event to what it wrote and writes at that version, which the
compare-and-set refuses if anyone wrote since (one round trip a write while a guard is
alone on its run). Nothing here decides anything the core does not.

The record holds, beside the state, the budget the run was started with (raised by an
operator's extension: one budget for one run, whatever each process was built with) and
the ids of the events applied last, so an event written again after a write whose answer
was lost is never applied twice.

Fail closed
-----------
An event a caller waits for (:data:`~toolbreaker.core._run.machine.ANSWERED`: a request,
a reservation ...) while the record cannot be read or written is answered
``budget-unavailable``: no call is admitted against a budget nobody can read. An event
that records a fact (an outcome, a cost, a usage) is never lost and never changes the
call's outcome: it stays in the guard's outbox, in order, and is written with the next
event that reaches the store; the fault is counted (:attr:`SharedRun.faults`). A
request whose write's answer was lost may have been admitted in the store while its
caller was refused: it then holds its reservation until its lease ends, spending
nothing more than it held (never less safe than refusing).

Clocks: the run's times (its start, deadline, leases) are wall-clock milliseconds, so
processes on hosts whose clocks are synchronised agree on them; a skew shifts a deadline
or a lease by the skew (an event stamped before the run started, by a clock behind the
one that started it, counts as at the start).

The record
----------
A write carries the events, not the state. The record holds the run's state as some
write left it (a *snapshot*: state, budget, the ids applied, and ``base``, the version it
was written at), and on a store that keeps a log of appended entries
(:class:`~toolbreaker.stores._protocol.RecordLog`: every store of this package) each
round after it appends one small entry, its events as they were applied, by
compare-and-set on the record's version (:meth:`RecordLog.record_append`). A reader folds
the entries after ``base`` into the snapshot with the same pure core, in order, and
reaches the state the writers reached; a guard that knows the state at a version the log
covers folds in only the entries after it. Every :data:`COMPACT_EVERY` entries a round
writes the whole snapshot instead, which drops the log. On a store without a log every
round writes the snapshot. A record of the first format (``toolbreaker.shared-run/v1``:
the snapshot, no ``base``) is read as the snapshot it is, and the next round writes it
again in this one; a guard of an earlier version refuses a record of this format as
corrupt (it admits nothing against it) rather than misreading it.

A run's ``resume`` (the writes an earlier run of the task left unresolved) is applied only
when the record is created: a guard that joins a run already shared finds the count in
the state, and counting it again would block writes twice.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final, cast

from toolbreaker.core._files import shown
from toolbreaker.core._run._values import ZERO
from toolbreaker.core._run.budget import Action, Budget, RunState, Stop
from toolbreaker.core._run.machine import ANSWERED, RunDecision, RunEvent
from toolbreaker.core._run.machine import apply as run_apply
from toolbreaker.errors import (
    PolicyError,
    RecordCorrupt,
    RunStateError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from toolbreaker.runtime._clock import Clock
from toolbreaker.runtime._log import hook_failed
from toolbreaker.stores._protocol import RecordLog, Records
from toolbreaker.stores._records import check_name

__all__ = ["RUNS_SPACE", "SharedRun", "read_shared", "record_key"]

#: The records space that holds shared runs, one record per task.
RUNS_SPACE: Final = "toolbreaker.runs"
#: The ids of the events applied last that a record keeps (a lost answer's event is
#: written again at most a few events later).
APPLIED_LIMIT: Final = 256
#: How long a write keeps trying while other writers win the compare-and-set (a hot run
#: under many writers wins well before; each round backs off a little longer).
CONTENTION_PATIENCE_S: Final = 30.0
#: How long a write keeps trying while the store answers with faults (a busy SQLite file,
#: a Redis failing over) before the event is refused or kept for later.
FAULT_PATIENCE_S: Final = 2.0
#: Entries a record's log holds before a round writes the whole snapshot again (the
#: longest replay a reader makes; one write in this many encodes the whole state).
COMPACT_EVERY: Final = 64
_SCHEMA: Final = "toolbreaker.shared-run/v2"
#: The first format: the snapshot alone, written whole on every round.
_SCHEMA_V1: Final = "toolbreaker.shared-run/v1"

#: What a round knows of the record: its version, the state and budget there, the ids
#: of the events applied last, and the version of its snapshot (``None``: the next round
#: writes the snapshot: a first-format record, or a store without a log).
_Known = tuple[int, RunState, Budget, list[str], int | None]


def read_shared(records: Records, task: str) -> tuple[RunState, Budget, int] | None:
    """The shared run of ``task``: its state, its budget and the record's version.

    ``None`` when the store holds no shared run of that task.

    Raises:
        StoreUnavailable: the store cannot be read.
        RecordCorrupt: the record does not decode into a run and a budget.
    """
    found = _fetch(records, record_key(task), None)
    if found is None:
        return None
    version, state, budget, _, _ = found
    return state, budget, version


def record_key(task: str) -> str:
    """``task`` as the key of its run's record.

    Raises:
        PolicyError: no store can key a record by it (not printable, or too long): a
            guard of that task is refused where it is built, never at its first call.
    """
    try:
        check_name("key", task)
    except ValueError as exc:
        raise PolicyError(
            f"a shared run's task id {shown(task)} cannot key its record: {exc}", field="task"
        ) from None
    return task


def _corrupt(task: str, version: int, why: str) -> RecordCorrupt:
    return RecordCorrupt(
        f"the shared run {task!r} {why}", space=RUNS_SPACE, key=task, version=version
    )


def _decode(
    doc: Mapping[str, Any], task: str, version: int
) -> tuple[RunState, Budget, list[str], int | None]:
    """A snapshot: its state, budget, ids applied, and its version (``None``: first format)."""
    schema = doc.get("schema")
    if schema not in (_SCHEMA, _SCHEMA_V1):
        raise _corrupt(task, version, f"is not a {_SCHEMA} record")
    try:
        state = RunState.from_dict(doc["state"])
        budget = Budget.from_dict(doc["budget"])
        applied = [str(x) for x in doc["applied"]]
        base = doc["base"] if schema == _SCHEMA else None
    except (KeyError, TypeError, RunStateError, PolicyError) as exc:
        raise _corrupt(task, version, f"does not decode: {exc}") from None
    if schema == _SCHEMA and (type(base) is not int or not 1 <= base <= version):
        raise _corrupt(task, version, f"does not decode: base {base!r} is no version to {version}")
    if state.task != task:
        raise _corrupt(task, version, f"holds the state of {state.task!r}")
    return state, budget, applied, base


def _fetch(
    records: Records, task: str, known: _Known | None, *, log: bool | None = None
) -> _Known | None:
    """The record of ``task`` read and its log folded in (``None``: absent).

    ``known``: what this guard knows at some version; when the log covers it, only the
    entries after it are folded in (the snapshot is not decoded).

    Raises:
        StoreUnavailable: the store cannot be read.
        RecordCorrupt: the record or an entry does not decode, or the log has a gap.
    """
    if log is None:
        log = isinstance(records, RecordLog)
    if log:
        found = cast("RecordLog", records).record_read_log(RUNS_SPACE, task)
        if found is None:
            return None
        doc, version, entries = found
    else:
        plain = records.record_get(RUNS_SPACE, task)
        if plain is None:
            return None
        (doc, version), entries = plain, []
        if doc.get("schema") == _SCHEMA and doc.get("base") != version:
            # Entries appended through a store that keeps a log: this handle cannot read
            # them, and a snapshot written over them would lose them.
            raise _corrupt(task, version, "has a log of entries that this store handle cannot read")
    if known is not None and known[0] == version:
        return known
    base = doc.get("base") if doc.get("schema") == _SCHEMA else None
    if (
        known is not None
        and known[4] is not None
        and type(base) is int
        and base <= known[0] < version
    ):
        at, state, budget, applied = known[0], known[1], known[2], list(known[3])
        snap: int | None = base
    else:
        state, budget, applied, snap = _decode(doc, task, version)
        if snap is None:
            return version, state, budget, applied, None  # the first format: no log
        at = snap
    later = [(made, entry) for made, entry in entries if made > at]
    if [made for made, _ in later] != list(range(at + 1, version + 1)):
        raise _corrupt(task, version, f"has a log that does not lead from {at} to {version}")
    for made, entry in later:
        state, budget = _fold(entry, (state, budget), applied, task, made)
    return (version, state, budget, applied[-APPLIED_LIMIT:], snap)


def _fold(
    entry: Mapping[str, Any], start: tuple[RunState, Budget], applied: list[str], task: str, at: int
) -> tuple[RunState, Budget]:
    """The state and budget after one log entry's events (their ids added to ``applied``)."""
    state, budget = start
    try:
        for item in entry["events"]:
            applied.append(str(item["id"]))
            if "budget" in item:
                budget = Budget.from_dict(item["budget"])
            if item.get("event") is not None:
                state, _ = run_apply(state, _event_of(item["event"]), budget)
    except (KeyError, TypeError, ValueError, ArithmeticError, RunStateError, PolicyError) as exc:
        raise _corrupt(task, at, f"has a log entry that does not decode: {exc}") from None
    return state, budget


#: RunEvent's fields and defaults, in order: what an entry writes when it differs.
_EVENT_FIELDS: Final = tuple((f.name, f.default) for f in dataclasses.fields(RunEvent))
#: An event's values of those fields, in that order, read at once.
_EVENT_VALUES: Final = operator.attrgetter(*(name for name, _ in _EVENT_FIELDS))
_AMOUNTS: Final = frozenset({"cost", "reserve"})
_NONE: Final[frozenset[str]] = frozenset()


def _event_doc(event: RunEvent) -> dict[str, Any]:
    """``event`` as JSON: the fields that differ from their defaults; amounts as text."""
    doc = {
        name: value
        for (name, default), value in zip(_EVENT_FIELDS, _EVENT_VALUES(event), strict=True)
        if value != default
    }
    action = event.action
    if action is not None:
        doc["action"] = [action.tool, action.fingerprint, action.risk, action.recovery]
    for name in _AMOUNTS:
        value = doc.get(name)
        if value is not None and not isinstance(value, str):
            doc[name] = str(value)
    return doc


def _event_of(doc: Mapping[str, Any]) -> RunEvent:
    """The event :func:`_event_doc` wrote (checked as any event is)."""
    fields = dict(doc)
    action = fields.get("action")
    if action is not None:
        tool, fingerprint, risk, recovery = action
        fields["action"] = Action(tool, fingerprint, risk, recovery)
    for name in _AMOUNTS & fields.keys():
        if isinstance(fields[name], str):
            fields[name] = Decimal(fields[name])
    return RunEvent(**fields)


class SharedRun:
    """A guard's side of one shared run (see the module).

    Attributes:
        faults: writes and reads of the record that failed (each one counted once);
            the events they carried stay in the outbox or were refused.
    """

    def __init__(self, records: Records, task: str, budget: Budget, clock: Clock) -> None:
        self.records = records
        # Whether the store keeps a log of appended entries (asked once: a protocol's
        # isinstance reads every attribute).
        self._log = isinstance(records, RecordLog)
        self.task = record_key(task)
        self.clock = clock
        self.faults = 0
        self._budget = budget
        self._outbox: list[tuple[str, RunEvent, Mapping[str, Any] | None]] = []
        self._lock = threading.Lock()
        self._rng = random.Random()  # noqa: S311 - jitter, not secrecy
        # The decision of a round whose write's answer was lost, by its last event's id:
        # the answer, once a read shows that write landed.
        self._unanswered: tuple[str, RunDecision] | None = None
        # The record this guard wrote last, decoded, by its version: the next round
        # writes at that version without reading it (see _round).
        self._known: _Known | None = None
        # Answered events refused here whose write may have landed anyway.
        self._orphans: list[tuple[str, RunEvent, RunDecision]] = []

    @property
    def pending(self) -> int:
        """Events recorded here and not yet written to the store."""
        return len(self._outbox)

    def feed(
        self, event: RunEvent, *, raised: Mapping[str, Any] | None = None
    ) -> tuple[RunState, Budget, RunDecision] | None:
        """Apply ``event`` (and every event still in the outbox) to the shared record.

        ``raised``: for ``extend``, the limits to raise the run's budget to.

        Returns the state and budget the store now holds and the event's decision; or
        ``None`` when the store could not be reached: an answered event was refused
        (:meth:`refused`), any other stays in the outbox for the next write.

        Raises:
            PolicyError: ``raised`` would lower the run's budget.
        """
        with self._lock:
            self._outbox.append((os.urandom(8).hex(), event, raised))
            try:
                return self._flush()
            except StoreUnavailable as exc:
                self.faults += 1
                if event.type in ANSWERED:
                    event_id, _, _ = self._outbox.pop()  # never admitted here (see the module)
                    answer = self._unanswered
                    if answer is not None and answer[0] == event_id:
                        # Its write's answer was lost: it may be admitted in the store. The
                        # next read tells; then its reservation is released (see _round).
                        self._orphans.append((event_id, event, answer[1]))
                hook_failed(f"the shared run {self.task!r} could not be written", exc)
                return None
            except PolicyError:
                self._outbox.pop()
                raise

    def post(self, event: RunEvent) -> None:
        """Keep ``event`` (a fact, not :data:`ANSWERED`) for the next write (:meth:`flush`)."""
        with self._lock:
            self._outbox.append((os.urandom(8).hex(), event, None))

    def flush(self) -> tuple[RunState, Budget] | None:
        """Write what the outbox holds; the state the store holds (``None``: unreachable)."""
        with self._lock:
            try:
                if not self._outbox:
                    return self._read()
                state, budget, _ = self._flush()
            except StoreUnavailable as exc:
                self.faults += 1
                hook_failed(f"the shared run {self.task!r} could not be read", exc)
                return None
            return state, budget

    def refused(self, event: RunEvent) -> RunDecision:
        """The answer to ``event`` while the run's record cannot be reached: fail closed."""
        detail = (
            f"the budget of run {self.task!r} is shared through a store that cannot be "
            "reached: no call is admitted against a budget nobody can read"
        )
        stop = Stop("budget-unavailable", detail, event.at)
        return RunDecision("stopped", stop)

    # -- the record ------------------------------------------------------------------------

    def _read(self) -> tuple[RunState, Budget]:
        found = _fetch(self.records, self.task, self._known, log=self._log)
        if found is None:
            return RunState.start(self.task, self.clock()), self._budget
        if self._unanswered is None:
            self._known = found
        return found[1], found[2]

    def _flush(self) -> tuple[RunState, Budget, RunDecision]:
        start = time.monotonic()
        faulted: float | None = None
        round_ = 0
        while True:
            round_ += 1
            try:
                written = self._round()
            except RecordCorrupt:
                raise
            except StoreUnavailable:
                now = time.monotonic()
                faulted = now if faulted is None else faulted
                if now - faulted >= FAULT_PATIENCE_S:
                    raise
                written = None
            else:
                faulted = None
            if written is not None:
                self._outbox.clear()
                return written
            if time.monotonic() - start >= CONTENTION_PATIENCE_S:
                raise StoreUnavailable(
                    f"the shared run {self.task!r} lost {round_} writes in a row"
                )
            time.sleep(self._rng.uniform(0, 0.0005 * min(round_, 20)))

    def _settle_orphans(self, seen: set[str] | frozenset[str]) -> None:
        """An orphan the record applied ran nowhere: its admission is released (spent 0)."""
        for event_id, event, decision in self._orphans:
            if event_id in seen and decision.verdict == "run" and event.action is not None:
                self._outbox.insert(0, (os.urandom(8).hex(), _release(event, decision), None))
        self._orphans.clear()

    def _apply(
        self,
        state: RunState,
        budget: Budget,
        applied: list[str],
        seen: set[str] | frozenset[str],
        *,
        created: bool,
    ) -> tuple[RunState, Budget, RunDecision, list[dict[str, Any]]]:
        """The outbox's events not ``seen`` applied (their ids added to ``applied``).

        Also the log entry's items that replay them: each event as it was fed, and the
        budget an extension raised.
        """
        decision = RunDecision("recorded")
        items: list[dict[str, Any]] = []
        for event_id, event, raised in self._outbox:
            if event_id in seen:
                continue  # written already by a write whose answer was lost
            applied.append(event_id)
            item: dict[str, Any] = {"id": event_id}
            items.append(item)
            if event.type == "resume" and not created:
                continue  # the run's state counts them already (see the module)
            if raised is not None:
                budget = budget.raised(**raised)
                item["budget"] = budget.to_dict()
            fed = event
            if event.at < state.started_at:  # another host's clock started the run
                fed = dataclasses.replace(event, at=state.started_at)
            state, decision = run_apply(state, fed, budget)
            item["event"] = _event_doc(fed)
        return state, budget, decision, items

    def _round(self) -> tuple[RunState, Budget, RunDecision] | None:
        """One compare-and-set round; ``None`` when another writer came first.

        A guard that wrote the record last writes again at that version without reading
        it: when no other writer came between, the write is the whole round; when one
        did, the compare-and-set refuses it and the next round reads. A lost answer or an
        orphan to settle always reads first (what landed is only in the record). The
        write appends the round's events to the record's log, or writes the whole
        snapshot (see the module).
        """
        known = self._known
        created = False
        read = known is None or self._unanswered is not None or bool(self._orphans)
        if not read:
            assert known is not None
            current = known
        else:
            found = _fetch(self.records, self.task, known, log=self._log)
            created = found is None
            if found is None:
                found = (0, RunState.start(self.task, self.clock()), self._budget, [], None)
            current = found
        version, state, budget, applied, base = current
        applied = list(applied)
        decision = RunDecision("recorded")
        # Only a read can show one of the outbox's events applied (by a write whose answer
        # was lost): the record this guard wrote last holds none of them.
        seen: set[str] | frozenset[str] = set(applied) if read else _NONE
        self._settle_orphans(seen)
        last = self._outbox[-1][0]
        if read and all(eid in seen for eid, _, _ in self._outbox):  # the lost write landed
            answer = self._unanswered
            self._unanswered = None
            self._known = None if created else current
            return state, budget, answer[1] if answer and answer[0] == last else decision
        state, budget, decision, items = self._apply(state, budget, applied, seen, created=created)
        kept = applied[-APPLIED_LIMIT:]
        records = self.records
        try:
            if base is not None and version - base < COMPACT_EVERY and self._log:
                snap: int | None = base
                written = cast("RecordLog", records).record_append(
                    RUNS_SPACE, self.task, {"events": items}, version=version
                )
            else:
                doc = {
                    "schema": _SCHEMA,
                    "state": state.to_dict(),
                    "budget": budget.to_dict(),
                    "applied": kept,
                    "base": version + 1,
                }
                written = records.record_put(RUNS_SPACE, self.task, doc, version=version)
                snap = version + 1 if written == version + 1 else None
            if written is None:
                self._known = None  # another writer came first: the next round reads
                return None
        except StoreWriteUnknown:
            # Written or not: the next round reads which, by the ids it holds.
            self._unanswered = (last, decision)
            return None
        self._unanswered = None
        self._known = (written, state, budget, kept, snap)
        return state, budget, decision


def _release(event: RunEvent, decision: RunDecision) -> RunEvent:
    """The outcome that releases what an orphaned admission held: it never ran."""
    return RunEvent(
        "outcome",
        event.at,
        event.action,
        outcome="ignored",
        detail="admitted in the store after the caller was refused: it never ran",
        step=decision.step,
        cost=ZERO,
        reserve=event.reserve,
        reservation=decision.reservation,
    )


def on_loop() -> bool:
    """Whether this thread is running an event loop (a store round trip would block it)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def later(fn: Callable[[], object]) -> None:
    """Run ``fn`` in the event loop's default executor, its failure logged."""
    import asyncio

    future = asyncio.get_running_loop().run_in_executor(None, fn)

    def done(f: asyncio.Future[object]) -> None:
        if not f.cancelled() and f.exception() is not None:
            hook_failed("writing the shared run failed", f.exception())

    future.add_done_callback(done)
