"""The breaker's deadlines: sync calls in a bulkhead that never queues, async calls under
the loop's watchdog (issue 9)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from toolbreaker import Breaker, Policy
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.runtime import Permit, Rejection
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
    """8 threads call a breaker whose calls hang: each caller is answered at its
    deadline, and once the hung calls are released no call starts after its caller was
    answered (none was queued; the breaker is open by then).

    The last step watches for half a second: that a call does *not* start cannot be
    observed sooner; nothing here asserts on a duration.
    """
    hits: list[str] = []
    release = threading.Event()
    answered = threading.Event()
    late_start = threading.Event()
    breaker = Breaker("search", timeout=0.1, max_workers=2)

    def slow() -> None:
        hits.append(breaker.state.phase)
        if answered.is_set():
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
        answered.set()
        release.set()
        assert not late_start.wait(0.5), f"calls started after their callers' answer: {hits}"
        # Every call that started was admitted: its caller was answered at its deadline,
        # none was refused as open. (A call admitted while closed may start after the
        # others' timeouts opened the breaker: on a loaded machine its worker thread can
        # start late, yet before its caller's deadline, so the phase it sees says nothing.)
        timed_out = sum(isinstance(answer, TimeoutError) for answer in answers)
        assert len(hits) <= timed_out <= 8
    finally:
        release.set()
        breaker.close()


def test_calls_within_their_deadline_are_never_limited_by_max_workers():
    """64 threads call a breaker with ``max_workers=4`` at once: all 64 calls run at the
    same time (each gets a worker at once, a new thread if none is idle; none waits in a
    queue, none is refused), since ``max_workers`` bounds hung calls only."""
    breaker = Breaker("search", timeout=30, max_workers=4)
    together = threading.Barrier(64)
    refused: list[str] = []
    lock = threading.Lock()

    def search() -> str:
        together.wait(PATIENCE)  # every one of the 64 is running
        return "found"

    def caller() -> None:
        try:
            assert breaker.call(search) == "found"
        except CircuitOpen as exc:
            with lock:
                refused.append(exc.reason)
            together.abort()  # fail now, not at the barrier's timeout
        except threading.BrokenBarrierError:
            pass

    threads = [threading.Thread(target=caller) for _ in range(64)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PATIENCE)
    finally:
        together.abort()
        breaker.close()
    assert refused == []
    stats = breaker.stats.to_dict()
    assert (stats["admitted"], stats["rejected"], stats["saturated"]) == (64, 0, 0)
    assert stats["pinned_workers"] == 0
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
            breaker.call(lambda: "ordinary")  # the hung call still holds its worker
        assert info.value.reason == "hung"
        assert "not responding" in info.value.result["instruction"]
    finally:
        release.set()
    wait_for(lambda: breaker.stats.late_results == 1, "the hung call returned")
    assert breaker.stats.pinned_workers == 0
    assert breaker.call(lambda: "again") == "again"
    breaker.close()


def test_stats_show_pinned_workers_and_hung_refusals():
    """to_dict() carries the pinned-workers gauge and, once a call was refused because
    hung calls hold the workers, the ``hung`` counter (not ``saturated``)."""
    breaker = Breaker("search", timeout=STARTS_WITHIN, max_workers=1)
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            breaker.call(hang_until, release)
        assert "hung" not in breaker.stats.to_dict()
        with pytest.raises(CircuitOpen) as info:
            breaker.call(lambda: None)
        assert info.value.reason == "hung"
        stats = breaker.stats.to_dict()
        assert (stats["pinned_workers"], stats["hung"], stats["saturated"]) == (1, 1, 0)
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


def test_hung_wording_says_earlier_calls_still_run_and_nothing_was_sent():
    """The model-facing result for a call refused because hung calls hold the workers:
    the tool is not responding, this call was not made, wait before calling again."""
    result = unavailable_result(tool="search", reason="hung", retry_after_ms=20_000)
    assert (result["tool_unavailable"], result["reason"]) == (True, "hung")
    assert result["retry_after_seconds"] == 20
    text = result["instruction"]
    assert "still running past their deadline" in text
    assert "this call was not made" in text
    assert "Do not call it again for 20 seconds" in text


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


def test_a_write_refused_for_hung_calls_is_not_an_unknown_outcome():
    """Through a run guard, a write refused because a hung call holds the only worker
    never ran: it is not an unknown outcome and blocks nothing; the model hears that
    the tool is not responding."""
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
        assert (result["tool_unavailable"], result["reason"]) == (True, "hung")
        stats = breaker.stats
        assert (stats.admitted, stats.rejected, stats.hung) == (1, 1, 1)
    finally:
        release.set()
    wait_for(lambda: breaker.stats.pinned_workers == 0, "the hung call returned")
    assert update(name="b") == {"id": "b"}
    breaker.close()


def test_ordinary_concurrency_is_never_refused_by_the_deadline_workers():
    """32 threads make 256 calls of a healthy dependency through a closed breaker in the
    default mode (``enforce="thread"``), with no bulkhead: every round of 32 calls is in
    flight at once and none is refused. The deadline workers bound hung calls, not
    ordinary concurrency: the pool grows to the callers it has.

    Every call waits until all 32 of its round are running (a barrier), so a call that
    was refused breaks the round at once instead of letting the test pass by timing.
    """
    callers, rounds = 32, 8
    breaker = Breaker("search", timeout=PATIENCE)
    together = threading.Barrier(callers)
    refused: list[str] = []
    served: list[str] = []
    lock = threading.Lock()

    def search() -> str:
        together.wait(PATIENCE)  # all 32 of this round in flight at once
        return "found"

    def agent() -> None:
        for _ in range(rounds):
            try:
                found = breaker.call(search)
            except CircuitOpen as exc:
                with lock:
                    refused.append(exc.reason)
                together.abort()  # the round cannot fill: end it now, not by a timeout
                return
            except threading.BrokenBarrierError:
                return  # another caller of the round was refused
            with lock:
                served.append(found)

    threads = [threading.Thread(target=agent) for _ in range(callers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PATIENCE * rounds)
    finally:
        together.abort()
        breaker.close()
    assert refused == []
    assert len(served) == callers * rounds
    stats = breaker.stats
    assert (stats.admitted, stats.rejected, stats.saturated) == (256, 0, 0)
    assert breaker.state.phase == "closed"


@pytest.mark.parametrize(
    ("enforce", "flavour"),
    [("cooperative", "sync"), ("thread", "sync"), ("cooperative", "async"), ("thread", "async")],
)
def test_every_quiet_fast_path_settles_a_late_or_refused_result_after_all(enforce, flavour):
    """The quiet fast paths skip the store for a success, but not for a result that came
    after its deadline (ambiguous, never a success) nor for one the result predicate
    calls a failure: each path (inline, in a worker, on the loop) settles those."""
    clock = FakeClock()
    breaker = Breaker("search", clock=clock, timeout=1, enforce=enforce,
                      result_is_failure=lambda result: result == "error page")  # fmt: skip

    def late() -> str:
        clock.advance(1_001)  # the result comes after the 1 s deadline
        return "late"

    async def alate() -> str:
        return late()

    async def apage() -> str:
        return "error page"

    def through(fn, afn):
        if flavour == "sync":
            return breaker.call(fn)
        return asyncio.run(breaker.acall(afn))

    for _ in range(2):  # quiet from here on: the fast path serves the calls
        assert through(lambda: "ok", lambda: asyncio.sleep(0, "ok")) == "ok"
    assert breaker.state is breaker._admission.quiet
    assert through(late, alate) == "late"
    assert through(lambda: "error page", apage) == "error page"
    assert breaker.stats.late_results == 1
    assert breaker.stats.failures == {"late-result": 1, "result-predicate": 1}
    breaker.close()


def test_a_required_tool_answered_hung_stops_the_run_a_saturated_one_does_not():
    """Through a run guard: ``hung`` means the dependency stopped answering (its calls
    run on past their deadline), so a required tool answered ``hung`` stops the run as
    a dependency that is down does; ``saturated`` is only a full bulkhead and never
    stops it."""
    from toolbreaker import GuardedTool, RunGuard

    release = threading.Event()
    hung = Breaker("crm", timeout=STARTS_WITHIN, max_workers=1)
    guard = RunGuard("hung-required")
    guard.add_tool(
        GuardedTool("lookup", fn=lambda q: hang_until(release), breaker=hung, required=True)
    )
    try:
        assert guard.call("lookup", {"q": "a"})["ok"] is False  # the timeout
        assert guard.stopped is None
        answer = guard.call("lookup", {"q": "b"})
        assert answer["reason"] == "hung"
        assert guard.stopped is not None
        assert "hung" in guard.stopped.detail
    finally:
        release.set()
    wait_for(lambda: hung.stats.pinned_workers == 0, "the hung call returned")
    hung.close()

    full = Breaker("crm", timeout=5, max_concurrent=1, enforce="cooperative")
    guard = RunGuard("saturated-required")
    guard.add_tool(GuardedTool("lookup", fn=lambda q: q, breaker=full, required=True))
    held = guard.begin("lookup", {"q": "a"})
    assert guard.begin("lookup", {"q": "b"}).answer["reason"] == "saturated"
    assert guard.stopped is None
    held.succeeded("a")


def test_a_call_that_goes_on_is_judged_by_its_last_round():
    """A permit whose call went on after an interim answer (``continued``: an MCP
    input-required round, a task's polls) counts its deadline from then: a result after
    the first deadline but within the last round's is a success, not a late result, and
    its bulkhead slot stays held until it is settled."""
    clock = FakeClock()
    breaker = Breaker("search", clock=clock, timeout=1, max_concurrent=1,
                      policy=Policy(failure_threshold=1))  # fmt: skip
    permit = breaker.admit()
    clock.advance(5_000)  # the user answered after 5 s; the deadline is 1 s
    permit.continued()
    assert isinstance(breaker.admit(), Rejection)  # the call that goes on holds the slot
    clock.advance(500)
    permit.record("success")
    assert breaker.stats.late_results == 0
    assert breaker.state.phase == "closed"
    assert isinstance(breaker.admit(), Permit)  # the slot was given back
