"""Run guards: may this run continue? A shell around :mod:`toolbreaker.core.run.machine`.

A dependency breaker asks whether a remote is healthy enough to call; a :class:`RunGuard`
asks whether *this task* may take its next action. Every tool call of a run goes through
it: fingerprint the intended action, read the write's journal entry, let the run machine
decide (budgets, loops, repeats, the write breaker, journal deduplication, stops), journal
writes before they run, execute through the dependency's breaker, verify, and record.
The guard decides nothing itself: it feeds events to ``apply()`` and carries out the
verdict. ``toolbreaker check-run`` drives the same machine, so the two cannot disagree.

Writes follow plan, authorize, execute, verify, record. An outcome that may have committed
is *unknown*, whatever the transport says (see :func:`may_have_committed`), and is never
replayed: the run's write breaker opens and a read-only reconcile check decides whether
the write happened. Resuming a task with the same id skips everything its journal
confirms, and refuses writes while an earlier write of the task is still unresolved.

Every journal write is a move of the write protocol (:mod:`toolbreaker.core.run.protocol`),
from the status the guard knows: the protocol says where it goes, what proves a write,
what a request, a resume and an operator's :meth:`RunGuard.resolve` do with each status,
and what counts as uncertain. A journal write whose answer was lost
(:class:`~toolbreaker.errors.StoreWriteUnknown`) is believed made and never confirmed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, Literal, TypeVar

from toolbreaker.core.degrade import refuses_stale
from toolbreaker.core.run import protocol
from toolbreaker.core.run.budget import WRITES, Action, Budget, RiskClass, RunState, Stop
from toolbreaker.core.run.fingerprint import FingerprintRules, evidence, fingerprint, write_key
from toolbreaker.core.run.machine import RunDecision, RunEvent
from toolbreaker.core.run.machine import apply as run_apply
from toolbreaker.core.run.redact import redact
from toolbreaker.core.run.retrying import ModelRetries, failed_retryably, is_retry, observe
from toolbreaker.errors import (
    CircuitOpen,
    FingerprintError,
    PolicyError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._packet import StopPacket
from toolbreaker.runtime._result import (
    cancelled_result,
    deferred_result,
    denied_result,
    error_result,
    handoff_result,
    journal_down_result,
    queued_result,
    stopped_result,
    unknown_result,
)
from toolbreaker.runtime._step import Step
from toolbreaker.runtime.breaker._breaker import Breaker, Permit, Rejection, watch_openings
from toolbreaker.runtime.breaker._classify import Verdict, classify_exception
from toolbreaker.runtime.breaker._commit import found_in_chain, may_have_committed
from toolbreaker.runtime.breaker._degrade import Degradation, Notices, deferred_notice
from toolbreaker.runtime.breaker._layers import warn_nested_retries
from toolbreaker.runtime.breaker._watch import BreakerWatch
from toolbreaker.runtime.run._journal import (
    entry_for,
    journaled,
    packet_steps,
    settle_first,
    step_of,
)
from toolbreaker.runtime.run._siblings import (
    BranchOutcome,
    CancelledByPolicy,
    SiblingOutcome,
    TurnGroup,
    TurnMember,
    is_policy,
)
from toolbreaker.stores._protocol import Journal
from toolbreaker.stores.memory import MemoryStore

__all__ = [
    "ActionRequest",
    "GuardedTool",
    "RunGuard",
    "StopPacket",
    "evidence_digest",
    "key_argument",
    "may_have_committed",
    "with_key",
    "without_key",
]

Authorizer = Callable[["ActionRequest"], bool]


@dataclasses.dataclass(frozen=True, slots=True)
class ActionRequest:
    """What an authority check (or an approval hook) is asked to approve.

    Attributes:
        task: the run's task id.
        tool: the tool name.
        args: the arguments, secrets masked.
        fingerprint: the semantic fingerprint of the action.
        idempotency_key: the key the write will carry.
        risk: the tool's risk class.
    """

    task: str
    tool: str
    args: Mapping[str, Any]
    fingerprint: str
    idempotency_key: str | None
    risk: RiskClass


@dataclasses.dataclass(frozen=True, slots=True)
class GuardedTool:
    """A tool as the run guard knows it.

    Attributes:
        name: the tool name the model calls.
        fn: the implementation, called with the arguments as keywords.
        risk: ``read``, ``reversible_write`` or ``irreversible``.
        breaker: the dependency breaker the call goes through (and its deadline).
        business_key: argument fields (dotted paths) naming the business action, from
            which a write's idempotency key is derived; default: the whole canonical
            action.
        idempotency_arg: the keyword argument that receives the idempotency key.
        verify: a write's result check; a falsy answer or an exception makes the
            outcome unknown.
        reconcile: a read-only status check, called with the idempotency key and the
            arguments; returns the committed record or ``None``.
        external_id: extracts the external id (ticket number ...) from a result.
        authorize: the authority check every irreversible call must pass.
        required: the run cannot go on without this tool: its breaker opening stops it.
        recovery: a read-only status check that may still run after the run stopped.
    """

    name: str
    fn: Callable[..., Any]
    risk: RiskClass = "read"
    breaker: Breaker | None = None
    business_key: tuple[str, ...] | None = None
    idempotency_arg: str | None = "idempotency_key"
    verify: Callable[[Any], bool] | None = None
    reconcile: Callable[[str, Mapping[str, Any]], Any] | None = None
    external_id: Callable[[Any], str | None] | None = None
    authorize: Authorizer | None = None
    required: bool = False
    recovery: bool = False


class RunGuard:
    """Budgets, loop detection and safe writes for one run of one task.

    Args:
        task: the task id; a resumed run uses the same id and skips confirmed work.
        budget: the run's limits.
        journal: where completed actions are journaled (a store); shared by resumed runs.
        clock: integer-millisecond monotonic clock.
        rules: fingerprint rules (volatile and prose fields).
    """

    def __init__(
        self,
        task: str,
        *,
        budget: Budget | None = None,
        journal: Journal | None = None,
        clock: Clock = monotonic_ms,
        rules: FingerprintRules | None = None,
    ) -> None:
        if not isinstance(task, str) or not task:
            raise PolicyError("a run guard needs a task id", field="task")
        self.task = task
        self.budget = budget or Budget()
        self.journal: Journal = journal if journal is not None else MemoryStore()
        self.clock = clock
        self.rules = rules or FingerprintRules.default()
        self._tools: dict[str, GuardedTool] = {}
        self._lock = threading.Lock()
        self._run = RunState.start(task, clock())
        self._retries = ModelRetries()
        self._attempted: dict[str, Any] | None = None
        self._resumed = False
        # The keys of the writes counted as uncertain in this run: an operator's word
        # lifts the count once per key, whatever the journal said.
        self._uncertain_keys: set[str] = set()
        self._stop_listeners: list[Callable[[StopPacket, RunGuard], None]] = []
        self._turn: object = _NO_TURN
        self._group: TurnGroup | None = None
        #: Stop listener calls that raised (logged; the run's decisions stood).
        self.listener_errors = 0
        #: Listeners of the run's ``toolbreaker.limit/v1`` notices (a ``deferred`` call):
        #: ``guard.notices.add_listener(fn)``.
        self.notices = Notices()
        # The observers of the tools' breakers, now and later (see watch_breakers).
        self._watch = BreakerWatch()
        self._watch_lock = threading.Lock()

    # -- configuration ------------------------------------------------------------------

    def add_tool(self, tool: GuardedTool) -> GuardedTool:
        """Register a tool; irreversible tools must have an authority check."""
        if tool.risk not in ("read", "reversible_write", "irreversible"):
            raise PolicyError(f"unknown risk class {tool.risk!r}", field=f"{tool.name}.risk")
        if tool.risk == "irreversible" and tool.authorize is None:
            raise PolicyError(
                f"irreversible tool {tool.name!r} needs an authorize callback",
                field=f"{tool.name}.authorize",
            )
        if tool.breaker is not None and refuses_stale(tool.risk, tool.breaker.degradation.chain):
            raise PolicyError(
                f"write tool {tool.name!r} goes through {tool.breaker.key!r}, whose degrade "
                "chain has 'stale': a write never falls back to a stale answer",
                field=f"{tool.name}.breaker",
            )
        if tool.recovery and tool.risk != "read":
            raise PolicyError(
                f"recovery tool {tool.name!r} must be a read", field=f"{tool.name}.recovery"
            )
        # The model re-issuing failed calls is a retry layer already; a client that also
        # retries inside the tool multiplies the attempts. Found here, reported with the fix.
        warn_nested_retries(tool.fn, tool.name, "the model (its re-calls are retries)")
        with self._watch_lock:
            breaker = tool.breaker
            if breaker is not None and breaker not in self.breakers():
                self._watch.tell(breaker)  # before the tool can be called: from its first call
            self._tools[tool.name] = tool
        return tool

    def breakers(self) -> tuple[Breaker, ...]:
        """The breakers the run's tools go through, each once, in the order tools came."""
        found: dict[int, Breaker] = {}
        for spec in tuple(self._tools.values()):
            if spec.breaker is not None:
                found.setdefault(id(spec.breaker), spec.breaker)
        return tuple(found.values())

    def watch_breakers(self, fn: Callable[[Breaker], None]) -> Callable[[], None]:
        """Call ``fn(breaker)`` for each of :meth:`breakers`, now and as tools are added.

        Each breaker once, before a tool added later can be called through it; ``fn``
        must be quick and must not add tools. One that raises is counted in the breaker's
        ``stats.listener_errors`` and logged. Returns a remover. Observers use this
        through :class:`~toolbreaker.runtime.Attachment` (``TraceRecorder.attach(guard)``).
        """
        with self._watch_lock:
            remove = self._watch.watch(fn, self.breakers())

        def unwatch() -> None:
            with self._watch_lock:
                remove()

        return unwatch

    def tool(
        self,
        name: str | None = None,
        *,
        risk: RiskClass = "read",
        breaker: Breaker | None = None,
        business_key: Sequence[str] | None = None,
        idempotency_arg: str | None = "idempotency_key",
        verify: Callable[[Any], bool] | None = None,
        reconcile: Callable[[str, Mapping[str, Any]], Any] | None = None,
        external_id: Callable[[Any], str | None] | None = None,
        authorize: Authorizer | None = None,
        required: bool = False,
        recovery: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`add_tool`; the decorated function becomes guarded."""

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            spec = self.add_tool(
                GuardedTool(
                    name=name or fn.__name__,
                    fn=fn,
                    risk=risk,
                    breaker=breaker,
                    business_key=tuple(business_key) if business_key else None,
                    idempotency_arg=idempotency_arg,
                    verify=verify,
                    reconcile=reconcile,
                    external_id=external_id,
                    authorize=authorize,
                    required=required,
                    recovery=recovery,
                )
            )

            def guarded(**kwargs: Any) -> Any:
                return self.call(spec.name, kwargs)

            guarded.__name__ = spec.name
            guarded.__doc__ = fn.__doc__
            return guarded

        return decorate

    def ensure_tool(self, name: str, **options: Any) -> GuardedTool:
        """The registered tool ``name``, registering it with ``options`` if unknown.

        Adapters use this for tools the user did not declare: they are reads unless the
        options (or the framework's annotations) say otherwise.
        """
        spec = self._tools.get(name)
        if spec is None:
            spec = self.add_tool(GuardedTool(name=name, fn=_not_callable, **options))
        return spec

    # -- inspection -----------------------------------------------------------------------

    @property
    def stopped(self) -> Stop | None:
        """Why the run stopped, or ``None`` while it may continue."""
        return self._run.stopped

    @property
    def writes_blocked(self) -> Stop | None:
        """Why writes are refused for now (writes with an unknown outcome), else ``None``."""
        return self._run.writes_blocked

    @property
    def state(self) -> RunState:
        """The run's state: counters, the stop and the write breaker, as the core keeps it."""
        return self._run

    def mark_turn(self, turn: object = None) -> None:
        """A model turn begins: the per-turn call count starts again.

        Adapters call it where the framework starts a model turn. ``turn`` identifies the
        turn (a step number, a request count): calls with the same value mark it once, so
        every tool call of a turn may mark it; ``None`` always starts a new turn. Without
        ``Budget.max_calls_per_turn`` nothing is counted.
        """
        with self._lock:
            if turn is not None and turn == self._turn:
                return
            self._turn = turn
            # The calls this turn starts are one sibling group (see run_step).
            self._group = TurnGroup(turn, ())
        self._feed(RunEvent("turn", self.clock()))

    def turn_outcome(self) -> SiblingOutcome | None:
        """The calls of the current (or last) model turn and how each ended.

        ``None`` before the first :meth:`mark_turn`. Each call is ``completed``,
        ``degraded`` (a tool-unavailable, deferred or degraded answer), ``failed`` or
        ``cancelled`` (by policy: a required dependency it needs opened while it ran, or
        the run had stopped before it started), with the reason; ``to_result()`` is the
        bounded partial outcome a model or caller reads.
        """
        group = self._group
        return None if group is None else group.outcome()

    def stop(self, detail: str = "stopped by an operator") -> StopPacket:
        """Stop the run by hand (condition ``operator``) and return the packet."""
        self._feed(RunEvent("stop", self.clock(), detail=detail))
        return self.stop_packet()

    def add_cost(self, amount: Decimal | str | int, *, risk: RiskClass | None = None) -> None:
        """Report the cost of a model step (or anything outside a tool call)."""
        from toolbreaker.core.run import budget as budgets

        with self._lock:
            self._run = budgets.add_cost(self._run, amount, risk=risk)

    def resolve(self, idempotency_key: str, *, committed: bool, result: Any = None) -> None:
        """An operator's word on a write whose outcome was unknown.

        ``committed=True`` journals it as confirmed (a resumed run answers it from the
        journal); ``False`` as failed (it may be made again). Either way the write stops
        counting as uncertain, so writes may run again once few enough remain. The write
        protocol (:mod:`toolbreaker.core.run.protocol`) refuses ``committed=False`` for a
        write that is confirmed, or queued (a drain may still make it).

        Raises:
            WriteTransitionError: the protocol refuses the move; nothing changed.
            StoreWriteUnknown: the journal's answer was lost: the word may be recorded
                or not; call again.
            StoreUnavailable: the journal cannot be read or written; nothing changed.
        """
        found = self.journal.journal_get(self.task, idempotency_key)
        status = protocol.after(
            protocol.read(found), "operator-made" if committed else "operator-not-made"
        )
        update = {**(found or {}), "status": status, "resolved_by": "operator", "at": self.clock()}
        if result is not None:
            update["result"] = journaled(result)
        self.journal.journal_put(self.task, idempotency_key, redact(update))
        # Known now, by the operator's word: it no longer counts (once, if it counted).
        self._settled(idempotency_key)

    def stop_packet(self) -> StopPacket:
        """The operator packet for the run as it is now."""
        stop = self._run.stopped or self._run.writes_blocked
        try:
            entries = self.journal.journal_entries(self.task)
        except StoreUnavailable:
            entries = [{"status": "journal-unavailable"}]
        confirmed, uncertain = packet_steps(entries)
        return StopPacket(
            task=self.task,
            condition=stop.condition if stop else "running",
            detail=stop.detail if stop else "the run has not stopped",
            confirmed=confirmed,
            uncertain=uncertain,
            attempted=self._attempted,
            counters=self._run.counters(),
            next_safe_action=self._next_safe_action(stop, uncertain),
        )

    # -- running tools --------------------------------------------------------------------

    def call(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        """Run one tool call of this run; returns the tool's result or a result dict.

        Never raises for tool failures: a rejected, failed, unknown or stopped call
        returns a JSON-ready dict the model can act on.
        """
        step = self.begin(tool, args)
        if step.answer is not None:
            return step.answer
        spec = self._tools[step.tool]
        try:
            if spec.breaker is not None:
                result = spec.breaker.run(step, spec.fn, **step.args)
            else:
                result = spec.fn(**step.args)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result
            return step.failed(exc)
        return step.succeeded(result)

    async def acall(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        """The async twin of :meth:`call` for coroutine tools."""
        step = await self.abegin(tool, args)
        if step.answer is not None:
            return step.answer
        spec = self._tools[step.tool]
        try:
            if spec.breaker is not None:
                result = await spec.breaker.arun(step, spec.fn, **step.args)
            else:
                awaitable: Awaitable[Any] = spec.fn(**step.args)
                result = await awaitable
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result
            return await step.afailed(exc)
        return await step.asucceeded(result)

    def run_step(self, step: Step, fn: Callable[[], R]) -> R | CancelledByPolicy:
        """Run a begun step's tool, ``fn()``, as one call of the current model turn.

        Adapters call it where the framework runs a model response's tool calls in
        parallel. When a required dependency this call needs opens while it runs, the
        call is cancelled by policy: abandoned in its worker thread (its result
        discarded), never started if it had not; the step is then settled and
        :class:`~toolbreaker.runtime.CancelledByPolicy` carries what the model reads (a
        write that may have started is an unknown outcome: journaled, reconciled, never
        replayed) and the run stops, as for any required dependency going down.
        Otherwise ``fn()``'s result (or exception) is returned as is: settle the step
        with it. Independent calls, and calls outside a turn, run as they are.
        """
        turn = self._turn_of(step)
        if turn is None:
            return fn()
        group, member = turn
        group.refresh(member, self._required_breakers())
        ran = group.run(member, fn)
        if not is_policy(ran):
            return ran  # type: ignore[return-value] # R: the tool's own result
        return CancelledByPolicy(self._cancelled(step, group, member, record=True))

    async def arun_step(self, step: Step, fn: Callable[[], Awaitable[R]]) -> R | CancelledByPolicy:
        """:meth:`run_step` on the event loop: the task running the tool is cancelled.

        A call that needs a required dependency runs in a task of its own; a cancellation
        by policy cancels that task and awaits it, so nothing outlives the call, and the
        framework's own task gets an ordinary answer. A cancelled caller cancels it too.
        """
        turn = self._turn_of(step)
        if turn is None:
            return await fn()
        group, member = turn
        group.refresh(member, self._required_breakers())
        ran = await group.arun(member, fn)
        if not is_policy(ran):
            return ran  # type: ignore[return-value] # R: the tool's own result
        if not step.settled and step.permit is not None:
            await step.permit.arecord("ignored")
        answer = await self._off_loop(step, self._cancelled, step, group, member, False)
        return CancelledByPolicy(answer)

    def begin(self, tool: str, args: Mapping[str, Any] | None = None) -> Step:
        """Decide one call; the :class:`~toolbreaker.runtime.Step` says what to do.

        If ``step.answer`` is set, do not run the tool: hand the answer to the model.
        Otherwise run it with ``step.args`` (a write's idempotency key is injected there)
        within ``step.deadline`` seconds, and settle the step with ``succeeded(result)``
        or ``failed(exc)``, whose return value is what the model should see. The tool's
        dependency breaker is asked here and told there.
        """
        step = self._plan(tool, dict(args or {}))
        if step.answer is None and step.plan.spec.breaker is not None and self._may_retry(step):
            breaker = step.plan.spec.breaker.for_scope()  # a scoped row: this tenant's
            self._admitted(step, breaker._enter(breaker.clock(), breaker._default_deadline))
        return self._joined(self._journal_pending(step))

    async def abegin(self, tool: str, args: Mapping[str, Any] | None = None) -> Step:
        """:meth:`begin` for the event loop: store round trips never block it.

        The breaker's round trip is awaited; the journal's run in a worker thread when
        the journal is a shared store.
        """
        step = await self._off_loop(None, self._plan, tool, dict(args or {}))
        if (
            step.answer is None
            and step.plan.spec.breaker is not None
            and await self._amay_retry(step)
        ):
            breaker = step.plan.spec.breaker.for_scope()
            admission = await breaker._aenter(breaker.clock(), breaker._default_deadline)
            if isinstance(admission, Rejection):
                served = None
                if breaker.degradation.chain:
                    # The degradation's store round trips run off the loop.
                    served = await self._adegraded(step.plan, admission.result_for(step.tool))
                # So does journaling what it did with a write.
                await self._off_loop(step, self._admitted, step, admission, served)
            else:
                self._admitted(step, admission)
        return self._joined(await self._off_loop(step, self._journal_pending, step))

    async def _off_loop(self, step: Step | None, fn: Callable[..., R], /, *args: Any) -> R:
        """``fn(*args)`` where it cannot block the event loop on a shared store.

        Inline when the journal, and the store of the step's breaker, live in this
        process (no I/O to wait for); in a worker thread otherwise.
        """
        stores = [self.journal]
        if step is not None and step.plan.spec.breaker is not None:
            stores.append(step.plan.spec.breaker.store)
        if all(isinstance(store, MemoryStore) for store in stores):
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    # -- plan: the run machine decides ------------------------------------------------------

    def add_stop_listener(
        self, listener: Callable[[StopPacket, RunGuard], None]
    ) -> Callable[[], None]:
        """Call ``listener(packet, guard)`` when the run stops or blocks writes; returns a remover.

        The packet is the masked :meth:`stop_packet` at that moment. A listener only
        watches: one that raises is counted in :attr:`listener_errors` and logged, and
        the run's decision stands.
        """
        self._stop_listeners.append(listener)
        return lambda: self._stop_listeners.remove(listener)

    def _feed(self, event: RunEvent) -> RunDecision:
        with self._lock:
            before = (self._run.stopped, self._run.writes_blocked)
            self._run, decision = run_apply(self._run, event, self.budget)
            after = (self._run.stopped, self._run.writes_blocked)
        if self._stop_listeners and after != before and any(after):
            self._notify_stop()
        return decision

    def _notify_stop(self) -> None:
        packet = self.stop_packet()
        for listener in tuple(self._stop_listeners):
            try:
                listener(packet, self)
            except Exception as exc:  # noqa: BLE001 - a listener never changes a decision
                self.listener_errors += 1
                hook_failed(f"stop listener {listener!r} failed; the run's decision stands", exc)

    def _resume(self) -> None:
        """Once per guard: writes an earlier run left unresolved block writes here too."""
        if self._resumed:
            return
        try:
            entries = self.journal.journal_entries(self.task)
        except StoreUnavailable:
            return  # writes are refused while the journal is down anyway; try again later
        self._resumed = True
        unresolved = [e for e in entries if protocol.uncertain(protocol.read(e))]
        with self._lock:
            self._uncertain_keys.update(str(e.get("idempotency_key")) for e in unresolved)
        if unresolved:
            keys = ", ".join(str(e.get("idempotency_key")) for e in unresolved[:5])
            self._feed(
                RunEvent(
                    "resume",
                    self.clock(),
                    count=len(unresolved),
                    detail=f"left unresolved by an earlier run of {self.task!r}: {keys}",
                )
            )

    def _plan(self, tool: str, args: dict[str, Any]) -> Step:
        spec = self._tools.get(tool)
        if spec is None:
            raise PolicyError(f"unknown tool {tool!r} for run {self.task!r}", field="tool")
        args = without_key(spec, args)
        try:
            action_fp = fingerprint(tool, args, self.rules)
            key = None
            if spec.risk in WRITES:
                key = write_key(tool, args, spec.business_key, task=self.task, rules=self.rules)
        except (FingerprintError, RecursionError) as exc:
            # Arguments that cannot be checked are never run: the guard could neither
            # count them nor give a write its key.
            return Step(self, tool, args, answer=error_result(tool, exc, retryable=False))
        plan = _Plan(spec, action_fp, key, args)
        step = Step(
            self,
            tool,
            args,
            idempotency_key=key,
            fingerprint=action_fp,
            deadline=spec.breaker.timeout if spec.breaker is not None else None,
            plan=plan,
        )
        self._attempted = {"tool": tool, "fingerprint": action_fp, "idempotency_key": key}
        self._resume()
        done: dict[str, Any] | None = None
        try:
            done = self.journal.journal_get(self.task, key) if key else None
        except StoreUnavailable:
            return _answered(step, journal_down_result(tool))
        plan.status = status = protocol.read(done)
        journaled = done.get("result", {"ok": True, "deduplicated": True}) if done else None
        action = Action(tool=tool, fingerprint=action_fp, risk=spec.risk, recovery=spec.recovery)
        plan.action = action
        decision = self._feed(
            RunEvent(
                "request",
                self.clock(),
                action,
                journal=status,
                evidence=evidence_digest(journaled, self.rules) if protocol.made(status) else None,
            )
        )
        step.decision = decision
        verdict = decision.verdict
        if verdict == "journal":
            # A confirmed write is never executed again (how a resumed task skips work).
            return _answered(step, journaled)
        if verdict == "queued" and key is not None:
            # Queued by the degradation matrix (or maybe): a drainer makes it, not this run.
            queued = protocol.queue_id(done) or "unknown"
            maybe = protocol.uncertain(status)
            return _answered(step, queued_result(tool, queued, key, already=True, maybe=maybe))
        if verdict == "handed-off" and key is not None:
            rid = protocol.reconciliation_id(done) or "unknown"
            return _answered(step, handoff_result(tool, rid, step_of(done or {})))
        if verdict == "reconcile":
            return _answered(
                step, self._reconcile(plan, why="an earlier attempt's outcome is unknown")
            )
        if verdict == "deferred":
            # Not made, not queued: the model reads that it may issue it next turn.
            limit = self.budget.max_calls_per_turn
            assert limit is not None
            if self.notices:
                key = spec.breaker.key if spec.breaker is not None else None
                self.notices.emit(deferred_notice(self.task, tool, limit=limit, breaker=key))
            return _answered(step, deferred_result(tool, limit=limit))
        if verdict in ("writes-blocked", "stopped"):
            assert decision.stop is not None
            stop_answer = stopped_result(decision.stop, writes_only=verdict == "writes-blocked")
            return _answered(step, stop_answer)
        plan.begun = True
        plan.opened = watch_openings()
        if spec.risk == "irreversible" and not self._authorized(step):
            self._finish(plan, "ignored")
            return _answered(step, denied_result(tool))
        if key is not None:
            step.args = with_key(spec, args, key)
        return step

    def _may_retry(self, step: Step) -> bool:
        """The model is a retry layer: re-issuing an action that just failed spends a retry.

        The dependency's retry budget pays for it; once it is spent the tool is unavailable
        for the run (and a required tool stops it).
        """
        plan: _Plan = step.plan
        breaker = plan.spec.breaker
        assert breaker is not None
        with self._lock:
            retrying = is_retry(self._retries, plan.fingerprint)
        return not retrying or breaker._spend_model_retry() or self._retry_refused(step)

    async def _amay_retry(self, step: Step) -> bool:
        """:meth:`_may_retry` for the event loop: a shared budget is paid in a thread."""
        plan: _Plan = step.plan
        breaker = plan.spec.breaker
        assert breaker is not None
        if breaker._shared_budget is None:
            return self._may_retry(step)
        with self._lock:
            retrying = is_retry(self._retries, plan.fingerprint)
        if not retrying or await asyncio.to_thread(breaker._spend_model_retry):
            return True
        return self._retry_refused(step)

    def _retry_refused(self, step: Step) -> bool:
        """The retry budget is spent: the tool is unavailable for the run (``False``)."""
        plan: _Plan = step.plan
        breaker = plan.spec.breaker
        assert breaker is not None
        answer = breaker._unavailable("retry-budget", None, tool=step.tool)
        _answered(step, self._dependency_down(plan, answer, "retry-budget"))
        return False

    def _observe_retry(self, plan: _Plan, result: Any) -> None:
        """Remember whether the action's attempt ended in a failure worth retrying."""
        retryable = failed_retryably(result)
        with self._lock:
            self._retries = observe(self._retries, plan.fingerprint, retryable_failure=retryable)

    def _admitted(
        self, step: Step, admission: Permit | Rejection, served: dict[str, Any] | None = None
    ) -> None:
        """The dependency breaker's answer for a step the run machine let through.

        ``served``: the rejection's degradation, already made (on the event loop).
        """
        if isinstance(admission, Permit):
            step.permit = admission
            return
        plan: _Plan = step.plan
        answer = admission.result_for(step.tool) if served is None else served
        _answered(step, self._dependency_down(plan, answer, admission.reason, served=served))

    def _journal_pending(self, step: Step) -> Step:
        """Journal a write as pending before it runs; no record of the attempt, no attempt."""
        plan: _Plan | None = step.plan
        if step.answer is not None or plan is None or plan.key is None:
            return step
        if not self._journal(plan, "attempt"):
            # A write we could not journal could later be neither skipped nor reconciled.
            if step.permit is not None:
                step.permit.record("ignored")
                step.permit = None
            self._finish(plan, "ignored")
            if protocol.unresolved(plan.status):
                # The pending entry may have been written: this attempt certainly was not
                # made, so say so (best effort: a pending entry left is only reconciled).
                self._journal(plan, "not-made")
            _answered(step, journal_down_result(step.tool))
        return step

    def _authorized(self, step: Step) -> bool:
        spec = step.plan.spec
        assert spec.authorize is not None
        request = ActionRequest(
            task=self.task,
            tool=spec.name,
            args=redact(step.args),
            fingerprint=step.plan.fingerprint,
            idempotency_key=step.plan.key,
            risk=spec.risk,
        )
        try:
            return spec.authorize(request) is True
        except Exception as exc:  # noqa: BLE001 - a failing authority check denies
            hook_failed(f"the authority check of {spec.name} raised; denied", exc)
            return False

    # -- settle: the Step's owner callbacks ---------------------------------------------

    def _step_succeeded(self, step: Step, result: Any) -> Any:
        self._settling(step)
        if step.permit is not None:
            step.permit.breaker.record_result(step.permit, result)
        return self._told(step, self._succeeded(step, result))

    def _step_failed(self, step: Step, exc: BaseException) -> Any:
        self._settling(step)
        if step.permit is not None:
            step.permit.record(exc)
        if not isinstance(exc, Exception):
            self._told(step, None, exc)
            raise exc  # a cancellation: a write stays pending, reconciled on resume
        return self._told(step, self._failed(step, exc))

    async def _step_asucceeded(self, step: Step, result: Any) -> Any:
        self._settling(step)
        if step.permit is not None:
            await step.permit.arecord(step.permit.breaker.result_verdict(result))
        return self._told(step, await self._off_loop(step, self._succeeded, step, result))

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any:
        self._settling(step)
        if step.permit is not None:
            await step.permit.arecord(exc)
        if not isinstance(exc, Exception):
            self._told(step, None, exc)
            raise exc
        return self._told(step, await self._off_loop(step, self._failed, step, exc))

    # -- the model turn's sibling group ----------------------------------------------------

    def _required_breakers(self) -> tuple[Breaker, ...]:
        found: dict[int, Breaker] = {}
        for spec in tuple(self._tools.values()):
            if spec.required and spec.breaker is not None:
                found.setdefault(id(spec.breaker), spec.breaker)
        return tuple(found.values())

    def _joined(self, step: Step) -> Step:
        """A step begun within a model turn joins the turn's group (answered ones too)."""
        group = self._group
        if group is None:
            return step
        group.required = self._required_breakers()
        breaker = step.permit.breaker if isinstance(step.permit, Permit) else None
        member = group.join(step.tool, None if step.answer is not None else breaker)
        if step.answer is not None:
            group.answered(member, step.answer)
        elif step.plan is not None:
            step.plan.turn = (group, member)
        return step

    def _turn_of(self, step: Step) -> tuple[TurnGroup, TurnMember] | None:
        plan: _Plan | None = step.plan
        return None if plan is None else plan.turn

    def _settling(self, step: Step) -> None:
        """The step is being settled: an opening its own outcome causes never cancels it."""
        turn = self._turn_of(step)
        if turn is not None:
            turn[1].settling = True

    def _told(self, step: Step, answer: Any, cancelled: BaseException | None = None) -> Any:
        """Note the answer the model reads in the turn's outcome; returns it."""
        turn = self._turn_of(step)
        if turn is not None:
            group, member = turn
            if cancelled is not None and member.outcome is None:
                member.outcome = BranchOutcome(member.name, "cancelled", type(cancelled).__name__)
            else:
                group.answered(member, answer)
        return answer

    def _cancelled(
        self, step: Step, group: TurnGroup, member: TurnMember, record: bool
    ) -> dict[str, Any]:
        """Settle a call the turn cancelled by policy; what the model reads.

        A write that may have started is an unknown outcome (journaled, reconciled, never
        replayed); one that never started certainly did not happen. The required
        dependency is down, so the run stops, as when a required tool is unavailable.
        """
        if step.settled:
            # Settled while its cancellation was on its way (the framework's own error
            # path): that settlement stands.
            if member.outcome is not None:
                return member.outcome.result  # type: ignore[no-any-return]
            assert member.need is not None
            return cancelled_result(step.tool, member.need.key)
        step._settle()
        plan: _Plan = step.plan
        if record and step.permit is not None:
            step.permit.record("ignored")
        opened = member.opened or member.need
        assert opened is not None
        dependency = opened.key
        why = member.cancelled_because or f"required dependency {dependency!r} opened"
        answer: dict[str, Any]
        if plan.spec.risk in WRITES and member.started:
            unknown = self._unknown(
                step, f"cancelled by policy while it ran ({why}): the write may have committed"
            )
            answer = cancelled_result(step.tool, dependency, unknown=unknown)
        else:
            self._finish(plan, "ignored")
            self._forget(plan)
            answer = cancelled_result(step.tool, dependency)
        if plan.action is not None:
            detail = f"{why}; a call of {plan.spec.name!r} that needs it was cancelled by policy"
            self._feed(
                RunEvent("dependency-down", self.clock(), plan.action, required=True, detail=detail)
            )
        group.answered(member, answer)
        return answer

    # -- execute, verify, record -------------------------------------------------------------

    def _succeeded(self, step: Step, result: Any) -> Any:
        plan: _Plan = step.plan
        spec = plan.spec
        if spec.risk in WRITES:
            verified: bool | None = None
            if spec.verify is not None:
                try:
                    verified = bool(spec.verify(result))
                except Exception as exc:  # noqa: BLE001 - a verifier that crashes proves nothing
                    hook_failed(f"the verify check of {spec.name} raised", exc)
                    verified = False
            if not protocol.proves(result, verified):
                return self._unknown(
                    step, "verification failed: the result does not prove the write happened"
                )
        self._finish(plan, "success", evidence=evidence_digest(result, self.rules))
        self._observe_retry(plan, result)
        if spec.breaker is not None:
            spec.breaker._retry_succeeded()  # a success refills the retry budget
            spec.breaker.for_scope().degradation.remember(spec.name, plan.args, result)
        if plan.key is not None:
            # The write happened; if the journal is down now, its idempotency key still
            # protects a retry at the provider.
            self._journal(plan, "proven", result=result)
        return result

    def _failed(self, step: Step, exc: Exception) -> Any:
        plan: _Plan = step.plan
        spec = plan.spec
        verdict = spec.breaker.verdict_of(exc) if spec.breaker is not None else _classify(exc)
        if spec.risk in WRITES and may_have_committed(exc, verdict):
            return self._unknown(step, f"{type(exc).__name__}: the write may have committed")
        self._finish(plan, "failure" if verdict.kind == "failure" else "ignored")
        self._forget(plan)
        inner = found_in_chain(exc, CircuitOpen)
        if inner is not None:
            # A breaker inside the tool (an httpx transport ...) rejected the call.
            return self._dependency_down(plan, inner.result_for(spec.name), inner.reason)
        opened = [b for b in plan.opened if b is not spec.breaker]
        if opened:
            # A breaker inside the tool opened on this very failure: say so now.
            result = opened[-1].failure_result(spec.name, exc)
            if result.get("tool_unavailable"):
                return self._dependency_down(plan, result, "opened")
        if spec.breaker is None:
            return error_result(spec.name, exc, retryable=verdict.kind == "failure")
        owner = step.permit.breaker if isinstance(step.permit, Permit) else spec.breaker
        result = owner.failure_result(spec.name, exc)
        self._observe_retry(plan, result)
        if result.get("tool_unavailable"):
            # This failure opened the dependency's breaker, or left the tool unavailable
            # for the run (a spent quota or retry budget, a rate limit too long to wait).
            return self._dependency_down(plan, result, str(result.get("reason", "opened")))
        return result

    def _dependency_down(
        self,
        plan: _Plan,
        result: dict[str, Any],
        reason: str,
        *,
        served: dict[str, Any] | None = None,
    ) -> Any:
        """A dependency is out: the model hears so, and the run machine decides the rest.

        The tool's sheet row may have a degradation chain: its mode is served here (or was,
        ``served``, on the event loop) and a write it queued or handed off is journaled so.
        Whether the run stops is the run machine's (the mode served, the reason, whether
        the tool is required: see :mod:`toolbreaker.core.run.machine`).
        """
        mode = None
        if served is not None:
            result, mode = served, served.get("degradation")
        elif plan.spec.breaker is not None and plan.spec.breaker.degradation.chain:
            result = self._degraded(plan, result)
            mode = result.get("degradation")
        if mode is not None:
            self._after_degraded(plan, result)
        self._finish(plan, "ignored")  # it was not made (a queued one is not made yet)
        if plan.action is None:
            return result
        if mode == "stop":
            detail = str(result.get("detail") or f"required tool {plan.spec.name!r} is unavailable")
        else:
            seconds = result.get("retry_after_seconds")
            detail = f"required tool {plan.spec.name!r} is unavailable ({reason})"
            if seconds is not None:
                detail += f"; retry after {seconds} s"
        decision = self._feed(
            RunEvent(
                "dependency-down",
                self.clock(),
                plan.action,
                required=plan.spec.required,
                reason=reason,
                mode=None if mode is None else str(mode),
                detail=detail,
            )
        )
        if decision.stop is None or mode is not None:
            return result  # a mode's answer says what the caller gets, the stop included
        return {**result, **stopped_result(decision.stop)}

    def _degraded(self, plan: _Plan, result: dict[str, Any]) -> dict[str, Any]:
        """The sheet row's degradation of ``result``; a queued write is journaled pending."""
        degradation, args, packet = self._degrade_call(plan)
        answer: dict[str, Any] = degradation.result(
            plan.spec.name, args, result, idempotency_key=plan.key, packet=packet, task=self.task
        )
        return answer

    async def _adegraded(self, plan: _Plan, result: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_degraded` with its store round trips off the event loop."""
        degradation, args, packet = self._degrade_call(plan)
        answer: dict[str, Any] = await degradation.aresult(
            plan.spec.name, args, result, idempotency_key=plan.key, packet=packet, task=self.task
        )
        return answer

    def _degrade_call(
        self, plan: _Plan
    ) -> tuple[Degradation, dict[str, Any], Callable[[str], StopPacket]]:
        """The row's degradation, the arguments queued work runs with, the packet maker."""
        spec = plan.spec
        assert spec.breaker is not None
        args = with_key(spec, plan.args, plan.key)  # the drained call carries the same key

        def packet(detail: str) -> StopPacket:
            if plan.key is None:
                action = (
                    f"once the dependency of {spec.name!r} recovers, carry out or drop the "
                    f"attempted action, then resume task {self.task!r}: confirmed steps are "
                    "skipped"
                )
            else:
                # The write is handed to the person (journaled so): a resumed run never
                # makes it unless they say it was not made.
                action = (
                    f"the attempted write {plan.key} is yours: once the dependency of "
                    f"{spec.name!r} recovers, carry it out and record it with "
                    f"RunGuard.resolve({plan.key!r}, committed=True), or drop it; to let "
                    f"the resumed run make it, record committed=False. Then resume task "
                    f"{self.task!r}: confirmed steps are skipped"
                )
            return dataclasses.replace(
                self.stop_packet(),
                condition="dependency-open",
                detail=detail,
                next_safe_action=action,
            )

        return spec.breaker.for_scope().degradation, args, packet

    def _after_degraded(self, plan: _Plan, answer: Mapping[str, Any]) -> None:
        """Journal what a degradation answer did with a write (the protocol's move).

        Queued: a drainer makes it, never this run. Maybe queued (the queue's store did
        not answer): it counts as uncertain. Handed off: a person owns it.
        """
        if plan.key is None:
            return
        maybe = answer.get("outcome_unknown") is True
        move = protocol.degraded_move(answer.get("degradation"), maybe=maybe)
        if move is None:
            return
        ids = {
            name: answer[name]
            for name in ("queue_id", "reconciliation_id")
            if isinstance(answer.get(name), str)
        }
        self._journal(plan, move, extra=ids)
        if protocol.uncertain(plan.status) and plan.action is not None:
            self._counted(plan.key)
            self._feed(
                RunEvent(
                    "uncertain",
                    self.clock(),
                    plan.action,
                    detail=f"it may be queued as {ids.get('queue_id')}",
                )
            )

    def _unknown(self, step: Step, why: str) -> dict[str, Any]:
        """An unknown write outcome: never replay, let the core block writes, reconcile."""
        plan: _Plan = step.plan
        if plan.begun and plan.key is not None:
            self._counted(plan.key)
        self._finish(plan, "unknown", detail=why)
        self._journal(plan, "maybe-made")
        return self._reconcile(plan, why=why)

    def _reconcile(self, plan: _Plan, *, why: str) -> dict[str, Any]:
        spec = plan.spec
        found: Any = None
        checked = False
        if spec.reconcile is not None and plan.key is not None:
            try:
                found = spec.reconcile(plan.key, plan.args)
                checked = True
            except Exception as exc:  # noqa: BLE001 - an unreachable status check proves nothing
                hook_failed(f"the reconcile check of {spec.name} raised", exc)
        if checked and found:
            if self._journal(plan, "found", result=found) and plan.key is not None:
                # The outcome is known now: it no longer counts as uncertain.
                self._settled(plan.key)
        elif checked:
            # Not found is not proof of absence (a lagging index): it stays unresolved
            # until an operator decides (RunGuard.resolve).
            self._journal(plan, "not-found")
        return unknown_result(
            spec.name,
            plan.key,
            why=why,
            found=found,
            checked=checked,
            writes_blocked=self._run.writes_blocked is not None,
        )

    def _finish(
        self,
        plan: _Plan,
        outcome: Literal["success", "failure", "unknown", "ignored"],
        *,
        evidence: str | None = None,
        detail: str = "",
    ) -> None:
        if plan.action is None or not plan.begun:
            return
        plan.begun = False
        self._feed(
            RunEvent(
                "outcome",
                self.clock(),
                plan.action,
                outcome=outcome,
                evidence=evidence,
                detail=detail,
            )
        )

    def _forget(self, plan: _Plan) -> None:
        """A write that certainly did not happen leaves no pending entry behind."""
        if plan.key is not None:
            self._journal(plan, "not-made")

    def _journal(
        self,
        plan: _Plan,
        move: protocol.Move,
        *,
        result: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> bool:
        """Journal the protocol's move of the write; whether the store confirmed it.

        A write the store may have made (its answer was lost) is believed made for the
        moves that follow (they overwrite it), but not confirmed: ``False``.
        """
        if plan.key is None:
            return False
        status = protocol.after(plan.status, move)
        entry = self._entry(plan, status, result, extra)
        try:
            self.journal.journal_put(self.task, plan.key, entry)
        except StoreWriteUnknown:
            plan.status = status
            return False
        except StoreUnavailable:
            return False
        plan.status = status
        return True

    def _counted(self, key: str) -> None:
        """The write under ``key`` counts as uncertain in this run from now on."""
        with self._lock:
            self._uncertain_keys.add(key)

    def _settled(self, key: str) -> None:
        """The write under ``key`` is known now: it stops counting (once, if it counted)."""
        with self._lock:
            counted = key in self._uncertain_keys
            self._uncertain_keys.discard(key)
        if counted:
            self._feed(RunEvent("resolved", self.clock(), count=1))

    def _entry(
        self,
        plan: _Plan,
        status: protocol.Status,
        result: Any,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        spec = plan.spec
        return entry_for(
            {
                "tool": spec.name,
                "risk": spec.risk,
                "fingerprint": plan.fingerprint,
                "idempotency_key": plan.key,
                "status": status,
                "at": self.clock(),
                **(extra or {}),
            },
            result,
            external_id=spec.external_id,
        )

    def _next_safe_action(self, stop: Stop | None, uncertain: tuple[Mapping[str, Any], ...]) -> str:
        if stop is None:
            return "continue the run"
        condition = stop.condition
        if condition == "uncertain-side-effect" or uncertain:
            return settle_first(self.task, uncertain)
        if condition == "dependency-open":
            return (
                f"wait for the dependency to recover ({stop.detail}), then resume task "
                f"{self.task!r}: the confirmed steps will not be repeated"
            )
        if condition in ("repeated-action", "loop"):
            return (
                "stop calling tools; summarise what is known and ask the user or an "
                "operator how to proceed (the plan is looping)"
            )
        if condition == "operator":
            return "wait for the operator's decision"
        return f"summarise progress; an operator may raise the budget and resume task {self.task!r}"


_NO_TURN: Final = object()


@dataclasses.dataclass(slots=True)
class _Plan:
    spec: GuardedTool
    fingerprint: str
    key: str | None
    args: dict[str, Any]
    action: Action | None = None
    #: The write's journal status as this guard knows it (the protocol's).
    status: protocol.Status | None = None
    begun: bool = False
    opened: list[Breaker] = dataclasses.field(default_factory=list)
    turn: tuple[TurnGroup, TurnMember] | None = None


def _answered(step: Step, answer: Any) -> Step:
    step.answer = answer
    step._settled = True
    return step


R = TypeVar("R")


def _classify(exc: BaseException) -> Verdict:
    try:
        return classify_exception(exc)
    except Exception:  # noqa: BLE001 - never raises by contract; fail closed anyway
        return Verdict("ambiguous", "classifier-error")


def evidence_digest(result: Any, rules: FingerprintRules | None = None) -> str:
    """What a result proves, as a digest (the core's ``fingerprint.evidence``).

    Results that differ only in volatile fields (a fresh ``request_id`` or ``timestamp``)
    are the same evidence, so an identical search repeated is caught as a repeat.
    """
    return evidence(result, rules)


def _not_callable(**_kwargs: Any) -> Any:
    raise PolicyError("this tool is run by its framework, not by RunGuard.call()")


# -- the idempotency argument: the guard's to fill in, never the model's ------------------


def key_argument(tool: GuardedTool) -> str | None:
    """The argument that carries a write's idempotency key, or ``None``.

    A read has none, nor a write described with ``idempotency_arg=None``. Its value is the
    run guard's: adapters hide it from the schema the model sees and hand the tool the
    guard's key (:func:`with_key`); a value the model sends anyway is dropped
    (:func:`without_key`).
    """
    return tool.idempotency_arg if tool.risk in WRITES and tool.idempotency_arg else None


def without_key(tool: GuardedTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` without a value the model gave for the key argument.

    Dropped before the action is fingerprinted: a made-up key would make the same write
    look like another one, with another idempotency key (a duplicate at the provider).
    """
    arg = key_argument(tool)
    if arg is None or arg not in args:
        return dict(args)
    return {k: v for k, v in args.items() if k != arg}


def with_key(tool: GuardedTool, args: Mapping[str, Any], key: str | None) -> dict[str, Any]:
    """``args`` carrying the guard's idempotency ``key`` in the key argument, if it has one."""
    arg = key_argument(tool)
    return {**args, arg: key} if arg is not None and key is not None else dict(args)
