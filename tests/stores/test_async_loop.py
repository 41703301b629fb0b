"""The event loop never waits on a store: ``acall`` awaits the store's ``aapply``.

A real redis-server sits behind a TCP proxy on 127.0.0.1 that holds every request for
200 ms, so every round trip takes at least that long. 200 concurrent calls whose outcomes
each need a round trip finish in about one round trip when the loop never waits on the
store, and in 200 of them (40 s) when it does: the test tells the two apart without a
tight clock. The heartbeat's longest stall is measured by
``benchmarks/bench_loop_stall.py`` (timing belongs there, not in a shared machine's tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest

from toolbreaker import Breaker, Policy, RedisStore
from toolbreaker.testing import SlowProxy

pytestmark = pytest.mark.slow

DELAY = 0.2


@pytest.fixture
def slow_redis(redis_server) -> Iterator[SlowProxy]:
    with SlowProxy(redis_server.port, DELAY) as proxy:
        yield proxy


def test_two_hundred_tasks_on_a_slow_store_never_stall_the_loop(slow_redis):
    """200 concurrent acall()s whose outcomes each need a 200 ms round trip overlap on
    the loop: together they take a few round trips, not 200 of them in a row."""
    store = RedisStore(
        slow_redis.url("redis"), prefix=f"t{uuid.uuid4().hex[:8]}", socket_timeout=5.0
    )
    # One breaker per task: writes to one key are ordered by its compare-and-set, so
    # they would take turns whatever the loop does.
    breakers = [
        Breaker(
            f"dep-{n}",
            store=store,
            timeout=10.0,
            enforce="cooperative",
            policy=Policy(failure_threshold=10_000, lease_ttl_ms=60_000),
        )
        for n in range(201)
    ]

    async def fail() -> None:
        raise ConnectionResetError("provider reset")

    async def main() -> tuple[float, float]:
        stall = 0.0
        running = True

        async def heartbeat() -> None:
            nonlocal stall
            last = time.perf_counter()
            while running:
                await asyncio.sleep(0.002)
                now = time.perf_counter()
                stall = max(stall, now - last - 0.002)
                last = now

        async def one(breaker: Breaker) -> None:
            with contextlib.suppress(ConnectionResetError):
                await breaker.acall(fail)

        await one(breakers[200])  # warm up: the client's first use imports and connects
        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await asyncio.gather(*(one(breaker) for breaker in breakers[:200]))
        elapsed = time.perf_counter() - started
        running = False
        await beat
        await store.aclose()
        return stall, elapsed

    try:
        stall, elapsed = asyncio.run(main())
    finally:
        store.close()
    assert elapsed >= DELAY  # the store really was slow: every failure is a round trip
    assert sum(b.stats.failures.get("network:ECONNRESET", 0) for b in breakers) == 201
    serial = 200 * DELAY
    assert elapsed < serial / 4, f"200 round trips took {elapsed:.1f} s: the loop waited"
    assert stall < serial / 4, f"the loop stalled {stall:.1f} s"


def test_new_connections_do_not_read_package_metadata_on_the_loop(redis_server, monkeypatch):
    """redis-py looks its own version up in the package metadata (a few ms of file reads)
    for every connection it opens unless told the version; the store tells it once, so
    a burst of new connections on the event loop reads no metadata."""
    from importlib import metadata

    store = RedisStore(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    breakers = [
        Breaker(f"dep-{n}", store=store, timeout=5.0, policy=Policy(failure_threshold=100))
        for n in range(8)
    ]
    lookups: list[str] = []
    real_version = metadata.version
    monkeypatch.setattr(
        metadata, "version", lambda name: lookups.append(name) or real_version(name)
    )

    async def fail() -> None:
        raise ConnectionResetError("provider reset")

    async def one(breaker: Breaker) -> None:
        with contextlib.suppress(ConnectionResetError):
            await breaker.acall(fail)

    async def main() -> None:
        await asyncio.gather(*(one(b) for b in breakers))
        await store.aclose()

    try:
        asyncio.run(main())
    finally:
        store.close()
    assert [sum(b.stats.failures.values()) for b in breakers] == [1] * 8
    assert lookups == []
