"""What the degradation matrix costs: on a success (keeping the last good answer) and on a
rejection (serving a mode instead of the plain tool-unavailable result).

Run ``python benchmarks/bench_degrade.py`` (``--quick`` for a smoke run). Every row is
timed ``--repeats`` times (5) and the median ns/call printed; rows are interleaved so a
slow phase of a noisy machine spreads over all of them. Stores: memory, and an SQLite
file when SQLite keeps records (skipped otherwise).

Success rows: ``Breaker.begin`` + ``step.succeeded`` on a closed breaker, for a row with
no chain, a ``stale`` row refreshing its kept answer at most every 5 s (the default), and
a ``stale`` row writing it on every success (``stale_every_ms = 0``). Rejection rows: an
isolated breaker's ``begin``, plain, ``omit``, and ``stale`` (a record read per call).
Queue rows: queueing an item (``begin`` on an isolated ``queue`` row), draining it
(claim, start and done: three compare-and-sets, plus the breaker's admission) and pruning
it once done (``prune_done``: one listing, then a versioned delete per item).
``--postgres URL`` adds a PostgreSQL store (a running server; nothing is started here),
whose queue records commit synchronously (``synchronous_commit = on``) like its journal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolbreaker import Registry, drain, prune_done
from toolbreaker.stores import MemoryStore, SQLiteStore

RESULT = {"results": [{"sku": f"C-{n}", "price": 10 + n} for n in range(5)]}


_names = iter(range(1_000_000))


def breaker_for(store: Any, **row: Any) -> Any:
    """A breaker of its own (rows share the store, never a key)."""
    name = f"search{next(_names)}"
    sheet = {"defaults": {"timeout_ms": 2000, "enforce": "cooperative"}, name: {"read": row}}
    return Registry.from_dict(sheet, store=store).get(name, "read")


def success_row(store: Any, **row: Any) -> Callable[[int], None]:
    breaker = breaker_for(store, **row)

    def run(n: int) -> None:
        for _ in range(n):
            breaker.begin("search", {"q": "cable"}).succeeded(RESULT)

    run(100)
    return run


def rejection_row(store: Any, **row: Any) -> Callable[[int], None]:
    breaker = breaker_for(store, **row)
    breaker.begin("search", {"q": "cable"}).succeeded(RESULT)
    breaker.isolate()

    def run(n: int) -> None:
        for _ in range(n):
            answer = breaker.begin("search", {"q": "cable"}).answer
            assert answer is not None

    run(100)
    return run


STALE = {"degrade": ["stale", "omit"], "max_stale_ms": 600_000}


def rows(store: Any) -> dict[str, Callable[[int], None]]:
    return {
        "success, no chain": success_row(store),
        "success, stale (stale_every_ms=5000, default)": success_row(store, **STALE),
        "success, stale (stale_every_ms=0: a write per success)": success_row(
            store, **STALE, stale_every_ms=0
        ),
        "rejected, plain": rejection_row(store),
        "rejected, omit": rejection_row(store, degrade="omit"),
        "rejected, stale served (a record read)": rejection_row(store, **STALE, stale_every_ms=0),
    }


def queue_rows(store: Any, items: int) -> tuple[float, float, float]:
    """ns per item to queue ``items`` items, to drain them, and to prune them."""
    breaker = breaker_for(store, degrade="queue")
    breaker.isolate()
    start = time.perf_counter_ns()
    for n in range(items):
        args = {"n": n, "idempotency_key": f"{breaker.key}-{n}"}
        assert breaker.begin("make", args).answer["queued"]
    queued = time.perf_counter_ns()
    breaker.release()
    report = drain(
        store, {"make": lambda n, idempotency_key: {"n": n}}, dependency=breaker.dependency
    )
    assert len(report.done) == items
    drained = time.perf_counter_ns()
    pruned = prune_done(store, older_than=0, dependency=breaker.dependency)
    assert len(pruned.pruned) == items
    end = time.perf_counter_ns()
    return (queued - start) / items, (drained - queued) / items, (end - drained) / items


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--postgres", metavar="URL", help="add a PostgreSQL store")
    args = parser.parse_args()
    calls = 200 if args.quick else 5_000
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Any] = {"memory": MemoryStore()}
        sqlite = SQLiteStore(str(Path(tmp) / "tb.db"))
        try:
            sqlite.record_get("probe", "probe")
            stores["sqlite"] = sqlite
        except NotImplementedError:
            print("sqlite: records not on this store yet, skipped", file=sys.stderr)
        if args.postgres:
            from toolbreaker.stores import PostgresStore

            stores["postgres"] = PostgresStore(args.postgres, prefix=f"bench_{time.time_ns()}")
        for name, store in stores.items():
            table = rows(store)
            samples: dict[str, list[float]] = {row: [] for row in table}
            for _ in range(args.repeats):
                for row, run in table.items():
                    n = calls if name == "memory" or "no chain" in row else calls // 10
                    start = time.perf_counter_ns()
                    run(n)
                    samples[row].append((time.perf_counter_ns() - start) / n)
            print(f"\n{name} store, median of {args.repeats} (ns/call)")
            for row, values in samples.items():
                print(f"  {row:<55} {statistics.median(values):>10,.0f}")
            queue, drained, pruned = queue_rows(store, 30 if args.quick else 300)
            print(f"  {'queue one item (ns/item)':<55} {queue:>10,.0f}")
            print(f"  {'drain one item (ns/item)':<55} {drained:>10,.0f}")
            print(f"  {'prune one done item (ns/item)':<55} {pruned:>10,.0f}")
        for store in stores.values():
            if store is not stores["memory"]:
                store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
