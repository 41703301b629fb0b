"""Bulkheads: at most ``max_concurrent`` calls of one dependency in flight at once.

A call takes a slot before its breaker admits it (and before it takes a worker) and
gives it back when it is over: when its permit is settled, or, for a sync call that runs
on in a worker thread past its deadline, when it really returns. A call whose caller was
answered is done for the caller, but it still runs at the dependency, so it still
counts. A call that finds no slot free is answered at once (reason ``saturated``): never
queued, since a queue would start calls whose callers were answered long ago.

Theory of operation:

- **In a process**: a table of holders, each with the time its slot runs out (the call's
  deadline plus :data:`MARGIN_MS`). Taking a slot is one lock and a dict insert; a slot
  whose time ran out (a permit that was never settled) is taken back by the next caller,
  so a lost permit cannot shrink the bulkhead for good. Nothing waits. A slot of a call
  still running past its deadline (:meth:`Slot.hang`) never runs out: it comes back when
  the call returns.
- **Across processes**, when the breaker's store keeps ``Records``
  and is shared (not a :class:`~toolbreaker.stores.MemoryStore`): slot ``i`` of the
  dependency is the lease ``slot-<i>`` in the record space ``bulkhead/{<key>}`` (in the
  breaker's own cluster slot, see :func:`~toolbreaker.stores._records.breaker_space`), taken by
  compare-and-set (:func:`~toolbreaker.stores._records.acquire_lease`) for the call's
  deadline plus the margin, so a slot held by a killed process comes back when its lease
  runs out. The process's own table is asked first (no store round trip when this process
  alone fills the bulkhead); then one listing of the space finds the free (or expired)
  slots and at most three compare-and-sets take one. The async path takes and gives back
  leases in a worker thread: the event loop never waits on the store. The lease of a call
  still running past its deadline is renewed (for its deadline plus the margin, every
  :data:`RENEW_EVERY_S`, by one thread per bulkhead that ends when no call is hung) until
  the call returns, so other processes keep counting it; if this process dies, the lease
  runs out within that time of its last renewal.
- **A store fault** while taking a slot denies the call (``store-unavailable``, counted
  in ``BreakerStats.record_faults``): fail closed, never waved through. A fault while
  giving one back is counted and logged; the lease runs out on its own.

Lease times are on the breaker's clock (the Redis server's for a Redis store, else this
host's monotonic clock, which every process of the host shares).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from toolbreaker.errors import StoreUnavailable
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._process import process_token
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.stores._protocol import Records
from toolbreaker.stores._records import breaker_space

if TYPE_CHECKING:
    import asyncio

__all__ = ["BULKHEAD_SPACE", "MARGIN_MS", "RENEW_EVERY_S", "Bulkhead", "Slot", "shares_records"]

#: The record space of cross-process bulkhead slots.
BULKHEAD_SPACE: Final = "bulkhead"
#: How long a slot outlives its call's deadline before another caller may take it back.
MARGIN_MS: Final = 2_000
#: The reasons :meth:`Bulkhead.acquire` gives instead of a slot.
SATURATED: Final = "saturated"
_TRIES: Final = 3  # free slots tried per call before it counts as saturated
STORE_DOWN: Final = "store-unavailable"
#: How often the lease of a call still running past its deadline is renewed, in seconds:
#: well within the margin the lease has left at the deadline.
RENEW_EVERY_S: Final = MARGIN_MS / 2000
_FOREVER: Final = 1 << 62  # a hung call's slot in this process: until the call returns


def _forget_calls_in_child() -> None:
    # A forked child holds none of its parent's calls (and has a token of its own:
    # runtime/_process), so no slot it renews or gives back is its parent's.
    for bulkhead in list(_bulkheads):
        bulkhead._forget_calls()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_forget_calls_in_child)


def shares_records(store: object) -> bool:
    """Whether ``store`` keeps records other processes see (a shared store)."""
    return isinstance(store, Records) and not isinstance(store, MemoryStore)


class Slot:
    """One slot of a bulkhead, held by one call; give it back exactly once (idempotent)."""

    __slots__ = ("_bulkhead", "holder", "lease", "ttl", "version")

    def __init__(
        self,
        bulkhead: Bulkhead,
        holder: str,
        lease: str | None,
        version: int = 0,
        ttl: int = MARGIN_MS,
    ) -> None:
        self._bulkhead = bulkhead
        self.holder = holder
        self.lease = lease
        self.version = version  # the lease record's version as this holder wrote it
        self.ttl = ttl  # how long the lease lasts from a renewal

    def release(self) -> None:
        """Give the slot back (a store lease with one round trip)."""
        self._bulkhead._release(self)

    def hang(self) -> None:
        """The call runs on past its deadline: hold the slot until :meth:`release`.

        It no longer runs out in this process, and its store lease is renewed. Nothing
        when the slot was given back already (the call ended meanwhile).
        """
        self._bulkhead._hang(self)

    async def arelease(self) -> None:
        """Give the slot back; a store lease is given back in a worker thread."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        if self.lease is None:
            self._bulkhead._release(self)
        else:
            await asyncio.to_thread(self._bulkhead._release, self)


class Bulkhead:
    """The concurrency limit of one dependency (see the module docstring).

    Args:
        key: the breaker key.
        limit: the most calls in flight at once (``max_concurrent``).
        store: the breaker's store; its records hold the slots when it is shared.
        clock: integer milliseconds (the breaker's clock).
        on_fault: called (with no argument) for each store fault, to count it.
    """

    def __init__(
        self,
        key: str,
        limit: int,
        store: object,
        clock: Callable[[], int],
        on_fault: Callable[[], None] = lambda: None,
    ) -> None:
        self.key = key
        self.limit = limit
        self.clock = clock
        self._records: Records | None = store if shares_records(store) else None  # type: ignore[assignment]
        self._on_fault = on_fault
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._running = 0  # slots of calls that give them back in a ``finally``
        self._ids = itertools.count(1)
        self.space = breaker_space(BULKHEAD_SPACE, key)  # in the breaker's cluster slot
        self._names = tuple(f"slot-{i}" for i in range(limit))
        self._hung: dict[str, Slot] = {}  # leases of calls running past their deadline
        self._renewer: threading.Thread | None = None
        self._renewing = threading.Lock()  # a renewal and the hung lease's release
        _bulkheads.add(self)

    @property
    def shared(self) -> bool:
        """Whether the slots are leases in a shared store."""
        return self._records is not None

    @property
    def in_use(self) -> int:
        """Slots this process holds now (expired ones included until taken back)."""
        return len(self._held) + self._running

    @property
    def hung(self) -> int:
        """Slots this process holds for calls still running past their deadline."""
        with self._lock:
            return sum(until == _FOREVER for until in self._held.values())

    def enter(self) -> bool:
        """Take a slot of this process for a call that surely gives it back (``leave``).

        The quiet fast path of ``call``/``acall`` does, in a ``finally``: no lease, no
        time, one lock. Only for a bulkhead that is not shared.
        """
        with self._lock:
            if self._running + len(self._held) >= self.limit and not self._expire():
                return False
            self._running += 1
            return True

    def leave(self) -> None:
        """Give back a slot taken with :meth:`enter`."""
        with self._lock:
            self._running -= 1

    def acquire(self, deadline_ms: int) -> Slot | str:
        """A slot for a call with this deadline, or why not (``saturated`` or a store fault)."""
        ttl = deadline_ms + MARGIN_MS
        holder = self._local(ttl)
        if holder is None:
            return SATURATED
        if self._records is None:
            return Slot(self, holder, None)
        return self._shared(holder, ttl)

    async def aacquire(self, deadline_ms: int) -> Slot | str:
        """:meth:`acquire` for the event loop: a store is asked in a worker thread."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        ttl = deadline_ms + MARGIN_MS
        holder = self._local(ttl)
        if holder is None:
            return SATURATED
        if self._records is None:
            return Slot(self, holder, None)
        taking = asyncio.ensure_future(asyncio.to_thread(self._shared, holder, ttl))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            # The caller is gone; a lease taken meanwhile is given back, not left to expire.
            taking.add_done_callback(self._abandoned)
            raise

    def _abandoned(self, taking: asyncio.Future[Slot | str]) -> None:
        if taking.cancelled() or taking.exception() is not None:
            return
        slot = taking.result()
        if isinstance(slot, Slot):
            threading.Thread(target=slot.release, name="toolbreaker-bulkhead", daemon=True).start()

    def _local(self, ttl: int) -> str | None:
        """Take a slot of this process's table; ``None`` when all are held and live."""
        now = self.clock()
        with self._lock:
            held = self._held
            if len(held) + self._running >= self.limit and not self._expire():
                return None
            holder = f"{process_token()}.{next(self._ids)}"
            held[holder] = now + ttl
            return holder

    def _expire(self) -> bool:
        """Take back slots whose time ran out (lock held); whether one is free now."""
        now = self.clock()
        held = self._held
        for name, until in tuple(held.items()):
            if until <= now:
                del held[name]  # a permit never settled: its time ran out
        return len(held) + self._running < self.limit

    def _shared(self, holder: str, ttl: int) -> Slot | str:
        """Take a free lease of the store: one listing, then a compare-and-set or two.

        A slot is free when its lease is absent or its time ran out (the lease rule of
        :func:`~toolbreaker.stores._records.acquire_lease`); the compare-and-set is made
        on the version the listing showed, so a slot taken meanwhile is never taken twice.
        """
        records = self._records
        assert records is not None
        try:
            now = self.clock()
            versions = {}
            for name, value, version in records.record_list(self.space):
                until = value.get("until")
                versions[name] = -1 if isinstance(until, int) and until > now else version
            free = [name for name in self._names if versions.get(name, 0) >= 0]
            import random  # a shared bulkhead's: random loads with its first permit

            random.shuffle(free)
            wanted = {"holder": holder, "until": now + ttl}
            for name in free[:_TRIES]:
                written = records.record_put(
                    self.space, name, wanted, version=versions.get(name, 0)
                )
                if written is not None:
                    return Slot(self, holder, name, written, ttl)
        except (StoreUnavailable, NotImplementedError, ValueError, TypeError) as exc:
            self._forget(holder)
            self._on_fault()
            hook_failed(f"the bulkhead of {self.key} could not reach its store; denied", exc)
            return STORE_DOWN
        self._forget(holder)
        return SATURATED

    def _forget(self, holder: str) -> None:
        with self._lock:
            self._held.pop(holder, None)

    def _release(self, slot: Slot) -> None:
        with self._lock:
            self._held.pop(slot.holder, None)
            renewed = self._hung.pop(slot.holder, None) is not None
            lease, slot.lease = slot.lease, None  # given back once
        if lease is None or self._records is None:
            return
        if renewed:
            with self._renewing:  # after a renewal in flight: its version is the one
                self._delete(slot, lease)
        else:
            self._delete(slot, lease)

    def _delete(self, slot: Slot, lease: str) -> None:
        assert self._records is not None
        try:
            # One round trip, and only the version this holder wrote: a successor that
            # took the slot over after its time ran out keeps it.
            self._records.record_delete(self.space, lease, version=slot.version)
        except (StoreUnavailable, NotImplementedError, ValueError, TypeError) as exc:
            self._on_fault()
            hook_failed(
                f"the bulkhead of {self.key} could not give back {lease}; it expires on its own",
                exc,
            )

    def _hang(self, slot: Slot) -> None:
        """Hold ``slot`` until it is released: its call runs on past its deadline."""
        with self._lock:
            if slot.holder not in self._held:
                return  # the call is over: given back already
            self._held[slot.holder] = _FOREVER
            if slot.lease is None:
                return
            self._hung[slot.holder] = slot
            if self._renewer is None:
                self._renewer = threading.Thread(
                    target=self._renew, name=f"toolbreaker-bulkhead-{self.key}", daemon=True
                )
                self._renewer.start()

    def _renew(self) -> None:
        """The renewer thread: renew every hung lease, until no call is hung."""
        while True:
            time.sleep(RENEW_EVERY_S)
            with self._lock:
                hung = list(self._hung.values())
                if not hung:
                    self._renewer = None
                    return
            for slot in hung:
                with self._renewing:
                    self._renew_one(slot)

    def _renew_one(self, slot: Slot) -> None:
        """One renewal of a hung call's lease (``_renewing`` held)."""
        records, lease = self._records, slot.lease
        if records is None or lease is None:
            return  # given back meanwhile
        try:
            wanted = {"holder": slot.holder, "until": self.clock() + slot.ttl}
            written = records.record_put(self.space, lease, wanted, version=slot.version)
        except (StoreUnavailable, NotImplementedError, ValueError, TypeError) as exc:
            self._on_fault()
            hook_failed(f"the bulkhead of {self.key} could not renew {lease}; retried", exc)
            return
        if written is not None:
            slot.version = written
            return
        # Its time ran out before this renewal (the store was out of reach for that long)
        # and another holder took it: other processes no longer count this call.
        with self._lock:
            self._hung.pop(slot.holder, None)
        slot.lease = None
        hook_failed(
            f"the bulkhead of {self.key} lost {lease} of a call still running past its "
            "deadline; other processes no longer count it",
            None,
        )

    def _forget_calls(self) -> None:
        """In a forked child: the parent's calls (and its renewer) do not exist here."""
        self._lock = threading.Lock()
        self._renewing = threading.Lock()
        self._held = {}
        self._running = 0
        self._hung = {}
        self._renewer = None


_bulkheads: weakref.WeakSet[Bulkhead] = weakref.WeakSet()
