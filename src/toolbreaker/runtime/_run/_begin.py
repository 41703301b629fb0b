"""Begin a call: the run guard carries out the call's plan (:mod:`._plan`).

A call is read (:func:`~toolbreaker.runtime._run._plan.intent_of`), a write's journal
entry is read, the run machine decides (:mod:`toolbreaker.core._run.machine`), and the
plan (:func:`~toolbreaker.runtime._run._plan.plan_call`) says what to do: an answer, a
reconcile check, or a run. A call that runs asks its dependency breaker next (the model
re-issuing a failed call spends a retry of the breaker's budget first), an irreversible
one its authority check, and a write is journaled pending before it runs. The
:class:`~toolbreaker.runtime.Step` is built once, at the end, as a frozen value.
:meth:`Begin.begin` is the one flow behind ``begin`` and ``abegin``
(:mod:`toolbreaker.runtime._flow`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from toolbreaker.core._run import protocol
from toolbreaker.core._run.budget import Action
from toolbreaker.core._run.machine import RunDecision, RunEvent
from toolbreaker.core._run.redact import redact
from toolbreaker.core._run.retrying import is_retry
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.runtime._breaker._breaker import Permit, watch_openings
from toolbreaker.runtime._breaker._degrade import deferred_notice
from toolbreaker.runtime._flow import Flow
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._result import journal_down_result
from toolbreaker.runtime._run._driver import Admit
from toolbreaker.runtime._run._plan import (
    Answer,
    Reconcile,
    Run,
    intent_of,
    journaled_result,
    plan_call,
)
from toolbreaker.runtime._run._settle import Settle
from toolbreaker.runtime._run._shell import CallRecord, RunShell
from toolbreaker.runtime._run._tools import (
    ActionRequest,
    GuardedTool,
    evidence_digest,
    key_argument,
    without_key,
)
from toolbreaker.runtime._step import Step, StepStart, ToolType, Watching, check_tool_type

__all__ = ["Begin"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Planned:
    """A call as planned, before its breaker and the journal's pending entry.

    ``call`` is ``None`` for a call refused before the run machine heard of it.
    """

    spec: GuardedTool
    args: dict[str, Any]
    outcome: Answer | Run
    call: CallRecord | None = None
    decision: RunDecision | None = None


class Begin:
    """The start of a call: the plan carried out, the breaker, the journal.

    A part of a :class:`~toolbreaker.RunGuard`.

    Args:
        shell: the run's state and journal (:class:`RunShell`).
        settle: the settle flow, the owner of the steps it begins (and what a call the
            dependency breaker refuses is served by: :meth:`Settle.down`).
    """

    def __init__(self, shell: RunShell, settle: Settle) -> None:
        self.shell = shell
        self.settle = settle
        self._resumed = False

    def begin(
        self,
        tool: str,
        args: dict[str, Any],
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Flow[Step]:
        """Decide one call (``begin`` and ``abegin``): the step says what to do.

        A call the run machine lets run asks its dependency breaker next. The model is a
        retry layer: re-issuing an action whose last attempt failed retryably (this run's
        ledger says so) spends a retry of the breaker's budget first, and once it is
        spent the tool is unavailable for the run (a required tool stops it).

        The step observers (the guard's and the tool's breaker's) hear the call from
        here: their watches are current while it is decided, and ended now if it carries
        an answer.
        """
        if tool_type is not None:
            check_tool_type(tool_type)
        watching = self._watch_step(tool, call_id, tool_type, description)
        if watching is None:
            step = yield from self._deciding(tool, args, call_id, None)
            return self.shell.joined(step)
        try:
            with watching.current():
                step = yield from self._deciding(tool, args, call_id, watching)
        except BaseException as exc:
            watching.end(None, exc)
            raise
        if step.answer is not None:
            step.end()
        return self.shell.joined(step)

    def _watch_step(
        self,
        tool: str,
        call_id: str | None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Watching | None:
        spec = self.shell.tools.get(tool)
        breaker = None if spec is None else spec.breaker
        if breaker is not None:
            return breaker.watch_step(
                tool,
                call_id,
                self.shell.step_observers,
                tool_type=tool_type,
                description=description,
            )
        if not self.shell.step_observers:
            return None
        start = StepStart(tool, call_id, None, tool_type, description)
        return self.shell.step_observers.start(start, self._observer_failed)

    def _observer_failed(self) -> None:
        self.shell.listener_errors += 1

    def _deciding(
        self, tool: str, args: dict[str, Any], call_id: str | None, watching: Watching | None
    ) -> Flow[Step]:
        """The plan carried out, then the breaker's admission, then the journal's entry."""
        planned: _Planned = yield self.shell.blocking(None, self._plan, tool, args, tool=tool)
        call, outcome, spec = planned.call, planned.outcome, planned.spec
        if not isinstance(outcome, Run):
            return self._answered(tool, planned, outcome, call_id, watching)
        assert call is not None  # a call the run machine decided has its record
        permit: Permit | None = None
        breaker = spec.breaker
        if breaker is not None:
            with self.shell.lock:
                retrying = is_retry(self.shell.retries, call.fingerprint)
            breaker = breaker.for_scope()  # a scoped row: this tenant's
            admission = yield Admit(breaker, retrying)
            if not isinstance(admission, Permit):
                # Refused by its dependency breaker after the run machine let it through.
                result = admission.result_for(tool)
                answer = yield from self.settle.down(call, result, admission.reason)
                down = Answer(answer, admission.reason)
                return self._answered(tool, planned, down, call_id, watching)
            permit = admission
        if call.key is not None:
            refused = yield self.shell.blocking(call, self._journal_pending, call, permit)
            if refused is not None:
                return self._answered(tool, planned, refused, call_id, watching)
        return self._running(
            tool, planned, outcome, call, permit=permit, call_id=call_id, watching=watching
        )

    @property
    def resumed(self) -> bool:
        """Whether the writes an earlier run of the task left unresolved were read."""
        return self._resumed

    def direct(self, tool: str, args: dict[str, Any], known: tuple[str, int] | None = None) -> Step:
        """:meth:`_deciding` called inline, for a tool with no dependency breaker.

        Such a call yields no effect but the plan and a write's pending entry, each a
        plain function here: ``RunGuard.call``'s direct path (see
        ``RunGuard._direct``), for a call no step observer watches, outside a model turn.
        ``known``: a read's fingerprint and the time of its request, as ``RunGuard.call``'s
        quiet path read them before it found the request was not quiet.
        """
        planned = self._plan(tool, args, known)
        call, outcome = planned.call, planned.outcome
        if not isinstance(outcome, Run):
            return self._answered(tool, planned, outcome, None, None)
        assert call is not None  # a call the run machine decided has its record
        if call.key is not None:
            refused = self._journal_pending(call, None)
            if refused is not None:
                return self._answered(tool, planned, refused, None, None)
        return self._running(tool, planned, outcome, call)

    def ran(self, call: CallRecord, args: dict[str, Any], decision: RunDecision) -> Step:
        """The step of a call the run cell began in place (``RunGuard.call``'s quiet path).

        The step :meth:`direct` makes for it, made only once its tool raised: the settle
        flow settles a failure by its step.
        """
        run = Run(args)
        return self._running(
            call.spec.name, _Planned(call.spec, args, run, call, decision), run, call
        )

    def _running(
        self,
        tool: str,
        planned: _Planned,
        outcome: Run,
        call: CallRecord,
        *,
        permit: Permit | None = None,
        call_id: str | None = None,
        watching: Watching | None = None,
    ) -> Step:
        """The step of a call that runs."""
        spec = planned.spec
        return Step(
            self.settle,
            tool,
            outcome.args,
            deadline=None if spec.breaker is None else spec.breaker.timeout,
            permit=permit,
            idempotency_key=call.key,
            key_arg=key_argument(spec),
            fingerprint=call.fingerprint,
            decision=planned.decision,
            plan=call,
            call_id=call_id,
            watching=watching,
        )

    def _answered(
        self,
        tool: str,
        planned: _Planned,
        outcome: Answer,
        call_id: str | None,
        watching: Watching | None,
    ) -> Step:
        """The step of a call that does not run: it carries its answer."""
        call, breaker = planned.call, planned.spec.breaker
        return Step(
            self.settle,
            tool,
            planned.args,
            answer=outcome.result,
            deadline=None if call is None or breaker is None else breaker.timeout,
            idempotency_key=None if call is None else call.key,
            key_arg=key_argument(planned.spec),
            fingerprint=None if call is None else call.fingerprint,
            decision=planned.decision,
            plan=call,
            call_id=call_id,
            reason=outcome.reason,
            refused=outcome.refused,
            watching=watching,
        )

    def _resume(self) -> None:
        """Once per guard: writes an earlier run left unresolved block writes here too."""
        if self._resumed:
            return
        try:
            entries = self.shell.journal.journal_entries(self.shell.task)
        except StoreUnavailable:
            return  # writes are refused while the journal is down anyway; try again later
        self._resumed = True
        unresolved = [e for e in entries if protocol.uncertain(protocol.read(e))]
        with self.shell.lock:
            self.shell.uncertain_keys.update(str(e.get("idempotency_key")) for e in unresolved)
        if unresolved:
            keys = ", ".join(str(e.get("idempotency_key")) for e in unresolved[:5])
            self.shell.feed(
                RunEvent(
                    "resume",
                    self.shell.clock(),
                    count=len(unresolved),
                    detail=f"left unresolved by an earlier run of {self.shell.task!r}: {keys}",
                )
            )

    def _plan(
        self, tool: str, args: dict[str, Any], known: tuple[str, int] | None = None
    ) -> _Planned:
        """The call read, the journal read, the run machine told; the plan carried out.

        ``known``: the call's fingerprint and the time of its request, read already.
        """
        shell = self.shell
        spec = shell.tools.get(tool)
        if spec is None:
            raise PolicyError(f"unknown tool {tool!r} for run {shell.task!r}", field="tool")
        args = without_key(spec, args)
        intent = intent_of(
            spec,
            args,
            rules=shell.rules,
            task=shell.task,
            steps=shell.steps,
            fingerprint=None if known is None else known[0],
        )
        if isinstance(intent, Answer):
            return _Planned(spec, args, intent)  # its class, arguments or cost cannot be told
        key = intent.key
        call = CallRecord(
            spec, intent.fingerprint, key, args, reserve=intent.reserve, risk=intent.risk
        )
        shell.attempted = {
            "tool": tool,
            "fingerprint": intent.fingerprint,
            "idempotency_key": key,
        }
        if not self._resumed:
            self._resume()
        try:
            entry = shell.journal.journal_get(shell.task, key) if key else None
        except StoreUnavailable:
            down = Answer(journal_down_result(tool), "journal-unavailable")
            return _Planned(spec, args, down, call)
        call.status = status = protocol.read(entry)
        evidence = None
        if protocol.made(status):
            evidence = evidence_digest(journaled_result(entry), shell.rules)
        action = Action(
            tool=tool, fingerprint=intent.fingerprint, risk=intent.risk, recovery=spec.recovery
        )
        call.action = action
        decision = shell.feed(
            RunEvent(
                "request",
                shell.clock() if known is None else known[1],
                action,
                journal=status,
                evidence=evidence,
                reserve=intent.reserve,
            )
        )
        call.step = decision.step
        call.reservation = decision.reservation
        plan = plan_call(
            intent,
            decision,
            entry,
            writes_blocked=shell.writes_blocked is not None,
            turn_limit=shell.budget.max_calls_per_turn,
        )
        if isinstance(plan, Reconcile):
            answer = self.settle.reconcile(call, why=plan.why)
            return _Planned(spec, args, Answer(answer, "reconcile", refused=False), call, decision)
        if isinstance(plan, Answer):
            if plan.deferred is not None and shell.notices:
                key_of = spec.breaker.key if spec.breaker is not None else None
                shell.notices.emit(
                    deferred_notice(shell.task, tool, limit=plan.deferred, breaker=key_of)
                )
            return _Planned(spec, args, plan, call, decision)
        call.begun = True
        call.opened = watch_openings()
        if plan.denied is not None and not self._authorized(call):
            shell.finish(call, "ignored", spent=False)
            return _Planned(spec, args, plan.denied, call, decision)
        return _Planned(spec, args, plan, call, decision)

    def _journal_pending(self, call: CallRecord, permit: Permit | None) -> Answer | None:
        """Journal a write as pending before it runs; no record of the attempt, no attempt.

        Returns the answer when the journal could not record it (its permit is let go).
        """
        if self.shell.move(call, "attempt"):
            return None
        # A write we could not journal could later be neither skipped nor reconciled.
        if permit is not None:
            permit.record("ignored")
        self.shell.finish(call, "ignored", spent=False)
        if protocol.unresolved(call.status):
            # The pending entry may have been written: this attempt certainly was not
            # made, so say so (best effort: a pending entry left is only reconciled).
            self.shell.move(call, "not-made")
        return Answer(journal_down_result(call.spec.name), "journal-unavailable")

    def _authorized(self, call: CallRecord) -> bool:
        spec = call.spec
        if spec.authorize is None:
            return False  # never asked: nothing may approve it
        request = ActionRequest(
            task=self.shell.task,
            tool=spec.name,
            args=redact(call.args),
            fingerprint=call.fingerprint,
            idempotency_key=call.key,
            risk=call.risk,
        )
        try:
            return spec.authorize(request) is True
        except Exception as exc:  # noqa: BLE001 - a failing authority check denies
            hook_failed(f"the authority check of {spec.name} raised; denied", exc)
            return False
