"""A breaker's runner: ``call()``/``acall()``, their fast paths, workers, deadlines, retries.

One part of :class:`~toolbreaker.Breaker` (:class:`Runner`, built with the parts it
drives: admission, the retry ledger and loop, the scopes, the bulkhead). In a *quiet*
state (:func:`~toolbreaker.core.is_quiet`) a call is admitted and a success changes
nothing, so the fast paths take no permit, no lock and no store round trip unless
something happens; while open and cooling down, a call is rejected the same way, from
the core's idle window (:func:`~toolbreaker.core._breaker.predicates.idle_window`, kept
by the admission part while it holds). Sync calls run in a worker thread by default so a
deadline can be kept; the bulkhead slot goes with the call and comes back when it really
ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from toolbreaker.core._breaker.predicates import may_probe, rejects_callers
from toolbreaker.core._retry import Failure
from toolbreaker.errors import AsyncCallError, CircuitOpen, PolicyError, circuit_open
from toolbreaker.runtime._breaker._admission import UNSET, Admission, BreakerT, Permit, Rejection
from toolbreaker.runtime._breaker._boundary import check_seconds
from toolbreaker.runtime._breaker._bulkhead import SATURATED, STORE_DOWN, Bulkhead, Slot
from toolbreaker.runtime._breaker._classify import Verdict
from toolbreaker.runtime._breaker._commit import may_have_committed
from toolbreaker.runtime._breaker._deadline import (
    OVERDUE,
    Overdue,
    Worker,
    Workers,
    deadline_passed,
    watch,
    within,
)
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.runtime._flow import Flow, Twin, adrive, drive
from toolbreaker.runtime._step import Step, no_deadline
from toolbreaker.runtime._sync_path import PLAIN_TYPES, is_awaitable, not_awaited

if TYPE_CHECKING:
    from toolbreaker.core._breaker.state import BreakerState
    from toolbreaker.runtime._breaker._boundary import Boundary
    from toolbreaker.runtime._breaker._degrade import Degradation
    from toolbreaker.runtime._breaker._ledger import RetryLedger
    from toolbreaker.runtime._breaker._retries import Retries
    from toolbreaker.runtime._breaker._stats import BreakerStats

__all__ = ["Runner"]

R = TypeVar("R")

_TIMEOUT: Final = Verdict("failure", "timeout")
_HUNG: Final = "hung"


class Runner(Generic[BreakerT]):
    """Running calls: deadlines, workers, the bulkhead and retries, for one breaker.

    ``call``/``acall`` with their quiet fast paths, the worker pool that keeps a sync
    call's deadline, the bulkhead slot that goes with a call until it really ends, and
    the retry loop around attempts. Admission and settling are the :class:`Admission`
    part's.

    The quiet fast paths (``call``, ``acall`` and a worker's) skip the store because the
    core says a success in a quiet state changes nothing; that holds unless the row has a
    result predicate, the result came after the deadline (late: ambiguous, never a
    success) or the state changed meanwhile: then the call is settled after all. Each
    path tests those three inline (a call frame is a fifth of the cheapest path's cost);
    a test drives all of them through both cases.

    Args:
        admission: the breaker's admission part (its view, its quiet state, its permits).
        boundary: the row (its deadline, enforcement, retry and bulkhead options).
        clock: integer milliseconds.
        stats: the breaker's counters.
        degradation: the row's degradation chain (told of a full bulkhead, hung workers).
        ledger: the retry ledger (its policy says whether calls retry).
        retries: the retry loop.
        scope: a scoped row's: the runner of the current scope's breaker, which serves
            the call (``None`` when no scope is set); ``None`` for a row not scoped.
        bulkhead: the bulkhead, else ``None``.
        max_workers: see :class:`~toolbreaker.Breaker`.
    """

    def __init__(
        self,
        admission: Admission[BreakerT],
        boundary: Boundary,
        *,
        clock: Clock,
        stats: BreakerStats,
        degradation: Degradation,
        ledger: RetryLedger,
        retries: Retries,
        scope: Callable[[], Runner[BreakerT] | None] | None,
        bulkhead: Bulkhead | None,
        max_workers: int,
    ) -> None:
        self.admission = admission
        self.view = admission.view
        self.key = boundary.key
        self.tool = boundary.tool or boundary.dependency
        self.result_is_failure = boundary.result_is_failure
        self.clock = clock
        # The quiet fast paths time a call in the clock's own ticks: time.monotonic_ns
        # itself for the default clock (no Python frame per reading), else the clock.
        fast = clock is monotonic_ms
        self.ticks: Callable[[], int] = time.monotonic_ns if fast else clock
        self.per_ms = 1_000_000 if fast else 1
        self.monotonic = fast
        self.stats = stats
        self.degradation = degradation
        self.ledger = ledger
        self.retries = retries
        self.scope = scope
        self.bulkhead = bulkhead
        # A bulkhead of this process alone keeps the quiet fast path: a counter around it.
        self.slots = bulkhead if bulkhead is not None and not bulkhead.shared else None
        self.max_workers = max_workers
        self.workers: Workers | None = None
        self.workers_lock = threading.Lock()
        self.configure(boundary)

    def configure(self, boundary: Boundary) -> None:
        """Take the row's deadline, enforcement and retry options (adopt changes them)."""
        self.boundary = boundary
        self.default_deadline = self.deadline_ms(boundary.timeout)
        self.inline = boundary.enforce == "cooperative"
        # The quiet fast path needs none of retries, scopes and a shared bulkhead:
        # computed once, so the hot path tests one attribute.
        self.plain = (
            self.ledger.policy is None
            and self.scope is None
            and (self.bulkhead is None or self.slots is not None)
        )

    def call(
        self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Any
    ) -> R:
        """:meth:`Breaker.call <toolbreaker.Breaker.call>`: ``fn(*args, **kwargs)``.

        The quiet fast path first (no permit, no lock, no store round trip unless the core
        may care), then the open hot path (the core's idle window), else one attempt or
        the retry loop.
        """
        view = self.view
        state = view.state
        ticks = self.ticks
        start = ticks()
        # Admitted on the view only while its lease holds (stores.View), by this reading.
        leased = view.lease.until_ns > (start if self.monotonic else time.monotonic_ns())
        if state is self.admission.quiet and state is not None and self.plain and leased:
            # _deadline_of(), inlined: its call frame would add a third to this path.
            deadline = self.default_deadline if timeout is UNSET else self.deadline_ms(timeout)
            if deadline is not None and not self.inline:
                return self._quiet_in_thread(state, deadline, fn, args, kwargs)
            if deadline is not None:
                # Quiet fast path: no permit, no lock, no record unless something happens.
                slots = self.slots  # a bulkhead of this process only: a counter
                if slots is not None and not slots.enter():
                    raise self.no_slot(SATURATED, deadline).error()
                self.stats.admitted += 1
                try:
                    try:
                        result = fn(*args, **kwargs)
                        if type(result) not in PLAIN_TYPES and is_awaitable(result):
                            raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
                    except BaseException as exc:
                        self._quiet_outcome(state, start // self.per_ms, deadline, exc)
                        raise
                    # Settle after all only if the core may care (see the class).
                    if (
                        self.result_is_failure is not None
                        or ticks() - start > deadline * self.per_ms
                        or view.state is not state
                    ):
                        self._quiet_outcome(state, start // self.per_ms, deadline, result)
                    elif (tally := view.tally) is not None:
                        # A quiet call of the history: Tally.call(), inlined for its state.
                        hot = tally.hot_call
                        if hot[0] is state:
                            hot[1][0] += 1
                        else:
                            tally.call(state, start // self.per_ms)
                    return result
                finally:
                    if slots is not None:
                        slots.leave()
        elif (
            state is not None
            and self.plain
            and (idle := self.admission.cooling(state, now := start // self.per_ms)) is not None
        ):
            raise idle.error(self.key, now)  # the open hot path: the core's idle window
        if self.ledger.policy is None:
            return self.call_once(fn, args, kwargs, timeout)
        return self._retrying(fn, args, kwargs, timeout)

    async def acall(
        self,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: Any,
    ) -> R:
        """:meth:`call` for the event loop: each attempt is cancelled at its deadline."""
        view = self.view
        state = view.state
        start = self.ticks()
        leased = view.lease.until_ns > (start if self.monotonic else time.monotonic_ns())
        if state is self.admission.quiet and state is not None and self.plain and leased:
            # _deadline_of(), inlined: its call frame would add a third to this path.
            deadline = self.default_deadline if timeout is UNSET else self.deadline_ms(timeout)
            if deadline is not None:
                # Quiet fast path, as in call(); the deadline is kept by the loop's watchdog.
                slots = self.slots
                if slots is not None and not slots.enter():
                    raise self.no_slot(SATURATED, deadline).error()
                self.stats.admitted += 1
                try:
                    if self.inline:
                        try:
                            result = await fn(*args, **kwargs)
                        except BaseException as exc:
                            start //= self.per_ms
                            await self.admission.quiet_permit(state, start, deadline).arecord(exc)
                            raise
                    else:
                        # within(), inline: no coroutine frame of its own per call.
                        call = fn(*args, **kwargs)
                        dog = watch(call, deadline / 1000)
                        try:
                            result = await call
                        except BaseException as exc:
                            # The deadline's timeout is a timeout; the call's own raise
                            # is classified, as on every path (sync and async).
                            fired = dog.fired(call, exc)
                            start //= self.per_ms
                            permit = self.admission.quiet_permit(state, start, deadline)
                            await permit.arecord(_TIMEOUT if fired else exc)
                            if fired:
                                raise deadline_passed(deadline / 1000) from None
                            raise
                        dog.done(call)
                    # Settled after all only if the core may care (see the class); the
                    # tally's hot path inline as in call(): Breaker.acall's coroutine
                    # costs about what these two frames did.
                    if (
                        self.result_is_failure is not None
                        or self.ticks() - start > deadline * self.per_ms
                        or view.state is not state
                    ):
                        start //= self.per_ms
                        await self.admission.quiet_permit(state, start, deadline).arecord(
                            self.admission.result_verdict(result)
                        )
                    elif (tally := view.tally) is not None:
                        hot = tally.hot_call
                        if hot[0] is state:
                            hot[1][0] += 1
                        else:
                            tally.call(state, start // self.per_ms)
                    return result
                finally:
                    if slots is not None:
                        slots.leave()
        elif (
            state is not None
            and self.plain
            and (idle := self.admission.cooling(state, now := start // self.per_ms)) is not None
        ):
            raise idle.error(self.key, now)  # the open hot path: the core's idle window
        if self.ledger.policy is None:
            return await self.acall_once(fn, args, kwargs, timeout)
        return await self._aretrying(fn, args, kwargs, timeout)

    def _retrying(
        self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Any
    ) -> R:
        """:meth:`call` with retries: each attempt is one :meth:`call_once`.

        Its own frame, so that the closure is not :meth:`call`'s: a closure there would
        make every name it captures a cell, slower on the quiet fast path too.
        """
        return self.retries.run(
            lambda seconds: self.call_once(fn, args, kwargs, seconds),
            self.required_deadline(timeout),
            self.failure,
            self.boundary.max_retry_after_ms,
        )

    async def _aretrying(
        self,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: Any,
    ) -> R:
        """:meth:`acall` with retries: each attempt is one :meth:`acall_once`."""
        return await self.retries.arun(
            lambda seconds: self.acall_once(fn, args, kwargs, seconds),
            self.required_deadline(timeout),
            self.failure,
            self.boundary.max_retry_after_ms,
        )

    def call_once(
        self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Any
    ) -> R:
        """One attempt of :meth:`call` past the quiet fast path (a retry, a scoped call).

        Raises:
            CircuitOpen: rejected locally; ``.result`` is the tool-unavailable result.
            TimeoutError: the deadline passed (recorded as a qualifying failure).
            Exception: whatever ``fn`` raised, after recording it.
        """
        if self.scope is not None and (target := self.scope()) is not None:
            return target.call(fn, args, kwargs, timeout)
        deadline, state, now = self._attempt(timeout)
        if not self.inline:
            return self._run_in_thread(state, now, fn, args, kwargs, deadline)
        permit = self.enter(now, deadline)
        if not isinstance(permit, Permit):
            raise permit.error()
        try:
            result = fn(*args, **kwargs)
            if type(result) not in PLAIN_TYPES and is_awaitable(result):
                raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
        except BaseException as exc:
            permit.record(exc)
            raise
        self.admission.record_result(permit, result)
        return result

    async def acall_once(
        self,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: Any,
    ) -> R:
        """:meth:`call_once` for :meth:`acall`: the call is cancelled at its deadline."""
        if self.scope is not None and (target := self.scope()) is not None:
            return await target.acall(fn, args, kwargs, timeout)
        deadline, _, now = self._attempt(timeout)
        permit = await self.aenter(now, deadline)
        if not isinstance(permit, Permit):
            raise permit.error()
        if self.inline:
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                await permit.arecord(exc)
                raise
        else:
            call = fn(*args, **kwargs)
            dog = watch(call, deadline / 1000)
            try:
                result = await call
            except BaseException as exc:
                # The deadline's timeout is a timeout; the call's own raise is classified.
                fired = dog.fired(call, exc)
                await permit.arecord(_TIMEOUT if fired else exc)
                if fired:
                    raise deadline_passed(deadline / 1000) from None
                raise
            dog.done(call)
        await permit.arecord(self.admission.result_verdict(result))
        return result

    def failure(self, exc: BaseException) -> Failure:
        """What a failed attempt tells the retry core."""
        verdict = self.admission.verdict_of(exc)
        state = self.view.state
        return Failure(
            at=self.clock(),
            kind=verdict.kind,
            detail=verdict.detail,
            status=verdict.status,
            retry_after_ms=verdict.retry_after_ms,
            may_have_committed=not self.boundary.idempotent and may_have_committed(exc, verdict),
            breaker_open=state is not None and rejects_callers(state, self.admission.policy),
        )

    def _quiet_in_thread(
        self,
        state: BreakerState,
        deadline: int,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """call()'s quiet fast path in a worker thread: no permit, no store round trip.

        As inline, the call is settled after all only when the core may care (a failure,
        a timeout, a late or a predicate's result, a state that changed meanwhile). A
        bulkhead of this process is a counter, given back when the call is over, which
        may be long after its deadline. :meth:`_worker` and the settling test are
        inlined: the caller's every step here also keeps the worker's CPU idle longer,
        and waking it from idle is most of what a hand-off costs.
        """
        slots = self.slots
        if slots is not None and not slots.enter():
            raise self.no_slot(SATURATED, deadline).error()
        pool = self.workers or self._start_workers()
        try:
            worker = pool.acquire()
        except BaseException:
            if slots is not None:
                slots.leave()
            raise
        if worker is None:
            if slots is not None:
                slots.leave()
            raise self._no_worker(pool, False, False)
        self.stats.admitted += 1
        ticks = self.ticks
        start = ticks()
        then = None if slots is None else slots.leave
        try:
            result = worker.run(fn, args, kwargs, deadline / 1000, then)
            if type(result) not in PLAIN_TYPES and is_awaitable(result):
                raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
        except BaseException as exc:
            self._quiet_outcome(state, start // self.per_ms, deadline, exc)
            raise
        if result is OVERDUE:
            self.admission.quiet_permit(state, start // self.per_ms, deadline).record(_TIMEOUT)
            raise self._overdue(deadline)
        if (
            self.result_is_failure is not None
            or ticks() - start > deadline * self.per_ms
            or self.view.state is not state
        ):
            self._quiet_outcome(state, start // self.per_ms, deadline, result)
        elif (tally := self.view.tally) is not None:
            tally.call(state, start // self.per_ms)
        return result

    def _quiet_outcome(
        self, state: BreakerState, start: int, deadline: int, outcome: object
    ) -> None:
        """Settle a fast-path call that turned out not to be a no-op after all."""
        permit = self.admission.quiet_permit(state, start, deadline)
        if isinstance(outcome, BaseException):
            permit.record(outcome)
        else:
            self.admission.record_result(permit, outcome)

    def _attempt(self, timeout: float | None) -> tuple[int, BreakerState | None, int]:
        """An attempt's deadline in ms, the state this process sees and the time.

        Raises:
            CircuitOpen: the breaker is open and cooling down.
        """
        deadline = self.required_deadline(timeout)
        state = self.view.state
        now = self.clock()
        if state is not None and (idle := self.admission.cooling(state, now)) is not None:
            raise idle.error(self.key, now)
        return deadline, state, now

    def _run_in_thread(  # noqa: PLR0917 - the pieces of one call, from call() only
        self,
        state: BreakerState | None,
        now: int,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deadline: int,
    ) -> R:
        """Run a sync call in a worker thread; the caller returns at the deadline.

        First the bulkhead slot, then the worker, then admission: a call the bulkhead
        refuses never takes a worker, and one refused a worker (hung calls hold them)
        never reaches the store. Unless closed, the call may be a probe: it may run
        beside the hung calls the reserved worker is kept for, so they cannot starve
        recovery. The slot goes with the call and comes back when the call is over.
        """
        slot = None
        if self.bulkhead is not None:
            taken = self.bulkhead.acquire(self._slot_ms(deadline))
            if not isinstance(taken, Slot):
                raise self.no_slot(taken, deadline).error()
            slot = taken
        try:
            worker = self._worker(state is not None and may_probe(state))
            try:
                permit = self.admission.local(now, deadline) or self.admission.admit(now, deadline)
            except BaseException:
                worker.release()
                raise
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        if not isinstance(permit, Permit):
            worker.release()
            if slot is not None:
                slot.release()
            raise permit.error()
        try:
            result = self._hand_off(worker, fn, args, kwargs, deadline, slot)
            if type(result) not in PLAIN_TYPES and is_awaitable(result):
                raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
        except BaseException as exc:
            permit.record(exc)  # the call's own raise is classified, as on every path
            raise
        if result is OVERDUE:
            permit.record(_TIMEOUT)  # the deadline's timeout
            raise self._overdue(deadline)
        self.admission.record_result(permit, result)
        return result

    def _worker(self, probe: bool, *, admitted: bool = False) -> Worker:
        """A worker for the call, or the ``hung`` rejection; never a queue.

        Calls within their deadline never limit it. ``admitted``: the call was counted
        as admitted already (a step); it is not, after all.
        """
        pool = self.workers or self._start_workers()
        worker = pool.acquire(probe=probe)
        if worker is None:
            raise self._no_worker(pool, probe, admitted)
        return worker

    def _no_worker(self, pool: Workers, probe: bool, admitted: bool) -> CircuitOpen:
        """Calls hung past their deadline hold the workers this call may use: denied."""
        stats = self.stats
        if admitted:
            stats.admitted -= 1
        stats.rejected += 1
        stats.hung += 1
        # Nothing says when a hung call returns: the model waits out a cooldown.
        wait = self.admission.policy.cooldown_ms
        self.degradation.hung(pool.pinned, pool.limit(probe=probe), wait)  # for listeners
        return circuit_open(self.key, _HUNG, wait, self.admission.render)

    def _hand_off(  # noqa: PLR0917 - the pieces of one call
        self,
        worker: Worker,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deadline: int | None,
        slot: Slot | None,
        stop: Callable[[], bool] | None = None,
        every: float = 0.0,
    ) -> R | Overdue:
        """Run ``fn`` in ``worker``: :data:`OVERDUE` if its caller stopped waiting first.

        The one rule for what a call holds: ``slot`` is given back once the call is over,
        and a call still running when its caller stops waiting (its deadline passed, or
        ``stop()`` said so) holds it, its lease renewed, until it returns.
        """
        then = None if slot is None else slot.release
        timeout = -1 if deadline is None else deadline / 1000
        result = worker.run(fn, args, kwargs, timeout, then, stop=stop, every=every)
        if result is OVERDUE and slot is not None:
            slot.hang()
        return result

    def _overdue(self, deadline: int | None) -> TimeoutError:
        return TimeoutError(
            f"{self.tool!r} exceeded its {deadline} ms deadline; if the call had started "
            "it keeps its worker (and its bulkhead slot) until it returns, and its result "
            "is treated as ambiguous"
        )

    def run(self, step: Step, fn: Callable[..., R], kwargs: dict[str, Any]) -> R:
        """:meth:`Breaker.run <toolbreaker.Breaker.run>`: an admitted step's call, in time."""
        deadline = None if step.deadline is None else max(1, round(step.deadline * 1000))
        if self.inline:
            return fn(**kwargs)
        result = self._run_step(step, fn, kwargs, deadline)
        if result is OVERDUE:
            raise self._overdue(deadline)
        return result

    def run_until(
        self, step: Step, fn: Callable[[], R], stop: Callable[[], bool], *, every: float
    ) -> R | Overdue:
        """:meth:`Breaker.run_until <toolbreaker.Breaker.run_until>`: until it returns or stop."""
        return self._run_step(step, fn, {}, None, stop, every)

    def _run_step(  # noqa: PLR0917 - the pieces of one call
        self,
        step: Step,
        fn: Callable[..., R],
        kwargs: dict[str, Any],
        deadline: int | None,
        stop: Callable[[], bool] | None = None,
        every: float = 0.0,
    ) -> R | Overdue:
        """An admitted step's call in a worker; its bulkhead slot goes with the call."""
        permit = step.permit
        worker = self._worker(bool(getattr(permit, "probe", False)), admitted=True)
        slot: Slot | None = getattr(permit, "slot", None)
        if slot is not None:
            permit.slot = None  # it goes with the call: back when the call is over
            if stop is not None:
                stop = _held_past(permit, slot, stop)
        return self._hand_off(worker, fn, (), kwargs, deadline, slot, stop, every)

    async def arun(self, step: Step, fn: Callable[..., Awaitable[R]], kwargs: dict[str, Any]) -> R:
        """Await ``fn(**kwargs)`` for an admitted ``step``, cancelled at its deadline."""
        if self.inline or step.deadline is None:
            return await fn(**kwargs)
        return await within(fn(**kwargs), step.deadline)

    def _start_workers(self) -> Workers:
        with self.workers_lock:
            workers = self.workers
            if workers is None:
                workers = self.workers = Workers(
                    self.max_workers, name=f"toolbreaker-{self.key}", on_late=self._late
                )
                self.stats.follow_workers(workers)
        return workers

    def _late(self) -> None:
        # The timeout (or the caller's cancellation) already settled the call; a late
        # result is ambiguous evidence, never a success, and must not count it twice.
        self.stats.late_results += 1

    def enter(self, now: int, deadline: int | None) -> Permit[BreakerT] | Rejection[BreakerT]:
        """A bulkhead slot, then admission: allow(), and call()/acall() past their fast paths.

        :meth:`entering`, driven; without a bulkhead its first line, inline: a generator
        and its driver cost as much as the cheapest answer, the view's (``allow()`` of an
        open breaker twice over). ``test_enter_without_a_bulkhead_is_its_flow`` holds the
        copy to the flow.
        """
        if self.bulkhead is None:
            gate = self.admission
            return gate.local(now, deadline) or gate.admit(now, deadline)
        return drive(self.entering(now, deadline))

    async def aenter(
        self, now: int, deadline: int | None
    ) -> Permit[BreakerT] | Rejection[BreakerT]:
        """:meth:`enter` for the event loop: a round trip, if one is needed, is awaited."""
        if self.bulkhead is None:
            gate = self.admission
            return gate.local(now, deadline) or await gate.aadmit(now, deadline)
        return await adrive(self.entering(now, deadline))

    def entering(
        self, now: int, deadline: int | None
    ) -> Flow[Permit[BreakerT] | Rejection[BreakerT]]:
        """:meth:`enter` and :meth:`aenter`, once: a slot, then admission.

        Admission is answered from the view where it can be, else by a round trip to the
        store; a rejected call gives its slot back.
        """
        gate, bulkhead = self.admission, self.bulkhead
        if bulkhead is None:
            return gate.local(now, deadline) or (
                yield Twin(gate.admit, gate.aadmit, (now, deadline))
            )
        slot = yield Twin(bulkhead.acquire, bulkhead.aacquire, (self._slot_ms(deadline),))
        if not isinstance(slot, Slot):
            return self.no_slot(slot, deadline)
        try:
            admission = gate.local(now, deadline) or (
                yield Twin(gate.admit, gate.aadmit, (now, deadline))
            )
        except BaseException:
            yield Twin(slot.release, slot.arelease)
            raise
        if isinstance(admission, Permit):
            admission.slot = slot  # an admitted call holds it until it is settled
        else:
            yield Twin(slot.release, slot.arelease)
        return admission

    def _slot_ms(self, deadline: int | None) -> int:
        """How long a slot may be held: the call's deadline (a probe lease without one)."""
        return self.admission.policy.lease_ttl_ms if deadline is None else deadline

    def no_slot(self, why: str, deadline: int | None) -> Rejection[BreakerT]:
        """The bulkhead is full (``saturated``) or its store is down: denied at once."""
        self.stats.rejected += 1
        if why == SATURATED:
            self.stats.saturated += 1
            limit = self.bulkhead.limit if self.bulkhead is not None else None
            self.degradation.saturated("bulkhead", limit, deadline)  # for listeners
            # A slot is free again within one deadline unless its call hangs.
            return Rejection(self.admission, SATURATED, deadline)
        return Rejection(self.admission, STORE_DOWN, None)

    def required_deadline(self, timeout: float | None) -> int:
        """The call's deadline in ms (``timeout`` or the default); every call needs one."""
        deadline = self.deadline_of(timeout)
        if deadline is None:
            raise self.no_deadline()
        return deadline

    def deadline_of(self, timeout: float | None) -> int | None:
        """A call's deadline in ms: ``timeout``'s, or the row's when it is :data:`UNSET`."""
        return self.default_deadline if timeout is UNSET else self.deadline_ms(timeout)

    def deadline_ms(self, timeout: float | None) -> int | None:
        """``timeout`` seconds in ms (``None``: no deadline); checked."""
        if timeout is None:
            return None
        return max(1, round(check_seconds(timeout, "timeout") * 1000))

    def no_deadline(self) -> PolicyError:
        """The error of a call with no deadline at all."""
        return no_deadline(self.key)


def _not_awaited(result: object) -> AsyncCallError:
    return not_awaited(
        result,
        "breaker.call()",
        "await breaker.acall(fn, ...) instead (or breaker.guard(fn): a coroutine function "
        "gets the async guard)",
    )


def _held_past(
    permit: Permit[BreakerT], slot: Slot, stop: Callable[[], bool]
) -> Callable[[], bool]:
    """``stop``, which also holds ``slot`` once the call runs past its deadline.

    A caller that waits with no deadline of its own (``run_until``) knows the call
    still runs: past its deadline its slot must not run out as a lost permit's would
    (:meth:`Permit.hold_past_deadline`); it is held until the call returns.
    """
    held = False

    def asked() -> bool:
        nonlocal held
        if not held:
            held = permit.hold_past_deadline(slot)
        return stop()

    return asked
