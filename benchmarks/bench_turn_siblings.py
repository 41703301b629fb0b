"""What running a tool call as one call of a model turn's sibling group costs.

Run ``python benchmarks/bench_turn_siblings.py`` (a few seconds; ``--quick`` for a smoke
test). Every row runs a no-op coroutine tool through a run guard (``abegin``, the tool,
``asucceeded``, all on a ``MemoryStore``) and reports the median µs/call of
``--repeats`` samples, rows interleaved so a slow phase of a noisy VM spreads over all of
them:

- ``no turn``: the guard never saw ``mark_turn``: no group (the tool is awaited directly);
- ``independent``: a marked turn, the call needs no required dependency: it joins the
  group and is awaited as it is (what every call of a run without required tools pays);
- ``needs required``: the call goes through a required tool's breaker: it runs in a task
  of its own, watched by the group (a listener on the breaker while it is in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from toolbreaker import Breaker, Budget, GuardedTool, Policy, RunGuard
from toolbreaker.core._run.budget import ClassLimits


async def noop(**_: object) -> None:
    return None


async def echo(i: int) -> dict[str, int]:
    return {"i": i}


def guard_for(turn: bool, calls: int) -> RunGuard:
    required = Breaker("inventory", policy=Policy(failure_threshold=5), timeout=5)
    other = Breaker("reviews", policy=Policy(failure_threshold=5), timeout=5)
    limits = {"read": ClassLimits(max_calls=calls + 1)}
    guard = RunGuard("bench", budget=Budget(max_tool_calls=calls + 1, classes=limits))
    guard.add_tool(GuardedTool("stock", noop, breaker=required, required=True))
    guard.add_tool(GuardedTool("reviews", noop, breaker=other))
    if turn:
        guard.mark_turn(1)
    return guard


async def sample(guard: RunGuard, tool: str, n: int) -> float:
    start = time.perf_counter_ns()
    for i in range(n):
        step = await guard.abegin(tool, {"i": i})  # distinct actions: no repeat detection
        assert step.answer is None, step.answer
        result = await guard.arun_step(step, lambda i=i: echo(i))
        await step.asucceeded(result)
    return (time.perf_counter_ns() - start) / n / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    calls, repeats = (200, 2) if args.quick else (args.calls, args.repeats)
    rows: dict[str, Callable[[], Awaitable[float]]] = {
        "no turn": lambda: sample(guard_for(False, calls), "stock", calls),
        "independent": lambda: sample(guard_for(True, calls), "reviews", calls),
        "needs required": lambda: sample(guard_for(True, calls), "stock", calls),
    }
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, run in rows.items():
            samples[name].append(asyncio.run(run()))
    base = statistics.median(samples["no turn"])
    print(f"{'row':<16}{'µs/call':>10}{'ratio':>8}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<16}{median:>10.1f}{median / base:>8.2f}")


if __name__ == "__main__":
    main()
