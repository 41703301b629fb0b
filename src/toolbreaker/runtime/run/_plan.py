"""Plan and authorize: how a run guard decides a call before it runs.

A call is fingerprinted, a write gets its idempotency key and its journal entry is read;
the run machine decides (:mod:`toolbreaker.core.run.machine`), and the guard carries the
verdict out: an answer from the journal, a reconcile check, a stop, or a run. A call that
runs asks its dependency breaker next (the model re-issuing a failed call spends a retry
of the breaker's budget first), an irreversible one its authority check, and a write is
journaled pending before it runs. :meth:`Planning._begin` is the one flow behind
``begin`` and ``abegin`` (:mod:`toolbreaker.runtime._flow`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

from toolbreaker.core.run import protocol
from toolbreaker.core.run._values import call_risk
from toolbreaker.core.run.budget import WRITES, Action
from toolbreaker.core.run.costs import amount_of
from toolbreaker.core.run.fingerprint import fingerprint, write_key
from toolbreaker.core.run.machine import RunDecision, RunEvent
from toolbreaker.core.run.redact import redact
from toolbreaker.core.run.retrying import is_retry
from toolbreaker.errors import FingerprintError, PolicyError, StoreUnavailable
from toolbreaker.runtime._flow import Flow
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._result import (
    deferred_result,
    denied_result,
    error_result,
    handoff_result,
    journal_down_result,
    over_budget_result,
    queued_result,
    stopped_result,
    tool_stopped_result,
)
from toolbreaker.runtime._step import Step, StepStart, ToolType, Watching, check_tool_type
from toolbreaker.runtime.breaker._breaker import Permit, watch_openings
from toolbreaker.runtime.breaker._degrade import deferred_notice
from toolbreaker.runtime.run._driver import Admit
from toolbreaker.runtime.run._journal import step_of
from toolbreaker.runtime.run._settle import Settling
from toolbreaker.runtime.run._shell import CallPlan
from toolbreaker.runtime.run._tools import (
    ActionRequest,
    GuardedTool,
    evidence_digest,
    with_key,
    without_key,
)

__all__ = ["Planning"]

#: The verdicts that refuse a call before it runs, each with its answer (``_refused``).
_REFUSALS: Final = frozenset(
    {"deferred", "over-budget", "tool-stopped", "writes-blocked", "stopped"}
)


class Planning(Settling):
    """The start of a call: the run machine's verdict, the breaker, the journal."""

    def _begin(
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
        check_tool_type(tool_type)
        watching = self._watch_step(tool, call_id, tool_type, description)
        if watching is None:
            step = yield from self._deciding(tool, args)
            step.call_id = call_id
            return self._joined(step)
        try:
            with watching.current():
                step = yield from self._deciding(tool, args)
        except BaseException as exc:
            watching.end(None, exc)
            raise
        step.call_id = call_id
        step.watching = watching
        if step.answer is not None:
            step.end()
        return self._joined(step)

    def _watch_step(
        self,
        tool: str,
        call_id: str | None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Watching | None:
        spec = self._tools.get(tool)
        breaker = None if spec is None else spec.breaker
        if breaker is not None:
            return breaker.watch_step(
                tool, call_id, self.step_observers, tool_type=tool_type, description=description
            )
        if not self.step_observers:
            return None
        start = StepStart(tool, call_id, None, tool_type, description)
        return self.step_observers.start(start, self._observer_failed)

    def _observer_failed(self) -> None:
        self.listener_errors += 1

    def _deciding(self, tool: str, args: dict[str, Any]) -> Flow[Step]:
        """The run machine's verdict, then the breaker's, then the journal's."""
        step: Step = yield self.blocking(None, self._plan, tool, args, tool=tool)
        plan: CallPlan | None = step.plan
        breaker = None if plan is None or step.answer is not None else plan.spec.breaker
        if breaker is not None:
            assert plan is not None
            with self._lock:
                retrying = is_retry(self._retries, plan.fingerprint)
            breaker = breaker.for_scope()  # a scoped row: this tenant's
            admission = yield Admit(breaker, retrying)
            if isinstance(admission, Permit):
                step.permit = admission
            else:
                # Refused by its dependency breaker after the run machine let it through.
                result = admission.result_for(step.tool)
                answer = yield from self._down(step, result, admission.reason)
                step.give(answer, admission.reason)
        step = yield self.blocking(step, self._journal_pending, step)
        return step

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
        plan = self._call_plan(spec, args)
        if isinstance(plan, Step):
            return plan  # refused: its class, its arguments or its cost cannot be told
        risk, action_fp, key, reserve = plan.risk, plan.fingerprint, plan.key, plan.reserve
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
            return step.give(journal_down_result(tool), "journal-unavailable")
        plan.status = status = protocol.read(done)
        journaled = done.get("result", {"ok": True, "deduplicated": True}) if done else None
        action = Action(tool=tool, fingerprint=action_fp, risk=risk, recovery=spec.recovery)
        plan.action = action
        decision = self._feed(
            RunEvent(
                "request",
                self.clock(),
                action,
                journal=status,
                evidence=evidence_digest(journaled, self.rules) if protocol.made(status) else None,
                reserve=reserve,
            )
        )
        step.decision = decision
        plan.step = decision.step
        plan.reservation = decision.reservation
        verdict = decision.verdict
        if verdict == "journal":
            # A confirmed write is never executed again (how a resumed task skips work).
            return step.give(journaled, "journal", refused=False)
        if verdict == "queued" and key is not None:
            # Queued by the degradation matrix (or maybe): a drainer makes it, not this run.
            queued = protocol.queue_id(done) or "unknown"
            maybe = protocol.uncertain(status)
            answer = queued_result(tool, queued, key, already=True, maybe=maybe)
            return step.give(answer, "queued", refused=False)
        if verdict == "handed-off" and key is not None:
            rid = protocol.reconciliation_id(done) or "unknown"
            return step.give(
                handoff_result(tool, rid, step_of(done or {})), "handed-off", refused=False
            )
        if verdict == "reconcile":
            answer = self._reconcile(plan, why="an earlier attempt's outcome is unknown")
            return step.give(answer, "reconcile", refused=False)
        if verdict in _REFUSALS:
            return self._refused(step, decision)
        plan.begun = True
        plan.opened = watch_openings()
        if risk == "irreversible" and not self._authorized(step):
            self._finish(plan, "ignored", spent=False)
            if spec.authorize is None:  # a tool whose risk is a function of its arguments
                why = PolicyError(f"this call is irreversible and {tool} has no authorize check")
                return step.give(error_result(tool, why, retryable=False), "denied")
            return step.give(denied_result(tool), "denied")
        if key is not None:
            step.args = with_key(spec, args, key)
        return step

    def _call_plan(self, spec: GuardedTool, args: dict[str, Any]) -> CallPlan | Step:
        """The call's class, fingerprint, write key and cost; or the step refusing it."""
        tool = spec.name
        try:
            risk = call_risk(spec.risk, args, f"{tool}.risk")
        except Exception as exc:  # noqa: BLE001 - a call whose class is unknown never runs
            if not isinstance(exc, PolicyError):
                hook_failed(f"the risk function of {tool} failed; the call is refused", exc)
            answer = error_result(tool, exc, retryable=False)
            return Step(self, tool, args, answer=answer, reason="risk-unknown", refused=True)
        try:
            action_fp = fingerprint(tool, args, self.rules)
            key = None
            if risk in WRITES:
                # A generic tool's write (a shell command) is no business action made
                # once: without a business key, each call is its own write.
                call = self._run.steps + 1 if callable(spec.risk) else None
                key = write_key(
                    tool, args, spec.business_key, task=self.task, rules=self.rules, call=call
                )
        except (FingerprintError, RecursionError) as exc:
            # Arguments that cannot be checked are never run: the guard could neither
            # count them nor give a write its key.
            answer = error_result(tool, exc, retryable=False)
            return Step(self, tool, args, answer=answer, reason="invalid-arguments", refused=True)
        try:
            reserve = _estimate(spec, args)
        except Exception as exc:  # noqa: BLE001 - an unknown cost is never admitted
            hook_failed(f"the cost estimate of {tool} failed; the call is refused", exc)
            answer = error_result(tool, exc, retryable=False)
            return Step(self, tool, args, answer=answer, reason="cost-unknown", refused=True)
        return CallPlan(spec, action_fp, key, args, reserve=reserve, risk=risk)

    def _refused(self, step: Step, decision: RunDecision) -> Step:
        """A call the run machine refused: the answer the model reads, and why."""
        tool = step.tool
        verdict = decision.verdict
        if verdict == "deferred":
            # Not made, not queued: the model reads that it may issue it next turn.
            limit = self.budget.max_calls_per_turn
            assert limit is not None
            if self.notices:
                breaker = self._tools[tool].breaker
                key = breaker.key if breaker is not None else None
                self.notices.emit(deferred_notice(self.task, tool, limit=limit, breaker=key))
            return step.give(deferred_result(tool, limit=limit), "deferred")
        if verdict == "over-budget":
            assert decision.stop is not None
            assert decision.left is not None
            return step.give(
                over_budget_result(tool, decision.stop, left=decision.left), "over-budget"
            )
        if verdict == "tool-stopped":
            assert decision.stop is not None
            return step.give(tool_stopped_result(tool, decision.stop), decision.stop.condition)
        assert decision.stop is not None  # writes-blocked or stopped
        stop_answer = stopped_result(
            decision.stop,
            writes_blocked=self._run.writes_blocked is not None,
            writes_only=verdict == "writes-blocked",
        )
        return step.give(stop_answer, decision.stop.condition)

    def _journal_pending(self, step: Step) -> Step:
        """Journal a write as pending before it runs; no record of the attempt, no attempt."""
        plan: CallPlan | None = step.plan
        if step.answer is not None or plan is None or plan.key is None:
            return step
        if not self._journal(plan, "attempt"):
            # A write we could not journal could later be neither skipped nor reconciled.
            if step.permit is not None:
                step.permit.record("ignored")
                step.permit = None
            self._finish(plan, "ignored", spent=False)
            if protocol.unresolved(plan.status):
                # The pending entry may have been written: this attempt certainly was not
                # made, so say so (best effort: a pending entry left is only reconciled).
                self._journal(plan, "not-made")
            step.give(journal_down_result(step.tool), "journal-unavailable")
        return step

    def _authorized(self, step: Step) -> bool:
        spec = step.plan.spec
        if spec.authorize is None:
            return False  # never asked: nothing may approve it
        request = ActionRequest(
            task=self.task,
            tool=spec.name,
            args=redact(step.args),
            fingerprint=step.plan.fingerprint,
            idempotency_key=step.plan.key,
            risk=step.plan.risk,
        )
        try:
            return spec.authorize(request) is True
        except Exception as exc:  # noqa: BLE001 - a failing authority check denies
            hook_failed(f"the authority check of {spec.name} raised; denied", exc)
            return False


def _estimate(spec: GuardedTool, args: dict[str, Any]) -> Decimal | None:
    """The cost a call of ``spec`` reserves: its fixed amount or its estimator's answer."""
    if spec.cost is None:
        return None
    estimate = spec.cost(args) if callable(spec.cost) else spec.cost
    return amount_of(estimate, f"{spec.name}.cost")
