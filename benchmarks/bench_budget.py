"""Whether a run's budget holds under concurrency: reserved before the call, or counted after.

Run ``python benchmarks/bench_budget.py`` (under a minute on an idle machine; ``--quick``
for a smoke test). One run guard, a $1 budget (``max_cost="1"``), a tool at $0.01 per call:

- ``asyncio``: 1,000 tasks call the tool at once (each call awaits 5 ms of "provider");
- ``threads``: 64 threads call it in a loop, 16 calls each (each call sleeps 1 ms).

Each scenario runs twice: ``after the fact`` (the tool declares no cost and reports it with
``guard.add_cost`` once it ran: what every run did before reservations) and ``reserved``
(``cost="0.01"``: admission holds the cost before the call, settling commits it). The
rows show the calls admitted (the tool ran), the money spent, and whether spent stayed
within the budget plus one call's overshoot (the target).

The last table is what a reservation costs per call in a process: a sync ``guard.call``
of a no-op tool with and without a declared cost (median µs/call of ``--repeats``
samples, interleaved), and the run machine alone (``apply`` of a request and its outcome).
Those rows time the CPU the process used (``time.process_time_ns``), not the wall clock:
on a shared machine a wall clock times the neighbours.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from decimal import Decimal

from toolbreaker import Action, Budget, ClassLimits, RunGuard, RunState
from toolbreaker.core.run.machine import RunEvent, apply

BUDGET = Decimal("1")
PRICE = Decimal("0.01")
#: Class limits that never bind: only the money decides.
OPEN = {"read": ClassLimits(max_calls=None)}


def budget(calls: int) -> Budget:
    return Budget(max_cost=BUDGET, max_tool_calls=calls + 1, max_repeats=calls, classes=OPEN)


def async_run(tasks: int, reserved: bool) -> tuple[int, Decimal]:
    """``tasks`` asyncio tasks at once; the calls admitted and the money spent."""

    async def main() -> tuple[int, Decimal]:
        guard = RunGuard("bench-async", budget=budget(tasks))
        ran = 0

        async def search(q: int) -> dict[str, int]:
            nonlocal ran
            ran += 1
            await asyncio.sleep(0.005)
            if not reserved:
                guard.add_cost(PRICE, risk="read")  # today: counted once it ran
            return {"q": q}

        guard.tool("search", cost=PRICE if reserved else None)(search)
        await asyncio.gather(*(guard.acall("search", {"q": n}) for n in range(tasks)))
        return ran, guard.state.cost

    return asyncio.run(main())


def thread_run(threads: int, calls: int, reserved: bool) -> tuple[int, Decimal]:
    """``threads`` threads of ``calls`` calls each; the calls admitted and the money spent."""
    guard = RunGuard("bench-threads", budget=budget(threads * calls))
    ran = 0
    lock = threading.Lock()

    def search(q: str) -> dict[str, str]:
        nonlocal ran
        with lock:
            ran += 1
        time.sleep(0.001)
        if not reserved:
            guard.add_cost(PRICE, risk="read")
        return {"q": q}

    guard.tool("search", cost=PRICE if reserved else None)(search)
    barrier = threading.Barrier(threads)

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(calls):
            guard.call("search", {"q": f"{w}-{i}"})

    pool = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return ran, guard.state.cost


def per_call_guard(n: int, reserved: bool) -> float:
    """µs per sync ``guard.call`` of a no-op tool, with or without a declared cost."""
    policy = Budget(max_cost="1000000", max_tool_calls=n + 1, max_repeats=n, classes=OPEN)
    guard = RunGuard("bench-cost", budget=policy)
    guard.tool("noop", cost="0.01" if reserved else None)(lambda i: None)
    start = time.process_time_ns()
    for i in range(n):
        guard.call("noop", {"i": i})
    return (time.process_time_ns() - start) / n / 1000


def per_call_core(n: int, reserved: bool) -> float:
    """µs per request and outcome through the run machine alone."""
    policy = Budget(max_cost="1000000", max_tool_calls=n + 1, max_repeats=n, classes=OPEN)
    run = RunState.start("bench-core", 0)
    actions = [Action("noop", f"fp-{i}") for i in range(n)]
    start = time.process_time_ns()
    for action in actions:
        run, decision = apply(
            run, RunEvent("request", 1, action, reserve="0.01" if reserved else None), policy
        )
        run, _ = apply(
            run,
            RunEvent(
                "outcome",
                2,
                action,
                outcome="success",
                cost=None if reserved else "0.01",
                reservation=decision.reservation,
            ),
            policy,
        )
    return (time.process_time_ns() - start) / n / 1000


def interleaved(rows: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, row in rows.items():
            samples[name].append(row())
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--calls-per-thread", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, repeats = (1000, 2) if args.quick else (4000, args.repeats)
    target = BUDGET + PRICE

    print(f"budget ${BUDGET}, ${PRICE} per call; target: spent <= ${target}")
    print(f"{'scenario':<34}{'admitted':>9}{'spent $':>10}{'x budget':>10}  within")
    results: list[tuple[str, tuple[int, Decimal]]] = []
    for reserved in (False, True):
        mode = "reserved" if reserved else "after the fact"
        results.append((f"{args.tasks} asyncio tasks, {mode}", async_run(args.tasks, reserved)))
        label = f"{args.threads} threads x {args.calls_per_thread}, {mode}"
        results.append((label, thread_run(args.threads, args.calls_per_thread, reserved)))
    for label, (admitted, spent) in results:
        within = "yes" if spent <= target else "NO"
        print(f"{label:<34}{admitted:>9}{spent:>10}{spent / BUDGET:>10.2f}  {within}")

    rows: dict[str, Callable[[], float]] = {
        "guard.call, no cost": lambda: per_call_guard(n, reserved=False),
        "guard.call, cost reserved": lambda: per_call_guard(n, reserved=True),
        "run machine, cost after": lambda: per_call_core(n, reserved=False),
        "run machine, cost reserved": lambda: per_call_core(n, reserved=True),
    }
    medians = interleaved(rows, repeats)
    bases = dict.fromkeys(rows, 0.0)
    bases["guard.call, cost reserved"] = medians["guard.call, no cost"]
    bases["run machine, cost reserved"] = medians["run machine, cost after"]
    print()
    print(f"{'per call (in-process)':<30}{'µs/call':>10}{'extra µs':>10}")
    for name, value in medians.items():
        extra = f"{value - bases[name]:>10.2f}" if bases[name] else f"{'':>10}"
        print(f"{name:<30}{value:>10.2f}{extra}")


if __name__ == "__main__":
    main()
