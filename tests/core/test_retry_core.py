"""The retry machine: decisions, the retry budget, and exact replay (unit + hypothesis)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker.core._retry import (
    Failure,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    RetryRecord,
    decide,
    is_transient,
    refill,
    remaining_ms,
    replay,
    start,
)
from toolbreaker.errors import PolicyError, TraceError

POLICY = RetryPolicy(max_attempts=3, base_ms=100, max_backoff_ms=1_000, deadline_ms=10_000)
FULL = RetryBudget.full(POLICY)


def fail(at: int = 10, detail: str = "http-503", **kw: object) -> Failure:
    kind = kw.pop("kind", "failure")
    return Failure(at=at, kind=str(kind), detail=detail, **kw)  # type: ignore[arg-type]


def test_a_transient_failure_is_retried_after_a_jittered_backoff() -> None:
    """A 503 on the first attempt is retried after a wait within the first backoff."""
    state, budget, decision = decide(start(0, seed=7), fail(), POLICY, FULL)
    assert decision.retry
    assert 0 <= decision.wait_ms <= 100
    assert state.attempts == 2
    assert budget.milli == FULL.milli - 1000


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (fail(run_stopped=True), "run-stopped"),
        (fail(breaker_open=True), "breaker-open"),
        (fail(detail="quota-exhausted", status=429), "quota-exhausted"),
        (fail(detail="timeout", may_have_committed=True), "outcome-unknown"),
        (fail(detail="validation", kind="ignored"), "not-retryable"),
        (fail(detail="http-401", kind="ignored", status=401), "not-retryable"),
        (fail(detail="cancelled", kind="ignored"), "not-retryable"),
        (fail(retry_after_ms=120_000), "hint-too-long"),
    ],
)
def test_refusals_name_their_reason(failure: Failure, reason: str) -> None:
    """Each refusal is its own reason and spends nothing."""
    state = start(0, seed=1)
    new, budget, decision = decide(state, failure, POLICY, FULL, max_retry_after_ms=60_000)
    assert decision.reason == reason
    assert new == state
    assert budget == FULL


def test_408_and_429_are_transient_other_4xx_are_not() -> None:
    """408 (ignored by the breaker) is still worth a retry; 404 is not; a spent quota is not."""
    assert is_transient("ignored", "http-408", 408)
    assert is_transient("failure", "http-429", 429)
    assert not is_transient("ignored", "http-404", 404)
    assert not is_transient("failure", "quota-exhausted", 429)


def test_an_idempotent_operation_may_be_replayed_after_an_unknown_outcome() -> None:
    """``idempotent`` lifts the unknown-outcome refusal (reads, keyed writes)."""
    policy = RetryPolicy(idempotent=True)
    _, _, decision = decide(
        start(0, 1), fail(detail="timeout", may_have_committed=True), policy, RetryBudget(10_000)
    )
    assert decision.retry


def test_attempts_stop_at_the_maximum() -> None:
    """``max_attempts`` counts the first attempt."""
    state = start(0, 3)
    budget = FULL
    reasons = []
    for at in (10, 500, 2_000):
        state, budget, decision = decide(state, fail(at=at), POLICY, budget)
        reasons.append(decision.reason)
    assert reasons == ["retry", "retry", "max-attempts"]


def test_a_hint_longer_than_the_backoff_is_waited_out() -> None:
    """The server's Retry-After wins over a shorter backoff."""
    _, _, decision = decide(start(0, 3), fail(retry_after_ms=900), POLICY, FULL)
    assert decision.wait_ms == 900


def test_a_wait_past_the_deadline_is_refused() -> None:
    """The end-to-end deadline covers the wait: no retry that would start after it."""
    _, _, decision = decide(start(0, 3), fail(at=9_950, retry_after_ms=100), POLICY, FULL)
    assert decision.reason == "deadline"
    assert remaining_ms(start(0, 3), 9_950, POLICY) == 50


def test_an_empty_budget_refuses_and_successes_refill_it() -> None:
    """Retries spend whole tokens; each success gives back a tenth (by default)."""
    empty = RetryBudget(999)
    _, after, decision = decide(start(0, 3), fail(), POLICY, empty)
    assert decision.reason == "budget-exhausted"
    assert after == empty
    refilled = refill(empty, POLICY)
    assert refilled.milli == 1_099
    _, _, decision = decide(start(0, 3), fail(), POLICY, refilled)
    assert decision.retry
    assert refill(FULL, POLICY) == FULL


def test_decorrelated_jitter_stays_between_base_and_cap() -> None:
    """Decorrelated waits grow from the previous one and stay in [base, cap]."""
    policy = RetryPolicy(
        max_attempts=20, base_ms=50, max_backoff_ms=400, jitter="decorrelated", deadline_ms=10**9
    )
    state, budget = start(0, 99), RetryBudget(10**9)
    for at in range(1, 19):
        state, budget, decision = decide(state, fail(at=at), policy, budget)
        assert 50 <= decision.wait_ms <= 400


def test_decorrelated_jitter_spreads_the_first_retry() -> None:
    """Callers that fail together do not retry together: the first decorrelated wait is
    drawn from ``[base, 3 * base]`` by each operation's seed, not ``base`` for everyone."""
    policy = RetryPolicy(base_ms=100, max_backoff_ms=5_000, jitter="decorrelated")
    waits = {decide(start(0, seed), fail(), policy, FULL)[2].wait_ms for seed in range(64)}
    assert all(100 <= wait <= 300 for wait in waits)
    assert len(waits) > 32  # 64 seeds over 201 possible waits
    assert max(waits) > 250
    capped = RetryPolicy(base_ms=100, max_backoff_ms=150, jitter="decorrelated")
    assert all(
        100 <= decide(start(0, seed), fail(), capped, FULL)[2].wait_ms <= 150 for seed in range(64)
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 0),
        ("base_ms", -1),
        ("jitter", "none"),
        ("idempotent", 1),
        ("budget_refill_percent", 101),
        ("max_backoff_ms", 10),
    ],
)
def test_bad_policies_name_the_field(field: str, value: object) -> None:
    """A bad retry table is a PolicyError naming its field."""
    with pytest.raises(PolicyError) as err:
        RetryPolicy(**{field: value})  # type: ignore[arg-type]
    assert err.value.field == field


def test_unknown_retry_fields_are_refused() -> None:
    """A typo in the sheet's retry table is an error, not a silently ignored key."""
    with pytest.raises(PolicyError, match="max_attempt"):
        RetryPolicy.from_dict({"max_attempt": 3})


def test_seeds_outside_64_bits_are_refused() -> None:
    """The seed is a 64-bit unsigned integer (it travels in JSON)."""
    with pytest.raises(TraceError):
        start(0, -1)


def test_records_round_trip_through_json_and_replay_exactly() -> None:
    """A recorded operation replays to the same decisions from its seed."""
    state, budget = start(5, 12345), FULL
    records = []
    for failure in (fail(at=20), fail(at=300, retry_after_ms=250), fail(at=900)):
        before = budget.milli
        state, budget, decision = decide(state, failure, POLICY, budget)
        records.append(RetryRecord("search", "op-1", 12345, 5, failure, before, decision))
    lines = [json.dumps(r.to_dict()) for r in records]
    loaded = [RetryRecord.from_dict(json.loads(line)) for line in lines]
    assert replay(loaded, POLICY) == [r.decision for r in records]
    assert [d.reason for d in replay(loaded, POLICY)] == ["retry", "retry", "max-attempts"]


def test_a_foreign_record_is_a_trace_error() -> None:
    """Only toolbreaker.retry/v1 records are read."""
    with pytest.raises(TraceError):
        RetryRecord.from_dict({"schema": "other"})


# ---------------------------------------------------------------------------
# Properties

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 8),
    base_ms=st.integers(1, 200),
    max_backoff_ms=st.just(2_000),
    jitter=st.sampled_from(["full", "decorrelated"]),
    deadline_ms=st.integers(1, 20_000),
    budget=st.integers(0, 20),
    budget_refill_percent=st.integers(1, 100),
    idempotent=st.booleans(),
)
failures = st.builds(
    Failure,
    at=st.just(0),
    kind=st.sampled_from(["failure", "ambiguous", "ignored"]),
    detail=st.sampled_from(["http-503", "timeout", "validation", "quota-exhausted", "http-408"]),
    status=st.sampled_from([None, 408, 429, 503]),
    retry_after_ms=st.one_of(st.none(), st.integers(0, 5_000)),
    may_have_committed=st.booleans(),
    breaker_open=st.booleans(),
    run_stopped=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    policy=policies,
    seed=st.integers(0, 2**64 - 1),
    script=st.lists(st.tuples(failures, st.integers(0, 3_000)), min_size=1, max_size=12),
    cap=st.one_of(st.none(), st.integers(0, 5_000)),
)
def test_retries_never_exceed_attempts_deadline_or_open_breaker(
    policy: RetryPolicy,
    seed: int,
    script: list[tuple[Failure, int]],
    cap: int | None,
) -> None:
    """Driving an operation like a shell does never makes more than ``max_attempts``
    attempts, never starts one at or past the deadline, never retries while the breaker
    is open or the run is stopped, never replays an unknown outcome of a non-idempotent
    operation, and never spends a token it does not have; the same seed decides the same.
    """
    state = start(0, seed)
    budget = RetryBudget.full(policy)
    now = 0
    attempts = 1
    decisions: list[RetryDecision] = []
    records = []
    for failure, took in script:
        now += took
        observed = dataclasses.replace(failure, at=now)
        before = budget
        state, budget, decision = decide(state, observed, policy, budget, max_retry_after_ms=cap)
        decisions.append(decision)
        records.append(RetryRecord("d", "op", seed, 0, observed, before.milli, decision))
        assert budget.milli >= 0
        if not decision.retry:
            assert budget == before
            break
        assert not observed.breaker_open
        assert not observed.run_stopped
        assert not (observed.may_have_committed and not policy.idempotent)
        assert observed.detail != "quota-exhausted"
        assert before.milli - budget.milli == 1000
        now += decision.wait_ms
        assert now < policy.deadline_ms
        attempts += 1
        assert attempts <= policy.max_attempts
    assert replay(records, policy, max_retry_after_ms=cap) == decisions
