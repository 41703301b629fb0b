"""Where toolbreaker's per-call time goes: component timings plus a cProfile listing.

Run ``python benchmarks/profile_hot_paths.py [--cprofile]``. Each line times one piece of
a hot path in isolation (median of 5 samples, ns per operation, loop cost subtracted), so
the pieces of ``Breaker.call`` can be compared with the whole. It reaches into private
names on purpose: re-run it after changing ``src/`` to see what moved.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import gc
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any, cast

from toolbreaker import Breaker, CircuitOpen, Event, Policy
from toolbreaker.core import BreakerState, Transition, admission, apply, is_quiet, step
from toolbreaker.runtime._breaker import _UNSET, Permit, _remaining
from toolbreaker.runtime._classify import SUCCESS
from toolbreaker.runtime._clock import monotonic_ms
from toolbreaker.runtime._result import DEFAULT_INSTRUCTIONS, unavailable_result

HUGE_MS = 10**12
N = 200_000


def noop() -> None:
    return None


async def anoop() -> None:
    return None


def breaker(*, opened: bool) -> Breaker:
    policy = Policy(failure_threshold=1, cooldown_ms=HUGE_MS, cooldown_max_ms=HUGE_MS)
    made = Breaker("search", policy=policy, timeout=5.0, enforce="cooperative")
    if opened:
        permit = cast(Permit, made.allow())
        permit.record("failure")
    return made


def timed(fn: Callable[[], Any], n: int = N) -> float:
    """Median ns per ``fn()`` call, minus the cost of calling a no-op the same way."""

    def sample(target: Callable[[], Any]) -> float:
        gc.collect()
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            target()
        return (time.perf_counter_ns() - start) / n

    return statistics.median(sample(fn) - sample(noop) for _ in range(5))


def raising(fn: Callable[[], Any], exc: type[BaseException]) -> Callable[[], None]:
    def run() -> None:
        try:  # noqa: SIM105 - contextlib.suppress would time itself
            fn()
        except exc:
            pass

    return run


def components() -> list[tuple[str, float]]:
    closed, opened = breaker(opened=False), breaker(opened=True)
    state = opened.state
    rejection = opened.allow()
    template = DEFAULT_INSTRUCTIONS["open"]
    text = template.format(tool="search", seconds=1, fallback_sentence="x.", fallback="")
    event = Event("request", 1, "search", call="c1")
    permit_args = (closed, None, 0, 0, 5000)

    def allow_record() -> None:
        cast(Permit, closed.allow(timeout=None)).record(SUCCESS)

    def raise_fresh() -> None:
        raise CircuitOpen("search", "cooldown", 1, {})

    rows = [
        ("closed: breaker.call(noop), whole", lambda: closed.call(noop)),
        ("closed:   clock() = monotonic_ns() // 1e6", closed.clock),
        (
            "closed:   _deadline_ms(_UNSET, required=True)",
            lambda: closed._deadline_ms(_UNSET, required=True),
        ),
        ("closed:   allow(timeout=None), whole", lambda: closed.allow(timeout=None)),
        ("closed:     Permit(...) construction", lambda: Permit(*permit_args, probe=False)),
        (
            "closed:     is_quiet(state, policy) (skipped: cached)",
            lambda: is_quiet(state, closed.policy),
        ),
        ("closed:   allow() + permit.record(SUCCESS)", allow_record),
        (
            "closed:   typing.cast(Permit, x) (called twice per call)",
            lambda: cast(Permit, rejection),
        ),
        (
            "open: call(noop) -> raise + catch CircuitOpen, whole",
            raising(lambda: opened.call(noop), CircuitOpen),
        ),
        ("open:   allow(timeout=None) -> Rejection", lambda: opened.allow(timeout=None)),
        ("open:     admission(state, now, policy)", lambda: admission(state, 0, opened.policy)),
        ("open:     _remaining(state, now)", lambda: _remaining(state, 0)),
        ("open:   Rejection.error(), whole", rejection.error),  # type: ignore[union-attr]
        ("open:     Rejection.result -> unavailable_result()", lambda: rejection.result),  # type: ignore[union-attr]
        (
            "open:       unavailable_result(...) direct",
            lambda: unavailable_result(tool="search", reason="cooldown", retry_after_ms=10**9),
        ),
        (
            "open:         template.format(...)",
            lambda: template.format(tool="search", seconds=1, fallback_sentence="x.", fallback=""),
        ),
        ("open:         ' '.join(text.split())", lambda: " ".join(text.split())),
        (
            "open:     CircuitOpen(...) construction",
            lambda: CircuitOpen("search", "cooldown", 1, {}),
        ),
        ("open:   raise + catch a fresh CircuitOpen", raising(raise_fresh, CircuitOpen)),
        (
            "core: Event(...) construction (frozen, slots)",
            lambda: Event("request", 1, "search", call="c1"),
        ),
        ("core: BreakerState(...) construction", lambda: BreakerState(phase="open", generation=1)),
        (
            "core: Transition(...) construction",
            lambda: Transition("search", event, "closed", "closed", True, False, "x", 0, None),
        ),
        ("core: step(closed, request)", lambda: step(BreakerState(), event, closed.policy)),
        ("core: apply(closed, request)", lambda: apply(BreakerState(), event, closed.policy)),
        (
            "core: dataclasses.replace(event, call=...) (Replay.feed)",
            lambda: dataclasses.replace(event, call="c2"),
        ),
        ("clock: monotonic_ms()", monotonic_ms),
        ("clock: time.monotonic_ns()", time.monotonic_ns),
    ]
    return [(label, timed(fn)) for label, fn in rows]


async def async_components() -> list[tuple[str, float]]:
    """The cost of arming a deadline: what acall's default pays over cooperative."""
    closed = breaker(opened=False)
    default = Breaker("search", policy=closed.policy, timeout=5.0)

    async def sample(run: Callable[[], Any], n: int = N) -> float:
        # Yield every 64 calls, as bench_overhead.py does, so cancelled timers get purged.
        gc.collect()
        start = time.perf_counter_ns()
        for i in range(n):
            await run()
            if not i & 63:
                await asyncio.sleep(0)
        return (time.perf_counter_ns() - start) / n

    async def under_timeout() -> None:
        async with asyncio.timeout(5.0):
            await anoop()

    rows: list[tuple[str, Callable[[], Any]]] = [
        ("async: await acall(anoop), cooperative", lambda: closed.acall(anoop)),
        ("async: await acall(anoop), default (asyncio.timeout)", lambda: default.acall(anoop)),
        ("async:   async with asyncio.timeout(5): await anoop()", under_timeout),
    ]
    out = []
    for label, run in rows:
        base = [await sample(anoop) for _ in range(5)]
        runs = [await sample(run) for _ in range(5)]
        out.append((label, statistics.median(runs) - statistics.median(base)))
    return out


def profile() -> None:
    closed, opened = breaker(opened=False), breaker(opened=True)

    def closed_calls() -> None:
        for _ in repeat(None, N):
            closed.call(noop)

    def open_calls() -> None:
        for _ in repeat(None, N):
            try:  # noqa: SIM105 - see raising()
                opened.call(noop)
            except CircuitOpen:
                pass

    for title, fn in (("closed call()", closed_calls), ("open call() -> CircuitOpen", open_calls)):
        print(f"\ncProfile, {title}, {N:,} calls (profiling inflates small functions)")
        prof = cProfile.Profile()
        prof.runcall(fn)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(12)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cprofile", action="store_true", help="also print cProfile listings")
    args = parser.parse_args(argv)
    print(f"{'component (ns per operation, loop and call of a no-op subtracted)':<66} {'ns':>8}")
    for label, ns in [*components(), *asyncio.run(async_components())]:
        print(f"{label:<66} {ns:>8,.0f}")
    if args.cprofile:
        profile()
    return 0


if __name__ == "__main__":
    sys.exit(main())
