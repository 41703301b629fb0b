"""The fleet: how long a published sheet takes to reach every process, and what a health
checker spends to find a dependency back.

Run ``python benchmarks/bench_fleet.py`` (about half a minute; ``--store redis://...`` to
use a Redis server instead of an SQLite file). ``--processes`` worker processes (spawned,
each with its own store object) follow one published sheet with ``--poll`` seconds
between polls; the script publishes ``--rounds`` new revisions and prints, per round, the
time from the publication to the last process adopting it. The same processes then share
one breaker whose row has a health check on the real fault-injecting ``ToolService``
(``/health``): the breaker is opened, the service stays dead for ``--dead`` seconds and
then heals. Printed: checks made while dead (all processes together, and how many
processes made them), user calls that reached the service, and the time from healing to
the breaker closing. Times use the host's monotonic clock, shared by its processes.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import queue as queues
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from toolbreaker import Breaker, Registry, publish_policy
from toolbreaker.core._breaker.predicates import may_probe
from toolbreaker.stores import RedisStore, SQLiteStore
from toolbreaker.testing import ToolService, request_json

SHEET = """\
[defaults]
timeout_ms = 1000
enforce = "cooperative"

[search.read]
failure_threshold = 1
cooldown_ms = 50
lease_ttl_ms = 5000
success_threshold = 2
health_check = {{ interval_ms = {interval}, timeout_ms = 1000 }}
# round {n}
"""


def make_store(url: str) -> Any:
    if url.startswith("sqlite://"):
        return SQLiteStore(url[len("sqlite://") :])
    base, prefix = url.split("|")  # a prefix of this run's own
    return RedisStore(base, prefix=prefix)


def worker(url: str, service: str, poll: float, rounds: int, out: Any, stop: Any) -> None:
    store = make_store(url)
    registry = Registry.from_store(store, poll=poll)

    def check() -> bool:
        out.put(("check", os.getpid()))
        request_json("GET", f"{service}/health", timeout=1.0)
        return True

    registry.health_check("search", check, operation="read")
    registry.get("search", "read")
    out.put(("ready", os.getpid()))
    seen = 1
    follower = registry.follower
    assert follower is not None
    while not stop.is_set():
        current = follower.current
        if current is not None and current.revision > seen:
            seen = current.revision
            out.put(("adopted", os.getpid(), seen, time.monotonic()))
        time.sleep(0.001)
    registry.close()
    store.close()


def drain(out: Any, kind: str, count: int, seconds: float = 60) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    end = time.monotonic() + seconds
    while len(found) < count and time.monotonic() < end:
        try:
            message = out.get(timeout=0.05)
        except queues.Empty:
            continue
        if message[0] == kind:
            found.append(message)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", help="redis://... (default: an SQLite file)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=int, default=200, help="health check interval, ms")
    parser.add_argument("--dead", type=float, default=3.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    url = (
        f"{args.store}|bench-fleet-{os.getpid()}"
        if args.store
        else f"sqlite://{folder / 'fleet.db'}"
    )
    store = make_store(url)
    sheet = folder / "sheet.toml"
    sheet.write_text(SHEET.format(interval=args.interval, n=0))
    publish_policy(store, sheet)
    context = multiprocessing.get_context("spawn")
    out, stop = context.Queue(), context.Event()
    with ToolService() as service:
        processes = [
            context.Process(
                target=worker, args=(url, service.url, args.poll, args.rounds, out, stop)
            )
            for _ in range(args.processes)
        ]
        for process in processes:
            process.start()
        drain(out, "ready", args.processes)
        print(
            f"{args.processes} processes, poll {args.poll} s, store {url.split(':', maxsplit=1)[0]}"
        )
        lags = []
        for n in range(1, args.rounds + 1):
            sheet.write_text(SHEET.format(interval=args.interval, n=n))
            published = time.monotonic()
            revision = publish_policy(store, sheet).revision
            adopted = [m for m in drain(out, "adopted", args.processes) if m[2] == revision]
            lag = max(m[3] for m in adopted) - published
            lags.append(lag)
            print(f"  revision {revision}: all {len(adopted)} processes in {lag * 1000:.0f} ms")
        print(
            f"  publish -> every process: median {statistics.median(lags) * 1000:.0f} ms, "
            f"max {max(lags) * 1000:.0f} ms (bound: poll x 1.2 = {args.poll * 1200:.0f} ms)"
        )
        service.outage("GET /health")
        service.outage("GET /search")
        row = Registry.from_store(store, follow=False).boundaries()[("search", "read")]
        user = Breaker("search", store=store, boundary=row)
        with contextlib.suppress(Exception):
            user.call(lambda: request_json("GET", f"{service.url}/search?q=x", timeout=1.0))
        while not out.empty():
            out.get()
        time.sleep(args.dead)
        dead_checks = drain(out, "check", 10_000, seconds=0.2)
        user_calls = service.hits.get("GET /search", 0)
        healed = time.monotonic()
        service.recover("GET /health")
        while may_probe(user.state):  # until it is closed again
            time.sleep(0.005)
        closed = time.monotonic()
        print(
            f"health checks while dead for {args.dead:.1f} s: {len(dead_checks)} "
            f"(interval {args.interval} ms), made by {len({m[1] for m in dead_checks})} of "
            f"{args.processes} processes; user calls that reached the service: {user_calls} "
            f"(the one that opened it)"
        )
        print(
            f"healed -> closed: {(closed - healed) * 1000:.0f} ms "
            f"(success_threshold 2), with no user call"
        )
        stop.set()
        for process in processes:
            process.join(timeout=10)
    store.close()


if __name__ == "__main__":
    main()
