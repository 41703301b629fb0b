"""A call cancelled by policy is done for its caller, and still counts while it runs.

Lesson 2: "a caller that has been answered is done, and a call that is still running
still counts: against its bulkhead, its budget, its lease". A model turn's call that a
required dependency's opening cancels is answered at once (the run stops), but a sync
tool cannot be interrupted: its thread runs on. Until it really ends it keeps its
bulkhead slot (and, on a shared store, its lease, renewed while it runs), exactly as a
call running past its deadline does. The tools block on events the tests set, so nothing
here depends on timing; ``wait_for`` only waits (with a generous patience) for a thread
to reach a point the test then checks.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from records_helpers import SharedMemory
from store_kinds import closing, kinds, open_store, reopen
from toolbreaker import Breaker, GuardedTool, Policy, RunGuard, Siblings
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._run._siblings import CancelledByPolicy
from toolbreaker.stores import MemoryStore, SQLiteStore
from toolbreaker.testing import FakeClock

PATIENCE = 20.0


def wait_for(condition: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < give_up, what
        time.sleep(0.005)


async def await_for(condition: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < give_up, what
        await asyncio.sleep(0.005)


class Dependency:
    """An in-process dependency: every call blocks until :attr:`release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.running = 0
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.calls += 1
            self.running += 1
        try:
            assert self.release.wait(PATIENCE)
            return "late"
        finally:
            with self.lock:
                self.running -= 1


# Every kind whose leases run on the caller's clock (some tests here move a FakeClock),
# and "leases": a memory store seen as shared.
@pytest.fixture(params=[*kinds(caller_clock=True), pytest.param("leases", id="leases")])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two stores of one fleet: this process's and another process's.

    ``memory``: one store in this process (the bulkhead is a table of this process);
    ``leases``: a memory store seen as shared (slots are leases); any other kind: two
    store objects on one store, two processes in effect.
    """
    if request.param == "memory":
        store = MemoryStore()
        yield store, store
    elif request.param == "leases":
        shared = SharedMemory()
        yield shared, shared
    else:
        mine, url = open_store(request.param, request, tmp_path)
        with closing(mine), closing(reopen(url)) as theirs:
            yield mine, theirs


def inventory(store: Any, clock: FakeClock | None = None) -> Breaker:
    """The required inventory breaker: one call in flight at once."""
    options: dict[str, Any] = {} if clock is None else {"clock": clock}
    return Breaker(
        "inventory",
        store=store,
        timeout=5,
        max_concurrent=1,
        policy=Policy(failure_threshold=100),
        **options,
    )


def admission(breaker: Breaker) -> str:
    """What ``breaker`` answers a call now: ``admitted`` (settled at once) or the reason."""
    permit = breaker.allow()
    if not permit.admitted:
        return str(permit.reason)
    permit.record("success")
    return "admitted"


def turn_guard(breaker: Breaker) -> RunGuard:
    guard = RunGuard("still-counts")
    guard.add_tool(GuardedTool("stock", lambda **_: None, breaker=breaker, required=True))
    return guard


def test_a_sync_call_cancelled_by_policy_keeps_its_slot_until_it_ends(stores):
    """``run_step`` in a thread: the required inventory is isolated while the call runs,
    so the call is cancelled by policy and its caller answered; while the tool still
    runs, the bulkhead (here and in the other process) answers ``saturated``, and once the
    tool returns the slot comes back."""
    mine, theirs = stores
    here, there = inventory(mine), inventory(theirs)
    dependency = Dependency()
    guard = turn_guard(here)
    guard.mark_turn(1)
    step = guard.begin("stock", {})
    assert step.answer is None
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(guard.run_step(step, dependency)))
    caller.start()
    try:
        wait_for(lambda: dependency.running == 1, "the tool is running")
        here.isolate()  # the required dependency goes down: the call is cancelled
        caller.join(PATIENCE)
        assert not caller.is_alive()
        [answer] = answers
        assert isinstance(answer, CancelledByPolicy)
        assert guard.stopped is not None  # the run stopped, as for any required tool down
        here.release()
        assert dependency.running == 1  # the tool still runs: it still counts
        assert admission(here) == "saturated"
        assert admission(here) == "saturated"
    finally:
        dependency.release.set()
    wait_for(lambda: here.stats.late_results == 1, "the abandoned call returned")
    assert admission(there) == "admitted"  # the slot came back when the call really ended
    assert dependency.calls == 1
    here.close()


def test_the_lease_of_a_cancelled_call_is_renewed_while_it_runs(tmp_path):
    """On a shared store the slot of a call cancelled by policy is a lease; long after it
    would have run out (the call's deadline plus the margin), the other process still
    counts the call, because the lease is renewed until the call returns."""
    clock = FakeClock()
    path = tmp_path / "fleet.db"
    with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        here, there = inventory(mine, clock), inventory(theirs, clock)
        dependency = Dependency()
        guard = turn_guard(here)
        guard.mark_turn(1)
        step = guard.begin("stock", {})
        answers: list[Any] = []
        caller = threading.Thread(target=lambda: answers.append(guard.run_step(step, dependency)))
        caller.start()
        try:
            wait_for(lambda: dependency.running == 1, "the tool is running")
            here.isolate()
            caller.join(PATIENCE)
            assert isinstance(answers[0], CancelledByPolicy)
            here.release()
            clock.advance(60_000)  # far past the call's deadline plus the margin

            def renewed() -> bool:
                leases = theirs.record_list(f"bulkhead/{{{here.key}}}")
                return len(leases) == 1 and leases[0][1]["until"] > clock()

            wait_for(renewed, "the cancelled call's lease was renewed")
            assert admission(here) == "saturated"
        finally:
            dependency.release.set()
        wait_for(lambda: here.stats.late_results == 1, "the abandoned call returned")
        wait_for(lambda: admission(there) == "admitted", "the slot came back")
        here.close()


def test_a_turns_call_running_past_its_deadline_keeps_its_slot(tmp_path):
    """``run_step`` enforces no deadline (the framework runs the tool), but the caller
    knows the call still runs: past its deadline its slot does not run out as if its
    permit were lost. Long after the deadline plus the margin the other process still
    counts it (the lease is renewed); once it returns and is settled, the slot is free."""
    clock = FakeClock()
    path = tmp_path / "fleet.db"
    with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        here, there = inventory(mine, clock), inventory(theirs, clock)
        dependency = Dependency()
        guard = turn_guard(here)
        guard.mark_turn(1)
        step = guard.begin("stock", {})
        answers: list[Any] = []
        caller = threading.Thread(target=lambda: answers.append(guard.run_step(step, dependency)))
        caller.start()
        try:
            wait_for(lambda: dependency.running == 1, "the tool is running")
            clock.advance(60_000)  # far past the call's deadline plus the margin

            def renewed() -> bool:
                leases = theirs.record_list(f"bulkhead/{{{here.key}}}")
                return len(leases) == 1 and leases[0][1]["until"] > clock()

            wait_for(renewed, "the running call's lease was renewed")
            assert admission(there) == "saturated"
            assert admission(here) == "saturated"
        finally:
            dependency.release.set()
        caller.join(PATIENCE)
        assert answers == ["late"]
        step.succeeded("late")
        wait_for(lambda: admission(there) == "admitted", "the slot came back")
        here.close()


def test_an_async_turn_call_running_past_its_deadline_keeps_its_slot(tmp_path):
    """``arun_step`` of a coroutine tool that runs past its deadline (the framework did
    not cancel it): while the turn waits on the task, the slot is held from the deadline
    on, its lease renewed, so the other process still counts the call long after the
    deadline plus the margin; settled, the slot is free again."""
    clock = FakeClock()
    path = tmp_path / "fleet.db"
    with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        here, there = inventory(mine, clock), inventory(theirs, clock)
        guard = turn_guard(here)

        def renewed() -> bool:
            leases = theirs.record_list(f"bulkhead/{{{here.key}}}")
            return len(leases) == 1 and leases[0][1]["until"] > clock()

        async def main() -> Any:
            finish = asyncio.Event()

            async def tool() -> str:
                await finish.wait()
                return "late"

            guard.mark_turn(1)
            step = await guard.abegin("stock", {})
            hook = asyncio.create_task(guard.arun_step(step, tool))
            await await_for(lambda: len(asyncio.all_tasks()) == 3, "the tool is running")
            clock.advance(60_000)  # far past the call's deadline plus the margin
            await await_for(renewed, "the running call's lease was renewed")
            assert admission(there) == "saturated"
            finish.set()
            ran = await hook
            assert await step.asucceeded(ran) == "late"
            return ran

        assert asyncio.run(main()) == "late"
        wait_for(lambda: admission(there) == "admitted", "the slot came back")
        here.close()


def test_an_async_call_cancelled_by_policy_counts_until_its_task_has_ended():
    """``arun_step``: the task running the tool is cancelled and awaited, so the caller is
    answered only once the task has really ended; while the tool's own clean-up still
    runs after the cancellation, the bulkhead answers ``saturated``."""
    here = inventory(MemoryStore())
    guard = turn_guard(here)

    async def main() -> Any:
        cleaning = asyncio.Event()
        finish = asyncio.Event()

        async def tool() -> Any:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cleaning.set()
                await finish.wait()  # its clean-up still talks to the dependency
                raise

        guard.mark_turn(1)
        step = await guard.abegin("stock", {})
        hook = asyncio.create_task(guard.arun_step(step, tool))
        await await_for(lambda: len(asyncio.all_tasks()) == 3, "the tool is running")
        here.isolate()
        await cleaning.wait()
        here.release()
        assert not hook.done()  # the caller waits for the task to end
        assert admission(here) == "saturated"
        finish.set()
        answer = await hook
        assert admission(here) == "admitted"
        return answer

    assert isinstance(asyncio.run(main()), CancelledByPolicy)


def test_a_sibling_branch_abandoned_by_policy_keeps_its_slot_until_it_ends(stores):
    """``Siblings`` on its own: a thread branch calling the breaker is abandoned when the
    required breaker is isolated; its call still holds the slot (the breaker's own call
    gives it back when it really ends), so the other process is answered ``saturated``."""
    mine, theirs = stores
    here, there = inventory(mine), inventory(theirs)
    dependency = Dependency()
    group = Siblings(required=[here])
    group.add("stock", here.call, dependency, needs=[here])
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(group.run()))
    runner.start()
    try:
        wait_for(lambda: dependency.running == 1, "the branch is running")
        here.isolate()
        runner.join(PATIENCE)
        assert not runner.is_alive()
        assert outcome[0].cancelled == ("stock",)
        here.release()
        assert admission(here) == "saturated"
    finally:
        dependency.release.set()
    wait_for(lambda: dependency.running == 0, "the abandoned branch returned")
    wait_for(lambda: admission(there) == "admitted", "the slot came back")
    here.close()


def test_an_async_sibling_branch_cancelled_by_policy_counts_until_it_has_ended():
    """``Siblings.arun`` on its own: the branch that needs the isolated breaker is
    cancelled, and the group returns only once its task has really ended; while the
    branch's clean-up still runs, its call (``acall``) holds the slot: ``saturated``."""
    here = inventory(MemoryStore())

    async def main() -> Any:
        running = asyncio.Event()
        cleaning = asyncio.Event()
        finish = asyncio.Event()

        async def tool() -> Any:
            running.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cleaning.set()
                await finish.wait()  # its clean-up still talks to the dependency
                raise

        group = Siblings(required=[here])
        group.add("stock", here.acall, tool, needs=[here])
        outcome = asyncio.create_task(group.arun())
        await running.wait()
        here.isolate()
        await cleaning.wait()
        here.release()
        assert not outcome.done()  # the group waits for the branch to end
        assert admission(here) == "saturated"
        finish.set()
        done = await outcome
        assert admission(here) == "admitted"
        return done

    assert asyncio.run(main()).cancelled == ("stock",)


def test_a_turns_calls_let_go_still_running_count_against_the_workers():
    """A call cancelled by policy that still runs pins its worker, as a call past its
    deadline does: once such calls hold every worker an ordinary call may use, the next
    turn's call of that breaker is refused ``hung`` (and its step answered so) instead of
    starting one more thread against a dependency that has not answered."""
    here = Breaker("inventory", timeout=5, max_workers=2, policy=Policy(failure_threshold=100))
    dependency = Dependency()
    first = turn_guard(here)
    first.mark_turn(1)
    step = first.begin("stock", {})
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(first.run_step(step, dependency)))
    caller.start()
    try:
        wait_for(lambda: dependency.running == 1, "the tool is running")
        here.isolate()
        caller.join(PATIENCE)
        assert isinstance(answers[0], CancelledByPolicy)
        here.release()
        assert here.stats.pinned_workers == 1
        second = turn_guard(here)  # another run of the same agent
        second.mark_turn(1)
        again = second.begin("stock", {})
        with pytest.raises(CircuitOpen) as refused:
            second.run_step(again, dependency)
        assert refused.value.reason == "hung"
        answer = again.failed(refused.value)
        assert answer["tool_unavailable"] is True
        assert answer["reason"] == "hung"
        assert dependency.calls == 1  # never started
    finally:
        dependency.release.set()
    wait_for(lambda: here.stats.pinned_workers == 0, "the let-go call returned")
    here.close()
