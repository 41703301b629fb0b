"""The shell every shared store shares, like httpx's ``BaseClient``.

SQLite, Redis and PostgreSQL differ only in their round trips. The order of the steps
around them is written once, here:

1. the view of the key remembers the policy it is applied with;
2. a trusted view answers an event the core says changes nothing (no round trip);
3. a store known to be down fails at once (the backoff after a failure);
4. a feed lost to a fork is started again (2 to 4: ``_begin``);
5. the subclass's atomic round trip, which lets the core's ``apply()`` decide.

The journal is shared the same way: the durability check at first use, canonical JSON
on the way in, validation on the way out. So are records: names, size and version
checked on the way in, JSON and version validated on the way out, one atomic
compare-and-set per write in the subclass. A subclass provides the ``_``-methods below.

A journal or record write that fails after its request may have reached the server (a
reply slower than the timeout, a connection lost after sending) raises
:class:`~toolbreaker.errors.StoreWriteUnknown`: the write may have been made. One that
certainly was not (no connection, a statement the server refused) raises a plain
:class:`~toolbreaker.errors.StoreUnavailable`. The subclass tells which (it knows its
driver); :meth:`SharedStore._write_fault` builds the error.

History: every apply that writes a new state appends its records' entries
(:func:`~toolbreaker.core._breaker.history.history_texts`) to the store's history in the
same atomic step, so the history is the store's order of a breaker's states, and fails
or is unknown with the state write (there is no second failure path). The calls that
change nothing are counted by the view's tally (:mod:`~toolbreaker.stores._tally`) and
written as a ``quiet`` entry with that write too, in the same step; a breaker this
process does not write for a while gets its counts appended on their own (one short
atomic append, :meth:`SharedStore._history_append`) by a thread, every
:data:`QUIET_FLUSH_S` seconds and when the store closes. The store records the version
each write made with its entries. ``history=0`` keeps none; :meth:`SharedStore.history`
reads it.

The stores whose server only guards a write (Redis, PostgreSQL) share the
compare-and-set loop too, :class:`CompareAndSetStore`: the core computes the next state
from the version this process last saw, the server writes it only if that version is
still current, and on a conflict the loop computes again from what the server answered
(bounded, then ``StoreUnavailable``). The loop is free of I/O (a generator that yields a
:class:`Write` and receives a :class:`Reply`), so the blocking and the asyncio round
trips run the same one; a subclass only sends one write (``_send``, ``_asend``) and says
how long to pause after a conflict (``_pause``).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping
from typing import Any, Final, NamedTuple, TypeVar

from toolbreaker.core._breaker.history import DEFAULT_HISTORY, history_texts, in_store_order
from toolbreaker.core._breaker.machine import apply as core_apply
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import BreakerState, Event, Transition
from toolbreaker.core._canonical import canonical_json
from toolbreaker.errors import JournalNotDurable, PolicyError, StoreUnavailable, StoreWriteUnknown
from toolbreaker.stores._records import check_version, decode_record, encode_record
from toolbreaker.stores._tally import Flusher
from toolbreaker.stores._views import (
    DEFAULT_VIEW_LEASE,
    SharedView,
    ViewBook,
    decode_state,
    encode_state,
    on_fork,
    quiet,
)

__all__ = [
    "QUIET_FLUSH_S",
    "READ",
    "RETIME",
    "VERIFIED",
    "WRITTEN",
    "CompareAndSetStore",
    "Reply",
    "SharedStore",
    "Write",
    "decode_entry",
]

_S = TypeVar("_S", bound="SharedStore")
Result = tuple[BreakerState, tuple[Transition, ...]]

#: Seconds between two appends of a breaker's quiet counts that no write carried.
QUIET_FLUSH_S: Final = 1.0


class SharedStore(ABC):
    """Breaker states, a run journal and records shared between processes: the common shell.

    Subclasses set ``_what`` (the store, described without credentials, for messages)
    and implement the round trips. Every round trip that fails must call
    ``self._book.fail()`` (breaker state) or :meth:`_journal_fault` (journal) before it
    raises :class:`~toolbreaker.errors.StoreUnavailable`.
    """

    _what: str

    def __init__(
        self,
        *,
        backoff: float,
        volatile_journal: bool,
        history: int = DEFAULT_HISTORY,
        view_lease: float = DEFAULT_VIEW_LEASE,
    ) -> None:
        if type(history) is not int or history < 0:
            raise PolicyError(
                f"history must be a whole number of entries >= 0, got {history!r}",
                field="history",
            )
        if isinstance(view_lease, bool) or not isinstance(view_lease, (int, float)):
            raise PolicyError(
                f"view_lease must be a number of seconds, got {view_lease!r}", field="view_lease"
            )
        if not 0.01 <= view_lease <= 3600:
            raise PolicyError(
                f"view_lease must be between 0.01 and 3600 seconds, got {view_lease!r}",
                field="view_lease",
            )
        #: Transition entries kept (0: none); see the subclass for what it counts.
        self.history_retain = history
        #: Seconds a view is trusted after the store last answered its feed (the bound on
        #: how long a dead store goes unnoticed by the calls).
        self.view_lease = float(view_lease)
        self._book = ViewBook(backoff, self.view_lease)
        self._closed = False
        self._closed_for_good = False
        #: Who counts quiet calls in this process (:class:`~toolbreaker.stores._tally.Tally`).
        self.tally_source = _source()
        self._flusher = Flusher(self._flush_quiet, QUIET_FLUSH_S)
        self._refeed = False
        self.volatile_journal = bool(volatile_journal)
        self._journal_checked = False
        on_fork(self, "_forked")

    # -- protocol ---------------------------------------------------------------------

    def view(self, key: str) -> SharedView:
        """The process-local view of ``key``, kept current by the store's feed."""
        view = self._book.entry(key)
        if not view.wanted:
            view.wanted = True
            self._watch(view)
            if self.history_retain:
                self._flusher.start()
        return view

    def apply(self, key: str, event: Event, policy: Policy) -> Result:
        """Apply ``event`` to ``key`` atomically; the core's ``apply()`` decides.

        Raises:
            StoreUnavailable: the store is unreachable, too slow, or answered nonsense;
                nothing was applied.
        """
        view, local = self._begin(key, event, policy)
        return local if local is not None else self._round_trip(view, event, policy)

    async def aapply(self, key: str, event: Event, policy: Policy) -> Result:
        """Same as :meth:`apply`, without blocking the event loop."""
        view, local = self._begin(key, event, policy)
        return local if local is not None else await self._around_trip(view, event, policy)

    def load(self, key: str, policy: Policy) -> BreakerState:
        """The current state of ``key`` (closed if never seen; fail-closed if corrupt).

        Raises:
            StoreUnavailable: the store is unreachable, too slow, or answered nonsense.
        """
        view = self._book.entry(key)
        view.policy = policy
        if view.state is not None:
            return view.state
        self._book.check(self._what, key)
        return self._read(view, policy)

    # -- history ------------------------------------------------------------------------

    def history(self, key: str | None = None) -> list[dict[str, Any]]:
        """Every transition entry the store keeps (of ``key``, or all), in the store's order.

        Each entry is a ``toolbreaker.stream/v1`` transition or ``quiet`` entry with
        ``seq``, the store's sequence for it (increasing per breaker; see the store for
        the order across breakers), and ``version``, the version of the state the write
        that appended it made. An entry that does not decode is skipped, as a stream's is.

        Raises:
            StoreUnavailable: the store is unreachable.
        """
        out: list[dict[str, Any]] = []
        for seq, raw, version in self._history_read(key):
            try:
                entry = json.loads(raw) if isinstance(raw, (str, bytes)) else None
            except (ValueError, RecursionError):
                entry = None
            if isinstance(entry, dict):
                entry["seq"] = seq
                if version is not None:
                    entry["version"] = version
                out.append(entry)
        return out

    def _history_texts(self, records: tuple[Transition, ...]) -> tuple[str, ...]:
        """What an apply that writes a new state appends to the history."""
        return history_texts(records, time.time()) if self.history_retain else ()

    def _quiet_entry(self, view: SharedView) -> tuple[tuple[str, ...], Any]:
        """The view's quiet counts as an entry to write with a write (if they changed).

        Returns the texts to append and the mark for the tally's ``wrote``.
        """
        if not self.history_retain:
            return (), None
        built = view.tally.entry(view.key, self.tally_source)
        return ((), None) if built is None else ((built[0],), built[1])

    def _flush_quiet(self) -> None:
        """Append the changed quiet counts of every view (the flusher's work; never raises)."""
        for view in self._book.views():
            tally = view.tally
            if self._closed_for_good or not tally.changed():
                continue
            built = tally.entry(view.key, self.tally_source)
            if built is None:
                continue
            try:
                self._book.check(self._what, view.key)
                self._history_append(view.key, built[0])
            except StoreUnavailable:
                return  # the store is down: written with a later write, or the next time
            tally.wrote(built[1], view.version)

    def _close_quiet(self) -> None:
        """Stop the flusher and append what is left: called first by each ``close()``."""
        self._flusher.stop()
        if self.history_retain:
            self._flush_quiet()
        self._closed_for_good = True

    # -- journal ------------------------------------------------------------------------

    def journal_put(
        self, task: str, key: str, entry: Mapping[str, Any], *, only_new: bool = False
    ) -> bool:
        """Store ``entry`` under ``(task, key)`` atomically; with ``only_new``, only if absent.

        Returns whether the entry was written.

        Raises:
            StoreWriteUnknown: the store's answer was lost: the entry may be written.
            StoreUnavailable: the store is unreachable or too slow; nothing was written.
            JournalNotDurable: the store would forget the entry on a restart (see
                ``volatile_journal``).
        """
        self._journal_ready(task)
        text = canonical_json(dict(entry)).decode("utf-8")
        return self._journal_write(task, key, text, only_new=only_new)

    def journal_get(self, task: str, key: str) -> dict[str, Any] | None:
        """The entry under ``(task, key)``, if any.

        Raises:
            StoreUnavailable: the store is unreachable, or the entry does not validate.
            JournalNotDurable: the store would forget the journal on a restart.
        """
        self._journal_ready(task)
        raw = self._journal_read(task, key)
        return None if raw is None else decode_entry(raw, task)

    def journal_entries(self, task: str) -> list[dict[str, Any]]:
        """Every entry of ``task``, oldest first.

        Raises:
            StoreUnavailable: the store is unreachable, or an entry does not validate.
            JournalNotDurable: the store would forget the journal on a restart.
        """
        self._journal_ready(task)
        return [decode_entry(raw, task) for raw in self._journal_read_all(task)]

    def journal_durable(self) -> bool:
        """Whether a restart of the store keeps every journal entry it confirmed.

        Raises:
            StoreUnavailable: the store could not be asked.
        """
        return self._durability("journal")[0]

    # -- records ------------------------------------------------------------------------

    def record_get(self, space: str, key: str) -> tuple[dict[str, Any], int] | None:
        """The record and its version (see ``Records``).

        Raises:
            RecordCorrupt: the record is there but does not decode.
            StoreUnavailable: the store is unreachable, or the record does not validate.
        """
        encode_record(space, key, {})
        found = self._record_read(space, key)
        if found is None:
            return None
        version = _stored_version(found[1], space)
        return decode_record(found[0], space, key, version), version

    def record_put(
        self, space: str, key: str, value: Mapping[str, Any], *, version: int | None = None
    ) -> int | None:
        """Write ``value`` atomically if ``version`` matches; the new version or ``None``.

        Raises:
            StoreWriteUnknown: the store's answer was lost: the record may be written.
            StoreUnavailable: the store is unreachable or too slow; nothing was written.
        """
        text = encode_record(space, key, value)
        check_version(version)
        written = self._record_write(space, key, text.decode("utf-8"), version)
        return None if written is None else _stored_version(written, space)

    def record_append(
        self, space: str, key: str, entry: Mapping[str, Any], *, version: int
    ) -> int | None:
        """Append ``entry`` if the record is at ``version``; the new version or ``None``.

        See :class:`~toolbreaker.stores._protocol.RecordLog`.

        Raises:
            StoreWriteUnknown: the store's answer was lost: the entry may be appended.
            StoreUnavailable: the store is unreachable or too slow; nothing was appended.
        """
        text = encode_record(space, key, entry)
        check_version(version)
        written = self._record_append(space, key, text.decode("utf-8"), version)
        return None if written is None else _stored_version(written, space)

    def record_read_log(
        self, space: str, key: str
    ) -> tuple[dict[str, Any], int, list[tuple[int, dict[str, Any]]]] | None:
        """The record, its version and the entries appended since it was written.

        See :class:`~toolbreaker.stores._protocol.RecordLog`.

        Raises:
            RecordCorrupt: the record or an entry is there but does not decode.
            StoreUnavailable: the store is unreachable, or the record does not validate.
        """
        encode_record(space, key, {})
        found = self._record_log_read(space, key)
        if found is None:
            return None
        raw, stored, log = found
        version = _stored_version(stored, space)
        entries = []
        for at, text in log:
            made = _stored_version(at, space)
            entries.append((made, decode_record(text, space, key, made)))
        return decode_record(raw, space, key, version), version, entries

    def record_delete(self, space: str, key: str, *, version: int | None = None) -> bool:
        """Remove the record if ``version`` matches; whether it was removed.

        Raises:
            StoreWriteUnknown: the store's answer was lost: the record may be removed.
            StoreUnavailable: the store is unreachable or too slow; nothing was removed.
        """
        encode_record(space, key, {})
        check_version(version)
        return self._record_remove(space, key, version)

    def record_list(self, space: str) -> list[tuple[str, dict[str, Any], int]]:
        """Every record of ``space``, sorted by key.

        Raises:
            StoreUnavailable: the store is unreachable, or a record does not validate.
        """
        encode_record(space, "-", {})
        found = sorted(self._record_read_all(space), key=lambda row: row[0])
        listed = [(key, raw, _stored_version(version, space)) for key, raw, version in found]
        return [
            (key, decode_record(raw, space, key, version), version) for key, raw, version in listed
        ]

    # -- lifecycle ----------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Stop the feed and close the connections."""

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- what a subclass provides --------------------------------------------------------

    @abstractmethod
    def _watch(self, view: SharedView) -> None:
        """The feed should deliver the changes of ``view``'s key from now on."""

    @abstractmethod
    def _resume_feed(self) -> None:
        """Start the feed again in a forked child (views it delivered are wanted again)."""

    @abstractmethod
    def _round_trip(self, view: SharedView, event: Event, policy: Policy) -> Result:
        """Apply ``event`` atomically and :meth:`ViewBook.learn` what the store said."""

    async def _around_trip(self, view: SharedView, event: Event, policy: Policy) -> Result:
        """The asyncio round trip; by default the synchronous one in a worker thread."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        return await asyncio.to_thread(self._round_trip, view, event, policy)

    @abstractmethod
    def _read(self, view: SharedView, policy: Policy) -> BreakerState:
        """Read the state of ``view``'s key (fail closed)."""

    @abstractmethod
    def _history_read(self, key: str | None) -> list[tuple[str, object, int | None]]:
        """``(seq, raw entry text, version)`` of every entry kept (of ``key``), in order.

        ``version`` is the version of the state the write that appended it made (``None``
        for an entry of a version of the store that did not record it).
        """

    @abstractmethod
    def _history_append(self, key: str, text: str) -> None:
        """Append one entry to ``key``'s history, atomically, without a state change.

        Raises:
            StoreUnavailable: nothing was appended (or it may have been: an entry of
                running totals written twice counts once).
        """

    @abstractmethod
    def _journal_write(self, task: str, key: str, text: str, *, only_new: bool) -> bool:
        """Write one entry's canonical JSON ``text`` atomically."""

    @abstractmethod
    def _journal_read(self, task: str, key: str) -> object:
        """The raw text of one entry, or ``None``."""

    @abstractmethod
    def _journal_read_all(self, task: str) -> list[object]:
        """The raw texts of every entry of ``task``, oldest first."""

    @abstractmethod
    def _durability(self, task: str) -> tuple[bool, str]:
        """Whether the journal survives a restart of the store, and if not, why."""

    @abstractmethod
    def _record_read(self, space: str, key: str) -> tuple[object, int] | None:
        """The raw text and version of one record, or ``None``."""

    @abstractmethod
    def _record_write(self, space: str, key: str, text: str, version: int | None) -> int | None:
        """Compare-and-set one record's text; the new version, or ``None`` on a mismatch."""

    @abstractmethod
    def _record_append(self, space: str, key: str, text: str, version: int) -> int | None:
        """Append one entry's text if the record is at ``version``; the new version or ``None``.

        Writing the record (:meth:`_record_write`) or removing it drops its entries.
        """

    @abstractmethod
    def _record_log_read(
        self, space: str, key: str
    ) -> tuple[object, int, list[tuple[int, object]]] | None:
        """The raw text and version of one record and ``(version, raw text)`` of its entries."""

    @abstractmethod
    def _record_remove(self, space: str, key: str, version: int | None) -> bool:
        """Remove one record if ``version`` matches (``None``: any); whether it was."""

    @abstractmethod
    def _record_read_all(self, space: str) -> list[tuple[str, object, int]]:
        """``(key, raw text, version)`` of every record of ``space``."""

    # -- shared internals -----------------------------------------------------------------

    def _begin(self, key: str, event: Event, policy: Policy) -> tuple[SharedView, Result | None]:
        """The view of ``key`` and the answer it gives without a round trip, if any.

        Without one: raise while the store is backing off, restart a feed lost to a fork.
        """
        view = self._book.entry(key)
        view.policy = policy
        local = self._book.answer(view, event, policy)
        if local is None:
            self._book.check(self._what, key)
            if self._refeed:
                self._refeed = False
                self._resume_feed()
        return view, local

    def _journal_ready(self, task: str) -> None:
        """Refuse a journal the store would forget; checked once until a journal fault."""
        if self._journal_checked or self.volatile_journal:
            return
        durable, reason = self._durability(task)
        if not durable:
            raise JournalNotDurable(self._what, reason)
        self._journal_checked = True

    def _journal_fault(
        self, task: str, exc: BaseException, *, maybe_written: bool = False
    ) -> StoreUnavailable:
        """A journal round trip failed: the store may come back configured otherwise."""
        self._journal_checked = False
        return self._write_fault(task, exc, maybe_written=maybe_written)

    def _write_fault(
        self, name: str, exc: BaseException, *, maybe_written: bool
    ) -> StoreUnavailable:
        """The error of a failed round trip on ``name`` (a task, a space, a key).

        ``maybe_written``: it was a write whose request may have reached the server.
        """
        kind = StoreWriteUnknown if maybe_written else StoreUnavailable
        what = "did not answer a write that may have been made" if maybe_written else "unavailable"
        return kind(f"{self._what} {what}: {exc}", dependency=name)

    def _forked(self) -> None:
        """In a child right after fork: distrust every view; subclasses drop their feed."""
        self._book.forked()
        self.tally_source = _source()
        self._flusher.forked()
        if self.history_retain and self._book.views():
            self._flusher.start()


#: A compare-and-set wrote the new state.
WRITTEN: Final = 1
#: The state was unchanged and still current: nothing to write.
VERIFIED: Final = 2
#: The version matched, but a later event wrote the state: compute again at its instant.
RETIME: Final = 5


class Write(NamedTuple):
    """One compare-and-set the loop asks a store to send.

    Attributes:
        expected: the version ``payload`` was computed from; -1 asks only for the current
            state (a read, never a write).
        payload: the new state's canonical JSON; empty when the state is unchanged (the
            server then only confirms that ``expected`` is still current).
        state: the state ``payload`` encodes (``None`` for a read).
        attempt: which try of the event this is, from 0 (-1 for a read).
        pause: seconds to wait before sending (after a conflict).
        writer: this event's number in the process (the same for every try of it).
        history: the entries to append to the history if ``payload`` is written.
        at: the instant of the event ``payload`` was computed with; the server refuses
            (:data:`RETIME`) a write of an event earlier than the one that wrote the
            state (see :func:`~toolbreaker.core._breaker.history.in_store_order`).
    """

    expected: int
    payload: str
    state: BreakerState | None
    attempt: int
    pause: float = 0.0
    writer: int = 0
    history: tuple[str, ...] = ()
    at: int = 0


#: The write that only reads the current state.
READ: Final = Write(-1, "", None, -1)


class Reply(NamedTuple):
    """What the server answered to a :class:`Write`.

    Attributes:
        status: :data:`WRITTEN`, :data:`VERIFIED`, or anything else: a conflict (or the
            answer to a read), with the current state.
        version: the current version (0: the key was never written).
        state: the current state's JSON text, for a conflict or a read.
        at: the instant of the event that wrote the current state (0: not known).
    """

    status: int
    version: int
    state: str | bytes | None
    at: int = 0


_Loop = Generator[Write, Reply, tuple[BreakerState, tuple[Transition, ...]]]


class CompareAndSetStore(SharedStore):
    """A shared store whose server only guards each write: the compare-and-set loop, once.

    Subclasses set ``max_attempts`` (tries per event before ``StoreUnavailable``) and
    implement :meth:`_send` and :meth:`_asend` (one write, one round trip, failures
    raised as ``StoreUnavailable`` after ``self._book.fail()``) and may change
    :meth:`_pause`.
    """

    max_attempts: int

    def __init__(
        self,
        *,
        backoff: float,
        volatile_journal: bool,
        history: int = DEFAULT_HISTORY,
        view_lease: float = DEFAULT_VIEW_LEASE,
    ) -> None:
        super().__init__(
            backoff=backoff,
            volatile_journal=volatile_journal,
            history=history,
            view_lease=view_lease,
        )
        self._writers = itertools.count(1)

    def _round_trip(self, view: SharedView, event: Event, policy: Policy) -> Result:
        """The loop on the blocking connection; the threads of this process take turns."""
        with view.lock:
            steps = self._transaction(view, event, policy)
            try:
                write = next(steps)
                while True:
                    if write.pause:
                        time.sleep(write.pause)
                    write = steps.send(self._send(view, write, policy))
            except StopIteration as done:
                result: Result = done.value
                return result
            finally:
                steps.close()

    async def _around_trip(self, view: SharedView, event: Event, policy: Policy) -> Result:
        """The same loop on the asyncio connection."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        steps = self._transaction(view, event, policy)
        try:
            write = next(steps)
            while True:
                if write.pause:
                    await asyncio.sleep(write.pause)
                write = steps.send(await self._asend(view, write, policy))
        except StopIteration as done:
            result: Result = done.value
            return result
        finally:
            steps.close()

    def _read(self, view: SharedView, policy: Policy) -> BreakerState:
        token = self._book.token(view)
        reply = self._send(view, READ, policy)
        state = decode_state(reply.state, policy)
        self._book.learn(view, state, reply.version, token)
        return state

    def _transaction(self, view: SharedView, event: Event, policy: Policy) -> _Loop:
        """The compare-and-set loop, free of I/O: it yields writes and gets replies."""
        token = self._book.token(view)
        state, version = view.known, view.version
        fresh = False
        floor = 0  # the instant of the event that wrote ``state``, once the server said
        if state is None:
            reply = yield READ
            state, version, fresh = decode_state(reply.state, policy), reply.version, True
            floor = reply.at
            self._book.learn(view, state, version, token)
        writer = next(self._writers)
        pause = 0.0
        attempt = retimed = 0
        while attempt < self.max_attempts:
            applied = in_store_order(event, floor)
            new, records = core_apply(state, applied, policy)
            unchanged = new == state
            if unchanged and fresh:
                # Computed on what the server just said: nothing to write, a quiet call.
                quiet(view.tally, applied, records, version, written=False)
                return new, records
            payload = "" if unchanged else encode_state(new)
            history: tuple[str, ...] = ()
            mark = None
            if not unchanged:
                history, mark = self._quiet_entry(view)
                history += self._history_texts(records)
            reply = yield Write(version, payload, new, attempt, pause, writer, history, applied.at)
            if reply.status in (WRITTEN, VERIFIED):
                quiet(view.tally, applied, records, version, written=not unchanged)
                if mark is not None:
                    view.tally.wrote(mark, reply.version)
                self._book.learn(view, new, reply.version, token)
                return new, records
            if reply.status == RETIME and retimed < self.max_attempts:
                # The same state, written by a later event: no conflict, so no try is spent.
                floor, fresh, pause, retimed = reply.at, True, 0.0, retimed + 1
                continue
            state, version, fresh = decode_state(reply.state, policy), reply.version, True
            floor = max(floor, reply.at)
            self._book.learn(view, state, version, token)
            pause = self._pause(attempt, reply.status)
            attempt += 1
        self._book.fail()
        raise StoreUnavailable(
            f"{self._what}: {self.max_attempts} conflicting writes in a row on {view.key!r}",
            dependency=view.key,
        )

    def _pause(self, attempt: int, status: int) -> float:
        """Seconds to wait after the conflict of try ``attempt`` (0 after the first)."""
        return 0.0

    @abstractmethod
    def _send(self, view: SharedView, write: Write, policy: Policy) -> Reply:
        """Send one write on the blocking connection and return the validated reply."""

    @abstractmethod
    async def _asend(self, view: SharedView, write: Write, policy: Policy) -> Reply:
        """Send one write on the asyncio connection and return the validated reply."""


def _source() -> str:
    """A name for this process's store among the history's writers (quiet counts)."""
    return f"{os.getpid():x}.{os.urandom(3).hex()}"


def _stored_version(version: object, space: str) -> int:
    """A stored record's version; anything but a whole number from 1 is a store fault."""
    if type(version) is not int or version < 1:
        raise StoreUnavailable(f"a record in space {space!r} does not validate")
    return version


def decode_entry(raw: object, task: str) -> dict[str, Any]:
    """A stored journal entry's JSON text as a dict; anything else is a store fault."""
    try:
        entry = json.loads(raw) if isinstance(raw, (str, bytes)) else None
    except (ValueError, RecursionError):
        entry = None
    if not isinstance(entry, dict):
        raise StoreUnavailable(f"a journal entry of task {task!r} does not validate")
    return entry
