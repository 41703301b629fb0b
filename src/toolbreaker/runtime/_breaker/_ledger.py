"""A breaker's retry ledger: its retry budget and the model's own re-calls.

One part of :class:`~toolbreaker.Breaker`, built with everything it uses. The budget is
the retry core's token bucket (:mod:`toolbreaker.core._retry`), kept per process or, with a
store that keeps records, shared by every process through the store
(:class:`~toolbreaker.runtime._breaker._shared_budget.SharedBudget`). The model is a retry
layer too: a call re-issuing one whose last attempt failed retryably is a retry (the run
core's ledger, :mod:`toolbreaker.core._run.retrying`, says which) and spends the same
budget. Every decision is a core's; this part keeps their state and its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from toolbreaker.core._retry import (
    Failure,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    RetryState,
    decide,
    refill,
    spend,
)
from toolbreaker.core._run.retrying import ModelRetries, action_of, is_retry, observe
from toolbreaker.runtime._breaker._bulkhead import shares_records
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.stores._protocol import Records, Store

if TYPE_CHECKING:
    from toolbreaker.runtime._breaker._shared_budget import SharedBudget

__all__ = ["RetryLedger"]


class RetryLedger:
    """The retry budget of one breaker and the ledger of the model's failed calls.

    Args:
        key: the breaker's key (the shared budget's key in the store).
        retry: the retry policy; ``None``: no retries, no budget, no ledger to keep.
        store: where a shared budget lives (only a store that keeps records shares it).
        stats: where the decisions are counted (``stats.retries``).
        on_fault: called when a shared budget's write failed (counted by the breaker).
    """

    __slots__ = (
        "_key",
        "_lock",
        "_model",
        "_on_fault",
        "_stats",
        "_store",
        "local",
        "policy",
        "shared",
    )

    def __init__(
        self,
        key: str,
        retry: RetryPolicy | None,
        store: Store,
        stats: BreakerStats,
        on_fault: Callable[[], None],
    ) -> None:
        self._key = key
        self._store = store
        self._stats = stats
        self._on_fault = on_fault
        self._lock = threading.Lock()
        self._model = ModelRetries()
        #: The retry policy followed; ``None``: no retries.
        self.policy: RetryPolicy | None = None
        #: The budget shared through the store, if the store shares one.
        self.shared: SharedBudget | None = None
        #: This process's budget (kept, unused, beside a shared one).
        self.local: RetryBudget | None = None
        self.use(retry)

    def use(self, retry: RetryPolicy | None) -> None:
        """Follow ``retry`` from now on (a new sheet row): a full budget of its own."""
        with self._lock:
            self.policy = retry
            self.local = None if retry is None else RetryBudget.full(retry)
            store = self._store
            shared = None
            if retry is not None and isinstance(store, Records) and shares_records(store):
                # A shared store's: the shared budget loads with the first, not at import.
                from toolbreaker.runtime._breaker._shared_budget import SharedBudget

                shared = SharedBudget(self._key, retry, store, self._on_fault)
            self.shared = shared

    @property
    def budget(self) -> RetryBudget | None:
        """The budget as this process last saw it (``None`` without a retry policy)."""
        shared = self.shared
        return self.local if shared is None else shared.last

    @property
    def keeps(self) -> bool:
        """Whether there is a budget to keep (a retry policy): else every method is a no-op."""
        return self.local is not None

    def decide(
        self, state: RetryState, failure: Failure, max_retry_after_ms: int | None
    ) -> tuple[RetryState, RetryDecision, RetryBudget]:
        """Ask the retry core about a failed attempt, paying the budget.

        Returns the operation's next state, the decision and the bucket it was decided
        on. Counted in ``stats.retries``.
        """
        policy = self.policy
        assert policy is not None
        shared = self.shared
        if shared is not None:

            def decided(
                bucket: RetryBudget,
            ) -> tuple[RetryBudget, tuple[RetryState, RetryDecision, RetryBudget]]:
                new, after, decision = decide(
                    state, failure, policy, bucket, max_retry_after_ms=max_retry_after_ms
                )
                return after, (new, decision, bucket)

            new, decision, before = shared.update(decided)
        else:
            with self._lock:
                local = self.local
                assert local is not None
                before = local
                new, self.local, decision = decide(
                    state, failure, policy, local, max_retry_after_ms=max_retry_after_ms
                )
        self.count(decision.reason)
        return new, decision, before

    def count(self, reason: str) -> None:
        """Count one retry decision by its reason."""
        retries = self._stats.retries
        retries[reason] = retries.get(reason, 0) + 1

    def succeeded(self) -> None:
        """A call succeeded: the budget refills."""
        policy = self.policy
        if self.shared is not None:
            self.shared.succeeded()  # no round trip here: written with the next one
        elif policy is not None:
            with self._lock:
                assert self.local is not None
                self.local = refill(self.local, policy)

    def spend(self) -> bool:
        """Spend one retry on the model's re-call; whether it may go ahead.

        Without a retry policy there is no budget to spend: always ``True``.
        """
        if self.local is None:
            return True
        if self.shared is not None:
            allowed = self.shared.update(spend)
        else:
            with self._lock:
                assert self.local is not None
                self.local, allowed = spend(self.local)
        self.count("model-retry" if allowed else "model-retry-refused")
        return allowed

    async def aspend(self) -> bool:
        """:meth:`spend` for the event loop: a shared budget is paid in a worker thread."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        if self.shared is None:
            return self.spend()
        return await asyncio.to_thread(self.spend)

    def retried(self, tool: str, call: Mapping[str, Any]) -> bool:
        """Whether the call re-issues one whose last attempt failed retryably (a retry).

        The refused call stays in the ledger: issuing it again is a retry again.
        """
        ledger = self._model
        if self.local is None or not ledger.failed:
            return False
        action = action_of(tool, call)
        return action is not None and is_retry(ledger, action)

    def observe(self, tool: str, call: Mapping[str, Any], *, retryable: bool) -> None:
        """Remember how a call of ``tool`` ended: whether re-issuing it would be a retry."""
        if self.local is None:
            return
        action = action_of(tool, call)
        if action is not None:
            with self._lock:
                self._model = observe(self._model, action, retryable_failure=retryable)

    def ended(self, tool: str, call: Mapping[str, Any]) -> None:
        """A call succeeded: issuing it again is a new call, not a retry."""
        if self.local is not None and self._model.failed:
            self.observe(tool, call, retryable=False)
