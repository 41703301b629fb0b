"""Bulkheads and retry budgets shared by OS processes through a real SQLite file and a
real Redis (issue 12).

Workers are spawned processes, each with its own store and breaker, calling the real
local service that runs in the test process; the service counts the requests it handles
at once, whichever process sent them. One worker is SIGKILLed while it holds a slot.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from store_kinds import kinds, open_store, reopen
from toolbreaker import Breaker, Policy
from toolbreaker.core._retry import RetryPolicy
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._breaker._bulkhead import MARGIN_MS
from toolbreaker.runtime._breaker._shared_budget import BUDGET_SPACE
from toolbreaker.stores import RedisStore
from toolbreaker.stores._records import breaker_space
from toolbreaker.testing import Fault, request_json

PATIENCE = 30.0
PROCESSES = 4
THREADS = 8

# -- what runs in the worker processes ---------------------------------------------------


def make_store(kind: str, target: str) -> Any:
    return reopen(target)


def crowd(kind: str, target: str, url: str, start_ns: int) -> dict[str, int]:
    """8 threads each call the service once through a breaker limited to 3 in all."""
    store = make_store(kind, target)
    breaker = Breaker("search", timeout=10, max_concurrent=3, store=store, enforce="cooperative")
    counts = {"admitted": 0, "saturated": 0, "other": 0}
    lock = threading.Lock()

    def call() -> None:
        while time.monotonic_ns() < start_ns:
            time.sleep(0.001)
        try:
            breaker.call(lambda: request_json("GET", f"{url}/search?q=x", timeout=10))
            what = "admitted"
        except CircuitOpen as exc:
            what = "saturated" if exc.reason == "saturated" else "other"
        with lock:
            counts[what] += 1

    threads = [threading.Thread(target=call) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    return counts


def hold_slot(kind: str, target: str, queue: Any) -> None:
    """Take the only slot and never give it back (the test kills this process)."""
    store = make_store(kind, target)
    breaker = Breaker("held", timeout=1, max_concurrent=1, store=store, enforce="cooperative")
    permit = breaker.allow()
    queue.put(permit.admitted)
    time.sleep(120)


def retry_through(kind: str, target: str, url: str, start_ns: int) -> dict[str, int]:
    """One call with up to 3 attempts against an outage; the budget is shared."""
    store = make_store(kind, target)
    breaker = Breaker(
        "search",
        operation="read",
        policy=Policy(failure_threshold=1000),
        timeout=5,
        store=store,
        retry=RetryPolicy(max_attempts=3, base_ms=1, max_backoff_ms=5, budget=3),
        enforce="cooperative",
    )
    while time.monotonic_ns() < start_ns:
        time.sleep(0.001)
    with contextlib.suppress(Exception):  # the outage: every call fails
        breaker.call(lambda: request_json("GET", f"{url}/search?q=x", timeout=5))
    store.close()
    return dict(breaker.stats.retries)


def warm(_: int) -> int:
    import redis  # noqa: F401 - imported before the timeline starts

    return os.getpid()


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as workers:
        workers.map(warm, range(PROCESSES), chunksize=1)
        yield workers
        workers.close()
        workers.join()


# Every kind other processes reach, but the Redis Cluster's six servers: the cluster's
# own tests cover it (tests/stores/test_redis_cluster.py).
@pytest.fixture(params=kinds(shared=True, cluster=False))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Any, request: pytest.FixtureRequest) -> str:
    """The store's URL, under a key prefix of the test's own."""
    store, url = open_store(kind, request, tmp_path)
    store.close()
    return url


# -- tests ---------------------------------------------------------------------------


@pytest.mark.slow
def test_processes_never_exceed_the_shared_limit(pool, kind, target, service):
    """4 processes x 8 threads call one dependency limited to 3 across processes: the
    service never handles more than 3 of their requests at once."""
    service.inject("GET /search", *[Fault(delay=0.05)] * (PROCESSES * THREADS))
    start = time.monotonic_ns() + 500_000_000
    results = pool.starmap(crowd, [(kind, target, service.url, start)] * PROCESSES)
    admitted = sum(r["admitted"] for r in results)
    assert sum(r["other"] for r in results) == 0
    assert admitted + sum(r["saturated"] for r in results) == PROCESSES * THREADS
    assert 1 <= service.peak_in_flight <= 3
    assert service.hits["GET /search"] == admitted
    store = make_store(kind, target)
    assert store.record_list(breaker_space("bulkhead", "search")) == []  # every slot given back
    store.close()


@pytest.mark.slow
def test_a_slot_held_by_a_killed_process_comes_back(kind, target):
    """A process takes the only slot and is SIGKILLed: the slot is refused while its lease
    runs (deadline + margin), then the next caller gets it."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    holder = context.Process(target=hold_slot, args=(kind, target, queue))
    holder.start()
    try:
        assert queue.get(timeout=PATIENCE) is True
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        holder.join(PATIENCE)
    store = make_store(kind, target)
    breaker = Breaker("held", timeout=1, max_concurrent=1, store=store, enforce="cooperative")
    denied = breaker.allow()
    assert not denied.admitted
    assert denied.reason == "saturated"
    give_up = time.monotonic() + PATIENCE + (1_000 + MARGIN_MS) / 1000
    while not (permit := breaker.allow()).admitted:
        assert time.monotonic() < give_up, "the dead holder's slot never came back"
        time.sleep(0.05)
    permit.record("success")
    assert store.record_list(breaker_space("bulkhead", "held")) == []
    store.close()


@pytest.mark.slow
def test_processes_share_one_retry_budget(pool, kind, target, service):
    """4 processes each retry a failing call up to twice; the shared budget of 3 retries
    pays for at most 3 of them in all, and the record shows what is left."""
    service.outage("GET /search", status=503)
    start = time.monotonic_ns() + 500_000_000
    results = pool.starmap(retry_through, [(kind, target, service.url, start)] * PROCESSES)
    made = sum(r.get("retry", 0) for r in results)
    assert 1 <= made <= 3
    assert service.hits["GET /search"] == PROCESSES + made
    store = make_store(kind, target)
    found = store.record_get(BUDGET_SPACE, "search:read")
    assert found is not None
    assert found[0] == {"milli": (3 - made) * 1000}
    store.close()


@pytest.mark.slow
def test_a_redis_that_is_down_denies_slots_and_retries(private_redis):
    """The shared store is down: a slot is denied (fail closed) and no retry is paid."""
    store = RedisStore(private_redis.url)
    bulkhead = Breaker("down", timeout=1, max_concurrent=2, store=store, enforce="cooperative")
    private_redis.kill()
    denied = bulkhead.allow()
    assert not denied.admitted
    assert denied.reason == "store-unavailable"
    assert bulkhead.stats.record_faults == 1
    store.close()
