"""What a bulkhead (``max_concurrent``) costs per call, in a process and across processes.

Run ``python benchmarks/bench_bulkhead.py`` (about a minute; ``--quick`` for a smoke
test). ``--redis URL`` adds the Redis rows (a running server; nothing is started here).

Every row calls a no-op through ``Breaker.call`` in the cooperative mode (the call runs
inline, so the rows differ only by the bulkhead) and reports the median ns/call of
``--repeats`` samples; rows are interleaved so a slow phase of a noisy VM spreads over
all of them. ``saturated`` rows time a call answered at once because the bulkhead is full
(one slot held by an unsettled permit). ``acall`` rows use the default async mode (the
loop's watchdog keeps the deadline). The lease rows take and give back a slot in the
store for every call: one listing and one compare-and-set to take, a read and a delete
to give back.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolbreaker import Breaker, Policy
from toolbreaker.errors import CircuitOpen
from toolbreaker.stores import RedisStore, SQLiteStore


def noop() -> None:
    return None


def timed(call: Callable[[], Any], n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - start) / n


def admitted(breaker: Breaker) -> Callable[[], Any]:
    return lambda: breaker.call(noop)


async def anoop() -> None:
    return None


def aadmitted(breaker: Breaker, n: int) -> Callable[[], Any]:
    """``n`` awaited calls per sample on one loop (``timed`` then divides by ``n``)."""

    async def many() -> None:
        for _ in range(n):
            await breaker.acall(anoop)

    return lambda: asyncio.run(many())


def saturated(breaker: Breaker) -> Callable[[], Any]:
    held = breaker.allow()  # the only slot, never given back during the row
    assert held.admitted

    def call() -> None:
        try:
            breaker.call(noop)
        except CircuitOpen as exc:
            reason = exc.reason
        else:  # pragma: no cover - the row would measure the wrong thing
            reason = "admitted"
        if reason != "saturated":  # pragma: no cover
            raise AssertionError(reason)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--redis", help="redis://host:port/db of a running server")
    options = parser.parse_args()
    local_n, store_n = (2_000, 50) if options.quick else (200_000, 2_000)
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteStore(str(Path(tmp) / "bench.db"))
        stores: dict[str, Any] = {"sqlite": sqlite}
        if options.redis:
            stores["redis"] = RedisStore(options.redis)

        def breaker(
            limit: int | None, store: Any = None, name: str = "dep", enforce: Any = "cooperative"
        ) -> Breaker:
            # A day's deadline: the slot a saturated row holds never runs out during it.
            return Breaker(
                name,
                policy=Policy(lease_ttl_ms=86_400_000),
                timeout=86_400,
                max_concurrent=limit,
                store=store,
                enforce=enforce,
            )

        rows: dict[str, tuple[Callable[[], Any], int]] = {
            "no bulkhead [memory]": (admitted(breaker(None)), local_n),
            "max_concurrent=8 [memory, in-process table]": (admitted(breaker(8)), local_n),
            "saturated, answered at once [memory]": (saturated(breaker(1)), local_n),
            "acall, no bulkhead [memory, d: watchdog]": (
                aadmitted(breaker(None, enforce="thread"), local_n),
                1,
            ),
            "acall, max_concurrent=8 [memory, d: watchdog]": (
                aadmitted(breaker(8, enforce="thread"), local_n),
                1,
            ),
        }
        for kind, store in stores.items():
            rows[f"no bulkhead [{kind}]"] = (admitted(breaker(None, store, f"a-{kind}")), store_n)
            rows[f"max_concurrent=8 [{kind} leases]"] = (
                admitted(breaker(8, store, f"b-{kind}")),
                store_n,
            )
            rows[f"saturated, answered at once [{kind} leases]"] = (
                saturated(breaker(1, store, f"c-{kind}")),
                store_n,
            )
        samples: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(options.repeats):
            for name, (call, n) in rows.items():
                if n > 1:
                    call()  # warm
                per_call = local_n if name.startswith("acall") else 1
                samples[name].append(timed(call, n) / per_call)
        width = max(map(len, rows))
        print(f"{'row':<{width}}  median ns/call")
        for name, values in samples.items():
            print(f"{name:<{width}}  {statistics.median(values):>12,.0f}")
        for store in stores.values():
            store.close()


if __name__ == "__main__":
    main()
