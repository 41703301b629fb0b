"""Does a slow store stall the event loop? Breaker.acall against Redis behind a 200 ms proxy.

200 concurrent calls, one breaker each, whose outcomes each need a store round trip; a
heartbeat task measures the loop's longest stall. Needs ``redis-server`` on the PATH.

    python benchmarks/bench_loop_stall.py
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from toolbreaker import Breaker, Policy
from toolbreaker.stores import RedisStore
from toolbreaker.testing._proxy import SlowProxy

DELAY = 0.2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def measure(url: str, *, warm: bool) -> tuple[float, float]:
    store = RedisStore(url, prefix=f"b{uuid.uuid4().hex[:6]}", socket_timeout=5.0)
    policy = Policy(failure_threshold=10_000, lease_ttl_ms=60_000)
    breakers = [
        Breaker(f"d{n}", store=store, timeout=10.0, enforce="cooperative", policy=policy)
        for n in range(201)
    ]

    async def fail() -> None:
        raise ConnectionResetError("reset")

    async def one(breaker: Breaker) -> None:
        with contextlib.suppress(ConnectionResetError):
            await breaker.acall(fail)

    await one(breakers[200])  # imports and the first connection
    if warm:
        # Every breaker's first call once, unmeasured: the client's connection pool grows
        # to 200 connections and each view learns its state; then measure steady failures.
        await asyncio.gather(*(one(b) for b in breakers[:200]))
    stall, running = 0.0, True

    async def heartbeat() -> None:
        nonlocal stall
        last = time.perf_counter()
        while running:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stall, last = max(stall, now - last - 0.001), now

    beat = asyncio.create_task(heartbeat())
    started = time.perf_counter()
    await asyncio.gather(*(one(b) for b in breakers[:200]))
    elapsed = time.perf_counter() - started
    running = False
    await beat
    await store.aclose()
    store.close()
    return stall, elapsed


def main() -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed")
    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory],
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.3)
            with SlowProxy(port, DELAY) as proxy:
                cold = asyncio.run(measure(proxy.url("redis"), warm=False))
                warm = asyncio.run(measure(proxy.url("redis"), warm=True))
        finally:
            server.kill()
    print(f"store round trip >= {DELAY * 1000:.0f} ms; 200 concurrent acall() failures")
    for name, (stall, elapsed) in (("first calls", cold), ("steady", warm)):
        print(
            f"  {name:<11}: all 200 done in {elapsed * 1000:.0f} ms (serialised would be "
            f"{200 * DELAY:.0f} s); longest event-loop stall {stall * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
