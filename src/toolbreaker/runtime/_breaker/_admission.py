"""A breaker's admission and settling: permits, rejections and the core's records.

One part of :class:`~toolbreaker.Breaker` (:class:`Admission`, built with the row,
the store, the clock and the counters it uses). A request and an outcome go to the
core's ``apply()`` in the store, except where the core has already said what would
happen (a quiet state, a cooling-down open one); every record the core returns is
counted and published to the listeners, whose faults never change an outcome.

The part never imports the breaker that holds it: it knows its owner only as a type
parameter (``BreakerT``), which it hands back to users (:attr:`Permit.breaker`, a listener's
second argument). ``Permit[Breaker]`` is what a breaker's ``allow()`` returns.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.predicates import (
    IdleWindow,
    idle_window,
    is_quiet,
    unclassified_type,
)
from toolbreaker.core._breaker.predicates import retry_after_ms as core_retry_after_ms
from toolbreaker.core._breaker.state import (
    BreakerState,
    Event,
    Transition,
    admitted_probe,
    changed_phase,
    half_opened,
    opened,
    reopened,
)
from toolbreaker.core._files import printable
from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import (
    AsyncCallError,
    CircuitOpen,
    PermitError,
    StoreUnavailable,
    circuit_open,
)
from toolbreaker.runtime._breaker._boundary import Boundary
from toolbreaker.runtime._breaker._bulkhead import STORE_DOWN, Slot
from toolbreaker.runtime._breaker._classify import SUCCESS, Kind, Verdict
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.runtime._log import hook_failed, log
from toolbreaker.runtime._process import process_token
from toolbreaker.runtime._result import retry_after_seconds, unavailable_result
from toolbreaker.runtime._sync_path import NOT_AWAITED_DETAIL
from toolbreaker.stores._protocol import Store, View, aapply

__all__ = [
    "Admission",
    "Idle",
    "Owner",
    "Permit",
    "Rejection",
]


class Owner(Protocol):
    """What a bare ``Permit``'s or ``Rejection``'s breaker is known to have: its key.

    A breaker's own ``allow()`` says more: it returns a ``Permit[Breaker]``, whose
    :attr:`~Permit.breaker` is the breaker.
    """

    @property
    def key(self) -> str:
        """``dependency:operation``, the breaker's name in records and metrics."""
        ...


if TYPE_CHECKING:  # a default for a type parameter: typing has it from Python 3.13 only
    from typing_extensions import TypeVar

    BreakerT = TypeVar("BreakerT", default=Owner)
    Breaker_co = TypeVar("Breaker_co", covariant=True, default=Owner)
else:
    BreakerT = typing.TypeVar("BreakerT")
    Breaker_co = typing.TypeVar("Breaker_co", covariant=True)


#: A result that arrived after the call's deadline: ambiguous, never a success.
#: The default of every ``timeout=``: the row's timeout (``None`` would mean no deadline).
UNSET: Final[Any] = object()

_LATE: Final = Verdict("ambiguous", "late-result")
_PREDICATE_ERROR: Final = Verdict("ambiguous", "predicate-error")
_CLASSIFIER_ERROR: Final = Verdict("ambiguous", "classifier-error")
#: A sync call that returned an awaitable ran nothing: never a success, no evidence either.
_NOT_AWAITED: Final = Verdict("ignored", NOT_AWAITED_DETAIL)


class Rejection(Generic[Breaker_co]):
    """A request the breaker rejected locally; carries the LLM-facing result."""

    __slots__ = ("_admission", "note", "reason", "retry_after_ms")
    admitted: Final = False

    def __init__(
        self,
        admission: Admission[Breaker_co],
        reason: str,
        retry_after_ms: int | None,
        note: str | None = None,
    ) -> None:
        self._admission = admission
        self.reason = reason
        self.retry_after_ms = retry_after_ms
        self.note = note  # an operator's reason for an isolation, shown to the model

    @property
    def breaker(self) -> Breaker_co:
        """The breaker that rejected the request."""
        return self._admission.owner

    @property
    def result(self) -> dict[str, Any]:
        """The tool-unavailable result to hand to the model instead of running the tool."""
        return self._admission.unavailable(self.reason, self.retry_after_ms, note=self.note)

    def result_for(self, tool: str) -> dict[str, Any]:
        """The same result worded for ``tool`` (several tools may share one breaker)."""
        return self._admission.unavailable(
            self.reason, self.retry_after_ms, tool=tool, note=self.note
        )

    def error(self) -> CircuitOpen:
        """The same rejection as an exception (its ``result`` is rendered on first use)."""
        admission = self._admission
        return CircuitOpen(
            admission.key, self.reason, self.retry_after_ms, admission.renderer(self.note)
        )


class Permit(Generic[Breaker_co]):
    """An admitted call; settle it exactly once with :meth:`record`.

    It carries the generation the call was admitted in (a late outcome of an older
    generation changes nothing) and, for a probe, the lease the core granted. A probe
    that is never settled is released by the core when its lease expires.
    """

    __slots__ = (
        "_admission",
        "_settled",
        "admitted_at",
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
        admission: Admission[Breaker_co],
        call: str | None,
        generation: int,
        admitted_at: int,
        deadline_ms: int | None,
        probe: bool,
        policy: Policy | None = None,
    ) -> None:
        self._admission = admission
        # The policy the call was admitted under settles it too: a swap never lands mid-call.
        self.policy = admission.policy if policy is None else policy
        self.call = call
        self.generation = generation
        self.admitted_at = admitted_at
        self.deadline_ms = deadline_ms
        self.probe = probe
        # The bulkhead slot, given back when settled; a sync call run in a worker takes
        # it along and gives it back when it is over (past its deadline, perhaps).
        self.slot: Slot | None = None
        self._settled = False

    @property
    def breaker(self) -> Breaker_co:
        """The breaker that admitted the call."""
        return self._admission.owner

    def record(
        self,
        outcome: Verdict | BaseException | Kind,
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
            return self._admission.settle(self, verdict, now)
        finally:
            if self.slot is not None:
                self.slot.release()

    async def arecord(
        self,
        outcome: Verdict | BaseException | Kind,
    ) -> Transition | None:
        """:meth:`record` for the event loop: the store round trip is awaited, never blocks.

        Raises:
            PermitError: the permit was already settled.
        """
        verdict, now = self._verdict(outcome)
        try:
            return await self._admission.asettle(self, verdict, now)
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
        if self._admission.clock() - self.admitted_at < self.deadline_ms:
            return False
        slot.hang()
        return True

    def continued(self) -> None:
        """The call goes on after an answer that was not its outcome (an interim round).

        For a call that spans several answers (an input-required round and the call sent
        again, a task and its polls): its deadline counts from now, so the final answer
        is judged by its own round's time, and its bulkhead slot is held until the permit
        is settled. A half-open probe's lease is the core's: it runs out as always.
        """
        if self.slot is not None:
            self.slot.hang()
        self.admitted_at = self._admission.clock()

    def _verdict(
        self,
        outcome: Verdict | BaseException | Kind,
    ) -> tuple[Verdict, int]:
        if self._settled:
            raise PermitError(f"permit {self.call or ''} for {self._admission.key!r} settled twice")
        self._settled = True
        if isinstance(outcome, Verdict):
            verdict = outcome
        elif isinstance(outcome, BaseException):
            verdict = self._admission.verdict_of(outcome)
        else:
            verdict = SUCCESS if outcome == "success" else Verdict(outcome, outcome)
        now = self._admission.clock()
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


class Idle:
    """An idle window of the core kept by a breaker: its state, policy and renderer."""

    __slots__ = ("admits_at", "policy", "reason", "render", "since", "state", "until")

    def __init__(
        self,
        state: BreakerState,
        policy: Policy,
        since: int,
        window: IdleWindow,
        render: Callable[..., dict[str, Any]],
    ) -> None:
        self.state = state
        self.policy = policy
        self.since = since
        self.reason, self.until, self.admits_at = window
        self.render = render

    def error(self, key: str, now: int) -> CircuitOpen:
        """The rejection at ``now`` as an exception (its result rendered on first use)."""
        wait = None if self.admits_at is None else self.admits_at - now
        return circuit_open(key, self.reason, wait, self.render)

    def answer(self, now: int, tool: str) -> dict[str, Any]:
        """The rejection at ``now`` as the model reads it, worded for ``tool``."""
        wait = None if self.admits_at is None else self.admits_at - now
        return self.render(self.reason, wait, tool=tool)


class Admission(Generic[BreakerT]):
    """A breaker's admission and settling, through the store and this process's view.

    A request and an outcome go through the core (in the store), or skip it where the
    core has already said what would happen (a quiet state, an idle window); every
    record is counted and published. It also words the rejections it makes.

    Args:
        owner: the breaker it admits for: what permits, rejections and listeners name.
        opened: told each time the breaker opens (the breaker's watch of openings).
        boundary: the row (its key, policy, classifier, result predicate and answers).
        store: where the state lives.
        clock: integer milliseconds.
        stats: the breaker's counters.
        ids: the breaker's call numbers (shared with its retry loop).
    """

    def __init__(  # noqa: PLR0917 - the data of one part, from the breaker only
        self,
        owner: BreakerT,
        boundary: Boundary,
        store: Store,
        clock: Clock,
        stats: BreakerStats,
        ids: Iterator[int],
        opened: Callable[[], None],
    ) -> None:
        self.owner = owner
        self.opened = opened
        self.key = boundary.key
        self.policy: Policy = boundary.policy
        self.store = store
        self.clock = clock
        # The clock's readings are the local monotonic clock's: the view's lease (see
        # stores.View) is checked against them, with no reading of its own.
        self.monotonic = clock is monotonic_ms
        self.stats = stats
        self.classify: Callable[[BaseException], Verdict] = boundary.classifier
        self.result_is_failure: Callable[[Any], bool] | None = boundary.result_is_failure
        self.tool = boundary.tool or boundary.dependency
        #: Who hears every record the core produces, with the breaker.
        self.listeners: list[Callable[[Transition, BreakerT], None]] = []
        self.view: View = store.view(self.key)
        #: The quiet state the view holds, while it is one (the fast paths compare to it).
        self.quiet: BreakerState | None = None
        self.idle: Idle | None = None
        self.ids = ids
        self.phase_since: int | None = None
        self.stamp = False  # records name their policy version (a published sheet)
        self.render: Callable[..., dict[str, Any]] = self.unavailable
        self.configure(boundary)

    def configure(self, boundary: Boundary) -> None:
        """Take the row's answers (they may change while the breaker lives: adopt)."""
        self.fallback = boundary.fallback
        self.fallback_note = boundary.fallback_note
        self.instructions = dict(boundary.instructions)
        self.rendered: dict[tuple[str, str, int, str | None], dict[str, Any]] = {}

    @property
    def state(self) -> BreakerState:
        """The current state as this process sees it."""
        view = self.view.state
        return view if view is not None else self.store.load(self.key, self.policy)

    def hidden(self, state: BreakerState | None = None) -> tuple[bool, int | None]:
        """Whether ``state`` rejects every call now without a change, and for how long.

        :meth:`Breaker.hidden_for_ms <toolbreaker.Breaker.hidden_for_ms>`'s answer, from
        the core's idle window; ``state`` defaults to the current state.
        """
        now = self.clock()
        window = idle_window(state or self.state, now, self.policy)
        if window is None:
            return False, None
        return True, None if window.admits_at is None else window.admits_at - now

    def operate(self, kind: str, reason: str) -> Transition:
        """An operator's ``isolate``, ``force-closed`` or ``release``, through the core."""
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
        return self.observe(state, records, now, policy)[-1]

    def retry_after_ms(self, state: BreakerState | None = None) -> int | None:
        """Milliseconds until a rejected request could be admitted, if known.

        ``state`` defaults to the current state as this process sees it.
        """
        return core_retry_after_ms(state or self.state, self.clock(), self.policy)

    def local(
        self, now: int, deadline: int | None
    ) -> Permit[BreakerT] | Rejection[BreakerT] | None:
        """Admission answered from the view without the store, or ``None``.

        A call is admitted on the view only while the view's lease holds (see
        ``View``: a store that died is asked, and denies); a
        rejection needs none.
        """
        view = self.view
        state = view.state
        stats = self.stats
        if state is not None and not self.listeners:
            # The core has already said what a request does in these states: admitted
            # with no change when quiet (while the view's lease holds, by the clock's own
            # reading when it is the monotonic one), rejected with no change while cooling
            # down.
            if state is self.quiet:
                if view.lease.until_ms <= (now if self.monotonic else monotonic_ms()):
                    return None
                stats.admitted += 1
                return Permit(self, None, state.generation, now, deadline, probe=False)
            idle = self.idle_at(state, now)
            if idle is not None:
                stats.rejected += 1
                if (tally := self.view.tally) is not None:
                    tally.reject(state, now)  # a quiet rejection of the history
                wait = None if idle.admits_at is None else idle.admits_at - now
                return Rejection(self, idle.reason, wait, state.operator_reason)
            if self._remember_quiet(state) and view.lease.until_ms > (
                now if self.monotonic else monotonic_ms()
            ):
                stats.admitted += 1
                return Permit(self, None, state.generation, now, deadline, probe=False)
        return None

    def idle_at(self, state: BreakerState, now: int) -> Idle | None:
        """The core's idle window that holds ``state`` at ``now``, or ``None``: ask the store.

        Kept while it holds (the same state and policy objects, ``now`` inside it), so a
        breaker that stays open rejects with a few comparisons: the open hot path. While a
        listener is registered every request goes through the core, so the listener sees
        its record.
        """
        idle = self.idle
        if (
            idle is not None
            and idle.state is state
            and idle.policy is self.policy
            and idle.since <= now < idle.until
        ):
            return idle
        if self.listeners:
            return None
        window = idle_window(state, now, self.policy)
        if window is None:
            return None
        note = state.operator_reason
        render = self.render if note is None else self.renderer(note)
        idle = self.idle = Idle(state, self.policy, now, window, render)
        if self.listeners:  # one came meanwhile (add_listener): it hears every record
            self.idle = None
        return idle

    def cooling(self, state: BreakerState, now: int) -> Idle | None:
        """The core's idle window that rejects a call at ``now``, the rejection counted.

        ``None``: no window holds (ask the core). The one rule of the open hot path:
        ``call``/``acall`` raise the rejection, a guarded tool returns it (no exception).
        """
        idle = self.idle_at(state, now)
        if idle is not None:
            self.stats.rejected += 1
            if (tally := self.view.tally) is not None:
                # A quiet rejection of the history: Tally.reject(), inlined for its state.
                hot = tally.hot_reject
                if hot[0] is state:
                    hot[1][0] += 1
                else:
                    tally.reject(state, now)
        return idle

    def quiet_permit(self, state: BreakerState, start: int, deadline: int) -> Permit[BreakerT]:
        """The permit a fast-path call would have had, to settle it after all."""
        return Permit(self, None, state.generation, start, deadline, False)

    def admit(
        self, now: int, deadline: int | None, *, health_check: bool = False
    ) -> Permit[BreakerT] | Rejection[BreakerT]:
        event = self.request(now, health_check)
        policy = self.policy
        try:
            state, records = self.store.apply(self.key, event, policy)
        except StoreUnavailable:
            return self._store_down()
        return self._admitted(state, records, now, deadline, policy)

    async def aadmit(
        self, now: int, deadline: int | None, *, health_check: bool = False
    ) -> Permit[BreakerT] | Rejection[BreakerT]:
        event = self.request(now, health_check)
        policy = self.policy
        try:
            state, records = await aapply(self.store, self.key, event, policy)
        except StoreUnavailable:
            return self._store_down()
        return self._admitted(state, records, now, deadline, policy)

    def request(self, now: int, health_check: bool = False) -> Event:
        call = f"{process_token()}.{next(self.ids)}"
        return Event("request", now, self.key, call=call, health_check=health_check)

    def _store_down(self) -> Rejection[BreakerT]:
        self.stats.rejected += 1
        return Rejection(self, STORE_DOWN, None)

    def _admitted(
        self,
        state: BreakerState,
        records: tuple[Transition, ...],
        now: int,
        deadline: int | None,
        policy: Policy,
    ) -> Permit[BreakerT] | Rejection[BreakerT]:
        records = self.observe(state, records, now, policy)
        last = records[-1]
        if last.attempted:
            self.stats.admitted += 1
            if last.would_reject:
                self.stats.would_reject += 1
            probe = admitted_probe(last)
            return Permit(self, last.event.call, last.generation, now, deadline, probe, policy)
        self.stats.rejected += 1
        return Rejection(self, last.reason, self.retry_after_ms(state), state.operator_reason)

    def settle(self, permit: Permit[BreakerT], verdict: Verdict, now: int) -> Transition | None:
        event = self._outcome(permit, verdict, now)
        if event is None:
            return None
        try:
            state, records = self.store.apply(self.key, event, permit.policy)
        except StoreUnavailable:
            return None  # the outcome is lost, never turned into a success
        return self.observe(state, records, now, permit.policy)[-1]

    async def asettle(
        self, permit: Permit[BreakerT], verdict: Verdict, now: int
    ) -> Transition | None:
        event = self._outcome(permit, verdict, now)
        if event is None:
            return None
        try:
            state, records = await aapply(self.store, self.key, event, permit.policy)
        except StoreUnavailable:
            return None  # the outcome is lost, never turned into a success
        return self.observe(state, records, now, permit.policy)[-1]

    def _outcome(self, permit: Permit[BreakerT], verdict: Verdict, now: int) -> Event | None:
        """The outcome event to apply, or ``None`` when the core declared it a no-op."""
        kind = verdict.kind
        if kind != "success":
            self.stats.failures[verdict.detail] = self.stats.failures.get(verdict.detail, 0) + 1
            if verdict is _LATE:
                self.stats.late_results += 1
            elif kind == "ignored":
                self._unclassified(verdict.detail)
        elif not self.listeners:
            state = self.view.state
            if state is not None and (state is self.quiet or self._remember_quiet(state)):
                if (tally := self.view.tally) is not None:
                    tally.settled(permit.call, state, now, permit.generation)
                return None
        call = permit.call
        if call is None:
            # Admitted from the view, unknown to the store: its outcome needs an id of its
            # own, so the history can name the call (a replay writes its request in).
            call = permit.call = self.request(now).call
            if (tally := self.view.tally) is not None and call is not None:
                tally.admitted_unsent(call)
        took = None
        if kind == "success" and permit.policy.slow_call_ms is not None:
            took = max(0, now - permit.admitted_at)  # only slow-call rules need it
        return Event(
            kind,
            now,
            self.key,
            call=call,
            generation=permit.generation,
            retry_after_ms=verdict.retry_after_ms if kind == "failure" else None,
            duration_ms=took,
        )

    def _unclassified(self, detail: str) -> None:
        """Count an outcome the classifier did not know; log the first of each type."""
        name = unclassified_type(detail)
        if name is not None and self.stats.count_unclassified(name):
            # The rule stays (it never counts toward opening); the silence goes.
            log.warning(
                printable(
                    redact_text(
                        f"toolbreaker: breaker {self.key!r} got {name}, an exception its "
                        "classifier does not know: it is ignored and never counts toward "
                        f"opening. Classify it (classifier=) if {name} means the dependency "
                        "is unhealthy; counted in stats.unclassified"
                    )
                )
            )

    def _remember_quiet(self, state: BreakerState) -> bool:
        if is_quiet(state, self.policy):
            self.quiet, self.idle = state, None  # a quiet state has no idle window
            if self.listeners:  # one came meanwhile (add_listener): it hears every record
                self.quiet = None
            return True
        return False

    def observe(
        self,
        state: BreakerState,
        records: tuple[Transition, ...],
        now: int,
        policy: Policy | None = None,
    ) -> tuple[Transition, ...]:
        """Count and publish the core's records; returns them (stamped when following)."""
        if self.stamp:
            # A breaker following a published sheet names the policy each record was
            # decided under, even when a swap lands before its listeners run.
            version = (policy or self.policy).version
            records = tuple(dataclasses.replace(r, policy_version=version) for r in records)
        stats = self.stats
        for record in records:
            if changed_phase(record):
                if self.phase_since is not None:
                    spent = max(0, record.event.at - self.phase_since)
                    stats.time_in_state_ms[record.from_phase] += spent
                self.phase_since = record.event.at
                if opened(record):
                    stats.opens[record.reason] = stats.opens.get(record.reason, 0) + 1
                    if reopened(record):
                        stats.reopens_from_half_open += 1
                    self.opened()
                elif half_opened(record):
                    stats.half_opens += 1
            elif self.phase_since is None:
                self.phase_since = record.event.at
        me = self.owner
        for listener in tuple(self.listeners):
            for record in records:
                try:
                    listener(record, me)
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

    def record_result(self, permit: Permit[BreakerT], result: object) -> None:
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
        An :class:`~toolbreaker.errors.AsyncCallError` (a sync call that got a coroutine back,
        which ran nothing) is ``ignored`` (``not-awaited``) whatever the classifier says.
        """
        if isinstance(exc, AsyncCallError):
            return _NOT_AWAITED
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

    def renderer(self, note: str | None) -> Callable[..., dict[str, Any]]:
        """The renderer of a rejection; with an operator's ``note`` when there is one."""
        return self.render if note is None else functools.partial(self.unavailable, note=note)

    def unavailable(
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
        cached = self.rendered.get(key)
        if cached is None:
            if len(self.rendered) >= 512:
                self.rendered.clear()
            cached = self.rendered[key] = unavailable_result(
                tool=name,
                reason=reason,
                retry_after_ms=retry_after_ms,
                fallback=self.fallback,
                fallback_note=self.fallback_note,
                templates=self.instructions,
                operator_reason=note,
            )
        return dict(cached)
