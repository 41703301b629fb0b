"""Breaker.admit: the one admission-and-retries interface its own paths and a run guard use."""

from __future__ import annotations

import asyncio

from toolbreaker import Breaker, Policy, RetryPolicy, RunGuard, scope
from toolbreaker.runtime import Permit, Rejection


def retrying_breaker(**options) -> Breaker:
    return Breaker(
        "svc",
        timeout=1.0,
        enforce="cooperative",
        retry=RetryPolicy(max_attempts=1, budget=2),
        policy=Policy(failure_threshold=50),
        **options,
    )


def test_a_retry_spends_the_budget_and_is_refused_once_it_is_spent():
    """admit(retry=True) spends one retry per call; with none left the answer is a
    retry-budget rejection worded for the tool; admit() alone never spends."""
    breaker = retrying_breaker()
    first = breaker.admit()
    assert isinstance(first, Permit)
    first.record("success")
    assert breaker.retry_budget.retries == 2
    for _ in range(2):
        permit = breaker.admit(retry=True)
        assert isinstance(permit, Permit)
        permit.record("success")
    refused = breaker.admit(retry=True)
    assert isinstance(refused, Rejection)
    assert refused.reason == "retry-budget"
    answer = refused.result_for("search")
    assert answer["tool_unavailable"] is True
    assert answer["tool"] == "search"
    assert breaker.stats.retries == {"model-retry": 2, "model-retry-refused": 1}


def test_aadmit_answers_as_admit_does():
    """The event-loop twin spends and refuses the same way."""
    breaker = retrying_breaker()

    async def go() -> list[str]:
        seen = []
        for _ in range(3):
            admission = await breaker.aadmit(retry=True)
            seen.append(admission.reason if isinstance(admission, Rejection) else "admitted")
            if isinstance(admission, Permit):
                await admission.arecord("success")
        return seen

    assert asyncio.run(go()) == ["admitted", "admitted", "retry-budget"]


def test_a_retry_succeeded_refills_the_budget():
    """retry_succeeded() is what a success does to the budget, for every caller."""
    breaker = retrying_breaker()
    breaker.admit(retry=True).record("success")
    before = breaker.retry_budget.milli
    breaker.retry_succeeded()
    assert breaker.retry_budget.milli > before


def test_a_run_guard_spends_the_tenant_breakers_budget_on_a_scoped_row():
    """A model re-issuing a failed call through a scoped row spends the budget of the
    tenant's breaker, the one that admits it (as the breaker's own begin() does), not the
    row's; before, the guard spent the row's and left the tenant's full."""
    row = retrying_breaker(scope="tenant")
    guard = RunGuard("t-scoped")

    @guard.tool(breaker=row)
    def lookup(q: str) -> dict:
        raise ConnectionRefusedError(111, "refused")

    with scope(tenant="acme"):
        first = lookup(q="x")
        assert first["retryable"] is True
        lookup(q="x")  # the model retries: one retry spent
    tenant = row.scopes()["acme"]
    assert tenant.retry_budget.retries == 1
    assert row.retry_budget.retries == 2
