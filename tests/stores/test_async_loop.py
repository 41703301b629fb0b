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
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from toolbreaker import Breaker, Policy, RedisStore

pytestmark = pytest.mark.slow

DELAY = 0.2


#: A TCP proxy run in a process of its own (in this process its threads would compete
#: with the event loop under test for the GIL): holds each chunk from a client for DELAY s.
PROXY = """
import asyncio, sys

target, delay = int(sys.argv[1]), float(sys.argv[2])

async def pipe(reader, writer, hold):
    try:
        while chunk := await reader.read(65536):
            if hold:
                await asyncio.sleep(hold)
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()

async def serve(client_r, client_w):
    server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
    await asyncio.gather(pipe(client_r, server_w, delay), pipe(server_r, client_w, 0))

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


class DelayProxy:
    """A delaying TCP proxy in front of ``target`` on 127.0.0.1, in a child process."""

    def __init__(self, target: int, delay: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PROXY, str(target), str(delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.process.kill()
        self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()  # else the next test's gc reports an unclosed pipe

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture
def slow_redis(redis_server) -> Iterator[DelayProxy]:
    with DelayProxy(redis_server.port, DELAY) as proxy:
        yield proxy


def test_two_hundred_tasks_on_a_slow_store_never_stall_the_loop(slow_redis):
    """200 concurrent acall()s whose outcomes each need a 200 ms round trip overlap on
    the loop: together they take a few round trips, not 200 of them in a row."""
    store = RedisStore(slow_redis.url, prefix=f"t{uuid.uuid4().hex[:8]}", socket_timeout=5.0)
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
