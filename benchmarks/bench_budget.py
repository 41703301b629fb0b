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

- ``4 processes``: four OS processes of one run (the same task id), 4 threads each calling
  in a loop, through one SQLite file. ``after the fact`` is each process with a guard of
  its own (what a run spread over workers had before), ``shared, reserved`` is
  ``RunGuard(..., shared=True)``: one budget in the store, reserved by compare-and-set.

Then what one call costs when the run is shared, per store (wall-clock median µs of a
sync ``guard.call`` of a no-op tool with a declared cost, one thread): in memory (not
shared), and shared through SQLite, Redis (a ``redis-server`` started on 127.0.0.1 when
one is on the PATH) and PostgreSQL (``--postgres URL``). The physical floor beside them
is one read and one compare-and-set write of the store's record, the two round trips a
shared admission needs.

The last table is what a reservation costs per call in a process: a sync ``guard.call``
of a no-op tool with and without a declared cost (median µs/call of ``--repeats``
samples, interleaved), and the run machine alone (``apply`` of a request and its outcome).
Those rows time the CPU the process used (``time.process_time_ns``), not the wall clock:
on a shared machine a wall clock times the neighbours.

The last table is what a sync ``guard.call`` of a no-op read costs over calling the function
itself, as the run grows (the default ``Budget()``, its call limit raised to 8,000): the
calls that take the run to 100, 1,000 and 8,000 calls, timed by the window of
``--window`` calls ending there (CPU µs per call, medians of ``--repeats`` runs). A cost
that grew with the run's length would show in the ``x first row`` column.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable
from decimal import Decimal

from toolbreaker import Budget, ClassLimits, RunGuard
from toolbreaker.core._run.budget import Action, RunState
from toolbreaker.core._run.machine import RunEvent, apply

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


def process_run(path: str, task: str, shared: bool, threads: int, calls: int) -> tuple[int, str]:
    """In a worker process: ``threads`` threads of ``calls`` calls each of one run."""
    from toolbreaker.stores import SQLiteStore

    with SQLiteStore(path) as store:
        guard = RunGuard(task, budget=budget(4 * threads * calls), journal=store, shared=shared)
        ran = 0
        lock = threading.Lock()

        def search(q: str) -> dict[str, str]:
            nonlocal ran
            with lock:
                ran += 1
            time.sleep(0.001)
            if not shared:
                guard.add_cost(PRICE, risk="read")
            return {"q": q}

        guard.tool("search", cost=PRICE if shared else None)(search)

        me = os.getpid()  # the same questions from two processes of one run are a loop

        def worker(w: int) -> None:
            for i in range(calls):
                guard.call("search", {"q": f"{me}-{w}-{i}"})

        pool = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return ran, str(guard.stop_packet().counters["cost"])


def processes_run(shared: bool, threads: int, calls: int) -> tuple[int, Decimal]:
    """4 processes of one run through one SQLite file; calls admitted, money spent in all."""
    import multiprocessing
    import tempfile
    import uuid

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/runs.db"
        task = f"bench-{uuid.uuid4().hex[:8]}"
        context = multiprocessing.get_context("spawn")
        with context.Pool(4) as pool:
            found = pool.starmap(process_run, [(path, task, shared, threads, calls)] * 4)
        ran = sum(r for r, _ in found)
        if shared:  # one run, one record: its total once every process is done
            from toolbreaker.stores import SQLiteStore

            with SQLiteStore(path) as store:
                packet = RunGuard(task, journal=store, shared=True).stop_packet()
            return ran, Decimal(str(packet.counters["cost"]))
        return ran, sum((Decimal(c) for _, c in found), Decimal(0))


def per_call_shared(store: object, n: int) -> float:
    """Wall-clock µs per sync ``guard.call`` with a declared cost, the run shared (or not)."""
    import uuid

    policy = Budget(max_cost="1000000", max_tool_calls=n + 1, max_repeats=n, classes=OPEN)
    task = f"bench-{uuid.uuid4().hex[:8]}"
    guard = RunGuard(task, budget=policy, journal=store, shared=store is not None)  # type: ignore[arg-type]
    guard.tool("noop", cost="0.01")(lambda i: None)
    start = time.perf_counter_ns()
    for i in range(n):
        guard.call("noop", {"i": i})
    return (time.perf_counter_ns() - start) / n / 1000


def floor_round_trips(store: object, n: int) -> float:
    """Wall-clock µs of one record read and one compare-and-set write: the floor."""
    import uuid

    key = uuid.uuid4().hex
    version = store.record_put("bench", key, {"n": 0}, version=0)  # type: ignore[attr-defined]
    start = time.perf_counter_ns()
    for i in range(n):
        store.record_get("bench", key)  # type: ignore[attr-defined]
        version = store.record_put("bench", key, {"n": i}, version=version)  # type: ignore[attr-defined]
    return (time.perf_counter_ns() - start) / n / 1000


def shared_stores(postgres: str | None, tmp: str) -> dict[str, object]:
    """The stores to time a shared run on: SQLite, Redis when it can run, PostgreSQL by URL."""
    import shutil
    import socket
    import subprocess

    from toolbreaker.stores import SQLiteStore

    stores: dict[str, object] = {"sqlite (file)": SQLiteStore(f"{tmp}/shared.db")}
    binary = shutil.which("redis-server")
    if binary is not None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        _SERVERS.append(server)
        from toolbreaker.stores import RedisStore

        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.02)
        url = f"redis://127.0.0.1:{port}/0"
        stores["redis (127.0.0.1)"] = RedisStore(url, volatile_journal=True)
    if postgres:
        from toolbreaker.stores import PostgresStore

        stores["postgresql"] = PostgresStore(postgres)
    return stores


_SERVERS: list[object] = []


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


#: The run lengths a call of the guard is timed at.
RUN_LENGTHS = (100, 1_000, 8_000)


def by_run_length(window: int) -> dict[int, tuple[float, float]]:
    """CPU µs per ``guard.call`` and per bare call, in the window ending at each length."""

    def noop(i: int) -> None:
        return None

    guard = RunGuard("bench-length", budget=Budget(max_tool_calls=RUN_LENGTHS[-1]))
    guard.tool("noop")(noop)
    out: dict[int, tuple[float, float]] = {}
    done = 0
    for length in RUN_LENGTHS:
        for i in range(done, length - window):
            guard.call("noop", {"i": i})
        start = time.process_time_ns()
        for i in range(length - window, length):
            guard.call("noop", {"i": i})
        guarded = (time.process_time_ns() - start) / window / 1000
        start = time.process_time_ns()
        for i in range(length - window, length):
            args = {"i": i}  # as the guard calls it: the arguments as a dict
            noop(**args)
        out[length] = (guarded, (time.process_time_ns() - start) / window / 1000)
        done = length
    if guard.stopped is not None:
        raise SystemExit(f"the run stopped: {guard.stopped.detail}")
    return out


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
    parser.add_argument("--window", type=int, default=100, help="calls timed at each length")
    parser.add_argument(
        "--by-length-only", action="store_true", help="print only the last table (by run length)"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgres", metavar="URL", help="time a shared run on PostgreSQL too")
    args = parser.parse_args()
    n, repeats = (1000, 2) if args.quick else (4000, args.repeats)
    if args.by_length_only:
        print_by_run_length(args.window, repeats)
        return
    target = BUDGET + PRICE

    print(f"budget ${BUDGET}, ${PRICE} per call; target: spent <= ${target}")
    print(f"{'scenario':<44}{'admitted':>9}{'spent $':>10}{'x budget':>10}  within")
    results: list[tuple[str, tuple[int, Decimal]]] = []
    for reserved in (False, True):
        mode = "reserved" if reserved else "after the fact"
        results.append((f"{args.tasks} asyncio tasks, {mode}", async_run(args.tasks, reserved)))
        label = f"{args.threads} threads x {args.calls_per_thread}, {mode}"
        results.append((label, thread_run(args.threads, args.calls_per_thread, reserved)))
        label = f"4 processes x 4 threads, {'shared, reserved' if reserved else mode}"
        results.append((label, processes_run(reserved, 4, 50 if not args.quick else 10)))
    for label, (admitted, spent) in results:
        within = "yes" if spent <= target else "NO"
        print(f"{label:<44}{admitted:>9}{spent:>10.2f}{spent / BUDGET:>10.2f}  {within}")

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        stores = shared_stores(args.postgres, tmp)
        calls = 200 if args.quick else 1000
        print()
        print(f"{'a shared run, per call':<30}{'µs/call':>10}{'floor µs':>10}{'x floor':>9}")
        memory = statistics.median(per_call_shared(None, calls) for _ in range(repeats))
        print(f"{'memory (not shared)':<30}{memory:>10.1f}")
        for name, store in stores.items():
            value = statistics.median(per_call_shared(store, calls) for _ in range(repeats))
            floor = statistics.median(floor_round_trips(store, calls) for _ in range(repeats))
            print(f"{name:<30}{value:>10.1f}{floor:>10.1f}{value / floor:>9.2f}")
            store.close()  # type: ignore[attr-defined]
        for server in _SERVERS:
            server.terminate()  # type: ignore[attr-defined]
    if not args.postgres:
        print("postgresql: not timed (pass --postgres URL)")

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
    print_by_run_length(args.window, repeats)


def print_by_run_length(window: int, repeats: int) -> None:
    """The guard's cost per call over the bare call at each run length (medians)."""
    samples = [by_run_length(window) for _ in range(repeats)]
    print()
    print(
        f"{'guard.call at run length':<26}{'µs/call':>9}{'bare µs':>9}{'over µs':>9}"
        f"{'x first row':>13}"
    )
    first = None
    for length in RUN_LENGTHS:
        guarded = statistics.median(s[length][0] for s in samples)
        bare = statistics.median(s[length][1] for s in samples)
        over = guarded - bare
        first = first or over
        print(f"{length:<26,}{guarded:>9.1f}{bare:>9.2f}{over:>9.1f}{over / first:>13.2f}")


if __name__ == "__main__":
    main()
