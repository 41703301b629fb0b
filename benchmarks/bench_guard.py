"""``@breaker.guard`` against ``call()`` and circuitbreaker, closed and open, sync and async.

Run ``python benchmarks/bench_guard.py`` (about a minute; ``--quick`` for a smoke test).
Every row is timed in short samples (2,000 calls), interleaved with every other row, and
the least sample is kept: on a shared VM the least is what the code costs, the rest is the
neighbours. ``overhead`` is the row minus the bare call of its loop; the ratios divide
overheads measured side by side in this one process. Cooperative mode throughout (the
call runs inline, as the peer's do).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Awaitable, Callable

from toolbreaker import Breaker, Policy
from toolbreaker.errors import CircuitOpen

try:
    import circuitbreaker
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise SystemExit("missing circuitbreaker; install it with: pip install -e '.[bench]'") from exc

N = 2_000


def noop() -> None:
    return None


async def anoop() -> None:
    return None


def boom() -> None:
    raise ValueError


def breaker(*, opened: bool) -> Breaker:
    b = Breaker(
        f"bench-{'open' if opened else 'closed'}",
        policy=Policy(failure_threshold=1, cooldown_ms=3_600_000),
        timeout=5.0,
        enforce="cooperative",
    )
    if opened:
        permit = b.allow()
        permit.record("failure")  # type: ignore[union-attr]
    return b


def sync_rows() -> dict[str, Callable[[int], None]]:
    closed, opened = breaker(opened=False), breaker(opened=True)
    guarded, guarded_open = closed.guard(noop), opened.guard(noop)
    peer = circuitbreaker.circuit(failure_threshold=1, recovery_timeout=3600, name="c")(noop)
    peer_open = circuitbreaker.circuit(failure_threshold=1, recovery_timeout=3600, name="o")(boom)
    try:  # noqa: SIM105 - a with block would be measured too
        peer_open()
    except ValueError:
        pass
    refused = circuitbreaker.CircuitBreakerError

    def bare(n: int) -> None:
        for _ in range(n):
            noop()

    def call(n: int) -> None:
        for _ in range(n):
            closed.call(noop)

    def guard(n: int) -> None:
        for _ in range(n):
            guarded()

    def cb(n: int) -> None:
        for _ in range(n):
            peer()

    def call_open(n: int) -> None:
        for _ in range(n):
            try:  # noqa: SIM105 - a with block would be measured too
                opened.call(noop)
            except CircuitOpen:
                pass

    def guard_open(n: int) -> None:
        for _ in range(n):
            guarded_open()

    def cb_open(n: int) -> None:
        for _ in range(n):
            try:  # noqa: SIM105 - a with block would be measured too
                peer_open()
            except refused:
                pass

    return {f.__name__: f for f in (bare, call, guard, cb, call_open, guard_open, cb_open)}


def async_rows() -> dict[str, Callable[[int], Awaitable[None]]]:
    closed, opened = breaker(opened=False), breaker(opened=True)
    guarded, guarded_open = closed.guard(anoop), opened.guard(anoop)

    async def bare(n: int) -> None:
        for _ in range(n):
            await anoop()

    async def call(n: int) -> None:
        for _ in range(n):
            await closed.acall(anoop)

    async def guard(n: int) -> None:
        for _ in range(n):
            await guarded()

    async def call_open(n: int) -> None:
        for _ in range(n):
            try:  # noqa: SIM105 - a with block would be measured too
                await opened.acall(anoop)
            except CircuitOpen:
                pass

    async def guard_open(n: int) -> None:
        for _ in range(n):
            await guarded_open()

    return {f.__name__: f for f in (bare, call, guard, call_open, guard_open)}


def report(title: str, best: dict[str, float]) -> None:
    over = {k: v - best["bare"] for k, v in best.items() if k != "bare"}
    print(f"\n{title}: overhead ns/call (least of the samples)")
    for name, value in over.items():
        print(f"  {name:<12} {value:>8,.0f}")
    print(f"  guard / call (closed) {over['guard'] / over['call']:.2f}")
    print(f"  guard / call (open)   {over['guard_open'] / over['call_open']:.2f}")
    if "cb" in over:
        print(f"  guard / circuitbreaker (closed) {over['guard'] / over['cb']:.2f}")
        print(f"  guard / circuitbreaker (open)   {over['guard_open'] / over['cb_open']:.2f}")


async def measure_async(rows: dict[str, Callable[[int], Awaitable[None]]], samples: int) -> None:
    best = dict.fromkeys(rows, float("inf"))
    for _ in range(samples):
        for name, row in rows.items():
            started = time.perf_counter_ns()
            await row(N)
            best[name] = min(best[name], (time.perf_counter_ns() - started) / N)
    report("async", best)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke test")
    samples = 5 if parser.parse_args().quick else 300
    rows = sync_rows()
    best = dict.fromkeys(rows, float("inf"))
    gc.disable()  # a collection is no part of a call's cost; re-enabled between sections
    try:
        for _ in range(samples):
            for name, row in rows.items():
                started = time.perf_counter_ns()
                row(N)
                best[name] = min(best[name], (time.perf_counter_ns() - started) / N)
        report("sync", best)
        asyncio.run(measure_async(async_rows(), samples // 2))
    finally:
        gc.enable()


if __name__ == "__main__":
    main()
