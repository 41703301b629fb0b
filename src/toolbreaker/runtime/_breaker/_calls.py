"""A breaker's calls: ``call()``/``acall()``, their quiet fast paths, workers, deadlines.

In a *quiet* state (``is_quiet``) a call is admitted and a
success changes nothing, so the fast paths take no permit, no lock and no store round
trip unless something happens; while open and cooling down, a call is rejected the same
way, from the core's idle window (:func:`~toolbreaker.core._breaker.predicates.idle_window`,
kept by the admission layer while it holds). Sync calls
run in a worker thread by default so a deadline can be kept; the bulkhead slot goes
with the call and comes back when it really ends.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from toolbreaker.core._breaker.predicates import may_probe, rejects_callers
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.core._retry import Failure
from toolbreaker.errors import AsyncCallError, CircuitOpen, circuit_open
from toolbreaker.runtime._breaker._admission import UNSET, Admission, Idle, Permit
from toolbreaker.runtime._breaker._bulkhead import SATURATED, Slot
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
from toolbreaker.runtime._breaker._ledger import RetryLedger
from toolbreaker.runtime._breaker._retries import Retries
from toolbreaker.runtime._breaker._scope import current_scope
from toolbreaker.runtime._breaker._scopes import Scopes
from toolbreaker.runtime._step import Step
from toolbreaker.runtime._sync_path import PLAIN_TYPES, is_awaitable, not_awaited

if TYPE_CHECKING:
    from toolbreaker.runtime._breaker._breaker import Breaker

__all__ = ["Calls"]

R = TypeVar("R")

_TIMEOUT: Final = Verdict("failure", "timeout")
_HUNG: Final = "hung"


class Calls(Admission):
    """Running calls: ``call``/``acall`` with their fast paths, workers and deadlines."""

    # Parts this layer drives, made by Breaker.__init__ with explicit constructors.
    _ledger: RetryLedger
    _retries: Retries
    _scopes: Scopes | None

    def call(
        self, fn: Callable[..., R], /, *args: Any, timeout: float | None = UNSET, **kwargs: Any
    ) -> R:
        """Run ``fn(*args, **kwargs)`` through the breaker, retrying by the row's policy.

        With a ``retry`` policy, a failed attempt is retried as the retry core decides
        (:mod:`toolbreaker.core._retry`): never while the breaker is open, never a class no
        retry can fix, never an attempt that may have committed (unless the row is
        ``read`` or ``idempotent``), never past the end-to-end deadline (each attempt's
        deadline is cut to what is left) and never beyond the retry budget. **Retries
        belong to one layer**: if this one retries, give the client inside the tool
        ``max_retries=0`` and turn off the framework's tool retries.

        Raises:
            CircuitOpen: rejected locally; ``.result`` is the tool-unavailable result.
            TimeoutError: the deadline passed (recorded as a qualifying failure).
            Exception: whatever the last attempt of ``fn`` raised, after recording it.
        """
        view = self._view
        state = view.state
        ticks = self._ticks
        start = ticks()
        # Admitted on the view only while its lease holds (stores.View), by this reading.
        leased = view.lease.until_ns > (start if self._monotonic else time.monotonic_ns())
        if state is self._quiet and state is not None and self._plain and leased:
            # _deadline_of(), inlined: its call frame would add a third to this path.
            deadline = self._default_deadline if timeout is UNSET else self._deadline_ms(timeout)
            if deadline is not None and not self._inline:
                return self._quiet_in_thread(state, deadline, fn, args, kwargs)
            if deadline is not None:
                # Quiet fast path: no permit, no lock, no record unless something happens.
                slots = self._slots  # a bulkhead of this process only: a counter
                if slots is not None and not slots.enter():
                    raise self._no_slot(SATURATED, deadline).error()
                self.stats.admitted += 1
                try:
                    try:
                        result = fn(*args, **kwargs)
                        if type(result) not in PLAIN_TYPES and is_awaitable(result):
                            raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
                    except BaseException as exc:
                        self._quiet_outcome(state, start // self._per_ms, deadline, exc)
                        raise
                    # Settle after all only if the core may care: _unquiet(), inlined on
                    # the cheapest path of all (a call frame costs a fifth of its overhead).
                    if (
                        self.result_is_failure is not None
                        or ticks() - start > deadline * self._per_ms
                        or view.state is not state
                    ):
                        self._quiet_outcome(state, start // self._per_ms, deadline, result)
                    elif (tally := view.tally) is not None:
                        # A quiet call of the history: Tally.call(), inlined for its state.
                        hot = tally.hot_call
                        if hot[0] is state:
                            hot[1][0] += 1
                        else:
                            tally.call(state, start // self._per_ms)
                    return result
                finally:
                    if slots is not None:
                        slots.leave()
        elif (
            state is not None
            and self._plain
            and (idle := self._cooling(state, now := start // self._per_ms)) is not None
        ):
            raise idle.error(self.key, now)  # the open hot path: the core's idle window
        if self._ledger.policy is None:
            return self._call_once(fn, *args, timeout=timeout, **kwargs)
        return self._retrying(fn, args, kwargs, timeout)

    async def acall(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        timeout: float | None = UNSET,
        **kwargs: Any,
    ) -> R:
        """Await ``fn(*args, **kwargs)`` through the breaker, retrying as :meth:`call` does.

        Each attempt is cancelled at its deadline; waits between attempts never block the
        loop.

        Raises:
            CircuitOpen: as :meth:`call` (rejected locally, with the model's result).
            TimeoutError: an attempt's deadline passed; the attempt was cancelled.
            Exception: whatever the last attempt of ``fn`` raised, after recording it.
        """
        view = self._view
        state = view.state
        start = self._ticks()
        leased = view.lease.until_ns > (start if self._monotonic else time.monotonic_ns())
        if state is self._quiet and state is not None and self._plain and leased:
            # _deadline_of(), inlined: its call frame would add a third to this path.
            deadline = self._default_deadline if timeout is UNSET else self._deadline_ms(timeout)
            if deadline is not None:
                # Quiet fast path, as in call(); the deadline is kept by the loop's watchdog.
                slots = self._slots
                if slots is not None and not slots.enter():
                    raise self._no_slot(SATURATED, deadline).error()
                self.stats.admitted += 1
                try:
                    if self._inline:
                        try:
                            result = await fn(*args, **kwargs)
                        except BaseException as exc:
                            start //= self._per_ms
                            await self._quiet_permit(state, start, deadline).arecord(exc)
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
                            start //= self._per_ms
                            permit = self._quiet_permit(state, start, deadline)
                            await permit.arecord(_TIMEOUT if fired else exc)
                            if fired:
                                raise deadline_passed(deadline / 1000) from None
                            raise
                        dog.done(call)
                    if self._unquiet(state, start, deadline):
                        start //= self._per_ms
                        await self._quiet_permit(state, start, deadline).arecord(
                            self.result_verdict(result)
                        )
                    elif (tally := view.tally) is not None:
                        tally.call(state, start // self._per_ms)
                    return result
                finally:
                    if slots is not None:
                        slots.leave()
        elif (
            state is not None
            and self._plain
            and (idle := self._cooling(state, now := start // self._per_ms)) is not None
        ):
            raise idle.error(self.key, now)  # the open hot path: the core's idle window
        if self._ledger.policy is None:
            return await self._acall_once(fn, *args, timeout=timeout, **kwargs)
        return await self._aretrying(fn, args, kwargs, timeout)

    def _retrying(
        self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Any
    ) -> R:
        """:meth:`call` with retries: each attempt is one :meth:`_call_once`.

        Its own frame, so that the closure is not :meth:`call`'s: a closure there would
        make every name it captures a cell, slower on the quiet fast path too.
        """
        return self._retries.run(
            lambda seconds: self._call_once(fn, *args, timeout=seconds, **kwargs),
            self._required_deadline(timeout),
            self._failure,
            self.boundary.max_retry_after_ms,
        )

    async def _aretrying(
        self,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: Any,
    ) -> R:
        """:meth:`acall` with retries: each attempt is one :meth:`_acall_once`."""
        return await self._retries.arun(
            lambda seconds: self._acall_once(fn, *args, timeout=seconds, **kwargs),
            self._required_deadline(timeout),
            self._failure,
            self.boundary.max_retry_after_ms,
        )

    def _call_once(
        self, fn: Callable[..., R], /, *args: Any, timeout: float | None = UNSET, **kwargs: Any
    ) -> R:
        """One attempt of :meth:`call` past the quiet fast path (a retry, a scoped call).

        Raises:
            CircuitOpen: rejected locally; ``.result`` is the tool-unavailable result.
            TimeoutError: the deadline passed (recorded as a qualifying failure).
            Exception: whatever ``fn`` raised, after recording it.
        """
        if self._scopes is not None and (target := self._scope_target()) is not None:
            return target.call(fn, *args, timeout=timeout, **kwargs)
        deadline, state, now = self._attempt(timeout)
        if not self._inline:
            return self._run_in_thread(state, now, fn, args, kwargs, deadline)
        permit = self._enter(now, deadline)
        if not isinstance(permit, Permit):
            raise permit.error()
        try:
            result = fn(*args, **kwargs)
            if type(result) not in PLAIN_TYPES and is_awaitable(result):
                raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
        except BaseException as exc:
            permit.record(exc)
            raise
        self.record_result(permit, result)
        return result

    async def _acall_once(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        timeout: float | None = UNSET,
        **kwargs: Any,
    ) -> R:
        """:meth:`_call_once` for :meth:`acall`: the call is cancelled at its deadline."""
        if self._scopes is not None and (target := self._scope_target()) is not None:
            return await target.acall(fn, *args, timeout=timeout, **kwargs)
        deadline, _, now = self._attempt(timeout)
        permit = await self._aenter(now, deadline)
        if not isinstance(permit, Permit):
            raise permit.error()
        if self._inline:
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
        await permit.arecord(self.result_verdict(result))
        return result

    def _scope_target(self) -> Breaker | None:
        """The current scope's breaker, which serves the call; ``None``: this one does."""
        scopes = self._scopes
        if scopes is None:
            return None
        value = current_scope(scopes.name)
        return None if value is None else scopes.get(value)

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
        may be long after its deadline. :meth:`_worker` and :meth:`_unquiet` are
        inlined: the caller's every step here also keeps the worker's CPU idle longer,
        and waking it from idle is most of what a hand-off costs.
        """
        slots = self._slots
        if slots is not None and not slots.enter():
            raise self._no_slot(SATURATED, deadline).error()
        pool = self._workers or self._start_workers()
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
        ticks = self._ticks
        start = ticks()
        then = None if slots is None else slots.leave
        try:
            result = worker.run(fn, args, kwargs, deadline / 1000, then)
            if type(result) not in PLAIN_TYPES and is_awaitable(result):
                raise _not_awaited(result)  # noqa: TRY301 - settled below, as the call's raise
        except BaseException as exc:
            self._quiet_outcome(state, start // self._per_ms, deadline, exc)
            raise
        if result is OVERDUE:
            self._quiet_permit(state, start // self._per_ms, deadline).record(_TIMEOUT)
            raise self._overdue(deadline)
        if (
            self.result_is_failure is not None
            or ticks() - start > deadline * self._per_ms
            or self._view.state is not state
        ):
            self._quiet_outcome(state, start // self._per_ms, deadline, result)
        elif (tally := self._view.tally) is not None:
            tally.call(state, start // self._per_ms)
        return result

    def _unquiet(self, state: BreakerState, start: int, deadline: int) -> bool:
        """Whether a success on a quiet fast path must be settled after all.

        The fast paths of ``call``, ``acall`` and a worker skip the store because the
        core says a success in a quiet state changes nothing; that holds unless the row
        has a result predicate, the result came after the deadline (late: ambiguous,
        never a success) or the state changed meanwhile. ``start`` is in ticks. The two
        sync paths inline it (see there); a test drives all of them through both cases.
        """
        return (
            self.result_is_failure is not None
            or self._ticks() - start > deadline * self._per_ms
            or self._view.state is not state
        )

    def _quiet_outcome(
        self, state: BreakerState, start: int, deadline: int, outcome: object
    ) -> None:
        """Settle a fast-path call that turned out not to be a no-op after all."""
        permit = self._quiet_permit(state, start, deadline)
        if isinstance(outcome, BaseException):
            permit.record(outcome)
        else:
            self.record_result(permit, outcome)

    def _attempt(self, timeout: float | None) -> tuple[int, BreakerState | None, int]:
        """An attempt's deadline in ms, the state this process sees and the time.

        Raises:
            CircuitOpen: the breaker is open and cooling down.
        """
        deadline = self._required_deadline(timeout)
        state = self._view.state
        now = self.clock()
        if state is not None and (idle := self._cooling(state, now)) is not None:
            raise idle.error(self.key, now)
        return deadline, state, now

    def _quiet_permit(self, state: BreakerState, start: int, deadline: int) -> Permit:
        """The permit a fast-path call would have had, to settle it after all."""
        return Permit(self, None, state.generation, start, deadline, False)

    def _cooling(self, state: BreakerState, now: int) -> Idle | None:
        """The core's idle window that rejects a call at ``now``, the rejection counted.

        ``None``: no window holds (ask the core). The one rule of the open hot path:
        ``call``/``acall`` raise the rejection, a guarded tool returns it (no exception).
        """
        idle = self._idle_at(state, now)
        if idle is not None:
            self.stats.rejected += 1
            if (tally := self._view.tally) is not None:
                # A quiet rejection of the history: Tally.reject(), inlined for its state.
                hot = tally.hot_reject
                if hot[0] is state:
                    hot[1][0] += 1
                else:
                    tally.reject(state, now)
        return idle

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
        if self._bulkhead is not None:
            taken = self._bulkhead.acquire(self._slot_ms(deadline))
            if not isinstance(taken, Slot):
                raise self._no_slot(taken, deadline).error()
            slot = taken
        try:
            worker = self._worker(state is not None and may_probe(state))
            try:
                permit = self._local(now, deadline) or self._admit(now, deadline)
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
        self.record_result(permit, result)
        return result

    def _worker(self, probe: bool, *, admitted: bool = False) -> Worker:
        """A worker for the call, or the ``hung`` rejection; never a queue.

        Calls within their deadline never limit it. ``admitted``: the call was counted
        as admitted already (a step); it is not, after all.
        """
        pool = self._workers or self._start_workers()
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
        wait = self.policy.cooldown_ms
        self.degradation.hung(pool.pinned, pool.limit(probe=probe), wait)  # for listeners
        return circuit_open(self.key, _HUNG, wait, self._render)

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

    def run(self, step: Step, fn: Callable[..., R], /, **kwargs: Any) -> R:
        """Run ``fn(**kwargs)`` for an admitted ``step`` within its deadline.

        Settles nothing: settle the step with what this returns or raises. In the default
        ``enforce="thread"`` mode ``TimeoutError`` is raised at the deadline (a call
        still running then keeps the step's bulkhead slot until it returns), and
        :class:`~toolbreaker.CircuitOpen` (reason ``hung``) when calls hung past their
        deadline hold the workers this one may use.
        """
        deadline = None if step.deadline is None else max(1, round(step.deadline * 1000))
        if self._inline:
            return fn(**kwargs)
        result = self._run_step(step, fn, kwargs, deadline)
        if result is OVERDUE:
            raise self._overdue(deadline)
        return result

    def run_until(
        self, step: Step, fn: Callable[[], R], stop: Callable[[], bool], *, every: float
    ) -> R | Overdue:
        """Run ``fn()`` for an admitted ``step`` in a worker until it returns or ``stop()``.

        For a caller that may let the call go (a run guard's model turn cancels a call by
        policy when a required dependency opens): ``stop`` is asked every ``every``
        seconds while the call runs; no deadline is enforced, and a worker is used
        whatever ``enforce`` says (a call in the caller's thread could not be let go).
        Settles nothing. Returns ``fn()``'s result (raises what it raised), or
        :data:`~toolbreaker.runtime._breaker._deadline.OVERDUE` once ``stop()`` was true
        first: a call that had not started never starts; a running one goes on in its
        worker (pinned, as a call past its deadline) and keeps the step's bulkhead slot,
        its lease renewed, until it returns. Answered, it still counts until it ends. A
        call still running past the step's deadline keeps its slot the same way (it does
        not run out as a lost permit's would).

        Raises:
            CircuitOpen: reason ``hung``: calls hung past their deadline (or let go
                while they ran) hold the workers this one may use.
        """
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

    async def arun(self, step: Step, fn: Callable[..., Awaitable[R]], /, **kwargs: Any) -> R:
        """Await ``fn(**kwargs)`` for an admitted ``step``, cancelled at its deadline."""
        if self._inline or step.deadline is None:
            return await fn(**kwargs)
        return await within(fn(**kwargs), step.deadline)

    def _start_workers(self) -> Workers:
        with self._workers_lock:
            workers = self._workers
            if workers is None:
                workers = self._workers = self.stats._workers = Workers(
                    self._max_workers, name=f"toolbreaker-{self.key}", on_late=self._late
                )
        return workers

    def _late(self) -> None:
        # The timeout (or the caller's cancellation) already settled the call; a late
        # result is ambiguous evidence, never a success, and must not count it twice.
        self.stats.late_results += 1


def _not_awaited(result: object) -> AsyncCallError:
    return not_awaited(
        result,
        "breaker.call()",
        "await breaker.acall(fn, ...) instead (or breaker.guard(fn): a coroutine function "
        "gets the async guard)",
    )


def _held_past(permit: Permit, slot: Slot, stop: Callable[[], bool]) -> Callable[[], bool]:
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
