"""The runtime breaker: a thin shell around the core.

It reads the clock, runs the call, classifies the outcome and feeds events to the core
through a store.

Two paths, one decision-maker. Every transition is computed by the core's ``apply()``
inside the store. The shell only skips the store when the core has already said what
would happen: in a *quiet* state (:func:`~toolbreaker.core.is_quiet`) a request is
admitted and a success changes nothing; in a cooling-down open state
(:func:`~toolbreaker.core.idle_rejection`) a request is rejected and changes nothing. Those
two cases are most calls, and they cost no lock, no allocation of records and no I/O.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import functools
import hashlib
import inspect
import itertools
import os
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, ParamSpec, TypeVar, cast, overload

from toolbreaker.core.breaker.machine import (
    idle_rejection,
    is_evictable,
    is_quiet,
    may_probe,
    rejects_callers,
)
from toolbreaker.core.breaker.machine import retry_after_ms as core_retry_after_ms
from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.state import (
    PHASES,
    BreakerState,
    Event,
    Transition,
    admitted_probe,
    changed_phase,
    half_opened,
    opened,
    reopened,
)
from toolbreaker.core.retry import (
    Failure,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    RetryRecord,
    RetryState,
    decide,
    is_transient,
    refill,
    remaining_ms,
    spend,
    start,
    unavailable_reason,
)
from toolbreaker.core.run.redact import redact_text
from toolbreaker.core.run.retrying import (
    ModelRetries,
    action_of,
    failed_retryably,
    is_retry,
    observe,
)
from toolbreaker.errors import (
    CircuitOpen,
    PermitError,
    PolicyError,
    StoreUnavailable,
    circuit_open,
)
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.runtime._log import hook_failed, log
from toolbreaker.runtime._process import process_token
from toolbreaker.runtime._result import (
    error_result,
    retry_after_seconds,
    unavailable_result,
)
from toolbreaker.runtime._step import Step, no_deadline
from toolbreaker.runtime.breaker._boundary import (
    BREAKER_OPTIONS,
    Boundary,
    BreakerOptions,
    Enforce,
    check_seconds,
)
from toolbreaker.runtime.breaker._bulkhead import Bulkhead, Slot, shares_records
from toolbreaker.runtime.breaker._classify import SUCCESS, Verdict
from toolbreaker.runtime.breaker._commit import may_have_committed
from toolbreaker.runtime.breaker._deadline import OVERDUE, Overdue, Worker, Workers, watch, within
from toolbreaker.runtime.breaker._degrade import Degradation
from toolbreaker.runtime.breaker._layers import warn_nested_retries
from toolbreaker.runtime.breaker._scope import current_scope
from toolbreaker.runtime.breaker._shared_budget import SharedBudget
from toolbreaker.stores._protocol import Store, aapply
from toolbreaker.stores.memory import MemoryStore

if TYPE_CHECKING:  # typing on Python 3.10 has no Unpack; the annotation stays a string
    from typing_extensions import Unpack

__all__ = [
    "Breaker",
    "BreakerStats",
    "Enforce",
    "Listener",
    "Permit",
    "Rejection",
    "RetryListener",
]

P = ParamSpec("P")
R = TypeVar("R")

#: A listener receives every transition record the core produced, and the breaker.
Listener = Callable[[Transition, "Breaker"], None]
#: A retry listener receives every retry decision as a record (a retry trace line).
RetryListener = Callable[[RetryRecord], None]

_UNSET: Final[Any] = object()

#: Breakers that opened in this context while a run-guard step watched (see
#: :func:`watch_openings`): how a guard learns that a breaker *inside* its tool (an httpx
#: transport, a nested call) just opened, so the model hears "unavailable" at once.
_OPENED: contextvars.ContextVar[list[Breaker] | None] = contextvars.ContextVar(
    "toolbreaker_opened", default=None
)


def watch_openings() -> list[Breaker]:
    """Collect, from now on in this context, every breaker that opens; returns the list.

    Worker threads and tasks started from this context share the same list.
    """
    opened: list[Breaker] = []
    _OPENED.set(opened)
    return opened


_TIMEOUT: Final = Verdict("failure", "timeout")
_LATE: Final = Verdict("ambiguous", "late-result")
_PREDICATE_ERROR: Final = Verdict("ambiguous", "predicate-error")
_CLASSIFIER_ERROR: Final = Verdict("ambiguous", "classifier-error")
_STORE_DOWN: Final = "store-unavailable"
_SATURATED: Final = "saturated"
_RETRY_BUDGET: Final = "retry-budget"
_HUNG: Final = "hung"
_PLAIN_SCOPE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


class BreakerStats:
    """Counters of one breaker, for dashboards and tuning.

    Attributes:
        demand: requests, admitted or not.
        admitted: requests that reached the dependency.
        rejected: requests rejected locally.
        failures: qualifying and other failed outcomes by class (``http-503``, ``timeout``).
        opens: openings by the reason of the transition that opened the breaker.
        reopens_from_half_open: openings that came from a failed or expired probe.
        half_opens: times the breaker went half-open.
        late_results: results that arrived after their deadline (never successes).
        listener_errors: listener calls that raised (logged; the outcome stood).
        hook_errors: classifier or result predicate calls that raised (fail closed).
        saturated: calls denied at once because the bulkhead (``max_concurrent``) was full
            (also counted in ``rejected``); they are never queued.
        hung: sync calls denied at once because calls still running past their deadline
            held as many worker threads as may hang (``max_workers``; also counted in
            ``rejected``); in ``to_dict`` only once non-zero.
        pinned_workers: worker threads held right now by calls still running past their
            deadline (a gauge).
        time_in_state_ms: time spent in each phase, up to the last transition.
        retries: retry decisions by reason: ``retry`` (made), ``budget-exhausted``,
            ``max-attempts``, ``deadline`` ...; ``model-retry`` and
            ``model-retry-refused`` count the model's own re-calls of a failed call.
        would_reject: requests admitted only because the policy is in shadow mode or
            forced closed (enforcement would have rejected them); in ``to_dict`` only
            once non-zero.
        scope_overflows: calls of a scoped row that went to its shared overflow breaker
            because ``max_scopes`` breakers were live and none could be forgotten; in
            ``to_dict`` only once non-zero.
        degraded: answers served by the degradation matrix, per mode (``stale``,
            ``queue`` ...); in ``to_dict`` only once one was served.
        record_faults: faults of the shared store's records behind the bulkhead
            (``max_concurrent``) or the shared retry budget: a slot that could not be
            taken was denied, a retry that could not be paid for was not made; in
            ``to_dict`` only once non-zero.
    """

    __slots__ = (
        "_workers",
        "admitted",
        "degraded",
        "failures",
        "half_opens",
        "hook_errors",
        "hung",
        "late_results",
        "listener_errors",
        "opens",
        "record_faults",
        "rejected",
        "reopens_from_half_open",
        "retries",
        "saturated",
        "scope_overflows",
        "time_in_state_ms",
        "would_reject",
    )

    def __init__(self) -> None:
        self.admitted = 0
        self.rejected = 0
        self.failures: dict[str, int] = {}
        self.opens: dict[str, int] = {}
        self.reopens_from_half_open = 0
        self.half_opens = 0
        self.late_results = 0
        self.listener_errors = 0
        self.hook_errors = 0
        self.saturated = 0
        self.hung = 0
        self.would_reject = 0
        self.scope_overflows = 0
        self.record_faults = 0
        self.time_in_state_ms: dict[str, int] = dict.fromkeys(PHASES, 0)
        self.retries: dict[str, int] = {}
        self.degraded: dict[str, int] = {}
        self._workers: Workers | None = None

    @property
    def pinned_workers(self) -> int:
        """Worker threads held by calls still running past their deadline."""
        return 0 if self._workers is None else self._workers.pinned

    @property
    def demand(self) -> int:
        """Requests, admitted or rejected."""
        return self.admitted + self.rejected

    @property
    def half_open_reopen_ratio(self) -> float:
        """Share of half-open episodes that reopened: above ~0.7 the cooldown is too short."""
        return self.reopens_from_half_open / self.half_opens if self.half_opens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The counters as a JSON-ready dict."""
        out: dict[str, Any] = {
            "demand": self.demand,
            "admitted": self.admitted,
            "rejected": self.rejected,
            "failures": dict(self.failures),
            "opens": dict(self.opens),
            "half_opens": self.half_opens,
            "reopens_from_half_open": self.reopens_from_half_open,
            "half_open_reopen_ratio": self.half_open_reopen_ratio,
            "late_results": self.late_results,
            "listener_errors": self.listener_errors,
            "hook_errors": self.hook_errors,
            "saturated": self.saturated,
            "pinned_workers": self.pinned_workers,
            "time_in_state_ms": dict(self.time_in_state_ms),
            "retries": dict(self.retries),
        }
        if self.would_reject:
            out["would_reject"] = self.would_reject
        if self.scope_overflows:
            out["scope_overflows"] = self.scope_overflows
        if self.degraded:
            out["degraded"] = dict(self.degraded)
        if self.record_faults:
            out["record_faults"] = self.record_faults
        if self.hung:
            out["hung"] = self.hung
        return out


class Rejection:
    """A request the breaker rejected locally; carries the LLM-facing result."""

    __slots__ = ("breaker", "note", "reason", "retry_after_ms")
    admitted: Final = False

    def __init__(
        self, breaker: Breaker, reason: str, retry_after_ms: int | None, note: str | None = None
    ) -> None:
        self.breaker = breaker
        self.reason = reason
        self.retry_after_ms = retry_after_ms
        self.note = note  # an operator's reason for an isolation, shown to the model

    @property
    def result(self) -> dict[str, Any]:
        """The tool-unavailable result to hand to the model instead of running the tool."""
        return self.breaker._unavailable(self.reason, self.retry_after_ms, note=self.note)

    def result_for(self, tool: str) -> dict[str, Any]:
        """The same result worded for ``tool`` (several tools may share one breaker)."""
        return self.breaker._unavailable(
            self.reason, self.retry_after_ms, tool=tool, note=self.note
        )

    def error(self) -> CircuitOpen:
        """The same rejection as an exception (its ``result`` is rendered on first use)."""
        return CircuitOpen(
            self.breaker.key, self.reason, self.retry_after_ms, self.breaker._renderer(self.note)
        )


class Permit:
    """An admitted call; settle it exactly once with :meth:`record`.

    It carries the generation the call was admitted in (a late outcome of an older
    generation changes nothing) and, for a probe, the lease the core granted. A probe
    that is never settled is released by the core when its lease expires.
    """

    __slots__ = (
        "_settled",
        "admitted_at",
        "breaker",
        "call",
        "deadline_ms",
        "generation",
        "policy",
        "probe",
        "slot",
    )
    admitted: Final = True

    def __init__(  # noqa: PLR0917 - built by the breaker only
        self,
        breaker: Breaker,
        call: str | None,
        generation: int,
        admitted_at: int,
        deadline_ms: int | None,
        probe: bool,
        policy: Policy | None = None,
    ) -> None:
        self.breaker = breaker
        # The policy the call was admitted under settles it too: a swap never lands mid-call.
        self.policy = breaker.policy if policy is None else policy
        self.call = call
        self.generation = generation
        self.admitted_at = admitted_at
        self.deadline_ms = deadline_ms
        self.probe = probe
        # The bulkhead slot, given back when settled; a sync call run in a worker takes
        # it along and gives it back when it is over (past its deadline, perhaps).
        self.slot: Slot | None = None
        self._settled = False

    def record(
        self,
        outcome: Verdict | BaseException | Literal["success", "failure", "ignored", "ambiguous"],
    ) -> Transition | None:
        """Settle the call with an outcome.

        ``outcome`` is a :class:`Verdict`, an exception to classify, or an outcome name.
        A result that arrives after the deadline is ambiguous, never a success. Returns
        the core's record, or ``None`` when the core had declared the outcome a no-op.

        Raises:
            PermitError: the permit was already settled.
        """
        verdict, now = self._verdict(outcome)
        try:
            return self.breaker._settle(self, verdict, now)
        finally:
            if self.slot is not None:
                self.slot.release()

    async def arecord(
        self,
        outcome: Verdict | BaseException | Literal["success", "failure", "ignored", "ambiguous"],
    ) -> Transition | None:
        """:meth:`record` for the event loop: the store round trip is awaited, never blocks.

        Raises:
            PermitError: the permit was already settled.
        """
        verdict, now = self._verdict(outcome)
        try:
            return await self.breaker._asettle(self, verdict, now)
        finally:
            if self.slot is not None:
                await self.slot.arelease()

    def hold_past_deadline(self, slot: Slot | None = None) -> bool:
        """The call still runs (its caller waits on it): past its deadline, hold its slot.

        For a caller that knows the call has not ended: from its deadline on, the call's
        bulkhead slot (``slot``, by default the permit's) no longer runs out as a lost
        permit's would, and its store lease is renewed, until it is given back (when the
        permit is settled, or the call run in a worker returns). Returns whether it is
        held now; nothing before the deadline, without one, or without a slot.
        """
        slot = self.slot if slot is None else slot
        if slot is None or self.deadline_ms is None:
            return False
        if self.breaker.clock() - self.admitted_at < self.deadline_ms:
            return False
        slot.hang()
        return True

    def _verdict(
        self,
        outcome: Verdict | BaseException | Literal["success", "failure", "ignored", "ambiguous"],
    ) -> tuple[Verdict, int]:
        if self._settled:
            raise PermitError(f"permit {self.call or ''} for {self.breaker.key!r} settled twice")
        self._settled = True
        if isinstance(outcome, Verdict):
            verdict = outcome
        elif isinstance(outcome, BaseException):
            verdict = self.breaker.verdict_of(outcome)
        else:
            verdict = SUCCESS if outcome == "success" else Verdict(outcome, outcome)
        now = self.breaker.clock()
        if (
            verdict.kind == "success"
            and self.deadline_ms is not None
            and now - self.admitted_at > self.deadline_ms
        ):
            verdict = _LATE
        return verdict, now

    @property
    def settled(self) -> bool:
        """Whether :meth:`record` was called."""
        return self._settled


class Breaker:
    """A circuit breaker for one remote dependency (and operation class).

    Get breakers from a :class:`~toolbreaker.Registry` so the same key gives the same
    breaker; state lives in the store, never in a request.

    Args:
        dependency: the smallest remote dependency whose health can be observed.
        operation: the operation class (``read``, ``write`` ...); it gets its own state.
        policy: thresholds and cooldowns; defaults to :class:`Policy`'s.
        store: where state lives; a private :class:`MemoryStore` by default.
        clock: integer milliseconds, monotonic (``FakeClock`` in tests); by default the
            store's own clock if it has one (Redis: the server's), else this host's.
        timeout: the default deadline in seconds; every call needs one.
        enforce: how sync deadlines are enforced (see :data:`Enforce`).
        classifier: turns an exception into a :class:`Verdict`.
        result_is_failure: a predicate on results, e.g. a 200 whose body is an error.
        tool: the tool name the model sees (defaults to the dependency).
        fallback: the tool the model should use instead while this one is unavailable.
        fallback_note: what the model must say when it uses the fallback.
        retryable: whether the model may retry a transient failure while closed.
        owner: the team to page; shown on dashboards.
        instructions: per-reason instruction templates overriding the defaults.
        scope: key one breaker per value of this scope (see :class:`Boundary`).
        max_scopes: the most scoped breakers kept in this process.
        max_workers: for ``enforce="thread"`` calls, the most worker threads calls that
            hang past their deadline may hold (one of them kept for probes, when there
            are two or more), and the idle threads kept between calls. Calls within
            their deadline are never limited by it: every call gets a worker at once (a
            new thread if none is idle), never a queue. A call that hangs past its
            deadline keeps its worker (and its bulkhead slot) until it returns; while
            such calls hold all the workers they may, a call is rejected at once with
            reason ``hung``.
        retry: the retry policy ``call()``/``acall()`` follow (a
            :class:`~toolbreaker.core.retry.RetryPolicy` or a table of its fields);
            ``None``: no retries here. Pick one layer: see :meth:`call`.
        max_retry_after_ms: a server hint longer than this is never waited out: the tool
            is unavailable for the run.
        sleep: how ``call()`` waits between attempts (``time.sleep`` by default; tests
            pass a fake clock's advance). ``acall()`` awaits it if it returns an awaitable,
            else uses ``asyncio.sleep`` when it is not set.
        retry_seed: seeds the per-operation jitter seeds, for a reproducible run; by
            default each operation's seed is random. Every seed is in the retry records.
        degrade: the degradation chain while the tool may not be called (see
            :mod:`toolbreaker.core.degrade`); ``max_stale`` and ``stale_every`` go with
            ``stale``.
        health_check: a cheap check of the dependency (a :class:`HealthCheck`, or a
            callable of no arguments) that a health checker runs while the breaker is
            open; only the checker then probes (see :class:`~toolbreaker.HealthChecker`).
        max_concurrent: the bulkhead: the most calls in flight at once, across processes
            when the store is shared, until they really end (see :class:`Boundary`);
            ``None``: no limit.
        boundary: a ready :class:`~toolbreaker.Boundary` (a sheet row) instead of the
            options above; every option is validated once, by :class:`Boundary`.
    """

    def __init__(
        self,
        dependency: str,
        *,
        operation: str = "default",
        store: Store | None = None,
        clock: Clock | None = None,
        max_workers: int = 16,
        sleep: Callable[[float], Any] | None = None,
        retry_seed: int | None = None,
        boundary: Boundary | None = None,
        **options: Unpack[BreakerOptions],
    ) -> None:
        if boundary is None:
            unknown = options.keys() - BREAKER_OPTIONS
            if unknown:
                raise TypeError(f"Breaker() got an unexpected keyword argument {min(unknown)!r}")
            # The one list and the one validation of every option: Boundary's, which also
            # converts a retry table, a degrade mode, a health check callable and None.
            boundary = Boundary(dependency, operation, **options)  # type: ignore[arg-type]
        self.dependency = boundary.dependency
        self.operation = boundary.operation
        self.key = boundary.key
        self.policy = boundary.policy
        self.store: Store = store if store is not None else MemoryStore()
        self.clock: Clock = clock or clock_of(self.store)
        # The quiet fast paths time a call in the clock's own ticks: time.monotonic_ns
        # itself for the default clock (no Python frame per reading), else the clock.
        fast = self.clock is monotonic_ms
        self._ticks: Callable[[], int] = time.monotonic_ns if fast else self.clock
        self._per_ms = 1_000_000 if fast else 1
        self.classify = boundary.classifier
        self.result_is_failure = boundary.result_is_failure
        self.tool = boundary.tool or boundary.dependency
        self._configure(boundary)
        self.stats = BreakerStats()
        #: The row's degradation chain, carried out (see :mod:`toolbreaker.core.degrade`).
        self.degradation = Degradation(boundary, self.store, self.key, self.stats.degraded)
        self._render = self._unavailable
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise PolicyError(
                f"max_workers must be a positive integer, got {max_workers!r}",
                field="max_workers",
            )
        self._max_workers = max_workers
        self._workers: Workers | None = None
        self._workers_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._view = self.store.view(self.key)
        self._quiet: BreakerState | None = None
        self._ids = itertools.count(1)
        self._phase_since: int | None = None
        self._retry_lock = threading.Lock()
        self._set_retry(boundary.retry)
        self._retry_listeners: list[RetryListener] = []
        self._sleep = sleep
        self._seeds = random.Random(retry_seed) if retry_seed is not None else None  # noqa: S311 - jitter, not secrets
        #: The model as a retry layer: the calls whose last attempt failed retryably.
        self._model_retries = ModelRetries()
        self._scoped: collections.OrderedDict[str, Breaker] | None = (
            None if boundary.scope is None else collections.OrderedDict()
        )
        # The quiet fast path of call()/acall() needs none of retries, scopes and a
        # per-call deadline: computed once, so the hot path tests one attribute.
        self._bulkhead = (
            None
            if boundary.max_concurrent is None or self._scoped is not None
            else Bulkhead(
                self.key, boundary.max_concurrent, self.store, self.clock, self._record_fault
            )
        )
        # A bulkhead of this process alone keeps the quiet fast path: a counter around it.
        local = self._bulkhead is not None and not self._bulkhead.shared
        self._slots = self._bulkhead if local else None
        self._plain = self._is_plain()
        self._overflow: Breaker | None = None
        self._scopes_lock = threading.Lock()
        self._stamp = False  # set by adopt(): records then name their policy version

    # -- inspection -------------------------------------------------------------------

    @property
    def state(self) -> BreakerState:
        """The current state as this process sees it."""
        view = self._view.state
        return view if view is not None else self.store.load(self.key, self.policy)

    def retry_after_ms(self, state: BreakerState | None = None) -> int | None:
        """Milliseconds until a rejected request could be admitted, if known.

        ``state`` defaults to the current state as this process sees it.
        """
        return core_retry_after_ms(state or self.state, self.clock(), self.policy)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(record, breaker)`` for every transition; returns a remover.

        While a listener is registered every request goes through the core, so the
        listener also sees ``call-admitted`` and ``cooldown`` records. A scoped row's
        listeners hear each of its scoped breakers too, made before or after (as do its
        retry and degradation listeners). To hear every breaker of a registry or a run
        guard, now and later, attach there (:class:`~toolbreaker.runtime.Attachment`).
        """
        self._listeners.append(listener)
        self._quiet = None
        for child in self.scopes().values():
            child._quiet = None  # scoped breakers share this list of listeners
        return lambda: self._listeners.remove(listener)

    def hidden_for_ms(self) -> tuple[bool, int | None]:
        """Whether every call is rejected now without changing anything, and for how long.

        ``(True, ms)`` while open and cooling down (``ms`` until a probe), isolated or
        forced open (``ms`` is ``None``: until an operator acts); ``(False, None)``
        otherwise. This is what the adapters' opt-in *hide open tools* mode hides: a
        half-open breaker stays visible, since a probe slot may free up. For a scoped
        row, the current scope's breaker answers.
        """
        target = self.for_scope()
        state = target._view.state
        if state is None:
            state = target.state
        now = target.clock()
        if idle_rejection(state, now, target.policy) is None:
            return False, None
        return True, core_retry_after_ms(state, now, target.policy)

    def _configure(self, boundary: Boundary) -> None:
        """Take the row's options that may change while the breaker lives (see adopt)."""
        self.boundary = boundary
        self.timeout = boundary.timeout
        self._default_deadline = self._deadline_ms(boundary.timeout)
        self.enforce: Enforce = boundary.enforce
        self._inline = boundary.enforce == "cooperative"
        self.fallback = boundary.fallback
        self.fallback_note = boundary.fallback_note
        self.retryable = boundary.retryable
        self.owner = boundary.owner
        self.instructions = dict(boundary.instructions)
        self._rendered: dict[tuple[str, str, int, str | None], dict[str, Any]] = {}

    def _set_retry(self, retry: RetryPolicy | None) -> None:
        """The retry policy and its budget, per process or shared through the store."""
        self._retry = retry
        self._retry_budget = None if retry is None else RetryBudget.full(retry)
        self._shared_budget = (
            SharedBudget(self.key, retry, self.store, self._record_fault)  # type: ignore[arg-type]
            if retry is not None and shares_records(self.store)
            else None
        )

    def _is_plain(self) -> bool:
        """Whether the quiet fast path of call()/acall() may serve this breaker.

        It may without retries, scopes, or a bulkhead shared with other processes.
        """
        return (
            self._retry is None
            and self._scoped is None
            and (self._bulkhead is None or self._slots is not None)
        )

    def stamp_policy_version(self) -> None:
        """From now on, name in every record the policy version it was decided under.

        What a breaker following a published sheet does (:meth:`adopt` turns it on too):
        a registry whose follower runs calls it for each breaker it holds and makes.
        """
        self._stamp = True

    def adopt(self, boundary: Boundary) -> None:
        """Take a new sheet row (a published policy) between calls, keeping the state.

        The state stays in the store, untouched: the next event is decided under the new
        policy (a stored state the new policy cannot hold, e.g. more failures than a
        lowered threshold, loads as corrupt and fails closed, as any state does). A call
        already admitted is settled under the policy it was admitted under. The row's
        scope, bulkhead (``max_concurrent``), degradation chain (``degrade``,
        ``max_stale``, ``stale_every``) and code-only options (classifier, result
        predicate) stay as they were.
        From now on the breaker's records name the policy version they were decided
        under (:attr:`~toolbreaker.Transition.policy_version`).
        """
        old = self.boundary
        if boundary.key != old.key:
            raise PolicyError(f"a row for {boundary.key!r} cannot replace {old.key!r}")
        boundary = dataclasses.replace(
            boundary,
            scope=old.scope,
            max_scopes=old.max_scopes,
            max_concurrent=old.max_concurrent,
            degrade=old.degrade,
            max_stale=old.max_stale,
            stale_every=old.stale_every,
            classifier=old.classifier,
            result_is_failure=old.result_is_failure,
        )
        self._stamp = True
        self._configure(boundary)
        if boundary.retry != self._retry:
            with self._retry_lock:
                self._set_retry(boundary.retry)
            self._plain = self._is_plain()
        # The policy last, in one assignment: the next decision sees all of the new row.
        self._quiet = None
        self.policy = boundary.policy
        self._quiet = None
        for child in self.scopes().values():
            child.adopt(dataclasses.replace(boundary, dependency=child.dependency, scope=None))
        if self._overflow is not None:
            overflow = self._overflow
            row = dataclasses.replace(boundary, dependency=overflow.dependency, scope=None)
            overflow.adopt(row)

    def health_probe(self) -> Permit | Rejection:
        """Ask the core for a health checker's probe (an event marked ``health_check``).

        A :class:`Permit` when the core admits it (the breaker is due for a probe and a
        slot is free), to be settled with the check's outcome; else the
        :class:`Rejection`. :class:`~toolbreaker.HealthChecker` calls this; a user's
        call never does.
        """
        check = self.boundary.health_check
        deadline = None if check is None else max(1, round(check.timeout * 1000))
        return self._admit(self.clock(), deadline, health_check=True)

    # -- scopes -----------------------------------------------------------------------

    def for_scope(self, value: str | None = None) -> Breaker:
        """The breaker of one scope value.

        ``value`` defaults to the current context's (see :func:`toolbreaker.scope`); this
        breaker itself when the row is not scoped or no value is set.
        """
        name = self.boundary.scope
        children = self._scoped
        if name is None or children is None:
            return self
        if value is None:
            value = current_scope(name)
            if value is None:
                return self
        with self._scopes_lock:
            child = children.get(value)
            if child is not None:
                children.move_to_end(value)
                return child
            return self._new_scope(name, value, children)

    def scopes(self) -> dict[str, Breaker]:
        """The live scoped breakers of this row, by scope value (oldest use first)."""
        with self._scopes_lock:
            return dict(self._scoped or {})

    def family(self) -> tuple[Breaker, ...]:
        """This breaker and every live breaker of its scopes, the shared overflow one last.

        What an exporter reads to see every breaker a row holds: a scoped row's calls are
        counted by its tenants' breakers, not by the row's own. They hear the row's
        listeners (see :meth:`add_listener`).
        """
        with self._scopes_lock:
            children = tuple((self._scoped or {}).values())
        overflow = self._overflow
        return (self, *children, *(() if overflow is None else (overflow,)))

    def _new_scope(
        self, name: str, value: str, children: collections.OrderedDict[str, Breaker]
    ) -> Breaker:
        if len(children) >= self.boundary.max_scopes:
            for old, breaker in children.items():
                if is_evictable(breaker.state):
                    # Its state stays in the store: a later call for ``old`` reloads it.
                    del children[old]
                    breaker.close()
                    break
            else:
                # Every live one is open or operator-held: never drop one to make room.
                self.stats.scope_overflows += 1
                # The value is masked: a scope may be keyed by an API key.
                log.warning(
                    redact_text(
                        f"toolbreaker: {self.key} holds {len(children)} scoped breakers, none "
                        f"closed; {name}={value!r} shares the overflow breaker"
                    )
                )
                if self._overflow is None:
                    self._overflow = self._child(f"{name}=*")
                return self._overflow
        label = value if _PLAIN_SCOPE.fullmatch(value) else _digest(value)
        child = children[value] = self._child(f"{name}={label}")
        return child

    def _child(self, label: str) -> Breaker:
        row = dataclasses.replace(
            self.boundary, dependency=f"{self.dependency}[{label}]", tool=self.tool, scope=None
        )
        child = Breaker(
            row.dependency,
            store=self.store,
            clock=self.clock,
            boundary=row,
            max_workers=self._max_workers,
        )
        # One list of listeners for the row and its scoped breakers (transitions, retry
        # decisions, notices): whatever attaches to the row hears every tenant's breaker,
        # made before or after it attached, and detaching from the row detaches from all.
        child._listeners = self._listeners
        child._retry_listeners = self._retry_listeners
        child.degradation.notices.follow(self.degradation.notices)
        child.degradation.tools = self.degradation.tools
        child._stamp = self._stamp
        return child

    # -- two-step API ---------------------------------------------------------------

    def allow(self, *, timeout: float | None = _UNSET) -> Permit | Rejection:
        """Ask to make one call.

        Settle the returned :class:`Permit` with ``record()``, or hand
        :attr:`Rejection.result` to the model instead of calling the tool. It is
        :meth:`admit` without a retry, spelled out: the fastest two-step path.
        """
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return target.allow(timeout=timeout)
        deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
        return self._enter(self.clock(), deadline)

    def admit(self, *, retry: bool = False, timeout: float | None = _UNSET) -> Permit | Rejection:
        """Admission and retries, the one way in.

        What :meth:`allow`, :meth:`begin` and a :class:`~toolbreaker.RunGuard` ask.
        ``retry``: the call re-issues one whose last attempt failed retryably (the model
        is a retry layer; the caller's ledger of failed calls says so: the breaker's own
        for :meth:`begin` steps, the run's for a run guard). It spends one retry of this
        breaker's budget first; when none is left the answer is a :class:`Rejection`
        with reason ``retry-budget``: the call is not made, and the model reads that the
        tool is unavailable for this run. A scoped row admits through the current
        scope's breaker (its budget, its state).
        """
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return target.admit(retry=retry, timeout=timeout)
        deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
        return self._admission(retry, deadline)

    def _admission(self, retry: bool, deadline: int | None) -> Permit | Rejection:
        """:meth:`admit` once the scope and the deadline are known."""
        if retry and not self._spend_model_retry():
            return Rejection(self, _RETRY_BUDGET, None)
        return self._enter(self.clock(), deadline)

    async def aadmit(
        self, *, retry: bool = False, timeout: float | None = _UNSET
    ) -> Permit | Rejection:
        """:meth:`admit` for the event loop: the store round trip is awaited.

        A retry budget shared through the store is paid in a worker thread.
        """
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return await target.aadmit(retry=retry, timeout=timeout)
        deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
        return await self._aadmission(retry, deadline)

    async def _aadmission(self, retry: bool, deadline: int | None) -> Permit | Rejection:
        """:meth:`_admission` for the event loop."""
        if retry and not await self._aspend_model_retry():
            return Rejection(self, _RETRY_BUDGET, None)
        return await self._aenter(self.clock(), deadline)

    def begin(
        self,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = _UNSET,
    ) -> Step:
        """Ask to make one call of ``tool``; the :class:`~toolbreaker.runtime.Step` says how.

        If ``step.answer`` is set the call was rejected locally: hand the answer (the
        tool-unavailable result, worded for ``tool``) to the model. Otherwise run the tool
        within ``step.deadline`` seconds and settle the step with ``succeeded(result)`` or
        ``failed(exc)``, whose return value is what the model reads.
        """
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return target.begin(tool, args, timeout=timeout)
        deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
        retry = self._retried(tool or self.tool, dict(args or {}))
        step = self._step(tool, args, self._admission(retry, deadline), deadline)
        if step.answer is not None and self.degradation.chain:
            step.answer = self.degradation.result(step.tool, step.args, step.answer)
        return step

    async def abegin(
        self,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = _UNSET,
    ) -> Step:
        """:meth:`begin` for the event loop: a store round trip is awaited."""
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return await target.abegin(tool, args, timeout=timeout)
        deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
        retry = self._retried(tool or self.tool, dict(args or {}))
        step = self._step(tool, args, await self._aadmission(retry, deadline), deadline)
        if step.answer is not None and self.degradation.chain:
            step.answer = await self.degradation.aresult(step.tool, step.args, step.answer)
        return step

    def _step(
        self,
        tool: str | None,
        args: Mapping[str, Any] | None,
        admission: Permit | Rejection,
        deadline: int | None,
    ) -> Step:
        name = tool or self.tool
        seconds = None if deadline is None else deadline / 1000
        if isinstance(admission, Permit):
            return Step(self, name, dict(args or {}), deadline=seconds, permit=admission)
        return Step(self, name, dict(args or {}), answer=admission.result_for(name))

    def _step_succeeded(self, step: Step, result: Any) -> Any:
        step.permit.record(self.result_verdict(result))
        self.retry_succeeded()
        self._model_retry_ended(step.tool, step.args)
        self.degradation.remember(step.tool, step.args, result)
        return result

    def _step_failed(self, step: Step, exc: BaseException) -> Any:
        step.permit.record(exc)
        if not isinstance(exc, Exception):
            raise exc
        failed = self._failed_call(step.tool, step.args, exc)
        return self.degradation.result(step.tool, step.args, failed)

    async def _step_asucceeded(self, step: Step, result: Any) -> Any:
        await step.permit.arecord(self.result_verdict(result))
        self.retry_succeeded()
        self._model_retry_ended(step.tool, step.args)
        await self.degradation.aremember(step.tool, step.args, result)
        return result

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any:
        await step.permit.arecord(exc)
        if not isinstance(exc, Exception):
            raise exc
        failed = self._failed_call(step.tool, step.args, exc)
        return await self.degradation.aresult(step.tool, step.args, failed)

    def _enter(self, now: int, deadline: int | None) -> Permit | Rejection:
        """Admission through the core: allow(), and call()/acall() past their fast paths."""
        bulkhead = self._bulkhead
        if bulkhead is None:
            return self._local(now, deadline) or self._admit(now, deadline)
        slot = bulkhead.acquire(self._slot_ms(deadline))
        if not isinstance(slot, Slot):
            return self._no_slot(slot, deadline)
        try:
            admission = self._local(now, deadline) or self._admit(now, deadline)
        except BaseException:
            slot.release()
            raise
        spare = self._holding(admission, slot)
        if spare is not None:
            spare.release()
        return admission

    async def _aenter(self, now: int, deadline: int | None) -> Permit | Rejection:
        """:meth:`_enter` for the event loop: a round trip, if one is needed, is awaited."""
        bulkhead = self._bulkhead
        if bulkhead is None:
            return self._local(now, deadline) or await self._aadmit(now, deadline)
        slot = await bulkhead.aacquire(self._slot_ms(deadline))
        if not isinstance(slot, Slot):
            return self._no_slot(slot, deadline)
        try:
            admission = self._local(now, deadline) or await self._aadmit(now, deadline)
        except BaseException:
            await slot.arelease()
            raise
        spare = self._holding(admission, slot)
        if spare is not None:
            await spare.arelease()
        return admission

    def _slot_ms(self, deadline: int | None) -> int:
        """How long a slot may be held: the call's deadline (a probe lease without one)."""
        return self.policy.lease_ttl_ms if deadline is None else deadline

    @staticmethod
    def _holding(admission: Permit | Rejection, slot: Slot) -> Slot | None:
        """An admitted call holds ``slot``; a rejected one gives it back: returned."""
        if isinstance(admission, Permit):
            admission.slot = slot
            return None
        return slot

    def _no_slot(self, why: str, deadline: int | None) -> Rejection:
        """The bulkhead is full (``saturated``) or its store is down: denied at once."""
        self.stats.rejected += 1
        if why == _SATURATED:
            self.stats.saturated += 1
            limit = self._bulkhead.limit if self._bulkhead is not None else None
            self.degradation.saturated("bulkhead", limit, deadline)  # for listeners
            # A slot is free again within one deadline unless its call hangs.
            return Rejection(self, _SATURATED, deadline)
        return Rejection(self, _STORE_DOWN, None)

    def _record_fault(self) -> None:
        self.stats.record_faults += 1

    def _local(self, now: int, deadline: int | None) -> Permit | Rejection | None:
        """Admission answered from the view without the store, or ``None``."""
        state = self._view.state
        stats = self.stats
        if state is not None and not self._listeners:
            # The core has already said what a request does in these states: admitted
            # with no change when quiet, rejected with no change while cooling down.
            if state is self._quiet:
                stats.admitted += 1
                return Permit(self, None, state.generation, now, deadline, probe=False)
            reason = idle_rejection(state, now, self.policy)
            if reason is not None:
                stats.rejected += 1
                wait = core_retry_after_ms(state, now, self.policy)
                return Rejection(self, reason, wait, state.operator_reason)
            if self._remember_quiet(state):
                stats.admitted += 1
                return Permit(self, None, state.generation, now, deadline, probe=False)
        return None

    def _admit(
        self, now: int, deadline: int | None, *, health_check: bool = False
    ) -> Permit | Rejection:
        event = self._request(now, health_check)
        policy = self.policy
        try:
            state, records = self.store.apply(self.key, event, policy)
        except StoreUnavailable:
            return self._store_down()
        return self._admitted(state, records, now, deadline, policy)

    async def _aadmit(
        self, now: int, deadline: int | None, *, health_check: bool = False
    ) -> Permit | Rejection:
        event = self._request(now, health_check)
        policy = self.policy
        try:
            state, records = await aapply(self.store, self.key, event, policy)
        except StoreUnavailable:
            return self._store_down()
        return self._admitted(state, records, now, deadline, policy)

    def _request(self, now: int, health_check: bool = False) -> Event:
        call = f"{process_token()}.{next(self._ids)}"
        return Event("request", now, self.key, call=call, health_check=health_check)

    def _store_down(self) -> Rejection:
        self.stats.rejected += 1
        return Rejection(self, _STORE_DOWN, None)

    def _admitted(
        self,
        state: BreakerState,
        records: tuple[Transition, ...],
        now: int,
        deadline: int | None,
        policy: Policy,
    ) -> Permit | Rejection:
        records = self._observe(state, records, now, policy)
        last = records[-1]
        if last.attempted:
            self.stats.admitted += 1
            if last.would_reject:
                self.stats.would_reject += 1
            probe = admitted_probe(last)
            return Permit(self, last.event.call, last.generation, now, deadline, probe, policy)
        self.stats.rejected += 1
        return Rejection(self, last.reason, self.retry_after_ms(state), state.operator_reason)

    async def _store_aapply(self, event: Event) -> tuple[BreakerState, tuple[Transition, ...]]:
        """The store's ``aapply`` (never blocks the loop); a sync-only store in a thread."""
        return await aapply(self.store, self.key, event, self.policy)

    def _settle(self, permit: Permit, verdict: Verdict, now: int) -> Transition | None:
        event = self._outcome(permit, verdict, now)
        if event is None:
            return None
        try:
            state, records = self.store.apply(self.key, event, permit.policy)
        except StoreUnavailable:
            return None  # the outcome is lost, never turned into a success
        return self._observe(state, records, now, permit.policy)[-1]

    async def _asettle(self, permit: Permit, verdict: Verdict, now: int) -> Transition | None:
        event = self._outcome(permit, verdict, now)
        if event is None:
            return None
        try:
            state, records = await aapply(self.store, self.key, event, permit.policy)
        except StoreUnavailable:
            return None  # the outcome is lost, never turned into a success
        return self._observe(state, records, now, permit.policy)[-1]

    def _outcome(self, permit: Permit, verdict: Verdict, now: int) -> Event | None:
        """The outcome event to apply, or ``None`` when the core declared it a no-op."""
        kind = verdict.kind
        if kind != "success":
            self.stats.failures[verdict.detail] = self.stats.failures.get(verdict.detail, 0) + 1
            if verdict is _LATE:
                self.stats.late_results += 1
        elif not self._listeners:
            state = self._view.state
            if state is not None and (state is self._quiet or self._remember_quiet(state)):
                return None
        took = None
        if kind == "success" and permit.policy.slow_call_ms is not None:
            took = max(0, now - permit.admitted_at)  # only slow-call rules need it
        return Event(
            kind,
            now,
            self.key,
            call=permit.call,
            generation=permit.generation,
            retry_after_ms=verdict.retry_after_ms if kind == "failure" else None,
            duration_ms=took,
        )

    def _remember_quiet(self, state: BreakerState) -> bool:
        if is_quiet(state, self.policy):
            self._quiet = state
            return True
        return False

    def _observe(
        self,
        state: BreakerState,
        records: tuple[Transition, ...],
        now: int,
        policy: Policy | None = None,
    ) -> tuple[Transition, ...]:
        """Count and publish the core's records; returns them (stamped when following)."""
        if self._stamp:
            # A breaker following a published sheet names the policy each record was
            # decided under, even when a swap lands before its listeners run.
            version = (policy or self.policy).version
            records = tuple(dataclasses.replace(r, policy_version=version) for r in records)
        stats = self.stats
        for record in records:
            if changed_phase(record):
                if self._phase_since is not None:
                    spent = max(0, record.event.at - self._phase_since)
                    stats.time_in_state_ms[record.from_phase] += spent
                self._phase_since = record.event.at
                if opened(record):
                    stats.opens[record.reason] = stats.opens.get(record.reason, 0) + 1
                    if reopened(record):
                        stats.reopens_from_half_open += 1
                    watching = _OPENED.get()
                    if watching is not None:
                        watching.append(self)
                elif half_opened(record):
                    stats.half_opens += 1
            elif self._phase_since is None:
                self._phase_since = record.event.at
        for listener in tuple(self._listeners):
            for record in records:
                try:
                    listener(record, self)
                except Exception as exc:  # noqa: BLE001 - a listener never changes an outcome
                    # A metrics backend that is down must not turn a committed write into
                    # an error (and then a replay): the fault is counted and logged, and
                    # every other listener still sees every record.
                    stats.listener_errors += 1
                    hook_failed(
                        f"listener {listener!r} failed on {record.dependency} "
                        f"({record.reason}); the call's outcome stands",
                        exc,
                    )
        return records

    # -- running calls ----------------------------------------------------------------

    def call(
        self, fn: Callable[..., R], /, *args: Any, timeout: float | None = _UNSET, **kwargs: Any
    ) -> R:
        """Run ``fn(*args, **kwargs)`` through the breaker, retrying by the row's policy.

        With a ``retry`` policy, a failed attempt is retried as the retry core decides
        (:mod:`toolbreaker.core.retry`): never while the breaker is open, never a class no
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
        state = self._view.state
        if state is self._quiet and state is not None and self._plain:
            deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
            if deadline is not None and not self._inline:
                return self._quiet_in_thread(state, deadline, fn, args, kwargs)
            if deadline is not None:
                # Quiet fast path: no permit, no lock, no record unless something happens.
                slots = self._slots  # a bulkhead of this process only: a counter
                if slots is not None and not slots.enter():
                    raise self._no_slot(_SATURATED, deadline).error()
                self.stats.admitted += 1
                ticks = self._ticks
                try:
                    start = ticks()
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:
                        self._quiet_outcome(state, start // self._per_ms, deadline, exc)
                        raise
                    # Settle after all only if the core may care: _unquiet(), inlined on
                    # the cheapest path of all (a call frame costs a fifth of its overhead).
                    if (
                        self.result_is_failure is not None
                        or ticks() - start > deadline * self._per_ms
                        or self._view.state is not state
                    ):
                        self._quiet_outcome(state, start // self._per_ms, deadline, result)
                    return result
                finally:
                    if slots is not None:
                        slots.leave()
        elif state is not None and self._plain:
            # The open hot path: raises while the core says a request is rejected locally.
            self._reject_if_cooling(state, self._ticks() // self._per_ms)
        if self._retry is None:
            return self._call_once(fn, *args, timeout=timeout, **kwargs)
        return self._call_retrying(fn, args, kwargs, timeout)

    async def acall(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        timeout: float | None = _UNSET,
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
        state = self._view.state
        if state is self._quiet and state is not None and self._plain:
            deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
            if deadline is not None:
                # Quiet fast path, as in call(); the deadline is kept by the loop's watchdog.
                slots = self._slots
                if slots is not None and not slots.enter():
                    raise self._no_slot(_SATURATED, deadline).error()
                self.stats.admitted += 1
                ticks = self._ticks
                try:
                    start = ticks()
                    try:
                        if self._inline:
                            result = await fn(*args, **kwargs)
                        else:
                            # within(), inline: no coroutine frame of its own per call.
                            call = fn(*args, **kwargs)
                            dog = watch(call, deadline / 1000)
                            try:
                                result = await call
                            except BaseException as exc:
                                dog.failed(call, exc, deadline / 1000)
                                raise
                            dog.done(call)
                    except TimeoutError:
                        start //= self._per_ms
                        await self._quiet_permit(state, start, deadline).arecord(_TIMEOUT)
                        raise
                    except BaseException as exc:
                        start //= self._per_ms
                        await self._quiet_permit(state, start, deadline).arecord(exc)
                        raise
                    if self._unquiet(state, start, deadline):
                        start //= self._per_ms
                        await self._quiet_permit(state, start, deadline).arecord(
                            self.result_verdict(result)
                        )
                    return result
                finally:
                    if slots is not None:
                        slots.leave()
        elif state is not None and self._plain:
            # The open hot path: raises while the core says a request is rejected locally.
            self._reject_if_cooling(state, self._ticks() // self._per_ms)
        if self._retry is None:
            return await self._acall_once(fn, *args, timeout=timeout, **kwargs)
        return await self._acall_retrying(fn, args, kwargs, timeout)

    def _call_once(
        self, fn: Callable[..., R], /, *args: Any, timeout: float | None = _UNSET, **kwargs: Any
    ) -> R:
        """One attempt of :meth:`call` past the quiet fast path (a retry, a scoped call).

        Raises:
            CircuitOpen: rejected locally; ``.result`` is the tool-unavailable result.
            TimeoutError: the deadline passed (recorded as a qualifying failure).
            Exception: whatever ``fn`` raised, after recording it.
        """
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return target.call(fn, *args, timeout=timeout, **kwargs)
        deadline, state, now = self._attempt(timeout)
        if not self._inline:
            return self._run_in_thread(state, now, fn, args, kwargs, deadline)
        permit = self._enter(now, deadline)
        if not isinstance(permit, Permit):
            raise permit.error()
        try:
            result = fn(*args, **kwargs)
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
        timeout: float | None = _UNSET,
        **kwargs: Any,
    ) -> R:
        """:meth:`_call_once` for :meth:`acall`: the call is cancelled at its deadline."""
        if self._scoped is not None and (target := self.for_scope()) is not self:
            return await target.acall(fn, *args, timeout=timeout, **kwargs)
        deadline, _, now = self._attempt(timeout)
        permit = await self._aenter(now, deadline)
        if not isinstance(permit, Permit):
            raise permit.error()
        try:
            if self._inline:
                result = await fn(*args, **kwargs)
            else:
                result = await within(fn(*args, **kwargs), deadline / 1000)
        except TimeoutError:
            await permit.arecord(_TIMEOUT)
            raise
        except BaseException as exc:
            await permit.arecord(exc)
            raise
        await permit.arecord(self.result_verdict(result))
        return result

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
            raise self._no_slot(_SATURATED, deadline).error()
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
        if state is not None:
            self._reject_if_cooling(state, now)
        return deadline, state, now

    def _required_deadline(self, timeout: float | None) -> int:
        """The call's deadline in ms (``timeout`` or the default); every call needs one."""
        deadline = self._default_deadline if timeout is _UNSET else self._deadline_ms(timeout)
        if deadline is None:
            raise self._no_deadline()
        return deadline

    def _quiet_permit(self, state: BreakerState, start: int, deadline: int) -> Permit:
        """The permit a fast-path call would have had, to settle it after all."""
        return Permit(self, None, state.generation, start, deadline, False)

    def _reject_if_cooling(self, state: BreakerState, now: int) -> None:
        """Raise the core's local rejection while open, when it changes nothing."""
        if self._listeners:
            return
        reason = idle_rejection(state, now, self.policy)
        if reason is not None:
            self.stats.rejected += 1
            wait = core_retry_after_ms(state, now, self.policy)
            render = (
                self._render
                if state.operator_reason is None
                else self._renderer(state.operator_reason)
            )
            raise circuit_open(self.key, reason, wait, render)

    def record_result(self, permit: Permit, result: object) -> None:
        """Settle ``permit`` with a returned result.

        A success, unless ``result_is_failure`` says the result is an error in disguise.
        """
        permit.record(self.result_verdict(result))

    def result_verdict(self, result: object) -> Verdict:
        """How a returned result counts: a success unless ``result_is_failure`` says not.

        A predicate that raises proves nothing, so the result is ``ambiguous``
        (``predicate-error``): never a success, and for a write an unknown outcome.
        """
        predicate = self.result_is_failure
        if predicate is None:
            return SUCCESS
        try:
            failed = predicate(result)
        except Exception as exc:  # noqa: BLE001 - a user hook never changes what happened
            self.stats.hook_errors += 1
            hook_failed(f"result_is_failure of {self.key} raised", exc)
            return _PREDICATE_ERROR
        return Verdict("failure", "result-predicate") if failed else SUCCESS

    def verdict_of(self, exc: BaseException) -> Verdict:
        """Classify ``exc`` with this breaker's classifier.

        A classifier that raises (or returns something else than a
        :class:`~toolbreaker.Verdict`) gives ``ambiguous`` (``classifier-error``): the
        call counts as a failure and, for a write, its outcome is unknown (fail closed).
        """
        failure: Exception | None = None
        try:
            verdict = self.classify(exc)
        except Exception as raised:  # noqa: BLE001 - a user hook never changes what happened
            verdict, failure = None, raised
        if not isinstance(verdict, Verdict):
            self.stats.hook_errors += 1
            hook_failed(f"the classifier of {self.key} failed on {type(exc).__name__}", failure)
            return _CLASSIFIER_ERROR
        return verdict

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
            result = self._in_thread(worker, fn, args, kwargs, deadline, slot)
        except TimeoutError:
            permit.record(_TIMEOUT)
            raise
        except BaseException as exc:
            permit.record(exc)
            raise
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

    def _in_thread(  # noqa: PLR0917 - the pieces of one call
        self,
        worker: Worker,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deadline: int | None,
        slot: Slot | None = None,
    ) -> R:
        """Run ``fn`` in ``worker``; ``TimeoutError`` at the deadline. Settles nothing.

        ``slot`` is given back once the call is over; a call still running at its
        deadline holds it until it returns.
        """
        result = self._hand_off(worker, fn, args, kwargs, deadline, slot)
        if result is OVERDUE:
            raise self._overdue(deadline)
        return result

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
        :data:`~toolbreaker.runtime.breaker._deadline.OVERDUE` once ``stop()`` was true
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

    def close(self) -> None:
        """Release the idle worker threads (calls still running are not waited for)."""
        for child in self.scopes().values():
            child.close()
        if self._overflow is not None:
            self._overflow.close()
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()

    # -- retries ----------------------------------------------------------------------

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

    def _call_retrying(
        self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Any
    ) -> R:
        """:meth:`call` with retries: carries out :meth:`_retry_plan`, blocking."""
        plan = self._retry_plan(timeout)
        try:
            action = next(plan)
            while True:
                action = plan.send(self._retry_step(action, fn, args, kwargs))
        except StopIteration as done:
            return cast("R", done.value)

    def _retry_step(
        self, action: tuple[str, Any], fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> object:
        kind, value = action
        if kind == "wait":
            wait = self._retry_wait(*value)
            if wait is not None:
                (self._sleep or time.sleep)(wait)
            return wait
        try:
            return _Done(self._call_once(fn, *args, timeout=value, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the plan decides, and re-raises
            return exc

    async def _acall_retrying(
        self,
        fn: Callable[..., Awaitable[R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: Any,
    ) -> R:
        """:meth:`acall` with retries: carries out :meth:`_retry_plan` on the event loop."""
        plan = self._retry_plan(timeout)
        try:
            action = next(plan)
            while True:
                action = plan.send(await self._aretry_step(action, fn, args, kwargs))
        except StopIteration as done:
            return cast("R", done.value)

    async def _aretry_step(
        self, action: tuple[str, Any], fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any
    ) -> object:
        kind, value = action
        if kind == "attempt":
            try:
                return _Done(await self._acall_once(fn, *args, timeout=value, **kwargs))
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

    # -- tool wrappers ----------------------------------------------------------------

    @overload
    def guard(
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | dict[str, Any]]]: ...

    @overload
    def guard(self, fn: Callable[P, R], /) -> Callable[P, R | dict[str, Any]]: ...

    @overload
    def guard(
        self, fn: None = None, /, *, timeout: float | None = ..., tool: str | None = ...
    ) -> Callable[[Callable[P, R]], Callable[P, R | dict[str, Any]]]: ...

    def guard(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        timeout: float | None = _UNSET,
        tool: str | None = None,
    ) -> Any:
        """Decorate a tool function (sync or async) so it returns results, never raises.

        A local rejection, or the failure that just opened the breaker, returns the
        tool-unavailable result; any other failure returns ``{"ok": false, "error": ...,
        "retryable": ...}``; a success returns the function's own result unchanged.
        """

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            name: str = tool or getattr(func, "__name__", None) or self.tool
            if self._retry is not None:
                warn_nested_retries(func, name, "the breaker's retry policy")
            degrading = bool(self.degradation.chain)
            bound = _binder(func)
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    target = self if self._scoped is None else self.for_scope()
                    # The call's keywords by signature: the identity of the model's re-call.
                    call = bound(args, kwargs) if target._retry_budget is not None else {}
                    if target._retried(name, call) and not await target._aspend_model_retry():
                        return Rejection(target, _RETRY_BUDGET, None).result_for(name)
                    try:
                        result = await target.acall(func, *args, timeout=timeout, **kwargs)
                    except CircuitOpen as exc:
                        answer = exc.result_for(name)
                    except Exception as exc:  # noqa: BLE001 - turned into a tool result
                        answer = target._failed_call(name, call, exc)
                    else:
                        target._model_retry_ended(name, call)
                        if degrading:
                            await target.degradation.aremember(name, bound(args, kwargs), result)
                        return result
                    if not degrading:
                        return answer
                    return await target.degradation.aresult(name, bound(args, kwargs), answer)

                return async_tool

            @functools.wraps(func)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                target = self if self._scoped is None else self.for_scope()
                # The call's keywords by signature: the identity of the model's re-call.
                call = bound(args, kwargs) if target._retry_budget is not None else {}
                if target._retried(name, call) and not target._spend_model_retry():
                    return Rejection(target, _RETRY_BUDGET, None).result_for(name)
                try:
                    result = target.call(func, *args, timeout=timeout, **kwargs)
                except CircuitOpen as exc:
                    answer = exc.result_for(name)
                except Exception as exc:  # noqa: BLE001 - turned into a tool result
                    answer = target._failed_call(name, call, exc)
                else:
                    target._model_retry_ended(name, call)
                    if degrading:
                        target.degradation.remember(name, bound(args, kwargs), result)
                    return result
                if not degrading:
                    return answer
                return target.degradation.result(name, bound(args, kwargs), answer)

            return sync_tool

        return decorate(fn) if fn is not None else decorate

    def failure_result(self, tool: str, exc: BaseException) -> dict[str, Any]:
        """What the model should read after ``tool`` failed with ``exc`` (already recorded).

        The tool-unavailable result when the breaker is now open (this failure may just
        have opened it: the model hears it now, not one wasted call later); otherwise an
        error result that says whether retrying can help.
        """
        # A shared store's view may not be trusted for admission yet, but the state this
        # process last saw (the failure's own round trip) says whether it just opened.
        state = self._view.state or getattr(self._view, "known", None)
        if state is not None and rejects_callers(state, self.policy):
            # This failure (or a concurrent one) just opened the breaker: tell the model now,
            # not on its next attempt.
            return self._unavailable("opened", self.retry_after_ms(), tool=tool)
        failure = self._failure(exc)
        why = unavailable_reason(
            failure, self.retry_budget, max_retry_after_ms=self.boundary.max_retry_after_ms
        )
        if why is not None:
            # A spent quota, a hint too long to wait out, or a spent retry budget: the
            # model must not retry either, for the rest of the run.
            return self._unavailable(why, None, tool=tool)
        retryable = self.retryable and is_transient(failure.kind, failure.detail, failure.status)
        return error_result(tool, exc, retryable=retryable)

    def _failed_call(self, tool: str, call: Mapping[str, Any], exc: Exception) -> dict[str, Any]:
        """:meth:`failure_result`, remembering how the call ended for the retry ledger.

        The model re-issuing a call whose failure invites a retry is then counted as a
        retry (see :meth:`admit`); the core decides both.
        """
        result = self.failure_result(tool, exc)
        if self._retry_budget is not None:
            self._observe_model_retry(tool, call, retryable=failed_retryably(result))
        return result

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

    def _renderer(self, note: str | None) -> Callable[..., dict[str, Any]]:
        """The renderer of a rejection; with an operator's ``note`` when there is one."""
        return self._render if note is None else functools.partial(self._unavailable, note=note)

    def _unavailable(
        self,
        reason: str,
        retry_after_ms: int | None,
        *,
        tool: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        name = tool or self.tool
        if reason == "forced-open":
            note = self.policy.force_reason
        elif reason != "isolated":
            note = None
        key = (name, reason, retry_after_seconds(retry_after_ms), note)
        cached = self._rendered.get(key)
        if cached is None:
            if len(self._rendered) >= 512:
                self._rendered.clear()
            cached = self._rendered[key] = unavailable_result(
                tool=name,
                reason=reason,
                retry_after_ms=retry_after_ms,
                fallback=self.fallback,
                fallback_note=self.fallback_note,
                templates=self.instructions,
                operator_reason=note,
            )
        return dict(cached)

    # -- operator control -------------------------------------------------------------

    def isolate(self, reason: str = "operator") -> Transition:
        """Force the breaker open until :meth:`release`; every request is rejected.

        The isolation is persisted in the store (every process sharing it sees it, and it
        survives restarts); ``reason`` is kept with it and shown to the model.
        """
        return self._operator("isolate", reason)

    def force_close(self, reason: str = "operator") -> Transition:
        """Force the breaker closed until :meth:`release`, in the store, for every process.

        The breaker keeps deciding and recording, but admits every request; requests it
        would have rejected are recorded with ``would_reject``.
        """
        return self._operator("force-closed", reason)

    def release(self, reason: str = "operator") -> Transition:
        """End an isolation or a forced close: a fresh closed generation."""
        return self._operator("release", reason)

    def _operator(self, kind: str, reason: str) -> Transition:
        now = self.clock()
        note = " ".join(str(reason).split())[:300] or "operator"
        event = Event(
            kind,
            now,
            self.key,
            call=f"operator:{reason}",
            reason=None if kind == "release" else note,
        )
        policy = self.policy
        state, records = self.store.apply(self.key, event, policy)
        return self._observe(state, records, now, policy)[-1]

    # -- helpers ----------------------------------------------------------------------

    def _deadline_ms(self, timeout: float | None) -> int | None:
        if timeout is None:
            return None
        return max(1, round(check_seconds(timeout, "timeout") * 1000))

    def _no_deadline(self) -> PolicyError:
        return no_deadline(self.key)

    def __repr__(self) -> str:
        state = self._view.state
        return f"<Breaker {self.key!r} {state.phase if state else '?'}>"


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


def _binder(
    func: Callable[..., Any],
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """Turns a call's positional and keyword arguments into keywords, by ``func``'s signature.

    The degradation matrix keys kept answers and queued work by keyword arguments.
    """
    try:
        signature: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if signature is not None:
            try:
                return dict(signature.bind(*args, **kwargs).arguments)
            except TypeError:
                pass
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}

    return bind


#: What :meth:`Breaker._retry_plan` yields (an action and its argument), is sent, returns.
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


def _digest(value: str) -> str:
    """A scope value that is not a short plain name (an API key, say) as a digest."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def clock_of(store: object) -> Clock:
    """A store that spans hosts brings its clock: their monotonic clocks do not compare."""
    clock = getattr(store, "clock", None)
    return clock if callable(clock) else monotonic_ms
