"""Run guards: may this run continue? A shell around :mod:`toolbreaker.core._run.machine`.

A dependency breaker asks whether a remote is healthy enough to call; a :class:`RunGuard`
asks whether *this task* may take its next action. Every tool call of a run goes through
it: fingerprint the intended action, read the write's journal entry, let the run machine
decide (budgets, loops, repeats, the write breaker, journal deduplication, stops), journal
writes before they run, execute through the dependency's breaker, verify, and record.
The guard decides nothing itself: it feeds events to ``apply()`` and carries out the
verdict. ``toolbreaker check-run`` replays a recorded run through a guard
(:mod:`toolbreaker.runtime._run._recorded`), so the two cannot disagree.

Writes follow plan, authorize, execute, verify, record. An outcome that may have committed
is *unknown*, whatever the transport says (see :func:`may_have_committed`), and is never
replayed: the run's write breaker opens and a read-only reconcile check decides whether
the write happened. Resuming a task with the same id skips everything its journal
confirms, and refuses writes while an earlier write of the task is still unresolved.

Every journal write is a move of the write protocol (:mod:`toolbreaker.core._run.protocol`),
from the status the guard knows: the protocol says where it goes, what proves a write,
what a request, a resume and an operator's :meth:`RunGuard.resolve` do with each status,
and what counts as uncertain. A journal write whose answer was lost
(:class:`~toolbreaker.errors.StoreWriteUnknown`) is believed made and never confirmed.

The guard is a small class holding parts, each built with what it needs (no part
inherits another): the run's state and journal, the run machine's feed and the stop
packet (``_shell.RunShell``); the begin flow that carries out each call's plan
(``_begin.Begin``), the plan itself being the pure functions of ``_plan`` (a frozen
answer, reconcile or run); the settle flow that verifies, reconciles and journals a
call's outcome, and owns the guard's steps (``_settle.Settle``); a model turn's sibling
calls (``_turns.Turns``); the quiet path of ``call``, a plain read counted in place by
the run's cell (``_quiet.QuietCalls``). This module is the public surface. Every sync and async twin
(``begin``/``abegin``, ``call``/``acall``, the settle callbacks, ``run_step``/
``arun_step``) runs one flow through one driver
(:mod:`toolbreaker.runtime._flow`), so no rule is written twice for the two.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from toolbreaker.core._degrade import refuses_stale
from toolbreaker.core._run import protocol
from toolbreaker.core._run.budget import Budget, RiskClass, RunState, Stop
from toolbreaker.core._run.costs import amount_of, price_of, usage_cost
from toolbreaker.core._run.fingerprint import FingerprintRules
from toolbreaker.core._run.machine import RunEvent
from toolbreaker.core._run.redact import redact, redact_text
from toolbreaker.errors import AsyncCallError, PolicyError, StoreUnavailable
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._breaker._commit import may_have_committed
from toolbreaker.runtime._breaker._layers import warn_nested_retries
from toolbreaker.runtime._breaker._watch import BreakerWatch
from toolbreaker.runtime._clock import Clock, monotonic_ms, wall_ms
from toolbreaker.runtime._flow import Flow, adrive, drive
from toolbreaker.runtime._packet import StopPacket
from toolbreaker.runtime._result import over_budget_result
from toolbreaker.runtime._run._begin import Begin
from toolbreaker.runtime._run._driver import RunTool
from toolbreaker.runtime._run._journal import budget_extension, journaled
from toolbreaker.runtime._run._quiet import QuietCalls, quiet_tool
from toolbreaker.runtime._run._reserve import CostReservation
from toolbreaker.runtime._run._settle import Settle
from toolbreaker.runtime._run._shared import SharedRun
from toolbreaker.runtime._run._shell import RunShell
from toolbreaker.runtime._run._siblings import CancelledByPolicy, SiblingOutcome
from toolbreaker.runtime._run._tools import (
    ActionRequest,
    Authorizer,
    GuardedTool,
    GuardedToolOptions,
    GuardToolOptions,
    evidence_digest,
    guarded_tool,
    key_argument,
    may_write,
    not_callable,
    with_key,
    without_key,
)
from toolbreaker.runtime._run._turns import Turns
from toolbreaker.runtime._step import Step, StepObserver, ToolType
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.stores._protocol import Journal, Records

if TYPE_CHECKING:  # typing on Python 3.10 has no Unpack; the annotation stays a string
    from typing_extensions import Unpack

__all__ = [
    "ActionRequest",
    "Authorizer",
    "CostReservation",
    "GuardToolOptions",
    "GuardedTool",
    "GuardedToolOptions",
    "RunGuard",
    "StopPacket",
    "evidence_digest",
    "key_argument",
    "may_have_committed",
    "may_write",
    "with_key",
    "without_key",
]

R = TypeVar("R")


class RunGuard:
    """Budgets, loop detection and safe writes for one run of one task.

    Args:
        task: the task id; a resumed run uses the same id and skips confirmed work.
        budget: the run's limits.
        journal: where completed actions are journaled (a store); shared by resumed runs.
        clock: integer-millisecond clock; by default the monotonic clock, or the wall
            clock for a shared run (its processes must agree on the time).
        rules: fingerprint rules (volatile and prose fields).
        shared: share the run's counters, reservations and stops with every guard of
            ``task`` through the journal's store (a store with records: SQLite, Redis,
            PostgreSQL, or a MemoryStore within one process): one budget for a run
            spread over workers and processes, applied by compare-and-set. While the
            store cannot be reached no call is admitted (``budget-unavailable``); what
            was recorded waits and is written later, never lost. The run's budget is the
            one its first guard wrote (raised by :meth:`extend`); see
            ``docs/concurrency.md``.
    """

    def __init__(
        self,
        task: str,
        *,
        budget: Budget | None = None,
        journal: Journal | None = None,
        clock: Clock | None = None,
        rules: FingerprintRules | None = None,
        shared: bool = False,
    ) -> None:
        if not isinstance(task, str) or not task:
            raise PolicyError("a run guard needs a task id", field="task")
        store = journal if journal is not None else MemoryStore()
        budget = budget or Budget()
        run: SharedRun | None = None
        if shared:
            if not isinstance(store, Records):
                raise PolicyError(
                    f"a shared run keeps its budget in the journal's records; "
                    f"{type(store).__name__} has none",
                    field="shared",
                )
            clock = clock or wall_ms
            run = SharedRun(store, task, budget, clock)
        clock = clock or monotonic_ms
        rules = rules or FingerprintRules.default()
        # The parts, each built with what it needs: the run's state and journal, the
        # settle flow (the owner of the guard's steps), the begin flow, the turns.
        self._shell = RunShell(
            self, task=task, budget=budget, journal=store, clock=clock, rules=rules, shared=run
        )
        self._settle = Settle(self._shell)
        self._begin = Begin(self._shell, self._settle)
        self._turns = Turns(self._shell, self._settle)
        self._quiet = QuietCalls(self._shell, self._begin, self._settle, self._direct)
        #: Listeners of the run's ``toolbreaker.limit/v1`` notices (a ``deferred`` call):
        #: ``guard.notices.add_listener(fn)``.
        self.notices = self._shell.notices
        #: Who hears each tool call of the run (:meth:`add_step_observer`).
        self.step_observers = self._shell.step_observers
        # The observers of the tools' breakers, now and later (see watch_breakers).
        self._watch = BreakerWatch()
        self._watch_lock = threading.Lock()

    # -- the run, as its shell keeps it -----------------------------------------------------

    @property
    def task(self) -> str:
        """The run's task id."""
        return self._shell.task

    @property
    def budget(self) -> Budget:
        """The run's limits (a shared run's as its store holds them; raised by :meth:`extend`)."""
        return self._shell.budget

    @property
    def journal(self) -> Journal:
        """Where the run's writes are journaled."""
        return self._shell.journal

    @property
    def clock(self) -> Clock:
        """The run's integer-millisecond clock."""
        return self._shell.clock

    @property
    def rules(self) -> FingerprintRules:
        """The run's fingerprint rules."""
        return self._shell.rules

    @property
    def listener_errors(self) -> int:
        """Stop listener and step observer calls that raised (logged; decisions stood)."""
        return self._shell.listener_errors

    @property
    def stopped(self) -> Stop | None:
        """Why the run stopped, or ``None`` while it may continue."""
        return self._shell.stopped

    @property
    def writes_blocked(self) -> Stop | None:
        """Why writes are refused for now (writes with an unknown outcome), else ``None``."""
        return self._shell.writes_blocked

    @property
    def state(self) -> RunState:
        """The run's state: counters, the stop and the write breaker, as the core keeps it."""
        return self._shell.state

    @property
    def shared(self) -> SharedRun | None:
        """The run's side in its store when the run is shared (``shared=True``), else ``None``."""
        return self._shell.shared

    def stop_packet(self) -> StopPacket:
        """The operator packet for the run as it is now (a shared run: as its store holds it)."""
        return self._shell.stop_packet()

    async def astop_packet(self) -> StopPacket:
        """:meth:`stop_packet` for the event loop: a shared journal is read off it.

        What an async hook hands over once the run has stopped; a journal of this
        process is read inline, any other in a worker thread.
        """
        return await self._shell.astop_packet()

    # -- configuration ------------------------------------------------------------------

    def add_tool(self, tool: GuardedTool) -> GuardedTool:
        """Register a tool (checked as it was built: see :class:`GuardedTool`).

        ``risk`` is a class or a function of a call's arguments (each call's class); a
        tool whose calls may write never falls back to a stale answer.

        Raises:
            PolicyError: a write tool whose breaker's degrade chain would serve it a stale
                answer.
        """
        kind = "write" if may_write(tool) else "read"
        if tool.breaker is not None and refuses_stale(kind, tool.breaker.degradation.chain):
            raise PolicyError(
                f"write tool {tool.name!r} goes through {tool.breaker.key!r}, whose degrade "
                "chain has 'stale': a write never falls back to a stale answer",
                field=f"{tool.name}.breaker",
            )
        # The model re-issuing failed calls is a retry layer already; a client that also
        # retries inside the tool multiplies the attempts. Found here, reported with the fix.
        warn_nested_retries(tool.fn, tool.name, "the model (its re-calls are retries)")
        with self._watch_lock:
            breaker = tool.breaker
            if breaker is not None and breaker not in self.breakers():
                self._watch.tell(breaker)  # before the tool can be called: from its first call
            self._shell.tools[tool.name] = tool
            # Whether it is a coroutine function never changes: asked once, not per call.
            coroutine = inspect.iscoroutinefunction(tool.fn)
            if coroutine:
                self._shell.coroutines.add(tool.name)
            else:
                self._shell.coroutines.discard(tool.name)
            # A read with nothing of its own to ask before or after it runs (a breaker, a
            # risk function, a cost): its calls may take the quiet path (see call).
            quiet = quiet_tool(tool, coroutine=coroutine, shared=self._shell.shared is not None)
            if quiet is not None:
                self._shell.quiet_tools[tool.name] = quiet
            else:
                self._shell.quiet_tools.pop(tool.name, None)
        return tool

    def breakers(self) -> tuple[Breaker, ...]:
        """The breakers the run's tools go through, each once, in the order tools came."""
        found: dict[int, Breaker] = {}
        for spec in tuple(self._shell.tools.values()):
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

    def add_step_observer(self, observer: StepObserver) -> Callable[[], None]:
        """Tell ``observer`` of every tool call of this run; returns a remover.

        As :meth:`Breaker.add_step_observer`: ``observer(start)`` hears each call as the
        guard begins deciding it (:meth:`begin`, :meth:`call`), and the watch it returns
        is current while the guard works on the call (and while it runs the tool itself:
        :meth:`call`, :meth:`run_step`) and ended once. The observers of the tool's
        breaker hear the call too (each observer once). One that raises is counted in
        :attr:`listener_errors` and logged.
        """
        return self.step_observers.add(observer)

    def tool(
        self, name: str | None = None, **options: Unpack[GuardedToolOptions]
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`add_tool`; the decorated function becomes guarded.

        ``options`` are :class:`~toolbreaker.GuardedTool`'s fields
        (``GuardedToolOptions``); ``name`` defaults to the
        function's name.

        Raises:
            PolicyError: an option that is no tool option (named), or the tool is refused
                (see :meth:`add_tool`).
        """

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            spec = self.add_tool(guarded_tool(name or fn.__name__, fn, options))
            guarded: Callable[..., Any]
            if inspect.iscoroutinefunction(fn):

                async def guarded_async(**kwargs: Any) -> Any:
                    return await self.acall(spec.name, kwargs)

                guarded = guarded_async
            else:

                def guarded_sync(**kwargs: Any) -> Any:
                    return self.call(spec.name, kwargs)

                guarded = guarded_sync
            guarded.__name__ = spec.name
            guarded.__doc__ = fn.__doc__
            return guarded

        return decorate

    def ensure_tool(self, name: str, **options: Unpack[GuardedToolOptions]) -> GuardedTool:
        """The registered tool ``name``, registering it with ``options`` if unknown.

        Adapters use this for tools the user did not declare: they are reads unless the
        options (or the framework's annotations) say otherwise.

        Raises:
            PolicyError: an option that is no tool option (named), or the tool is refused
                (see :meth:`add_tool`).
        """
        spec = self._shell.tools.get(name)
        if spec is None:
            spec = self.add_tool(guarded_tool(name, not_callable, options))
        return spec

    # -- operators --------------------------------------------------------------------------

    def stop(self, detail: str = "stopped by an operator") -> StopPacket:
        """Stop the run by hand (condition ``operator``) and return the packet."""
        self._shell.feed(RunEvent("stop", self.clock(), detail=detail))
        return self.stop_packet()

    def extend(
        self,
        *,
        by: str,
        why: str,
        max_cost: Decimal | str | int | None = None,
        max_tool_calls: int | None = None,
        deadline_ms: int | None = None,
        max_recovery_calls: int | None = None,
    ) -> StopPacket:
        """Raise the run's budget and resume a run it stopped; returns the packet.

        An operator's act, recorded first in the journal (who, why, the limits before and
        after, masked), under ``budget-extension:N``. A run stopped by time, money or
        counts goes on (its packet's history shows the stop, then ``extended``); a stop
        of another kind (a loop, an unknown write, an operator's) stays. Confirmed writes
        are still answered from the journal, never repeated.

        Raises:
            PolicyError: no limit given, an empty ``by`` or ``why``, or a limit that
                would be lowered (see :meth:`Budget.raised`).
            StoreWriteUnknown: the journal's answer was lost: the record may be written
                or not, and the budget is unchanged; call again.
            StoreUnavailable: the journal cannot be written; nothing changed.
        """
        fields = {
            name: value
            for name, value in (
                ("max_cost", max_cost),
                ("max_tool_calls", max_tool_calls),
                ("deadline_ms", deadline_ms),
                ("max_recovery_calls", max_recovery_calls),
            )
            if value is not None
        }
        if not fields:
            raise PolicyError("extend needs a limit to raise", field="max_cost")
        if self._shell.shared is not None:  # raise the run's budget, as its store holds it
            self._shell.view(self._shell.shared.flush())
        for name, text in (("by", by), ("why", why)):
            if not isinstance(text, str) or not text.strip():
                raise PolicyError(f"extend needs {name!r}: who raised it and why", field=name)
        budget = self.budget.raised(**fields)
        before, after = self.budget.to_dict(), budget.to_dict()
        changed = {name: {"from": before[name], "to": after[name]} for name in fields}
        stopped = self._shell.stopped
        record = budget_extension(
            by=by,
            why=why,
            changed=changed,
            stopped=None if stopped is None else stopped.condition,
            at=self.clock(),
        )
        n = 1
        while not self.journal.journal_put(
            self.task, f"budget-extension:{n}", record, only_new=True
        ):
            n += 1
        limits = ", ".join(f"{k} {v['from']} -> {v['to']}" for k, v in changed.items())
        detail = redact_text(f"{by}: {why} ({limits})")
        decision = self._shell.feed(RunEvent("extend", self.clock(), detail=detail), raised=fields)
        if decision.stop is not None and decision.stop.condition == "budget-unavailable":
            raise StoreUnavailable(decision.stop.detail)
        return self.stop_packet()

    def add_cost(self, amount: Decimal | str | int, *, risk: RiskClass | None = None) -> None:
        """Report a cost: of a model step, or of a tool call while (or once) it runs.

        A model step's cost counts toward ``max_cost`` only; a tool call's is reported with
        its tool's ``risk`` class, so it counts against the class's ``max_cost`` too. A
        call the guard refused (or answered from the journal) did not run and spends
        nothing: report a call's cost from the call, never for a step that carried an
        answer. ``toolbreaker check-run`` spends a recorded step's cost the same way.

        A cost reported here counts once it is reported, so calls begun at once can all
        spend before it counts; a tool that declares its ``cost`` (and a model step held
        with :meth:`reserve`) is reserved before it runs instead.
        """
        self._shell.feed(RunEvent("cost", self.clock(), cost=amount_of(amount), risk=risk))

    def reserve(self, amount: Decimal | str | int) -> CostReservation:
        """Hold a model step's cost before its request is sent; settle it after.

        ``amount`` is the step's most: its maximum output tokens times the price
        (:func:`~toolbreaker.core._run.costs.token_cost`). Held against ``max_cost``
        with every call's reservation, so steps and calls begun at once cannot spend
        past it. When the budget cannot cover it the reservation is refused: its
        ``admitted`` is false and its ``answer`` says so; do not send the request.
        Settle an admitted one with the actual cost (``reservation.settle(actual)``);
        one never settled is spent at ``amount`` when its lease ends
        (``Budget.reservation_lease_ms``).

        Raises:
            RunStateError: ``amount`` is no amount (a float, a negative number ...).
        """
        held = amount_of(amount, "reserve")
        decision = self._shell.feed(RunEvent("reserve", self.clock(), reserve=held))
        if decision.verdict == "over-budget":
            assert decision.stop is not None
            assert decision.left is not None
            answer = over_budget_result(None, decision.stop, left=decision.left)
            return CostReservation(held, 0, self._settle_reservation, answer)
        return CostReservation(held, decision.reservation, self._settle_reservation)

    def reserve_model(
        self, model: str, *, max_output_tokens: int, input_tokens: int = 0
    ) -> CostReservation:
        """Hold a model request's most before it is sent: its tokens at the model's price.

        ``max_output_tokens`` (the request's limit) and ``input_tokens`` (its prompt, when
        known) are priced by the budget's ``prices``; a model it does not price holds
        nothing (its usage then tells). Settle it with the response's usage:
        ``add_usage(model, ..., reservation=held)``. Refused like :meth:`reserve`.
        """
        price = price_of(self.budget, model)
        amount = 0 if price is None else usage_cost(price, input_tokens, max_output_tokens)
        return self.reserve(amount)

    def add_usage(
        self,
        model: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        reservation: CostReservation | None = None,
    ) -> None:
        """Count a model response's usage: its tokens, priced by the budget's ``prices``.

        Every adapter calls this with the framework's own usage object (the model's name,
        input and output tokens), so ``max_cost`` covers the model beside the tools; the
        stop packet's counters show ``model_cost`` and each model's ``usage``. Without a
        price table the tokens are counted and cost nothing; with one, a model it does
        not price stops a run that has a ``max_cost`` (the cost would be unknown).
        ``reservation`` (from :meth:`reserve_model` or :meth:`reserve`) is settled with
        the priced cost instead of its amount.

        Raises:
            RunStateError: a token count that is not a non-negative integer.
        """
        hold = 0 if reservation is None else reservation.claim()
        self._shell.feed(
            RunEvent(
                "usage",
                self.clock(),
                model=model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                reservation=hold,
                reserve=reservation.amount if hold and reservation is not None else None,
            )
        )

    def _settle_reservation(self, hold: int, amount: Decimal, actual: Decimal | None) -> None:
        self._shell.feed(
            RunEvent("settle", self.clock(), cost=actual, reserve=amount, reservation=hold)
        )

    def resolve(self, idempotency_key: str, *, committed: bool, result: Any = None) -> None:
        """An operator's word on a write whose outcome was unknown.

        ``committed=True`` journals it as confirmed (a resumed run answers it from the
        journal); ``False`` as failed (it may be made again). Either way the write stops
        counting as uncertain, so writes may run again once few enough remain. The write
        protocol (:mod:`toolbreaker.core._run.protocol`) refuses ``committed=False`` for a
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
        self._shell.settled_key(idempotency_key)

    def add_stop_listener(
        self, listener: Callable[[StopPacket, RunGuard], None]
    ) -> Callable[[], None]:
        """Call ``listener(packet, guard)`` when the run stops or blocks writes; returns a remover.

        The packet is the masked :meth:`stop_packet` at that moment. A listener only
        watches: one that raises is counted in :attr:`listener_errors` and logged, and
        the run's decision stands.
        """
        self._shell.stop_listeners.append(listener)
        return lambda: self._shell.stop_listeners.remove(listener)

    # -- model turns: their sibling calls ---------------------------------------------------

    def mark_turn(self, turn: object = None) -> None:
        """A model turn begins: the per-turn call count starts again.

        Adapters call it where the framework starts a model turn. ``turn`` identifies the
        turn (a step number, a request count): calls with the same value mark it once, so
        every tool call of a turn may mark it; ``None`` always starts a new turn. Without
        ``Budget.max_calls_per_turn`` nothing is counted.
        """
        self._turns.mark_turn(turn)

    def turn_outcome(self) -> SiblingOutcome | None:
        """The calls of the current (or last) model turn and how each ended.

        ``None`` before the first :meth:`mark_turn`. Each call is ``completed``,
        ``degraded`` (a tool-unavailable, deferred or degraded answer), ``failed`` or
        ``cancelled`` (by policy: a required dependency it needs opened while it ran, or
        the run had stopped before it started), with the reason; ``to_result()`` is the
        bounded partial outcome a model or caller reads.
        """
        return self._turns.turn_outcome()

    def run_step(self, step: Step, fn: Callable[[], R]) -> R | CancelledByPolicy:
        """Run a begun step's tool, ``fn()``, as one call of the current model turn.

        Adapters call it where the framework runs a model response's tool calls in
        parallel. When a required dependency this call needs opens while it runs, the
        call is cancelled by policy: abandoned in its worker thread (its result
        discarded), never started if it had not. An abandoned call still counts until it
        returns: it keeps its bulkhead slot (and its store lease, renewed) and its
        worker, as a call past its deadline does. The step is then settled and
        ``CancelledByPolicy`` carries what the model reads (a
        write that may have started is an unknown outcome: journaled, reconciled, never
        replayed) and the run stops, as for any required dependency going down.
        Otherwise ``fn()``'s result (or exception) is returned as is: settle the step
        with it. Independent calls, and calls outside a turn, run as they are.
        """
        return self._turns.run_step(step, fn)

    async def arun_step(self, step: Step, fn: Callable[[], Awaitable[R]]) -> R | CancelledByPolicy:
        """:meth:`run_step` on the event loop: the task running the tool is cancelled.

        A call that needs a required dependency runs in a task of its own; a cancellation
        by policy cancels that task and awaits it, so nothing outlives the call, and the
        framework's own task gets an ordinary answer. A cancelled caller cancels it too.
        """
        return await self._turns.arun_step(step, fn)

    # -- running tools: each sync and async twin runs one flow ------------------------------

    def call(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        """Run one tool call of this run; returns the tool's result or a result dict.

        Never raises for tool failures: a rejected, failed, unknown or stopped call
        returns a JSON-ready dict the model can act on.

        Raises:
            AsyncCallError: the tool is a coroutine function (use :meth:`acall`; nothing
                is counted), or its function returned an awaitable (never run: settled as
                not counted, a write as not sent).
        """
        shell = self._shell
        quiet = shell.quiet_tools.get(tool)  # no coroutine, no breaker: see add_tool
        if (
            quiet is not None
            and shell.group is None
            and not shell.step_observers
            and self._begin.resumed
        ):
            return self._quiet.call(quiet, dict(args or {}))
        if tool in shell.coroutines:
            raise AsyncCallError(
                f"RunGuard.call({tool!r}) of a coroutine tool: it would never run, and "
                f"nothing was counted for it. Use await guard.acall({tool!r}, args)"
            )
        spec = shell.tools.get(tool)
        if (
            spec is not None
            and spec.breaker is None
            and shell.group is None
            and not shell.step_observers
        ):
            return self._direct(spec, dict(args or {}))
        return drive(self._calling(tool, dict(args or {})))

    async def acall(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        """The async twin of :meth:`call` for coroutine tools."""
        return await adrive(self._calling(tool, dict(args or {})))

    def begin(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Step:
        """Decide one call; the :class:`~toolbreaker.runtime.Step` says what to do.

        If ``step.answer`` is set, do not run the tool: hand the answer to the model.
        Otherwise run it with ``step.args`` (a write's idempotency key is injected there)
        within ``step.deadline`` seconds, and settle the step with ``succeeded(result)``
        or ``failed(exc)``, whose return value is what the model should see. The tool's
        dependency breaker is asked here and told there. ``call_id`` is the framework's
        id of this tool call, ``tool_type`` the kind of tool
        (:data:`~toolbreaker.runtime.ToolType`) and ``description`` its description, for
        the step observers (a span's ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` and
        ``gen_ai.tool.description``).

        Raises:
            PolicyError: ``tool_type`` is none of ``TOOL_TYPES``.
        """
        step: Step = drive(
            self._begin.begin(tool, dict(args or {}), call_id, tool_type, description)
        )
        return step

    async def abegin(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Step:
        """:meth:`begin` for the event loop: store round trips never block it.

        The breaker's round trip is awaited; the journal's (and a degradation's store's)
        run in a worker thread when the journal is a shared store.
        """
        step: Step = await adrive(
            self._begin.begin(tool, dict(args or {}), call_id, tool_type, description)
        )
        return step

    def _direct(
        self, spec: GuardedTool, args: dict[str, Any], known: tuple[str, int] | None = None
    ) -> Any:
        """:meth:`_calling` without its driver, for a call that needs no effect of its own.

        A tool with no dependency breaker, outside a model turn, that no step observer
        watches: nothing it does can wait on the event loop, so the same parts run in the
        same order as plain calls (the plan and a write's pending entry:
        :meth:`Begin.direct`; the tool in the step's block; the settle), without the
        flow's generators and effects, which cost a sixth of such a call. A failure is
        settled by the one settle flow (:meth:`Settle.settle_failure`), driven here.
        ``tests/runtime/run/test_direct_call.py`` holds it to :meth:`_calling`.
        """
        step = self._begin.direct(spec.name, args, known)
        if step.answer is not None:
            return step.answer
        failure: BaseException | None = None
        try:
            with step.current():  # the tool runs inside the step's block, as _calling's
                try:
                    result = RunTool(None, step, spec.fn).run()
                except Exception as exc:
                    failure = exc
                    step.claim()
                    answer = drive(self._settle.settle_failure(step, exc))
                    if isinstance(exc, AsyncCallError):
                        raise  # settled as not counted; the program's mistake, not a result
                    return answer
                step.claim()
                # settle_success without a permit, outside a turn: the settle itself.
                return self._settle.succeeded(step, result)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            step.end(failure)

    def _calling(self, tool: str, args: dict[str, Any]) -> Flow[Any]:
        """One tool call, begun, run and settled (``call`` and ``acall``)."""
        step = yield from self._begin.begin(tool, args)
        if step.answer is not None:
            return step.answer
        spec = self._shell.tools[step.tool]
        failure: BaseException | None = None
        try:
            with step.current():  # the tool runs inside the step observers' watches
                try:
                    result = yield RunTool(spec.breaker, step, spec.fn)
                except Exception as exc:
                    failure = exc
                    step.claim()
                    answer = yield from self._settle.settle_failure(step, exc)
                    if isinstance(exc, AsyncCallError):
                        raise  # settled as not counted; the program's mistake, not a result
                    return answer
                step.claim()
                return (yield from self._settle.settle_success(step, result))
        except BaseException as exc:
            failure = exc
            raise
        finally:
            step.end(failure)
