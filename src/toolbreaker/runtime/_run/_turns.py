"""A model turn's calls: one sibling group per turn, cancelled by policy together.

Adapters mark where the framework starts a model turn (:meth:`Turns.mark_turn`); the
calls the turn starts are one :class:`~toolbreaker.runtime._run._siblings.TurnGroup`. A
call run through :meth:`Turns.run_step` (or ``arun_step``) is cancelled by policy when a
required dependency it needs opens while it runs: settled here, the run stopped as for
any required dependency going down. One flow serves the sync and the async twin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from toolbreaker.core._run.budget import WRITES
from toolbreaker.core._run.machine import RunEvent
from toolbreaker.runtime._flow import Flow, adrive, drive
from toolbreaker.runtime._result import cancelled_result
from toolbreaker.runtime._run._driver import Blocking, InGroup, Invoke, Record
from toolbreaker.runtime._run._settle import Settle
from toolbreaker.runtime._run._shell import RunShell, record_of
from toolbreaker.runtime._run._siblings import (
    CancelledByPolicy,
    SiblingOutcome,
    TurnGroup,
    TurnMember,
    is_policy,
)
from toolbreaker.runtime._step import Step
from toolbreaker.stores._memory import in_process

__all__ = ["Turns"]

R = TypeVar("R")


class Turns:
    """A run guard's model turns and their sibling calls (see the module).

    A part of a :class:`~toolbreaker.RunGuard`.

    Args:
        shell: the run's state and journal (:class:`RunShell`).
        settle: the settle flow (a call cancelled by policy is settled by it).
    """

    def __init__(self, shell: RunShell, settle: Settle) -> None:
        self.shell = shell
        self.settle = settle

    def mark_turn(self, turn: object = None) -> None:
        """A model turn begins (:meth:`RunGuard.mark_turn`)."""
        with self.shell.lock:
            if turn is not None and turn == self.shell.turn:
                return
            self.shell.turn = turn
            # The calls this turn starts are one sibling group (see run_step).
            self.shell.group = TurnGroup(turn, ())
        self.shell.feed(RunEvent("turn", self.shell.clock()))

    def turn_outcome(self) -> SiblingOutcome | None:
        """The calls of the current (or last) model turn (:meth:`RunGuard.turn_outcome`)."""
        group = self.shell.group
        return None if group is None else group.outcome()

    def run_step(self, step: Step, fn: Callable[[], R]) -> R | CancelledByPolicy:
        """Run a begun step's tool in its model turn (:meth:`RunGuard.run_step`)."""
        with step.current():  # the tool runs inside the step observers' watches
            ran: R | CancelledByPolicy = drive(self._in_turn(step, fn))
        return ran

    async def arun_step(self, step: Step, fn: Callable[[], Awaitable[R]]) -> R | CancelledByPolicy:
        """:meth:`run_step` on the event loop (:meth:`RunGuard.arun_step`)."""
        with step.current():
            ran: R | CancelledByPolicy = await adrive(self._in_turn(step, fn))
        return ran

    def _in_turn(self, step: Step, fn: Callable[[], Any]) -> Flow[Any]:
        """Run ``fn`` as one call of the step's turn (``run_step``, ``arun_step``)."""
        turn = self.shell.turn_of(step)
        if turn is None:
            return (yield Invoke(fn))
        group, member = turn
        required = self.shell.required_breakers()
        stores = [b.store for b in required]
        if in_process(stores):
            group.refresh(member, required)
        else:  # a look at the required breakers' state: a round trip on a shared store
            yield Blocking(group.refresh, (member, required), stores)
        ran = yield InGroup(group, member, step, fn)
        if not is_policy(ran):
            return ran  # the tool's own result
        if not step.settled and step.permit is not None:
            yield Record(step.permit, "ignored")
        answer = yield self.shell.blocking(step, self._cancelled, step, group, member)
        step.end()  # settled here (or by the framework meanwhile, which ended it)
        return CancelledByPolicy(answer)

    def _cancelled(self, step: Step, group: TurnGroup, member: TurnMember) -> dict[str, Any]:
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
        step.claim()
        step.failed_as("cancelled-by-policy")
        plan = record_of(step)
        opened = member.opened or member.need
        assert opened is not None
        dependency = opened.key
        why = member.cancelled_because or f"required dependency {dependency!r} opened"
        answer: dict[str, Any]
        if plan.risk in WRITES and member.started:
            unknown = self.settle.unknown(
                step, f"cancelled by policy while it ran ({why}): the write may have committed"
            )
            answer = cancelled_result(step.tool, dependency, unknown=unknown)
        else:
            self.shell.finish(plan, "ignored", spent=member.started)
            self.shell.forget(plan)
            answer = cancelled_result(step.tool, dependency)
        if plan.action is not None:
            detail = f"{why}; a call of {plan.spec.name!r} that needs it was cancelled by policy"
            self.shell.feed(
                RunEvent(
                    "dependency-down",
                    self.shell.clock(),
                    plan.action,
                    required=True,
                    detail=detail,
                    step=plan.step,
                )
            )
        group.answered(member, answer)
        return answer
