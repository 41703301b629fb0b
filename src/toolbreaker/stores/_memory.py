"""The in-memory store: the reference every other store is tested against."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from toolbreaker.core._breaker.machine import apply
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import BreakerState, Event, Transition
from toolbreaker.stores._protocol import View
from toolbreaker.stores._records import check_version, decode_record, encode_record

__all__ = ["MemoryStore", "in_process"]


class MemoryStore:
    """Breaker states in this process, one lock for all of them.

    The lock is held only while the core computes one transition (microseconds), never
    while a protected call runs. It implements both the sync and the async protocol: it
    never blocks the event loop for longer than that.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: dict[str, View] = {}
        self._journal: dict[str, dict[str, dict[str, Any]]] = {}
        self._records: dict[str, dict[str, tuple[bytes, int]]] = {}
        # Per (space, key): the entries appended since the record was written, with the
        # version each made (see RecordLog).
        self._logs: dict[tuple[str, str], list[tuple[int, bytes]]] = {}

    def view(self, key: str) -> View:
        """The live view of ``key``: for this store, the state itself."""
        view = self._views.get(key)
        if view is None:
            with self._lock:
                view = self._views.setdefault(key, View(key, BreakerState()))
        return view

    def apply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Apply ``event`` to ``key`` under the lock."""
        view = self.view(key)
        with self._lock:
            state, records = apply(view.state or BreakerState(), event, policy)
            view.state = state
        return state, records

    async def aapply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Same as :meth:`apply`; the lock is never held across an await."""
        return self.apply(key, event, policy)

    def load(self, key: str, policy: Policy) -> BreakerState:
        """The current state of ``key``."""
        return self.view(key).state or BreakerState()

    def force(self, key: str, state: BreakerState) -> None:
        """Replace the state of ``key`` (tests and operator tooling only)."""
        view = self.view(key)
        with self._lock:
            view.state = state

    def journal_put(
        self, task: str, key: str, entry: Mapping[str, Any], *, only_new: bool = False
    ) -> bool:
        """Store a journal entry (a deep copy); with ``only_new``, only if absent."""
        with self._lock:
            entries = self._journal.setdefault(task, {})
            if only_new and key in entries:
                return False
            entries[key] = copy.deepcopy(dict(entry))
            return True

    def journal_durable(self) -> bool:
        """Always false: the journal lives and dies with this process."""
        return False

    def journal_get(self, task: str, key: str) -> dict[str, Any] | None:
        """A copy of the entry under ``(task, key)``."""
        with self._lock:
            entry = self._journal.get(task, {}).get(key)
            return copy.deepcopy(entry) if entry is not None else None

    def journal_entries(self, task: str) -> list[dict[str, Any]]:
        """Copies of every entry of ``task``, oldest first."""
        with self._lock:
            return [copy.deepcopy(e) for e in self._journal.get(task, {}).values()]

    # -- records ----------------------------------------------------------------------

    def record_get(self, space: str, key: str) -> tuple[dict[str, Any], int] | None:
        """A copy of the record and its version (see ``Records``)."""
        with self._lock:
            found = self._records.get(space, {}).get(key)
        return None if found is None else (decode_record(found[0], space, key, found[1]), found[1])

    def record_put(
        self, space: str, key: str, value: Mapping[str, Any], *, version: int | None = None
    ) -> int | None:
        """Write a copy of ``value`` if ``version`` matches; the new version or ``None``."""
        text = encode_record(space, key, value)
        check_version(version)
        with self._lock:
            records = self._records.setdefault(space, {})
            current = records.get(key, (b"", 0))[1]
            if version is not None and version != current:
                return None
            records[key] = (text, current + 1)
            self._logs.pop((space, key), None)
            return current + 1

    def record_append(
        self, space: str, key: str, entry: Mapping[str, Any], *, version: int
    ) -> int | None:
        """Append a copy of ``entry`` if the record is at ``version`` (see ``RecordLog``)."""
        text = encode_record(space, key, entry)
        check_version(version)
        with self._lock:
            records = self._records.setdefault(space, {})
            found = records.get(key)
            if found is None or found[1] != version:
                return None
            records[key] = (found[0], version + 1)
            self._logs.setdefault((space, key), []).append((version + 1, text))
            return version + 1

    def record_read_log(
        self, space: str, key: str
    ) -> tuple[dict[str, Any], int, list[tuple[int, dict[str, Any]]]] | None:
        """A copy of the record, its version and its entries (see ``RecordLog``)."""
        with self._lock:
            found = self._records.get(space, {}).get(key)
            log = list(self._logs.get((space, key), ()))
        if found is None:
            return None
        entries = [(at, decode_record(text, space, key, at)) for at, text in log]
        return decode_record(found[0], space, key, found[1]), found[1], entries

    def record_delete(self, space: str, key: str, *, version: int | None = None) -> bool:
        """Remove the record if ``version`` matches; whether it was removed."""
        check_version(version)
        with self._lock:
            records = self._records.get(space, {})
            found = records.get(key)
            if found is None or (version is not None and version != found[1]):
                return False
            del records[key]
            self._logs.pop((space, key), None)
            return True

    def record_list(self, space: str) -> list[tuple[str, dict[str, Any], int]]:
        """Copies of every record of ``space``, sorted by key."""
        with self._lock:
            found = sorted(self._records.get(space, {}).items())
        return [
            (key, decode_record(text, space, key, version), version)
            for key, (text, version) in found
        ]


def in_process(stores: Iterable[object]) -> bool:
    """Whether every one of ``stores`` lives in this process: nothing there can block.

    A :class:`~toolbreaker.stores.MemoryStore` answers at once; any other store (SQLite,
    Redis, PostgreSQL, a wrapper around one) may wait on I/O, so an event loop asks it
    from a worker thread.
    """
    return all(isinstance(store, MemoryStore) for store in stores)
