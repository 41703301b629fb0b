"""A dependency's retry budget shared by every process of a shared store.

The budget is the retry core's token bucket (:class:`~toolbreaker.core._retry.RetryBudget`):
retries spend it, successes refill it, and the core alone decides (``decide``, ``spend``,
``refill``). Without a shared store each process keeps its own bucket. With one, the
bucket is the record ``<key>`` of the space ``retry-budget``, ``{"milli": n}``, and this
shell only carries the core's decisions to it:

1. load the record (absent: a full bucket; unreadable: an empty one, fail closed);
2. apply the successes this process saw since its last write (``refill``, once each);
3. let the core decide on that bucket (a retry, a model's re-call);
4. write the bucket back by compare-and-set on the version it read; on a conflict wait
   a little and start again from 1, at most :data:`ATTEMPTS` times.

Conflicts back off with full jitter: before try ``n + 1`` the shell sleeps a random time
in a window that doubles from :data:`BACKOFF_FIRST_S` up to :data:`BACKOFF_CAP_S`, so
contending processes spread out instead of colliding again. A decision stops trying
after :data:`MAX_BACKOFF_S` (or :data:`ATTEMPTS` tries), so it waits at most that plus
one window. The sleep is never on an event loop: async callers pay the budget in a worker
thread, and a decision asked on a loop's own thread retries without sleeping (up to
:data:`ATTEMPTS` tries). A store fault is not a conflict: no wait, no second try.

A store fault, or a conflict every time, leaves the decision to an **empty** bucket: no
retry is paid for with a budget nobody could check (the call's own outcome stands). It is
counted (``BreakerStats.record_faults``) and logged.

Successes cost no round trip: they are counted here and written with the next decision,
or in one background write once they add up to a whole retry, so a process that only
succeeds still refills the fleet's bucket. Successes not yet written when a process dies
are lost, which errs on the side of fewer retries.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar

from toolbreaker.core._retry import RetryBudget, RetryPolicy, refill
from toolbreaker.errors import StoreUnavailable
from toolbreaker.runtime._clock import monotonic_ms
from toolbreaker.runtime._log import hook_failed
from toolbreaker.stores._protocol import Records

if TYPE_CHECKING:
    import random

__all__ = [
    "ATTEMPTS",
    "BACKOFF_CAP_S",
    "BACKOFF_FIRST_S",
    "BUDGET_SPACE",
    "MAX_BACKOFF_S",
    "SharedBudget",
]

#: The record space of shared retry budgets.
BUDGET_SPACE: Final = "retry-budget"
#: The most compare-and-sets one decision makes before it is made on an empty bucket.
ATTEMPTS: Final = 64
#: The first backoff window after a conflict, in seconds (it doubles per conflict).
BACKOFF_FIRST_S: Final = 0.001
#: The widest backoff window, in seconds.
BACKOFF_CAP_S: Final = 0.05
#: How long one decision keeps trying through conflicts, in seconds: no new try starts
#: after it (so a decision waits at most this plus one window).
MAX_BACKOFF_S: Final = 1.0
_sleep: Callable[[float], None] = time.sleep  # the tests watch these two
_clock: Callable[[], int] = monotonic_ms

T = TypeVar("T")
_FAULTS: Final = (StoreUnavailable, NotImplementedError, ValueError, TypeError)


class SharedBudget:
    """The retry budget of one dependency in a shared store (see the module docstring).

    Args:
        key: the breaker key (the record's key).
        policy: the row's retry policy (capacity and refill).
        records: the shared store.
        on_fault: called for each store fault, to count it.
    """

    def __init__(
        self,
        key: str,
        policy: RetryPolicy,
        records: Records,
        on_fault: Callable[[], None] = lambda: None,
    ) -> None:
        self.key = key
        self.policy = policy
        self._records = records
        self._on_fault = on_fault
        self._lock = threading.Lock()
        self._refills = 0
        self._flushing = False
        #: The bucket as last read or written (what the model is told about).
        self.last = RetryBudget.full(policy)
        # One whole retry's worth of successes is written without waiting for a decision.
        self._flush_at = max(1, -(-100 // max(1, policy.budget_refill_percent)))

    def update(self, change: Callable[[RetryBudget], tuple[RetryBudget, T]]) -> T:
        """Run ``change`` (a core decision) on the shared bucket and write what it returns.

        ``change`` may run more than once (after a conflict); only its last result
        counts. On a store fault it runs on an empty bucket.
        """
        with self._lock:
            refills, self._refills = self._refills, 0
        try:
            give_up = _clock() + round(MAX_BACKOFF_S * 1000)
            for attempt in range(ATTEMPTS):
                if attempt:
                    if _clock() >= give_up:
                        break
                    _back_off(attempt)
                bucket, version = self._load()
                for _ in range(refills):
                    bucket = refill(bucket, self.policy)
                after, result = change(bucket)
                if after == bucket and not refills:
                    self.last = after
                    return result  # nothing to write
                written = self._records.record_put(
                    BUDGET_SPACE, self.key, {"milli": after.milli}, version=version or 0
                )
                if written is not None:
                    self.last = after
                    return result
            why: BaseException | None = None
        except _FAULTS as exc:
            why = exc
        self._on_fault()
        hook_failed(
            f"the shared retry budget of {self.key} could not be read or written; no retry",
            why,
        )
        return change(RetryBudget(0))[1]

    def succeeded(self) -> None:
        """Count a success; write the refills in the background once they add up."""
        with self._lock:
            self._refills += 1
            if self._refills < self._flush_at or self._flushing:
                return
            self._flushing = True
        threading.Thread(target=self._flush, name="toolbreaker-budget", daemon=True).start()

    def flush(self) -> None:
        """Write the successes counted so far (tests and shutdown)."""
        self.update(lambda bucket: (bucket, None))

    def _flush(self) -> None:
        try:
            self.flush()
        finally:
            with self._lock:
                self._flushing = False

    def _load(self) -> tuple[RetryBudget, int | None]:
        """The stored bucket and its version (``None`` when absent: a full bucket)."""
        found = self._records.record_get(BUDGET_SPACE, self.key)
        capacity = RetryBudget.full(self.policy).milli
        if found is None:
            return RetryBudget(capacity), None
        value, version = found
        milli = value.get("milli")
        if type(milli) is not int or milli < 0:
            # Unreadable: an empty bucket (fail closed); successes refill it from there.
            return RetryBudget(0), version
        return RetryBudget(min(milli, capacity)), version


@functools.cache
def _jitter() -> random.Random:
    """The generator that spreads contenders, made with the first conflict.

    :mod:`random` is not loaded at import.
    """
    import random

    return random.Random()  # noqa: S311 - spreading contenders, not secrets


def _back_off(conflicts: int) -> None:
    """Sleep a jittered while after ``conflicts`` lost writes; never on an event loop."""
    import asyncio  # the event loop's own: a sync program never loads asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        window = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** (conflicts - 1))
        _sleep(_jitter().uniform(0, window))
