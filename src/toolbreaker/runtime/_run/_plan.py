"""The plan of one call: what a run guard does with it, decided without I/O.

Two functions, no clock, no store, no lock (a tool's own risk and cost functions are
called, and a failing one logged):

- :func:`intent_of` reads a call: its risk class, its fingerprint, a write's idempotency
  key and its declared cost, as one frozen :class:`Intent`; or refuses it (an
  :class:`Answer`) when one of them cannot be told.
- :func:`plan_call` takes the run machine's decision about the intent and the write's
  journal entry and says what the guard does, as one frozen value: give an
  :class:`Answer` (the journal's result, a queued or handed-off write, a refusal),
  :class:`Reconcile` an earlier attempt first, or :class:`Run` the call (with the
  arguments it runs with, a write's key in its argument, and the answer an irreversible
  call gets if its authority check does not approve it).

The run guard's begin flow (:mod:`._begin`) feeds the run machine, reads the journal and
carries the plan out; it decides nothing the plan says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeAlias

from toolbreaker.core._run import protocol
from toolbreaker.core._run._values import call_risk
from toolbreaker.core._run.budget import WRITES, RiskClass
from toolbreaker.core._run.costs import amount_of
from toolbreaker.core._run.fingerprint import FingerprintRules, action_keys
from toolbreaker.core._run.machine import RunDecision
from toolbreaker.errors import FingerprintError, PolicyError
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._result import (
    deferred_result,
    denied_result,
    error_result,
    handoff_result,
    over_budget_result,
    queued_result,
    stopped_result,
    tool_stopped_result,
)
from toolbreaker.runtime._run._journal import step_of
from toolbreaker.runtime._run._tools import GuardedTool, with_key

__all__ = [
    "Answer",
    "Intent",
    "Plan",
    "Reconcile",
    "Run",
    "intent_of",
    "journaled_result",
    "plan_call",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Intent:
    """A call as the run guard reads it, before the run machine hears of it.

    Attributes:
        spec: the tool.
        args: the call's arguments (without a key the model made up).
        fingerprint: the action's semantic fingerprint.
        key: a write's idempotency key, else ``None``.
        risk: the call's risk class (the tool's, or its risk function's answer).
        reserve: the cost its tool declared (held before it runs), else ``None``.
    """

    spec: GuardedTool
    args: dict[str, Any]
    fingerprint: str
    key: str | None
    risk: RiskClass
    reserve: Decimal | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """Do not run the call: the model reads ``result``.

    Attributes:
        result: what the model reads.
        reason: why (a stop's condition, ``journal``, ``queued``, ``denied`` ...).
        refused: the answer refuses the call; ``False`` when it stands for the call's
            result (a confirmed write's journaled result, a queued write).
        deferred: a call the per-turn limit deferred: the limit (the run's notice says
            so), else ``None``.
    """

    result: Any
    reason: str
    refused: bool = True
    deferred: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Reconcile:
    """An earlier attempt's outcome is unknown: the tool's reconcile check answers."""

    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """Run the call.

    Attributes:
        args: the arguments it runs with (a write's key in its key argument).
        denied: an irreversible call: its authority check must approve it first, and
            this is the answer when it does not; ``None`` for any other call.
    """

    args: dict[str, Any]
    denied: Answer | None = None


#: What the guard does with a call the run machine decided.
Plan: TypeAlias = Answer | Reconcile | Run


def intent_of(
    spec: GuardedTool,
    args: dict[str, Any],
    *,
    rules: FingerprintRules,
    task: str,
    steps: int,
    fingerprint: str | None = None,
) -> Intent | Answer:
    """The call's class, fingerprint, write key and cost; or the answer refusing it.

    Args:
        spec: the tool.
        args: the call's arguments, without a key the model made up.
        rules: the run's fingerprint rules.
        task: the run's task id (a write's key is the task's).
        steps: the run's steps so far: a tool whose risk is a function of its
            arguments and that has no business key keys each write by its step.
        fingerprint: the call's fingerprint when it was worked out already (a read's
            by ``RunGuard.call``'s quiet path, with these ``rules``), else ``None``.
    """
    tool = spec.name
    try:
        risk = call_risk(spec.risk, args, f"{tool}.risk")
    except Exception as exc:  # noqa: BLE001 - a call whose class is unknown never runs
        if not isinstance(exc, PolicyError):
            hook_failed(f"the risk function of {tool} failed; the call is refused", exc)
        return Answer(error_result(tool, exc, retryable=False), "risk-unknown")
    try:
        # A generic tool's write (a shell command) is no business action made once:
        # without a business key, each call is its own write.
        if fingerprint is not None and risk not in WRITES:
            action_fp, key = fingerprint, None
        else:
            action_fp, key = action_keys(
                tool,
                args,
                rules,
                write=risk in WRITES,
                business_key=spec.business_key,
                task=task,
                call=steps + 1 if callable(spec.risk) else None,
            )
    except (FingerprintError, RecursionError) as exc:
        # Arguments that cannot be checked are never run: the guard could neither
        # count them nor give a write its key.
        return Answer(error_result(tool, exc, retryable=False), "invalid-arguments")
    try:
        reserve = _estimate(spec, args)
    except Exception as exc:  # noqa: BLE001 - an unknown cost is never admitted
        hook_failed(f"the cost estimate of {tool} failed; the call is refused", exc)
        return Answer(error_result(tool, exc, retryable=False), "cost-unknown")
    return Intent(spec, args, action_fp, key, risk, reserve)


def plan_call(
    intent: Intent,
    decision: RunDecision,
    entry: Mapping[str, Any] | None,
    *,
    writes_blocked: bool,
    turn_limit: int | None,
) -> Plan:
    """What the guard does with a call the run machine decided.

    Args:
        intent: the call.
        decision: the run machine's decision about it.
        entry: the write's journal entry as read before the decision, else ``None``.
        writes_blocked: the run's writes are blocked now (the state after the decision).
        turn_limit: the budget's ``max_calls_per_turn``.
    """
    tool, key = intent.spec.name, intent.key
    verdict = decision.verdict
    if verdict == "journal":
        # A confirmed write is never executed again (how a resumed task skips work).
        return Answer(journaled_result(entry), "journal", refused=False)
    if verdict == "queued" and key is not None:
        # Queued by the degradation matrix (or maybe): a drainer makes it, not this run.
        queued = protocol.queue_id(entry) or "unknown"
        maybe = protocol.uncertain(protocol.read(entry))
        answer = queued_result(tool, queued, key, already=True, maybe=maybe)
        return Answer(answer, "queued", refused=False)
    if verdict == "handed-off" and key is not None:
        rid = protocol.reconciliation_id(entry) or "unknown"
        return Answer(handoff_result(tool, rid, step_of(entry or {})), "handed-off", refused=False)
    if verdict == "reconcile":
        return Reconcile("an earlier attempt's outcome is unknown")
    stop = decision.stop
    if verdict == "deferred":
        # Not made, not queued: the model reads that it may issue it next turn.
        assert turn_limit is not None
        return Answer(deferred_result(tool, limit=turn_limit), "deferred", deferred=turn_limit)
    if verdict == "over-budget":
        assert stop is not None
        assert decision.left is not None
        return Answer(over_budget_result(tool, stop, left=decision.left), "over-budget")
    if verdict == "tool-stopped":
        assert stop is not None
        return Answer(tool_stopped_result(tool, stop), stop.condition)
    if verdict in ("writes-blocked", "stopped"):
        assert stop is not None
        answer = stopped_result(
            stop, writes_blocked=writes_blocked, writes_only=verdict == "writes-blocked"
        )
        return Answer(answer, stop.condition)
    args = with_key(intent.spec, intent.args, key) if key is not None else intent.args
    return Run(args, _denial(intent) if intent.risk == "irreversible" else None)


def journaled_result(entry: Mapping[str, Any] | None) -> Any:
    """What a write's journal entry says it returned (``None``: no entry).

    A confirmed write whose entry kept no result answers that it was deduplicated.
    """
    if not entry:
        return None
    return entry.get("result", {"ok": True, "deduplicated": True})


def _denial(intent: Intent) -> Answer:
    """What an irreversible call reads when its authority check does not approve it."""
    tool = intent.spec.name
    if intent.spec.authorize is None:  # a tool whose risk is a function of its arguments
        why = PolicyError(f"this call is irreversible and {tool} has no authorize check")
        return Answer(error_result(tool, why, retryable=False), "denied")
    return Answer(denied_result(tool), "denied")


def _estimate(spec: GuardedTool, args: Mapping[str, Any]) -> Decimal | None:
    """The cost a call of ``spec`` reserves: its fixed amount or its estimator's answer."""
    if spec.cost is None:
        return None
    estimate = spec.cost(args) if callable(spec.cost) else spec.cost
    return amount_of(estimate, f"{spec.name}.cost")
