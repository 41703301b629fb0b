"""The degradation matrix, carried out: what a caller gets while its tool may not be called.

The choice of mode is the core's (:func:`toolbreaker.core._degrade.choose`); this shell
gathers what it can offer, serves the chosen mode, and builds the answer in
:mod:`toolbreaker.runtime._result`. It keeps three kinds of records in the store
(``Records``):

- ``toolbreaker.stale``: the last good answer of a read, per tool and arguments, with its
  wall-clock time; written on a success at most once per ``stale_every`` seconds (masked,
  at most :data:`MAX_STALE_BYTES`);
- ``toolbreaker.queue``: queued work, one record per idempotency key (see
  :mod:`toolbreaker.runtime._fleet._drain`, which runs it once the breaker closes). The
  record is the work's one owner: a drainer claims it by compare-and-set; work is
  handed (or stopped) to a person only by creating its record as ``handed-off`` (so no
  drainer ever runs it), and answered "already queued" when a drainer owns it;
- ``toolbreaker.handoff``: the packets handed to a person, by reconciliation id.

A fault here (a store that is down, a degraded tool that raises) never changes the
call's outcome: it is counted (``stats.degrade_faults``), logged masked, and the chain
goes on to its next mode, down to the plain tool-unavailable result. Except one: a
queued item whose write may have reached the store (its answer was lost,
:class:`~toolbreaker.errors.StoreWriteUnknown`) may be queued, so the caller is told it
may already be queued, and the chain never goes on to hand the same work to a person
(:func:`toolbreaker.core._degrade.walks_past`).
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._canonical import sha256_hex
from toolbreaker.core._degrade import (
    Choice,
    Offer,
    choose,
    owner,
    passing,
    queue_after,
    stale_label,
    stale_write_due,
    walks_past,
)
from toolbreaker.core._run.redact import redact
from toolbreaker.errors import JournalNotDurable, PolicyError, StoreUnavailable, StoreWriteUnknown
from toolbreaker.runtime._breaker._boundary import Boundary
from toolbreaker.runtime._clock import wall_ms
from toolbreaker.runtime._log import hook_failed, log
from toolbreaker.runtime._result import (
    degraded_result,
    dependency_stop_result,
    handoff_result,
    omitted_result,
    queued_result,
    stale_result,
)
from toolbreaker.stores._protocol import Records

if TYPE_CHECKING:
    import asyncio

    from toolbreaker.runtime._packet import StopPacket

__all__ = [
    "DEGRADE_SCHEMA",
    "HANDOFF_SPACE",
    "LIMIT_SCHEMA",
    "MAX_STALE_BYTES",
    "QUEUE_SCHEMA",
    "QUEUE_SPACE",
    "STALE_SPACE",
    "Degradation",
    "Notices",
    "check_store",
    "deferred_notice",
]

STALE_SPACE: Final = "toolbreaker.stale"
QUEUE_SPACE: Final = "toolbreaker.queue"
HANDOFF_SPACE: Final = "toolbreaker.handoff"
QUEUE_SCHEMA: Final = "toolbreaker.queue/v1"
#: The schema of a degradation choice given to listeners.
DEGRADE_SCHEMA: Final = "toolbreaker.degrade/v1"
#: The schema of a limit's answer given to listeners: ``saturated``, ``hung`` or
#: ``deferred``.
LIMIT_SCHEMA: Final = "toolbreaker.limit/v1"
#: The largest answer kept for ``stale``, in bytes of JSON; a larger one is not kept.
MAX_STALE_BYTES: Final = 64 * 1024
#: Modes that keep something in the store.
_STORED: Final = frozenset({"stale", "queue"})
_MAX_REMEMBERED: Final = 4096


def check_store(boundaries: Mapping[tuple[str, str], Boundary], store: object) -> None:
    """Refuse, at load, a row whose ``stale`` or ``queue`` mode the store cannot keep.

    Raises:
        PolicyError: naming ``<dependency>.<operation>.degrade``.
    """
    if isinstance(store, Records):
        return
    for (dependency, operation), row in boundaries.items():
        needs = _STORED.intersection(row.degrade)
        if needs:
            raise PolicyError(
                f"{dependency}.{operation}.degrade {sorted(needs)[0]!r} needs a store that "
                f"keeps records ({type(store).__name__} does not)",
                field=f"{dependency}.{operation}.degrade",
            )


Notice = dict[str, Any]


class Notices:
    """Listeners of notices: JSON-ready records of answers that are not transitions.

    A degradation choice (``toolbreaker.degrade/v1``), a ``saturated`` bulkhead, a call
    refused because calls ``hung`` past their deadline hold the workers, a ``deferred``
    call (``toolbreaker.limit/v1``). A listener only watches: one
    that raises is counted in :attr:`faults` and logged, masked; the answer stands. With
    no listener nothing is built (``bool(notices)`` is false).
    """

    __slots__ = ("_listeners", "_on_fault", "faults")

    def __init__(self, on_fault: Callable[[str, BaseException], None] | None = None) -> None:
        self._listeners: list[Callable[[Notice], None]] = []
        self._on_fault = on_fault
        self.faults = 0

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def add_listener(self, listener: Callable[[Notice], None]) -> Callable[[], None]:
        """Call ``listener(record)`` for every notice; returns a remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def follow(self, row: Notices) -> None:
        """Give every notice to ``row``'s listeners, those there are and those added later.

        A scoped breaker follows its row's notices: one list of listeners, so attaching
        to the row (or detaching) covers every tenant's breaker, made before or after.
        Faults stay counted where the notice was made.
        """
        self._listeners = row._listeners

    def emit(self, record: Notice) -> None:
        """Give ``record`` to every listener (each sees it, whatever the others do)."""
        for listener in tuple(self._listeners):
            try:
                listener(record)
            except Exception as exc:  # noqa: BLE001 - a listener never changes an answer
                if self._on_fault is not None:
                    self._on_fault(f"notice listener {listener!r}", exc)
                else:
                    self.faults += 1
                    hook_failed(f"notice listener {listener!r} failed; the answer stands", exc)


def deferred_notice(task: str, tool: str, *, limit: int, breaker: str | None) -> Notice:
    """The notice of a call deferred by the per-turn limit (masked)."""
    record: Notice = {
        "schema": LIMIT_SCHEMA,
        "kind": "deferred",
        "task": task,
        "tool": tool,
        "limit": limit,
        "at": wall_ms(),
    }
    if breaker is not None:
        record["breaker"] = breaker
    masked: Notice = redact(record)
    return masked


class Degradation:
    """One breaker's degradation chain, carried out.

    Attributes:
        chain: the row's modes, in order (empty: the plain unavailable result).
        tools: local tool callables by name; ``degraded`` runs ``tools[row.fallback]``
            (a :class:`~toolbreaker.Registry` shares its own with every breaker).
        counts: answers served per mode (also in the breaker's ``stats.degraded``).
        wall_clock: wall-clock milliseconds (stale ages; tests pass their own).
    """

    def __init__(self, boundary: Boundary, store: object, key: str, counts: dict[str, int]) -> None:
        self.boundary = boundary
        self.chain = boundary.degrade
        self.key = key
        self.tools: dict[str, Callable[..., Any]] = {}
        self.counts = counts
        self.faults = 0
        self.wall_clock: Callable[[], int] = wall_ms
        self._store = store if isinstance(store, Records) else None
        self._durable = False  # the store keeps queued work through a restart (checked)
        self._stale = "stale" in self.chain and self._store is not None
        self._every_ms = round(boundary.stale_every * 1000)
        self._written: dict[str, int] = {}
        self._lock = threading.Lock()
        self.notices = Notices(self._fault)
        if self._store is None and _STORED.intersection(self.chain):
            check_store({(boundary.dependency, boundary.operation): boundary}, store)

    @property
    def active(self) -> bool:
        """Whether the row names any mode."""
        return bool(self.chain)

    def add_listener(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``listener(record)`` for every choice made and every saturated answer.

        Returns a remover. A record is JSON-ready, of one of two schemas:

        - ``{"schema": "toolbreaker.degrade/v1", "breaker", "tool", "reason", "at",
          "mode"}``, plus ``skipped`` (the modes passed over, and why) and
          ``stale_age_ms`` when they apply; ``mode`` is ``None`` when the plain result
          was given;
        - ``{"schema": "toolbreaker.limit/v1", "kind": "saturated", "breaker",
          "dependency", "operation", "by", "limit", "retry_after_ms", "at"}``: a call
          answered ``saturated`` at once, ``by`` the ``bulkhead`` (``max_concurrent``,
          its ``limit``);
        - ``{"schema": "toolbreaker.limit/v1", "kind": "hung", "breaker", "dependency",
          "operation", "hung", "limit", "retry_after_ms", "at"}``: a sync call answered
          ``hung`` at once: ``hung`` calls of this breaker are still running past their
          deadline, as many as ``limit`` (``max_workers``, less the worker kept for
          probes unless the call was one) allows.

        ``at`` is wall-clock milliseconds. A listener that raises is counted in
        :attr:`faults` and logged.
        """
        return self.notices.add_listener(listener)

    def _record(self, choice: Choice, tool: str, reason: str, at: int) -> None:
        if not self.notices:
            return
        record = {
            "schema": DEGRADE_SCHEMA,
            "breaker": self.key,
            "tool": tool,
            "reason": reason,
            "at": at,
            **choice.to_dict(),
        }
        self.notices.emit(redact(record))  # masked where it is made, as every notice

    def hung(self, hung: int, limit: int, retry_after_ms: int | None) -> None:
        """Tell the listeners a call was answered ``hung`` (nothing without them)."""
        if not self.notices:
            return
        record = {
            "schema": LIMIT_SCHEMA,
            "kind": "hung",
            "breaker": self.key,
            "dependency": self.boundary.dependency,
            "operation": self.boundary.operation,
            "hung": hung,
            "limit": limit,
            "retry_after_ms": retry_after_ms,
            "at": self.wall_clock(),
        }
        self.notices.emit(redact(record))

    def saturated(self, by: str, limit: int | None, retry_after_ms: int | None) -> None:
        """Tell the listeners a call was answered ``saturated`` (nothing without them)."""
        if not self.notices:
            return
        record = {
            "schema": LIMIT_SCHEMA,
            "kind": "saturated",
            "breaker": self.key,
            "dependency": self.boundary.dependency,
            "operation": self.boundary.operation,
            "by": by,
            "limit": limit,
            "retry_after_ms": retry_after_ms,
            "at": self.wall_clock(),
        }
        self.notices.emit(redact(record))

    # -- stale: keep the last good answer ---------------------------------------------------

    def remember(self, tool: str, args: Mapping[str, Any], result: Any) -> None:
        """Keep ``result`` as the last good answer of ``tool(args)`` (``stale`` rows only)."""
        if not self._stale:
            return
        import json  # a stale row's: json loads with its first success, not at import

        try:
            # A cheap local key for the throttle: most successes stop here, with no digest.
            local = json.dumps([tool, args], sort_keys=True, default=repr)
        except (TypeError, ValueError):
            return  # arguments that are not JSON cannot be matched again
        now = self.wall_clock()
        with self._lock:
            if not stale_write_due(self._written.get(local), now, self._every_ms):
                return
            if len(self._written) >= _MAX_REMEMBERED:
                self._written.clear()
            self._written[local] = now
        key = _stale_key(self.key, tool, args)
        if key is None:
            return
        try:
            text = json.dumps(redact(result), default=str)
            if len(text) > MAX_STALE_BYTES:
                return
            kept = json.loads(text)
            assert self._store is not None
            self._store.record_put(STALE_SPACE, key, {"at": now, "tool": tool, "result": kept})
        except Exception as exc:  # noqa: BLE001 - keeping a copy never changes the outcome
            self._fault(f"keeping the last good answer of {self.key}", exc)

    async def aremember(self, tool: str, args: Mapping[str, Any], result: Any) -> None:
        """:meth:`remember` off the event loop."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        if self._stale:
            await asyncio.to_thread(self.remember, tool, args, result)

    # -- serving a mode -----------------------------------------------------------------

    def result(
        self,
        tool: str,
        args: Mapping[str, Any],
        plain: Any,
        *,
        idempotency_key: str | None = None,
        packet: Callable[[str], StopPacket] | None = None,
        task: str | None = None,
    ) -> Any:
        """What the caller gets instead of ``plain`` (a tool-unavailable result).

        ``plain`` comes back unchanged when the row has no chain, when it is not a
        tool-unavailable result (an error the model may retry, a success), when the
        reason is a passing one (``saturated``) or when no mode can be served.

        Args:
            tool: the tool the model called.
            args: its arguments (keywords).
            plain: the plain result.
            idempotency_key: the work's key (a run guard's write key); by default the
                ``idempotency_key`` argument, else a digest of the tool and arguments.
            packet: builds the stop packet for a reason (a run guard's own packet).
            task: the run guard's task: a drainer journals the queued work done there.
        """
        if not self.chain or not _unavailable(plain):
            return plain
        return self._serve(tool, args, plain, _Call(idempotency_key, packet, task), None)

    async def aresult(
        self,
        tool: str,
        args: Mapping[str, Any],
        plain: Any,
        *,
        idempotency_key: str | None = None,
        packet: Callable[[str], StopPacket] | None = None,
        task: str | None = None,
    ) -> Any:
        """:meth:`result` for the event loop: store round trips run in a worker thread.

        A coroutine degraded tool is awaited on this loop.
        """
        import asyncio  # the event loop's own: a sync program never loads asyncio

        if not self.chain or not _unavailable(plain):
            return plain
        loop = asyncio.get_running_loop()
        call = _Call(idempotency_key, packet, task)
        return await asyncio.to_thread(self._serve, tool, args, plain, call, loop)

    def _serve(
        self,
        tool: str,
        args: Mapping[str, Any],
        plain: dict[str, Any],
        call: _Call,
        loop: asyncio.AbstractEventLoop | None,
    ) -> Any:
        reason = str(plain.get("reason", "open"))
        kept = self._kept(tool, args) if "stale" in self.chain else None
        fallback = self.boundary.fallback
        offer = Offer(
            stale_at_ms=None if kept is None else kept[0],
            degraded=fallback is not None and fallback in self.tools,
            queue=self._store is not None,
        )
        while True:
            now = self.wall_clock()
            choice = choose(self.chain, offer, now_ms=now, max_stale_ms=self.boundary.max_stale_ms)
            mode = choice.mode
            if self.notices:
                self._record(choice, tool, reason, now)
            if mode is None:
                return plain
            try:
                answer = self._answer(choice, tool, args, reason, kept, call, loop)
            except Exception as exc:  # noqa: BLE001 - a mode that fails passes to the next
                self._fault(f"degrade mode {mode!r} of {self.key}", exc)
                if walks_past(mode, maybe_written=isinstance(exc, StoreWriteUnknown)):
                    offer = offer.without(mode)
                    continue
                # The item may be queued: a drainer may make it; nobody else may.
                key = self._work_key(call, tool, args)
                answer = queued_result(tool, self._queue_id(key), key, maybe=True)
            # The mode served: queuing work a person owns answers the handoff, and
            # handing off work a drainer owns answers "already queued".
            served = str(answer.get("degradation", mode))
            self.counts[served] = self.counts.get(served, 0) + 1
            return answer

    def _answer(  # noqa: PLR0917 - one dispatch over the modes
        self,
        choice: Choice,
        tool: str,
        args: Mapping[str, Any],
        reason: str,
        kept: tuple[int, Any] | None,
        call: _Call,
        loop: asyncio.AbstractEventLoop | None,
    ) -> dict[str, Any]:
        mode = choice.mode
        if mode == "omit":
            return omitted_result(tool, args, reason=reason)
        if mode == "stale":
            assert kept is not None
            assert choice.stale_age_ms is not None
            at, value = kept
            now = at + choice.stale_age_ms
            import datetime  # a stale answer's: datetime loads with the first

            when = datetime.datetime.fromtimestamp(at / 1000, tz=datetime.timezone.utc)
            return stale_result(
                tool,
                value,
                label=stale_label(at, now),
                as_of=when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                age_seconds=choice.stale_age_ms // 1000,
            )
        if mode == "degraded":
            fallback = self.boundary.fallback
            assert fallback is not None
            value = _run_local(self.tools[fallback], args, loop)
            return degraded_result(tool, fallback, value, note=self.boundary.fallback_note)
        key = self._work_key(call, tool, args)
        rid = "rc-" + sha256_hex([self.key, tool, key])[:20]
        checked = True
        if mode == "queue":
            queue_id, already, person = self._enqueue(tool, args, key, call.task)
            if not person:
                return queued_result(tool, queue_id, key, already=already)
            mode = "handoff"  # handed to a person before: theirs, never a drainer's
        else:
            queued, checked = self._claim_for_person(tool, key, rid, call.task)
            if queued is not None:
                return queued  # a drainer owns the work: never a person too
        detail = f"required tool {tool!r} is unavailable ({reason})"
        packet = call.packet
        built = packet(detail) if packet is not None else self._packet(tool, args, key, detail)
        if not checked:
            built = dataclasses.replace(
                built,
                next_safe_action=f"{built.next_safe_action}. The queue could not be "
                f"checked: before carrying it out, make sure {self._queue_id(key)} is not "
                "queued (toolbreaker drain --list), or a drain would make it too",
            )
        document = {**built.to_dict(), "reconciliation_id": rid}
        self._keep_handoff(rid, document)
        if mode == "handoff":
            return handoff_result(tool, rid, document)
        return dependency_stop_result(tool, rid, document)

    # -- store I/O ----------------------------------------------------------------------

    def _kept(self, tool: str, args: Mapping[str, Any]) -> tuple[int, Any] | None:
        key = _stale_key(self.key, tool, args)
        if key is None or self._store is None:
            return None
        try:
            found = self._store.record_get(STALE_SPACE, key)
        except Exception as exc:  # noqa: BLE001 - no kept answer: the chain goes on
            self._fault(f"reading the last good answer of {self.key}", exc)
            return None
        if found is None or not isinstance(found[0].get("at"), int) or "result" not in found[0]:
            return None
        at = found[0]["at"]
        limit = self.boundary.max_stale_ms
        if limit is not None and self.wall_clock() - at > limit:
            # Too old to be served ever again: the store does not keep it (best effort).
            try:
                self._store.record_delete(STALE_SPACE, key, version=found[1])
            except Exception as exc:  # noqa: BLE001 - a leftover record is only space
                self._fault(f"forgetting an expired answer of {self.key}", exc)
        return at, found[0]["result"]

    def _work_key(self, call: _Call, tool: str, args: Mapping[str, Any]) -> str:
        return call.idempotency_key or _idempotency_key(self.key, tool, args)

    def _queue_id(self, key: str) -> str:
        """The one queue record of the work under ``key`` (for this breaker)."""
        return "q-" + sha256_hex([self.key, key])[:24]

    def _enqueue(
        self, tool: str, args: Mapping[str, Any], key: str, task: str | None
    ) -> tuple[str, bool, bool]:
        """Save the work once per key.

        Returns ``(queue id, whether it was there already, whether a person owns it)``.

        Raises:
            StoreWriteUnknown: the store did not answer the write: it may be queued.
            StoreUnavailable: the work could not be queued.
        """
        store = self._store
        if store is None:
            raise StoreUnavailable("this store keeps no records")
        self._check_durable(store)
        queue_id = self._queue_id(key)
        import json  # a queued call's: json loads with the first

        item = {
            "schema": QUEUE_SCHEMA,
            "id": queue_id,
            "breaker": self.key,
            "dependency": self.boundary.dependency,
            "operation": self.boundary.operation,
            "tool": tool,
            "args": json.loads(json.dumps(dict(args))),  # must be JSON, as it will be run
            "idempotency_key": key,
            "timeout": self.boundary.timeout,
            "status": queue_after(None, "enqueue"),
            "queued_at": self.wall_clock(),
        }
        if task is not None:
            item["task"] = task
        if store.record_put(QUEUE_SPACE, queue_id, item, version=0) is not None:
            log.info("toolbreaker: queued %s for %s", queue_id, self.key)
            return queue_id, False, False
        # There already; unreadable, it is still there: "already queued".
        return queue_id, True, self._owner(store, queue_id) == "person"

    def _owner(self, store: Records, queue_id: str) -> str | None:
        """Who owns the existing record of ``queue_id`` (``None``: it cannot be read)."""
        try:
            found = store.record_get(QUEUE_SPACE, queue_id)
        except StoreUnavailable as exc:
            self._fault(f"reading the queue record {queue_id}", exc)
            return None
        return "queue" if found is None else owner(found[0])

    def _claim_for_person(
        self, tool: str, key: str, rid: str, task: str | None
    ) -> tuple[dict[str, Any] | None, bool]:
        """Before handing work to a person, make its queue record theirs.

        Any row of this breaker may have queued it (this sheet's, or an earlier one's).

        Returns ``(answer, checked)``: the "already queued" answer when a drainer owns the
        work (it was queued earlier, maybe by a write whose answer was lost), or ``None``
        to hand it off; ``checked`` is false when the queue could not be asked (the
        handoff goes on, and its packet says to look first).
        """
        store = self._store
        if store is None:
            return None, True  # no records: nothing can be queued here
        try:
            self._check_durable(store)
        except JournalNotDurable:
            return None, True  # the row cannot queue on this store: nothing to claim
        except StoreUnavailable as exc:
            self._fault(f"checking the queue of {self.key}", exc)
            return None, False
        queue_id = self._queue_id(key)
        marker = {
            "schema": QUEUE_SCHEMA,
            "id": queue_id,
            "breaker": self.key,
            "dependency": self.boundary.dependency,
            "operation": self.boundary.operation,
            "tool": tool,
            "idempotency_key": key,
            "status": queue_after(None, "hand-off"),
            "reconciliation_id": rid,
            "handed_off_at": self.wall_clock(),
        }
        if task is not None:
            marker["task"] = task
        try:
            # Masked where it is made: unlike queued work, nothing ever runs from it.
            written = store.record_put(QUEUE_SPACE, queue_id, redact(marker), version=0) is not None
        except StoreUnavailable as exc:
            self._fault(f"marking {queue_id} handed off", exc)
            return None, False
        if written:
            return None, True
        found = self._owner(store, queue_id)
        if found == "queue":
            return queued_result(tool, queue_id, key, already=True), True
        return None, found is not None  # a person's already: the same reference again

    def _check_durable(self, store: Records) -> None:
        """Refuse to queue work a shared store would forget on a restart.

        The model is told queued work will happen: it must survive the store's restart,
        as the run journal must. The same rule and the same opt-out
        (``volatile_journal=True``) as the journal's; a store in this process is as
        durable as the process, like its journal.

        Raises:
            JournalNotDurable: the store would forget the queue on a restart.
            StoreUnavailable: the store could not be asked.
        """
        if self._durable:
            return
        shared = getattr(store, "volatile_journal", None) is not None  # a SharedStore
        if shared and not store.volatile_journal:  # type: ignore[attr-defined]
            durable = getattr(store, "journal_durable", None)
            if not callable(durable) or not durable():
                raise JournalNotDurable(
                    type(store).__name__, "queued work needs the journal's durability"
                )
        self._durable = True

    def _packet(self, tool: str, args: Mapping[str, Any], key: str, detail: str) -> StopPacket:
        from toolbreaker.runtime._packet import StopPacket  # a hand-off's: loads with the first

        return StopPacket(
            task=key,
            condition="dependency-open",
            detail=detail,
            confirmed=(),
            uncertain=(),
            attempted={"tool": tool, "args": dict(args), "idempotency_key": key},
            counters={},
            next_safe_action=f"carry out {tool!r} by hand once {self.boundary.dependency!r} "
            "recovers, or tell the requester it was not done; check first that it was not "
            "done already (by its idempotency key)",
        )

    def _keep_handoff(self, rid: str, document: Mapping[str, Any]) -> None:
        """Keep the packet for the person who takes over (best effort: it is logged too)."""
        import json  # a hand-off's: json loads with the first

        log.warning("toolbreaker: handed off %s: %s", rid, json.dumps(document, default=str))
        if self._store is None:
            return
        try:
            self._store.record_put(HANDOFF_SPACE, rid, document)
        except Exception as exc:  # noqa: BLE001 - the packet is in the answer and the log
            self._fault(f"keeping the handoff packet {rid}", exc)

    def _fault(self, what: str, exc: BaseException) -> None:
        self.faults += 1
        hook_failed(f"{what} failed; the call's outcome stands", exc)


class _Call:
    """What the caller knows about the call beyond its tool and arguments."""

    __slots__ = ("idempotency_key", "packet", "task")

    def __init__(
        self,
        idempotency_key: str | None,
        packet: Callable[[str], StopPacket] | None,
        task: str | None,
    ) -> None:
        self.idempotency_key = idempotency_key
        self.packet = packet
        self.task = task


def _unavailable(result: Any) -> bool:
    return (
        isinstance(result, dict)
        and result.get("tool_unavailable") is True
        and not passing(result.get("reason"))
        and "degradation" not in result
    )


def _stale_key(breaker: str, tool: str, args: Mapping[str, Any]) -> str | None:
    try:
        return f"{breaker[:200]}|{sha256_hex([tool, dict(args)])}"
    except (TypeError, ValueError):
        return None  # arguments that are not JSON cannot be matched again


def _idempotency_key(breaker: str, tool: str, args: Mapping[str, Any]) -> str:
    given = args.get("idempotency_key")
    if isinstance(given, str) and given:
        return given
    try:
        return "k-" + sha256_hex([breaker, tool, dict(args)])[:32]
    except (TypeError, ValueError):
        raise StoreUnavailable("arguments that are not JSON cannot be queued") from None


def _run_local(
    fn: Callable[..., Any], args: Mapping[str, Any], loop: asyncio.AbstractEventLoop | None
) -> Any:
    """Run the degraded local tool; a coroutine is awaited on ``loop`` (from a worker)."""
    import asyncio  # the event loop's own: a sync program never loads asyncio

    value = fn(**args)
    if inspect.isawaitable(value):
        if loop is None:
            close = getattr(value, "close", None)
            if close is not None:
                close()
            raise PolicyError("an async degraded tool needs an async caller (abegin/acall)")
        return asyncio.run_coroutine_threadsafe(_awaited(value), loop).result()
    return value


async def _awaited(value: Any) -> Any:
    return await value
