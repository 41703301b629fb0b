"""Properties of the retry budget's core rules, which the shared budget relies on.

A shared budget applies a process's pending successes one ``refill`` at a time and then
lets ``spend`` or ``decide`` pay; compare-and-set makes the fleet's operations one
sequence. These properties say that sequence never overspends.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._retry import Failure, RetryBudget, RetryPolicy, decide, refill, spend, start

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(2, 5),
    budget=st.integers(0, 20),
    budget_refill_percent=st.integers(1, 100),
    deadline_ms=st.just(10**9),
)


@given(policies, st.integers(0, 20_000), st.integers(0, 300))
def test_refills_one_by_one_are_a_capped_sum(policy, milli, k):
    """``k`` refills in a row give ``min(capacity, milli + k * step)``: pending successes
    may be applied in one go before a decision without changing the result."""
    capacity = policy.budget * 1000
    bucket = RetryBudget(min(milli, capacity))
    for _ in range(k):
        bucket = refill(bucket, policy)
    step = policy.budget_refill_percent * 1000 // 100
    assert bucket.milli == min(capacity, min(milli, capacity) + k * step)


@given(policies, st.lists(st.sampled_from(["spend", "retry", "success"]), max_size=200))
def test_any_sequence_never_overspends(policy, ops):
    """Whatever the order of spends, retry decisions and successes, the bucket stays in
    ``[0, capacity]`` and the retries paid never exceed the capacity plus what the
    successes earned."""
    bucket = RetryBudget.full(policy)
    capacity = bucket.milli
    paid = earned = 0
    for n, op in enumerate(ops):
        if op == "spend":
            bucket, allowed = spend(bucket)
            paid += allowed
        elif op == "retry":
            failure = Failure(at=1, kind="failure", detail="http-503", status=503)
            _, bucket, decision = decide(start(0, n), failure, policy, bucket)
            paid += decision.retry
            assert decision.retry or decision.reason == "budget-exhausted"
        else:
            before = bucket.milli
            bucket = refill(bucket, policy)
            earned += bucket.milli - before
        assert 0 <= bucket.milli <= capacity
    assert paid * 1000 <= capacity + earned
    assert bucket.milli == capacity + earned - paid * 1000
