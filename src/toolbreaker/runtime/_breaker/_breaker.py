"""The runtime breaker: a thin shell around the core.

It reads the clock, runs the call, classifies the outcome and feeds events to the core
through a store.

Two paths, one decision-maker. Every transition is computed by the core's ``apply()``
inside the store. The shell only skips the store when the core has already said what
would happen: in a *quiet* state (``is_quiet``) a request is
admitted and a success changes nothing; in a cooling-down open state (the core's idle
window, :func:`~toolbreaker.core._breaker.predicates.idle_window`) a request is rejected
and changes nothing. Those two cases are most calls, and they cost no lock, no
allocation of records and no I/O.

The class is small: it holds parts, each built here with an explicit constructor and
the data it uses, and its methods hand each request to the part that owns it:
admission through the store and this process's view (:mod:`._admission`), the runner
for deadlines, workers, the bulkhead and retries (:mod:`._calls`), the two-step API and
the tool wrapper (:mod:`._steps`), the retry ledger (:mod:`._ledger`: the retry budget,
the model's re-calls), the retry loop (:mod:`._retries`), a scoped row's breakers
(:mod:`._scopes`), the degradation chain (:mod:`._degrade`), the bulkhead
(:mod:`._bulkhead`) and the workers (:mod:`._deadline`). Here: the options, the wiring,
configuration and operator control.

Why over 800 lines: it is the public class, and each public method repeats its
documented signature (keyword arguments, overloads for sync and async) to hand the call
to its part; splitting the class would bring back the layers it was composed from. The
parts hold the logic; what is here is wiring and the documentation users read.
"""

from __future__ import annotations

import contextvars
import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from toolbreaker.core._breaker.keys import scoped_dependency, shown_names
from toolbreaker.core._breaker.state import BreakerState, Transition
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._breaker._admission import (
    UNSET,
    Admission,
    Permit,
    Rejection,
)
from toolbreaker.runtime._breaker._boundary import (
    BREAKER_OPTIONS,
    Boundary,
    BreakerOptions,
    Enforce,
)
from toolbreaker.runtime._breaker._bulkhead import Bulkhead
from toolbreaker.runtime._breaker._calls import Runner
from toolbreaker.runtime._breaker._degrade import Degradation
from toolbreaker.runtime._breaker._ledger import RetryLedger
from toolbreaker.runtime._breaker._retries import Retries, RetryListener
from toolbreaker.runtime._breaker._scope import current_scope
from toolbreaker.runtime._breaker._scopes import Scopes
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.runtime._breaker._steps import Steps
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.runtime._step import StepObserver, StepObservers
from toolbreaker.stores._memory import MemoryStore, in_process
from toolbreaker.stores._protocol import Store

if TYPE_CHECKING:  # typing on Python 3.10 has no Unpack; the annotation stays a string
    from typing_extensions import Unpack

    from toolbreaker.core._breaker.policy import Policy
    from toolbreaker.core._retry import RetryBudget
    from toolbreaker.runtime._breaker._classify import Verdict
    from toolbreaker.runtime._breaker._deadline import Overdue
    from toolbreaker.runtime._step import Step, ToolType, Watching

__all__ = [
    "Breaker",
    "BreakerStats",
    "Enforce",
    "Listener",
    "Permit",
    "Rejection",
    "RetryListener",
    "clock_of",
    "watch_openings",
]

P = ParamSpec("P")
R = TypeVar("R")

#: A listener receives every transition record the core produced, and the breaker.
Listener = Callable[[Transition, "Breaker"], None]

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


class Breaker:
    """A circuit breaker for one remote dependency (and operation class).

    Get breakers from a :class:`~toolbreaker.Registry` so the same key gives the same
    breaker; state lives in the store, never in a request.

    Args:
        dependency: the smallest remote dependency whose health can be observed.
        operation: the operation class (``read``, ``write`` ...); it gets its own state.
        store: where state lives; a private :class:`MemoryStore` by default.
        clock: integer milliseconds, monotonic (``FakeClock`` in tests); by default the
            store's own clock if it has one (Redis: the server's), else this host's.
        max_workers: for ``enforce="thread"`` calls, the most worker threads calls that
            hang past their deadline may hold (one of them kept for probes, when there
            are two or more), and the idle threads kept between calls. Calls within
            their deadline are never limited by it: every call gets a worker at once (a
            new thread if none is idle), never a queue. A call that hangs past its
            deadline keeps its worker (and its bulkhead slot) until it returns; while
            such calls hold all the workers they may, a call is rejected at once with
            reason ``hung``.
        sleep: how ``call()`` waits between attempts (``time.sleep`` by default; tests
            pass a fake clock's advance). ``acall()`` awaits it if it returns an awaitable,
            else uses ``asyncio.sleep`` when it is not set.
        retry_seed: seeds the per-operation jitter seeds, for a reproducible run; by
            default each operation's seed is random. Every seed is in the retry records.
        **options: the breaker's options (:class:`BreakerOptions`), each validated once,
            by :class:`Boundary`:

            - ``policy``: thresholds and cooldowns; defaults to :class:`Policy`'s.
            - ``timeout``: the default deadline in seconds; every call needs one.
            - ``enforce``: how sync deadlines are enforced (see :data:`Enforce`).
            - ``classifier``: turns an exception into a :class:`Verdict`.
            - ``result_is_failure``: a predicate on results, e.g. a 200 whose body is an error.
            - ``tool``: the tool name the model sees (defaults to the dependency).
            - ``fallback``: the tool the model should use instead while this one is unavailable.
            - ``fallback_note``: what the model must say when it uses the fallback.
            - ``retryable``: whether the model may retry a transient failure while closed.
            - ``owner``: the team to page; shown on dashboards.
            - ``instructions``: per-reason instruction templates overriding the defaults.
            - ``scope``: key one breaker per value of this scope (see :class:`Boundary`).
            - ``max_scopes``: the most scoped breakers kept in this process.
            - ``retry``: the retry policy ``call()``/``acall()`` follow (a
              :class:`~toolbreaker.core._retry.RetryPolicy` or a table of its fields);
              ``None``: no retries here. Pick one layer: see :meth:`call`.
            - ``max_retry_after_ms``: a server hint longer than this is never waited out: the tool
              is unavailable for the run.
            - ``degrade``: the degradation chain while the tool may not be called (see
              :mod:`toolbreaker.core._degrade`); ``max_stale`` and ``stale_every`` go with
              ``stale``.
            - ``health_check``: a cheap check of the dependency (a :class:`HealthCheck`, or a
              callable of no arguments) that a health checker runs while the breaker is
              open; only the checker then probes (see ``HealthChecker``).
            - ``max_concurrent``: the bulkhead: the most calls in flight at once, across processes
              when the store is shared, until they really end (see :class:`Boundary`);
              ``None``: no limit.
        boundary: a ready :class:`~toolbreaker.Boundary` (a sheet row) instead of the
            options above; every option is validated once, by :class:`Boundary`.
    """

    #: Where its row came from, for people: the boundary sheet file's name, or ``NAME
    #: rev. N`` of a published sheet (set by its registry); ``None`` for a breaker
    #: configured in code. Event streams and the dashboard show it.
    sheet: str | None = None

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
        self.store: Store = store if store is not None else MemoryStore()
        self.clock: Clock = clock or clock_of(self.store)
        self.classify = boundary.classifier
        self.result_is_failure = boundary.result_is_failure
        self.tool = boundary.tool or boundary.dependency
        self.stats = BreakerStats()
        self.stats.on_defaults = boundary.defaults
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise PolicyError(
                f"max_workers must be a positive integer, got {max_workers!r}",
                field="max_workers",
            )
        self._max_workers = max_workers
        ids = itertools.count(1)
        #: The row's degradation chain, carried out (see :mod:`toolbreaker.core._degrade`).
        self.degradation = Degradation(boundary, self.store, self.key, self.stats.degraded)
        #: Who hears each tool call begun here (:meth:`add_step_observer`).
        self.step_observers = StepObservers()
        self._admission: Admission[Breaker] = Admission(
            self, boundary, self.store, self.clock, self.stats, ids, self._opened
        )
        #: This process's view of the state in the store (the fast paths read it).
        self._view = self._admission.view
        #: The retry budget and the model's re-calls: the model is a retry layer too.
        self._ledger = RetryLedger(
            self.key, boundary.retry, self.store, self.stats, self.stats.count_record_fault
        )
        self._retries = Retries(
            self.key, self._ledger, self.clock, ids, seed=retry_seed, sleep=sleep, stats=self.stats
        )
        self._scopes: Scopes[Breaker] | None = (
            None
            if boundary.scope is None
            else Scopes(self.key, boundary.scope, boundary.max_scopes, self._child, self.stats)
        )
        bulkhead = (
            None
            if boundary.max_concurrent is None or self._scopes is not None
            else Bulkhead(
                self.key,
                boundary.max_concurrent,
                self.store,
                self.clock,
                self.stats.count_record_fault,
            )
        )
        self._runner: Runner[Breaker] = Runner(
            self._admission,
            boundary,
            clock=self.clock,
            stats=self.stats,
            degradation=self.degradation,
            ledger=self._ledger,
            retries=self._retries,
            scope=None if self._scopes is None else self._scope_runner,
            bulkhead=bulkhead,
            max_workers=max_workers,
        )
        self._steps: Steps[Breaker] = Steps(
            self,
            admission=self._admission,
            runner=self._runner,
            ledger=self._ledger,
            degradation=self.degradation,
            observers=self.step_observers,
            boundary=boundary,
            scope_steps=None if self._scopes is None else self._scope_steps,
        )
        self._configure(boundary)

    @property
    def policy(self) -> Policy:
        """The policy the next decision is made under (:meth:`adopt` replaces it)."""
        return self._admission.policy

    @property
    def state(self) -> BreakerState:
        """The current state as this process sees it."""
        return self._admission.state

    def retry_after_ms(self, state: BreakerState | None = None) -> int | None:
        """Milliseconds until a rejected request could be admitted, if known.

        ``state`` defaults to the current state as this process sees it.
        """
        return self._admission.retry_after_ms(state)

    # -- calls: the runner -----------------------------------------------------------------

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
        idle = self._admission.idle
        if idle is not None and idle.state is self._view.state and self._runner.plain:
            # The open hot path, here: the rejection climbs no frame of the runner's.
            now = self._runner.ticks() // self._runner.per_ms
            if (idle := self._admission.cooling(idle.state, now)) is not None:
                raise idle.error(self.key, now)
        return self._runner.call(fn, args, kwargs, timeout)

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
        idle = self._admission.idle
        if idle is not None and idle.state is self._view.state and self._runner.plain:
            now = self._runner.ticks() // self._runner.per_ms  # the open hot path, as call's
            if (idle := self._admission.cooling(idle.state, now)) is not None:
                raise idle.error(self.key, now)
        return await self._runner.acall(fn, args, kwargs, timeout)

    def run(self, step: Step, fn: Callable[..., R], /, **kwargs: Any) -> R:
        """Run ``fn(**kwargs)`` for an admitted ``step`` within its deadline.

        Settles nothing: settle the step with what this returns or raises. In the default
        ``enforce="thread"`` mode ``TimeoutError`` is raised at the deadline (a call
        still running then keeps the step's bulkhead slot until it returns), and
        :class:`~toolbreaker.errors.CircuitOpen` (reason ``hung``) when calls hung past their
        deadline hold the workers this one may use.
        """
        return self._runner.run(step, fn, kwargs)

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
        return self._runner.run_until(step, fn, stop, every=every)

    async def arun(self, step: Step, fn: Callable[..., Awaitable[R]], /, **kwargs: Any) -> R:
        """Await ``fn(**kwargs)`` for an admitted ``step``, cancelled at its deadline."""
        return await self._runner.arun(step, fn, kwargs)

    # -- the two-step API and the tool wrapper: the steps ----------------------------------

    def allow(self, *, timeout: float | None = UNSET) -> Permit[Breaker] | Rejection[Breaker]:
        """Ask to make one call.

        Settle the returned :class:`Permit` with ``record()``, or hand
        :attr:`Rejection.result` to the model instead of calling the tool. It is
        :meth:`admit` without a retry, spelled out: the fastest two-step path.
        """
        return self._steps.allow(timeout)

    def admit(
        self, *, retry: bool = False, timeout: float | None = UNSET
    ) -> Permit[Breaker] | Rejection[Breaker]:
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
        return self._steps.admit(retry, timeout)

    async def aadmit(
        self, *, retry: bool = False, timeout: float | None = UNSET
    ) -> Permit[Breaker] | Rejection[Breaker]:
        """:meth:`admit` for the event loop: the store round trip is awaited.

        A retry budget shared through the store is paid in a worker thread.
        """
        return await self._steps.aadmit(retry, timeout)

    def begin(
        self,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = UNSET,
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Step:
        """Ask to make one call of ``tool``; the :class:`~toolbreaker.runtime.Step` says how.

        If ``step.answer`` is set the call was rejected locally: hand the answer (the
        tool-unavailable result, worded for ``tool``) to the model. Otherwise run the tool
        within ``step.deadline`` seconds and settle the step with ``succeeded(result)`` or
        ``failed(exc)``, whose return value is what the model reads. ``call_id`` is the
        framework's id of this tool call, ``tool_type`` the kind of tool
        (:data:`~toolbreaker.runtime.ToolType`) and ``description`` its description, for
        the step observers (a span's ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` and
        ``gen_ai.tool.description``).

        Raises:
            PolicyError: ``tool_type`` is none of :data:`~toolbreaker.runtime.TOOL_TYPES`.
        """
        return self._steps.begin(tool, args, timeout, call_id, tool_type, description)

    async def abegin(
        self,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = UNSET,
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Step:
        """:meth:`begin` for the event loop: a store round trip is awaited."""
        return await self._steps.abegin(tool, args, timeout, call_id, tool_type, description)

    def watch_step(
        self,
        tool: str,
        call_id: str | None,
        *more: StepObservers,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Watching | None:
        """The step observers' watches of a call of ``tool`` that starts now, if any.

        What :meth:`begin` (and a run guard's ``begin``, with its own observers as
        ``more``) asks first; ``None`` when nobody observes steps.
        """
        return self._steps.watch_step(
            tool, call_id, *more, tool_type=tool_type, description=description
        )

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
        timeout: float | None = UNSET,
        tool: str | None = None,
    ) -> Any:
        """Decorate a tool function (sync or async) so it returns results, never raises.

        A local rejection, or the failure that just opened the breaker, returns the
        tool-unavailable result; any other failure returns ``{"ok": false, "error": ...,
        "retryable": ...}``; a success returns the function's own result unchanged. A
        coroutine function gets the async guard (``await``-ed through :meth:`acall`).

        Raises:
            PolicyError: when the decorator is built, never at a call: a ``timeout`` that is
                not a positive number of seconds (or ``None``: no deadline), no deadline at
                all (neither ``timeout`` nor the row's), or a ``tool`` that is not a name.
        """
        return self._steps.guard(fn, timeout, tool)

    def failure_result(self, tool: str, exc: BaseException) -> dict[str, Any]:
        """What the model should read after ``tool`` failed with ``exc`` (already recorded).

        The tool-unavailable result when the breaker is now open (this failure may just
        have opened it: the model hears it now, not one wasted call later); otherwise an
        error result that says whether retrying can help.
        """
        return self._steps.failure_result(tool, exc)

    def record_result(self, permit: Permit[Breaker], result: object) -> None:
        """Settle ``permit`` with a returned result.

        A success, unless ``result_is_failure`` says the result is an error in disguise.
        """
        permit.record(self._admission.result_verdict(result))

    def result_verdict(self, result: object) -> Verdict:
        """How a returned result counts: a success unless ``result_is_failure`` says not.

        A predicate that raises proves nothing, so the result is ``ambiguous``
        (``predicate-error``): never a success, and for a write an unknown outcome.
        """
        return self._admission.result_verdict(result)

    def verdict_of(self, exc: BaseException) -> Verdict:
        """Classify ``exc`` with this breaker's classifier.

        A classifier that raises (or returns something else than a
        :class:`~toolbreaker.Verdict`) gives ``ambiguous`` (``classifier-error``): the
        call counts as a failure and, for a write, its outcome is unknown (fail closed).
        An :class:`~toolbreaker.AsyncCallError` (a sync call that got a coroutine back,
        which ran nothing) is ``ignored`` (``not-awaited``) whatever the classifier says.
        """
        return self._admission.verdict_of(exc)

    # -- listeners, observers, configuration, operator control -----------------------------

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(record, breaker)`` for every transition; returns a remover.

        While a listener is registered every request goes through the core, so the
        listener also sees ``call-admitted`` and ``cooldown`` records. A scoped row's
        listeners hear each of its scoped breakers too, made before or after (as do its
        retry and degradation listeners). To hear every breaker of a registry or a run
        guard, now and later, attach there (:class:`~toolbreaker.runtime.Attachment`).
        """
        listeners = self._admission.listeners
        listeners.append(listener)
        for breaker in (self, *self.scopes().values()):  # scoped ones share the list
            breaker._admission.quiet = breaker._admission.idle = None  # no fast path skips it
        return lambda: listeners.remove(listener)

    def add_step_observer(self, observer: StepObserver) -> Callable[[], None]:
        """Tell ``observer`` of every tool call begun here (:meth:`begin`); returns a remover.

        ``observer(start)`` gets a ``StepStart`` as the call's
        admission begins and may return a ``StepWatch``, which
        is made current while the breaker works on the call and ended once when the step
        carried an answer or was settled. A run guard's steps tell the observers of their
        tool's breaker too (each observer once). A scoped row's scoped breakers share its
        observers. One that raises is counted in ``stats.listener_errors`` and logged.
        OpenTelemetry's tool-call spans are made this way
        (:func:`toolbreaker.instrumentation.opentelemetry.instrument`).
        """
        return self.step_observers.add(observer)

    def hidden_for_ms(self) -> tuple[bool, int | None]:
        """Whether every call is rejected now without changing anything, and for how long.

        ``(True, ms)`` while open and cooling down (``ms`` until a probe), isolated or
        forced open (``ms`` is ``None``: until an operator acts); ``(False, None)``
        otherwise. This is what the adapters' opt-in *hide open tools* mode hides: a
        half-open breaker stays visible, since a probe slot may free up. For a scoped
        row, the current scope's breaker answers.
        """
        return self.for_scope()._admission.hidden()

    async def ahidden_for_ms(self) -> tuple[bool, int | None]:
        """:meth:`hidden_for_ms` for the event loop: never blocks it on a store.

        What this process's view cannot answer is read from a shared store in a worker
        thread (a :class:`~toolbreaker.stores.MemoryStore` answers inline).
        """
        admission = self.for_scope()._admission
        store, state = admission.store, admission.view.state
        if state is None and not in_process((store,)):
            import asyncio  # the loop's own: a sync-only program never loads asyncio

            state = await asyncio.to_thread(store.load, admission.key, admission.policy)
        return admission.hidden(state)

    def _configure(self, boundary: Boundary) -> None:
        """Take the row's options that may change while the breaker lives (see adopt)."""
        self.boundary = boundary
        self.timeout = boundary.timeout
        self.enforce: Enforce = boundary.enforce
        self.fallback = boundary.fallback
        self.fallback_note = boundary.fallback_note
        #: The breaker's names as every output a person reads shows them (secrets masked
        #: once, here): logs, the event stream, Prometheus and OpenTelemetry read these.
        self.shown = shown_names(self.dependency, self.operation, self.tool, self.fallback)
        self.retryable = boundary.retryable
        self.owner = boundary.owner
        self.instructions = dict(boundary.instructions)

    def stamp_policy_version(self) -> None:
        """From now on, name in every record the policy version it was decided under.

        What a breaker following a published sheet does (:meth:`adopt` turns it on too):
        a registry whose follower runs calls it for each breaker it holds and makes.
        """
        self._admission.stamp = True

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
        admission = self._admission
        admission.stamp = True
        self._configure(boundary)
        self.stats.on_defaults = boundary.defaults
        if boundary.retry != self._ledger.policy:
            self._ledger.use(boundary.retry)
        admission.configure(boundary)
        self._runner.configure(boundary)
        self._steps.configure(boundary)
        # The policy last, in one assignment: the next decision sees all of the new row.
        admission.quiet = None
        admission.policy = boundary.policy
        admission.quiet = None
        if self._scopes is not None:
            for child in self._scopes.members():  # the overflow breaker too
                child.adopt(dataclasses.replace(boundary, dependency=child.dependency, scope=None))

    def health_probe(self) -> Permit[Breaker] | Rejection[Breaker]:
        """Ask the core for a health checker's probe (an event marked ``health_check``).

        A :class:`Permit` when the core admits it (the breaker is due for a probe and a
        slot is free), to be settled with the check's outcome; else the
        :class:`Rejection`. ``HealthChecker`` calls this; a user's
        call never does.
        """
        check = self.boundary.health_check
        deadline = None if check is None else max(1, round(check.timeout * 1000))
        return self._admission.admit(self.clock(), deadline, health_check=True)

    def close(self) -> None:
        """Release the idle worker threads (calls still running are not waited for)."""
        if self._scopes is not None:
            for child in self._scopes.members():  # the overflow breaker too
                child.close()
        runner = self._runner
        workers, runner.workers = runner.workers, None
        if workers is not None:
            workers.close()

    def isolate(self, reason: str = "operator") -> Transition:
        """Force the breaker open until :meth:`release`; every request is rejected.

        The isolation is persisted in the store (every process sharing it sees it, and it
        survives restarts); ``reason`` is kept with it and shown to the model.
        """
        return self._admission.operate("isolate", reason)

    def force_close(self, reason: str = "operator") -> Transition:
        """Force the breaker closed until :meth:`release`, in the store, for every process.

        The breaker keeps deciding and recording, but admits every request; requests it
        would have rejected are recorded with ``would_reject``.
        """
        return self._admission.operate("force-closed", reason)

    def release(self, reason: str = "operator") -> Transition:
        """End an isolation or a forced close: a fresh closed generation."""
        return self._admission.operate("release", reason)

    # -- the parts: a scoped row's breakers, the retry ledger ------------------------------

    def for_scope(self, value: str | None = None) -> Breaker:
        """The breaker of one scope value.

        ``value`` defaults to the current context's (see :func:`toolbreaker.scope`); this
        breaker itself when the row is not scoped or no value is set.
        """
        scopes = self._scopes
        if scopes is None:
            return self
        if value is None:
            value = current_scope(scopes.name)
            if value is None:
                return self
        return scopes.get(value)

    def _scope_runner(self) -> Runner[Breaker] | None:
        """The current scope's breaker's runner, which serves a call; else ``None``."""
        target = self.for_scope()
        return None if target is self else target._runner

    def _scope_steps(self) -> Steps[Breaker] | None:
        """The current scope's breaker's steps, which serve a step; else ``None``."""
        target = self.for_scope()
        return None if target is self else target._steps

    def _opened(self) -> None:
        """This breaker opened: a watch of openings in this context hears it."""
        watching = _OPENED.get()
        if watching is not None:
            watching.append(self)

    def scopes(self) -> dict[str, Breaker]:
        """The live scoped breakers of this row, by scope value (oldest use first)."""
        return {} if self._scopes is None else self._scopes.live()

    def family(self) -> tuple[Breaker, ...]:
        """This breaker and every live breaker of its scopes, the shared overflow one last.

        What an exporter reads to see every breaker a row holds: a scoped row's calls are
        counted by its tenants' breakers, not by the row's own. They hear the row's
        listeners (see :meth:`add_listener`).
        """
        return (self,) if self._scopes is None else (self, *self._scopes.members())

    def family_stats(self) -> BreakerStats:
        """The counters of this breaker and of every breaker its scopes had here, summed.

        A scoped row's calls are counted by its tenants' breakers, not by the row's own:
        this is what the row did, the breakers it has forgotten to make room included
        (their counters are added to the row's when they go), so every total only grows.
        What an exporter reads for the row (see
        :class:`~toolbreaker.instrumentation.prometheus.BreakerCollector`). A new object,
        read without stopping the calls; its ``pinned_workers`` is 0.
        """
        total = BreakerStats()
        total.on_defaults = self.boundary.defaults
        if self._scopes is None:
            total.add(self.stats)
        else:
            self._scopes.sum_into(total, self.stats)
        return total

    def _child(self, label: str) -> Breaker:
        """A scoped breaker of this row (``tenant=acme``), hearing the row's listeners."""
        row = dataclasses.replace(
            self.boundary,
            dependency=scoped_dependency(self.dependency, label),
            tool=self.tool,
            scope=None,
        )
        child = Breaker(
            row.dependency,
            store=self.store,
            clock=self.clock,
            boundary=row,
            max_workers=self._max_workers,
        )
        child._hear_as(self)
        return child

    def _hear_as(self, row: Breaker) -> None:
        """A scoped breaker shares its row's listeners (transitions, retries, notices).

        One list for the row and its scoped breakers: whatever attaches to the row hears
        every tenant's breaker, made before or after it attached, and detaching from the
        row detaches from all.
        """
        self._admission.listeners = row._admission.listeners
        self._retries.listeners = row._retries.listeners
        self.step_observers = self._steps.observers = row.step_observers
        self.degradation.notices.follow(row.degradation.notices)
        self.degradation.tools = row.degradation.tools
        self._admission.stamp = row._admission.stamp

    def add_retry_listener(self, listener: RetryListener) -> Callable[[], None]:
        """Call ``listener(record)`` for every retry decision; returns a remover.

        A record's ``to_dict()`` is one line of a retry trace: with its seed,
        :func:`toolbreaker.core._retry.replay` recomputes every decision exactly.
        """
        listeners = self._retries.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener)

    @property
    def retry_budget(self) -> RetryBudget | None:
        """The dependency's retry budget (``None`` without a retry policy).

        With a shared store (one that keeps records, not a ``MemoryStore``) the budget is
        shared by every process: this is the bucket as last read or written. Otherwise it
        is this process's own.
        """
        return self._ledger.budget

    def retry_succeeded(self) -> None:
        """A call through this breaker succeeded: its retry budget refills.

        Its own call paths do this; so does a run guard for the calls it settles.
        """
        self._ledger.succeeded()

    def __repr__(self) -> str:
        state = self._view.state
        return f"<Breaker {self.key!r} {state.phase if state else '?'}>"


def clock_of(store: object) -> Clock:
    """A store that spans hosts brings its clock: their monotonic clocks do not compare."""
    clock = getattr(store, "clock", None)
    return clock if callable(clock) else monotonic_ms
