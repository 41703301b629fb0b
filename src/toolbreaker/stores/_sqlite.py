"""The SQLite store: breaker state shared by the processes of one host, in one file.

Standard library only. Every transition is one short ``BEGIN IMMEDIATE`` transaction in
WAL mode: read the state, let the core's :func:`~toolbreaker.core.apply` decide, write the
result if it changed, commit. No lock is held while a protected call runs, and readers
never wait for the writer.

Views stay current without a round trip per call: a poller thread per store watches
``PRAGMA data_version`` (a read of shared memory, no I/O while nothing changed) every
``poll_interval`` seconds and reloads the viewed keys when another connection committed.
A process therefore learns that a breaker opened within one poll interval, or at its
next write, whichever comes first. Each poll renews the views' lease (``view_lease``): a
poller that stalls leaves the calls on what it last saw for at most that long.

Time: events carry milliseconds of ``time.monotonic_ns()``, which is one clock for every
process of a Linux host, so the default breaker clock works unchanged. The file must be
on a local disk (SQLite's locking does not hold on network filesystems).

Fail closed: a file locked for longer than ``timeout`` seconds, or unreadable, makes the
store raise :class:`~toolbreaker.errors.StoreUnavailable`, and every view of the store is
emptied so that later calls ask the store, and are denied, until a transaction succeeds.
A row that does not validate loads as the core's recovered-from-corruption open state.

History: an event that writes a new state appends its transition entries to
``toolbreaker_history`` (``seq``, key, entry) in the same transaction, so ``seq`` is the
order in which the file's transactions committed, across every breaker; the newest
``history`` rows of the file are kept (each append deletes the rows older than that, by
primary key). ``toolbreaker export --store sqlite:///PATH`` reads it.

Records (``Records``) are rows of ``toolbreaker_records`` (space,
key, value, version); each write is one ``BEGIN IMMEDIATE`` transaction that checks the
version and writes, committed like breaker state (``synchronous = NORMAL``). The entries
appended to a record (:class:`~toolbreaker.stores._protocol.RecordLog`) are rows of
``toolbreaker_record_log`` (space, key, version, entry). A record's version is its last
entry's, else the one its row holds: an append is one statement, inserting its row at
the next version only if the record is at the one expected (one page written, no
transaction of its own to begin: the statement is its own); a write or a removal of the
record deletes its rows in its transaction.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

from toolbreaker.core._breaker.history import DEFAULT_HISTORY, in_store_order
from toolbreaker.core._breaker.machine import apply as core_apply
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import CORRUPT, BreakerState, Event, Transition
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.stores._records import DURABLE_SPACES
from toolbreaker.stores._shell import SharedStore
from toolbreaker.stores._views import (
    DEFAULT_VIEW_LEASE,
    SharedView,
    decode_state,
    encode_state,
    quiet,
)

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS toolbreaker_breakers ("
    " key TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL, at INTEGER)"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS toolbreaker_journal ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, task TEXT NOT NULL, key TEXT NOT NULL,"
    " entry TEXT NOT NULL, UNIQUE (task, key))",
    "CREATE TABLE IF NOT EXISTS toolbreaker_records ("
    " space TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, version INTEGER NOT NULL,"
    " PRIMARY KEY (space, key)) WITHOUT ROWID",
    # Added in the version that appends to records (RecordLog); likewise added on open.
    "CREATE TABLE IF NOT EXISTS toolbreaker_record_log ("
    " space TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, entry TEXT NOT NULL,"
    " PRIMARY KEY (space, key, version)) WITHOUT ROWID",
    # Added in the version that keeps a history; a file of an earlier one gets it on open.
    "CREATE TABLE IF NOT EXISTS toolbreaker_history ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, entry TEXT NOT NULL,"
    " version INTEGER)",
)
_HISTORY_PUT: Final = "INSERT INTO toolbreaker_history (key, entry, version) VALUES (?, ?, ?)"
#: A record's version now: its last entry's, else its row's (an entry's is always above).
_VERSION_NOW: Final = (
    "coalesce((SELECT max(l.version) FROM toolbreaker_record_log AS l"
    " WHERE l.space = r.space AND l.key = r.key), r.version)"
)
_RECORD_READ: Final = (
    f"SELECT r.value, {_VERSION_NOW} FROM toolbreaker_records AS r"  # noqa: S608 - constants
    " WHERE r.space = ? AND r.key = ?"
)
#: Append an entry at version ``?3 + 1`` if the record is at ``?3``: one statement, one
#: implicit transaction (a writer that came between is SQLite's busy snapshot, retried).
_LOG_APPEND: Final = (
    "INSERT INTO toolbreaker_record_log (space, key, version, entry)"  # noqa: S608 - constants
    " SELECT r.space, r.key, ?3 + 1, ?4 FROM toolbreaker_records AS r"
    f" WHERE r.space = ?1 AND r.key = ?2 AND {_VERSION_NOW} = ?3"
)
_LOG_DROP: Final = "DELETE FROM toolbreaker_record_log WHERE space = ? AND key = ?"
_READ: Final = "SELECT version, state FROM toolbreaker_breakers WHERE key = ?"
_WRITE: Final = (
    "INSERT INTO toolbreaker_breakers (key, version, state, at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET version = excluded.version, state = excluded.state, "
    "at = excluded.at"
)
#: With the instant of the event that wrote the state (see ``in_store_order``); the
#: column is added to a file of an earlier version on open.
_READ_AT: Final = "SELECT version, state, at FROM toolbreaker_breakers WHERE key = ?"
_BUSY_CODES: Final = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_CHUNK: Final = 500  # keys per IN (...) query, well under SQLite's variable limit
_IN_MEMORY: Final = frozenset({"", ":memory:"})
_OURS: Final = (
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
    "('toolbreaker_breakers', 'toolbreaker_journal', 'toolbreaker_records')"
)


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY_CODES
    text = str(exc)
    return "locked" in text or "busy" in text


def _next_version(version: int) -> int:
    # Versions order the news a view receives. Anchoring them to the wall clock keeps them
    # growing even if a row is deleted and written again.
    return max(version + 1, time.time_ns() // 1000)


def _row(row: tuple[Any, Any] | None, policy: Policy) -> tuple[BreakerState, int, bool]:
    """A row as (state, version, valid); a row that does not validate is corrupt."""
    if row is None:
        return BreakerState(), 0, True
    version, raw = row
    if type(version) is not int or version < 0 or not isinstance(raw, (str, bytes)):
        return CORRUPT, 0, False
    state = decode_state(raw, policy)
    return state, version, state is not CORRUPT


class SQLiteStore(SharedStore):
    """Breaker states and the run journal in one SQLite file, shared by processes.

    Args:
        path: the database file; created with its tables on first use.
        create: ``False`` opens only an existing toolbreaker database, at once: a
            missing file, or one without toolbreaker's tables, raises
            :class:`~toolbreaker.errors.StoreUnavailable` and nothing is created (what
            a command that only reads wants: a mistyped path is an error, not an empty
            store).
        timeout: seconds to wait for the write lock before raising ``StoreUnavailable``.
        poll_interval: seconds between two checks for changes made by other processes.
        backoff: after a failure, seconds during which calls fail at once instead of
            waiting ``timeout`` again.
        volatile_journal: allow a run journal in an in-memory database (``":memory:"``
            or ``""``), which a reconnect forgets; otherwise the first journal use
            raises :class:`~toolbreaker.errors.JournalNotDurable`.
        history: transition entries the file keeps, of all its breakers together
            (0 keeps none); written in the transaction that writes the state.
        view_lease: seconds a view is trusted after the poller last read the file: the
            bound on how long a poller that stalls leaves the calls on what it last saw.

    The journal is durable on a file: each journal write commits with
    ``synchronous = FULL`` (fsynced before it returns), so neither a killed process nor
    a power loss takes back a confirmed entry. Breaker transitions commit with
    ``synchronous = NORMAL``, which a killed process cannot undo either.

    Use it as a context manager, or call :meth:`close`, to stop the poller and close the
    connections.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 1.0,
        poll_interval: float = 0.005,
        backoff: float = 0.1,
        volatile_journal: bool = False,
        create: bool = True,
        history: int = DEFAULT_HISTORY,
        view_lease: float = DEFAULT_VIEW_LEASE,
    ) -> None:
        for name, value, least in (
            ("timeout", timeout, 0.0),
            ("poll_interval", poll_interval, 0.0005),
            ("backoff", backoff, 0.0),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise PolicyError(f"{name} must be a number >= {least}, got {value!r}", field=name)
        self.path = str(path)
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self._create = bool(create)
        self._what = f"SQLite store {self.path!r}"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closers: list[weakref.finalize[[], SQLiteStore]] = []
        self._poller_lock = threading.Lock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        super().__init__(
            backoff=backoff,
            volatile_journal=volatile_journal,
            history=history,
            view_lease=view_lease,
        )
        if not self._create:
            try:
                self._conn = self._owned(_open(self.path, create=False))
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"{self._what}: {exc}") from None

    # -- round trips (the shell in _shell.py does the rest) -------------------------------

    def _watch(self, view: SharedView) -> None:
        self._start_poller()

    def _resume_feed(self) -> None:
        self._start_poller()

    def _round_trip(
        self, view: SharedView, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """One short write transaction."""
        key = view.key
        token = self._book.token(view)
        (new, records), version, applied, written, mark = self._locked(
            key, lambda conn: self._transact(conn, view, event, policy)
        )
        quiet(view.tally, applied, records, version, written=written)
        if mark is not None:
            view.tally.wrote(mark, version)
        self._book.learn(view, new, version, token)
        return new, records

    def _read(self, view: SharedView, policy: Policy) -> BreakerState:
        key = view.key
        row = self._locked(key, lambda conn: conn.execute(_READ, (key,)).fetchone(), write=False)
        # Not learned into the view: readers never wait for a writer, so a read proves
        # nothing about whether this process could record an outcome.
        return _row(row, policy)[0]

    def _journal_write(self, task: str, key: str, text: str, *, only_new: bool) -> bool:
        if only_new:
            sql = "INSERT OR IGNORE INTO toolbreaker_journal (task, key, entry) VALUES (?, ?, ?)"
        else:
            sql = (
                "INSERT INTO toolbreaker_journal (task, key, entry) VALUES (?, ?, ?) "
                "ON CONFLICT (task, key) DO UPDATE SET entry = excluded.entry"
            )

        def put(conn: sqlite3.Connection) -> int:
            # A confirmed entry must survive a power loss, not just a killed process.
            conn.execute("PRAGMA synchronous = FULL")
            try:
                return conn.execute(sql, (task, key, text)).rowcount
            finally:
                conn.execute("PRAGMA synchronous = NORMAL")

        return bool(self._locked(task, put))

    def _journal_read(self, task: str, key: str) -> object:
        row = self._locked(
            task,
            lambda conn: conn.execute(
                "SELECT entry FROM toolbreaker_journal WHERE task = ? AND key = ?", (task, key)
            ).fetchone(),
            write=False,
        )
        return None if row is None else row[0]

    def _journal_read_all(self, task: str) -> list[object]:
        rows = self._locked(
            task,
            lambda conn: conn.execute(
                "SELECT entry FROM toolbreaker_journal WHERE task = ? ORDER BY seq", (task,)
            ).fetchall(),
            write=False,
        )
        return [row[0] for row in rows]

    def _record_read(self, space: str, key: str) -> tuple[object, int] | None:
        row = self._locked(
            space, lambda conn: conn.execute(_RECORD_READ, (space, key)).fetchone(), write=False
        )
        return None if row is None else (row[0], row[1])

    def _record_write(self, space: str, key: str, text: str, version: int | None) -> int | None:
        def put(conn: sqlite3.Connection) -> int | None:
            with _immediate(conn):
                row = conn.execute(_RECORD_READ, (space, key)).fetchone()
                current = 0 if row is None else row[1]
                if row is not None and (type(current) is not int or current < 1):
                    raise StoreUnavailable(f"a record in space {space!r} does not validate")
                if version is not None and version != current:
                    return None
                conn.execute(
                    "INSERT INTO toolbreaker_records (space, key, value, version) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (space, key) DO UPDATE SET "
                    "value = excluded.value, version = excluded.version",
                    (space, key, text, current + 1),
                )
                conn.execute(_LOG_DROP, (space, key))
                return current + 1

        if space not in DURABLE_SPACES:
            return self._locked(space, put)

        def durable_put(conn: sqlite3.Connection) -> int | None:
            # Queued work must survive a power loss, as a confirmed journal entry does.
            conn.execute("PRAGMA synchronous = FULL")
            try:
                return put(conn)
            finally:
                conn.execute("PRAGMA synchronous = NORMAL")

        return self._locked(space, durable_put)

    def _record_append(self, space: str, key: str, text: str, version: int) -> int | None:
        def append(conn: sqlite3.Connection) -> int | None:
            if not conn.execute(_LOG_APPEND, (space, key, version, text)).rowcount:
                return None  # absent, or at another version
            return version + 1

        return self._locked(space, append)

    def _record_log_read(
        self, space: str, key: str
    ) -> tuple[object, int, list[tuple[int, object]]] | None:
        def read(conn: sqlite3.Connection) -> tuple[Any, list[Any]]:
            conn.execute("BEGIN")  # one snapshot for the record and its entries
            try:
                row = conn.execute(_RECORD_READ, (space, key)).fetchone()
                log = conn.execute(
                    "SELECT version, entry FROM toolbreaker_record_log "
                    "WHERE space = ? AND key = ? ORDER BY version",
                    (space, key),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            return row, log

        row, log = self._locked(space, read, write=False)
        return None if row is None else (row[0], row[1], [(v, e) for v, e in log])

    def _record_remove(self, space: str, key: str, version: int | None) -> bool:
        sql = "DELETE FROM toolbreaker_records AS r WHERE r.space = ? AND r.key = ?"
        params: tuple[object, ...] = (space, key)
        if version is not None:
            sql, params = f"{sql} AND {_VERSION_NOW} = ?", (space, key, version)

        def remove(conn: sqlite3.Connection) -> bool:
            with _immediate(conn):
                removed = bool(conn.execute(sql, params).rowcount)
                if removed:
                    conn.execute(_LOG_DROP, (space, key))
                return removed

        return self._locked(space, remove)

    def _record_read_all(self, space: str) -> list[tuple[str, object, int]]:
        rows = self._locked(
            space,
            lambda conn: conn.execute(
                f"SELECT r.key, r.value, {_VERSION_NOW} FROM toolbreaker_records AS r "  # noqa: S608 - constants
                "WHERE r.space = ?",
                (space,),
            ).fetchall(),
            write=False,
        )
        return [(key, raw, version) for key, raw, version in rows]

    def _durability(self, task: str) -> tuple[bool, str]:
        if self.path in _IN_MEMORY:
            return False, "the database is in memory, not in a file"
        return True, "a file"

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Append the quiet counts left, stop the poller and close the connections.

        The store cannot be used after.
        """
        if not self._closed:
            self._close_quiet()
        self._closed = True
        self._stop.set()
        with self._poller_lock:
            poller = self._poller
        if poller is not None:
            poller.join()
        with self._lock:
            self._reset()

    def __repr__(self) -> str:
        return f"<SQLiteStore {self.path!r}>"

    # -- internals ----------------------------------------------------------------------

    def _forked(self) -> None:
        # A connection must not cross a fork (SQLite's rule): abandon, never close, the
        # parent's handle; the poller thread did not come along.
        super()._forked()
        self._lock = threading.Lock()
        self._poller_lock = threading.Lock()
        self._conn = None
        for closer in self._closers:
            closer.detach()
        self._closers = []
        self._stop = threading.Event()
        self._refeed = self._poller is not None
        self._poller = None

    def _transact(
        self, conn: sqlite3.Connection, view: SharedView, event: Event, policy: Policy
    ) -> tuple[tuple[BreakerState, tuple[Transition, ...]], int, Event, bool, Any]:
        """Read, apply, write if changed, in one transaction.

        Returns the result, its version, the event as applied, whether a new state was
        written, and the mark of the quiet counts written with it.
        """
        key = view.key
        mark = None
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(_READ_AT, (key,)).fetchone()
            state, version, valid = _row(None if row is None else row[:2], policy)
            if row is not None and type(row[2]) is int:
                event = in_store_order(event, row[2])
            new, records = core_apply(state, event, policy)
            if new != state or not valid:
                version = _next_version(version)
                conn.execute(_WRITE, (key, version, encode_state(new), event.at))
                if new != state:
                    texts, mark = self._quiet_entry(view)
                    self._append_history(conn, key, texts + self._history_texts(records), version)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return (new, records), version, event, new != state, mark

    def _append_history(
        self, conn: sqlite3.Connection, key: str, texts: tuple[str, ...], version: int | None
    ) -> None:
        """Append entries and drop the rows past ``history_retain``."""
        row = None
        for text in texts:
            row = conn.execute(_HISTORY_PUT, (key, text, version)).lastrowid
        if row is not None and row > self.history_retain:
            conn.execute(
                "DELETE FROM toolbreaker_history WHERE seq <= ?", (row - self.history_retain,)
            )

    def _history_append(self, key: str, text: str) -> None:
        def put(conn: sqlite3.Connection) -> None:
            with _immediate(conn):
                self._append_history(conn, key, (text,), None)

        self._locked(key, put)

    def _history_read(self, key: str | None) -> list[tuple[str, object, int | None]]:
        sql = "SELECT seq, entry, version FROM toolbreaker_history ORDER BY seq"
        params: tuple[str, ...] = ()
        if key is not None:
            sql, params = (
                "SELECT seq, entry, version FROM toolbreaker_history WHERE key = ? ORDER BY seq",
                (key,),
            )
        rows = self._locked(
            key or "history", lambda conn: conn.execute(sql, params).fetchall(), write=False
        )
        return [(str(seq), raw, v if type(v) is int else None) for seq, raw, v in rows]

    def _locked(
        self, key: str, work: Callable[[sqlite3.Connection], T], *, write: bool = True
    ) -> T:
        """Run ``work`` on the store's connection, retrying while the file is busy."""
        what = self._what
        if self._closed:
            raise StoreUnavailable(f"{what} is closed", dependency=key)
        deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=self.timeout):
            self._book.fail()
            raise StoreUnavailable(f"{what}: busy in this process", dependency=key)
        try:
            delay = 0.0001
            while True:
                try:
                    return work(self._connection())
                except sqlite3.OperationalError as exc:
                    if not _busy(exc) or time.monotonic() >= deadline:
                        raise
                # Sleep briefly and retry: SQLite's own busy handler sleeps whole
                # milliseconds, far longer than one of our transactions takes.
                time.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311 - jitter only
                delay = min(delay * 2, 0.005)
        except sqlite3.Error as exc:
            self._book.fail()
            if not (isinstance(exc, sqlite3.OperationalError) and _busy(exc)):
                self._reset()  # a broken file or handle: reopen on the next call
            raise StoreUnavailable(
                f"{what} unavailable{'' if write else ' for reading'}: {exc}", dependency=key
            ) from exc
        finally:
            self._lock.release()

    def _reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            conn = self._conn = self._owned(_open(self.path, create=self._create))
        return conn

    def _owned(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        # A store that is dropped, never closed (a registry's for the life of a process),
        # closes its connection when it is collected rather than leave it to sqlite3's
        # ResourceWarning; never at exit (a daemon poller may still run) nor in a fork.
        closer = weakref.finalize(self, conn.close)
        closer.atexit = False
        self._closers = [c for c in self._closers if c.alive] + [closer]
        return conn

    def _start_poller(self) -> None:
        with self._poller_lock:
            if self._poller is None and not self._closed:
                self._poller = threading.Thread(
                    target=self._poll, name=f"toolbreaker-sqlite-poller {self.path}", daemon=True
                )
                self._poller.start()

    def _poll(self) -> None:
        conn: sqlite3.Connection | None = None
        seen: object = None
        try:
            while not self._stop.wait(self.poll_interval):
                try:
                    if conn is None:
                        conn = _open(self.path, create=self._create)
                        seen = None
                    sent = time.monotonic_ns()
                    changed = conn.execute("PRAGMA data_version").fetchone()[0]
                    views = [v for v in self._book.views() if v.wanted and v.policy is not None]
                    stale = [v for v in views if v.fed != self._book.epoch]
                    if changed != seen:
                        self._reload(conn, views)
                    elif stale:
                        self._reload(conn, stale)
                    seen = changed
                    # Nothing changed since ``sent`` that this poll did not bring in: the
                    # views are current as of then (the lease's heartbeat).
                    self._book.lease.renew(sent)
                except sqlite3.Error:
                    self._book.lose_feed()
                    if conn is not None:
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()

    def _reload(self, conn: sqlite3.Connection, views: list[SharedView]) -> None:
        for start in range(0, len(views), _CHUNK):
            chunk = {v.key: v for v in views[start : start + _CHUNK]}
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT key, version, state FROM toolbreaker_breakers WHERE key IN ({marks})",  # noqa: S608 - only placeholders
                tuple(chunk),
            ).fetchall()
            found = {row[0]: (row[1], row[2]) for row in rows}
            for key, view in chunk.items():
                policy = view.policy
                if policy is None:
                    continue
                state, version, _ = _row(found.get(key), policy)
                self._book.sync(view, state, version)


def connect_existing(path: str) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` that never creates it (``mode=rw``).

    Raises:
        sqlite3.OperationalError: no file is there (``the file does not exist``), or it
            cannot be opened.
    """
    if path in _IN_MEMORY:
        raise sqlite3.OperationalError("an in-memory database never exists already")
    uri = f"{Path(path).absolute().as_uri()}?mode=rw"
    try:
        return sqlite3.connect(
            uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False
        )
    except sqlite3.OperationalError:
        if not Path(path).exists():
            raise sqlite3.OperationalError(
                "the file does not exist (nothing was created)"
            ) from None
        raise


def _check_ours(conn: sqlite3.Connection) -> None:
    if not conn.execute(_OURS).fetchone()[0]:
        raise sqlite3.DatabaseError("not a toolbreaker store (it has none of its tables)")


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken at once (``BEGIN IMMEDIATE``), rolled back on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _open(path: str, *, create: bool = True) -> sqlite3.Connection:
    """A connection in WAL mode with the schema in place; busy errors are retried by callers.

    ``create=False``: only a file that exists and holds toolbreaker's tables (a table of
    an older version that is missing is added, as any process of this version would).
    """
    if create:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    else:
        conn = connect_existing(path)
    try:
        if not create:
            _check_ours(conn)
        conn.execute("PRAGMA busy_timeout = 0")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        for statement in _SCHEMA:
            conn.execute(statement)
        for table, column in (("toolbreaker_breakers", "at"), ("toolbreaker_history", "version")):
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in columns:  # a file of an earlier version
                try:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} INTEGER")
                except sqlite3.OperationalError as exc:
                    # Another process was first; a busy file is raised, retried by the
                    # caller (never a connection without the column).
                    if "duplicate column" not in str(exc):
                        raise
    except BaseException:
        conn.close()
        raise
    return conn
