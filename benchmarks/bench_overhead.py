"""Overhead of toolbreaker against the classic Python circuit breakers, in one process.

Run ``python benchmarks/bench_overhead.py`` (about two minutes) or ``--quick`` (a smoke
test of every row in a few seconds). ``--json PATH`` also writes the raw samples.

Method (the same as the peer survey's): every row is timed ``--repeats`` times (5) and
the median ns/call is reported; ``time.perf_counter_ns``; the garbage collector stays on
(a collection runs between samples, never inside one); the real monotonic clock is used.
Rows of a table are interleaved (repeat 1 of every row, then repeat 2 ...) so a slow
phase of a noisy VM spreads over all rows instead of landing on one. Every sample gets a
freshly built, warmed-up breaker whose state (closed or open) is checked when it is built;
toolbreaker's rejection and two-step rows also check its counters after timing.

Each table lists toolbreaker's *default* mode first (marked ``d``: ``call`` runs the
function in a worker thread and returns at the deadline, ``acall`` cancels it at the
deadline through the loop's watchdog), then the other modes, then the peers; every row
names its mode in brackets. The peers enforce no deadline at all. The sync table also
has a ``floor`` row: a bare hand-off to a waiting thread and back (two locks, no breaker),
the least any deadline that answers its caller while a sync call runs on can cost in
CPython; on an idle virtual machine it is dominated by waking the sleeping threads.

``overhead`` is the row minus the table's bare call (loop and no-op included in both);
``x tb`` divides a row's overhead by the overhead of the table's toolbreaker reference
row (marked ``*``: the cooperative mode, which like the peers runs the call inline), so
peers above 1.00 cost more than toolbreaker.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import gc
import itertools
import json
import os
import random
import statistics
import sys
import threading
import tracemalloc
from collections.abc import Callable
from itertools import repeat
from pathlib import Path
from typing import Any

import toolbreaker
from toolbreaker import Policy
from toolbreaker.core import BreakerState, Event, Replay, apply, rejects_callers
from toolbreaker.core._breaker.machine import step
from toolbreaker.core._breaker.state import admitted_probe
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime import Rejection

try:
    import aiobreaker
    import circuitbreaker
    import pybreaker
    from purgatory.domain.model import OpenedState
except ImportError as exc:  # pragma: no cover - depends on the environment
    sys.exit(f"missing benchmark peer ({exc.name}); install them with: pip install -e '.[bench]'")

from _harness import (
    POOLS,
    STOPS,
    THREADED,
    TIMEOUT_S,
    WARMUP,
    AsyncRun,
    Row,
    SyncRun,
    Table,
    aboom,
    acb_trip,
    aio_breaker,
    aloop0,
    aloop0_raises,
    aloop1,
    aloop1_raises,
    anoop,
    boom,
    cb_breaker,
    cb_trip,
    environment,
    expect,
    loop0,
    loop0_raises,
    loop1,
    loop1_raises,
    measure_async,
    measure_sync,
    nbytes,
    noop,
    perf_counter_ns,
    print_table,
    purgatory_pair,
    pyb_breaker,
    summary_line,
    tb_breaker,
)

# -- 1. closed state, sync ---------------------------------------------------------------


def closed_sync_table(n: int, n_thread: int) -> Table:
    def bare() -> SyncRun:
        return loop0(noop)

    def tb_call() -> SyncRun:
        return loop1(tb_breaker(opened=False).call, noop)

    def tb_guard() -> SyncRun:
        return loop0(tb_breaker(opened=False).guard(noop))

    def tb_two_step() -> SyncRun:
        breaker = tb_breaker(opened=False)
        allow = breaker.allow

        def run(count: int) -> int:
            start = perf_counter_ns()
            for _ in repeat(None, count):
                allow().record("success")  # type: ignore[union-attr]
            elapsed = perf_counter_ns() - start
            expect(breaker.stats.rejected == 0, breaker)
            return elapsed

        return run

    def tb_thread() -> SyncRun:
        breaker = tb_breaker(opened=False, enforce="thread")
        THREADED.append(breaker)
        return loop1(breaker.call, noop)

    def tb_old_default() -> SyncRun:
        # What enforce="thread" did before the worker bulkhead: a ThreadPoolExecutor
        # future per call around the inline call.
        call = tb_breaker(opened=False).call
        pool = concurrent.futures.ThreadPoolExecutor(16)
        POOLS.append(pool)

        def run(count: int) -> int:
            submit = pool.submit
            start = perf_counter_ns()
            for _ in repeat(None, count):
                submit(call, noop).result(TIMEOUT_S)
            return perf_counter_ns() - start

        return run

    def handoff_floor() -> SyncRun:
        # The least any deadline that answers the caller while the call runs on can cost
        # in CPython: hand the call to a waiting thread and wait for it (two locks, one
        # wake-up each way), with no breaker at all. The default row is measured against it.
        go, done = threading.Lock(), threading.Lock()
        go.acquire()
        done.acquire()
        calls: list[Callable[[], object]] = []

        def serve() -> None:
            while True:
                go.acquire()
                if not calls:
                    return
                calls[0]()
                done.release()

        worker = threading.Thread(target=serve, daemon=True)
        worker.start()
        calls.append(noop)
        STOPS.append(lambda: (calls.clear(), go.release()))

        def run(count: int) -> int:
            release, acquire = go.release, done.acquire
            start = perf_counter_ns()
            for _ in repeat(None, count):
                release()
                acquire()
            return perf_counter_ns() - start

        return run

    def pyb_call() -> SyncRun:
        return loop1(pyb_breaker(opened=False).call, noop)

    def pyb_decorator() -> SyncRun:
        return loop0(pyb_breaker(opened=False)(noop))

    def cb_decorator() -> SyncRun:
        return loop0(cb_breaker()(noop))

    return Table(
        "closed_sync",
        "1. Closed state, sync: a guarded no-op",
        [
            Row("bare call  fn()", "bare", bare, n),
            Row(
                "toolbreaker call(fn) [default: thread, hard deadline]",
                "toolbreaker",
                tb_thread,
                n_thread,
                default=True,
            ),
            Row("floor: hand-off to a thread, no breaker", "floor", handoff_floor, n_thread),
            Row("toolbreaker call(fn) [cooperative]", "toolbreaker", tb_call, n, True),
            Row("toolbreaker @breaker.guard [cooperative]", "toolbreaker", tb_guard, n),
            Row(
                "toolbreaker allow() + record('success') [two-step]", "toolbreaker", tb_two_step, n
            ),
            Row(
                "toolbreaker call [coop] via ThreadPoolExecutor (old dflt)",
                "toolbreaker",
                tb_old_default,
                n_thread,
            ),
            Row("pybreaker breaker.call(fn) [inline, no deadline]", "pybreaker", pyb_call, n),
            Row("pybreaker @breaker [inline, no deadline]", "pybreaker", pyb_decorator, n),
            Row("circuitbreaker @circuit [inline, no deadline]", "circuitbreaker", cb_decorator, n),
        ],
    )


# -- 2. closed state, async --------------------------------------------------------------


def closed_async_table(n: int) -> Table:
    async def bare() -> AsyncRun:
        return aloop0(anoop)

    async def tb_acall_coop() -> AsyncRun:
        return aloop1(tb_breaker(opened=False).acall, anoop)

    async def tb_acall_default() -> AsyncRun:
        return aloop1(tb_breaker(opened=False, enforce="thread").acall, anoop)

    async def tb_old_default() -> AsyncRun:
        # What the default acall did before the watchdog: one asyncio.timeout per call.
        acall = tb_breaker(opened=False).acall

        async def timed() -> None:
            async with asyncio.timeout(TIMEOUT_S):  # type: ignore[attr-defined]
                await acall(anoop)

        return aloop0(timed)

    async def tb_guard() -> AsyncRun:
        return aloop0(tb_breaker(opened=False).guard(anoop))

    async def aio_call() -> AsyncRun:
        return aloop1((await aio_breaker(opened=False)).call_async, anoop)

    async def purg() -> AsyncRun:
        guarded, _breaker = await purgatory_pair(opened=False)
        return aloop0(guarded)

    async def cb_async() -> AsyncRun:
        return aloop0(cb_breaker()(anoop))

    return Table(
        "closed_async",
        "2. Closed state, async: a guarded no-op coroutine",
        [
            Row("bare  await fn()", "bare", bare, n),
            Row(
                "toolbreaker await acall(fn) [default: watchdog deadline]",
                "toolbreaker",
                tb_acall_default,
                n,
                default=True,
            ),
            Row("toolbreaker await acall(fn) [cooperative]", "toolbreaker", tb_acall_coop, n, True),
            Row("toolbreaker @breaker.guard async [cooperative]", "toolbreaker", tb_guard, n),
            *(
                [
                    Row(
                        "toolbreaker acall [coop] in asyncio.timeout (old default)",
                        "toolbreaker",
                        tb_old_default,
                        n,
                    )
                ]
                if hasattr(asyncio, "timeout")
                else []
            ),
            Row("aiobreaker await call_async(fn) [no deadline]", "aiobreaker", aio_call, n),
            Row("purgatory @factory(name), in-memory [no deadline]", "purgatory", purg, n),
            Row("circuitbreaker @circuit async [no deadline]", "circuitbreaker", cb_async, n),
        ],
    )


# -- 3. open state: local rejection ------------------------------------------------------


def open_sync_table(n: int) -> Table:
    def bare() -> SyncRun:
        return loop0(noop)

    def tb_call() -> SyncRun:
        breaker = tb_breaker(opened=True)
        timed = loop1_raises(breaker.call, noop, CircuitOpen)

        def run(count: int) -> int:
            before = breaker.stats.rejected
            elapsed = timed(count)
            expect(breaker.stats.rejected - before == count, breaker)
            return elapsed

        return run

    def tb_thread() -> SyncRun:
        breaker = tb_breaker(opened=True, enforce="thread")
        return loop1_raises(breaker.call, noop, CircuitOpen)

    def tb_allow() -> SyncRun:
        breaker = tb_breaker(opened=True)
        expect(isinstance(breaker.allow(), Rejection), breaker)
        return loop0(breaker.allow)

    def tb_allow_result() -> SyncRun:
        breaker = tb_breaker(opened=True)
        allow = breaker.allow

        def run(count: int) -> int:
            start = perf_counter_ns()
            for _ in repeat(None, count):
                allow().result  # type: ignore[union-attr]  # noqa: B018 - the cost is the point
            return perf_counter_ns() - start

        return run

    def tb_guard() -> SyncRun:
        breaker = tb_breaker(opened=True)
        guarded = breaker.guard(noop)
        expect(guarded()["tool_unavailable"], breaker)  # type: ignore[index]
        return loop0(guarded)

    def pyb_call() -> SyncRun:
        return loop1_raises(pyb_breaker(opened=True).call, noop, pybreaker.CircuitBreakerError)

    def pyb_decorator() -> SyncRun:
        breaker = pyb_breaker(opened=True)
        return loop0_raises(breaker(noop), pybreaker.CircuitBreakerError)

    def cb_decorator() -> SyncRun:
        breaker = cb_breaker()
        cb_trip(breaker, breaker(boom))
        return loop0_raises(breaker(noop), circuitbreaker.CircuitBreakerError)

    return Table(
        "open_sync",
        "3a. Open state, sync: local rejection (raise + catch unless noted)",
        [
            Row("bare call  fn()", "bare", bare, n),
            Row(
                "toolbreaker call(fn) -> CircuitOpen [default: thread]",
                "toolbreaker",
                tb_thread,
                n,
                default=True,
            ),
            Row(
                "toolbreaker call(fn) -> CircuitOpen [cooperative]", "toolbreaker", tb_call, n, True
            ),
            Row("toolbreaker allow() -> Rejection (no exception)", "toolbreaker", tb_allow, n),
            Row("toolbreaker allow().result (LLM-facing dict)", "toolbreaker", tb_allow_result, n),
            Row("toolbreaker @breaker.guard -> unavailable dict", "toolbreaker", tb_guard, n),
            Row("pybreaker breaker.call(fn) -> CircuitBreakerError", "pybreaker", pyb_call, n),
            Row("pybreaker @breaker -> CircuitBreakerError", "pybreaker", pyb_decorator, n),
            Row(
                "circuitbreaker @circuit -> CircuitBreakerError", "circuitbreaker", cb_decorator, n
            ),
        ],
    )


def open_async_table(n: int, n_purgatory: int) -> Table:
    async def bare() -> AsyncRun:
        return aloop0(anoop)

    async def tb_acall_coop() -> AsyncRun:
        return aloop1_raises(tb_breaker(opened=True).acall, anoop, CircuitOpen)

    async def tb_acall_default() -> AsyncRun:
        return aloop1_raises(tb_breaker(opened=True, enforce="thread").acall, anoop, CircuitOpen)

    async def tb_guard() -> AsyncRun:
        guarded = tb_breaker(opened=True).guard(anoop)
        expect((await guarded())["tool_unavailable"], guarded)  # type: ignore[index]
        return aloop0(guarded)

    async def aio_call() -> AsyncRun:
        breaker = await aio_breaker(opened=True)
        return aloop1_raises(breaker.call_async, anoop, aiobreaker.CircuitBreakerError)

    async def purg() -> AsyncRun:
        # A fresh factory per sample: purgatory's open state leaks (see section 5).
        guarded, _breaker = await purgatory_pair(opened=True)
        return aloop0_raises(guarded, OpenedState)

    async def cb_async() -> AsyncRun:
        breaker = cb_breaker()
        await acb_trip(breaker, breaker(aboom))
        return aloop0_raises(breaker(anoop), circuitbreaker.CircuitBreakerError)

    return Table(
        "open_async",
        "3b. Open state, async: local rejection (raise + catch unless noted)",
        [
            Row("bare  await fn()", "bare", bare, n),
            Row(
                "toolbreaker acall(fn) -> CircuitOpen [default]",
                "toolbreaker",
                tb_acall_default,
                n,
                default=True,
            ),
            Row(
                "toolbreaker acall(fn) -> CircuitOpen [cooperative]",
                "toolbreaker",
                tb_acall_coop,
                n,
                True,
            ),
            Row("toolbreaker @breaker.guard async -> unavailable dict", "toolbreaker", tb_guard, n),
            Row("aiobreaker call_async(fn) -> CircuitBreakerError", "aiobreaker", aio_call, n),
            Row("purgatory @factory(name) -> OpenedState", "purgatory", purg, n_purgatory),
            Row(
                "circuitbreaker @circuit async -> CircuitBreakerError",
                "circuitbreaker",
                cb_async,
                n,
            ),
        ],
    )


# -- 4. the pure core --------------------------------------------------------------------

OUTAGE_CHANCE = 0.0005  # per event of a healthy dependency: the start of an outage
CORE_POLICY = Policy(
    failure_threshold=3,
    cooldown_ms=2_000,
    cooldown_multiplier=2,
    cooldown_max_ms=30_000,
    success_threshold=2,
    lease_ttl_ms=5_000,
)


def mixed_stream(count: int, dependencies: tuple[str, ...], seed: int = 7) -> list[Event]:
    """A trace of agents calling flaky tools, as a trace file would hold it.

    Each dependency is healthy most of the time (1.5% stray failures, 1% ignored
    validation errors) with outages of 0.5 to 8 s that open its breaker and, with the
    growing cooldown, keep it open a while; 5% of probes are lost, so leases expire too.
    Outcomes carry call ids, not generations.
    """
    rng = random.Random(seed)
    driver = Replay(CORE_POLICY)
    events: list[Event] = []
    now = 0
    outage_until = dict.fromkeys(dependencies, -1)
    for number in itertools.count(1):
        if len(events) >= count:
            break
        now += rng.randint(1, 12)
        dep = rng.choice(dependencies)
        if now > outage_until[dep] and rng.random() < OUTAGE_CHANCE:
            outage_until[dep] = now + rng.randint(500, 8_000)
        call = f"c{number}"
        request = Event("request", now, dep, call=call)
        record = driver.feed(request)[-1]
        events.append(request)
        if not record.attempted:
            continue
        probe = admitted_probe(record)
        if probe and rng.random() < 0.05:
            continue  # a lost probe: its lease expires
        if now < outage_until[dep]:
            kind = "failure" if rng.random() < 0.9 else "ambiguous"
        else:
            roll = rng.random()
            kind = "success" if roll < 0.975 else "ignored" if roll < 0.985 else "failure"
        now += rng.randint(0, 3)
        outcome = Event(kind, now, dep, call=call)
        driver.feed(outcome)
        events.append(outcome)
    return events[:count]


def with_generations(events: list[Event]) -> list[Event]:
    """The same single-dependency stream with each outcome's generation filled in."""
    driver = Replay(CORE_POLICY)
    admitted: dict[str, int] = {}
    out: list[Event] = []
    for event in events:
        fed = event
        if event.type != "request":
            fed = dataclasses.replace(event, generation=admitted[event.call or ""])
        record = driver.feed(event)[-1]
        if event.type == "request" and record.attempted:
            admitted[event.call or ""] = record.generation
        out.append(fed)
    return out


def time_core(fn: Callable[[], int], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = perf_counter_ns()
        done = fn()
        samples.append(done / ((perf_counter_ns() - start) / 1e9))
    return samples


def core_section(n_stream: int, n_trace: int, repeats: int) -> dict[str, Any]:
    stream = with_generations(mixed_stream(n_stream, ("search",)))
    trace = mixed_stream(n_trace, ("search", "browser", "billing", "llm"))
    reasons: dict[str, int] = {}
    state = BreakerState()
    for event in stream:
        state, records = apply(state, event, CORE_POLICY)
        for record in records:
            reasons[record.reason] = reasons.get(record.reason, 0) + 1

    def run_step() -> int:
        current = BreakerState()
        for event in stream:
            current, _ = step(current, event, CORE_POLICY)
        return len(stream)

    def run_apply() -> int:
        current = BreakerState()
        for event in stream:
            current, _ = apply(current, event, CORE_POLICY)
        return len(stream)

    def run_replay() -> int:
        receipt = toolbreaker.core.replay(trace, CORE_POLICY)
        expect(len(receipt["dependencies"]) == 4, "replay")
        return len(trace)

    def run_feed() -> int:
        driver = Replay(CORE_POLICY)
        for event in trace:
            driver.feed(event)
        return len(trace)

    return {
        "stream_events": len(stream),
        "stream_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "trace_events": len(trace),
        "rows": {
            "step() transitions/s": time_core(run_step, repeats),
            "apply() transitions/s": time_core(run_apply, repeats),
            "replay() of the trace, events/s (receipt + hash included)": time_core(
                run_replay, repeats
            ),
            "Replay.feed() only, events/s (no receipt)": time_core(run_feed, repeats),
        },
    }


# -- 5. memory while open ----------------------------------------------------------------


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux
        return None


def begin_trace() -> tuple[int | None, int, int]:
    gc.collect()
    tracemalloc.start()
    return rss_bytes(), tracemalloc.get_traced_memory()[0], perf_counter_ns()


def end_trace(begun: tuple[int | None, int, int], n: int) -> dict[str, Any]:
    """What ``n`` rejections left behind, measured while their breaker is still alive."""
    rss_before, before, start = begun
    seconds = (perf_counter_ns() - start) / 1e9
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = rss_bytes()
    retained = after - before
    return {
        "rejections": n,
        "retained_bytes": retained,
        "bytes_per_rejection": retained / n,
        "peak_traced_bytes": peak - before,
        "rss_delta_bytes": None
        if rss_before is None or rss_after is None
        else rss_after - rss_before,
        "seconds_under_tracemalloc": seconds,
    }


def memory_section(n_toolbreaker: int, n_purgatory: int) -> dict[str, Any]:
    breaker = tb_breaker(opened=True)
    tb_run = loop1_raises(breaker.call, noop, CircuitOpen)
    tb_run(WARMUP)
    begun = begin_trace()
    tb_run(n_toolbreaker)
    tb = end_trace(begun, n_toolbreaker)
    expect(rejects_callers(breaker.state, breaker.policy), breaker)

    async def purgatory_memory() -> dict[str, Any]:
        guarded, brk = await purgatory_pair(opened=True)
        run = aloop0_raises(guarded, OpenedState)
        await run(WARMUP)
        begun = begin_trace()
        await run(n_purgatory)
        result = end_trace(begun, n_purgatory)
        expect(brk.context.state == "opened", brk.context)
        return result

    purg = asyncio.run(purgatory_memory())
    return {"toolbreaker call() -> CircuitOpen": tb, "purgatory @factory -> OpenedState": purg}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations: a smoke test")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    parser.add_argument("--repeats", type=int, default=None, help="samples per row (5)")
    args = parser.parse_args(argv)

    scale = 20 if args.quick else 1
    repeats = args.repeats or (3 if args.quick else 5)
    n_closed, n_open, n_thread = 200_000 // scale, 50_000 // scale, 20_000 // scale
    n_mem_tb, n_mem_purg = 1_000_000 // scale, 200_000 // scale

    env = environment()
    started = perf_counter_ns()
    print("toolbreaker overhead benchmark" + (" (--quick: smoke test only)" if args.quick else ""))
    print(
        f"  Python {env['python']} ({env['implementation']}), {env['platform']}, "
        f"{env['cpus']} CPUs; GC on; real clock; {repeats} samples per row, interleaved"
    )
    print("  " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))

    tables = [
        closed_sync_table(n_closed, n_thread),
        closed_async_table(n_closed),
        open_sync_table(n_open),
        open_async_table(n_open, n_open),
    ]
    for table in tables:
        if table.key.endswith("async"):
            asyncio.run(measure_async(table, repeats))
        else:
            measure_sync(table, repeats)
        while THREADED:
            THREADED.pop().close()
        while POOLS:
            POOLS.pop().shutdown(wait=False)
        while STOPS:
            STOPS.pop()()
    results: dict[str, Any] = {"environment": env, "quick": args.quick, "repeats": repeats}
    results["tables"] = {table.key: print_table(table) for table in tables}

    core = core_section(200_000 // scale, 100_000 // scale, repeats)
    print("\n4. Pure core (no clock, no store, no lock); median of samples, higher is better")
    print(
        f"  one-dependency stream: {core['stream_events']:,} events; transitions by reason: "
        + ", ".join(f"{k} {v:,}" for k, v in core["stream_reasons"].items())
    )
    print(f"  replay trace: {core['trace_events']:,} events over 4 dependencies")
    for label, samples in core["rows"].items():
        med = statistics.median(samples)
        print(
            f"   {label:<60} {med:>12,.0f} /s  ({1e9 / med:,.0f} ns each; "
            f"min-max {min(samples):,.0f}-{max(samples):,.0f})"
        )
    results["core"] = core

    memory = memory_section(n_mem_tb, n_mem_purg)
    print("\n5. Memory retained by open-state rejections (tracemalloc after gc.collect; RSS)")
    for label, data in memory.items():
        print(
            f"   {label:<38} {data['rejections']:>9,} rejections: retained "
            f"{nbytes(data['retained_bytes'])} = {data['bytes_per_rejection']:,.3f} B/rejection;"
            f" peak {nbytes(data['peak_traced_bytes'])}; RSS delta "
            f"{nbytes(data['rss_delta_bytes'])}; {data['seconds_under_tracemalloc']:.1f} s"
        )
    tb_mem = memory["toolbreaker call() -> CircuitOpen"]
    purg_mem = memory["purgatory @factory -> OpenedState"]
    flat = tb_mem["retained_bytes"] < 64 * 1024
    print(
        f"   toolbreaker flat (< 64 KiB retained after {tb_mem['rejections']:,}): "
        f"{'yes' if flat else 'NO'}; purgatory extrapolated to 1,000,000 rejections: "
        f"{nbytes(purg_mem['bytes_per_rejection'] * 1_000_000)}"
    )
    results["memory"] = memory

    print(
        "\nRatio vs fastest peer (overhead of toolbreaker's default row, then of its reference"
        " row (*), / fastest peer overhead)"
    )
    summaries = [summary_line(table) for table in tables]
    per_rejection = purg_mem["bytes_per_rejection"]
    print(
        f"  {'memory':<13} toolbreaker {tb_mem['bytes_per_rejection']:,.3f} B/rejection vs "
        f"purgatory {per_rejection:,.0f} B/rejection (the only peer measured here)"
    )
    summaries.append(
        {
            "category": "memory",
            "toolbreaker_bytes_per_rejection": tb_mem["bytes_per_rejection"],
            "purgatory_bytes_per_rejection": per_rejection,
            "toolbreaker_flat": flat,
        }
    )
    print(f"  {'core':<13} no peer has a pure transition function to compare")
    results["summary"] = summaries
    seconds = (perf_counter_ns() - started) / 1e9
    results["seconds"] = seconds
    print(f"\ntotal {seconds:.0f} s")

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"raw numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
