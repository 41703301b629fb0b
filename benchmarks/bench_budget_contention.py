"""Does a shared retry budget decide "retry" under contention, and what does a decision cost?

Run ``python benchmarks/bench_budget_contention.py`` (``--quick`` for a smoke run).
``--redis URL`` adds a Redis row (a running server; nothing is started here; a durable
one, ``appendfsync always``, is what production queues need).

``--procs`` processes (12) each make ``--decisions`` (25) back-to-back decisions
(``core._retry.spend``) on one bucket big enough for all of them, each through its own
store connection, all starting at once. Every decision should be "retry"; a "no retry"
is a decision lost to compare-and-set conflicts. Two modes per store: ``backoff`` (the
shell as shipped: full jitter, windows doubling from 1 ms to 50 ms, at most 1 s) and
``immediate`` (the old shell: 8 tries with no wait), printed side by side: refused
decisions, conflicts per decision, and the median and p99 time of a decision.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from toolbreaker.core._retry import RetryPolicy, spend
from toolbreaker.runtime._breaker import _shared_budget
from toolbreaker.runtime._breaker._shared_budget import SharedBudget


def _open(kind: str, target: str) -> Any:
    if kind == "sqlite":
        from toolbreaker.stores import SQLiteStore

        return SQLiteStore(target)
    from toolbreaker.stores import RedisStore

    url, prefix = target.split("|")
    return RedisStore(url, prefix=prefix)


def _worker(
    kind: str, target: str, mode: str, size: int, decisions: int, start: Any, out: Any
) -> None:
    store = _open(kind, target)
    conflicts = [0]
    if mode == "immediate":
        _shared_budget.ATTEMPTS = 8  # type: ignore[misc]
        _shared_budget.MAX_BACKOFF_S = 3600.0  # type: ignore[misc]

        def back_off(n: int) -> None:
            conflicts[0] += 1

    else:
        original = _shared_budget._back_off

        def back_off(n: int) -> None:
            conflicts[0] += 1
            original(n)

    _shared_budget._back_off = back_off
    _shared_budget.hook_failed = lambda *_: None  # type: ignore[assignment]
    budget = SharedBudget("bench:read", RetryPolicy(budget=size), store)
    start.wait(60)
    times, allowed = [], 0
    for _ in range(decisions):
        begun = time.perf_counter()
        allowed += bool(budget.update(spend))
        times.append(time.perf_counter() - begun)
    store.close()
    out.put((allowed, conflicts[0], times))


def run(kind: str, target: str, mode: str, procs: int, decisions: int) -> str:
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    size = procs * decisions
    workers = [
        context.Process(target=_worker, args=(kind, target, mode, size, decisions, start, out))
        for _ in range(procs)
    ]
    for worker in workers:
        worker.start()
    start.set()
    results = [out.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(30)
    refused = size - sum(allowed for allowed, _, _ in results)
    conflicts = sum(c for _, c, _ in results) / size
    times = sorted(t for _, _, ts in results for t in ts)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return (
        f"  {mode:<10} refused {refused:>4} of {size:<5} conflicts/decision {conflicts:5.2f}"
        f"   median {statistics.median(times) * 1000:6.2f} ms   p99 {p99 * 1000:7.2f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--procs", type=int, default=12)
    parser.add_argument("--decisions", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--redis", metavar="URL")
    args = parser.parse_args()
    procs, decisions = (4, 5) if args.quick else (args.procs, args.decisions)
    repeats = 1 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        targets = {"sqlite": str(Path(tmp) / "budget.db")}
        if args.redis:
            targets["redis"] = f"{args.redis}|bench-budget-{time.time_ns()}"
        for kind, target in targets.items():
            print(f"\n{kind}: {procs} processes x {decisions} decisions on one bucket")
            for n in range(repeats):
                for mode in ("backoff", "immediate"):
                    store = _open(kind, target)
                    store.record_delete(_shared_budget.BUDGET_SPACE, "bench:read")
                    store.close()
                    print(f"{n + 1}" + run(kind, target, mode, procs, decisions)[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
