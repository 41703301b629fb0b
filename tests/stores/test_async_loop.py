"""The event loop never waits on a store: ``acall`` awaits the store's ``aapply``.

A real redis-server sits behind a TCP proxy on 127.0.0.1 that holds every request for
200 ms, so every round trip takes at least that long. When the loop never waits on the
store, 200 concurrent calls whose outcomes each need a round trip are all awaiting it at
once; when it does, one is. The test counts them instead of timing them. The heartbeat's
longest stall is measured by ``benchmarks/bench_loop_stall.py`` (timing belongs there,
not in a shared machine's tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from conformance import HANG_GUARD

from toolbreaker import Breaker, Policy
from toolbreaker.stores import RedisStore
from toolbreaker.testing._proxy import SlowProxy

pytestmark = pytest.mark.slow

DELAY = 0.2


@pytest.fixture
def slow_redis(redis_server) -> Iterator[SlowProxy]:
    with SlowProxy(redis_server.port, DELAY) as proxy:
        yield proxy


def test_two_hundred_tasks_on_a_slow_store_never_stall_the_loop(slow_redis):
    """200 concurrent acall()s whose outcomes each need a 200 ms round trip overlap on
    the loop: all 200 are awaiting the store at once, and the loop keeps running while
    they are. A loop that waited on the store would hold one round trip at a time."""
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
    # Counted, not timed: how many round trips are awaiting the store at once, and how
    # many heartbeats the loop ran while all 200 were.
    in_flight = peak = trips = beats_while_all_waited = 0
    around_trip = store._around_trip

    async def counted(*args: object) -> object:
        nonlocal in_flight, peak, trips
        trips += 1
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await around_trip(*args)
        finally:
            in_flight -= 1

    store._around_trip = counted  # type: ignore[method-assign]

    async def fail() -> None:
        raise ConnectionResetError("provider reset")

    async def main() -> None:
        nonlocal beats_while_all_waited
        running = True

        async def heartbeat() -> None:
            nonlocal beats_while_all_waited
            while running:
                await asyncio.sleep(0.002)
                beats_while_all_waited += in_flight == 200

        async def one(breaker: Breaker) -> None:
            with contextlib.suppress(ConnectionResetError):
                await breaker.acall(fail)

        await one(breakers[200])  # warm up: the client's first use imports and connects
        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.01)
        await asyncio.gather(*(one(breaker) for breaker in breakers[:200]))
        running = False
        await beat
        await store.aclose()

    try:
        asyncio.run(main())
    finally:
        store.close()
    assert sum(b.stats.failures.get("network:ECONNRESET", 0) for b in breakers) == 201
    assert trips >= 201  # every failure is a round trip (the warm-up's too)
    assert peak == 200, f"at most {peak} round trips overlapped: the loop waited"
    assert beats_while_all_waited >= 1, "the loop did not run while the store was awaited"


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


def test_a_run_guards_journal_on_a_slow_store_never_blocks_the_loop(slow_redis):
    """A write through RunGuard.acall journals it pending, checks and confirms it: round
    trips of at least 200 ms to a slow Redis. Each runs off the loop's thread, and a
    ticker on the same loop ticks while each is in flight (a blocked loop could not)."""
    from toolbreaker import RunGuard

    journal = RedisStore(
        slow_redis.url("redis"),
        prefix=f"t{uuid.uuid4().hex[:8]}",
        socket_timeout=5.0,
        volatile_journal=True,
    )
    guard = RunGuard(f"task-{uuid.uuid4().hex[:8]}", journal=journal)
    ticks = 0
    trips: list[tuple[bool, bool]] = []  # (on the loop's thread, the ticker ticked meanwhile)
    loop_thread: list[threading.Thread] = []

    def watched(call):
        def trip(*args, **kwargs):
            on_loop = threading.current_thread() is loop_thread[0]
            before = ticks
            try:
                return call(*args, **kwargs)
            finally:
                # A hang guard only: the ticker cannot advance while this blocks its loop.
                give_up = time.monotonic() + HANG_GUARD
                while ticks == before and not on_loop and time.monotonic() < give_up:
                    time.sleep(0.001)
                trips.append((on_loop, ticks > before))

        return trip

    journal.journal_put = watched(journal.journal_put)  # type: ignore[method-assign]
    journal.journal_get = watched(journal.journal_get)  # type: ignore[method-assign]

    @guard.tool(risk="reversible_write")
    async def create_ticket(title: str, idempotency_key: str) -> dict:
        return {"id": "T-1", "title": title}

    async def main() -> object:
        nonlocal ticks
        loop_thread.append(threading.current_thread())
        running = True

        async def ticker() -> None:
            nonlocal ticks
            while running:
                await asyncio.sleep(0.001)
                ticks += 1

        beat = asyncio.create_task(ticker())
        result = await guard.acall("create_ticket", {"title": "printer"})
        running = False
        await beat
        return result

    try:
        result = asyncio.run(main())
        assert result == {"id": "T-1", "title": "printer"}
        assert journal.journal_entries(guard.task)[0]["status"] == "confirmed"
    finally:
        journal.close()
    assert len(trips) >= 3  # pending, checked, confirmed
    assert all(trip == (False, True) for trip in trips), trips
