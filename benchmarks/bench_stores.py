"""Shared breaker state: toolbreaker's SQLite, Redis and PostgreSQL stores against pybreaker
and purgatory.

Run ``python benchmarks/bench_stores.py`` (about two minutes; ``--seconds`` sets the length
of each measurement, 2 by default, ``--procs`` the worker counts, 1,4,8 by default). It
starts its own redis-server on a free loopback port (``--save '' --appendonly no``) and
stops it at the end; every library talks to that one server. When PostgreSQL's ``initdb``
is found, it also starts a PostgreSQL server (as the ``postgres`` user when run as root)
with ``pg_stat_statements`` to count statements; ``--no-postgres`` skips it. When
``redis-cli`` is found, it also starts a Redis Cluster (3 masters, 3 replicas, no
persistence) and counts commands on every node; ``--no-cluster`` skips it.

What is measured, for each number of worker processes (spawned, each with its own client):

- ``calls/s``: guarded calls of a no-op per second, all processes together, closed and
  with the breaker open (a rejection is a call too);
- ``cmds/call``: Redis commands the server executed per call (``INFO commandstats``
  deltas, including the commands a script runs);
- ``trips/call``: requests a client sent per call: the same, less the commands run inside
  toolbreaker's scripts (the peers use no scripts). For the SQLite store: write
  transactions per call. For the PostgreSQL store: compare-and-set statements the server
  ran per call (``pg_stat_statements``).

Then, one process: toolbreaker's round trips per operation (closed success, local
rejection, failure, half-open lease, probe success); and a contention check: 4 processes
record 10 failures each, at once, against a threshold of 40: the breaker must be open.

toolbreaker runs with ``enforce="cooperative"`` (the call runs inline, as the peers run
it) and, for Redis, ``clock=store.clock``. purgatory runs through its asyncio factory:
its synchronous Redis backend calls an asyncio client without awaiting it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

from toolbreaker import Breaker, Policy
from toolbreaker.core import rejects_callers
from toolbreaker.core._breaker.predicates import may_probe
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._clock import monotonic_ms
from toolbreaker.stores import PostgresStore, RedisStore, SQLiteStore
from toolbreaker.testing import FakeClock

try:
    import purgatory
    import pybreaker
    from purgatory.domain.model import OpenedState
except ImportError as exc:  # pragma: no cover - depends on the environment
    sys.exit(f"missing benchmark peer ({exc.name}); install them with: pip install -e '.[bench]'")

LIBS = ["toolbreaker Redis", "toolbreaker SQLite", "pybreaker Redis", "purgatory Redis"]
POSTGRES = "toolbreaker PostgreSQL"
CLUSTER = "toolbreaker Cluster"
#: Commands only toolbreaker's scripts run, never a client: not round trips.
SCRIPT_ONLY = {"time", "type", "hmget", "hset", "hdel", "pexpire", "persist", "publish", "del"}
#: Commands of the harness itself.
HARNESS = {
    "info", "config", "client", "hello", "ping", "subscribe", "select", "flushall",
    "cluster", "command", "readonly", "script",
}  # fmt: skip
HUGE_MS = 10**9
OPEN_POLICY = Policy(failure_threshold=1, cooldown_ms=HUGE_MS, cooldown_max_ms=HUGE_MS)


def ok() -> None:
    return None


def boom() -> None:
    raise ConnectionRefusedError("the dependency is down")


# -- one library, one process -------------------------------------------------------------


class Subject:
    """One library's guarded call, built inside a worker process."""

    def __init__(self, lib: str, target: str, key: str, threshold: int = 1) -> None:
        self.lib = lib
        self.key = key
        self.transactions = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        if lib.startswith("toolbreaker"):
            if lib.endswith("Redis"):
                self.store: Any = RedisStore(target)
                clock = self.store.clock
            elif lib.endswith("Cluster"):
                self.store = RedisStore(target, cluster=True)
                clock = self.store.clock
            elif lib.endswith("PostgreSQL"):
                self.store = PostgresStore(target)
                clock = monotonic_ms
            else:
                self.store = SQLiteStore(target)
                clock = monotonic_ms
                transact = self.store._transact

                def counted(*args: Any) -> Any:
                    self.transactions += 1
                    return transact(*args)

                self.store._transact = counted
            policy = Policy(
                failure_threshold=threshold, cooldown_ms=HUGE_MS, cooldown_max_ms=HUGE_MS
            )
            self.breaker = Breaker(
                key, policy=policy, store=self.store, clock=clock, timeout=10, enforce="cooperative"
            )
        elif lib.startswith("pybreaker"):
            self.client = redis.Redis.from_url(target)
            storage = pybreaker.CircuitRedisStorage(
                pybreaker.STATE_CLOSED, self.client, namespace=key
            )
            self.pybreaker = pybreaker.CircuitBreaker(
                fail_max=threshold, reset_timeout=HUGE_MS, state_storage=storage
            )
        else:
            self.loop = asyncio.new_event_loop()
            self.factory = purgatory.AsyncCircuitBreakerFactory(
                default_threshold=threshold,
                default_ttl=HUGE_MS,
                uow=purgatory.AsyncRedisUnitOfWork(target),
            )
            self.loop.run_until_complete(self.factory.initialize())

    def warm(self) -> None:
        """A few calls; for toolbreaker, until the view is fed (the steady state)."""
        deadline = time.monotonic() + 3
        for _ in range(20):
            self.calls(1, fail=False)
        if self.lib.startswith("toolbreaker"):
            while self.breaker._view.state is None and time.monotonic() < deadline:
                self.calls(1, fail=False)
                time.sleep(0.005)

    def calls(self, count: int, *, fail: bool) -> int:
        """Make ``count`` guarded calls; returns how many were rejected."""
        fn = boom if fail else ok
        rejected = 0
        if self.loop is not None:
            return self.loop.run_until_complete(self._purgatory(count, fail))
        for _ in range(count):
            try:
                if self.lib.startswith("toolbreaker"):
                    self.breaker.call(fn)
                else:
                    self.pybreaker.call(fn)
            except (CircuitOpen, pybreaker.CircuitBreakerError):
                rejected += 1
            except ConnectionRefusedError:
                pass
        return rejected

    async def _purgatory(self, count: int, fail: bool) -> int:
        rejected = 0
        for _ in range(count):
            try:
                async with await self.factory.get_breaker(self.key):
                    if fail:
                        boom()
            except OpenedState:
                rejected += 1
            except ConnectionRefusedError:
                pass
        return rejected

    def is_open(self) -> bool:
        if self.lib.startswith("toolbreaker"):
            policy = self.breaker.policy
            return rejects_callers(self.store.load(self.key, policy), policy)
        return self.calls(1, fail=False) == 1

    def close(self) -> None:
        if self.lib.startswith("toolbreaker"):
            self.store.close()
        elif self.lib.startswith("pybreaker"):
            self.client.close()
        elif self.loop is not None:
            repository = self.factory.uow.contexts
            self.loop.run_until_complete(repository.redis.aclose())
            self.loop.close()


def run_worker(
    lib: str, target: str, key: str, scenario: str, start_ns: int, stop_ns: int
) -> tuple[int, int, int]:
    """Call in a loop from start to stop; returns (calls, rejections, transactions)."""
    subject = Subject(lib, target, key)
    try:
        subject.warm()
        subject.transactions = 0
        while time.monotonic_ns() < start_ns:
            time.sleep(0.001)
        calls = rejected = 0
        while time.monotonic_ns() < stop_ns:
            rejected += subject.calls(100, fail=False)
            calls += 100
        return calls, rejected, subject.transactions
    finally:
        subject.close()


def contend(lib: str, target: str, key: str, start_ns: int, failures: int, threshold: int) -> int:
    subject = Subject(lib, target, key, threshold=threshold)
    try:
        while time.monotonic_ns() < start_ns:
            time.sleep(0.001)
        return subject.calls(failures, fail=True)
    finally:
        subject.close()


def open_breaker(lib: str, target: str, key: str) -> None:
    subject = Subject(lib, target, key)
    try:
        subject.calls(1, fail=True)
        assert subject.is_open(), f"{lib} did not open"
    finally:
        subject.close()


def check_open(lib: str, target: str, key: str, threshold: int) -> bool:
    subject = Subject(lib, target, key, threshold=threshold)
    try:
        return subject.is_open()
    finally:
        subject.close()


# -- the server and the counting -----------------------------------------------------------


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    if binary is None:
        sys.exit("redis-server not found: apt-get install redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        process = subprocess.Popen(
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
                "--dir",
                directory,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            with redis.Redis.from_url(url) as client:
                for _ in range(500):
                    with contextlib.suppress(redis.ConnectionError):
                        if client.ping():
                            break
                    time.sleep(0.01)
            yield url
        finally:
            process.terminate()
            process.wait(10)


@contextlib.contextmanager
def postgres_server() -> Iterator[str | None]:
    """A throwaway PostgreSQL with pg_stat_statements; ``None`` when it cannot be started."""
    found = shutil.which("initdb") or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None
    )
    if found is None:
        yield None
        return
    import psycopg

    bindir = Path(found).resolve().parent
    user = "postgres" if os.geteuid() == 0 else None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    directory = tempfile.mkdtemp(prefix="bench-pg-")
    if user:
        shutil.chown(directory, user)
    data = str(Path(directory, "data"))
    subprocess.run(
        [str(bindir / "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"],
        check=True, capture_output=True, user=user,
    )  # fmt: skip
    process = subprocess.Popen(
        [str(bindir / "postgres"), "-D", data, "-p", str(port), "-h", "127.0.0.1",
         "-c", "unix_socket_directories=", "-c", "max_connections=200",
         "-c", "shared_preload_libraries=pg_stat_statements"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=user,
    )  # fmt: skip
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        for _ in range(600):
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                break
            except psycopg.OperationalError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(20)
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def cluster_server() -> Iterator[list[str] | None]:
    """A throwaway Redis Cluster (3 masters, 3 replicas); the URLs of its six nodes."""
    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    cli = shutil.which("redis-cli") or shutil.which("redis-cli", path="/usr/bin")
    if binary is None or cli is None:
        yield None
        return
    ports: list[int] = []
    while len(ports) < 6:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 <= 65535 and port not in ports:
            ports.append(port)
    with tempfile.TemporaryDirectory() as directory:
        processes = [
            subprocess.Popen(
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
                    "--dir",
                    directory,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    f"nodes-{port}.conf",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for port in ports
        ]
        urls = [f"redis://127.0.0.1:{port}" for port in ports]
        try:
            for url in urls:
                with redis.Redis.from_url(url) as client:
                    for _ in range(500):
                        with contextlib.suppress(redis.ConnectionError):
                            if client.ping():
                                break
                        time.sleep(0.01)
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                 "--cluster-replicas", "1", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            for url in urls:
                with redis.Redis.from_url(url) as client:
                    for _ in range(600):
                        if client.execute_command("CLUSTER INFO").get("cluster_state") == "ok":
                            break
                        time.sleep(0.05)
            yield urls
        finally:
            for process in processes:
                process.terminate()
                process.wait(10)


def cluster_commands(urls: list[str]) -> dict[str, int]:
    """Commands executed by every node of the cluster, added up."""
    total: dict[str, int] = {}
    for url in urls:
        with redis.Redis.from_url(url) as client:
            for name, count in commands(client).items():
                total[name] = total.get(name, 0) + count
    return total


def statements(url: str) -> int:
    """Compare-and-set statements the PostgreSQL server ran so far."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE %s",
            ("%toolbreaker_cas(%",),
        ).fetchone()
    return int(row[0]) if row else 0


def commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def per_call(before: dict[str, int], after: dict[str, int], calls: int) -> tuple[float, float]:
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta = {k: v for k, v in delta.items() if k not in HARNESS and v > 0}
    total = sum(delta.values())
    trips = total - sum(v for k, v in delta.items() if k in SCRIPT_ONLY)
    return total / calls, trips / calls


# -- the tables ------------------------------------------------------------------------------


CLUSTER_URLS: list[str] = []


def target_of(lib: str, url: str, pg_url: str | None, directory: str, key: str) -> str:
    if "Cluster" in lib:
        return CLUSTER_URLS[0]
    if "SQLite" in lib:
        return str(Path(directory, f"{key}.db"))
    if "PostgreSQL" in lib:
        assert pg_url is not None
        return pg_url
    return url


def throughput(
    pool: Any,
    url: str,
    pg_url: str | None,
    directory: str,
    seconds: float,
    counts: list[int],
) -> dict[tuple[str, int, str], dict[str, float]]:
    results: dict[tuple[str, int, str], dict[str, float]] = {}
    with redis.Redis.from_url(url) as client:
        for scenario in ("closed", "open"):
            for procs in counts:
                for lib in LIBS:
                    key = f"bench-{uuid.uuid4().hex[:8]}"
                    target = target_of(lib, url, pg_url, directory, key)
                    if scenario == "open":
                        pool.apply(open_breaker, (lib, target, key))
                    start = (
                        time.monotonic_ns() + 700_000_000
                    )  # each worker connects and warms up first
                    stop = start + int(seconds * 1e9)
                    job = pool.starmap_async(
                        run_worker, [(lib, target, key, scenario, start, stop)] * procs
                    )
                    while time.monotonic_ns() < start:
                        time.sleep(0.0005)
                    before = commands(client)
                    pg_before = statements(pg_url) if "PostgreSQL" in lib and pg_url else 0
                    if "Cluster" in lib:
                        before = cluster_commands(CLUSTER_URLS)
                    done = job.get(timeout=60)
                    after = cluster_commands(CLUSTER_URLS) if "Cluster" in lib else commands(client)
                    calls = sum(d[0] for d in done)
                    rejected = sum(d[1] for d in done)
                    expected = calls if scenario == "open" else 0
                    assert rejected == expected, f"{lib} {scenario}: {rejected} of {calls} rejected"
                    cmds, trips = per_call(before, after, calls)
                    if "SQLite" in lib:
                        cmds, trips = float("nan"), sum(d[2] for d in done) / calls
                    elif "PostgreSQL" in lib and pg_url:
                        cmds = float("nan")
                        # The harness's own statement count is one call of no CAS.
                        trips = (statements(pg_url) - pg_before) / calls
                    results[(lib, procs, scenario)] = {
                        "rate": calls / seconds,
                        "cmds": cmds,
                        "trips": trips,
                    }
    return results


def attempt(fn: Any, *args: Any) -> None:
    with contextlib.suppress(CircuitOpen, ConnectionRefusedError):
        fn(*args)


def round_trips_of(
    kind: str, url: str, directory: str, pg_url: str | None = None
) -> dict[str, float]:
    """toolbreaker's round trips per operation on one store, one process."""
    policy = Policy(failure_threshold=2, cooldown_ms=1000, success_threshold=1)
    clock = FakeClock()
    key = f"trips-{uuid.uuid4().hex[:8]}"
    transactions = [0]
    if kind == "Redis":
        store: Any = RedisStore(url)
    elif kind == "PostgreSQL":
        store = PostgresStore(pg_url or "")
    else:
        store = SQLiteStore(Path(directory, f"{key}.db"))
        transact = store._transact

        def counting(*args: Any) -> Any:
            transactions[0] += 1
            return transact(*args)

        store._transact = counting
    client = redis.Redis.from_url(url)
    breaker = Breaker(
        key, policy=policy, store=store, clock=clock, timeout=10, enforce="cooperative"
    )

    def trips() -> int:
        if kind == "SQLite":
            return transactions[0]
        if kind == "PostgreSQL":
            return statements(pg_url or "")
        stats = commands(client)
        return stats.get("evalsha", 0) + stats.get("eval", 0)

    out: dict[str, float] = {}
    deadline = time.monotonic() + 3
    while breaker._view.state is None and time.monotonic() < deadline:
        breaker.call(ok)
        time.sleep(0.005)
    steps: list[tuple[str, Any, int]] = [
        ("closed success", ok, 1000),
        ("failure (closed)", boom, 1),
        ("failure that opens", boom, 1),
        ("local rejection (open)", ok, 1000),
    ]
    for label, fn, times in steps:
        first = trips()
        for _ in range(times):
            attempt(breaker.call, fn)
        out[label] = (trips() - first) / times
    clock.advance(1000)
    first = trips()
    permit = breaker.allow()
    out["half-open lease"] = trips() - first
    assert permit.admitted
    first = trips()
    permit.record("success")
    out["probe success (closes)"] = trips() - first
    assert not may_probe(breaker.state)  # closed: no request is a probe
    store.close()
    client.close()
    return out


def contention(pool: Any, url: str, pg_url: str | None, directory: str) -> list[tuple[str, str]]:
    out = []
    for lib in LIBS:
        key = f"contend-{uuid.uuid4().hex[:8]}"
        target = target_of(lib, url, pg_url, directory, key)
        start = time.monotonic_ns() + 700_000_000
        pool.starmap(contend, [(lib, target, key, start, 10, 40)] * 4)
        opened = pool.apply(check_open, (lib, target, key, 40))
        out.append((lib, "open" if opened else "still CLOSED after 40 failures: updates lost"))
    return out


def records_cost(
    url: str, pg_url: str | None, directory: str, pairs: int = 2000
) -> dict[str, float]:
    """Microseconds for one record get plus one compare-and-set put, one thread."""
    from toolbreaker.stores import PostgresStore, RedisStore, SQLiteStore

    stores: dict[str, Any] = {
        "SQLite": SQLiteStore(os.path.join(directory, "records.db")),
        "Redis": RedisStore(url, prefix="bench-records"),
    }
    if CLUSTER_URLS:
        stores["Redis Cluster"] = RedisStore(CLUSTER_URLS[0], cluster=True, prefix="bench-records")
    if pg_url:
        stores["PostgreSQL"] = PostgresStore(pg_url, prefix="bench_records")
    costs = {}
    for name, store in stores.items():
        with store:
            store.record_put("bench", "k", {"n": 0})
            started = time.perf_counter()
            for _ in range(pairs):
                value, version = store.record_get("bench", "k")
                store.record_put("bench", "k", {"n": value["n"] + 1}, version=version)
            costs[name] = (time.perf_counter() - started) / pairs * 1e6
    return costs


def cas_cost(
    url: str, pg_url: str | None, rounds: int = 2000, repeat: int = 5
) -> dict[str, tuple[float, float]]:
    """Microseconds per state-changing ``apply`` (one compare-and-set write), sync and async.

    Failures and successes alternate on a closed breaker that never opens, so every event
    changes the state and costs one compare-and-set; one thread, the best of ``repeat``.
    """
    from toolbreaker.core._breaker.state import Event

    policy = Policy(failure_threshold=10**6)
    stores: dict[str, Any] = {"Redis": lambda: RedisStore(url, prefix="bench-cas")}
    if CLUSTER_URLS:
        stores["Redis Cluster"] = lambda: RedisStore(
            CLUSTER_URLS[0], cluster=True, prefix="bench-cas"
        )
    if pg_url:
        stores["PostgreSQL"] = lambda: PostgresStore(pg_url, prefix="bench_cas")

    def events(key: str) -> list[Event]:
        kinds = ("failure", "success") * (rounds // 2)
        return [Event(kind, n, key, "c", 0) for n, kind in enumerate(kinds)]

    async def drive(store: Any, todo: list[Event]) -> float:
        started = time.perf_counter()
        for event in todo:
            await store.aapply(event.dependency, event, policy)
        return time.perf_counter() - started

    costs = {}
    for name, make in stores.items():
        store = make()
        loop = asyncio.new_event_loop()  # a store's asyncio client keeps to one loop
        with store:
            sync_best = async_best = float("inf")
            for _ in range(repeat):
                todo = events(f"cas-{uuid.uuid4().hex[:8]}")
                store.apply(todo[0].dependency, Event("request", 0, todo[0].dependency), policy)
                started = time.perf_counter()
                for event in todo:
                    store.apply(event.dependency, event, policy)
                sync_best = min(sync_best, time.perf_counter() - started)
                todo = events(f"acas-{uuid.uuid4().hex[:8]}")
                async_best = min(async_best, loop.run_until_complete(drive(store, todo)))
            costs[name] = (sync_best / rounds * 1e6, async_best / rounds * 1e6)
            loop.run_until_complete(store.aclose())
        loop.close()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    parser.add_argument("--procs", default="1,4,8", help="worker process counts, e.g. 1,4,8")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL rows")
    parser.add_argument("--no-cluster", action="store_true", help="skip the Redis Cluster rows")
    parser.add_argument(
        "--cas-only", action="store_true", help="measure only the compare-and-set path"
    )
    args = parser.parse_args()
    if args.cas_only:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(redis_server())
            pg_url = None if args.no_postgres else stack.enter_context(postgres_server())
            nodes = None if args.no_cluster else stack.enter_context(cluster_server())
            if nodes is not None:
                CLUSTER_URLS.extend(nodes)
            print_cas(cas_cost(url, pg_url))
        return
    counts = [int(n) for n in args.procs.split(",")]
    versions = {name: metadata.version(name) for name in ("redis", "pybreaker", "purgatory")}
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server())
        directory = stack.enter_context(tempfile.TemporaryDirectory())
        pg_url = None if args.no_postgres else stack.enter_context(postgres_server())
        if pg_url is not None:
            LIBS.insert(2, POSTGRES)
            versions["psycopg"] = metadata.version("psycopg")
        nodes = None if args.no_cluster else stack.enter_context(cluster_server())
        if nodes is not None:
            CLUSTER_URLS.extend(nodes)
            LIBS.insert(1, CLUSTER)
        with redis.Redis.from_url(url) as client:
            server = client.info("server")["redis_version"]
        context = multiprocessing.get_context("spawn")
        size = max(*counts, 4)
        with context.Pool(size) as pool:
            pool.map(time.sleep, [1.0] * size, chunksize=1)  # every worker boots and imports
            table = throughput(pool, url, pg_url, directory, args.seconds, counts)
            fights = contention(pool, url, pg_url, directory)
            pool.close()
            pool.join()
        on_redis = round_trips_of("Redis", url, directory)
        on_sqlite = round_trips_of("SQLite", url, directory)
        on_pg = round_trips_of("PostgreSQL", url, directory, pg_url) if pg_url else None
        records = records_cost(url, pg_url, directory)
        cas = cas_cost(url, pg_url)

    print(
        f"redis-server {server}, redis-py {versions['redis']}, "
        f"pybreaker {versions['pybreaker']}, purgatory {versions['purgatory']}"
        + (f", psycopg {versions['psycopg']} (PostgreSQL)" if pg_url else "")
        + "; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.seconds:g} s each"
    )
    print()
    header = (
        f"{'store':<22} {'procs':>5} {'state':>7} {'calls/s':>10} {'cmds/call':>10} "
        f"{'trips/call':>11}"
    )
    print(header)
    print("-" * len(header))
    for scenario in ("closed", "open"):
        for procs in counts:
            for lib in LIBS:
                row = table[(lib, procs, scenario)]
                cmds = "-" if row["cmds"] != row["cmds"] else f"{row['cmds']:.2f}"
                print(
                    f"{lib:<22} {procs:>5} {scenario:>7} {row['rate']:>10,.0f} {cmds:>10} "
                    f"{row['trips']:>11.3f}"
                )
    print()
    print("ratios (calls/s of toolbreaker over the peer's, same state and processes):")
    for scenario in ("closed", "open"):
        for procs in counts:
            for ours in [lib for lib in LIBS if lib.startswith("toolbreaker")]:
                mine = table[(ours, procs, scenario)]["rate"]
                parts = [
                    f"{mine / table[(peer, procs, scenario)]['rate']:5.1f}x {peer.split()[0]}"
                    for peer in ("pybreaker Redis", "purgatory Redis")
                ]
                print(f"  {ours:<22} {scenario:>6}, {procs} proc: " + "   ".join(parts))
    print()
    print(
        "toolbreaker round trips per operation (Redis: scripts sent; SQLite: write "
        "transactions; PostgreSQL: compare-and-set statements):"
    )
    for label, value in on_redis.items():
        pg = f"   PostgreSQL {on_pg[label]:5.2f}" if on_pg else ""
        print(f"  {label:<26} Redis {value:5.2f}   SQLite {on_sqlite[label]:5.2f}{pg}")
    print()
    print("records: one get plus one compare-and-set put, one thread:")
    for name, micros in records.items():
        print(f"  {name:<26} {micros:8.0f} us")
    print()
    print_cas(cas)
    print()
    print("contention: 4 processes x 10 failures at once, threshold 40:")
    for lib, verdict in fights:
        print(f"  {lib:<22} {verdict}")


def print_cas(costs: dict[str, tuple[float, float]]) -> None:
    print("compare-and-set path: one state-changing apply, one thread (best of 5):")
    for name, (sync_us, async_us) in costs.items():
        print(f"  {name:<26} apply {sync_us:7.1f} us   aapply {async_us:7.1f} us")


if __name__ == "__main__":
    main()
