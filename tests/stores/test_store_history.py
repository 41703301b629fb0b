"""A breaker's history is written by the store in the step that writes its state.

Several OS processes share one breaker through real SQLite, Redis, Redis Cluster and
PostgreSQL servers; the trace ``toolbreaker export --store URL`` writes from the store's
history replays to exactly the openings the processes' breakers made, in the store's order.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from patient import patient_postgres, patient_redis
from test_multiprocess import WORKERS, make_breaker, make_store, sleep_until, warm

from toolbreaker import Policy
from toolbreaker.cli import main
from toolbreaker.core import Event, read_trace, replay
from toolbreaker.core._breaker.state import opened
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import capture_transitions

#: Every call fails but one in three: the breaker opens, probes, closes and opens again.
FLAPPING = {
    "failure_threshold": 2,
    "cooldown_ms": 5,
    "cooldown_max_ms": 5,
    "success_threshold": 1,
    "lease_ttl_ms": 5_000,
}


def flap(kind: str, target: str, key: str, start: int, stop: int) -> tuple[int, int]:
    """Call the shared breaker until ``stop``; (openings, records) this process saw."""
    options = {"socket_timeout": 5.0} if kind.startswith("redis") else {"timeout": 5.0}
    store = make_store(kind, target, **options)
    try:
        breaker = make_breaker(store, key, Policy(**FLAPPING))
        calls = 0
        with capture_transitions(breaker) as seen:
            sleep_until(start)
            while time.monotonic_ns() < stop:
                permit = breaker.allow()
                if not permit.admitted:
                    time.sleep(0.0005)
                    continue
                calls += 1
                permit.record("success" if calls % 3 == 0 else "failure")
        return sum(opened(r) for r in seen), len(seen)
    finally:
        store.close()


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as workers:
        assert len(set(workers.map(warm, [1.0] * 4, chunksize=1))) == 4
        yield workers
        workers.close()
        workers.join()


def store_url(kind: str, target: str) -> str:
    if kind == "sqlite":
        return f"sqlite://{target}"
    if kind == "redis-cluster":
        return f"{target}?cluster=1"
    return target


def openings(receipt: dict[str, Any], key: str) -> int:
    return sum(
        1
        for t in receipt["dependencies"][key]["transitions"]
        if t["to"] == "open" and t["from"] != "open"
    )


def test_processes_sharing_a_breaker_export_a_trace_of_every_opening(
    pool, kind, target, tmp_path, capsys
):
    """Four processes flap one breaker; the exported trace replays to as many openings as
    their breakers made, and ends in the state the store holds: the history's times never
    go backwards (an event stamped before the one that wrote the state it meets is applied
    at that one's instant), so nothing is shifted on the way out."""
    assert WORKERS >= 4
    key = f"flaky-{uuid.uuid4().hex[:8]}"
    start = time.monotonic_ns() + 500_000_000
    stop = start + 1_500_000_000
    results = pool.starmap(flap, [(kind, target, key, start, stop)] * 4)
    made = sum(opens for opens, _ in results)
    assert made >= 5  # the breaker flapped
    out = tmp_path / "trace.jsonl"
    url = store_url(kind, target)
    assert main(["export", "--store", url, "--dependency", key, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "dropped" not in err  # every outcome's request is there
    assert "reached the store after a later event" not in err
    receipt = replay([event for _, event in read_trace(out)], Policy(**FLAPPING))
    store = make_store(kind, target)
    try:
        final = store.load(key, Policy(**FLAPPING))
        history = store.history(key)
    finally:
        store.close()
    assert openings(receipt, key) == made
    assert receipt["dependencies"][key]["final_state"]["state"] == final.phase
    assert receipt["dependencies"][key]["final_state"]["generation"] == final.generation
    seqs = [e["seq"] for e in history]
    assert len(set(seqs)) == len(seqs)
    assert {e["schema"] for e in history} == {"toolbreaker.stream/v1"}


#: Outages of 150 ms every 300 ms: the breaker opens, rejects, probes and closes again.
STORM = {
    "failure_threshold": 3,
    "cooldown_ms": 40,
    "cooldown_max_ms": 40,
    "success_threshold": 1,
    "lease_ttl_ms": 5_000,
}


class Outage(Exception):
    """The dependency is down."""

    status_code = 503


def storm(kind: str, target: str, key: str, start: int, stop: int) -> tuple[int, int, int]:
    """Call the shared breaker as an application does (no listener: the quiet calls are
    decided from the view, without a write); (admitted, rejected, opened) it saw."""
    options = {"socket_timeout": 5.0} if kind.startswith("redis") else {"timeout": 5.0}
    store = make_store(kind, target, **options)
    try:
        breaker = make_breaker(store, key, Policy(**STORM))

        def call() -> str:
            if (time.monotonic_ns() - start) // 150_000_000 % 2:
                raise Outage
            return "ok"

        sleep_until(start)
        while time.monotonic_ns() < stop:
            with contextlib.suppress(CircuitOpen, Outage):
                breaker.call(call)
            time.sleep(0.0002)  # a few thousand calls a second: a replay the test can wait for
        stats = breaker.stats
        assert (stats.saturated, stats.hung) == (0, 0)  # only the core rejected
        return stats.admitted, stats.rejected, sum(stats.opens.values())
    finally:
        store.close()  # writes the quiet counts left


def test_an_export_replays_to_the_calls_the_processes_made(pool, kind, target, tmp_path, capsys):
    """Issue 34, item 10: four processes share a breaker through outages, as an
    application calls it. Most calls change nothing (successes while closed, rejections
    while open), so the history's transitions alone replayed to a fraction of the remote
    attempts and to no local rejection at all. Each process counts them and writes the
    counts with its writes: the export replays to exactly the remote attempts, local
    rejections and openings the four processes saw, and ends where the store ends."""
    key = f"storm-{uuid.uuid4().hex[:8]}"
    start = time.monotonic_ns() + 500_000_000
    stop = start + 1_500_000_000
    results = pool.starmap(storm, [(kind, target, key, start, stop)] * 4)
    admitted = sum(a for a, _, _ in results)
    rejected = sum(r for _, r, _ in results)
    opened_by_processes = sum(o for _, _, o in results)
    assert rejected > 100  # a storm the breaker stopped
    assert opened_by_processes >= 4
    out = tmp_path / "trace.jsonl"
    url = store_url(kind, target)
    assert main(["export", "--store", url, "--dependency", key, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "dropped" not in err, err
    assert "could not be placed" not in err, err
    receipt = replay([event for _, event in read_trace(out)], Policy(**STORM))
    replayed = receipt["dependencies"][key]
    assert (replayed["remote_attempts"], replayed["local_rejections"]) == (admitted, rejected)
    assert openings(receipt, key) == opened_by_processes
    store = make_store(kind, target)
    try:
        final = store.load(key, Policy(**STORM))
    finally:
        store.close()
    assert replayed["final_state"]["state"] == final.phase
    assert replayed["final_state"]["generation"] == final.generation


POLICY = Policy(failure_threshold=2, cooldown_ms=1_000)


def outage(store: Any, key: str) -> None:
    """Two failures open the breaker; a request while open is rejected."""
    for n in range(2):
        store.apply(key, Event("request", n * 10, key, call=f"c{n}"), POLICY)
        store.apply(key, Event("failure", n * 10 + 1, key, call=f"c{n}", generation=0), POLICY)
    store.apply(key, Event("request", 30, key, call="c2"), POLICY)


def test_an_event_stamped_before_the_state_it_meets_is_applied_at_its_instant(kind, target):
    """Two processes' stores: one writes at 100, the other's failure stamped 50 arrives
    after it; the store applies it at 100, so the history's times never go backwards."""
    key = f"late-{uuid.uuid4().hex[:8]}"
    first, second = make_store(kind, target), make_store(kind, target)
    try:
        first.apply(key, Event("failure", 100, key, call="a", generation=0), POLICY_MANY)
        _, records = second.apply(
            key, Event("failure", 50, key, call="b", generation=0), POLICY_MANY
        )
        assert records[-1].event.at == 100
        assert [e["record"]["event"]["at"] for e in first.history(key)] == [100, 100]
        _, records = second.apply(
            key, Event("failure", 120, key, call="c", generation=0), POLICY_MANY
        )
        assert records[-1].event.at == 120  # a later event keeps its own instant
    finally:
        first.close()
        second.close()


def test_only_writes_of_a_new_state_go_into_the_history(tmp_path):
    """The admitted requests and the rejection changed nothing: the history holds the two
    failures, in order, with increasing seq."""
    with SQLiteStore(tmp_path / "b.db") as store:
        outage(store, "search")
        history = store.history()
    assert [(e["record"]["event"]["type"], e["record"]["to"]) for e in history] == [
        ("failure", "closed"),
        ("failure", "open"),
    ]
    assert int(history[0]["seq"]) < int(history[1]["seq"])


def test_the_history_is_bounded(tmp_path):
    """An SQLite store keeps its newest ``history`` rows."""
    with SQLiteStore(tmp_path / "b.db", history=3) as store:
        for n in range(10):
            store.apply("k", Event("failure", n, "k", call=f"c{n}", generation=0), POLICY_MANY)
        history = store.history()
    assert [e["record"]["event"]["call"] for e in history] == ["c7", "c8", "c9"]


POLICY_MANY = Policy(failure_threshold=1_000)


def test_history_zero_keeps_none(tmp_path, redis_url):
    """history=0 turns the history off; the state is written as ever."""
    with SQLiteStore(tmp_path / "b.db", history=0) as store:
        outage(store, "search")
        assert store.history() == []
        assert store.load("search", POLICY).phase == "open"
    key = f"off-{uuid.uuid4().hex[:8]}"
    with patient_redis(redis_url, history=0) as store:
        outage(store, key)
        assert store.history(key) == []
    with pytest.raises(PolicyError):
        SQLiteStore(tmp_path / "c.db", history=-1)


def test_a_redis_history_is_capped_and_in_the_breakers_slot(redis_url, redis_cluster):
    """A Redis breaker's history is a stream beside its state (one hash tag), capped at
    about ``history`` entries."""
    key = f"capped-{uuid.uuid4().hex[:8]}"
    with patient_redis(redis_url, history=10) as store:
        for n in range(500):
            store.apply(key, Event("failure", n, key, call=f"c{n}", generation=0), POLICY_MANY)
        history = store.history(key)
        assert 10 <= len(history) < 500
        assert history[-1]["record"]["event"]["call"] == "c499"
        names = store._client.keys(f"tb:{{{key}}}:*")
    assert {n.decode() for n in names} == {f"tb:{{{key}}}:state", f"tb:{{{key}}}:history"}
    with patient_redis(redis_cluster.url, cluster=True) as store:
        outage(store, key)  # one script, two keys: a cross-slot pair would be refused
        assert len(store.history(key)) == 2


def test_an_sqlite_store_of_the_previous_version_gains_its_history(tmp_path, capsys):
    """A file made before stores kept a history (no toolbreaker_history table) keeps
    working: opened, even by a reader, it gets the table, and what is applied after is in
    its history."""
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        outage(store, "search")
        state = store.load("search", POLICY)
    with (
        contextlib.closing(sqlite3.connect(path)) as conn,
        conn,
    ):  # the tables as the previous version made them
        conn.execute("DROP TABLE toolbreaker_history")
        conn.execute("ALTER TABLE toolbreaker_breakers RENAME TO new")
        conn.execute(
            "CREATE TABLE toolbreaker_breakers (key TEXT PRIMARY KEY, version INTEGER "
            "NOT NULL, state TEXT NOT NULL) WITHOUT ROWID"
        )
        conn.execute("INSERT INTO toolbreaker_breakers SELECT key, version, state FROM new")
        conn.execute("DROP TABLE new")
    assert state.phase == "open"
    assert main(["export", "--store", f"sqlite://{path}"]) == 0
    assert "exported 0 events" in capsys.readouterr().err
    with SQLiteStore(path) as store:
        assert store.load("search", POLICY).phase == "open"
        store.apply("search", Event("request", 2_000, "search", call="p"), POLICY)
        assert [e["record"]["reason"] for e in store.history()] == ["probe-admitted"]


def test_a_postgres_store_of_the_previous_version_gains_its_history(postgres_url, capsys):
    """A prefix made before stores kept a history (no <prefix>_history, no
    <prefix>_cas_history, no at column) keeps working, and a reader gives it the history."""
    prefix = f"old_{uuid.uuid4().hex[:8]}"
    with patient_postgres(postgres_url, prefix=prefix) as store:
        outage(store, "search")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {prefix}_history")
        conn.execute(
            f"DROP FUNCTION {prefix}_cas_history(text, bigint, text, text[], bigint, bigint)"
        )
        conn.execute(f"ALTER TABLE {prefix}_breakers DROP COLUMN at")
    url = f"{postgres_url}?prefix={prefix}"
    assert main(["export", "--store", url]) == 0
    assert "exported 0 events" in capsys.readouterr().err
    with patient_postgres(postgres_url, prefix=prefix) as store:
        assert store.load("search", POLICY).phase == "open"
        store.apply("search", Event("request", 2_000, "search", call="p"), POLICY)
        assert [e["record"]["reason"] for e in store.history()] == ["probe-admitted"]


def test_a_history_entry_masks_the_key(tmp_path):
    """A key built from a URL with a password is masked in the entry."""
    key = "https://bot:hunter2secret@api.example.com/search"
    with SQLiteStore(tmp_path / "b.db") as store:
        outage(store, key)
        texts = [json.dumps(e) for e in store.history()]
    assert texts
    assert not any("hunter2secret" in t for t in texts)


def test_quiet_counts_no_write_carries_are_appended_within_seconds(tmp_path):
    """A healthy breaker is never written: its process appends its counts on its own, one
    short append every second or so, without closing the store and without a call
    waiting on it."""
    key = "healthy"
    with SQLiteStore(tmp_path / "b.db") as store:
        breaker = make_breaker(store, key, Policy())
        for _ in range(50):
            breaker.call(lambda: "ok")
        deadline = time.monotonic() + 30

        def counted() -> int:
            quiet = [e for e in store.history(key) if e["kind"] == "quiet"]
            return max((n for e in quiet for *_, n in e["calls"]), default=0)

        while counted() < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counted() == 50
        assert [e["kind"] for e in store.history(key)] == ["quiet"] * len(store.history(key))
