"""The fleet shares a published sheet and one health checker per key, across OS processes.

Workers are spawned processes (no fork), each with its own store object on one real
SQLite file, one real Redis or one real PostgreSQL, as separate workers of an application
would be. Every wait is bounded polling on a queue; nothing asserts on elapsed time.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import queue as queues
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from patient import patient_postgres, patient_redis

from store_kinds import kinds
from toolbreaker import Breaker, Registry, publish_policy
from toolbreaker.core._breaker.state import OPEN
from toolbreaker.runtime._fleet._published import POLICY_SPACE
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import ToolService, request_json

V1 = """\
[defaults]
timeout_ms = 1000
enforce = "cooperative"

[search.read]
failure_threshold = 2
cooldown_ms = 60000
"""
V2 = V1.replace("failure_threshold = 2", "failure_threshold = 5")

HEALTH_ROW = {
    "defaults": {"timeout_ms": 1000, "enforce": "cooperative"},
    "search": {
        "read": {
            "failure_threshold": 1,
            "cooldown_ms": 20,
            "lease_ttl_ms": 2000,  # a probe of a killed checker expires soon
            "health_check": {"interval_ms": 100, "timeout_ms": 1000},
        }
    },
}


def make_store(kind: str, target: str) -> Any:
    if kind == "sqlite":
        return SQLiteStore(target)
    url, prefix = target.split("|")  # a prefix of the test's own on the shared server
    if kind == "postgres":
        return patient_postgres(url, prefix=prefix)
    return patient_redis(url, prefix=prefix)


# -- what runs in the worker processes ---------------------------------------------------


def follow(kind: str, target: str, expect: str, out: Any) -> None:
    """Follow the published sheet; report once it adopts v2 (or refuses a revision)."""
    store = make_store(kind, target)
    registry = Registry.from_store(store, poll=0.1)
    breaker = registry.get("search", "read")
    versions: list[str | None] = []
    breaker.add_listener(lambda record, _: versions.append(record.policy_version))
    out.put(("ready", os.getpid(), breaker.policy.version))
    follower = registry.follower
    assert follower is not None
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if expect == "adopt" and breaker.policy.failure_threshold == 5:
            breaker.call(lambda: 1)  # a transition decided under the new policy
            out.put(("adopted", os.getpid(), breaker.policy.version, versions[-1]))
            break
        if expect == "refuse" and follower.refused:
            breaker.call(lambda: 1)
            out.put(("refused", os.getpid(), breaker.policy.failure_threshold, versions[-1]))
            break
        time.sleep(0.01)
    registry.close()
    store.close()


def check_health(kind: str, target: str, url: str, seconds: float, out: Any) -> None:
    """Run a registry whose row has a health check; report every check this process runs."""
    store = make_store(kind, target)
    registry = Registry.from_dict(HEALTH_ROW, store=store)

    def check() -> bool:
        started = time.monotonic_ns()
        try:
            request_json("GET", f"{url}/health", timeout=1.0)
        finally:
            out.put(("check", os.getpid(), started, time.monotonic_ns()))
        return True

    registry.health_check("search", check, operation="read")
    registry.get("search", "read")  # starts the checker
    out.put(("ready", os.getpid()))
    time.sleep(seconds)
    registry.close()
    store.close()


# -- fixtures ------------------------------------------------------------------------


# Every kind other processes reach, but the Redis Cluster's six servers: the cluster's
# own tests cover it (tests/stores/test_redis_cluster.py).
@pytest.fixture(params=kinds(shared=True, cluster=False))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return str(tmp_path / "fleet.db")
    if kind == "postgres":
        return f"{request.getfixturevalue('postgres_url')}|fleet_{uuid.uuid4().hex[:8]}"
    return f"{request.getfixturevalue('redis_url')}|fleet-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store(kind: str, target: str) -> Iterator[Any]:
    opened = make_store(kind, target)
    try:
        opened.record_get("toolbreaker.probe", "x")
    except NotImplementedError:
        pytest.skip(f"{kind} keeps no records yet")
    yield opened
    opened.close()


class Workers:
    """Spawned worker processes, each reporting on a queue of its own (a process killed
    while writing to a shared queue could leave it locked for the others)."""

    def __init__(self) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[Any] = []
        self.queues: list[Any] = []

    def start(self, target: Any, *args: Any) -> Any:
        out = self.context.Queue()
        process = self.context.Process(target=target, args=(*args, out), daemon=True)
        process.start()
        self.processes.append(process)
        self.queues.append(out)
        return process

    def take(self, kind: str, *, seconds: float = 60.0) -> tuple[Any, ...]:
        """The next message of ``kind`` from any worker (bounded wait; others dropped)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for out in self.queues:
                try:
                    message = out.get(timeout=0.02)
                except queues.Empty:
                    continue
                if message[0] == kind:
                    return tuple(message)
        raise AssertionError(f"no {kind!r} message in time")

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)


@pytest.fixture
def spawn() -> Iterator[Workers]:
    workers = Workers()
    yield workers
    workers.stop()


# -- published sheets ----------------------------------------------------------------


def test_every_process_picks_up_a_new_revision(kind, target, store, spawn, tmp_path):
    """Two processes follow one store; v2 reaches both, and their records name it."""
    v1, v2 = tmp_path / "v1.toml", tmp_path / "v2.toml"
    v1.write_text(V1)
    v2.write_text(V2)
    publish_policy(store, v1)
    for _ in range(2):
        spawn.start(follow, kind, target, "adopt")
    ready = [spawn.take("ready") for _ in range(2)]
    assert len({pid for _, pid, _ in ready}) == 2
    old = {version for _, _, version in ready}
    assert len(old) == 1
    sheet = publish_policy(store, v2, note="more patience")
    assert sheet.revision == 2
    adopted = [spawn.take("adopted") for _ in range(2)]
    new_versions = {version for _, _, version, _ in adopted}
    assert len(new_versions) == 1
    assert new_versions != old
    assert all(stamped == version for _, _, version, stamped in adopted)


def test_an_invalid_published_revision_is_refused_everywhere(kind, target, store, spawn, tmp_path):
    """A revision that does not validate: every process keeps the last valid one."""
    v1 = tmp_path / "v1.toml"
    v1.write_text(V1)
    publish_policy(store, v1)
    for _ in range(2):
        spawn.start(follow, kind, target, "refuse")
    ready = [spawn.take("ready") for _ in range(2)]
    bad = V1.replace("failure_threshold = 2", "failure_threshold = 0")
    store.record_put(
        POLICY_SPACE,
        "default",
        {
            "schema": "toolbreaker.policy/v1",
            "revision": 2,
            "sha256": hashlib.sha256(bad.encode()).hexdigest(),
            "sheet": bad,
        },
    )
    refused = [spawn.take("refused") for _ in range(2)]
    assert [threshold for _, _, threshold, _ in refused] == [2, 2]
    assert {stamped for *_, stamped in refused} == {ready[0][2]}


def test_concurrent_publishers_in_processes_never_lose_one(kind, target, store, tmp_path):
    """Four processes publish at once: four revisions, 1 to 4."""
    path = tmp_path / "v1.toml"
    path.write_text(V1)
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as workers:
        revisions = workers.starmap(_publish, [(kind, target, str(path))] * 4)
    assert sorted(revisions) == [1, 2, 3, 4]


def _publish(kind: str, target: str, path: str) -> int:
    opened = make_store(kind, target)
    try:
        return publish_policy(opened, path).revision
    finally:
        opened.close()


# -- health checks -------------------------------------------------------------------


def _open(store: Any) -> None:
    """Open the shared breaker from this process (no checker here)."""
    row = Registry.from_dict(HEALTH_ROW).boundaries()[("search", "read")]
    breaker = Breaker("search", store=store, boundary=row)
    with pytest.raises(ConnectionError):
        breaker.call(lambda: (_ for _ in ()).throw(ConnectionError("down")))
    assert breaker.state.phase == OPEN


def test_one_checker_per_key_across_processes(kind, target, store, spawn):
    """Two processes share a key: only one runs the checks at any time."""
    with ToolService() as service:
        service.outage("GET /health")  # dead: the breaker stays open, checks go on
        _open(store)
        for _ in range(2):
            spawn.start(check_health, kind, target, service.url, 3.0)
        [spawn.take("ready") for _ in range(2)]
        checks = [spawn.take("check") for _ in range(8)]
        hits = service.hits["GET /health"]
    windows = sorted((start, end, pid) for _, pid, start, end in checks)
    for (_, end, _), (start, _, _) in itertools.pairwise(windows):
        assert end <= start  # never two checks of one key at once
    holders = [pid for *_, pid in windows]
    switches = sum(a != b for a, b in itertools.pairwise(holders))
    assert switches <= 1  # the lease is kept between checks (a stall past it may move it)
    assert hits >= len(checks)


def test_the_other_process_takes_over_when_the_checker_dies(kind, target, store, spawn):
    """Kill the checker's process: the other one checks after the lease runs out."""
    with ToolService() as service:
        service.outage("GET /health")
        _open(store)
        processes = {
            p.pid: p
            for p in (spawn.start(check_health, kind, target, service.url, 60.0) for _ in range(2))
        }
        [spawn.take("ready") for _ in range(2)]
        holder = spawn.take("check")[1]
        os.kill(holder, signal.SIGKILL)
        processes[holder].join(timeout=10)
        while True:
            _, pid, *_ = spawn.take("check")
            if pid != holder:
                break
        assert pid in processes
        assert pid != holder
