"""A shared, bounded event stream: every transition and run stop, as read-only history.

Usage::

    from toolbreaker.instrumentation.stream import StreamPublisher, open_stream

    publisher = StreamPublisher(open_stream("redis://cache:6379/0"))
    publisher.attach(registry, guard)      # every breaker they hold, now and later

Each process appends what its breakers and run guards did to one stream, addressed by a
URL: ``memory://NAME`` (one process), ``sqlite:///path/events.db`` (processes of a host;
``?retain=N`` rows are kept), ``redis://host:port/db`` (a Redis Stream capped with
``MAXLEN``, ``?maxlen=N&key=K``). ``toolbreaker export`` turns it into a trace that
``toolbreaker replay`` accepts; ``toolbreaker advise`` and the dashboard read it.

The record of a shared breaker's transitions is its store's history, not the stream: a
shared store (SQLite, Redis, PostgreSQL) appends the same ``transition`` entries in the
step that writes the state, in the store's order (:mod:`toolbreaker.core._breaker.history`),
and ``toolbreaker export`` takes a breaker's transitions from there when the URL names its
store. The stream is where run stops, notices, the tool, fallback and failure class, and
the breakers of a ``MemoryStore`` are.

The stream never takes part in a decision: entries are appended after the store has
applied an event, and an append that fails is counted in
:attr:`StreamPublisher.append_errors` (and logged once per failure streak), never raised
into the call. Attaching routes every request of a breaker through the core (see
:meth:`toolbreaker.Breaker.add_listener`), so rejections show up too.

Entries (schema ``toolbreaker.stream/v1``) are JSON objects: ``kind`` ``transition``
with the breaker's ``key``, ``dependency``, ``operation``, ``tool``, ``fallback`` (the
degradation path the model is offered, or null), ``instructions_version`` (a hash of the
unavailable-instruction templates the model reads), ``policy_version`` (and the whole
``policy`` on a publisher's first entry of a breaker and on every change of phase),
``on_defaults`` (``true`` for a breaker the boundary sheet has no row for), ``sheet``
(where the breaker's row came from, :attr:`toolbreaker.Breaker.sheet`, when a sheet
configured it), the receipt ``record`` and, for an outcome other than a success, its
``class`` (``http-503``, ``timeout``, ``unknown-exception:MyAPIError`` for an exception the
classifier did not know...); or ``kind`` ``stop`` with the run's ``task`` and its masked
``packet``;
or ``kind`` ``degrade`` (a degradation choice) or ``limit`` (a ``saturated``, ``hung``
or ``deferred`` answer) with the listener's record as ``notice``.
Both carry ``wall`` (Unix seconds, for ``--since``) and ``source`` (host and process).
Times in records are the breakers' clock: a Redis store's clock is the server's, so
records of many hosts compare; SQLite's is the host's monotonic clock.

Every text a person reads is masked where it was built: the breaker's key, dependency,
operation, tool and fallback where the breaker was (:attr:`toolbreaker.Breaker.shown`,
which every exporter reads), the run's task (the packet's own, masked field), and the
packet and notices (as the operator's reason in an isolation's record is). Two breakers
whose names differ only in a secret share one key in the stream.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import parse_qs, urlencode, urlsplit

from toolbreaker import Breaker, RunGuard, Transition
from toolbreaker._extras import require
from toolbreaker.core import changed_phase
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.instrumentation._kit import (
    DEFAULT_INSTRUCTIONS,
    OUTCOME_TYPES,
    STREAM_SCHEMA,
    Target,
    canonical_json,
    hook_failed,
    redact_text,
    transition_entry,
)
from toolbreaker.runtime import Attachment, StopPacket

__all__ = [
    "StreamPublisher",
    "iter_entries",
    "open_stream",
]

_DEFAULT_KEEP: Final = 100_000


class EventStream(Protocol):
    """What a stream backend does: append an entry, read entries after a cursor.

    Cursors are opaque strings, increasing in append order; ``read(None)`` starts at
    the oldest entry kept.
    """

    url: str

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append one entry; raises :class:`StoreUnavailable` when it cannot."""

    def read(
        self, after: str | None = None, limit: int = 10_000
    ) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` ``(cursor, entry)`` pairs appended after ``after``, oldest first."""

    def close(self) -> None:
        """Release connections."""


def _encode(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry, separators=(",", ":"), default=str)


def _decode(text: str | bytes) -> dict[str, Any] | None:
    # The stream is shared with other processes: an entry that does not decode is skipped.
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _positive(value: int, name: str) -> int:
    if type(value) is not int or value < 1:
        raise PolicyError(f"{name} must be a positive integer, got {value!r}", field=name)
    return value


class MemoryStream:
    """The stream of one process: the newest ``maxlen`` entries in memory.

    ``open_stream("memory://NAME")`` returns the same stream for the same name, so a
    dashboard in the process reads what its breakers append.
    """

    def __init__(self, maxlen: int = _DEFAULT_KEEP, *, url: str = "memory://") -> None:
        self.url = url
        self._entries: collections.deque[tuple[int, str]] = collections.deque(
            maxlen=_positive(maxlen, "maxlen")
        )
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append one entry (the oldest is dropped past ``maxlen``)."""
        text = _encode(entry)
        with self._lock:
            self._entries.append((next(self._ids), text))

    def read(
        self, after: str | None = None, limit: int = 10_000
    ) -> list[tuple[str, dict[str, Any]]]:
        """Entries after the cursor ``after``, oldest first."""
        start = int(after) if after else 0
        with self._lock:
            found = [(i, t) for i, t in self._entries if i > start][:limit]
        return [(str(i), e) for i, t in found if (e := _decode(t)) is not None]

    def close(self) -> None:
        """Nothing to release."""


class SQLiteStream:
    """The stream in an SQLite table, shared by the processes of one host.

    Keeps the newest ``retain`` rows: each append deletes the rows older than that, by
    primary key, in the same transaction. ``create=False`` opens only a file that holds
    a stream already and changes nothing in it (what ``export``, ``advise`` and the
    dashboard do): anything else raises :class:`StoreUnavailable`.
    """

    def __init__(
        self, path: str | Path, *, retain: int = _DEFAULT_KEEP, create: bool = True
    ) -> None:
        self.path = str(path)
        self.url = f"sqlite://{self.path}"
        self.retain = _positive(retain, "retain")
        self._lock = threading.Lock()
        self._db = _existing_stream(self.path) if not create else _new_stream(self.path)
        # A publisher attached for the life of a process is rarely closed: its connection
        # is closed when the stream is collected, not left to sqlite3's ResourceWarning.
        weakref.finalize(self, self._db.close)

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append one entry and drop the rows past ``retain``."""
        text = _encode(entry)
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    row = self._db.execute(
                        "INSERT INTO toolbreaker_events (entry) VALUES (?)", (text,)
                    ).lastrowid
                    if row is not None and row > self.retain:
                        self._db.execute(
                            "DELETE FROM toolbreaker_events WHERE id <= ?", (row - self.retain,)
                        )
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"event stream {self.path}: {exc}") from None

    def read(
        self, after: str | None = None, limit: int = 10_000
    ) -> list[tuple[str, dict[str, Any]]]:
        """Entries after the cursor ``after``, oldest first."""
        try:
            with self._lock:
                rows = self._db.execute(
                    "SELECT id, entry FROM toolbreaker_events WHERE id > ? ORDER BY id LIMIT ?",
                    (int(after) if after else 0, limit),
                ).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"event stream {self.path}: {exc}") from None
        return [(str(i), e) for i, t in rows if (e := _decode(t)) is not None]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _new_stream(path: str) -> sqlite3.Connection:
    """A connection to the stream in the file ``path``, made (file and table) if absent."""
    try:
        db = sqlite3.connect(path, timeout=1.0, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"event stream {path}: {exc}") from None
    try:
        db.execute("PRAGMA journal_mode=WAL")
        # History, not state: a power cut may lose the last entries, never corrupt them.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS toolbreaker_events "
            "(id INTEGER PRIMARY KEY AUTOINCREMENT, entry TEXT NOT NULL)"
        )
    except sqlite3.Error as exc:
        db.close()
        raise StoreUnavailable(f"event stream {path}: {exc}") from None
    return db


def _existing_stream(path: str) -> sqlite3.Connection:
    """A connection to the stream in the file ``path``, which must hold one already."""
    from toolbreaker.instrumentation._kit import connect_existing  # the SQLite store, here only

    try:
        db = connect_existing(path)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"event stream {path}: {exc}") from None
    try:
        db.execute("PRAGMA busy_timeout = 1000")
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'toolbreaker_events'"
        ).fetchone()
    except sqlite3.Error as exc:
        db.close()
        raise StoreUnavailable(f"event stream {path}: {exc}") from None
    if found is None:
        db.close()
        raise StoreUnavailable(
            f"{path} holds no event stream (no toolbreaker_events table): nothing was "
            "ever published to it, or it is another file"
        )
    return db


class RedisStream:
    """The stream as a Redis Stream capped at about ``maxlen`` entries (``XADD MAXLEN ~``).

    Needs the ``redis`` extra. The cap is approximate, as Redis trims whole nodes.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        key: str = "toolbreaker:events",
        maxlen: int = _DEFAULT_KEEP,
        socket_timeout: float = 0.25,
    ) -> None:
        redis = require("redis", "redis", what="a Redis event stream")
        self.url = masked_url(url)
        self.key = key
        self.maxlen = _positive(maxlen, "maxlen")
        self._errors = redis.RedisError
        self._client = redis.Redis.from_url(  # the real URL, password included
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
        )

    def append(self, entry: Mapping[str, Any]) -> None:
        """``XADD key MAXLEN ~ maxlen * e <json>``."""
        try:
            self._client.xadd(self.key, {"e": _encode(entry)}, maxlen=self.maxlen, approximate=True)
        except self._errors as exc:
            raise StoreUnavailable(f"event stream {self.url}: {exc}") from None

    def read(
        self, after: str | None = None, limit: int = 10_000
    ) -> list[tuple[str, dict[str, Any]]]:
        """Entries after the cursor ``after`` (a stream id), oldest first."""
        try:
            rows = self._client.xrange(self.key, f"({after}" if after else "-", "+", count=limit)
        except self._errors as exc:
            raise StoreUnavailable(f"event stream {self.url}: {exc}") from None
        out: list[tuple[str, dict[str, Any]]] = []
        for raw_id, fields in rows:
            entry = _decode(fields.get(b"e", b""))
            if entry is not None:
                out.append((raw_id.decode(), entry))
        return out

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


class PostgresStream:
    """The stream in a PostgreSQL table ``<prefix>_events``, shared by every host of a database.

    Needs the ``postgres`` extra. Appends take a transaction-scoped advisory lock, so ids
    commit in the order they are given and a reader's cursor never skips a row committed
    late; each append deletes the rows past ``retain`` in the same transaction.
    ``create=False`` opens only a database that holds the table already and changes nothing.
    Every round trip is bounded by ``statement_timeout`` (``timeout`` seconds).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "toolbreaker",
        retain: int = _DEFAULT_KEEP,
        create: bool = True,
        timeout: float = 1.0,
    ) -> None:
        psycopg = require("psycopg", "postgres", what="a PostgreSQL event stream")
        if not (prefix.isascii() and prefix.replace("_", "").isalnum()):
            raise PolicyError(
                f"prefix takes ASCII letters, digits and _, got {prefix!r}", field="store"
            )
        self.url = masked_url(url)
        self.table = table = f"{prefix}_events"  # checked above: safe to name in SQL
        self._insert = f"INSERT INTO {table} (entry) VALUES (%s) RETURNING id"  # noqa: S608
        self._trim = f"DELETE FROM {table} WHERE id <= %s"  # noqa: S608
        self._select = f"SELECT id, entry FROM {table} WHERE id > %s ORDER BY id LIMIT %s"  # noqa: S608
        self.retain = _positive(retain, "retain")
        self._errors = psycopg.Error
        self._lock = threading.Lock()
        self._lock_id = int.from_bytes(hashlib.sha256(self.table.encode()).digest()[:4], "big")
        try:
            self._db = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=max(2, int(timeout + 0.999)),
                options=f"-c statement_timeout={int(timeout * 1000)}",
                application_name="toolbreaker-stream",
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(f"event stream {self.url}: {_first_line(exc)}") from None
        try:
            if create:
                self._db.execute(
                    f"CREATE TABLE IF NOT EXISTS {self.table} "
                    "(id BIGSERIAL PRIMARY KEY, entry TEXT NOT NULL)"
                )
                found = True
            else:
                found = self._db.execute(
                    "SELECT to_regclass(%s) IS NOT NULL", (self.table,)
                ).fetchone()[0]
        except psycopg.Error as exc:
            self._db.close()
            raise StoreUnavailable(f"event stream {self.url}: {_first_line(exc)}") from None
        if not found:
            self._db.close()
            raise StoreUnavailable(
                f"{self.url} holds no event stream (no {self.table} table): nothing was "
                "ever published to it, or it is another database"
            )

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append one entry and drop the rows past ``retain``."""
        text = _encode(entry)
        try:
            with self._lock, self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
                (new,) = self._db.execute(self._insert, (text,)).fetchone()
                self._db.execute(self._trim, (new - self.retain,))
        except self._errors as exc:
            raise StoreUnavailable(f"event stream {self.url}: {_first_line(exc)}") from None

    def read(
        self, after: str | None = None, limit: int = 10_000
    ) -> list[tuple[str, dict[str, Any]]]:
        """Entries after the cursor ``after``, oldest first."""
        try:
            with self._lock:
                rows = self._db.execute(
                    self._select, (int(after) if after else 0, limit)
                ).fetchall()
        except self._errors as exc:
            raise StoreUnavailable(f"event stream {self.url}: {_first_line(exc)}") from None
        return [(str(i), e) for i, t in rows if (e := _decode(t)) is not None]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


_memory_streams: dict[str, MemoryStream] = {}
_memory_lock = threading.Lock()


def masked_url(url: str) -> str:
    """``url`` without its password, for messages and pages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def open_stream(url: str, *, create: bool = True) -> EventStream:
    """The stream a URL names: ``memory://NAME``, ``sqlite:///PATH``, ``redis://...``, ``postgresql://...``.

    Options go in the query: ``maxlen`` (memory, redis), ``retain`` (sqlite, postgresql),
    ``key`` (redis), ``prefix`` (postgresql: the table ``<prefix>_events``, beside the
    store's tables of the same prefix). Raises :class:`PolicyError` (field ``store``) for a
    URL it cannot use.

    ``create=False`` is for readers: only a stream that is there and answers, else
    :class:`StoreUnavailable` (an SQLite file that does not exist or holds no stream, a
    Redis that does not answer; an empty Redis stream is there) or :class:`PolicyError`
    (a ``memory://`` stream this process never opened: another process's memory, which
    it cannot see).
    """
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}

    def number(name: str) -> int:
        raw = options.pop(name, str(_DEFAULT_KEEP))
        if not raw.isdigit() or int(raw) < 1:
            raise PolicyError(f"{name} must be a positive integer, got {raw!r}", field="store")
        return int(raw)

    stream: EventStream
    if parts.scheme == "memory":
        name = parts.netloc + parts.path
        maxlen = number("maxlen")
        with _memory_lock:
            found = _memory_streams.get(name)
            if found is None and not create:
                raise PolicyError(
                    f"{masked_url(url)} is not a stream of this process: memory:// is one "
                    "process's memory, and a command run on its own is another process, "
                    "which would see nothing (publish to sqlite:///PATH or redis://HOST:PORT/DB)",
                    field="store",
                )
            if found is None:
                found = _memory_streams[name] = MemoryStream(maxlen, url=f"memory://{name}")
        stream = found
    elif parts.scheme == "sqlite":
        path = url[len("sqlite://") :].split("?", 1)[0]
        if not path:
            raise PolicyError(
                "sqlite:// needs a path, e.g. sqlite:///var/tb/events.db", field="store"
            )
        stream = SQLiteStream(path, retain=number("retain"), create=create)
    elif parts.scheme in ("redis", "rediss", "unix"):
        key = options.pop("key", "toolbreaker:events")
        maxlen = number("maxlen")
        base = url.split("?", 1)[0]
        stream = RedisStream(base, key=key, maxlen=maxlen)
    elif parts.scheme in ("postgres", "postgresql"):
        prefix = options.pop("prefix", "toolbreaker")
        retain = number("retain")
        # libpq's own parameters (sslmode=...) stay in the URL; prefix and retain are ours.
        libpq, options = urlencode(options), {}
        base = url.split("?", 1)[0] + (f"?{libpq}" if libpq else "")
        stream = PostgresStream(base, prefix=prefix, retain=retain, create=create)
    else:
        raise PolicyError(
            f"unknown stream URL {masked_url(url)!r} (use memory://NAME, sqlite:///PATH, "
            "redis://HOST:PORT/DB or postgresql://...)",
            field="store",
        )
    if options:
        raise PolicyError(
            f"unknown option(s) {', '.join(sorted(options))} in {masked_url(url)!r}",
            field="store",
        )
    if not create:
        try:
            stream.read(None, 1)  # a reader is told now when the stream does not answer
        except StoreUnavailable:
            stream.close()
            raise
    return stream


def iter_entries(
    stream: EventStream, *, batch: int = 10_000
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every entry the stream keeps, oldest first, read in batches."""
    cursor: str | None = None
    while True:
        rows = stream.read(cursor, batch)
        yield from rows
        if len(rows) < batch:
            return
        cursor = rows[-1][0]


def instructions_version(overrides: Mapping[str, str]) -> str:
    """A short hash of the instruction templates a breaker's model reads.

    The defaults merged with the breaker's overrides: two breakers share a version when
    the model is told the same words, so compliance can be compared per wording.
    """
    effective = {**DEFAULT_INSTRUCTIONS, **overrides}
    return hashlib.sha256(canonical_json(effective)).hexdigest()[:8]


class StreamPublisher:
    """Appends the transitions of breakers and the stops of run guards to a stream.

    Attributes:
        appended: entries appended.
        append_errors: appends that failed (the stream was down); never an outcome change.
    """

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self.appended = 0
        self.append_errors = 0
        self._source = f"{socket.gethostname()}:{os.getpid()}"
        # Per breaker, dropped with it: a registry's scoped breakers come and go, and a
        # new one must never inherit a gone one's fields by a reused id().
        self._consumed: weakref.WeakKeyDictionary[Breaker, dict[str, int]] = (
            weakref.WeakKeyDictionary()
        )
        self._fields: weakref.WeakKeyDictionary[
            Breaker, tuple[object, dict[str, Any], str | None]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._failing = False
        #: What the publisher is attached to (``attachment.breakers()``).
        self.attachment = Attachment(transition=self, notice=self.notice, stop=self.stop)

    def attach(self, *targets: Target) -> Callable[[], None]:
        """Publish what the targets' breakers do, now and later; returns ``detach``.

        A registry: every breaker it holds and every one it makes later, from its first
        call (scoped ones too); a run guard: its tools' breakers, its stops and its
        notices; a breaker made outside a registry on its own. One breaker reached two
        ways is published once.

        Raises:
            PolicyError: no target, or one that is none of these.
        """
        return self.attachment.attach(*targets)

    def __call__(self, record: Transition, breaker: Breaker) -> None:
        """Append one transition (breaker listener signature)."""
        static = self._static(breaker)
        entry: dict[str, Any] = {**static, **transition_entry(record, time.time())}
        if changed_phase(record):
            entry["policy"] = breaker.policy.to_dict()
        if record.policy_version is not None and record.policy_version != static["policy_version"]:
            # Decided under the policy before a swap the listener runs after: name that one
            # (transition_entry() did), not the one the breaker holds now.
            entry.pop("policy", None)
        if record.event.type in OUTCOME_TYPES and record.event.type != "success":
            failure_class = self._failure_class(breaker)
            if failure_class is not None:
                entry["class"] = failure_class
        self._append(entry)

    def _static(self, breaker: Breaker) -> dict[str, Any]:
        # What never changes for a breaker, computed once (the policy version is a hash).
        found = self._fields.get(breaker)
        if found is None or found[0] is not breaker.policy or found[2] != breaker.sheet:
            shown = breaker.shown  # the names masked where the breaker was built
            fields: dict[str, Any] = {
                "schema": STREAM_SCHEMA,
                "kind": "transition",
                "source": self._source,
                "key": shown.key,
                "dependency": shown.dependency,
                "operation": shown.operation,
                "tool": shown.tool,
                "fallback": shown.fallback,
                "policy_version": breaker.policy.version,
                "instructions_version": instructions_version(breaker.instructions),
            }
            if breaker.boundary.defaults:
                fields["on_defaults"] = True  # no sheet row: the registry's defaults
            if breaker.sheet is not None:
                fields["sheet"] = redact_text(breaker.sheet)
            found = self._fields[breaker] = (breaker.policy, fields, breaker.sheet)
            return {**fields, "policy": breaker.policy.to_dict()}
        return found[1]

    def stop(self, packet: StopPacket, guard: RunGuard) -> None:
        """Append one run stop with its masked packet (stop listener signature)."""
        self._append(
            {
                "schema": STREAM_SCHEMA,
                "kind": "stop",
                "wall": time.time(),
                "source": self._source,
                "task": packet.task,  # the id, masked when the packet was built
                "packet": packet.to_dict(),
            }
        )

    def notice(self, record: Mapping[str, Any]) -> None:
        """Append one notice (degradation and run guard notice listener signature)."""
        kind = "limit" if record.get("schema") == "toolbreaker.limit/v1" else "degrade"
        self._append(
            {
                "schema": STREAM_SCHEMA,
                "kind": kind,
                "wall": time.time(),
                "source": self._source,
                "notice": dict(record),
            }
        )

    def _failure_class(self, breaker: Breaker) -> str | None:
        # The breaker counts a failed outcome by class before the store applies it, so
        # the class this record settled is the one whose count grew since we last looked.
        # Two concurrent failures of one breaker may swap classes; the totals stay right.
        with self._lock:
            seen = self._consumed.setdefault(breaker, {})
            for name, count in sorted(breaker.stats.failures.items()):
                if count > seen.get(name, 0):
                    seen[name] = seen.get(name, 0) + 1
                    return name
        return None

    def _append(self, entry: Mapping[str, Any]) -> None:
        try:
            self.stream.append(entry)
        except Exception as exc:  # noqa: BLE001 - history never changes an outcome
            with self._lock:
                self.append_errors += 1
                first, self._failing = not self._failing, True
            if first:
                hook_failed(
                    f"event stream {self.stream.url}: append failed ({exc}); outcomes stand"
                )
            return
        with self._lock:
            self.appended += 1
            self._failing = False

    def close(self) -> None:
        """Detach from everything attached."""
        self.attachment.close()
