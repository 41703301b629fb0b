"""What every part of a run guard shares: its state, the run machine's feed, the journal.

:class:`RunShell` is the part of a run guard (:class:`~toolbreaker.RunGuard`) the others
are built with: the state a guard keeps, feeding the run machine
(:mod:`toolbreaker.core._run.machine`) and telling stop listeners, journaling a write by
the write protocol's moves (:mod:`toolbreaker.core._run.protocol`), the stop packet, and a
call's membership of its model turn. The other parts carry out a call's plan
(``_begin.Begin``), settle, verify and reconcile it (``_settle.Settle``), and run a model
turn's calls (``_turns.Turns``); each holds this one, none inherits it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final

from toolbreaker.core._run import protocol
from toolbreaker.core._run._values import ZERO
from toolbreaker.core._run.budget import Action, Budget, RiskClass, RunState, Stop
from toolbreaker.core._run.cell import RunCell
from toolbreaker.core._run.fingerprint import FingerprintRules
from toolbreaker.core._run.machine import ANSWERED, RunDecision, RunEvent
from toolbreaker.core._run.retrying import ModelRetries
from toolbreaker.core._run.state import RUNNING, Outcome
from toolbreaker.errors import StoreUnavailable, StoreWriteUnknown
from toolbreaker.runtime._breaker._breaker import Breaker, Permit
from toolbreaker.runtime._breaker._degrade import Notices
from toolbreaker.runtime._clock import Clock
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._packet import StopPacket
from toolbreaker.runtime._run._driver import Blocking
from toolbreaker.runtime._run._journal import entry_for, packet_steps, settle_first
from toolbreaker.runtime._run._shared import SharedRun, later, on_loop
from toolbreaker.runtime._run._siblings import BranchOutcome, TurnGroup, TurnMember
from toolbreaker.runtime._run._tools import GuardedTool
from toolbreaker.runtime._step import Step, StepObservers
from toolbreaker.stores._protocol import Journal

__all__ = ["NO_TURN", "CallRecord", "QuietTool", "RunShell", "call_of", "record_of"]

#: No model turn marked yet.
NO_TURN: Final = object()
#: What a Blocking effect lists as a "store" when it may run a user's function, which
#: may wait on I/O like a shared store's round trip (never a MemoryStore: never inline).
_CALLBACKS: Final = object()


@dataclasses.dataclass(slots=True)
class CallRecord:
    """The guard's mutable record of one call, from its request to its outcome.

    What the call's frozen plan (:mod:`._plan`) does not hold: the journal status as it
    moves, the run machine's step and reservation, the turn it belongs to. A step holds
    it as its ``plan``; the begin and settle flows update it.

    Attributes:
        spec: the tool.
        fingerprint: the action's semantic fingerprint.
        key: a write's idempotency key, else ``None``.
        args: the call's arguments (without a key the model made up).
        action: the action as the run machine sees it (once the request was fed).
        status: the write's journal status as this guard knows it (the protocol's).
        step: the run machine's number for this step (the events about its outcome name it).
        begun: the run machine counted it as running and has not heard its outcome.
        opened: breakers that opened while it ran (a breaker inside the tool).
        turn: its model turn's group and its place in it.
        reserve: the cost its tool declared (held before it runs), else ``None``.
        reservation: the run machine's reservation for it while held, else 0.
        risk: the call's risk class (the tool's, or its risk function's answer).
    """

    spec: GuardedTool
    fingerprint: str
    key: str | None
    args: dict[str, Any]
    action: Action | None = None
    status: protocol.Status | None = None
    step: int = 0
    begun: bool = False
    opened: list[Breaker] = dataclasses.field(default_factory=list)
    turn: tuple[TurnGroup, TurnMember] | None = None
    reserve: Decimal | None = None
    reservation: int = 0
    risk: RiskClass = "read"


@dataclasses.dataclass(frozen=True, slots=True)
class QuietTool:
    """A tool whose calls ``RunGuard.call`` may count in place (its quiet path).

    A read of a fixed class, with no dependency breaker and no declared cost, not a
    coroutine function, of a run that is not shared (``RunGuard.add_tool``).

    Attributes:
        spec: the tool.
        action: its calls' action as the run machine sees it, checked once; each call's
            is this one with the call's fingerprint (``action_for``).
    """

    spec: GuardedTool
    action: Action


def call_of(step: Step) -> CallRecord | None:
    """The run guard's record of ``step``'s call, ``None`` for a call refused unread."""
    plan = step.plan
    return plan if isinstance(plan, CallRecord) else None


def record_of(step: Step) -> CallRecord:
    """The run guard's record of a begun ``step``'s call (one that ran has one)."""
    plan = step.plan
    assert isinstance(plan, CallRecord), step
    return plan


class RunShell:
    """The run's state and what every part of a run guard shares (see the module).

    A part held by :class:`~toolbreaker.RunGuard`, given to each of its other parts
    (:class:`~toolbreaker.runtime._run._settle.Settle`,
    :class:`~toolbreaker.runtime._run._begin.Begin`,
    :class:`~toolbreaker.runtime._run._turns.Turns`) at their construction.

    Args:
        guard: the run guard it is part of (what a stop listener is told).
        task: the run's task id.
        budget: the run's limits.
        journal: where the run's writes are journaled.
        clock: the run's integer-millisecond clock.
        rules: the fingerprint rules.
        shared: the run's side in its store when the run is shared, else ``None``.
    """

    def __init__(
        self,
        guard: object,
        *,
        task: str,
        budget: Budget,
        journal: Journal,
        clock: Clock,
        rules: FingerprintRules,
        shared: SharedRun | None = None,
    ) -> None:
        self.guard = guard
        self.shared = shared
        self.task = task
        self.journal = journal
        self.clock = clock
        self.rules = rules
        self.tools: dict[str, GuardedTool] = {}
        #: The tools whose calls ``RunGuard.call`` may count in place (its quiet path).
        self.quiet_tools: dict[str, QuietTool] = {}
        #: The names of the tools that are coroutine functions (``RunGuard.add_tool``).
        self.coroutines: set[str] = set()
        self.lock = threading.Lock()
        #: The run's state and budget: events fed to the run machine, quiet calls counted
        #: in place (:class:`~toolbreaker.core._run.cell.RunCell`); under :attr:`lock`.
        self.cell = RunCell(RunState.start(task, clock()), budget)
        self.retries = ModelRetries()
        #: The last call the run attempted, as its stop packet shows it.
        self.attempted: dict[str, Any] | None = None
        # The keys of the writes counted as uncertain in this run: an operator's word
        # lifts the count once per key, whatever the journal said.
        self.uncertain_keys: set[str] = set()
        self.stop_listeners: list[Callable[[StopPacket, Any], None]] = []
        self.turn: object = NO_TURN
        self.group: TurnGroup | None = None
        #: Stop listener and step observer calls that raised (logged; decisions stood).
        self.listener_errors = 0
        #: Listeners of the run's ``toolbreaker.limit/v1`` notices (a ``deferred`` call).
        self.notices = Notices()
        #: Who hears each tool call of the run (``RunGuard.add_step_observer``).
        self.step_observers = StepObservers()

    # -- inspection -----------------------------------------------------------------------

    @property
    def state(self) -> RunState:
        """The run's state, as the run machine made it (a shared run: as last seen)."""
        with self.lock:
            return self.cell.state

    @property
    def budget(self) -> Budget:
        """The run's limits (a shared run's as its store holds them)."""
        return self.cell.budget

    @property
    def steps(self) -> int:
        """The tool requests the run was asked about (the state's ``steps``)."""
        return self.cell.steps

    @property
    def stopped(self) -> Stop | None:
        """Why the run stopped, or ``None`` while it may continue."""
        return self.cell.stopped

    @property
    def writes_blocked(self) -> Stop | None:
        """Why writes are refused for now (writes with an unknown outcome), else ``None``."""
        return self.cell.writes_blocked

    def stop_packet(self) -> StopPacket:
        """The operator packet for the run as it is now (a shared run: as its store holds it)."""
        if self.shared is not None:
            self.view(self.shared.flush())
        run = self.state  # one state: the stop, counters and history agree
        stop = run.stopped or run.writes_blocked
        try:
            entries = self.journal.journal_entries(self.task)
        except StoreUnavailable:
            entries = [{"status": "journal-unavailable"}]
        confirmed, uncertain = packet_steps(entries)
        return StopPacket(
            task=self.task,
            condition=stop.condition if stop else RUNNING,
            detail=stop.detail if stop else "the run has not stopped",
            confirmed=confirmed,
            uncertain=uncertain,
            attempted=self.attempted,
            counters=run.counters(),
            next_safe_action=self._next_safe_action(stop, uncertain),
            history=tuple(fired.to_dict() for fired in run.conditions),
        )

    async def astop_packet(self) -> StopPacket:
        """:meth:`stop_packet` for the event loop: a shared journal is read off it.

        What an async hook hands over once the run has stopped; a journal of this
        process is read inline, any other in a worker thread.
        """
        packet: StopPacket = await self.blocking(None, self.stop_packet).arun()
        return packet

    # -- the run machine -------------------------------------------------------------------

    def feed(self, event: RunEvent, *, raised: Mapping[str, Any] | None = None) -> RunDecision:
        """Feed the run machine; ``raised``: an ``extend``'s limits to raise the budget to."""
        cell = self.cell
        # What the stop listeners compare with, read only when there are any (every event).
        listening = bool(self.stop_listeners)
        was = (cell.stopped, cell.writes_blocked) if listening else (None, None)
        shared = self.shared
        if shared is None:
            with self.lock:
                if raised is not None:
                    cell.reset(cell.state, cell.budget.raised(**raised))
                decision = cell.feed(event)
            if listening:
                self._stop_changed(was)
            return decision
        if event.type not in ANSWERED and on_loop():
            # A fact on the event loop: recorded in this guard's view now, written to the
            # store from a worker thread (a round trip never blocks the loop).
            decision = self._local(event)
            shared.post(event)
            later(self._write_shared)
        else:
            written = shared.feed(event, raised=raised)
            if written is None:
                decision = shared.refused(event) if event.type in ANSWERED else self._local(event)
            else:
                state, budget, decision = written
                self.view((state, budget))
        if listening:
            self._stop_changed(was)
        return decision

    def _stop_changed(self, before: tuple[Stop | None, Stop | None]) -> None:
        """Tell the stop listeners when the run stopped or blocked writes since ``before``."""
        after = (self.cell.stopped, self.cell.writes_blocked)
        if after != before and any(after):
            self._notify_stop()

    def _local(self, event: RunEvent) -> RunDecision:
        """``event`` applied to this guard's view alone (the store will hear it later)."""
        with self.lock:
            return self.cell.feed(event)

    def view(self, found: tuple[RunState, Budget] | None) -> None:
        """This guard's view of a shared run, as its store holds it (``None``: unreachable)."""
        if found is not None:
            with self.lock:
                self.cell.reset(*found)

    def _write_shared(self) -> None:
        assert self.shared is not None
        before = (self.cell.stopped, self.cell.writes_blocked)
        self.view(self.shared.flush())
        after = (self.cell.stopped, self.cell.writes_blocked)
        if self.stop_listeners and after != before and any(after):
            self._notify_stop()

    def _notify_stop(self) -> None:
        packet = self.stop_packet()
        for listener in tuple(self.stop_listeners):
            try:
                listener(packet, self.guard)
            except Exception as exc:  # noqa: BLE001 - a listener never changes a decision
                self.listener_errors += 1
                hook_failed(f"stop listener {listener!r} failed; the run's decision stands", exc)

    def finish(
        self,
        plan: CallRecord,
        outcome: Outcome,
        *,
        evidence: str | None = None,
        detail: str = "",
        cost: Decimal | None = None,
        error: str | None = None,
        spent: bool = True,
        at: int | None = None,
    ) -> None:
        """Tell the run machine how a begun call ended.

        A call that held a reservation settles it: ``cost`` is its actual cost (``None``:
        what was held is spent); ``spent=False`` says it never ran (nothing spent).
        ``error``: the classifier's class of a failure (for ``max_tool_failures``).
        ``at``: when it ended, if the clock was read already.
        """
        if plan.action is None or not plan.begun:
            return
        plan.begun = False
        held = plan.reservation
        plan.reservation = 0
        self.feed(
            RunEvent(
                "outcome",
                self.clock() if at is None else at,
                plan.action,
                outcome=outcome,
                evidence=evidence,
                detail=detail,
                step=plan.step,
                cost=(ZERO if not spent else cost) if held else None,
                reserve=plan.reserve if held else None,
                reservation=held,
                error=error,
            )
        )

    # -- the journal, by the write protocol's moves ------------------------------------------

    def forget(self, plan: CallRecord) -> None:
        """A write that certainly did not happen leaves no pending entry behind."""
        if plan.key is not None:
            self.move(plan, "not-made")

    def move(
        self,
        plan: CallRecord,
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

    def counted(self, key: str) -> None:
        """The write under ``key`` counts as uncertain in this run from now on."""
        with self.lock:
            self.uncertain_keys.add(key)

    def settled_key(self, key: str) -> None:
        """The write under ``key`` is known now: it stops counting (once, if it counted)."""
        with self.lock:
            counted = key in self.uncertain_keys
            self.uncertain_keys.discard(key)
        if counted:
            self.feed(RunEvent("resolved", self.clock(), count=1))

    def _entry(
        self,
        plan: CallRecord,
        status: protocol.Status,
        result: Any,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        spec = plan.spec
        return entry_for(
            {
                "tool": spec.name,
                "risk": plan.risk,
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

    # -- the model turn's sibling group ----------------------------------------------------

    def required_breakers(self) -> tuple[Breaker, ...]:
        found: dict[int, Breaker] = {}
        for spec in tuple(self.tools.values()):
            if spec.required and spec.breaker is not None:
                found.setdefault(id(spec.breaker), spec.breaker)
        return tuple(found.values())

    def joined(self, step: Step) -> Step:
        """A step begun within a model turn joins the turn's group (answered ones too)."""
        group = self.group
        if group is None:
            return step
        group.required = self.required_breakers()
        breaker = step.permit.breaker if isinstance(step.permit, Permit) else None
        member = group.join(step.tool, None if step.answer is not None else breaker)
        if step.answer is not None:
            group.answered(member, step.answer)
        elif (call := call_of(step)) is not None:
            call.turn = (group, member)
        return step

    def turn_of(self, step: Step) -> tuple[TurnGroup, TurnMember] | None:
        plan = call_of(step)
        return None if plan is None else plan.turn

    def settling(self, step: Step) -> None:
        """The step is being settled: an opening its own outcome causes never cancels it."""
        turn = self.turn_of(step)
        if turn is not None:
            turn[1].settling = True

    def told(self, step: Step, answer: Any, cancelled: BaseException | None = None) -> Any:
        """Note the answer the model reads in the turn's outcome; returns it."""
        turn = self.turn_of(step)
        if turn is not None:
            group, member = turn
            if cancelled is not None and member.outcome is None:
                member.outcome = BranchOutcome(member.name, "cancelled", type(cancelled).__name__)
            else:
                group.answered(member, answer)
        return answer

    # -- effects ---------------------------------------------------------------------------

    def blocking(
        self,
        step: Step | CallRecord | None,
        fn: Callable[..., Any],
        /,
        *args: Any,
        tool: str | None = None,
    ) -> Blocking:
        """``fn(*args)`` as an effect (:class:`~toolbreaker.runtime._run._driver.Blocking`).

        Inline on the event loop only when nothing it may run can wait: the journal and
        the store of the step's breaker (or ``tool``'s) live in this process, the tool has
        no check of its own (``authorize``, ``verify``, ``reconcile``: plain functions
        that may ask a service) and no stop listener is registered (one may send an
        alert). In a worker thread otherwise.
        """
        return _ShellWork(self, fn, args, step, tool)


class _ShellWork(Blocking):
    """A :class:`Blocking` effect of the shell's: what it may touch is worked out lazily.

    The sync twins only ever call it (:meth:`run`); only the async twins ask
    :meth:`where` (see :meth:`RunShell.blocking`), so a sync call builds no list.
    """

    __slots__ = ("shell", "step", "tool")

    def __init__(
        self,
        shell: RunShell,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        step: Step | CallRecord | None,
        tool: str | None,
    ) -> None:
        self.fn = fn
        self.args = args
        self.shell = shell
        self.step = step
        self.tool = tool

    def where(self) -> list[object]:
        """The journal, the store of the step's breaker, and any callback that may wait."""
        shell, step, tool = self.shell, self.step, self.tool
        spec = shell.tools.get(tool) if tool is not None else None
        call = call_of(step) if isinstance(step, Step) else step
        if call is not None:
            spec = call.spec
        stores: list[object] = [shell.journal]
        if spec is not None and spec.breaker is not None:
            stores.append(spec.breaker.store)
        if shell.stop_listeners or (spec is not None and _has_checks(spec)):
            stores.append(_CALLBACKS)
        return stores


def _has_checks(spec: GuardedTool) -> bool:
    """Whether the tool has a check of its own that may ask a service."""
    return spec.authorize is not None or spec.verify is not None or spec.reconcile is not None
