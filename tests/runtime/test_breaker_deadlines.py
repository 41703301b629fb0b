"""The breaker's deadlines: sync calls in a bulkhead that never queues, async calls under
the loop's watchdog (issue 9)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from toolbreaker import Breaker, CircuitOpen, Policy, PolicyError
from toolbreaker.runtime._result import unavailable_result
from toolbreaker.testing import FakeClock

# Room for what should happen at once on a loaded machine; never reached when it works.
PATIENCE = 10.0
# A deadline by which a waiting worker thread surely starts its call, so that the call
# is running (and its worker pinned) when the deadline passes.
STARTS_WITHIN = 0.3


def hang_until(event: threading.Event) -> str:
    assert event.wait(PATIENCE)
    return "late"


def wait_for(condition, what: str) -> None:
    """Poll ``condition`` (a result a worker thread delivers after its caller returned)."""
    give_up = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < give_up, what
        time.sleep(0.005)


def test_calls_answered_at_their_deadline_never_start_later():
    """8 threads call a 2-worker breaker whose calls hang: each caller is answered, and
    once the hung calls are released no queued call starts (on the breaker now open).

    The last step watches for half a second: that a call does *not* start cannot be
    observed sooner; nothing here asserts on a duration.
    """
    hits: list[str] = []
    release = threading.Event()
    late_start = threading.Event()
    breaker = Breaker("search", timeout=0.1, max_workers=2)

    def slow() -> None:
        hits.append(breaker.state.phase)
        if len(hits) > 2:
            late_start.set()
        release.wait(5)

    answers: list[BaseException] = []

    def caller() -> None:
        try:
            breaker.call(slow)
        except (TimeoutError, CircuitOpen) as exc:
            answers.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(answers) == 8
        release.set()
        assert not late_start.wait(0.5), f"queued calls started late: {hits}"
        assert "open" not in hits
        assert len(hits) <= 2
    finally:
        release.set()
        breaker.close()


def test_a_saturated_pool_denies_at_once_and_never_queues():
    """64 threads on a 4-worker breaker whose calls hang: 3 run (one worker is kept for
    probes) and the other 61 are denied with reason ``saturated`` while those 3 still
    hang; the model is told to resubmit after the deadline; the breaker stays closed."""
    breaker = Breaker("search", timeout=30, max_workers=4)
    release = threading.Event()
    started: list[int] = []
    rejections: list[CircuitOpen] = []
    all_rejected = threading.Event()
    lock = threading.Lock()
    barrier = threading.Barrier(64)

    def slow() -> str:
        started.append(1)
        return hang_until(release)

    def caller() -> None:
        barrier.wait()
        try:
            breaker.call(slow)
        except CircuitOpen as exc:
            with lock:
                rejections.append(exc)
                if len(rejections) == 61:
                    all_rejected.set()

    threads = [threading.Thread(target=caller) for _ in range(64)]
    try:
        for thread in threads:
            thread.start()
        assert all_rejected.wait(PATIENCE)
        assert breaker.stats.pinned_workers == 0  # running, within their deadline
    finally:
        release.set()
        for thread in threads:
            thread.join()
        breaker.close()
    assert len(started) == 3
    assert {exc.reason for exc in rejections} == {"saturated"}
    result = rejections[0].result
    assert result["reason"] == "saturated"
    assert result["retry_after_seconds"] == 30
    assert "Resubmit it after 30 seconds" in result["instruction"]
    stats = breaker.stats.to_dict()
    assert (stats["admitted"], stats["rejected"], stats["saturated"]) == (3, 61, 61)
    assert breaker.state.phase == "closed"


def test_hung_calls_do_not_starve_the_probe():
    """A call hung past its deadline pins the only ordinary worker; once the cooldown is
    over the probe still runs, on the worker kept for probes, and closes the breaker."""
    clock = FakeClock()
    breaker = Breaker(
        "search",
        clock=clock,
        timeout=STARTS_WITHIN,
        max_workers=2,
        policy=Policy(failure_threshold=1, success_threshold=1, cooldown_ms=1_000),
    )
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError, match="deadline"):
            breaker.call(hang_until, release)
        assert breaker.state.phase == "open"
        assert breaker.stats.pinned_workers == 1
        clock.advance(1_000)
        assert breaker.call(lambda: "fresh") == "fresh"
        assert breaker.state.phase == "closed"
        with pytest.raises(CircuitOpen) as info:
            breaker.call(lambda: "ordinary")  # its worker is still pinned
        assert info.value.reason == "saturated"
    finally:
        release.set()
    wait_for(lambda: breaker.stats.late_results == 1, "the hung call returned")
    assert breaker.stats.pinned_workers == 0
    assert breaker.call(lambda: "again") == "again"
    breaker.close()


def test_stats_show_pinned_workers_and_saturation():
    """to_dict() carries the saturated counter and the pinned-workers gauge."""
    breaker = Breaker("search", timeout=STARTS_WITHIN, max_workers=1)
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            breaker.call(hang_until, release)
        with pytest.raises(CircuitOpen):
            breaker.call(lambda: None)
        stats = breaker.stats.to_dict()
        assert (stats["pinned_workers"], stats["saturated"]) == (1, 1)
    finally:
        release.set()
        breaker.close()


def test_saturated_wording_is_not_a_provider_failure():
    """The model-facing result for a saturated tool says so and when to resubmit."""
    result = unavailable_result(tool="search", reason="saturated", retry_after_ms=4_500)
    assert result["tool_unavailable"] is True
    assert result["reason"] == "saturated"
    assert result["retry_after_seconds"] == 5
    assert "not a provider failure" in result["instruction"]
    assert "Resubmit it after 5 seconds" in result["instruction"]


def test_max_workers_must_be_positive():
    """A pool without workers could never run a call: refused when configured."""
    with pytest.raises(PolicyError, match="max_workers"):
        Breaker("search", timeout=1, max_workers=0)


def test_async_deadline_is_kept_on_the_quiet_fast_path():
    """Once the breaker is quiet, the default acall still cancels at the deadline (by the
    loop's watchdog) and records a timeout."""
    breaker = Breaker("slow", policy=Policy(failure_threshold=1), timeout=0.02)

    async def hang() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        assert await breaker.acall(asyncio.sleep, 0, "warm") == "warm"
        assert await breaker.acall(asyncio.sleep, 0, "quiet") == "quiet"
        with pytest.raises(TimeoutError):
            await breaker.acall(hang)

    asyncio.run(main())
    assert breaker.state.phase == "open"
    assert breaker.stats.failures == {"timeout": 1}


def test_a_write_refused_by_a_saturated_bulkhead_is_not_an_unknown_outcome():
    """Through a run guard, a write that found no free worker never ran: it is not an
    unknown outcome and blocks nothing; the model hears the tool is saturated."""
    from toolbreaker import RunGuard

    release = threading.Event()
    breaker = Breaker("crm", timeout=STARTS_WITHIN, max_workers=1)
    guard = RunGuard("t")

    @guard.tool(breaker=breaker)
    def lookup(q: str) -> dict:
        hang_until(release)
        return {}

    @guard.tool(risk="reversible_write", breaker=breaker)
    def update(name: str, idempotency_key: str) -> dict:
        return {"id": name}

    try:
        lookup(q="x")  # hangs past its deadline: its worker stays pinned
        result = update(name="a")
        assert "outcome_unknown" not in result
        assert (result["tool_unavailable"], result["reason"]) == (True, "saturated")
        stats = breaker.stats
        assert (stats.admitted, stats.rejected, stats.saturated) == (1, 1, 1)
    finally:
        release.set()
    wait_for(lambda: breaker.stats.pinned_workers == 0, "the hung call returned")
    assert update(name="b") == {"id": "b"}
    breaker.close()
