"""The retry ledger, a part of ``Breaker``: the retry budget and the model's re-calls.

Built alone, with a memory store and its own counters: what it pays, refills, refuses and
remembers, and that a row without a retry policy keeps nothing.
"""

from __future__ import annotations

import asyncio

from toolbreaker.core._retry import Failure, RetryBudget, RetryPolicy, start
from toolbreaker.runtime._breaker._ledger import RetryLedger
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.stores._memory import MemoryStore

POLICY = RetryPolicy(max_attempts=3, base_ms=10, budget=2)


def ledger(retry: RetryPolicy | None = POLICY) -> tuple[RetryLedger, BreakerStats, list[int]]:
    stats = BreakerStats()
    faults: list[int] = []
    return (
        RetryLedger("search", retry, MemoryStore(), stats, lambda: faults.append(1)),
        stats,
        faults,
    )


def test_without_a_retry_policy_it_keeps_nothing_and_allows_every_re_call():
    """No policy: no budget, every model re-call may go ahead, nothing is counted."""
    part, stats, _ = ledger(None)
    assert part.budget is None
    assert not part.keeps
    assert part.spend()
    part.observe("search", {"q": "x"}, retryable=True)
    assert not part.retried("search", {"q": "x"})
    assert stats.retries == {}


def test_the_models_re_calls_spend_the_budget_until_it_refuses():
    """Each re-call spends one retry; an empty budget refuses, and both are counted."""
    part, stats, _ = ledger()
    assert part.budget == RetryBudget.full(POLICY)
    assert [part.spend(), part.spend(), part.spend()] == [True, True, False]
    assert stats.retries == {"model-retry": 2, "model-retry-refused": 1}
    assert part.budget == RetryBudget(0)


def test_a_success_refills_a_tenth_of_a_retry():
    """Successes give back ``budget_refill_percent`` of a retry each."""
    part, _, _ = ledger()
    part.spend()
    part.spend()
    for _ in range(10):
        part.succeeded()
    assert part.budget == RetryBudget(1000)


def test_a_failed_call_issued_again_is_a_retry_until_it_succeeds():
    """A call whose last attempt failed retryably is a retry when issued again; after
    a success (or a failure no retry can fix) it is a new call."""
    part, _, _ = ledger()
    call = {"q": "cable"}
    assert not part.retried("search", call)
    part.observe("search", call, retryable=True)
    assert part.retried("search", call)
    assert not part.retried("search", {"q": "other"})
    part.ended("search", call)
    assert not part.retried("search", call)
    part.observe("search", call, retryable=False)
    assert not part.retried("search", call)


def test_decide_pays_the_budget_and_counts_the_decision():
    """The retry core's decision on a failed attempt is paid from the same bucket."""
    part, stats, _ = ledger()
    state = start(0, 7)
    failure = Failure(at=0, kind="failure", detail="http-503", status=503)
    new, decision, before = part.decide(state, failure, None)
    assert decision.retry
    assert before == RetryBudget.full(POLICY)
    assert part.budget == RetryBudget(1000)
    assert new.attempts == state.attempts + 1
    assert stats.retries == {"retry": 1}


def test_a_new_policy_brings_a_full_budget_of_its_own():
    """``use`` follows a new row's retry policy from a full bucket; ``None`` drops it."""
    part, _, _ = ledger()
    part.spend()
    bigger = RetryPolicy(max_attempts=3, base_ms=10, budget=5)
    part.use(bigger)
    assert part.policy == bigger
    assert part.budget == RetryBudget.full(bigger)
    part.use(None)
    assert part.budget is None


def test_the_async_spend_is_the_sync_one_for_a_budget_of_this_process():
    """``aspend`` pays the same bucket (inline: a memory store's budget is this process's)."""
    part, stats, _ = ledger()
    assert asyncio.run(part.aspend())
    assert part.spend()
    assert not asyncio.run(part.aspend())
    assert stats.retries == {"model-retry": 2, "model-retry-refused": 1}
