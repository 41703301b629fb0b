"""A breaker's retry loop: the one loop of ``call()``/``acall()``, written once.

One part of :class:`~toolbreaker.Breaker`, built with everything it uses. The loop is a
generator free of I/O (:meth:`Retries.plan`) carried out blocking (:meth:`Retries.run`)
or on the event loop (:meth:`Retries.arun`); every decision is the retry core's
(:mod:`toolbreaker.core._retry`), paid from the breaker's
:class:`~toolbreaker.runtime._breaker._ledger.RetryLedger`.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from toolbreaker.core._retry import (
    Failure,
    RetryDecision,
    RetryRecord,
    RetryState,
    remaining_ms,
    start,
)
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._breaker._ledger import RetryLedger
from toolbreaker.runtime._breaker._stats import BreakerStats

if TYPE_CHECKING:
    import random
from toolbreaker.runtime._clock import Clock
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._process import process_token

__all__ = ["Retries", "RetryListener"]

R = TypeVar("R")

#: A retry listener receives every retry decision as a record (a retry trace line).
RetryListener = Callable[[RetryRecord], None]
#: What a failed attempt tells the retry core, from the breaker's classifier and state.
FailureOf = Callable[[BaseException], Failure]


def _seeded(seed: int) -> random.Random:
    """A generator of jitter seeds from ``seed`` (random loads with a seeded breaker)."""
    import random

    return random.Random(seed)  # noqa: S311 - jitter, not secrets


class Retries:
    """The retry loop of one breaker: attempts, waits, and the retry records.

    Args:
        key: the breaker's key, named in every retry record.
        ledger: the budget every retry is paid from.
        clock: the breaker's clock (integer milliseconds).
        ids: the breaker's counter of ids (operations are named from it).
        seed: seeds the per-operation jitter seeds; ``None``: random seeds.
        sleep: how to wait between attempts (awaited if it returns an awaitable);
            ``None``: ``time.sleep``, or ``asyncio.sleep`` on the event loop.
        stats: where listener faults are counted.
    """

    __slots__ = ("_clock", "_ids", "_key", "_ledger", "_seeds", "_sleep", "_stats", "listeners")

    def __init__(
        self,
        key: str,
        ledger: RetryLedger,
        clock: Clock,
        ids: Iterator[int],
        *,
        seed: int | None,
        sleep: Callable[[float], Any] | None,
        stats: BreakerStats,
    ) -> None:
        self._key = key
        self._ledger = ledger
        self._clock = clock
        self._ids = ids
        self._seeds = _seeded(seed) if seed is not None else None
        self._sleep = sleep
        self._stats = stats
        #: Who hears every retry decision (shared by a scoped row's breakers).
        self.listeners: list[RetryListener] = []

    def plan(self, deadline: int, failure_of: FailureOf, hint_cap: int | None) -> RetryPlan:
        """The retry loop, free of I/O: written once for both drivers.

        It yields what to do next and is sent what came of it: ``("attempt", seconds)``,
        an attempt with that deadline (send back the exception it raised, or
        ``Done(result)``); ``("wait", (operation, exc))``, ask the retry core about the
        failed attempt and wait as it says (send back the wait in seconds, or ``None``:
        no retry). It returns the result of the attempt that succeeded, and raises the
        attempt's exception when no attempt may follow: a local rejection, the core's "no
        retry", or a wait that overran the end-to-end deadline.
        """
        operation = self._operation()
        while True:
            outcome = yield "attempt", self._attempt_timeout(operation, deadline)
            if isinstance(outcome, Done):
                self._ledger.succeeded()
                return outcome.result
            if isinstance(outcome, CircuitOpen):
                raise outcome  # rejected locally: nothing was attempted, nothing to retry
            assert isinstance(outcome, Exception)
            waited = yield "wait", (operation, outcome, failure_of, hint_cap)
            if waited is None or self._overran(operation):
                raise outcome

    def run(
        self,
        attempt: Callable[[float], R],
        deadline: int,
        failure_of: FailureOf,
        hint_cap: int | None,
    ) -> R:
        """Carry out :meth:`plan`, blocking: ``attempt(seconds)`` makes one attempt."""
        plan = self.plan(deadline, failure_of, hint_cap)
        try:
            action = next(plan)
            while True:
                kind, value = action
                if kind == "wait":
                    wait = self._wait(*value)
                    if wait is not None:
                        (self._sleep or time.sleep)(wait)
                    action = plan.send(wait)
                    continue
                try:
                    outcome: object = Done(attempt(value))
                except Exception as exc:  # noqa: BLE001 - the plan decides, and re-raises
                    outcome = exc
                action = plan.send(outcome)
        except StopIteration as done:
            return cast("R", done.value)

    async def arun(
        self,
        attempt: Callable[[float], Awaitable[R]],
        deadline: int,
        failure_of: FailureOf,
        hint_cap: int | None,
    ) -> R:
        """Carry out :meth:`plan` on the event loop: ``attempt`` and the waits are awaited."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        plan = self.plan(deadline, failure_of, hint_cap)
        try:
            action = next(plan)
            while True:
                kind, value = action
                if kind == "wait":
                    if self._ledger.shared is None:
                        wait = self._wait(*value)
                    else:  # a shared budget is paid in a worker thread
                        wait = await asyncio.to_thread(self._wait, *value)
                    if wait is not None:
                        waited = asyncio.sleep(wait) if self._sleep is None else self._sleep(wait)
                        if inspect.isawaitable(waited):
                            await waited
                    action = plan.send(wait)
                    continue
                try:
                    outcome: object = Done(await attempt(value))
                except Exception as exc:  # noqa: BLE001 - the plan decides, and re-raises
                    outcome = exc
                action = plan.send(outcome)
        except StopIteration as done:
            return cast("R", done.value)

    def _operation(self) -> Operation:
        """A new logical operation with a fresh seed."""
        seeds = self._seeds
        seed = int.from_bytes(os.urandom(8), "big") if seeds is None else seeds.getrandbits(64)
        return Operation(f"{process_token()}.op{next(self._ids)}", start(self._clock(), seed))

    def _attempt_timeout(self, operation: Operation, deadline: int) -> float:
        """An attempt's deadline in seconds: the call's, cut to what the operation has left."""
        policy = self._ledger.policy
        assert policy is not None
        left = remaining_ms(operation.state, self._clock(), policy)
        return max(1, min(deadline, left)) / 1000

    def _overran(self, operation: Operation) -> bool:
        """The wait overran the end-to-end deadline: no attempt may start after it."""
        policy = self._ledger.policy
        assert policy is not None
        return remaining_ms(operation.state, self._clock(), policy) <= 0

    def _wait(
        self,
        operation: Operation,
        exc: Exception,
        failure_of: FailureOf,
        hint_cap: int | None,
    ) -> float | None:
        """Seconds to wait before the next attempt, or ``None``: no retry, re-raise."""
        decision = self._decision(operation, failure_of(exc), hint_cap)
        return decision.wait_ms / 1000 if decision.retry else None

    def _decision(
        self, operation: Operation, failure: Failure, hint_cap: int | None
    ) -> RetryDecision:
        """Ask the retry core about a failed attempt; ``operation`` is advanced in place."""
        state = operation.state
        operation.state, decision, before = self._ledger.decide(state, failure, hint_cap)
        record = RetryRecord(
            self._key, operation.name, state.seed, state.started_at, failure, before.milli, decision
        )
        for listener in tuple(self.listeners):
            try:
                listener(record)
            except Exception as fault:  # noqa: BLE001 - a listener never changes an outcome
                self._stats.listener_errors += 1
                hook_failed(f"retry listener {listener!r} failed; the call's outcome stands", fault)
        return decision


#: What :meth:`Retries.plan` yields (an action and its argument), is sent, returns.
RetryPlan = Generator[tuple[str, Any], object, Any]


class Done:
    """An attempt that succeeded, with its result (sent to a retry plan)."""

    __slots__ = ("result",)

    def __init__(self, result: object) -> None:
        self.result = result


class Operation:
    """One logical operation of ``call()``/``acall()``: its id and its retry state."""

    __slots__ = ("name", "state")

    def __init__(self, name: str, state: RetryState) -> None:
        self.name = name
        self.state = state
