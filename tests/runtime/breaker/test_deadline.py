"""Deadlines: the sync worker bulkhead and the per-loop async watchdog."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import signal
import sys
import threading
import time
import weakref

import pytest

from toolbreaker import Breaker, Policy
from toolbreaker.runtime._breaker._deadline import OVERDUE, Worker, Workers, watchdog, within

# A worker call or a watched await that should finish at once gets this much room on a
# loaded machine; it is never reached when things work.
PATIENCE = 10.0
# A deadline by which a waiting worker thread surely starts its call, so that the call
# is running (and its worker pinned) when the deadline passes.
STARTS_WITHIN = 0.3

needs_cancel_counts = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="tasks count cancellations from Python 3.11"
)

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def hang_until(event: threading.Event) -> None:
    assert event.wait(PATIENCE)


# -- Workers -----------------------------------------------------------------------------


def test_run_returns_the_result_computed_in_the_callers_context():
    """A call runs in a worker thread, sees the caller's context variables, and its
    result comes back."""
    pool = Workers(2)
    request_id.set("r-1")
    try:
        worker = pool.acquire()
        assert worker is not None
        seen = worker.run(lambda: (request_id.get(), threading.get_ident()), (), {}, PATIENCE)
        assert seen != OVERDUE
        assert seen[0] == "r-1"
        assert seen[1] != threading.get_ident()
    finally:
        pool.close()


def test_run_reraises_what_the_call_raised():
    """An exception of the call reaches the caller unchanged."""
    pool = Workers(2)

    def fail(message: str) -> None:
        raise KeyError(message)

    try:
        worker = pool.acquire()
        assert worker is not None
        with pytest.raises(KeyError, match="nope"):
            worker.run(fail, ("nope",), {}, PATIENCE)
    finally:
        pool.close()


def test_sequential_calls_reuse_one_persistent_thread():
    """Workers are persistent: calls one after another run on the same thread."""
    pool = Workers(4)
    try:
        idents = set()
        for _ in range(20):
            worker = pool.acquire()
            assert worker is not None
            ident = worker.run(threading.get_ident, (), {}, PATIENCE)
            assert ident != OVERDUE
            idents.add(ident)
        assert len(idents) == 1
        assert pool.busy == 0
    finally:
        pool.close()


def test_a_call_past_its_deadline_returns_overdue_and_pins_its_worker():
    """The caller gets OVERDUE at its deadline; the running call keeps its worker, which
    is counted as pinned until the call returns, then on_late runs and it is free."""
    late = threading.Event()
    release = threading.Event()
    pool = Workers(2, on_late=late.set)
    try:
        worker = pool.acquire()
        assert worker is not None
        assert worker.run(hang_until, (release,), {}, STARTS_WITHIN) is OVERDUE
        assert pool.pinned == 1
        assert pool.busy == 1
        release.set()
        assert late.wait(PATIENCE)
        assert pool.pinned == 0
        assert pool.busy == 0
    finally:
        release.set()
        pool.close()


class Interrupted(BaseException):
    """What a signal handler raises in the waiting caller."""


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX only")
def test_an_interrupted_caller_does_not_lose_its_worker():
    """A caller interrupted while it waits (a signal handler raising) gives up as at a
    deadline: the running call pins its worker until it returns, then the worker is idle
    again instead of lost to the pool."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    started, release, late = threading.Event(), threading.Event(), threading.Event()
    interrupted = threading.Event()
    pool = Workers(2, on_late=late.set)
    main = threading.get_ident()

    def slow() -> None:
        started.set()
        hang_until(release)

    def interrupt() -> None:
        # Again until it lands: a signal that arrives just before the caller blocks only
        # runs its handler when the next one wakes the caller up.
        assert started.wait(PATIENCE)
        while not interrupted.is_set():
            signal.pthread_kill(main, signal.SIGUSR1)
            interrupted.wait(0.01)

    def raise_interrupted(_signum: int, _frame: object) -> None:
        if not interrupted.is_set():
            interrupted.set()
            raise Interrupted

    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    helper = threading.Thread(target=interrupt)
    helper.start()
    try:
        worker = pool.acquire()
        assert worker is not None
        with pytest.raises(Interrupted):
            worker.run(slow, (), {}, PATIENCE)
        assert pool.pinned == 1
        release.set()
        assert late.wait(PATIENCE)
        assert pool.busy == 0
    finally:
        release.set()
        interrupted.set()
        helper.join(PATIENCE)  # before the default handler (which would kill) is back
        signal.signal(signal.SIGUSR1, previous)
        pool.close()


def test_a_call_not_started_by_its_deadline_never_starts():
    """A caller answered before its call started means the call is dropped, not run late.

    The worker's thread is started only after its caller gave up, which is what a
    starved scheduler does to a real worker.
    """
    pool = Workers(2)
    ran = []
    worker = Worker(pool)  # no thread yet
    assert worker.run(ran.append, (1,), {}, 0.01) is OVERDUE
    assert pool.pinned == 0
    thread = threading.Thread(target=worker._serve, daemon=True)
    thread.start()
    pool.close()  # the worker's own thread then stops: it was the only idle one
    thread.join(PATIENCE)
    assert not thread.is_alive()
    assert ran == []


def test_busy_workers_never_refuse_a_call_a_new_worker_takes_it():
    """When every worker is busy with calls within their deadline, acquire() starts a
    new worker at once: no queue, and no cap on calls whose callers still wait."""
    pool = Workers(1, reserved=0)
    try:
        busy = [pool.acquire() for _ in range(5)]
        assert all(worker is not None for worker in busy)
        assert len({id(worker) for worker in busy}) == 5
        assert pool.busy == 5
        busy[0].release()
        assert pool.acquire() is busy[0]  # an idle one is used first
    finally:
        pool.close()


def test_hung_calls_bound_the_pool_and_the_reserved_one_serves_probes_only():
    """Once hung calls (pinned workers) hold ``max_hung - reserved`` workers, an
    ordinary call gets None at once; a probe may still run beside the reserved one."""
    release = threading.Event()
    pool = Workers(2, reserved=1)
    try:
        worker = pool.acquire()
        assert worker is not None
        assert worker.run(hang_until, (release,), {}, STARTS_WITHIN) is OVERDUE
        assert pool.refuses() == 1
        assert pool.acquire() is None
        probe = pool.acquire(probe=True)
        assert probe is not None
        assert probe.run(hang_until, (release,), {}, STARTS_WITHIN) is OVERDUE
        assert pool.refuses(probe=True) == 2
        assert pool.acquire(probe=True) is None
    finally:
        release.set()
    give_up = time.monotonic() + PATIENCE
    while pool.pinned:  # the hung calls return
        assert time.monotonic() < give_up
        time.sleep(0.005)
    assert pool.refuses() is None
    assert pool.acquire() is not None
    pool.close()


def test_idle_workers_beyond_the_kept_ones_retire_after_a_burst(monkeypatch):
    """A burst of 6 concurrent calls on a pool that keeps 2 idle workers starts 6
    threads; once the burst is over, the idle ones beyond 2 retire after the keep-alive
    (shortened here), and the 2 kept ones still serve calls."""
    from toolbreaker.runtime._breaker import _deadline

    monkeypatch.setattr(_deadline, "KEEP_ALIVE_S", 0.05)
    pool = Workers(2, name="test-burst")
    try:
        burst = [pool.acquire() for _ in range(6)]
        assert all(worker is not None for worker in burst)
        for worker in burst:
            assert worker.run(int, ("1",), {}, PATIENCE) == 1
        assert pool.busy == 0

        def threads() -> int:
            return sum(t.name.startswith("test-burst-") for t in threading.enumerate())

        give_up = time.monotonic() + PATIENCE
        while threads() > 2:  # the four extra workers end their threads
            assert time.monotonic() < give_up, threads()
            time.sleep(0.01)
        assert len(pool._idle) == 2
        worker = pool.acquire()
        assert worker is not None
        assert worker.run(int, ("7",), {}, PATIENCE) == 7
    finally:
        pool.close()


def test_then_is_called_once_when_the_call_is_over():
    """``then`` runs once: in the caller for a call that returned or raised in time or
    never started; in the worker, when it returns, for a call that outlived its deadline."""
    pool = Workers(3, reserved=0)
    over: list[str] = []
    release = threading.Event()
    try:
        worker = pool.acquire()
        assert worker is not None
        assert worker.run(int, ("3",), {}, PATIENCE, lambda: over.append("returned")) == 3
        worker = pool.acquire()
        assert worker is not None
        with pytest.raises(ValueError, match="boom"):
            worker.run(int, ("boom",), {}, PATIENCE, lambda: over.append("raised"))
        assert over == ["returned", "raised"]
        late = threading.Event()
        worker = pool.acquire()
        assert worker is not None
        hung = worker.run(hang_until, (release,), {}, STARTS_WITHIN, late.set)
        assert hung is OVERDUE
        assert not late.is_set()  # still running: it still holds what it was given
        release.set()
        assert late.wait(PATIENCE)
        never = Worker(pool)  # no thread: its call cannot start before the deadline
        assert never.run(int, (), {}, 0.01, lambda: over.append("never started")) is OVERDUE
        assert over == ["returned", "raised", "never started"]
    finally:
        release.set()
        pool.close()


def test_a_caller_told_to_stop_lets_the_call_go_as_at_a_deadline():
    """``stop`` (asked while the caller waits): once it is true the caller gets OVERDUE
    with no deadline at all; the running call keeps its worker (pinned) and what it was
    given (``then`` runs when it returns); a call not started yet never starts."""
    pool = Workers(2, reserved=0)
    release = threading.Event()
    started = threading.Event()
    told = threading.Event()
    over: list[str] = []

    def call() -> str:
        started.set()
        hang_until(release)
        return "late"

    def stop() -> bool:
        if started.is_set():
            told.set()
        return told.is_set()

    try:
        worker = pool.acquire()
        assert worker is not None
        let_go = worker.run(call, (), {}, -1, lambda: over.append("ended"), stop=stop, every=0.001)
        assert let_go is OVERDUE
        assert pool.pinned == 1
        assert over == []  # still running: it still holds what it was given
        release.set()
        wait = time.monotonic() + PATIENCE
        while over != ["ended"]:
            assert time.monotonic() < wait, "the let-go call never ended"
            time.sleep(0.005)
        ran: list[int] = []
        never = Worker(pool)  # no thread: the call cannot start before it is let go
        assert (
            never.run(ran.append, (1,), {}, -1, lambda: over.append("never"), stop=lambda: True)
            is OVERDUE
        )
        assert over == ["ended", "never"]
        assert ran == []
        finished = pool.acquire()
        assert finished is not None
        assert finished.run(int, ("7",), {}, -1, stop=lambda: False, every=0.001) == 7
    finally:
        release.set()
        pool.close()


def test_a_single_worker_pool_reserves_nothing():
    """With one worker nothing can be kept for probes: ordinary calls may use it."""
    pool = Workers(1, reserved=1)
    try:
        assert pool.reserved == 0
        assert pool.acquire() is not None
    finally:
        pool.close()


def test_close_stops_idle_threads_and_refuses_new_calls():
    """close() ends the idle worker threads; acquire() afterwards raises."""
    pool = Workers(2, name="test-close")
    worker = pool.acquire()
    assert worker is not None
    assert worker.run(int, (), {}, PATIENCE) == 0
    threads = [t for t in threading.enumerate() if t.name.startswith("test-close")]
    assert len(threads) == 1
    pool.close()
    threads[0].join(PATIENCE)
    assert not threads[0].is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire()


def test_a_worker_pinned_when_its_pool_closed_stops_when_its_call_returns():
    """A hung call outlives close(); its thread ends once the call returns."""
    release = threading.Event()
    late = threading.Event()
    pool = Workers(2, name="test-pinned-close", on_late=late.set)
    worker = pool.acquire()
    assert worker is not None
    assert worker.run(hang_until, (release,), {}, STARTS_WITHIN) is OVERDUE
    (thread,) = [t for t in threading.enumerate() if t.name.startswith("test-pinned-close")]
    pool.close()
    assert thread.is_alive()
    release.set()
    thread.join(PATIENCE)
    assert not thread.is_alive()
    assert late.is_set()


def test_on_late_that_raises_does_not_kill_the_worker(caplog: pytest.LogCaptureFixture):
    """A failing on_late hook is logged; the worker serves the next call."""
    release = threading.Event()
    raised = threading.Event()

    def on_late() -> None:
        raised.set()
        raise RuntimeError("metrics down")

    pool = Workers(2, reserved=1, on_late=on_late)
    try:
        worker = pool.acquire()
        assert worker is not None
        assert worker.run(hang_until, (release,), {}, STARTS_WITHIN) is OVERDUE
        release.set()
        assert raised.wait(PATIENCE)
        again = None
        while again is None:  # the worker is idle again right after its hook
            again = pool.acquire()
        assert again is worker
        assert again.run(int, ("7",), {}, PATIENCE) == 7
    finally:
        pool.close()
    assert "on_late" in caplog.text


# Python 3.12+ warns that forking a multi-threaded process may deadlock; the child here
# only uses its own fresh worker, writes to a pipe and exits.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_starts_its_own_workers():
    """After os.fork the child does not hand calls to the parent's threads (which do
    not exist in it): it starts its own worker and gets its result."""
    release = threading.Event()
    pool = Workers(3, reserved=1)
    try:
        idle = pool.acquire()
        assert idle is not None
        assert idle.run(int, (), {}, PATIENCE) == 0  # one idle parent thread
        pinned = pool.acquire()
        assert pinned is not None
        assert pinned.run(hang_until, (release,), {}, STARTS_WITHIN) is OVERDUE
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                worker = pool.acquire()
                answer = "none" if worker is None else str(worker.run(int, ("42",), {}, 5.0))
                os.write(write, f"{answer} {pool.pinned}".encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        child = os.read(read, 100).decode()
        os.close(read)
        os.close(write)
        assert child == "42 0"
        assert pool.pinned == 1
    finally:
        release.set()
        pool.close()


# -- Watchdog ----------------------------------------------------------------------------


async def hang() -> None:
    await asyncio.Event().wait()


def _through_breaker(awaitable, seconds):
    """The breaker's quiet fast path, which arms the watchdog inline instead of within()."""
    breaker = Breaker("dep", timeout=seconds, policy=Policy(failure_threshold=1_000))
    return breaker.acall(lambda: awaitable)


#: The watchdog's semantics hold for within() and for Breaker.acall's inline fast path.
WAYS = pytest.mark.parametrize("run", [within, _through_breaker], ids=["within", "acall"])


def test_within_returns_the_result():
    """An awaitable that finishes in time gives its result and leaves nothing armed."""

    async def main() -> int:
        result = await within(asyncio.sleep(0, 5), PATIENCE)
        assert watchdog().armed == 0
        return result

    assert asyncio.run(main()) == 5


@WAYS
def test_the_deadline_cancels_the_call_and_raises_timeout_error(run):
    """At its deadline the awaited call is cancelled and the caller gets TimeoutError."""
    cancelled = []

    async def slow() -> None:
        try:
            await hang()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await run(slow(), 0.01)

    asyncio.run(main())
    assert cancelled == [True]


def test_the_deadline_is_never_early():
    """A call is cancelled at or after its deadline on the loop's clock, never before."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(TimeoutError):
            await within(hang(), 0.03)
        return loop.time() - start

    assert asyncio.run(main()) >= 0.03


@needs_cancel_counts
@WAYS
def test_a_deadline_leaves_no_cancellation_on_the_task(run):
    """After the TimeoutError the task is not 'being cancelled': an enclosing
    asyncio.timeout or task group sees nothing of ours."""

    async def main() -> int:
        async with asyncio.timeout(PATIENCE):
            with pytest.raises(TimeoutError):
                await run(hang(), 0.01)
            await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0


@WAYS
def test_a_cancel_from_outside_stays_a_cancel(run):
    """Cancelling the task is a CancelledError, not a timeout, and disarms its deadline."""

    async def main() -> int:
        task = asyncio.create_task(run(hang(), PATIENCE))
        await asyncio.sleep(0)
        assert watchdog().armed == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return watchdog().armed

    assert asyncio.run(main()) == 0


@needs_cancel_counts
def test_a_cancel_from_outside_at_the_deadline_stays_a_cancel():
    """When the deadline and an outside cancel hit the same task together, the outside
    cancel wins: the task is cancelled, not timed out."""

    async def main() -> None:
        task = asyncio.create_task(within(hang(), 0))
        await asyncio.sleep(0)  # the task arms its (already due) deadline
        watchdog()._tick()  # the deadline fires now, if its timer has not yet
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


@needs_cancel_counts
@WAYS
def test_a_call_that_swallows_the_cancel_returns_and_leaves_no_cancellation(run):
    """A call that catches its cancellation and returns gives its (late) result; the
    task's cancellation count is restored."""

    async def stubborn() -> str:
        try:
            await hang()
        except asyncio.CancelledError:
            return "late"
        return "never"

    async def main() -> tuple[str, int]:
        result = await run(stubborn(), 0.01)
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelling()

    assert asyncio.run(main()) == ("late", 0)


@needs_cancel_counts
@WAYS
def test_a_call_that_turns_the_cancel_into_its_own_error_keeps_that_error(run):
    """A call that answers its cancellation with another exception raises that one; the
    task's cancellation count is restored."""

    async def converts() -> None:
        try:
            await hang()
        except asyncio.CancelledError:
            raise ValueError("gave up") from None

    async def main() -> int:
        with pytest.raises(ValueError, match="gave up"):
            await run(converts(), 0.01)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0


def test_an_outer_deadline_is_a_timeout_for_the_outer_call_only():
    """Nested calls in one task: when the outer deadline passes first, the inner call
    sees a cancellation and the outer one a TimeoutError."""
    inner_saw = []

    async def inner() -> None:
        try:
            await within(hang(), PATIENCE)
        except BaseException as exc:
            inner_saw.append(type(exc))
            raise

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await within(inner(), 0.01)

    asyncio.run(main())
    assert inner_saw == [asyncio.CancelledError]


def test_many_calls_share_one_timer():
    """Arming deadlines later than the earliest one adds no timer: one per loop."""

    async def main() -> None:
        release = asyncio.Event()
        tasks = [asyncio.create_task(within(release.wait(), PATIENCE)) for _ in range(100)]
        await asyncio.sleep(0)
        dog = watchdog()
        assert dog.armed == 100
        first_timer = dog._timer
        assert first_timer is not None
        tasks.append(asyncio.create_task(within(release.wait(), PATIENCE)))
        await asyncio.sleep(0)
        assert dog._timer is first_timer
        release.set()
        await asyncio.gather(*tasks)
        assert dog.armed == 0

    asyncio.run(main())


def test_each_event_loop_has_its_own_watchdog():
    """Loops one after another, or in other threads, never share a watchdog."""

    async def current() -> object:
        return watchdog()

    first, second = asyncio.run(current()), asyncio.run(current())
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(asyncio.run(current())))
    thread.start()
    thread.join(PATIENCE)
    assert len({id(first), id(second), id(other[0])}) == 3


def test_a_loop_run_in_one_thread_then_another_keeps_its_deadlines():
    """The watchdog of the loop that runs now is found, whichever thread ran which loop
    before: a loop moved to another thread, and a thread that runs another loop later,
    both cancel at the deadline."""
    moved = asyncio.new_event_loop()
    try:
        with pytest.raises(TimeoutError):
            moved.run_until_complete(within(hang(), 0.01))
        errors: list[BaseException] = []

        def elsewhere() -> None:
            try:
                moved.run_until_complete(within(hang(), 0.01))
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(PATIENCE)
        assert [type(e) for e in errors] == [TimeoutError]
        with pytest.raises(TimeoutError):
            asyncio.run(within(hang(), 0.01))  # another loop, in the first thread again
        with pytest.raises(TimeoutError):
            moved.run_until_complete(within(hang(), 0.01))
    finally:
        moved.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_a_running_loop_keeps_its_own_deadlines():
    """A child forked while a loop ran (its thread id copied along) finds the loop it
    runs itself, and that loop's deadlines hold."""

    async def fork_here() -> str:
        await within(asyncio.sleep(0), 1.0)  # this thread's watchdog is cached
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                signal.alarm(int(PATIENCE))  # a deadline that never fires ends the child
                try:
                    asyncio.run(within(hang(), 0.01))
                    answer = "no timeout"
                except TimeoutError:
                    answer = "timeout"
                os.write(write, answer.encode())
            finally:
                os._exit(0)
        os.close(write)  # the child's end only: a child that wrote nothing reads as ""
        try:
            os.waitpid(pid, 0)
            return os.read(read, 100).decode()
        finally:
            os.close(read)

    assert asyncio.run(fork_here()) == "timeout"


def test_a_finished_thread_leaves_no_watchdog_behind():
    """A thread that ran a loop with deadlines, and ended, holds nothing: its watchdog
    (and through it the loop) goes with the thread, however many threads come and go."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        await within(asyncio.sleep(0), 1.0)
        loops.append(weakref.ref(asyncio.get_running_loop()))

    thread = threading.Thread(target=lambda: asyncio.run(main()))
    thread.start()
    thread.join(PATIENCE)
    gc.collect()
    assert len(loops) == 1
    assert loops[0]() is None


def test_within_outside_a_task_is_an_error():
    """within() needs a task to cancel: outside one it raises (and closes the coroutine
    it was given, so nothing warns that it was never awaited)."""
    errors: list[BaseException] = []

    def callback() -> None:  # runs in the loop, but in no task
        coro = within(asyncio.sleep(0), 1.0)
        try:
            coro.send(None)
        except RuntimeError as exc:
            errors.append(exc)

    loop = asyncio.new_event_loop()
    try:
        loop.call_soon(callback)
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    assert len(errors) == 1
    assert "task" in str(errors[0])
