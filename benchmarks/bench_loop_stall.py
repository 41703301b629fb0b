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

from toolbreaker import Breaker, Policy, RedisStore

DELAY = 0.2
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
async def serve(cr, cw):
    sr, sw = await asyncio.open_connection("127.0.0.1", target)
    await asyncio.gather(pipe(cr, sw, delay), pipe(sr, cw, 0))
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def measure(url: str) -> tuple[float, float]:
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
        proxy = subprocess.Popen(
            [sys.executable, "-c", PROXY, str(port), str(DELAY)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proxy.stdout is not None
            proxy_port = int(proxy.stdout.readline())
            time.sleep(0.3)
            stall, elapsed = asyncio.run(measure(f"redis://127.0.0.1:{proxy_port}/0"))
        finally:
            proxy.kill()
            server.kill()
    print(f"store round trip >= {DELAY * 1000:.0f} ms; 200 concurrent acall() failures")
    print(f"  all 200 done in {elapsed * 1000:.0f} ms (serialised would be {200 * DELAY:.0f} s)")
    print(f"  longest event-loop stall: {stall * 1000:.1f} ms")


if __name__ == "__main__":
    main()
