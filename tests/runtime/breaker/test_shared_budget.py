"""The retry budget shared by the processes of one store (issue 12).

Two breakers over one shared store stand for two processes (the SQLite and Redis tests
in ``tests/stores/test_shared_records.py`` use real processes). Calls go to the real
fault-injecting service; waits advance a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from records_helpers import SharedMemory
from store_kinds import closing, kinds, open_store, reopen
from toolbreaker import Breaker, Policy
from toolbreaker.core._retry import RetryBudget, RetryPolicy
from toolbreaker.runtime._breaker._shared_budget import BUDGET_SPACE
from toolbreaker.testing import FakeClock, Fault, ToolService, request_json


def make(store: Any, clock: FakeClock | None = None, **retry: Any) -> Breaker:
    clock = clock or FakeClock()
    options = {"max_attempts": 3, "base_ms": 100, "deadline_ms": 60_000, **retry}
    return Breaker(
        "search",
        operation="read",
        policy=Policy(failure_threshold=1000),
        clock=clock,
        timeout=2,
        store=store,
        retry=RetryPolicy(**options),
        sleep=lambda seconds: clock.advance(seconds=seconds),
        retry_seed=7,
    )


def search(service: ToolService, q: str = "cable") -> dict[str, Any]:
    return request_json("GET", f"{service.url}/search?q={q}", timeout=2)


def test_one_process_spending_the_budget_leaves_none_for_the_other(service):
    """A budget of 2 retries is spent by process A; process B's failure gets no retry
    (``budget-exhausted``) and its model reads that the tool is unavailable for the run."""
    store = SharedMemory()
    a, b = make(store, budget=2), make(store, budget=2)
    service.outage("GET /search", status=503)
    with pytest.raises(Exception, match="503"):
        a.call(search, service)
    assert a.stats.retries == {"retry": 2, "max-attempts": 1}
    assert store.inner.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 0}
    tool = b.guard(lambda q: search(service, q), tool="search")
    answer = tool("cable")
    assert answer["reason"] == "retry-budget"
    assert answer["retryable"] is False
    assert b.stats.retries == {"budget-exhausted": 1}
    assert service.hits["GET /search"] == 4  # 3 attempts of A, 1 of B
    assert b.retry_budget == RetryBudget(0)


def test_successes_in_one_process_refill_the_other(service):
    """Ten successes in process B (10 % each) give process A one retry back."""
    store = SharedMemory()
    a, b = make(store, budget=1), make(store, budget=1)
    service.inject("GET /search", Fault(status=503))
    a.call(search, service)  # one retry: the bucket is empty
    assert store.inner.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 0}
    for _ in range(10):
        b.call(search, service)
    shared = b._ledger.shared
    assert shared is not None
    shared.flush()  # the tenth success wrote in the background; this waits for nothing
    wait = 0
    while store.inner.record_get(BUDGET_SPACE, "search:read")[0] != {"milli": 1000}:
        wait += 1
        assert wait < 10_000, "the refill never reached the store"
        threading.Event().wait(0.001)
    service.inject("GET /search", Fault(status=503))
    a.call(search, service)
    assert a.stats.retries == {"retry": 2}  # the second was paid by B's successes


def test_a_store_fault_means_no_retry_and_the_outcome_stands(service):
    """The budget's store is down: the failure is not retried, the caller gets the
    call's own error, and the fault is counted."""
    store = SharedMemory(down=True)
    breaker = make(store, budget=5)
    service.inject("GET /search", Fault(status=503))
    with pytest.raises(Exception, match="503"):
        breaker.call(search, service)
    assert service.hits["GET /search"] == 1
    assert breaker.stats.retries == {"budget-exhausted": 1}
    assert breaker.stats.to_dict()["record_faults"] == 1


def test_an_unreadable_record_is_an_empty_bucket(service):
    store = SharedMemory()
    store.inner.record_put(BUDGET_SPACE, "search:read", {"milli": "lots"})
    breaker = make(store, budget=5)
    service.inject("GET /search", Fault(status=503))
    with pytest.raises(Exception, match="503"):
        breaker.call(search, service)
    assert breaker.stats.retries == {"budget-exhausted": 1}


def test_concurrent_processes_never_overspend(service):
    """Eight breakers (eight processes) retry at once against a budget of 5: at most 5
    retries are made in all, whatever the compare-and-set conflicts."""
    store = SharedMemory()
    breakers = [make(store, budget=5) for _ in range(8)]
    service.outage("GET /search", status=503)
    done = threading.Barrier(8)

    def run(breaker: Breaker) -> None:
        done.wait()
        with contextlib.suppress(Exception):  # every call fails: the outage
            breaker.call(search, service)

    threads = [threading.Thread(target=run, args=(b,)) for b in breakers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    retries = sum(b.stats.retries.get("retry", 0) for b in breakers)
    assert 1 <= retries <= 5
    assert service.hits["GET /search"] == 8 + retries
    milli = store.inner.record_get(BUDGET_SPACE, "search:read")[0]["milli"]
    assert milli == (5 - retries) * 1000


def test_the_models_re_calls_spend_the_shared_budget(service):
    """The model re-issuing a failed call in process A spends the budget process B sees."""
    store = SharedMemory()
    a = make(store, max_attempts=1, budget=1)
    b = make(store, max_attempts=1, budget=1)
    service.outage("GET /search", status=503)
    tool = a.guard(lambda q: search(service, q), tool="search")
    assert tool("cable")["retryable"] is True
    again = tool("cable")  # the model's retry: spends the only token
    assert again["reason"] == "retry-budget"
    assert store.inner.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 0}
    # B's first failure already reads the shared bucket: its model is told at once, and
    # its re-call is answered without reaching the service.
    other = b.guard(lambda q: search(service, q), tool="search")
    assert other("x")["reason"] == "retry-budget"
    hits = service.hits["GET /search"]
    assert other("x")["reason"] == "retry-budget"
    assert service.hits["GET /search"] == hits
    assert b.stats.retries == {"max-attempts": 1, "model-retry-refused": 1}


def test_async_retries_pay_the_shared_budget_off_the_loop(service):
    store = SharedMemory()
    breaker = make(store, budget=1)
    service.inject("GET /search", Fault(status=503))

    async def asearch() -> dict[str, Any]:
        return await asyncio.to_thread(search, service)

    assert asyncio.run(breaker.acall(asearch))["query"] == "cable"
    assert breaker.stats.retries == {"retry": 1}
    assert store.inner.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 0}


def test_a_run_guard_on_the_loop_pays_the_models_retry_off_the_loop(service):
    """``RunGuard.abegin``: the model's re-call of a failed action spends the shared
    budget in a worker thread; once it is spent the tool is unavailable for the run."""
    from toolbreaker import GuardedTool, RunGuard

    store = SharedMemory()
    breaker = make(store, max_attempts=1, budget=1)
    service.outage("GET /search", status=503)
    guard = RunGuard("shared-budget")
    guard.add_tool(GuardedTool("search", fn=lambda q: search(service, q), breaker=breaker))

    async def acall_sync(tool: str, args: dict[str, Any]) -> Any:
        step = await guard.abegin(tool, args)
        if step.answer is not None:
            return step.answer
        try:
            result = search(service, args["q"])
        except Exception as exc:  # noqa: BLE001 - settled
            return await step.afailed(exc)
        return await step.asucceeded(result)

    async def run() -> list[Any]:
        return [await acall_sync("search", {"q": "cable"}) for _ in range(3)]

    first, spent, refused = asyncio.run(run())
    assert first["retryable"] is True
    assert spent["reason"] == "retry-budget"
    assert refused["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    assert store.inner.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 0}
    assert breaker.stats.retries == {"model-retry": 1, "model-retry-refused": 1}


# -- compare-and-set conflicts under contention ---------------------------------------------

CONTENDERS = 12
SPENDS = 25


def _contend(kind: str, target: str, start: Any, out: Any) -> None:
    """One process: its own store connection, SPENDS decisions on the shared bucket."""
    from toolbreaker.core._retry import spend
    from toolbreaker.runtime._breaker import _shared_budget
    from toolbreaker.runtime._breaker._shared_budget import SharedBudget

    # The give-up window is wall time: on a loaded machine (two suites at once) twelve
    # contenders can lose for a whole second, and a decision made on an empty bucket then
    # is the window working, not a conflict left unresolved. This test is about conflicts
    # resolving, so its window is wide; the window itself has tests of its own.
    _shared_budget.MAX_BACKOFF_S = 60.0  # type: ignore[misc]
    store = reopen(target)
    faults = []
    budget = SharedBudget(
        "search:read",
        RetryPolicy(budget=CONTENDERS * SPENDS),
        store,
        lambda: faults.append(1),
    )
    start.wait(60)
    allowed = sum(bool(budget.update(spend)) for _ in range(SPENDS))
    store.close()
    out.put((allowed, len(faults)))


# Every kind other processes reach, but the Redis Cluster's six servers: the cluster's
# own tests cover it (tests/stores/test_redis_cluster.py).
@pytest.fixture(params=kinds(shared=True, cluster=False))
def contended(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, str, Any]]:
    """A real shared store, its address for other processes, and a store to look with."""
    store, target = open_store(request.param, request, tmp_path)
    with closing(store):
        yield request.param, target, store


@pytest.mark.slow
def test_contending_processes_resolve_conflicts_without_a_spurious_no(contended):
    """Twelve processes spend a budget large enough for all of them at once: every
    decision is "retry" (conflicts back off and resolve; none is refused for want of a
    write), no fault is counted, and the bucket holds exactly what was not spent."""
    import multiprocessing

    kind, target, store = contended
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    workers = [
        context.Process(target=_contend, args=(kind, target, start, out)) for _ in range(CONTENDERS)
    ]
    for worker in workers:
        worker.start()
    start.set()
    results = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    assert [faults for _, faults in results] == [0] * CONTENDERS
    assert sum(allowed for allowed, _ in results) == CONTENDERS * SPENDS
    assert store.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 0}


def test_a_real_store_that_is_down_still_decides_no_retry(tmp_path):
    """A redis-server that is gone: the decision is "no retry" at once (a fault is not a
    conflict: no backoff, no second round trip), counted as a fault."""
    import shutil

    from stores.conftest import RedisServer
    from toolbreaker.core._retry import spend
    from toolbreaker.runtime._breaker import _shared_budget
    from toolbreaker.runtime._breaker._shared_budget import SharedBudget
    from toolbreaker.stores import RedisStore

    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    assert binary is not None, "redis-server is not installed"
    server = RedisServer(binary, tmp_path)
    server.start()
    store = RedisStore(server.url, prefix="tb-down")
    faults: list[int] = []
    budget = SharedBudget("search:read", RetryPolicy(budget=5), store, lambda: faults.append(1))
    assert budget.update(spend) is True
    server.stop()
    slept: list[float] = []
    original = _shared_budget._sleep
    _shared_budget._sleep = slept.append
    try:
        assert budget.update(spend) is False
    finally:
        _shared_budget._sleep = original
        store.close()
    assert faults == [1]
    assert slept == []


class Conflicting(SharedMemory):
    """A shared store whose first ``conflicts`` compare-and-sets lose to another writer."""

    def __init__(self, conflicts: int) -> None:
        super().__init__()
        self.conflicts = conflicts

    def record_put(self, *args: Any, **kwargs: Any) -> Any:
        if self.conflicts > 0:
            self.conflicts -= 1
            self.inner.record_put(BUDGET_SPACE, "search:read", {"milli": 5000})  # the other
            return None
        return super().record_put(*args, **kwargs)


def test_conflicts_back_off_with_growing_bounded_jitter(monkeypatch):
    """Each conflict waits a jittered while before reading again: the windows grow and
    stay under the cap, and the decision is made once a write wins."""
    from toolbreaker.core._retry import spend
    from toolbreaker.runtime._breaker import _shared_budget
    from toolbreaker.runtime._breaker._shared_budget import BACKOFF_CAP_S, SharedBudget

    slept: list[float] = []
    monkeypatch.setattr(_shared_budget, "_sleep", slept.append)
    store = Conflicting(conflicts=6)
    budget = SharedBudget("search:read", RetryPolicy(budget=5), store)
    assert budget.update(spend) is True
    assert len(slept) == 6
    assert all(0 <= s <= BACKOFF_CAP_S for s in slept)
    assert store.inner.record_get(BUDGET_SPACE, "search:read")[0] == {"milli": 4000}


def test_conflicts_that_never_end_decide_no_retry_within_a_bounded_wait(monkeypatch):
    """A write that loses every time: "no retry" once MAX_BACKOFF_S has passed (on a
    clock the sleeps advance), having waited at most that plus one window."""
    from toolbreaker.core._retry import spend
    from toolbreaker.runtime._breaker import _shared_budget
    from toolbreaker.runtime._breaker._shared_budget import (
        ATTEMPTS,
        BACKOFF_CAP_S,
        MAX_BACKOFF_S,
        SharedBudget,
    )

    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(_shared_budget, "_sleep", sleep)
    monkeypatch.setattr(_shared_budget, "_clock", lambda: int(now[0] * 1000))
    faults: list[int] = []
    budget = SharedBudget(
        "search:read", RetryPolicy(budget=5), Conflicting(10_000), lambda: faults.append(1)
    )
    assert budget.update(spend) is False
    assert MAX_BACKOFF_S <= sum(slept) <= MAX_BACKOFF_S + BACKOFF_CAP_S
    assert len(slept) < ATTEMPTS
    assert faults == [1]


def test_conflicts_on_a_loop_thread_end_after_attempts_without_sleeping():
    """Asked on an event loop's own thread, a decision never sleeps: at most ATTEMPTS
    immediate tries, then "no retry"."""
    from toolbreaker.core._retry import spend
    from toolbreaker.runtime._breaker._shared_budget import ATTEMPTS, SharedBudget

    store = Conflicting(10_000)

    async def main() -> bool:
        return SharedBudget("search:read", RetryPolicy(budget=5), store).update(spend)

    assert asyncio.run(main()) is False
    assert store.conflicts == 10_000 - ATTEMPTS


def test_conflicts_on_the_event_loop_never_sleep_there(monkeypatch, service):
    """Async callers pay the shared budget in a worker thread, so a backoff never blocks
    the loop; a decision asked on the loop thread itself retries without sleeping."""
    from toolbreaker.core._retry import spend
    from toolbreaker.runtime._breaker import _shared_budget
    from toolbreaker.runtime._breaker._shared_budget import SharedBudget

    where: list[int] = []
    monkeypatch.setattr(_shared_budget, "_sleep", lambda s: where.append(threading.get_ident()))

    async def main() -> int:
        loop_thread = threading.get_ident()
        direct = SharedBudget("search:read", RetryPolicy(budget=5), Conflicting(3))
        assert direct.update(spend) is True  # on the loop thread: no sleep at all
        assert where == []
        store = Conflicting(3)
        breaker = make(store, budget=1)
        service.inject("GET /search", Fault(status=503))

        async def asearch() -> dict[str, Any]:
            return await asyncio.to_thread(search, service)

        assert (await breaker.acall(asearch))["query"] == "cable"
        return loop_thread

    loop_thread = asyncio.run(main())
    assert len(where) == 3
    assert loop_thread not in where
