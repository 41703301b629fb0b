"""One process's running totals of a breaker's quiet calls, for the store's history.

A call a process decides without a write (a request admitted and its success on a quiet
state, a request rejected while open) leaves no transition in the history; the process
counts it here instead, by the version of the state it met (see
:mod:`toolbreaker.core._breaker.history` for the segments and how a replay places them).
The store writes the totals as a ``quiet`` entry with its next write of the breaker, in
the same atomic step, and on its own every second or so (:class:`Flusher`).

The counters are bumped on the runtime's hot paths, so they are plain dict increments:
no lock, as the breaker's own counters are. Totals only grow, and an entry says the
totals at the time it was built, so an entry written twice, or one whose write's answer
was lost and which is then written again, counts once (a replay takes the largest total
per segment). A store's ``flush`` lock serialises the writers of entries, never a call.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from toolbreaker.core._breaker.history import QuietCall, quiet_entry
from toolbreaker.core._breaker.state import BreakerState

__all__ = ["PENDING_LIMIT", "Flusher", "Tally"]

#: Quiet admissions a view remembers until their outcome comes (a call never settled is
#: forgotten, oldest first, past this many: it was never a counted call).
PENDING_LIMIT: Final = 100_000
#: A version not known for a state (the view changed under the caller): not placeable.
UNKNOWN: Final = -1
#: Written totals kept after their segment left memory (see ``Tally._pruned``).
_PRUNED_KEPT: Final = 256


class Tally:
    """The quiet calls of one breaker, counted by one process (see the module).

    ``version_of(state)`` says the store's version of a state object the runtime acted
    on (:data:`UNKNOWN` if the view moved on meanwhile). Each total is a one-item list (a
    cell); the runtime's hot paths keep the cell of the state they last counted on, so a
    call on the same state is one comparison and one increment.
    """

    __slots__ = (
        "_last",
        "_pruned",
        "_version_of",
        "_written",
        "calls",
        "first_at",
        "hot_call",
        "hot_reject",
        "pending",
        "rejected",
    )

    def __init__(self, version_of: Callable[[BreakerState], int]) -> None:
        self.calls: dict[QuietCall, list[int]] = {}
        self.rejected: dict[int, list[int]] = {}
        self.first_at: dict[int, int] = {}
        #: Calls admitted without a write, waiting for their outcome: call -> version.
        self.pending: dict[str, int] = {}
        self._version_of = version_of
        self._last: tuple[BreakerState | None, int] = (None, UNKNOWN)
        #: The state the last quiet call met and its cell: a hot path counts a call on
        #: that same state itself (``hot[1][0] += 1``), and calls :meth:`call` otherwise.
        self.hot_call: tuple[BreakerState | None, list[int]] = (None, [0])
        #: The same for the last quiet rejection (:meth:`reject`).
        self.hot_reject: tuple[BreakerState | None, list[int]] = (None, [0])
        self._written: tuple[dict[QuietCall, int], dict[int, int]] = ({}, {})
        # Totals dropped from memory once written (their state is gone): a call that still
        # meets that state, a moment later on another thread, counts on from there.
        self._pruned: dict[QuietCall | int, int] = {}

    def _version(self, state: BreakerState, at: int) -> int:
        last = self._last
        if last[0] is state:
            return last[1]
        version = self._version_of(state)
        self._last = (state, version)
        if version != UNKNOWN and version not in self.first_at:
            self.first_at[version] = at
        return version

    def _cell(self, segment: QuietCall) -> list[int]:
        cell = self.calls.get(segment)
        if cell is None:
            cell = self.calls.setdefault(segment, [self._pruned.get(segment, 0)])
        return cell

    def _reject_cell(self, version: int) -> list[int]:
        cell = self.rejected.get(version)
        if cell is None:
            cell = self.rejected.setdefault(version, [self._pruned.get(version, 0)])
        return cell

    # -- the runtime's quiet paths (no store event at all) --------------------------------

    def call(self, state: BreakerState, at: int) -> None:
        """A request admitted on ``state`` and its success, neither sent to the store."""
        hot = self.hot_call
        if hot[0] is state:
            hot[1][0] += 1
            return
        version = self._version(state, at)
        cell = self._cell(QuietCall(version, version, "success", state.generation))
        self.hot_call = (state, cell)
        cell[0] += 1

    def settled(self, call: str | None, state: BreakerState, at: int, generation: int) -> None:
        """A success on ``state`` not sent to the store, of a call admitted earlier.

        ``call`` is the id its admission had (``None``: admitted without the store too).
        A call whose request the store wrote (a probe) is in the history: not counted.
        """
        version = self._version(state, at)
        admitted = version if call is None else self.pending.pop(call, None)
        if admitted is None:
            return
        self._cell(QuietCall(admitted, version, "success", generation))[0] += 1

    def reject(self, state: BreakerState, at: int) -> None:
        """A request rejected on ``state`` without asking the store."""
        hot = self.hot_reject
        if hot[0] is state:
            hot[1][0] += 1
            return
        cell = self._reject_cell(self._version(state, at))
        self.hot_reject = (state, cell)
        cell[0] += 1

    def admitted_unsent(self, call: str) -> None:
        """The runtime admitted ``call`` without the store; its outcome goes to the store."""
        self._remember(call, UNKNOWN)

    # -- the store's quiet answers (an event the core said changes nothing) ---------------

    def request(self, call: str | None, version: int, at: int, *, admitted: bool) -> None:
        """A request applied to ``version`` without a write."""
        if version not in self.first_at:
            self.first_at[version] = at
        if not admitted:
            self._reject_cell(version)[0] += 1
        elif call is not None:
            self._remember(call, version)

    def outcome(
        self,
        call: str | None,
        version: int,
        at: int,
        kind: str,
        generation: int | None,
        *,
        written: bool,
    ) -> None:
        """An outcome applied to ``version``: counted when its request was quiet too.

        A written outcome is in the history, and a replay writes its request in (it has
        the call's id): it only ends the wait for it here.
        """
        admitted = self.pending.pop(call, None) if call is not None else UNKNOWN
        if written or admitted is None:
            return  # written, or its request was (a probe): the history has the call
        if version not in self.first_at:
            self.first_at[version] = at
        self._cell(QuietCall(admitted, version, kind, generation or 0))[0] += 1

    def _remember(self, call: str, version: int) -> None:
        pending = self.pending
        if len(pending) >= PENDING_LIMIT:
            del pending[next(iter(pending))]
        pending[call] = version

    # -- the store's writes of the totals -------------------------------------------------

    def _totals(self) -> tuple[dict[QuietCall, int], dict[int, int]]:
        calls = {segment: cell[0] for segment, cell in list(self.calls.items())}
        rejected = {version: cell[0] for version, cell in list(self.rejected.items())}
        return calls, rejected

    def changed(self) -> bool:
        """Whether some total differs from the last one written."""
        return self._totals() != self._written

    def entry(self, key: str, source: str) -> tuple[str, Any] | None:
        """The ``quiet`` entry's text of the totals now and the mark to pass to :meth:`wrote`.

        ``None`` when nothing changed since the last entry written.
        """
        calls, rejected = self._totals()
        if (calls, rejected) == self._written:
            return None
        first_at = {v: at for v, at in dict(self.first_at).items() if v >= 0}
        text = json.dumps(
            quiet_entry(key, source, calls, rejected=rejected, first_at=first_at, wall=time.time()),
            separators=(",", ":"),
        )
        return text, (calls, rejected)

    def wrote(self, mark: Any, current: int) -> None:
        """The entry built with ``mark`` is in the store: forget what it settled for good.

        Totals of versions older than ``current`` that it holds are dropped (no call
        meets an old state again), but for the cells the hot paths still hold; the rest
        stay, growing.
        """
        calls, rejected = dict(mark[0]), dict(mark[1])
        pruned = self._pruned
        hot = (self.hot_call[1], self.hot_reject[1])
        for segment, count in list(calls.items()):
            cell = self.calls.get(segment)
            quiet_since = segment.outcome < current and cell is not None and cell[0] == count
            if quiet_since and not any(cell is held for held in hot):
                pruned[segment] = count
                self.calls.pop(segment, None)
                del calls[segment]
        for version, count in list(rejected.items()):
            cell = self.rejected.get(version)
            quiet_since = version < current and cell is not None and cell[0] == count
            if quiet_since and not any(cell is held for held in hot):
                pruned[version] = count
                self.rejected.pop(version, None)
                del rejected[version]
        while len(pruned) > _PRUNED_KEPT:
            pruned.pop(next(iter(pruned)), None)
        self._written = (calls, rejected)
        segments = list(self.calls)
        keep = {s.request for s in segments} | {s.outcome for s in segments}
        keep |= set(self.rejected)
        for version in [v for v in list(self.first_at) if v not in keep and v < current]:
            self.first_at.pop(version, None)


class Flusher:
    """Writes the views' changed totals every ``interval`` seconds, on a thread of its own.

    ``flush()`` is the store's: it writes each changed total (an atomic append of one
    entry, no state change) and never raises; started on the first count, stopped (with
    a last flush) when the store closes.
    """

    def __init__(self, flush: Callable[[], None], interval: float) -> None:
        self._flush = flush
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread, once."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="toolbreaker-quiet-flush", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._flush()

    def stop(self) -> None:
        """Stop the thread (it finishes a flush under way)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def forked(self) -> None:
        """In a child right after fork: the thread did not come along."""
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()
