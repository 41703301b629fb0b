"""The settle flow, built alone: a call's outcome to the journal's move and the answer.

:class:`Settle` is a part of a run guard with an explicit constructor (the run's shell);
here it settles hand-made calls, no guard and no begin flow around it. Each row is a
tool, how its call ended, and what the journal must say of the write and the model read.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolbreaker.core._run.budget import Budget
from toolbreaker.core._run.fingerprint import FingerprintRules
from toolbreaker.runtime._flow import drive
from toolbreaker.runtime._run._settle import Settle
from toolbreaker.runtime._run._shell import CallRecord, RunShell
from toolbreaker.runtime._run._tools import GuardedTool
from toolbreaker.runtime._step import Step
from toolbreaker.stores import MemoryStore

KEY = "create_ticket:k-1"


def _settle() -> Settle:
    shell = RunShell(
        None,
        task="t-1",
        budget=Budget(),
        journal=MemoryStore(),
        clock=lambda: 0,
        rules=FingerprintRules.default(),
    )
    return Settle(shell)


def _write(**options: Any) -> GuardedTool:
    return GuardedTool("create_ticket", lambda **_: None, risk="reversible_write", **options)


def _begun(settle: Settle, spec: GuardedTool) -> Step:
    """A write as the begin flow leaves it: journaled pending, its step running."""
    key = KEY if spec.risk != "read" else None
    call = CallRecord(spec, "fp-1", key, {"title": "Printer"}, risk=spec.risk)  # type: ignore[arg-type]
    if key is not None:
        assert settle.shell.move(call, "attempt")
    return Step(settle, spec.name, dict(call.args), idempotency_key=key, plan=call)


def _journaled(settle: Settle) -> str | None:
    entry = settle.shell.journal.journal_get("t-1", KEY)
    return None if entry is None else entry["status"]


def test_a_write_whose_result_proves_it_is_confirmed_with_its_result():
    settle = _settle()
    step = _begun(settle, _write())
    assert step.succeeded({"id": "T-1"}) == {"id": "T-1"}
    entry = settle.shell.journal.journal_get("t-1", KEY)
    assert entry is not None
    assert (entry["status"], entry["result"]) == ("confirmed", {"id": "T-1"})
    assert step.failure is None


def test_a_write_its_check_does_not_verify_is_unknown_never_confirmed():
    settle = _settle()
    step = _begun(settle, _write(verify=lambda _result: False))
    answer = step.succeeded({"id": "T-1"})
    assert answer["outcome_unknown"] is True
    assert answer["idempotency_key"] == KEY
    assert (_journaled(settle), step.failure) == ("unknown", "unverified")


@pytest.mark.parametrize(
    ("exc", "status", "unknown"),
    [
        (TimeoutError("cut off"), "unknown", True),  # it may have committed
        (ConnectionRefusedError(111, "refused"), "failed", False),  # it was never sent
    ],
)
def test_a_failed_write_is_unknown_when_it_may_have_committed(exc, status, unknown):
    settle = _settle()
    step = _begun(settle, _write())
    answer = step.failed(exc)
    assert answer["ok"] is False
    assert answer.get("outcome_unknown", False) is unknown
    assert _journaled(settle) == status


def test_an_unknown_write_the_status_check_finds_is_confirmed():
    settle = _settle()
    step = _begun(settle, _write(reconcile=lambda key, _args: {"id": "T-1", "ref": key}))
    answer = step.failed(TimeoutError("cut off"))
    assert answer["reconciled"] == {"id": "T-1", "ref": KEY}
    assert _journaled(settle) == "confirmed"


def test_a_read_that_failed_is_retryable_and_journals_nothing():
    settle = _settle()
    step = _begun(settle, GuardedTool("search", lambda **_: None))
    answer = step.failed(ConnectionRefusedError(111, "refused"))
    assert (answer["ok"], answer["retryable"]) == (False, True)
    assert settle.shell.journal.journal_entries("t-1") == []


def test_the_flow_is_one_generator_for_both_twins():
    """The sync owner callback drives the same flow the async one awaits."""
    settle = _settle()
    step = _begun(settle, _write())
    step.claim()
    assert drive(settle.settle_success(step, {"id": "T-2"})) == {"id": "T-2"}
    assert _journaled(settle) == "confirmed"
