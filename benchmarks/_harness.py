"""The machinery of ``bench_overhead.py``: what it times, how, and how it reports.

The callables under protection, one timing loop per call shape (so no row pays for a
generic wrapper), toolbreaker's and the peers' breakers built in a known state, rows and
tables sampled interleaved, and the printed tables and summary lines. The tables
themselves, the pure core's section and the memory section are in ``bench_overhead.py``,
which checks that the peers are installed before it imports this module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import gc
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from itertools import repeat
from typing import Any

import aiobreaker
import circuitbreaker
import purgatory
import pybreaker

from toolbreaker import Breaker, Policy
from toolbreaker.core import rejects_callers

perf_counter_ns = time.perf_counter_ns

PEERS = ("pybreaker", "circuitbreaker", "aiobreaker", "purgatory")
TIMEOUT_S = 5.0  # the deadline toolbreaker needs; far above a no-op, never reached
HUGE_MS = 2_592_000_000  # 30 days, the longest cooldown a policy may hold
HUGE_S = 10**9
OPEN_POLICY = Policy(failure_threshold=1, cooldown_ms=HUGE_MS, cooldown_max_ms=HUGE_MS)
CLOSED_POLICY = Policy(failure_threshold=1)  # a no-op never fails, so it stays closed
WARMUP = 300  # untimed calls on every fresh breaker before its sample

_names = itertools.count(1)
THREADED: list[Breaker] = []  # breakers with worker threads, closed after their table
POOLS: list[concurrent.futures.ThreadPoolExecutor] = []  # the same for plain pools
STOPS: list[Callable[[], object]] = []  # stop the floor rows' threads after their table

SyncRun = Callable[[int], int]
AsyncRun = Callable[[int], Awaitable[int]]


# -- the callables under protection -----------------------------------------------------


def noop() -> None:
    return None


async def anoop() -> None:
    return None


def boom() -> None:
    raise ValueError("dependency down")


async def aboom() -> None:
    raise ValueError("dependency down")


# -- timing loops: one per call shape, so no row pays for a generic wrapper -------------


def loop0(fn: Callable[[], Any]) -> SyncRun:
    def run(n: int) -> int:
        start = perf_counter_ns()
        for _ in repeat(None, n):
            fn()
        return perf_counter_ns() - start

    return run


def loop1(fn: Callable[[Any], Any], arg: Any) -> SyncRun:
    def run(n: int) -> int:
        start = perf_counter_ns()
        for _ in repeat(None, n):
            fn(arg)
        return perf_counter_ns() - start

    return run


def loop0_raises(fn: Callable[[], Any], exc: type[BaseException]) -> SyncRun:
    def run(n: int) -> int:
        start = perf_counter_ns()
        for _ in repeat(None, n):
            try:  # noqa: SIM105 - contextlib.suppress would time itself, not the breaker
                fn()
            except exc:
                pass
        return perf_counter_ns() - start

    return run


def loop1_raises(fn: Callable[[Any], Any], arg: Any, exc: type[BaseException]) -> SyncRun:
    def run(n: int) -> int:
        start = perf_counter_ns()
        for _ in repeat(None, n):
            try:  # noqa: SIM105 - see loop0_raises
                fn(arg)
            except exc:
                pass
        return perf_counter_ns() - start

    return run


# Async loops hand control to the event loop every 64 calls, as real tools do when they
# wait on I/O: that lets asyncio drop cancelled deadline timers from its heap (a loop that
# never yields would time a 200k-entry heap instead). The bare row pays the same yield.
YIELD_MASK = 63


def aloop0(fn: Callable[[], Awaitable[Any]]) -> AsyncRun:
    async def run(n: int) -> int:
        pause = asyncio.sleep
        start = perf_counter_ns()
        for i in range(n):
            await fn()
            if not i & YIELD_MASK:
                await pause(0)
        return perf_counter_ns() - start

    return run


def aloop1(fn: Callable[[Any], Awaitable[Any]], arg: Any) -> AsyncRun:
    async def run(n: int) -> int:
        pause = asyncio.sleep
        start = perf_counter_ns()
        for i in range(n):
            await fn(arg)
            if not i & YIELD_MASK:
                await pause(0)
        return perf_counter_ns() - start

    return run


def aloop0_raises(fn: Callable[[], Awaitable[Any]], exc: type[BaseException]) -> AsyncRun:
    async def run(n: int) -> int:
        pause = asyncio.sleep
        start = perf_counter_ns()
        for i in range(n):
            try:  # noqa: SIM105 - see loop0_raises
                await fn()
            except exc:
                pass
            if not i & YIELD_MASK:
                await pause(0)
        return perf_counter_ns() - start

    return run


def aloop1_raises(
    fn: Callable[[Any], Awaitable[Any]], arg: Any, exc: type[BaseException]
) -> AsyncRun:
    async def run(n: int) -> int:
        pause = asyncio.sleep
        start = perf_counter_ns()
        for i in range(n):
            try:  # noqa: SIM105 - see loop0_raises
                await fn(arg)
            except exc:
                pass
            if not i & YIELD_MASK:
                await pause(0)
        return perf_counter_ns() - start

    return run


# -- breakers in a known state -----------------------------------------------------------


def tb_breaker(*, opened: bool, enforce: str = "cooperative") -> Breaker:
    breaker = Breaker(
        f"bench-{next(_names)}",
        policy=OPEN_POLICY if opened else CLOSED_POLICY,
        timeout=TIMEOUT_S,
        enforce=enforce,  # type: ignore[arg-type]
    )
    if opened:
        permit = breaker.allow()
        assert permit.admitted
        permit.record("failure")  # type: ignore[union-attr]
    expect(rejects_callers(breaker.state, breaker.policy) == opened, breaker)
    return breaker


def pyb_breaker(*, opened: bool) -> pybreaker.CircuitBreaker:
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=HUGE_S)
    if opened:
        # The failure that trips the breaker is raised as CircuitBreakerError.
        with contextlib.suppress(pybreaker.CircuitBreakerError):
            breaker.call(boom)
    expect(breaker.current_state == ("open" if opened else "closed"), breaker)
    return breaker


def cb_breaker() -> circuitbreaker.CircuitBreaker:
    # circuit() is the documented decorator factory; it returns the breaker object.
    breaker: circuitbreaker.CircuitBreaker = circuitbreaker.circuit(
        failure_threshold=1, recovery_timeout=HUGE_S, name=f"bench-{next(_names)}"
    )
    return breaker


def cb_trip(breaker: circuitbreaker.CircuitBreaker, failing: Callable[[], Any]) -> None:
    with contextlib.suppress(ValueError):
        failing()
    expect(breaker.opened, breaker)


async def acb_trip(
    breaker: circuitbreaker.CircuitBreaker, failing: Callable[[], Awaitable[Any]]
) -> None:
    with contextlib.suppress(ValueError):
        await failing()
    expect(breaker.opened, breaker)


async def aio_breaker(*, opened: bool) -> aiobreaker.CircuitBreaker:
    breaker = aiobreaker.CircuitBreaker(fail_max=1, timeout_duration=datetime.timedelta(days=3650))
    if opened:
        with contextlib.suppress(aiobreaker.CircuitBreakerError):
            await breaker.call_async(aboom)
    want = aiobreaker.CircuitBreakerState.OPEN if opened else aiobreaker.CircuitBreakerState.CLOSED
    expect(breaker.current_state == want, breaker)
    return breaker


async def purgatory_pair(*, opened: bool) -> tuple[Callable[[], Awaitable[Any]], Any]:
    """A decorated no-op and the breaker behind it (whose context holds the state)."""
    factory = purgatory.AsyncCircuitBreakerFactory(default_threshold=1, default_ttl=HUGE_S)
    name = f"bench-{next(_names)}"
    guarded = factory(name)(anoop)
    if opened:
        with contextlib.suppress(ValueError):
            await factory(name)(aboom)()
    brk = await factory.get_breaker(name)
    expect(brk.context.state == ("opened" if opened else "closed"), brk.context)
    return guarded, brk


def expect(condition: bool, what: object) -> None:
    if not condition:
        raise RuntimeError(f"benchmark setup is not in the intended state: {what!r}")


# -- rows and tables -----------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """One line of a table: how to build a fresh, warmed-up runner for one sample."""

    label: str
    lib: str  # "bare", "toolbreaker" or a peer's distribution name
    setup: Callable[[], Any]  # returns a SyncRun, or for async tables an awaitable of one
    n: int
    reference: bool = False
    default: bool = False  # toolbreaker's default mode: listed first
    samples: list[float] = dataclasses.field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclasses.dataclass
class Table:
    key: str
    title: str
    rows: list[Row]

    def bare(self) -> Row:
        return next(r for r in self.rows if r.lib == "bare")

    def reference(self) -> Row:
        return next(r for r in self.rows if r.reference)

    def default(self) -> Row:
        return next(r for r in self.rows if r.default)

    def overhead(self, row: Row) -> float:
        return row.median - self.bare().median


def measure_sync(table: Table, repeats: int) -> None:
    for _ in range(repeats):
        for row in table.rows:
            run = row.setup()
            run(WARMUP)
            gc.collect()
            row.samples.append(run(row.n) / row.n)
            del run


async def measure_async(table: Table, repeats: int) -> None:
    for _ in range(repeats):
        for row in table.rows:
            run = await row.setup()
            await run(WARMUP)
            gc.collect()
            row.samples.append(await run(row.n) / row.n)
            del run


# -- report --------------------------------------------------------------------------------


def fmt_ns(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def print_table(table: Table) -> list[dict[str, Any]]:
    bare = table.bare()
    ref_over = table.overhead(table.reference())
    print(f"\n{table.title}")
    print(
        f"  median of {len(bare.samples)} samples; overhead = row - bare; x tb = overhead / (*);"
        " d = default mode"
    )
    head = (
        f"  {'row':<58} {'n/sample':>9} {'ns/call':>9} {'min-max':>15} {'overhead':>9} {'x tb':>7}"
    )
    print(head)
    print("  " + "-" * (len(head) - 2))
    out = []
    for row in table.rows:
        over = table.overhead(row)
        is_bare = row is bare
        ratio = over / ref_over if ref_over > 0 and not is_bare else None
        spread = f"{fmt_ns(min(row.samples))}-{fmt_ns(max(row.samples))}"
        mark = "*" if row.reference else "d" if row.default else " "
        print(
            f"  {mark}{row.label:<57} {row.n:>9,} {fmt_ns(row.median):>9} {spread:>15} "
            f"{'-' if is_bare else fmt_ns(over):>9} {'-' if ratio is None else f'{ratio:.2f}':>7}"
        )
        out.append(
            {
                "label": row.label,
                "lib": row.lib,
                "reference": row.reference,
                "default_mode": row.default,
                "n_per_sample": row.n,
                "samples_ns_per_call": row.samples,
                "median_ns_per_call": row.median,
                "overhead_ns": None if is_bare else over,
                "ratio_vs_toolbreaker_overhead": ratio,
            }
        )
    return out


def summary_line(table: Table) -> dict[str, Any]:
    ref, default = table.reference(), table.default()
    peers = [r for r in table.rows if r.lib in PEERS]
    best_peer = min(peers, key=table.overhead)
    best_tb = min((r for r in table.rows if r.lib == "toolbreaker"), key=table.overhead)
    ours, theirs = table.overhead(ref), table.overhead(best_peer)
    ours_default = table.overhead(default)
    ratio = ours / theirs if theirs > 0 else float("inf")
    ratio_default = ours_default / theirs if theirs > 0 else float("inf")
    verdict = "toolbreaker faster" if ratio < 1 else "peer faster"
    line = (
        f"{table.key:<13} default {default.label}: {fmt_ns(ours_default)} ns, ratio "
        f"{ratio_default:.2f}\n  {'':<13} toolbreaker {fmt_ns(ours)} ns vs fastest peer "
        f"{fmt_ns(theirs)} ns ({best_peer.label}): ratio {ratio:.2f} -> {verdict}"
    )
    if table.overhead(best_tb) < 0.95 * ours:  # a toolbreaker path clearly cheaper than (*)
        line += f"; cheapest toolbreaker path: {best_tb.label} {fmt_ns(table.overhead(best_tb))} ns"
    floor = next((r for r in table.rows if r.lib == "floor"), None)
    over_floor = None if floor is None else default.median / floor.median
    if over_floor is not None:
        # The sync default's target: within 1.25x of the bare hand-off measured beside it.
        line += f"\n  {'':<13} default / floor (bare hand-off to a thread): {over_floor:.2f}x"
    elif table.key == "closed_async":
        # The async default's target: within 1 us of the cooperative path.
        line += f"\n  {'':<13} default - cooperative: {fmt_ns(ours_default - ours)} ns"
    print("  " + line)
    return {
        "ratio_default_over_floor": over_floor,
        "category": table.key,
        "default_row": default.label,
        "default_overhead_ns": ours_default,
        "ratio_default_over_peer": ratio_default,
        "toolbreaker_row": ref.label,
        "toolbreaker_overhead_ns": ours,
        "fastest_peer_row": best_peer.label,
        "fastest_peer_overhead_ns": theirs,
        "ratio_toolbreaker_over_peer": ratio,
        "toolbreaker_faster": ratio < 1,
    }


def environment() -> dict[str, Any]:
    versions = {name: metadata.version(name) for name in ("toolbreaker", *PEERS)}
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
    }


def nbytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) < 2**20:
        return f"{value:+,.0f} B"
    return f"{value / 2**20:+,.1f} MiB"
