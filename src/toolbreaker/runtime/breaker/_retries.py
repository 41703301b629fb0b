"""A breaker's retries: the one retry loop of ``call()``/``acall()``, its budget, the model.

The loop is written once, free of I/O (:meth:`Retries._retry_plan`), and carried out
blocking or on the event loop; every decision is the retry core's
(:mod:`toolbreaker.core.retry`). The model is a retry layer too: re-issuing a call whose
last attempt failed retryably spends the same budget.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, TypeVar, cast

from toolbreaker.core.breaker.predicates import rejects_callers
from toolbreaker.core.retry import (
    Failure,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    RetryRecord,
    RetryState,
    decide,
    refill,
    remaining_ms,
    spend,
    start,
)
from toolbreaker.core.run.retrying import action_of, is_retry, observe
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._process import process_token
from toolbreaker.runtime.breaker._admission import RetryListener
from toolbreaker.runtime.breaker._bulkhead import shares_records
from toolbreaker.runtime.breaker._commit import may_have_committed
from toolbreaker.runtime.breaker._scopes import Scopes
from toolbreaker.runtime.breaker._shared_budget import SharedBudget

__all__ = ["Retries"]

R = TypeVar("R")


class Retries(Scopes):
    """The retry layer: the retry plan, its budget and the model's own re-calls."""

    def _set_retry(self, retry: RetryPolicy | None) -> None:
        """The retry policy and its budget, per process or shared through the store."""
        self._retry = retry
        self._retry_budget = None if retry is None else RetryBudget.full(retry)
        self._shared_budget = (
            SharedBudget(self.key, retry, self.store, self._record_fault)  # type: ignore[arg-type]
            if retry is not None and shares_records(self.store)
            else None
        )

    def add_retry_listener(self, listener: RetryListener) -> Callable[[], None]:
        """Call ``listener(record)`` for every retry decision; returns a remover.

        A record's ``to_dict()`` is one line of a retry trace: with its seed,
        :func:`toolbreaker.core.retry.replay` recomputes every decision exactly.
        """
        self._retry_listeners.append(listener)
        return lambda: self._retry_listeners.remove(listener)

    @property
    def retry_budget(self) -> RetryBudget | None:
        """The dependency's retry budget (``None`` without a retry policy).

        With a shared store (one that keeps records, not a ``MemoryStore``) the budget is
        shared by every process: this is the bucket as last read or written. Otherwise it
        is this process's own.
        """
        shared = self._shared_budget
        return self._retry_budget if shared is None else shared.last

    def _retry_plan(self, timeout: float | None) -> _RetryPlan:
        """The retry loop of :meth:`call` and :meth:`acall`, free of I/O: written once.

        It yields what to do next and is sent what came of it: ``("attempt", seconds)``,
        an attempt with that deadline (send back the exception it raised, or
        ``_Done(result)``); ``("wait", (operation, exc))``, ask the retry core about the
        failed attempt and wait as it says (send back the wait in seconds, or ``None``:
        no retry). It returns the result of the attempt that succeeded, and raises the
        attempt's exception when no attempt may follow: a local rejection, the core's "no
        retry", or a wait that overran the end-to-end deadline.
        """
        deadline = self._required_deadline(timeout)
        operation = self._operation()
        while True:
            outcome = yield "attempt", self._attempt_timeout(operation, deadline)
            if isinstance(outcome, _Done):
                self.retry_succeeded()
                return outcome.result
            if isinstance(outcome, CircuitOpen):
                raise outcome  # rejected locally: nothing was attempted, nothing to retry
            assert isinstance(outcome, Exception)
            waited = yield "wait", (operation, outcome)
            if waited is None or self._overran(operation):
                raise outcome

    def _call_retrying(self, attempt: Callable[[float], R], timeout: float | None) -> R:
        """Carry out :meth:`_retry_plan`, blocking: ``attempt(seconds)`` makes one attempt."""
        plan = self._retry_plan(timeout)
        try:
            action = next(plan)
            while True:
                action = plan.send(self._retry_step(action, attempt))
        except StopIteration as done:
            return cast("R", done.value)

    def _retry_step(self, action: tuple[str, Any], attempt: Callable[[float], Any]) -> object:
        kind, value = action
        if kind == "wait":
            wait = self._retry_wait(*value)
            if wait is not None:
                (self._sleep or time.sleep)(wait)
            return wait
        try:
            return _Done(attempt(value))
        except Exception as exc:  # noqa: BLE001 - the plan decides, and re-raises
            return exc

    async def _acall_retrying(
        self, attempt: Callable[[float], Awaitable[R]], timeout: float | None
    ) -> R:
        """Carry out :meth:`_retry_plan` on the event loop: ``attempt`` is awaited."""
        plan = self._retry_plan(timeout)
        try:
            action = next(plan)
            while True:
                action = plan.send(await self._aretry_step(action, attempt))
        except StopIteration as done:
            return cast("R", done.value)

    async def _aretry_step(
        self, action: tuple[str, Any], attempt: Callable[[float], Awaitable[Any]]
    ) -> object:
        kind, value = action
        if kind == "attempt":
            try:
                return _Done(await attempt(value))
            except Exception as exc:  # noqa: BLE001 - the plan decides, and re-raises
                return exc
        wait = await self._aretry_wait(*value)
        if wait is not None:
            waited = asyncio.sleep(wait) if self._sleep is None else self._sleep(wait)
            if inspect.isawaitable(waited):
                await waited
        return wait

    def _operation(self) -> _Operation:
        """A new logical operation with a fresh seed."""
        seeds = self._seeds
        seed = int.from_bytes(os.urandom(8), "big") if seeds is None else seeds.getrandbits(64)
        return _Operation(f"{process_token()}.op{next(self._ids)}", start(self.clock(), seed))

    def _failure(self, exc: BaseException) -> Failure:
        """What a failed attempt tells the retry core."""
        verdict = self.verdict_of(exc)
        state = self._view.state
        return Failure(
            at=self.clock(),
            kind=verdict.kind,
            detail=verdict.detail,
            status=verdict.status,
            retry_after_ms=verdict.retry_after_ms,
            may_have_committed=not self.boundary.idempotent and may_have_committed(exc, verdict),
            breaker_open=state is not None and rejects_callers(state, self.policy),
        )

    def _attempt_timeout(self, operation: _Operation, deadline: int) -> float:
        """An attempt's deadline in seconds: the call's, cut to what the operation has left."""
        assert self._retry is not None
        left = remaining_ms(operation.state, self.clock(), self._retry)
        return max(1, min(deadline, left)) / 1000

    def _retry_wait(self, operation: _Operation, exc: Exception) -> float | None:
        """Seconds to wait before the next attempt, or ``None``: no retry, re-raise."""
        decision = self._retry_decision(operation, exc)
        return decision.wait_ms / 1000 if decision.retry else None

    async def _aretry_wait(self, operation: _Operation, exc: Exception) -> float | None:
        """:meth:`_retry_wait` for the event loop: a shared budget is paid in a thread."""
        if self._shared_budget is None:
            return self._retry_wait(operation, exc)
        return await asyncio.to_thread(self._retry_wait, operation, exc)

    def _overran(self, operation: _Operation) -> bool:
        """The wait overran the end-to-end deadline: no attempt may start after it."""
        assert self._retry is not None
        return remaining_ms(operation.state, self.clock(), self._retry) <= 0

    def _retry_decision(self, operation: _Operation, exc: Exception) -> RetryDecision:
        """Ask the retry core about a failed attempt; ``operation`` is advanced in place."""
        policy = self._retry
        assert policy is not None
        failure = self._failure(exc)
        state = operation.state
        hint_cap = self.boundary.max_retry_after_ms
        shared = self._shared_budget
        if shared is not None:

            def decided(
                bucket: RetryBudget,
            ) -> tuple[RetryBudget, tuple[RetryState, RetryDecision, RetryBudget]]:
                new, after, decision = decide(
                    state, failure, policy, bucket, max_retry_after_ms=hint_cap
                )
                return after, (new, decision, bucket)

            operation.state, decision, before = shared.update(decided)
        else:
            with self._retry_lock:
                local = self._retry_budget
                assert local is not None
                before = local
                operation.state, self._retry_budget, decision = decide(
                    state, failure, policy, local, max_retry_after_ms=hint_cap
                )
        self._count_retry(decision.reason)
        record = RetryRecord(
            self.key, operation.name, state.seed, state.started_at, failure, before.milli, decision
        )
        for listener in tuple(self._retry_listeners):
            try:
                listener(record)
            except Exception as fault:  # noqa: BLE001 - a listener never changes an outcome
                self.stats.listener_errors += 1
                hook_failed(f"retry listener {listener!r} failed; the call's outcome stands", fault)
        return decision

    def _count_retry(self, reason: str) -> None:
        retries = self.stats.retries
        retries[reason] = retries.get(reason, 0) + 1

    def retry_succeeded(self) -> None:
        """A call through this breaker succeeded: its retry budget refills.

        Its own call paths do this; so does a run guard for the calls it settles.
        """
        policy = self._retry
        if self._shared_budget is not None:
            self._shared_budget.succeeded()  # no round trip here: written with the next one
        elif policy is not None:
            with self._retry_lock:
                assert self._retry_budget is not None
                self._retry_budget = refill(self._retry_budget, policy)

    def _model_retry_ended(self, tool: str, call: Mapping[str, Any]) -> None:
        """A call succeeded: issuing it again is a new call, not a retry."""
        if self._retry_budget is not None and self._model_retries.failed:
            self._observe_model_retry(tool, call, retryable=False)

    def _observe_model_retry(self, tool: str, call: Mapping[str, Any], *, retryable: bool) -> None:
        action = action_of(tool, call)
        if action is not None:
            with self._retry_lock:
                self._model_retries = observe(
                    self._model_retries, action, retryable_failure=retryable
                )

    def _spend_model_retry(self) -> bool:
        """Spend one retry of the budget on the model's re-call; whether it may go ahead.

        Without a retry policy there is no budget to spend: always ``True``.
        """
        if self._retry_budget is None:
            return True
        if self._shared_budget is not None:
            allowed = self._shared_budget.update(spend)
        else:
            with self._retry_lock:
                assert self._retry_budget is not None
                self._retry_budget, allowed = spend(self._retry_budget)
        self._count_retry("model-retry" if allowed else "model-retry-refused")
        return allowed

    async def _aspend_model_retry(self) -> bool:
        """:meth:`_spend_model_retry` for the event loop: a shared budget in a thread."""
        if self._shared_budget is None:
            return self._spend_model_retry()
        return await asyncio.to_thread(self._spend_model_retry)

    def _retried(self, tool: str, call: Mapping[str, Any]) -> bool:
        """Whether the call re-issues one whose last attempt failed retryably (a retry).

        The refused call stays in the ledger: issuing it again is a retry again.
        """
        ledger = self._model_retries
        if self._retry_budget is None or not ledger.failed:
            return False
        action = action_of(tool, call)
        return action is not None and is_retry(ledger, action)


#: What :meth:`Retries._retry_plan` yields (an action and its argument), is sent, returns.
_RetryPlan = Generator[tuple[str, Any], object, Any]


class _Done:
    """An attempt that succeeded, with its result (sent to a retry plan)."""

    __slots__ = ("result",)

    def __init__(self, result: object) -> None:
        self.result = result


class _Operation:
    """One logical operation of ``call()``/``acall()``: its id and its retry state."""

    __slots__ = ("name", "state")

    def __init__(self, name: str, state: RetryState) -> None:
        self.name = name
        self.state = state
