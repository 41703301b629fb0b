"""The retry loop, a part of ``Breaker``: one plan, a blocking and an awaited driver.

Built alone with a ledger, a fake clock and a failure judge: both drivers make the same
attempts, wait the same waits and give up at the same point, and a retry listener that
raises never changes the outcome.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from toolbreaker.core._retry import Failure, RetryPolicy, RetryRecord
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._breaker._ledger import RetryLedger
from toolbreaker.runtime._breaker._retries import Retries
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.testing import FakeClock


class Unavailable(Exception):
    """A transient failure."""


def part(budget: int = 5) -> tuple[Retries, FakeClock, BreakerStats, list[float]]:
    clock = FakeClock()
    stats = BreakerStats()
    policy = RetryPolicy(max_attempts=3, base_ms=10, budget=budget)
    ledger = RetryLedger("search", policy, MemoryStore(), stats, lambda: None)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds=seconds)

    loop = Retries("search", ledger, clock, itertools.count(1), seed=7, sleep=sleep, stats=stats)
    return loop, clock, stats, waits


def failure_of(clock: FakeClock) -> Any:
    def judge(exc: BaseException) -> Failure:
        return Failure(at=clock(), kind="failure", detail="http-503", status=503)

    return judge


def attempts(outcomes: list[str]) -> Any:
    left = list(outcomes)

    def attempt(seconds: float) -> str:
        assert 0 < seconds <= 5.0
        if left.pop(0) == "fail":
            raise Unavailable("503")
        return "ok"

    return attempt


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_retries_until_an_attempt_succeeds(twin):
    """Two failures and a success: three attempts, two waits, the success returned."""
    loop, clock, stats, waits = part()
    attempt = attempts(["fail", "fail", "ok"])
    if twin == "sync":
        result = loop.run(attempt, 5_000, failure_of(clock), None)
    else:

        async def aattempt(seconds: float) -> str:
            return attempt(seconds)

        result = asyncio.run(loop.arun(aattempt, 5_000, failure_of(clock), None))
    assert result == "ok"
    assert len(waits) == 2
    assert stats.retries == {"retry": 2}


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_the_last_attempts_failure_is_raised(twin):
    """Every attempt failed: the last failure is raised after ``max_attempts``."""
    loop, clock, stats, _ = part()
    attempt = attempts(["fail", "fail", "fail"])

    async def aattempt(seconds: float) -> str:
        return attempt(seconds)

    def drive() -> str:
        if twin == "sync":
            return loop.run(attempt, 5_000, failure_of(clock), None)
        return asyncio.run(loop.arun(aattempt, 5_000, failure_of(clock), None))

    with pytest.raises(Unavailable):
        drive()
    assert sum(stats.retries.values()) == 3  # two retries and the final "no"
    assert stats.retries["retry"] == 2


def test_a_local_rejection_is_never_retried():
    """A ``CircuitOpen`` means nothing was attempted: raised at once, nothing decided."""
    loop, clock, stats, waits = part()

    def rejected(seconds: float) -> str:
        raise CircuitOpen("search", "open", 1_000, lambda *a, **k: {})

    with pytest.raises(CircuitOpen):
        loop.run(rejected, 5_000, failure_of(clock), None)
    assert waits == []
    assert stats.retries == {}


def test_a_retry_listener_that_raises_changes_nothing():
    """Every decision reaches the listeners; one that raises is counted, the call stands."""
    loop, clock, stats, _ = part()
    heard: list[RetryRecord] = []
    loop.listeners.append(heard.append)
    loop.listeners.append(lambda record: 1 / 0)  # type: ignore[func-returns-value]
    assert loop.run(attempts(["fail", "ok"]), 5_000, failure_of(clock), None) == "ok"
    assert [r.decision.retry for r in heard] == [True]
    assert stats.listener_errors == 1
