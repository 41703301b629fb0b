"""The runtime breaker: admission, outcomes, deadlines, tool results, counters."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from toolbreaker import Breaker, Policy, Verdict
from toolbreaker.errors import CircuitOpen, PermitError, PolicyError
from toolbreaker.testing import FakeClock, capture_transitions, force_state


class HTTPError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.headers = headers or {}


def failing(status: int = 503, headers: dict[str, str] | None = None):
    def fn(*_args, **_kwargs):
        raise HTTPError(status, headers)

    return fn


def make(clock: FakeClock | None = None, **kwargs) -> Breaker:
    kwargs.setdefault("policy", Policy(failure_threshold=3, cooldown_ms=20_000))
    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("enforce", "cooperative")
    return Breaker("search", clock=clock or FakeClock(), **kwargs)


def trip(breaker: Breaker, times: int = 3) -> None:
    for _ in range(times):
        with pytest.raises(HTTPError):
            breaker.call(failing())


def test_third_failure_opens_and_next_call_is_rejected_locally():
    """The threshold failure opens; the next call never runs and says when to retry."""
    clock = FakeClock()
    breaker = make(clock)
    trip(breaker)
    assert breaker.state.phase == "open"
    ran = []
    clock.advance(seconds=3)
    with pytest.raises(CircuitOpen) as info:
        breaker.call(lambda: ran.append(1))
    assert ran == []
    assert info.value.retry_after == 17
    assert info.value.reason == "cooldown"
    assert info.value.result["tool_unavailable"] is True


def test_validation_errors_do_not_open():
    """A 404 or a ValueError counts as nothing: the breaker stays closed."""
    breaker = make()
    for _ in range(10):
        with pytest.raises(HTTPError):
            breaker.call(failing(404))
        with pytest.raises(ValueError, match="bad"):
            breaker.call(lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures["http-404"] == 10


def test_probe_at_deadline_and_quorum_close():
    """After the cooldown one probe goes through; two successes close the breaker."""
    clock = FakeClock()
    breaker = make(clock)
    trip(breaker)
    clock.advance(20_000)
    assert breaker.call(lambda: "ok") == "ok"
    assert breaker.state.phase == "half_open"
    assert breaker.call(lambda: "ok") == "ok"
    assert breaker.state.phase == "closed"


def test_failed_probe_reopens():
    """A failing probe reopens at once."""
    clock = FakeClock()
    breaker = make(clock)
    trip(breaker)
    clock.advance(20_000)
    with pytest.raises(HTTPError):
        breaker.call(failing())
    assert breaker.state.phase == "open"
    assert breaker.stats.reopens_from_half_open == 1
    assert breaker.stats.half_open_reopen_ratio == 1.0


def test_retry_after_sets_the_minimum_cooldown():
    """A 429's Retry-After keeps the breaker open at least that long."""
    clock = FakeClock()
    breaker = make(clock, policy=Policy(failure_threshold=1, cooldown_ms=1_000))
    with pytest.raises(HTTPError):
        breaker.call(failing(429, {"Retry-After": "120"}))
    with pytest.raises(CircuitOpen) as info:
        breaker.call(lambda: None)
    assert info.value.retry_after == 120


def test_success_resets_count_even_after_a_concurrent_failure():
    """The quiet fast path never swallows a success that the core would count."""
    breaker = make()
    permit = breaker.allow()
    with pytest.raises(HTTPError):
        breaker.call(failing())
    with pytest.raises(HTTPError):
        breaker.call(failing())
    assert breaker.state.failures
    permit.record("success")
    assert breaker.state.failures == ()


def test_late_success_is_stale_after_the_breaker_opened():
    """A success for a call admitted before the opening changes nothing."""
    clock = FakeClock()
    breaker = make(clock)
    early = breaker.allow()
    trip(breaker)
    clock.advance(20_000)
    probe = breaker.allow()
    record = early.record("success")
    assert record is not None
    assert record.reason == "stale-outcome"
    assert breaker.state.phase == "half_open"
    probe.record("success")


def test_permit_settles_exactly_once():
    """Recording a permit twice is an error."""
    permit = make().allow()
    permit.record("success")
    with pytest.raises(PermitError):
        permit.record("failure")


def test_rejection_carries_the_model_result():
    """allow() on an open breaker returns a Rejection with the tool-unavailable result."""
    breaker = make(
        tool="search_catalog",
        fallback="search_catalog_snapshot",
        fallback_note="say that prices may be out of date",
    )
    trip(breaker)
    rejection = breaker.allow()
    assert not rejection.admitted
    result = rejection.result
    assert result["tool"] == "search_catalog"
    assert result["fallback"] == "search_catalog_snapshot"
    assert result["retry_after_seconds"] == 20
    assert (
        'Use "search_catalog_snapshot" instead and say that prices may be out of date.'
        in (result["instruction"])
    )
    assert "Do not call it again for 20 seconds" in result["instruction"]


def test_guard_returns_unavailable_on_the_opening_failure():
    """The failure that opens the breaker already tells the model the tool is out."""
    breaker = make(fallback="snapshot")

    @breaker.guard
    def search_catalog(query: str) -> dict:
        raise HTTPError(503)

    first = search_catalog("a")
    assert first["ok"] is False
    assert first["retryable"] is True
    assert "tool_unavailable" not in first
    search_catalog("b")
    third = search_catalog("c")
    assert third["tool_unavailable"] is True
    assert third["tool"] == "search_catalog"
    assert third["reason"] == "open"
    fourth = search_catalog("d")
    assert fourth["tool_unavailable"] is True


def test_guard_passes_results_through_and_marks_bad_requests_not_retryable():
    """A success is returned as is; a 404 is an error the model should not retry."""
    breaker = make()

    @breaker.guard(timeout=1.0)
    def lookup(key: str) -> dict:
        if key == "missing":
            raise HTTPError(404)
        return {"key": key}

    assert lookup("x") == {"key": "x"}
    error = lookup("missing")
    assert error["retryable"] is False
    assert "404" in error["error"]


def test_guard_on_async_tools():
    """guard works on coroutine functions too."""
    breaker = make(policy=Policy(failure_threshold=1))

    @breaker.guard
    async def fetch() -> dict:
        raise HTTPError(502)

    result = asyncio.run(fetch())
    assert result["tool_unavailable"] is True
    assert asyncio.run(fetch())["tool_unavailable"] is True


def test_no_deadline_is_a_configuration_error():
    """A call without any timeout is refused: a hung call must become a failure."""
    breaker = Breaker("search")
    with pytest.raises(PolicyError, match="no deadline"):
        breaker.call(lambda: None)


def test_thread_mode_times_out_a_hung_call_and_counts_it():
    """A sync call past its deadline raises TimeoutError and counts as a timeout failure."""
    breaker = Breaker("slow", policy=Policy(failure_threshold=1), timeout=0.05)
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError, match="deadline"):
            breaker.call(release.wait, 5)
        assert breaker.state.phase == "open"
        assert breaker.stats.failures == {"timeout": 1}
    finally:
        release.set()
        breaker.close()


def test_thread_mode_late_result_is_never_a_success():
    """A result that arrives after the deadline is counted as late, not as a success."""
    breaker = Breaker("slow", policy=Policy(failure_threshold=5), timeout=0.05)
    done = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            breaker.call(lambda: done.wait(0.2) or "late")
        deadline = time.monotonic() + 2
        while breaker.stats.late_results == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert breaker.stats.late_results == 1
        assert len(breaker.state.failures) == 1
    finally:
        breaker.close()


def test_cooperative_late_success_is_ambiguous():
    """In cooperative mode a result after the deadline is recorded as ambiguous."""
    clock = FakeClock()
    breaker = make(clock, policy=Policy(failure_threshold=1), timeout=1.0)

    def slow() -> str:
        clock.advance(1_500)
        return "late"

    assert breaker.call(slow) == "late"
    assert breaker.state.phase == "open"
    assert breaker.stats.failures == {"late-result": 1}


def test_cooperative_late_success_on_the_real_clock_is_ambiguous():
    """The same on the default clock, whose fast path times calls in nanoseconds: a
    result after the deadline is never a quiet success, sync or async."""

    def slow() -> str:
        time.sleep(0.03)
        return "late"

    async def aslow() -> str:
        await asyncio.sleep(0.03)
        return "late"

    sync = Breaker("slow-sync", policy=Policy(failure_threshold=1), timeout=0.01,
                   enforce="cooperative")  # fmt: skip
    assert sync.call(slow) == "late"
    assert sync.state.phase == "open"
    assert sync.stats.failures == {"late-result": 1}
    coop = Breaker("slow-async", policy=Policy(failure_threshold=1), timeout=0.01,
                   enforce="cooperative")  # fmt: skip
    assert asyncio.run(coop.acall(aslow)) == "late"
    assert coop.state.phase == "open"
    assert coop.stats.failures == {"late-result": 1}


def test_async_deadline_cancels_the_call():
    """An async call is cancelled at its deadline and counted as a timeout."""
    breaker = Breaker("slow", policy=Policy(failure_threshold=1), timeout=0.02)
    cancelled = []

    async def hang() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(TimeoutError):
        asyncio.run(breaker.acall(hang))
    assert cancelled == [True]
    assert breaker.state.phase == "open"


def test_async_cancellation_from_outside_is_not_a_failure():
    """Cancelling the caller releases the call without counting against the dependency."""
    breaker = Breaker("slow", policy=Policy(failure_threshold=1), timeout=5)

    async def main() -> None:
        task = asyncio.create_task(breaker.acall(asyncio.sleep, 10))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"cancelled": 1}


def test_result_predicate_counts_error_bodies():
    """A 200 whose body is an error can count as a failure."""
    breaker = make(
        policy=Policy(failure_threshold=1),
        result_is_failure=lambda r: isinstance(r, dict) and "error" in r,
    )
    assert breaker.call(lambda: {"error": "upstream down"}) == {"error": "upstream down"}
    assert breaker.state.phase == "open"


def test_listeners_see_every_record():
    """With a listener attached, every request and outcome produces a record."""
    breaker = make()
    with capture_transitions(breaker) as records:
        breaker.call(lambda: 1)
        trip(breaker)
    assert [r.reason for r in records] == [
        "call-admitted",
        "success",
        "call-admitted",
        "qualifying-failure",
        "call-admitted",
        "qualifying-failure",
        "call-admitted",
        "qualifying-failure",
    ]
    assert records[-1].to_phase == "open"


def test_counters():
    """Demand, admissions, rejections, failures and opens are counted."""
    breaker = make()
    breaker.call(lambda: 1)
    trip(breaker)
    for _ in range(4):
        with pytest.raises(CircuitOpen):
            breaker.call(lambda: 1)
    stats = breaker.stats.to_dict()
    assert (stats["demand"], stats["admitted"], stats["rejected"]) == (8, 4, 4)
    assert stats["failures"] == {"http-503": 3}
    assert stats["opens"] == {"qualifying-failure": 1}


def test_isolate_and_release():
    """An operator can take a tool out of service and put it back."""
    breaker = make()
    breaker.isolate("maintenance")
    with pytest.raises(CircuitOpen) as info:
        breaker.call(lambda: 1)
    assert info.value.reason == "isolated"
    assert info.value.result["reason"] == "isolated"
    breaker.release()
    assert breaker.call(lambda: 1) == 1


def test_force_state_helper():
    """force_state puts a breaker in a phase for tests."""
    clock = FakeClock()
    breaker = make(clock)
    force_state(breaker, "open", open_for_ms=5_000)
    with pytest.raises(CircuitOpen):
        breaker.call(lambda: 1)
    clock.advance(5_000)
    assert breaker.call(lambda: 1) == 1
    assert breaker.state.phase == "half_open"


def test_exception_verdict_and_custom_classifier():
    """A per-breaker classifier decides what counts."""
    breaker = make(
        policy=Policy(failure_threshold=1), classifier=lambda exc: Verdict("failure", "custom")
    )
    with pytest.raises(KeyError):
        breaker.call(lambda: {}["x"])
    assert breaker.state.phase == "open"


def test_half_open_admits_at_most_probe_limit_threads():
    """64 threads arriving at the half-open instant get at most probe_limit probes."""
    clock = FakeClock()
    breaker = make(clock, policy=Policy(failure_threshold=1, probe_limit=2))
    with pytest.raises(HTTPError):
        breaker.call(failing())
    clock.advance(20_000)
    barrier = threading.Barrier(64)
    admitted = []

    def worker() -> None:
        barrier.wait()
        permit = breaker.allow()
        if permit.admitted:
            admitted.append(permit)

    threads = [threading.Thread(target=worker) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 2
    assert breaker.stats.rejected == 62


def test_half_open_admits_at_most_probe_limit_tasks():
    """1,000 asyncio tasks arriving at the half-open instant get at most probe_limit probes."""
    clock = FakeClock()
    breaker = make(clock, policy=Policy(failure_threshold=1, probe_limit=3))
    with pytest.raises(HTTPError):
        breaker.call(failing())
    clock.advance(20_000)
    started = []

    async def probe() -> None:
        started.append(1)
        await asyncio.sleep(0.01)

    async def main() -> list[object]:
        return await asyncio.gather(
            *(breaker.acall(probe) for _ in range(1_000)), return_exceptions=True
        )

    results = asyncio.run(main())
    assert len(started) == 3
    assert sum(isinstance(r, CircuitOpen) for r in results) == 997


def test_corrupt_state_in_the_view_still_starts_its_cooldown():
    """A recovered corrupt state is not rejected locally forever: the first request goes
    through the core, which starts the cooldown, and the breaker probes after it."""
    from toolbreaker.core._breaker.state import CORRUPT

    clock = FakeClock(1_000)
    breaker = make(clock)
    breaker.store.force(breaker.key, CORRUPT)
    with pytest.raises(CircuitOpen):
        breaker.call(lambda: 1)
    assert breaker.state.open_until == 21_000
    clock.set(21_000)
    assert breaker.call(lambda: 1) == 1
    assert breaker.state.phase == "half_open"


# Python 3.12+ warns that forking a multi-threaded process may deadlock; the child here
# only writes to a pipe and exits.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_forked_children_get_their_own_call_ids():
    """Call ids and bulkhead slot holders carry one per-process token, which a fork renews."""
    import os

    from toolbreaker.runtime._breaker._bulkhead import Bulkhead
    from toolbreaker.runtime._process import process_token

    def ids() -> tuple[str, str, str]:
        breaker = Breaker("forked", timeout=1, clock=FakeClock())
        with capture_transitions(breaker) as records:  # every request then has a call id
            breaker.allow()
        slot = Bulkhead("forked", 1, None, FakeClock()).acquire(1_000)
        assert not isinstance(slot, str)
        return process_token(), records[0].event.call or "", slot.holder

    token, call, holder = ids()
    assert call.startswith(f"{token}.")
    assert holder.startswith(f"{token}.")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write, " ".join(ids()).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child, child_call, child_holder = os.read(read, 200).decode().split()
    os.close(read)
    os.close(write)
    assert child != token
    assert child_call.startswith(f"{child}.")
    assert child_holder.startswith(f"{child}.")
    assert process_token() == token


def test_the_breaker_options_are_one_list():
    """Boundary's fields are the one list of breaker options: the typed keyword view that
    Breaker(...) and the adapters take holds exactly them, and the adapters' tool options
    are all of them but the tool's name and the code-only classifier and predicate."""
    import dataclasses

    from toolbreaker import Boundary
    from toolbreaker.runtime._breaker._boundary import (
        BREAKER_OPTIONS,
        BreakerOptions,
        BreakerToolOptions,
    )

    # ``defaults`` is the registry's mark of a row made from the sheet's defaults.
    fields = {f.name for f in dataclasses.fields(Boundary)} - {"dependency", "operation"}
    fields -= {"defaults"}
    assert fields == BREAKER_OPTIONS
    assert BreakerOptions.__optional_keys__ == fields
    assert BreakerOptions.__required_keys__ == frozenset()
    assert BreakerToolOptions.__optional_keys__ == fields - {
        "tool",
        "classifier",
        "result_is_failure",
    }


def test_breaker_options_are_boundarys():
    """Breaker(...) builds its row from its options with Boundary's defaults and checks: a
    None policy or instructions is the default, a callable is a health check, a retry table
    is converted, and a name that is no option is a TypeError naming it."""
    from toolbreaker import Boundary
    from toolbreaker.runtime._breaker._boundary import HealthCheck

    def check() -> bool:
        return True

    breaker = Breaker(
        "opts",
        policy=None,
        instructions=None,
        timeout=2,
        health_check=check,
        retry={"max_attempts": 2},
    )
    row = breaker.boundary
    assert row.policy == Policy(probes="health-check")
    assert row.instructions == {}
    assert row.health_check == HealthCheck(check=check)
    assert row.retry is not None
    assert row.retry.max_attempts == 2
    assert Breaker("plain").boundary == Boundary("plain")
    with pytest.raises(TypeError, match="'timout'"):
        Breaker("typo", timout=2)  # type: ignore[call-arg]
    with pytest.raises(PolicyError) as err:
        Breaker("bad", max_concurrent=0)
    assert err.value.field == "max_concurrent"
