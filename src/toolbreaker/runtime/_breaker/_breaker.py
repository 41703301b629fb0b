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

The class holds parts, each built here with an explicit constructor and the data it
uses: the retry ledger (:mod:`._ledger`: the retry budget, the model's re-calls), the
retry loop (:mod:`._retries`), a scoped row's breakers (:mod:`._scopes`), the degradation
chain (:mod:`._degrade`), the bulkhead (:mod:`._bulkhead`) and the workers
(:mod:`._deadline`). Admission and the call paths are still layers of the class, one
module each, every one using only those below it: :mod:`._admission` (permits,
rejections, the core's records), :mod:`._calls` (the fast paths, workers, deadlines),
:mod:`._steps` (the two-step API, ``guard``); here the options, configuration, the parts'
wiring and operator control.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolbreaker.core._breaker.keys import scoped_dependency, shown_names
from toolbreaker.core._breaker.predicates import idle_window
from toolbreaker.core._breaker.state import BreakerState, Event, Transition
from toolbreaker.core._retry import RetryBudget
from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._breaker._admission import (
    Listener,
    Permit,
    Rejection,
    watch_openings,
)
from toolbreaker.runtime._breaker._boundary import (
    BREAKER_OPTIONS,
    Boundary,
    BreakerOptions,
    Enforce,
)
from toolbreaker.runtime._breaker._bulkhead import Bulkhead
from toolbreaker.runtime._breaker._deadline import Workers
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


class Breaker(Steps):
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
        self.policy = boundary.policy
        self.store: Store = store if store is not None else MemoryStore()
        self.clock: Clock = clock or clock_of(self.store)
        # The quiet fast paths time a call in the clock's own ticks: time.monotonic_ns
        # itself for the default clock (no Python frame per reading), else the clock.
        fast = self.clock is monotonic_ms
        self._ticks: Callable[[], int] = time.monotonic_ns if fast else self.clock
        self._per_ms = 1_000_000 if fast else 1
        # The clock's readings are the local monotonic clock's: the view's lease (see
        # stores.View) is checked against them, with no reading of its own.
        self._monotonic = fast
        self.classify = boundary.classifier
        self.result_is_failure = boundary.result_is_failure
        self.tool = boundary.tool or boundary.dependency
        self._configure(boundary)
        self.stats = BreakerStats()
        self.stats.on_defaults = boundary.defaults
        #: The row's degradation chain, carried out (see :mod:`toolbreaker.core._degrade`).
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
        #: Who hears each tool call begun here (:meth:`add_step_observer`).
        self.step_observers = StepObservers()
        self._view = self.store.view(self.key)
        self._quiet: BreakerState | None = None
        self._idle = None
        self._ids = itertools.count(1)
        self._phase_since: int | None = None
        #: The retry budget and the model's re-calls: the model is a retry layer too.
        self._ledger = RetryLedger(
            self.key, boundary.retry, self.store, self.stats, self._record_fault
        )
        self._retries = Retries(
            self.key,
            self._ledger,
            self.clock,
            self._ids,
            seed=retry_seed,
            sleep=sleep,
            stats=self.stats,
        )
        self._scopes = (
            None
            if boundary.scope is None
            else Scopes(self.key, boundary.scope, boundary.max_scopes, self._child, self.stats)
        )
        # The quiet fast path of call()/acall() needs none of retries, scopes and a
        # per-call deadline: computed once, so the hot path tests one attribute.
        self._bulkhead = (
            None
            if boundary.max_concurrent is None or self._scopes is not None
            else Bulkhead(
                self.key, boundary.max_concurrent, self.store, self.clock, self._record_fault
            )
        )
        # A bulkhead of this process alone keeps the quiet fast path: a counter around it.
        local = self._bulkhead is not None and not self._bulkhead.shared
        self._slots = self._bulkhead if local else None
        self._plain = self._is_plain()
        self._stamp = False  # set by adopt(): records then name their policy version

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(record, breaker)`` for every transition; returns a remover.

        While a listener is registered every request goes through the core, so the
        listener also sees ``call-admitted`` and ``cooldown`` records. A scoped row's
        listeners hear each of its scoped breakers too, made before or after (as do its
        retry and degradation listeners). To hear every breaker of a registry or a run
        guard, now and later, attach there (:class:`~toolbreaker.runtime.Attachment`).
        """
        self._listeners.append(listener)
        for breaker in (self, *self.scopes().values()):  # scoped ones share the list
            breaker._quiet = breaker._idle = None  # no fast path may skip the listener now
        return lambda: self._listeners.remove(listener)

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
        target = self.for_scope()
        state = target._view.state
        return target._hidden(target.state if state is None else state)

    async def ahidden_for_ms(self) -> tuple[bool, int | None]:
        """:meth:`hidden_for_ms` for the event loop: never blocks it on a store.

        What this process's view cannot answer is read from a shared store in a worker
        thread (a :class:`~toolbreaker.stores.MemoryStore` answers inline).
        """
        target = self.for_scope()
        state = target._view.state
        if state is None:
            store = target.store
            if in_process((store,)):
                state = store.load(target.key, target.policy)
            else:
                state = await asyncio.to_thread(store.load, target.key, target.policy)
        return target._hidden(state)

    def _hidden(self, state: BreakerState) -> tuple[bool, int | None]:
        now = self.clock()
        window = idle_window(state, now, self.policy)
        if window is None:
            return False, None
        return True, None if window.admits_at is None else window.admits_at - now

    def _configure(self, boundary: Boundary) -> None:
        """Take the row's options that may change while the breaker lives (see adopt)."""
        self.boundary = boundary
        self.timeout = boundary.timeout
        self._default_deadline = self._deadline_ms(boundary.timeout)
        self.enforce: Enforce = boundary.enforce
        self._inline = boundary.enforce == "cooperative"
        self.fallback = boundary.fallback
        self.fallback_note = boundary.fallback_note
        #: The breaker's names as every output a person reads shows them (secrets masked
        #: once, here): logs, the event stream, Prometheus and OpenTelemetry read these.
        self.shown = shown_names(self.dependency, self.operation, self.tool, self.fallback)
        self.retryable = boundary.retryable
        self.owner = boundary.owner
        self.instructions = dict(boundary.instructions)
        self._rendered: dict[tuple[str, str, int, str | None], dict[str, Any]] = {}

    def _is_plain(self) -> bool:
        """Whether the quiet fast path of call()/acall() may serve this breaker.

        It may without retries, scopes, or a bulkhead shared with other processes.
        """
        return (
            self._ledger.policy is None
            and self._scopes is None
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
        self.stats.on_defaults = boundary.defaults
        if boundary.retry != self._ledger.policy:
            self._ledger.use(boundary.retry)
            self._plain = self._is_plain()
        # The policy last, in one assignment: the next decision sees all of the new row.
        self._quiet = None
        self.policy = boundary.policy
        self._quiet = None
        if self._scopes is not None:
            for child in self._scopes.members():  # the overflow breaker too
                child.adopt(dataclasses.replace(boundary, dependency=child.dependency, scope=None))

    def health_probe(self) -> Permit | Rejection:
        """Ask the core for a health checker's probe (an event marked ``health_check``).

        A :class:`Permit` when the core admits it (the breaker is due for a probe and a
        slot is free), to be settled with the check's outcome; else the
        :class:`Rejection`. ``HealthChecker`` calls this; a user's
        call never does.
        """
        check = self.boundary.health_check
        deadline = None if check is None else max(1, round(check.timeout * 1000))
        return self._admit(self.clock(), deadline, health_check=True)

    def close(self) -> None:
        """Release the idle worker threads (calls still running are not waited for)."""
        if self._scopes is not None:
            for child in self._scopes.members():  # the overflow breaker too
                child.close()
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()

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
        # Masked where the event is made: the reason rides in the record, the store, the
        # stream and what the model is told (masked before it is cut, so no part survives).
        note = redact_text(" ".join(str(reason).split()))[:300] or "operator"
        event = Event(
            kind,
            now,
            self.key,
            call=f"operator:{redact_text(str(reason))}",
            reason=None if kind == "release" else note,
        )
        policy = self.policy
        state, records = self.store.apply(self.key, event, policy)
        return self._observe(state, records, now, policy)[-1]

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
        self._listeners = row._listeners
        self._retries.listeners = row._retries.listeners
        self.step_observers = row.step_observers
        self.degradation.notices.follow(row.degradation.notices)
        self.degradation.tools = row.degradation.tools
        self._stamp = row._stamp

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
