"""The store protocol: small on purpose, like an HTTP transport."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import BreakerState, Event, Transition

__all__ = [
    "FOREVER",
    "AsyncStore",
    "Journal",
    "Lease",
    "RecordLog",
    "Records",
    "Store",
    "View",
    "aapply",
]


class Lease:
    """Until when a view may admit calls on the state it holds (``time.monotonic_ns()``).

    A view of a shared store is a lease on the state: its feed renews the lease each time
    the store answers the feed's heartbeat, from the instant the heartbeat was *sent* (the
    store was alive after it), and ends it when the feed is lost. A call is admitted on a
    view only while the lease holds (``until_ns`` is past the instant of the call): a
    store that dies or freezes leaves no call admitted on a view past ``seconds`` after
    it last answered, however long the feed takes to notice. A rejection from a view
    needs no lease: refusing is what a dead store gets anyway.

    The shells compare ``until_ns`` (or ``until_ms``) with a clock reading they take
    anyway, inline on the quiet path, and :meth:`holds` elsewhere.

    Attributes:
        seconds: how long an answer keeps the lease.
        until_ns: the end of the lease, in ``time.monotonic_ns()``; 0 when it has none.
        until_ms: the same in milliseconds of the monotonic clock.
    """

    __slots__ = ("seconds", "until_ms", "until_ns")

    def __init__(self, seconds: float, *, until_ns: int = 0) -> None:
        self.seconds = seconds
        self.until_ns = until_ns
        self.until_ms = until_ns // 1_000_000

    def renew(self, sent_ns: int) -> None:
        """The store answered something sent at ``sent_ns`` (``time.monotonic_ns()``)."""
        until = sent_ns + round(self.seconds * 1e9)
        if until > self.until_ns:
            self.until_ms = until // 1_000_000  # the later of the two moves first
            self.until_ns = until

    def end(self) -> None:
        """No call is admitted on this lease until the store answers again."""
        self.until_ns = self.until_ms = 0

    def holds(self) -> bool:
        """Whether a call may be admitted on the lease now."""
        return time.monotonic_ns() < self.until_ns


#: The lease of a view its own process keeps (a memory store): it never ends.
FOREVER: Final = Lease(math.inf, until_ns=sys.maxsize)


class View:
    """A process-local view of one breaker's state, kept current by its store.

    Shells read ``view.state`` without a lock or a round trip to decide whether the core
    has already declared the next request and success no-ops (see
    ``is_quiet``) or the next request a local rejection. ``None``
    means the view knows nothing: ask the store. A request is admitted on the view only
    while its ``lease`` holds (:class:`Lease`; :data:`FOREVER` for a process-local view).

    ``tally``: where a shell counts the calls it decides that way, for a store that keeps
    a history (:class:`~toolbreaker.stores._tally.Tally`); ``None`` for one that keeps
    none (this process's memory).
    """

    __slots__ = ("key", "lease", "state", "tally")

    def __init__(self, key: str, state: BreakerState | None = None, lease: Lease = FOREVER) -> None:
        self.key = key
        self.state = state
        self.lease = lease
        self.tally: Any = None


@runtime_checkable
class Store(Protocol):
    """Applies events to persisted breaker states atomically."""

    def view(self, key: str) -> View:
        """The process-local view of ``key``; the same object for the same key."""
        ...

    def apply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Apply ``event`` to the state of ``key`` atomically and return the result.

        Raises:
            StoreUnavailable: the state could not be read or written; nothing was applied.
        """
        ...

    def load(self, key: str, policy: Policy) -> BreakerState:
        """The current state of ``key`` (closed if never seen; fail-closed if corrupt)."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The asyncio twin of :class:`Store`."""

    def view(self, key: str) -> View:
        """The process-local view of ``key``."""
        ...

    async def aapply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Apply ``event`` atomically without blocking the event loop."""
        ...


@runtime_checkable
class Journal(Protocol):
    """The run journal: what a task has done, by idempotency key.

    Entries are JSON-ready dicts. Run guards write a ``pending`` entry before a write
    runs and ``confirmed`` (or ``unknown`` ...) after, so a resumed task skips what is
    confirmed and never repeats a write whose outcome is unknown; the statuses are the
    write protocol's (:mod:`toolbreaker.core._run.protocol`). A write whose answer was
    lost raises :class:`~toolbreaker.errors.StoreWriteUnknown`: it may have been made.

    The stores shipped here also answer ``journal_durable()``: whether a restart of the
    store keeps every entry it confirmed. A shared store whose journal is not durable
    refuses journal calls with :class:`~toolbreaker.errors.JournalNotDurable` unless it
    was built with ``volatile_journal=True``.
    """

    def journal_put(
        self, task: str, key: str, entry: Mapping[str, Any], *, only_new: bool = False
    ) -> bool:
        """Store ``entry`` under ``(task, key)``; with ``only_new``, only if absent.

        Returns whether the entry was written.
        """
        ...

    def journal_get(self, task: str, key: str) -> dict[str, Any] | None:
        """The entry under ``(task, key)``, if any."""
        ...

    def journal_entries(self, task: str) -> list[dict[str, Any]]:
        """Every entry of ``task``, oldest first."""
        ...


@runtime_checkable
class Records(Protocol):
    """Small versioned JSON documents the fleet shares.

    Published policies, last good answers, leases (a health checker's, a bulkhead
    slot's), retry budgets. Records live in named spaces. Every write is one atomic
    compare-and-set on a version: ``version=None`` writes unconditionally,
    ``version=0`` only if the record is absent, ``version=n`` only if the record is at
    version ``n``. Versions start at 1 and grow by one per write. Records never take
    part in a breaker decision; a store that cannot reach them raises
    :class:`~toolbreaker.errors.StoreUnavailable`.
    """

    def record_get(self, space: str, key: str) -> tuple[dict[str, Any], int] | None:
        """The record and its version, or ``None`` when absent."""
        ...

    def record_put(
        self, space: str, key: str, value: Mapping[str, Any], *, version: int | None = None
    ) -> int | None:
        """Write ``value``; the new version, or ``None`` when ``version`` did not match."""
        ...

    def record_delete(self, space: str, key: str, *, version: int | None = None) -> bool:
        """Remove the record (only at ``version`` when given); whether it was removed."""
        ...

    def record_list(self, space: str) -> list[tuple[str, dict[str, Any], int]]:
        """Every record of ``space`` as ``(key, value, version)``, sorted by key."""
        ...


@runtime_checkable
class RecordLog(Records, Protocol):
    """Records that also keep, per record, the entries appended to it since it was written.

    What a record that changes a little on every write (a shared run's state) uses
    instead of writing the whole record each time: :meth:`record_append` adds one small
    entry and moves the record's version on by one, compare-and-set like a write; a
    reader gets the record as last written and the entries appended since
    (:meth:`record_read_log`) and folds them in itself. Writing the record
    (:meth:`~Records.record_put`) or removing it drops its entries: a writer compacts the
    log by writing what the entries made. :meth:`~Records.record_get` reads the record as
    last written, without its entries.
    """

    def record_append(
        self, space: str, key: str, entry: Mapping[str, Any], *, version: int
    ) -> int | None:
        """Append ``entry`` if the record is at ``version``; the new version, or ``None``.

        A record that is absent is never appended to (``None``).
        """
        ...

    def record_read_log(
        self, space: str, key: str
    ) -> tuple[dict[str, Any], int, list[tuple[int, dict[str, Any]]]] | None:
        """The record, its version and its entries, read at one instant.

        Each entry comes with the version its append made, oldest first; ``None`` when
        the record is absent.
        """
        ...


async def aapply(
    store: Store, key: str, event: Event, policy: Policy
) -> tuple[BreakerState, tuple[Transition, ...]]:
    """``store.aapply`` when the store has it, else ``store.apply`` in a worker thread.

    Either way the event loop never waits on the store.
    """
    import asyncio  # the event loop's own: a sync program never loads asyncio

    native = getattr(store, "aapply", None)
    if native is None:
        return await asyncio.to_thread(store.apply, key, event, policy)
    result: tuple[BreakerState, tuple[Transition, ...]] = await native(key, event, policy)
    return result
