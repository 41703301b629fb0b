"""The SQLite store: the conformance suite, plus what only a file can do wrong."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from conformance import (
    HANG_GUARD,
    POLICY,
    RecordsContract,
    StoreContract,
    fork_and_check,
    wait_for,
    without_hanging,
)

from toolbreaker import Breaker, Policy
from toolbreaker.core import Event
from toolbreaker.errors import JournalNotDurable, StoreUnavailable, StoreWriteUnknown
from toolbreaker.stores import SQLiteStore


class TestSQLiteStore(StoreContract, RecordsContract):
    @pytest.fixture
    def path(self, tmp_path):
        return tmp_path / "breakers.db"

    @pytest.fixture
    def store(self, path):
        with SQLiteStore(path) as store:
            yield store

    @pytest.fixture
    def twin(self, path):
        with SQLiteStore(path) as twin:
            yield twin

    def write_raw(self, store, key, raw, policy):
        store.load(key, policy)  # creates the file and its tables
        with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
            conn.execute(
                "INSERT OR REPLACE INTO toolbreaker_breakers (key, version, state) "
                "VALUES (?, ?, ?)",
                (key, 7, raw),
            )
        conn.close()
        # Another process's write reaches this process's views through the change poller:
        # wait (bounded) until it has, as a process would after one poll interval.
        view = store._book.entry(key)
        deadline = time.monotonic() + HANG_GUARD
        while view.wanted and view.version != 7 and time.monotonic() < deadline:
            time.sleep(0.001)


def raw_write(path, sql, *args):
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def test_a_corrupt_version_column_fails_closed(tmp_path):
    """A row whose version is not a whole number loads as corrupt, then is rewritten."""
    path = tmp_path / "b.db"
    with SQLiteStore(path) as store:
        store.load("k", POLICY)
        raw_write(
            path,
            "INSERT INTO toolbreaker_breakers (key, version, state) VALUES (?, ?, ?)",
            "k",
            "seven",
            '{"state": "closed"}',
        )
        assert store.load("k", POLICY).recovered_from_corruption
        state, _ = store.apply("k", Event("request", 5, "k", call="a"), POLICY)
        assert state.open_until == 5 + POLICY.cooldown_ms
        assert store.load("k", POLICY) == state


def test_a_locked_file_makes_the_store_unavailable_and_then_recovers(tmp_path):
    """A write lock held past the timeout raises StoreUnavailable; released, it works."""
    path = tmp_path / "b.db"
    with SQLiteStore(path, timeout=0.1, backoff=0) as store:
        store.load("k", POLICY)
        locker = sqlite3.connect(path, isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreUnavailable):  # it gave up: it did not wait for the lock
                without_hanging(
                    lambda: store.apply("k", Event("request", 0, "k", call="a"), POLICY)
                )
            locker.execute("ROLLBACK")
        finally:
            locker.close()
        _, records = store.apply("k", Event("request", 1, "k", call="b"), POLICY)
        assert records[-1].reason == "call-admitted"


def test_a_busy_file_is_retried_until_the_lock_is_released(tmp_path):
    """Within its timeout a write refused as busy is tried again, not failed at once: a
    lock released after the store was refused twice lets the same write through."""
    path = tmp_path / "b.db"
    with SQLiteStore(path, timeout=HANG_GUARD, backoff=0) as store:
        store.load("k", POLICY)
        attempts: list[str] = []
        twice = threading.Event()

        def traced(sql: str) -> None:
            if sql == "BEGIN IMMEDIATE":
                attempts.append(sql)
                if len(attempts) >= 2:
                    twice.set()

        store._connection().set_trace_callback(traced)
        locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            releaser = threading.Thread(
                target=lambda: (twice.wait(HANG_GUARD), locker.execute("ROLLBACK")), daemon=True
            )
            releaser.start()
            _, records = without_hanging(
                lambda: store.apply("k", Event("request", 0, "k", call="a"), POLICY)
            )
            releaser.join(HANG_GUARD)
        finally:
            locker.close()
        assert twice.is_set()  # refused at least once before the lock was released
        assert records[-1].reason == "call-admitted"


def test_a_write_refused_by_a_lock_certainly_was_not_made(tmp_path):
    """SQLite commits in the calling process: a journal or record write that fails was not
    made, so it is a plain StoreUnavailable, never StoreWriteUnknown."""
    path = tmp_path / "w.db"
    with SQLiteStore(path, timeout=0.05, backoff=0) as store:
        store.journal_get("t", "k")
        store.record_get("s", "k")
        locker = sqlite3.connect(path, isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            for write in (
                lambda: store.journal_put("t", "k", {"status": "pending"}),
                lambda: store.record_put("s", "k", {"n": 1}),
            ):
                with pytest.raises(StoreUnavailable) as caught:
                    write()
                assert not isinstance(caught.value, StoreWriteUnknown)
            locker.execute("ROLLBACK")
        finally:
            locker.close()
        assert store.journal_get("t", "k") is None
        assert store.record_get("s", "k") is None


def test_a_breaker_denies_while_the_file_is_locked_and_recovers_without_restart(tmp_path):
    """Once a write times out, calls are denied as store-unavailable until writes succeed."""
    path = tmp_path / "b.db"
    with SQLiteStore(path, timeout=0.05, backoff=0.02) as store:
        breaker = Breaker(
            "search",
            policy=Policy(failure_threshold=50),
            store=store,
            timeout=1,
            enforce="cooperative",
        )

        def first_success() -> bool:
            # Its 50 ms bound is this test's subject; a loaded machine's first write (the
            # file and its tables made) can outlast it before any lock is taken.
            permit = breaker.allow()
            if permit.admitted:
                permit.record("success")
            return permit.admitted

        wait_for(first_success)
        wait_for(lambda: breaker.allow().admitted and store.view("search").state is not None)
        locker = sqlite3.connect(path, isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            permit = breaker.allow()
            assert permit.admitted  # a quiet closed view needs no write yet
            assert permit.record("failure") is None  # the failure could not be recorded
            for _ in range(5):
                rejection = breaker.allow()
                assert not rejection.admitted
                assert rejection.reason == "store-unavailable"
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        time.sleep(0.03)  # past the backoff
        permit = breaker.allow()
        assert permit.admitted
        permit.record("success")


def test_a_file_that_is_not_a_database_is_unavailable(tmp_path):
    """Garbage in place of the database raises StoreUnavailable, never a default state."""
    path = tmp_path / "b.db"
    path.write_bytes(b"this is not an sqlite database" * 100)
    with SQLiteStore(path) as store, pytest.raises(StoreUnavailable):
        store.apply("k", Event("request", 0, "k", call="a"), POLICY)


def test_a_trusted_view_answers_unchanged_events_without_a_transaction(tmp_path, monkeypatch):
    """Requests admitted from a fed view, and stale outcomes, need no transaction."""
    with SQLiteStore(tmp_path / "b.db") as store:
        view = store.view("k")
        wait_for(lambda: store.load("k", POLICY) is not None and view.state is not None)
        transactions = []
        original = store._transact
        monkeypatch.setattr(store, "_transact", lambda *a: transactions.append(1) or original(*a))
        for n in range(10):
            store.apply("k", Event("request", n, "k", call=f"c{n}"), POLICY)
        assert transactions == []
        store.apply("k", Event("failure", 20, "k", call="c1", generation=0), POLICY)
        assert transactions == [1]


def test_close_stops_the_poller(tmp_path):
    """close() stops the poller thread and the store refuses further work."""
    store = SQLiteStore(tmp_path / "b.db")
    store.view("k")
    assert any(t.name.startswith("toolbreaker-sqlite-poller") for t in threading.enumerate())
    store.close()
    assert not any(t.name.startswith("toolbreaker-sqlite-poller") for t in threading.enumerate())
    with pytest.raises(StoreUnavailable):
        store.apply("k", Event("request", 0, "k", call="a"), POLICY)


@pytest.mark.parametrize("bad", [{"timeout": -1}, {"poll_interval": 0}, {"backoff": "x"}])
def test_options_are_validated(tmp_path, bad):
    """Negative or non-numeric options are refused at construction."""
    from toolbreaker.errors import PolicyError

    with pytest.raises(PolicyError):
        SQLiteStore(tmp_path / "b.db", **bad)


def test_a_forked_child_trusts_no_inherited_view(tmp_path):
    """After fork the child opens its own connection and poller before trusting views."""
    with SQLiteStore(tmp_path / "b.db") as store:
        view = store.view("k")
        wait_for(lambda: store.load("k", POLICY) is not None and view.state is not None)

        def child() -> bool:
            if view.state is not None:
                return False
            deadline = time.monotonic() + HANG_GUARD
            while view.state is None and time.monotonic() < deadline:
                store.apply("k", Event("request", 0, "k", call="x"), POLICY)
                time.sleep(0.01)
            return view.state is not None

        assert fork_and_check(child) == 0
        assert view.state is not None


# -- a journal that does not forget ---------------------------------------------------


@pytest.mark.parametrize("path", [":memory:", ""])
def test_an_in_memory_database_refuses_the_journal(path):
    """A journal in memory would vanish with the connection: refused unless opted out."""
    with SQLiteStore(path) as store:
        assert not store.journal_durable()
        with pytest.raises(JournalNotDurable, match="in memory"):
            store.journal_put("t", "k", {"status": "pending"})
        with pytest.raises(JournalNotDurable):
            store.journal_entries("t")
    with SQLiteStore(path, volatile_journal=True) as store:
        assert store.journal_put("t", "k", {"status": "pending"})


def test_a_file_keeps_the_journal(tmp_path):
    """On a file the journal is durable, and a new handle reads what the old one wrote."""
    with SQLiteStore(tmp_path / "j.db") as store:
        assert store.journal_durable()
        store.journal_put("t", "k", {"status": "confirmed"})
    with SQLiteStore(tmp_path / "j.db") as store:
        assert store.journal_get("t", "k") == {"status": "confirmed"}


_WRITER = """
import random, sqlite3, sys, time
from toolbreaker.stores import SQLiteStore

path, count, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = SQLiteStore(path)
for n in range(count):
    store.journal_put("task", f"k{n}", {"status": "confirmed", "n": n})
    print(f"confirmed k{n}", flush=True)
blob = {"status": "confirmed", "blob": "x" * 3_000_000}
if how == "stalled":
    # Stop inside the journal's write transaction: once this process holds the write
    # lock (another connection cannot begin a write), stall until killed.
    other = sqlite3.connect(path, timeout=0, isolation_level=None)

    def stall():
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            print("torn", flush=True)
            time.sleep(3600)
        other.execute("ROLLBACK")
        return 0

    store._connection().set_progress_handler(stall, 1)
    store.journal_put("task", "torn", blob)
else:
    # Big writes until killed at a moment the parent picks at random.
    print("torn", flush=True)
    for n in range(1000):
        store.journal_put("task", f"big{n}", blob)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stalled", "racing"])
def test_a_process_killed_mid_transaction_keeps_every_confirmed_entry(tmp_path, how):
    """SIGKILL a writer inside a journal write transaction (stalled) or anywhere (racing).

    Every entry confirmed before is there, each one whole; the torn one is absent (or, in
    the racing case, whole if its commit completed); the file is sound and takes writes.
    """
    path = tmp_path / "journal.db"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    with subprocess.Popen(
        [sys.executable, str(script), str(path), "20", how], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.strip() == "torn":
                break
        if how == "stalled":
            probe = sqlite3.connect(path, timeout=0, isolation_level=None)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                probe.execute("BEGIN IMMEDIATE")  # the child is inside its transaction
            probe.close()
        else:
            time.sleep(random.uniform(0.01, 0.2))
        child.kill()
        child.wait()
    assert lines == [f"confirmed k{n}" for n in range(20)] + ["torn"]
    with SQLiteStore(path) as store:
        entries = store.journal_entries("task")
        assert entries[:20] == [{"status": "confirmed", "n": n} for n in range(20)]
        assert all(e == {"status": "confirmed", "blob": "x" * 3_000_000} for e in entries[20:])
        if how == "stalled":
            assert len(entries) == 20
            assert store.journal_get("task", "torn") is None
        assert store.journal_put("task", "after", {"status": "pending"})
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


# -- records ------------------------------------------------------------------------------


def test_a_corrupt_record_fails_closed(tmp_path):
    """A record row that does not validate (bad JSON, bad version): StoreUnavailable."""
    path = tmp_path / "records.db"
    with SQLiteStore(path) as store:
        store.record_put("s", "json", {"ok": 1})
        store.record_put("s", "version", {"ok": 1})
        with contextlib.closing(sqlite3.connect(path)) as raw, raw:
            raw.execute("UPDATE toolbreaker_records SET value = '{nope' WHERE key = 'json'")
            raw.execute("UPDATE toolbreaker_records SET version = 'x' WHERE key = 'version'")
        for key in ("json", "version"):
            with pytest.raises(StoreUnavailable):
                store.record_get("s", key)
        with pytest.raises(StoreUnavailable):
            store.record_list("s")
        with pytest.raises(StoreUnavailable):
            store.record_put("s", "version", {"ok": 2}, version=1)


def test_records_on_a_file_that_is_not_a_database_are_unavailable(tmp_path):
    """Every record operation fails closed with StoreUnavailable."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"not a database" * 100)
    with SQLiteStore(path, backoff=0) as store:
        for call in (
            lambda: store.record_get("s", "k"),
            lambda: store.record_put("s", "k", {}),
            lambda: store.record_delete("s", "k"),
            lambda: store.record_list("s"),
        ):
            with pytest.raises(StoreUnavailable):
                call()


OLD_BREAKERS = (
    "CREATE TABLE toolbreaker_breakers ("
    " key TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL) WITHOUT ROWID"
)


def test_a_file_of_an_earlier_version_gets_its_column_even_while_another_process_writes(
    tmp_path,
):
    """Opening a file whose breaker table predates the ``at`` column adds it. While another
    process holds the write lock the column cannot be added yet: the open is busy (retried
    by the store, as any busy file), never a connection without the column, whose every
    breaker call would fail with "no such column: at" (seen with 8 processes on one file)."""
    from toolbreaker.stores._sqlite import _SCHEMA, _open

    path = str(tmp_path / "old.db")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as old:
        old.execute("PRAGMA journal_mode = WAL")
        old.execute(OLD_BREAKERS)
        for statement in _SCHEMA[1:]:  # the other tables as this version has them
            old.execute(statement)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match=r"locked|busy"):
            _open(path)
        writer.execute("COMMIT")
    with contextlib.closing(_open(path)) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(toolbreaker_breakers)")}
    assert "at" in columns
    with SQLiteStore(path) as store:  # the breaker's row is written with its instant
        failure = Event("failure", 5, "search:read", call="c-1", generation=0)
        state, _ = store.apply("search:read", failure, Policy())
        assert len(state.failures) == 1
