"""The plan of one call, as pure functions: a table of calls and run states to the plan.

:func:`intent_of` reads a call (its class, fingerprint, write key, declared cost) or
refuses it; :func:`plan_call` turns the run machine's decision and the write's journal
entry into one frozen value: an answer, a reconcile check, or a run. No guard, no store,
no clock: each row is a call and a state, and the plan the guard must carry out.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

from toolbreaker.core._run.budget import Stop
from toolbreaker.core._run.fingerprint import FingerprintRules, fingerprint, write_key
from toolbreaker.core._run.machine import RunDecision
from toolbreaker.runtime._result import (
    deferred_result,
    denied_result,
    handoff_result,
    over_budget_result,
    queued_result,
    stopped_result,
    tool_stopped_result,
)
from toolbreaker.runtime._run._journal import step_of
from toolbreaker.runtime._run._plan import Answer, Intent, Reconcile, Run, intent_of, plan_call
from toolbreaker.runtime._run._tools import GuardedTool

RULES = FingerprintRules.default()
ARGS = {"customer": "c-7", "title": "Printer"}


def _tool(**options: Any) -> GuardedTool:
    return GuardedTool("create_ticket", lambda **_: None, **options)


READ = _tool()
WRITE = _tool(risk="reversible_write")
WRITE_NO_ARG = _tool(risk="reversible_write", idempotency_arg=None)
IRREVERSIBLE = _tool(risk="irreversible", authorize=lambda _request: True)
IRREVERSIBLE_BY_ARGS = _tool(risk=lambda _args: "irreversible")
STOP = Stop("max-tool-calls", "tool call 3 exceeds max_tool_calls=2", 10)


def _intent(spec: GuardedTool) -> Intent:
    found = intent_of(spec, dict(ARGS), rules=RULES, task="t-1", steps=0)
    assert isinstance(found, Intent)
    return found


# -- intent_of: what a call is, or why it cannot be told ----------------------------------


def test_a_read_has_a_fingerprint_and_no_key():
    assert _intent(READ) == Intent(
        READ, ARGS, fingerprint("create_ticket", ARGS, RULES), None, "read"
    )


def test_a_write_is_keyed_by_its_task_and_action():
    intent = _intent(WRITE)
    assert intent.risk == "reversible_write"
    assert intent.key == write_key("create_ticket", ARGS, None, task="t-1", rules=RULES)


def test_a_write_whose_class_is_a_function_of_its_arguments_is_keyed_per_step():
    spec = _tool(risk=lambda _args: "reversible_write")
    third = intent_of(spec, dict(ARGS), rules=RULES, task="t-1", steps=2)
    fourth = intent_of(spec, dict(ARGS), rules=RULES, task="t-1", steps=3)
    assert isinstance(third, Intent)
    assert isinstance(fourth, Intent)
    assert third.key is not None
    assert fourth.key is not None
    assert third.key != fourth.key


def test_a_declared_cost_is_reserved():
    assert _intent(_tool(cost="0.25")).reserve == Decimal("0.25")
    assert _intent(_tool(cost=lambda args: len(args["title"]))).reserve == Decimal(7)


def _raise(*_args: Any) -> Any:
    raise RuntimeError("no class today")


@pytest.mark.parametrize(
    ("spec", "args", "reason"),
    [
        (_tool(risk=_raise), ARGS, "risk-unknown"),
        (_tool(risk=lambda _args: "sideways"), ARGS, "risk-unknown"),
        (READ, {"at": object()}, "invalid-arguments"),
        (_tool(cost=_raise), ARGS, "cost-unknown"),
    ],
)
def test_a_call_that_cannot_be_told_is_refused_before_it_is_counted(spec, args, reason):
    found = intent_of(spec, args, rules=RULES, task="t-1", steps=0)
    assert isinstance(found, Answer)
    assert (found.reason, found.refused) == (reason, True)
    assert found.result["ok"] is False
    assert found.result["retryable"] is False


# -- plan_call: the run machine's decision and the journal entry, to what the guard does --


def _decided(verdict: str, **fields: Any) -> RunDecision:
    return RunDecision(verdict, **fields)  # type: ignore[arg-type]


def _plan(
    spec: GuardedTool,
    decision: RunDecision,
    entry: dict[str, Any] | None = None,
    *,
    writes_blocked: bool = False,
    turn_limit: int | None = None,
) -> object:
    intent = _intent(spec)
    return plan_call(intent, decision, entry, writes_blocked=writes_blocked, turn_limit=turn_limit)


def test_a_read_the_machine_lets_through_runs_with_its_arguments():
    assert _plan(READ, _decided("run")) == Run(ARGS)


def test_a_write_runs_with_its_key_in_its_key_argument():
    key = _intent(WRITE).key
    assert _plan(WRITE, _decided("run")) == Run({**ARGS, "idempotency_key": key})
    assert _plan(_tool(risk="reversible_write", idempotency_arg="op_id"), _decided("run")) == Run(
        {**ARGS, "op_id": key}
    )
    assert _plan(WRITE_NO_ARG, _decided("run")) == Run(ARGS)


def test_an_irreversible_call_runs_only_if_its_authority_check_approves():
    planned = _plan(IRREVERSIBLE, _decided("run"))
    assert isinstance(planned, Run)
    assert planned.denied == Answer(denied_result("create_ticket"), "denied")


def test_an_irreversible_call_of_a_tool_without_a_check_is_denied_as_an_error():
    planned = _plan(IRREVERSIBLE_BY_ARGS, _decided("run"))
    assert isinstance(planned, Run)
    assert planned.denied is not None
    assert planned.denied.reason == "denied"
    assert "has no authorize check" in planned.denied.result["error"]
    assert planned.denied.result["retryable"] is False


def test_a_confirmed_write_is_answered_from_the_journal_never_run():
    entry = {"status": "confirmed", "result": {"id": "T-1"}}
    assert _plan(WRITE, _decided("journal"), entry) == Answer(
        {"id": "T-1"}, "journal", refused=False
    )
    kept_none = _plan(WRITE, _decided("journal"), {"status": "confirmed"})
    assert kept_none == Answer({"ok": True, "deduplicated": True}, "journal", refused=False)


@pytest.mark.parametrize(
    ("entry", "queue", "maybe"),
    [
        ({"status": "queued", "queue_id": "q-1"}, "q-1", False),
        ({"status": "maybe-queued", "queue_id": "q-2"}, "q-2", True),
        ({"status": "queued"}, "unknown", False),
    ],
)
def test_a_queued_write_is_answered_as_queued(entry, queue, maybe):
    key = _intent(WRITE).key
    assert key is not None
    expected = queued_result("create_ticket", queue, key, already=True, maybe=maybe)
    assert _plan(WRITE, _decided("queued"), entry) == Answer(expected, "queued", refused=False)


def test_a_handed_off_write_is_answered_with_its_packet():
    entry = {"status": "handed-off", "reconciliation_id": "r-9", "tool": "create_ticket"}
    expected = handoff_result("create_ticket", "r-9", step_of(entry))
    assert _plan(WRITE, _decided("handed-off"), entry) == Answer(
        expected, "handed-off", refused=False
    )


def test_an_unknown_earlier_attempt_is_reconciled_first():
    entry = {"status": "unknown"}
    assert _plan(WRITE, _decided("reconcile"), entry) == Reconcile(
        "an earlier attempt's outcome is unknown"
    )


def test_a_call_over_the_turn_limit_is_deferred_and_says_so():
    expected = Answer(deferred_result("create_ticket", limit=2), "deferred", deferred=2)
    assert _plan(READ, _decided("deferred"), turn_limit=2) == expected


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (
            _decided("over-budget", stop=STOP, left="0.10"),
            Answer(over_budget_result("create_ticket", STOP, left="0.10"), "over-budget"),
        ),
        (
            _decided("tool-stopped", stop=STOP),
            Answer(tool_stopped_result("create_ticket", STOP), "max-tool-calls"),
        ),
    ],
)
def test_a_refusal_answers_with_its_stop(decision, expected):
    assert _plan(READ, decision) == expected


@pytest.mark.parametrize("writes_blocked", [False, True])
@pytest.mark.parametrize("verdict", ["stopped", "writes-blocked"])
def test_a_stopped_run_or_blocked_writes_answer_with_the_stop(verdict, writes_blocked):
    planned = _plan(WRITE, _decided(verdict, stop=STOP), writes_blocked=writes_blocked)
    answer = stopped_result(
        STOP, writes_blocked=writes_blocked, writes_only=verdict == "writes-blocked"
    )
    assert planned == Answer(answer, "max-tool-calls")


def test_every_plan_is_a_frozen_value():
    planned = _plan(WRITE, _decided("run"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        planned.args = {}  # type: ignore[attr-defined]
