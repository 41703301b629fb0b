"""Settle, verify, reconcile: how a run guard carries out the end of a call.

A call's outcome reaches the dependency breaker first, then the run: a write's result is
verified (what proves a write is the write protocol's
:func:`~toolbreaker.core._run.protocol.proves`); a failure that may have committed is an
unknown outcome (journaled, reconciled, never replayed: :func:`may_have_committed`); a
dependency that is out is served by its sheet row's degradation, and the run machine
decides whether the run goes on. The settle flows (:meth:`Settle.settle_success`,
:meth:`Settle.settle_failure`) are written once for the sync and async twins
(:mod:`toolbreaker.runtime._flow`; the effects are in :mod:`._driver`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from toolbreaker.core._run import protocol
from toolbreaker.core._run.budget import WRITES
from toolbreaker.core._run.costs import amount_of
from toolbreaker.core._run.machine import RunEvent
from toolbreaker.core._run.retrying import failed_retryably, observe
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._breaker._breaker import Permit
from toolbreaker.runtime._breaker._classify import SUCCESS, Verdict, classify_exception
from toolbreaker.runtime._breaker._commit import found_in_chain, may_have_committed
from toolbreaker.runtime._flow import Flow, adrive, drive
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._packet import StopPacket
from toolbreaker.runtime._result import error_result, stopped_result, unknown_result
from toolbreaker.runtime._run._driver import Degrade, Record
from toolbreaker.runtime._run._shell import CallRecord, RunShell, record_of
from toolbreaker.runtime._run._tools import evidence_digest, with_key
from toolbreaker.runtime._step import Step

__all__ = ["Settle"]


class Settle:
    """The end of a call: settle the breaker, verify, reconcile, journal (see the module).

    A part of a :class:`~toolbreaker.RunGuard`, and the owner of its steps: a step's
    ``succeeded``/``failed`` (and their twins) drive this part's flows.

    Args:
        shell: the run's state and journal (:class:`RunShell`).
    """

    def __init__(self, shell: RunShell) -> None:
        self.shell = shell

    # -- the settle flows: one for the sync and the async twins ----------------------------

    def settle_success(self, step: Step, result: Any) -> Flow[Any]:
        """A begun (and claimed) step returned ``result``: what the model reads."""
        self.shell.settling(step)
        permit = step.permit
        if permit is not None:
            verdict = permit.breaker.result_verdict(result)
            if verdict is not SUCCESS:
                step.failed_as("result")  # the tool returned what counts as a failure
            yield Record(permit, verdict)
        answer = yield self.shell.blocking(step, self._succeeded, step, result)
        return self.shell.told(step, answer)

    def settle_failure(self, step: Step, exc: BaseException) -> Flow[Any]:
        """A begun (and claimed) step raised ``exc``: what the model reads.

        A cancellation (anything not an ``Exception``) is recorded, then raised again: a
        write stays pending, reconciled on resume.
        """
        self.shell.settling(step)
        if step.permit is not None:
            yield Record(step.permit, exc)
        if not isinstance(exc, Exception):
            self.shell.told(step, None, exc)
            raise exc
        answer = yield self.shell.blocking(step, self._failed, step, exc)
        if isinstance(answer, _Down):
            answer = yield from self.down(record_of(step), answer.result, answer.reason)
        return self.shell.told(step, answer)

    def down(self, plan: CallRecord, result: dict[str, Any], reason: str) -> Flow[Any]:
        """The step's dependency is out (refused, or opened by this call): the answer.

        The sheet row's degradation, if it has one, is an effect of its own (on the event
        loop its store round trips, its packet's journal read and an async substitute are
        awaited, never run inside another effect); then the run machine decides.
        """
        breaker = plan.spec.breaker
        served = None
        if breaker is not None and breaker.for_scope().degradation.chain:
            served = yield self._degrade(plan, result)
        answer = yield self.shell.blocking(
            plan, self._dependency_down, plan, result, reason, served
        )
        return answer

    # -- the Step's owner callbacks: both twins drive the one flow -------------------------

    def _step_succeeded(self, step: Step, result: Any) -> Any:
        return drive(self.settle_success(step, result))

    def _step_failed(self, step: Step, exc: BaseException) -> Any:
        return drive(self.settle_failure(step, exc))

    async def _step_asucceeded(self, step: Step, result: Any) -> Any:
        return await adrive(self.settle_success(step, result))

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any:
        return await adrive(self.settle_failure(step, exc))

    # -- execute, verify, record -------------------------------------------------------------

    def succeeded(self, step: Step, result: Any) -> Any:
        """A begun step that ran with no permit and outside a turn returned ``result``.

        What :meth:`settle_success` comes to for it (no permit to record, no turn to
        tell), called inline: ``RunGuard._direct``.
        """
        assert step.permit is None, step
        return self._succeeded(step, result)

    def _succeeded(self, step: Step, result: Any) -> Any:
        plan = record_of(step)
        spec = plan.spec
        if plan.risk in WRITES:
            verified: bool | None = None
            if spec.verify is not None:
                try:
                    verified = bool(spec.verify(result))
                except Exception as exc:  # noqa: BLE001 - a verifier that crashes proves nothing
                    hook_failed(f"the verify check of {spec.name} raised", exc)
                    verified = False
            if not protocol.proves(result, verified):
                step.failed_as("unverified")
                return self.unknown(
                    step, "verification failed: the result does not prove the write happened"
                )
        self.shell.finish(
            plan,
            "success",
            evidence=evidence_digest(result, self.shell.rules),
            cost=self._actual_cost(plan, result),
        )
        self._observe_retry(plan, result)
        if spec.breaker is not None:
            # The breaker that admitted it (a scoped row's tenant breaker) hears it.
            owner = step.permit.breaker if isinstance(step.permit, Permit) else spec.breaker
            owner.retry_succeeded()  # a success refills the retry budget
            owner.degradation.remember(spec.name, plan.args, result)
        if plan.key is not None:
            # The write happened; if the journal is down now, its idempotency key still
            # protects a retry at the provider.
            self.shell.move(plan, "proven", result=result)
        return result

    def _failed(self, step: Step, exc: Exception) -> Any:
        """What the model reads for a failure; :class:`_Down` when the dependency is out."""
        plan = record_of(step)
        spec = plan.spec
        verdict = spec.breaker.verdict_of(exc) if spec.breaker is not None else _classify(exc)
        if plan.risk in WRITES and may_have_committed(exc, verdict):
            return self.unknown(step, f"{type(exc).__name__}: the write may have committed")
        error = None if verdict.detail == "cancelled" else verdict.detail
        self.shell.finish(plan, "failure" if verdict.kind == "failure" else "ignored", error=error)
        self.shell.forget(plan)
        inner = found_in_chain(exc, CircuitOpen)
        if inner is not None:
            # A breaker inside the tool (an httpx transport ...) rejected the call.
            return _Down(inner.result_for(spec.name), inner.reason)
        opened = [b for b in plan.opened if b is not spec.breaker]
        if opened:
            # A breaker inside the tool opened on this very failure: say so now.
            result = opened[-1].failure_result(spec.name, exc)
            if result.get("tool_unavailable"):
                return _Down(result, "opened")
        if spec.breaker is None:
            return error_result(spec.name, exc, retryable=verdict.kind == "failure")
        owner = step.permit.breaker if isinstance(step.permit, Permit) else spec.breaker
        result = owner.failure_result(spec.name, exc)
        self._observe_retry(plan, result)
        if result.get("tool_unavailable"):
            # This failure opened the dependency's breaker, or left the tool unavailable
            # for the run (a spent quota or retry budget, a rate limit too long to wait).
            return _Down(result, str(result.get("reason", "opened")))
        return result

    def _dependency_down(
        self,
        plan: CallRecord,
        result: dict[str, Any],
        reason: str,
        served: dict[str, Any] | None,
    ) -> Any:
        """A dependency is out: the model hears so, and the run machine decides the rest.

        ``served``: the sheet row's degradation of ``result`` (made by :meth:`_down`, an
        effect of its own), ``None`` without a chain; a write it queued or handed off is
        journaled so. Whether the run stops is the run machine's (the mode served, the
        reason, whether the tool is required: see :mod:`toolbreaker.core._run.machine`).
        """
        mode = None
        if served is not None:
            result, mode = served, served.get("degradation")
        if mode is not None:
            self._after_degraded(plan, result)
        # It was not made (a queued one is not made yet): it spent nothing.
        self.shell.finish(plan, "ignored", spent=False)
        if plan.action is None:
            return result
        if mode == "stop":
            detail = str(result.get("detail") or f"required tool {plan.spec.name!r} is unavailable")
        else:
            seconds = result.get("retry_after_seconds")
            detail = f"required tool {plan.spec.name!r} is unavailable ({reason})"
            if seconds is not None:
                detail += f"; retry after {seconds} s"
        decision = self.shell.feed(
            RunEvent(
                "dependency-down",
                self.shell.clock(),
                plan.action,
                required=plan.spec.required,
                reason=reason,
                mode=None if mode is None else str(mode),
                detail=detail,
                step=plan.step,
            )
        )
        if decision.stop is None or mode is not None:
            return result  # a mode's answer says what the caller gets, the stop included
        return {
            **result,
            **stopped_result(decision.stop, writes_blocked=self.shell.writes_blocked is not None),
        }

    def _degrade(self, plan: CallRecord, result: dict[str, Any]) -> Degrade:
        """The sheet row's degradation of ``result``, as an effect.

        Queued work runs with the write's idempotency key; a handoff's packet gives the
        attempted write to a person.
        """
        spec = plan.spec
        assert spec.breaker is not None
        args = with_key(spec, plan.args, plan.key)  # the drained call carries the same key

        def packet(detail: str) -> StopPacket:
            if plan.key is None:
                action = (
                    f"once the dependency of {spec.name!r} recovers, carry out or drop the "
                    f"attempted action, then resume task {self.shell.task!r}: confirmed steps are "
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
                    f"{self.shell.task!r}: confirmed steps are skipped"
                )
            return dataclasses.replace(
                self.shell.stop_packet(),
                condition="dependency-open",
                detail=detail,
                next_safe_action=action,
            )

        options = {"idempotency_key": plan.key, "packet": packet, "task": self.shell.task}
        return Degrade(spec.breaker.for_scope().degradation, spec.name, args, result, options)

    def _after_degraded(self, plan: CallRecord, answer: Mapping[str, Any]) -> None:
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
        self.shell.move(plan, move, extra=ids)
        if protocol.uncertain(plan.status) and plan.action is not None:
            self.shell.counted(plan.key)
            self.shell.feed(
                RunEvent(
                    "uncertain",
                    self.shell.clock(),
                    plan.action,
                    detail=f"it may be queued as {ids.get('queue_id')}",
                    step=plan.step,
                )
            )

    def unknown(self, step: Step, why: str) -> dict[str, Any]:
        """An unknown write outcome: never replay, let the core block writes, reconcile."""
        plan = record_of(step)
        if plan.begun and plan.key is not None:
            self.shell.counted(plan.key)
        self.shell.finish(plan, "unknown", detail=why)
        self.shell.move(plan, "maybe-made")
        return self.reconcile(plan, why=why)

    def reconcile(self, plan: CallRecord, *, why: str) -> dict[str, Any]:
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
            if self.shell.move(plan, "found", result=found) and plan.key is not None:
                # The outcome is known now: it no longer counts as uncertain.
                self.shell.settled_key(plan.key)
        elif checked:
            # Not found is not proof of absence (a lagging index): it stays unresolved
            # until an operator decides (RunGuard.resolve).
            self.shell.move(plan, "not-found")
        return unknown_result(
            spec.name,
            plan.key,
            why=why,
            found=found,
            checked=checked,
            writes_blocked=self.shell.writes_blocked is not None,
        )

    def _actual_cost(self, plan: CallRecord, result: Any) -> Decimal | None:
        """What a call that returned cost, by its tool's ``actual_cost``; ``None``: as held."""
        read = plan.spec.actual_cost
        if read is None or not plan.reservation:
            return None
        try:
            found = read(result)
            return None if found is None else amount_of(found, f"{plan.spec.name}.actual_cost")
        except Exception as exc:  # noqa: BLE001 - an unreadable cost spends what was held
            hook_failed(f"the actual cost of {plan.spec.name} could not be read", exc)
            return None

    def _observe_retry(self, plan: CallRecord, result: Any) -> None:
        self.observed(plan.fingerprint, result)

    def observed(self, fingerprint: str, result: Any) -> None:
        """Remember whether the action's attempt ended in a failure worth retrying."""
        retryable = failed_retryably(result)
        with self.shell.lock:
            self.shell.retries = observe(
                self.shell.retries, fingerprint, retryable_failure=retryable
            )


@dataclasses.dataclass(frozen=True, slots=True)
class _Down:
    """A failure that leaves the dependency out: its unavailable result, and why."""

    result: dict[str, Any]
    reason: str


def _classify(exc: BaseException) -> Verdict:
    try:
        return classify_exception(exc)
    except Exception:  # noqa: BLE001 - never raises by contract; fail closed anyway
        return Verdict("ambiguous", "classifier-error")
