"""Several OS processes share one breaker through SQLite, a real Redis (a single server and
a Redis Cluster of three masters and three replicas) and a real PostgreSQL.

Workers are spawned processes (no fork), each with its own store and its own Breaker, as
separate workers of an application would be. Each test gives every worker the same
timeline as absolute instants of the host's monotonic clock (one clock for every process
of a Linux host), and asserts on the logs the workers return.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from conformance import HANG_GUARD

from toolbreaker import Breaker, Policy
from toolbreaker.core import Event
from toolbreaker.runtime._clock import monotonic_ms
from toolbreaker.stores import PostgresStore, RedisStore, SQLiteStore
from toolbreaker.testing import capture_transitions

WORKERS = 8
MS = 1_000_000  # nanoseconds

Log = list[tuple[Any, ...]]


# -- what runs in the worker processes ---------------------------------------------------


def make_store(kind: str, target: str, **options: Any) -> Any:
    if kind == "sqlite":
        return SQLiteStore(target, **options)
    if kind == "postgres":
        return PostgresStore(target, **options)
    if kind == "redis-cluster":
        return RedisStore(target, cluster=True, **options)
    return RedisStore(target, **options)


def make_breaker(store: Any, key: str, policy: Policy) -> Breaker:
    clock = store.clock if isinstance(store, RedisStore) else monotonic_ms
    # A probe's lease must outlive its call's deadline (Boundary checks it).
    timeout = min(5.0, policy.lease_ttl_ms / 1000)
    return Breaker(
        key, policy=policy, store=store, clock=clock, timeout=timeout, enforce="cooperative"
    )


def warm(seconds: float) -> int:
    """Occupy one pool worker for a while, so that every worker boots and imports.

    The stores import their clients lazily; importing them here keeps a slow import on a
    busy machine from eating a test's timeline.
    """
    import importlib.util

    for name in ("redis", "psycopg"):
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    time.sleep(seconds)
    return os.getpid()


def sleep_until(instant_ns: int) -> None:
    while (left := instant_ns - time.monotonic_ns()) > 0:
        time.sleep(min(left / 1e9, 0.01))


def hammer(
    kind: str,
    target: str,
    key: str,
    policy_fields: dict[str, Any],
    timeline: tuple[int, int, int, int],
    fail_every: int = 0,
    options: dict[str, Any] | None = None,
    back: str | None = None,
    until_closed: bool = False,
) -> Log:
    """Call one dependency in a loop; it fails from ``outage`` until ``recovery``.

    ``until_closed``: go on past ``stop`` (for at most 60 s more) until a call that is not
    a probe is admitted after ``stop``, which only a closed breaker does: the probes of a
    loaded machine can close it after a fixed ``stop``.

    ``back``: a file the test creates once the store it stopped answers again; the loop
    then goes on past ``stop`` (for at most 60 s more) until a call started 500 ms after
    the file appeared is admitted, so a restart that a loaded machine made slow is waited
    for, not raced.

    Log rows: ("admit", started_ns, outcome, generation, probe, record, done_ns,
    admitted_ns, settling_ns) or ("reject", started_ns, reason). A probe's lease is held
    at least from admitted_ns (allow() returned) to settling_ns (record() was called).
    """
    try:
        return _hammer(
            kind, target, key, policy_fields, timeline, fail_every, options, back, until_closed
        )
    except Exception:  # noqa: BLE001 - every failure is sent back, as text
        # Whatever a worker raises reaches the test (a store's error may hold a lock, which
        # the pool cannot send back: the test then saw only "cannot pickle").
        raise RuntimeError(traceback.format_exc()) from None


def _hammer(
    kind: str,
    target: str,
    key: str,
    policy_fields: dict[str, Any],
    timeline: tuple[int, int, int, int],
    fail_every: int,
    options: dict[str, Any] | None,
    back: str | None = None,
    until_closed: bool = False,
) -> Log:
    start, outage, recovery, stop = timeline
    store = make_store(kind, target, **(options or {}))
    log: Log = []
    back_ns: int | None = None  # when this worker first saw the ``back`` file
    try:
        breaker = make_breaker(store, key, Policy(**policy_fields))
        calls = 0
        sleep_until(start)
        while (started := time.monotonic_ns()) < stop or (
            started < stop + 60_000 * MS
            and (
                (back is not None and not _recovered(log, back_ns))
                or (until_closed and not _closed_after(log, stop))
            )
        ):
            if back is not None and back_ns is None and os.path.exists(back):
                back_ns = started
            permit = breaker.allow()
            if not permit.admitted:
                log.append(("reject", started, permit.reason))
                time.sleep(0.001)
                continue
            admitted = time.monotonic_ns()
            time.sleep(0.001)  # the call itself
            calls += 1
            failing = outage <= started < recovery or bool(fail_every and calls % fail_every == 0)
            settling = time.monotonic_ns()
            record = permit.record("failure" if failing else "success")
            summary = record and (
                record.reason,
                record.from_phase,
                record.to_phase,
                record.generation,
            )
            log.append(
                (
                    "admit",
                    started,
                    "failure" if failing else "success",
                    permit.generation,
                    permit.probe,
                    summary,
                    time.monotonic_ns(),
                    admitted,
                    settling,
                )
            )
    finally:
        store.close()
    return log


def _recovered(log: Log, back_ns: int | None) -> bool:
    """A call that started 500 ms after the store was back has been admitted."""
    return back_ns is not None and any(
        row[0] == "admit" and row[1] > back_ns + 500 * MS for row in log[-50:]
    )


def _closed_after(log: Log, instant: int) -> bool:
    """A call that is not a probe was admitted after ``instant``: the breaker was closed."""
    return any(row[0] == "admit" and row[1] > instant and not row[4] for row in log[-50:])


def fail_many(kind: str, target: str, key: str, start: int, count: int) -> int:
    """Apply ``count`` failures of generation 0 as fast as possible.

    What is tested is that no update is lost, not how fast a reply comes: eight processes
    on a shared two-core machine can keep Redis's reply past the default 0.25 s, so the
    socket timeout is generous here, and PostgreSQL's compare-and-set may lose more races
    in a row than its default of 64 before giving up.
    """
    options: dict[str, Any] = {"socket_timeout": 5.0} if kind.startswith("redis") else {}
    if kind == "sqlite":  # eight writers of one file: under a load average of 20 a writer
        # waited past the default 1 s for the file's lock
        options = {"timeout": 10.0}
    if kind == "postgres":  # eight writers of one row on two busy cores: many lose a race,
        # and a statement can wait past the default bound for the row's lock (seen under a
        # load average of 20: the server answered after 1.25 s)
        options = {"max_attempts": 1_000, "timeout": 5.0}
    store = make_store(kind, target, **options)
    policy = Policy(failure_threshold=100_000)
    try:
        sleep_until(start)
        for n in range(count):
            store.apply(
                key, Event("failure", n, key, call=f"{os.getpid()}.{n}", generation=0), policy
            )
    finally:
        store.close()
    return count


def hold_probe(kind: str, target: str, key: str, policy_fields: dict[str, Any], queue: Any) -> None:
    """Take a probe lease and never settle it (the test kills this process)."""
    store = make_store(kind, target)
    breaker = make_breaker(store, key, Policy(**policy_fields))
    permit = breaker.allow()
    queue.put((permit.admitted, getattr(permit, "probe", False)))
    time.sleep(60)


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS) as workers:
        assert len(set(workers.map(warm, [1.0] * WORKERS, chunksize=1))) == WORKERS
        yield workers
        workers.close()
        workers.join()


def timeline(*phases_ms: int) -> tuple[int, ...]:
    """Absolute instants: now + 300 ms, then each phase's length after the previous one."""
    instants = [time.monotonic_ns() + 300 * MS]
    for length in phases_ms:
        instants.append(instants[-1] + length * MS)
    return tuple(instants)


def max_in_flight(probes: list[tuple[Any, ...]]) -> int:
    """The most probes certainly holding a lease at the same instant, across processes."""
    edges = sorted([(row[7], 1) for row in probes] + [(row[8], -1) for row in probes])
    most = held = 0
    for _, change in edges:
        held += change
        most = max(most, held)
    return most


def admits(logs: list[Log]) -> list[tuple[Any, ...]]:
    return [row for log in logs for row in log if row[0] == "admit"]


# -- tests -------------------------------------------------------------------------


@pytest.mark.slow
def test_eight_processes_share_one_breaker_through_an_outage(pool, kind, target):
    """Never more than probe_limit probes in flight, no failure count lost, and every
    process learns of the opening within one round trip."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    policy = {
        "failure_threshold": 5,
        # A window (rather than consecutive failures) so that a success racing the start of
        # the outage cannot reset the count: then exactly threshold failures must open it.
        "window_ms": 60_000,
        "cooldown_ms": 250,
        "cooldown_max_ms": 250,
        "probe_limit": 2,
        "success_threshold": 2,
        "lease_ttl_ms": 2000,
    }
    start, outage, recovery, stop = timeline(300, 1200, 900)
    timeline_ = (start, outage, recovery, stop)
    logs = pool.starmap(hammer, [(kind, target, key, policy, timeline_, 0, None, None, True)] * 8)
    rows = admits(logs)

    probes = [row for row in rows if row[4]]
    assert probes, "the breaker never went half-open"
    assert max_in_flight(probes) <= policy["probe_limit"]
    # A settled probe frees its lease, so a generation admits at most this many in all.
    most = policy["probe_limit"] + policy["success_threshold"] - 1
    assert max(Counter(row[3] for row in probes).values()) <= most

    failures = [row for row in rows if row[2] == "failure"]
    assert failures
    assert all(row[5] is not None for row in failures), "a failure was not recorded"
    openings = [row for row in rows if row[5] and row[5][1:3] == ("closed", "open")]
    assert len(openings) == 1
    closed_generation = openings[0][5][3] - 1
    counted = [
        row
        for row in rows
        if row[5]
        and row[5][:3] == ("qualifying-failure", "closed", "closed")
        and row[5][3] == closed_generation
    ]
    assert len(counted) == policy["failure_threshold"] - 1

    opened_at = openings[0][6]
    for log in logs:
        late = [
            r for r in log if r[0] == "admit" and r[1] > opened_at and r[3] == closed_generation
        ]
        assert len(late) <= 1, "a process kept admitting calls after the opening"

    closings = [row[6] for row in rows if row[5] and row[5][0] == "probe-quorum"]
    assert closings
    # Every process is admitted again once the probes closed it (not "in the last 300 ms":
    # on a loaded machine a process can sit out that long between two calls).
    for log in logs:
        assert any(r[0] == "admit" and r[1] > min(closings) for r in log)
    with make_store(kind, target) as store:
        assert store.load(key, Policy(**policy)).phase == "closed"


@pytest.mark.slow
def test_no_lost_update_across_processes(pool, kind, target):
    """Eight processes count failures on one key at once: every one of them is counted."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    start = time.monotonic_ns() + 300 * MS
    counts = pool.starmap(fail_many, [(kind, target, key, start, 50)] * 8)
    with make_store(kind, target) as store:
        state = store.load(key, Policy(failure_threshold=100_000))
    assert len(state.failures) == sum(counts) == 400


@pytest.mark.slow
def test_a_killed_probe_holder_cannot_keep_the_breaker_half_open(kind, target):
    """SIGKILL a process holding the probe lease: the lease expires and the breaker reopens."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    policy = {
        "failure_threshold": 1,
        "cooldown_ms": 200,
        "cooldown_max_ms": 200,
        "lease_ttl_ms": 500,
        "success_threshold": 1,
    }
    with make_store(kind, target) as store:
        breaker = make_breaker(store, key, Policy(**policy))
        breaker.allow().record("failure")
        assert breaker.state.phase == "open"
        time.sleep(0.25)
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        holder = context.Process(target=hold_probe, args=(kind, target, key, policy, queue))
        holder.start()
        try:
            assert queue.get(timeout=20) == (True, True)
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.join()
            queue.close()
            queue.join_thread()
        assert holder.exitcode == -signal.SIGKILL
        assert breaker.allow().reason == "probe-limit"
        deadline = time.monotonic() + HANG_GUARD  # a hang guard: the lease expires on its own
        with capture_transitions(breaker) as records:
            while not (permit := breaker.allow()).admitted:
                assert time.monotonic() < deadline, "the breaker stayed half-open"
                time.sleep(0.02)
        expired = [r for r in records if r.reason == "lease-expired"]
        assert len(expired) == 1
        assert (expired[0].from_phase, expired[0].to_phase) == ("half_open", "open")
        assert permit.probe
        permit.record("success")
        assert breaker.state.phase == "closed"


@pytest.mark.slow
def test_a_store_outage_denies_calls_and_workers_recover_without_restart(
    pool, kind, tmp_path, request
):
    """Redis (every node of a cluster) or PostgreSQL stopped, or the SQLite file locked past
    the timeout: calls are denied as store-unavailable; once the store is back, the same
    workers admit calls again."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    policy = {"failure_threshold": 1000, "window_ms": 60_000}
    if kind == "sqlite":
        target = str(tmp_path / "shared.db")
        options: dict[str, Any] = {"timeout": 0.1, "backoff": 0.05}
        server = None
    else:
        fixture = {"redis-cluster": "private_cluster"}.get(kind, f"private_{kind}")
        server = request.getfixturevalue(fixture)
        target = server.url
        options = {}
    # A whole cluster takes a few seconds to agree again after its nodes restarted; a
    # server's own restart takes a while on a loaded machine (start() returns once it
    # answers, possibly well after ``up``).
    # Under two suites at once, stopping and restarting six cluster nodes took over 5 s.
    recovery = {"redis-cluster": 15000, "sqlite": 1000}.get(kind, 3000)
    start, down, up, stop = timeline(400, 1000, recovery)
    # Created once the store answers again: the workers go on past ``stop`` until a call
    # started 500 ms after they saw it is admitted (a quiet machine's PostgreSQL once took
    # longer than the timeline to be back).
    back = tmp_path / "back"
    running = pool.starmap_async(
        hammer, [(kind, target, key, policy, (start, 0, 0, stop), 10, options, str(back))] * 8
    )
    sleep_until(down)
    locker = None
    if server is not None:
        server.stop()
    else:
        locker = sqlite3.connect(target, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
    # The outage is certain from here (stopping six cluster nodes takes a while on a
    # loaded machine) until the restart begins; it lasts at least 700 ms.
    stopped = time.monotonic_ns()
    try:
        sleep_until(max(up, stopped + 700 * MS))
        restarted = time.monotonic_ns()
    finally:
        if server is not None:
            server.start()
        if locker is not None:
            locker.execute("ROLLBACK")
            locker.close()
        back.touch()
    logs = running.get(timeout=90)

    grace = 300 * MS
    for log in logs:
        # An admission counts when allow() returned: one that waited out the lock is fine.
        during = [
            r for r in log if stopped + grace < (r[7] if r[0] == "admit" else r[1]) < restarted
        ]
        assert during, "a worker made no attempt while the store was down"
        assert all(r[0] == "reject" and r[2] == "store-unavailable" for r in during)
        assert any(r[0] == "admit" and r[1] > restarted + 500 * MS for r in log)
