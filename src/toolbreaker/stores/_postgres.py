"""The PostgreSQL store: breaker state and the run journal for stacks that run on Postgres.

(Over 800 lines for a reason: the server side, ``_SCHEMA``, is in this file, and it holds
the compare-and-set twice while processes of the earlier version, which call
``<prefix>_cas()``, may share the database, and the statements of a record's log (a
shared run's appended events); the schema may move to a file of its own, as Redis's
``cas.lua`` did.)

Needs the ``postgres`` extra (``pip install '.[postgres]'`` from a checkout, psycopg 3);
``psycopg`` is imported only when a :class:`PostgresStore` is built.

How a transition happens. The Python core decides; PostgreSQL only guards the write.
Each breaker is one row of ``<prefix>_breakers`` (key, version, canonical JSON state). To
apply an event the store takes the state it last saw (its view), lets
:func:`~toolbreaker.core.apply` compute the result, and calls ``<prefix>_cas()``: one
statement, so one short transaction, that writes the result only if the row's version is
still the one the store computed from; a trigger notifies every change of a row (the
store's, and an operator's hand edit) on ``<prefix>_events``.
On a conflict the function returns the current row and the store computes again
(bounded, then :class:`~toolbreaker.errors.StoreUnavailable`). The row lock lasts that
one statement; nothing is ever locked while a protected call runs. Breaker state commits
with ``synchronous_commit = off`` (it fails closed and relearns; it needs no fsync), the
journal with ``synchronous_commit = on``.

Views. A listener thread per store listens on ``<prefix>_events`` and keeps the
views current, so a quiet closed call and a local rejection while open cost no round
trip, as on Redis. A view is a lease: trusted until ``view_lease`` seconds (1 s) after
the server last answered the listener's check (``SELECT 1``, every ``view_lease / 4``
seconds), so a server that dies or hangs is noticed by every call within that bound.
When the listening connection is lost every view is emptied (calls ask the server again)
until the listener has reconnected and read the viewed rows again.

Time: events carry milliseconds of the local monotonic clock unless the breakers are
given another; processes on several hosts need one clock (see :class:`RedisStore.clock`
for a server clock; this store offers none yet).

Fail closed. A refused connection, a statement slower than ``timeout`` (the server
cancels it: ``statement_timeout``, ``lock_timeout``) or a reply that does not validate
raises ``StoreUnavailable``: the breaker denies the call with the reason
``store-unavailable``. A server that accepts connections but never answers (hung,
stopped, behind a stalled proxy) defeats server-side timeouts and TCP keepalives alike,
so every round trip is also bounded on the client: past ``max(2 * timeout, timeout + 1)``
seconds a watchdog thread shuts the connection's socket down (asyncio calls time out
the same way), the call raises ``StoreUnavailable`` and the connection is replaced; the
listener's queries are bounded the same way, so its views stop being trusted. A
statement cut off this way may still have been applied: like any timeout, the outcome
is unknown, and the call is denied. A stored state that does not validate
loads as the core's recovered-from-corruption open state. A server that comes back is
used again without a restart.

History. The compare-and-set that writes a new state (``<prefix>_cas_history()``) also
appends the event's transition entries to ``<prefix>_history`` (``seq``, key, entry), in
the same statement, after taking the breaker's row lock: one breaker's entries take
increasing ``seq`` in the order of its states. Across breakers ``seq`` is the order in
which the statements drew it, which two concurrent transactions may commit the other
way round. Processes of an earlier version keep calling ``<prefix>_cas()``, which writes
no history.

Records (``Records``) are rows of ``<prefix>_records`` (space,
key, value, version); each operation is one statement (``INSERT ... ON CONFLICT``,
``UPDATE ... WHERE version = n``, ``DELETE ... WHERE version = n``), so one short
transaction, committed like breaker state (``synchronous_commit = off``), except in the
spaces that must survive a crash (:data:`~toolbreaker.stores._records.DURABLE_SPACES`:
queued work), which commit like the journal. The entries appended to a record
(:class:`~toolbreaker.stores._protocol.RecordLog`) are rows of ``<prefix>_record_log``
(space, key, version, entry); an append is one statement that moves the record's version
on and inserts the row, a write or a removal of the record deletes its rows in its own
statement, and a read takes the record and its rows in one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

from toolbreaker._extras import require
from toolbreaker.core._breaker.history import DEFAULT_HISTORY
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.stores._records import DURABLE_SPACES
from toolbreaker.stores._shell import CompareAndSetStore, Reply, Write
from toolbreaker.stores._views import DEFAULT_VIEW_LEASE, SharedView, decode_state

__all__ = ["PostgresStore"]

_PREFIX: Final = re.compile(r"[a-z_][a-z0-9_]{0,39}")
_NOTIFY_LIMIT: Final = 7000  # bytes of state sent inline; PostgreSQL's payload limit is 8000
_WAIT_FIRST: Final = 0.02
_WAIT_MAX: Final = 2.0
_HEALTHY_AFTER: Final = 5.0

# {p} is the validated prefix. One statement per transition: the row lock lasts one call.
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS {p}_breakers (
  key text PRIMARY KEY, version bigint NOT NULL, state text NOT NULL);
CREATE TABLE IF NOT EXISTS {p}_journal (
  seq bigserial PRIMARY KEY, task text NOT NULL, key text NOT NULL, entry text NOT NULL,
  UNIQUE (task, key));
CREATE TABLE IF NOT EXISTS {p}_records (
  space text NOT NULL, key text NOT NULL, value text NOT NULL, version bigint NOT NULL,
  PRIMARY KEY (space, key));
CREATE TABLE IF NOT EXISTS {p}_history (
  seq bigserial PRIMARY KEY, key text NOT NULL, entry text NOT NULL);
-- The entries appended to a record since it was written (RecordLog).
CREATE TABLE IF NOT EXISTS {p}_record_log (
  space text NOT NULL, key text NOT NULL, version bigint NOT NULL, entry text NOT NULL,
  PRIMARY KEY (space, key, version));
-- The version of the state the write that appended an entry made (quiet calls name it).
ALTER TABLE {p}_history ADD COLUMN IF NOT EXISTS version bigint;
-- The instant of the event that wrote a state: a breaker's time never goes backwards.
ALTER TABLE {p}_breakers ADD COLUMN IF NOT EXISTS at bigint;
CREATE OR REPLACE FUNCTION {p}_cas(p_key text, p_expected bigint, p_payload text)
RETURNS TABLE (status int, version bigint, state text) LANGUAGE plpgsql AS $$
DECLARE
  cur_version bigint;
  cur_state text;
  new_version bigint;
BEGIN
  SELECT b.version, b.state INTO cur_version, cur_state
    FROM {p}_breakers b WHERE b.key = p_key FOR UPDATE;
  IF p_expected < 0 OR coalesce(cur_version, 0) <> p_expected THEN
    RETURN QUERY SELECT 0, coalesce(cur_version, 0), cur_state;  -- a read, or a conflict
    RETURN;
  END IF;
  IF p_payload = '' THEN
    RETURN QUERY SELECT 2, p_expected, NULL::text;  -- unchanged, and still current
    RETURN;
  END IF;
  -- Versions only grow, even across a deleted row: anchored to the wall clock.
  new_version := greatest(coalesce(cur_version, 0) + 1,
                          (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
  IF cur_version IS NULL THEN
    INSERT INTO {p}_breakers (key, version, state) VALUES (p_key, new_version, p_payload)
      ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN  -- another writer created the row first
      SELECT b.version, b.state INTO cur_version, cur_state
        FROM {p}_breakers b WHERE b.key = p_key;
      RETURN QUERY SELECT 0, cur_version, cur_state;
      RETURN;
    END IF;
  ELSE
    UPDATE {p}_breakers b SET version = new_version, state = p_payload WHERE b.key = p_key;
  END IF;
  RETURN QUERY SELECT 1, new_version, NULL::text;  -- {p}_notify() tells the listeners
END $$;
-- The compare-and-set with its history: the entries go in with the state they made.
CREATE OR REPLACE FUNCTION {p}_cas_history(
  p_key text, p_expected bigint, p_payload text, p_history text[], p_retain bigint,
  p_at bigint)
RETURNS TABLE (status int, version bigint, state text, at bigint) LANGUAGE plpgsql AS $$
DECLARE
  cur_version bigint;
  cur_state text;
  cur_at bigint;
  new_version bigint;
  last_seq bigint;
  added bigint;
  e_text text;
BEGIN
  SELECT b.version, b.state, b.at INTO cur_version, cur_state, cur_at
    FROM {p}_breakers b WHERE b.key = p_key FOR UPDATE;
  cur_at := coalesce(cur_at, 0);
  IF p_expected < 0 OR coalesce(cur_version, 0) <> p_expected THEN
    RETURN QUERY SELECT 0, coalesce(cur_version, 0), cur_state, cur_at;  -- a read, a conflict
    RETURN;
  END IF;
  IF p_payload = '' THEN
    RETURN QUERY SELECT 2, p_expected, NULL::text, cur_at;  -- unchanged, and still current
    RETURN;
  END IF;
  IF p_at < cur_at THEN  -- a later event wrote this state: compute again at its instant
    RETURN QUERY SELECT 5, p_expected, NULL::text, cur_at;
    RETURN;
  END IF;
  -- Versions only grow, even across a deleted row: anchored to the wall clock.
  new_version := greatest(coalesce(cur_version, 0) + 1,
                          (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
  IF cur_version IS NULL THEN
    INSERT INTO {p}_breakers (key, version, state, at)
      VALUES (p_key, new_version, p_payload, p_at) ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN  -- another writer created the row first
      SELECT b.version, b.state, coalesce(b.at, 0) INTO cur_version, cur_state, cur_at
        FROM {p}_breakers b WHERE b.key = p_key;
      RETURN QUERY SELECT 0, cur_version, cur_state, cur_at;
      RETURN;
    END IF;
  ELSE
    UPDATE {p}_breakers b SET version = new_version, state = p_payload, at = p_at
      WHERE b.key = p_key;
  END IF;
  -- After the row lock: one breaker's entries take their seq in the order of its states.
  added := 0;
  FOREACH e_text IN ARRAY p_history LOOP
    INSERT INTO {p}_history (key, entry, version) VALUES (p_key, e_text, new_version)
      RETURNING seq INTO last_seq;
    added := added + 1;
  END LOOP;
  -- Trim about every 64 entries, not on each: keeps the delete off the hot path.
  IF added > 0 AND p_retain > 0 AND last_seq / 64 <> (last_seq - added) / 64 THEN
    DELETE FROM {p}_history h WHERE h.seq <= last_seq - p_retain;
  END IF;
  RETURN QUERY SELECT 1, new_version, NULL::text, p_at;  -- {p}_notify() tells the listeners
END $$;
-- Every change of a row is notified, an operator's hand edit included.
-- One entry appended without a state change (quiet counts no write carried), trimmed as
-- the compare-and-set trims.
CREATE OR REPLACE FUNCTION {p}_history_append(p_key text, p_entry text, p_retain bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  last_seq bigint;
BEGIN
  INSERT INTO {p}_history (key, entry) VALUES (p_key, p_entry) RETURNING seq INTO last_seq;
  IF p_retain > 0 AND last_seq % 64 = 0 THEN
    DELETE FROM {p}_history h WHERE h.seq <= last_seq - p_retain;
  END IF;
END $$;
CREATE OR REPLACE FUNCTION {p}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('{p}_events', json_build_object('k', OLD.key)::text);
    RETURN OLD;
  END IF;
  PERFORM pg_notify('{p}_events', CASE
    WHEN octet_length(NEW.state) + octet_length(NEW.key) < {limit}
      THEN json_build_object('k', NEW.key, 'v', NEW.version, 's', NEW.state)::text
    ELSE json_build_object('k', NEW.key, 'v', NEW.version)::text END);
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS {p}_events ON {p}_breakers;
CREATE TRIGGER {p}_events AFTER INSERT OR UPDATE OR DELETE ON {p}_breakers
  FOR EACH ROW EXECUTE FUNCTION {p}_notify();
CREATE OR REPLACE FUNCTION {p}_journal_put(
  p_task text, p_key text, p_entry text, p_only_new boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  -- Breaker state commits asynchronously; a confirmed journal entry must be on disk.
  PERFORM set_config('synchronous_commit', 'on', true);
  IF p_only_new THEN
    INSERT INTO {p}_journal (task, key, entry) VALUES (p_task, p_key, p_entry)
      ON CONFLICT (task, key) DO NOTHING;
  ELSE
    INSERT INTO {p}_journal (task, key, entry) VALUES (p_task, p_key, p_entry)
      ON CONFLICT (task, key) DO UPDATE SET entry = excluded.entry;
  END IF;
  RETURN FOUND;
END $$;
"""


def _psycopg() -> Any:
    return require("psycopg", "postgres", what="a PostgreSQL store")


def _reply(row: object) -> Reply:
    """The CAS function's row; anything else is a store fault."""
    if not isinstance(row, tuple) or len(row) != 4:
        raise ValueError(row)
    status, version, state, at = row
    if status not in (0, 1, 2, 5) or type(version) is not int or version < 0:
        raise ValueError(row)
    if (state is not None and not isinstance(state, str)) or type(at) is not int or at < 0:
        raise ValueError(row)
    return Reply(status, version, state, at)


class PostgresStore(CompareAndSetStore):
    """Breaker states and the run journal in PostgreSQL, shared by processes and hosts.

    Args:
        conninfo: a libpq connection string or URL (``postgresql://user@host/db``).
        prefix: the prefix of the tables, functions and channel the store creates
            (lower-case letters, digits, underscores).
        timeout: seconds a statement may take before the store is unavailable (the
            server cancels it; a server that does not answer at all is cut off on the
            client after ``max(2 * timeout, timeout + 1)`` s; connecting waits at least
            2 s, libpq's minimum).
        max_attempts: compare-and-set attempts per event before giving up.
        backoff: after a failure, seconds during which calls fail at once.
        ping_interval: seconds between the listener's checks of its connection (at most
            ``view_lease / 4``).
        view_lease: seconds a view is trusted after the server last answered the
            listener (it queries at least every ``view_lease / 4`` seconds): the bound on
            how long a server that dies or hangs goes unnoticed by the calls, which then
            ask it and are denied.
        volatile_journal: keep the run journal even on a server running with
            ``fsync = off``; otherwise the first journal use raises
            :class:`~toolbreaker.errors.JournalNotDurable` there.
        create: ``False`` uses only a store that is there: where the database holds no
            tables of ``prefix`` (a mistyped prefix or database), every use raises
            :class:`~toolbreaker.errors.StoreUnavailable` and nothing is created (a
            store of an earlier version is given its history table, as any process of
            this version would).
        history: transition entries kept, of all the prefix's breakers together, about
            (trimmed every 64 entries); 0 keeps none. Written by the compare-and-set
            statement that writes the state.

    Use it as a context manager, or call :meth:`close` (and ``await`` :meth:`aclose`
    after asyncio use), to stop the listener and close the connections.
    """

    def __init__(
        self,
        conninfo: str = "postgresql://127.0.0.1:5432/postgres",
        *,
        prefix: str = "toolbreaker",
        timeout: float = 0.25,
        max_attempts: int = 64,
        backoff: float = 0.1,
        ping_interval: float = 1.0,
        volatile_journal: bool = False,
        create: bool = True,
        history: int = DEFAULT_HISTORY,
        view_lease: float = DEFAULT_VIEW_LEASE,
    ) -> None:
        for name, value, least in (
            ("timeout", timeout, 0.001),
            ("max_attempts", max_attempts, 1),
            ("backoff", backoff, 0.0),
            ("ping_interval", ping_interval, 0.01),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise PolicyError(f"{name} must be a number >= {least}, got {value!r}", field=name)
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise PolicyError(
                f"prefix must be lower-case letters, digits and underscores: {prefix!r}",
                field="prefix",
            )
        psycopg = _psycopg()
        self.conninfo = conninfo
        self.prefix = prefix
        self.timeout = float(timeout)
        self.max_attempts = int(max_attempts)
        self.ping_interval = float(ping_interval)
        # The listener's heartbeat renews the views' lease several times per lease.
        self._beat = min(self.ping_interval, float(view_lease) / 4)
        ms = max(1, round(self.timeout * 1000))
        self._options: dict[str, Any] = {
            "connect_timeout": max(2, math.ceil(self.timeout)),
            "options": (
                f"-c statement_timeout={ms} -c lock_timeout={ms} -c synchronous_commit=off"
            ),
            "tcp_user_timeout": max(1000, 4 * ms),
            "keepalives_idle": 5,
            "keepalives_interval": 1,
            "keepalives_count": 3,
        }
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error, OSError)
        # The prefix is validated above; every value travels as a parameter.
        self._cas_sql = (
            f"SELECT status, version, state, at FROM {prefix}_cas_history"  # noqa: S608
            "(%s, %s::bigint, %s, %s::text[], %s::bigint, %s::bigint)"
        )
        self._channel = f"{prefix}_events"
        self._what = f"PostgreSQL store {_safe_conninfo(conninfo)}"
        self._lock = threading.Lock()
        self._conn: Any = None
        self._schema_ready = False
        self._create = bool(create)
        self._aconn: Any = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._alock: asyncio.Lock | None = None
        self._listener: threading.Thread | None = None
        self._listener_lock = threading.Lock()
        self._stop = threading.Event()
        self._abandoned: list[Any] = []  # a forked child's inherited connections: never closed
        # A round trip's client-side bound: the server cancels a slow statement itself
        # after ``timeout``; this only catches a server that cannot answer at all.
        self._bound = max(2 * self.timeout, self.timeout + 1.0)
        self._watchdog = _Watchdog("toolbreaker-postgres-watchdog")
        super().__init__(
            backoff=backoff,
            volatile_journal=volatile_journal,
            history=history,
            view_lease=view_lease,
        )

    # -- round trips (the shell in _shell.py does the rest) -------------------------------

    def _watch(self, view: SharedView) -> None:
        self._start_listener()

    def _resume_feed(self) -> None:
        self._start_listener()

    def _send(self, view: SharedView, write: Write, policy: Policy) -> Reply:
        """One compare-and-set statement."""
        params = self._cas_params(view.key, write)
        return self._validate(self._execute(view.key, self._cas_sql, params), view.key)

    async def _asend(self, view: SharedView, write: Write, policy: Policy) -> Reply:
        """The same on psycopg's asyncio connection, bound to the loop that first uses it."""
        params = self._cas_params(view.key, write)
        return self._validate(await self._aexecute(view.key, params), view.key)

    def _cas_params(self, key: str, write: Write) -> tuple[Any, ...]:
        history = list(write.history)
        return (key, write.expected, write.payload, history, self.history_retain, write.at)

    def _history_read(self, key: str | None) -> list[tuple[str, object, int | None]]:
        table = f"{self.prefix}_history"
        if key is None:
            sql = f"SELECT seq, entry, version FROM {table} ORDER BY seq"  # noqa: S608 - validated prefix
            params: tuple[str, ...] = ()
        else:
            sql, params = (
                f"SELECT seq, entry, version FROM {table} WHERE key = %s ORDER BY seq",  # noqa: S608 - validated prefix
                (key,),
            )
        rows = self._execute(key or "history", sql, params, records=True, every=True)
        return [(str(seq), raw, v if type(v) is int else None) for seq, raw, v in rows]

    def _history_append(self, key: str, text: str) -> None:
        sql = f"SELECT {self.prefix}_history_append(%s, %s, %s::bigint)"
        self._execute(key, sql, (key, text, self.history_retain), records=True, write=True)

    def _pause(self, attempt: int, status: int) -> float:
        """After two conflicts in a row, a little jittered (and growing) wait.

        Writers contending for one row then do not starve each other.
        """
        if attempt < 1:
            return 0.0
        return random.uniform(0.0, min(0.025, 0.0005 * 2 ** min(attempt, 6)))  # noqa: S311 - jitter

    # -- journal ------------------------------------------------------------------------

    def _journal_write(self, task: str, key: str, text: str, *, only_new: bool) -> bool:
        sql = f"SELECT {self.prefix}_journal_put(%s, %s, %s, %s)"
        row = self._execute(task, sql, (task, key, text, only_new), journal=True, write=True)
        return bool(row and row[0])

    def _journal_read(self, task: str, key: str) -> object:
        sql = f"SELECT entry FROM {self.prefix}_journal WHERE task = %s AND key = %s"  # noqa: S608 - validated prefix
        row = self._execute(task, sql, (task, key), journal=True)
        return None if row is None else row[0]

    def _journal_read_all(self, task: str) -> list[object]:
        sql = f"SELECT entry FROM {self.prefix}_journal WHERE task = %s ORDER BY seq"  # noqa: S608 - validated prefix
        return [row[0] for row in self._execute(task, sql, (task,), journal=True, every=True)]

    def _durability(self, task: str) -> tuple[bool, str]:
        row = self._execute(task, "SELECT current_setting('fsync')", (), journal=True)
        if not row or row[0] != "on":
            return False, "the server runs with fsync = off"
        return True, "fsync = on; journal entries commit with synchronous_commit = on"

    # -- records: one statement each, so one short transaction ---------------------------

    def _record_read(self, space: str, key: str) -> tuple[object, int] | None:
        sql = f"SELECT value, version FROM {self.prefix}_records WHERE space = %s AND key = %s"  # noqa: S608 - validated prefix
        row = self._execute(space, sql, (space, key), records=True)
        return None if row is None else (row[0], row[1])

    def _record_write(self, space: str, key: str, text: str, version: int | None) -> int | None:
        table = f"{self.prefix}_records"
        # A durable space commits synchronously, as the journal does: the one statement's
        # own transaction sets it for its commit.
        durable = "(SELECT set_config('synchronous_commit', 'on', true))"
        if space not in DURABLE_SPACES:
            durable = "(SELECT 1)"
        insert = (
            f"INSERT INTO {table} AS r (space, key, value, version) "  # noqa: S608 - validated prefix
            f"SELECT %s, %s, %s, 1 FROM {durable} AS d "
        )
        if version is None:
            sql = (
                insert + "ON CONFLICT (space, key) DO UPDATE "
                "SET value = excluded.value, version = r.version + 1 RETURNING r.version"
            )
            params: tuple[Any, ...] = (space, key, text)
        elif version == 0:
            sql = insert + "ON CONFLICT (space, key) DO NOTHING RETURNING r.version"
            params = (space, key, text)
        else:
            sql = (
                f"UPDATE {table} AS r SET value = %s, version = r.version + 1 FROM {durable} AS d "  # noqa: S608 - validated prefix
                "WHERE r.space = %s AND r.key = %s AND r.version = %s RETURNING r.version"
            )
            params = (text, space, key, version)
        # Writing the record drops the entries appended to it, in the same statement.
        sql = f"WITH w AS ({sql}), gone AS ({self._log_drop}) SELECT version FROM w"  # noqa: S608 - validated prefix
        row = self._execute(space, sql, (*params, space, key), records=True, write=True)
        return None if row is None else row[0]

    @property
    def _log_drop(self) -> str:
        """Delete the entries of (space, key) if the statement's ``w`` changed the record."""
        return (
            f"DELETE FROM {self.prefix}_record_log "  # noqa: S608 - validated prefix
            "WHERE space = %s AND key = %s AND EXISTS (SELECT 1 FROM w)"
        )

    def _record_append(self, space: str, key: str, text: str, version: int) -> int | None:
        p = self.prefix
        sql = (
            f"WITH w AS (UPDATE {p}_records AS r SET version = r.version + 1 "  # noqa: S608 - validated prefix
            "WHERE r.space = %s AND r.key = %s AND r.version = %s RETURNING r.version) "
            f"INSERT INTO {p}_record_log (space, key, version, entry) "
            "SELECT %s, %s, w.version, %s FROM w RETURNING version"
        )
        params = (space, key, version, space, key, text)
        row = self._execute(space, sql, params, records=True, write=True)
        return None if row is None else row[0]

    def _record_log_read(
        self, space: str, key: str
    ) -> tuple[object, int, list[tuple[int, object]]] | None:
        p = self.prefix
        # One statement: the record and its entries as of one snapshot.
        sql = (
            "SELECT r.value, r.version, (SELECT coalesce(json_agg(json_build_array("  # noqa: S608 - validated prefix
            f"l.version, l.entry) ORDER BY l.version), '[]'::json) FROM {p}_record_log AS l "
            "WHERE l.space = r.space AND l.key = r.key) "
            f"FROM {p}_records AS r WHERE r.space = %s AND r.key = %s"
        )
        row = self._execute(space, sql, (space, key), records=True)
        if row is None:
            return None
        log = row[2]
        if not isinstance(log, list) or not all(isinstance(x, list) and len(x) == 2 for x in log):
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        return row[0], row[1], [(x[0], x[1]) for x in log]

    def _record_remove(self, space: str, key: str, version: int | None) -> bool:
        sql = f"DELETE FROM {self.prefix}_records WHERE space = %s AND key = %s"  # noqa: S608 - validated prefix
        params: tuple[Any, ...] = (space, key)
        if version is not None:
            sql, params = sql + " AND version = %s", (space, key, version)
        sql = f"WITH w AS ({sql} RETURNING 1), gone AS ({self._log_drop}) SELECT 1 FROM w"  # noqa: S608 - validated prefix
        return (
            self._execute(space, sql, (*params, space, key), records=True, write=True) is not None
        )

    def _record_read_all(self, space: str) -> list[tuple[str, object, int]]:
        sql = f"SELECT key, value, version FROM {self.prefix}_records WHERE space = %s"  # noqa: S608 - validated prefix
        rows = self._execute(space, sql, (space,), records=True, every=True)
        return [(key, raw, version) for key, raw, version in rows]

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Append the quiet counts left, stop the listener, close the synchronous connection."""
        if not self._closed:
            self._close_quiet()
        self._closed = True
        self._stop.set()
        with self._listener_lock:
            listener = self._listener
        if listener is not None:
            listener.join()
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._watchdog.stop()

    async def aclose(self) -> None:
        """Close the asyncio connection (call :meth:`close` as well for the rest)."""
        conn, self._aconn, self._aloop, self._alock = self._aconn, None, None, None
        if conn is not None:
            await conn.close()

    def __repr__(self) -> str:
        return f"<PostgresStore {_safe_conninfo(self.conninfo)} prefix={self.prefix!r}>"

    # -- internals ----------------------------------------------------------------------

    def _forked(self) -> None:
        # The parent's connections share their sockets with the child: abandon them
        # (closing would end the parent's sessions); the listener thread is gone.
        super()._forked()
        self._abandoned.extend(c for c in (self._conn, self._aconn) if c is not None)
        self._lock = threading.Lock()
        self._listener_lock = threading.Lock()
        self._conn = self._aconn = self._aloop = self._alock = None
        self._stop = threading.Event()
        self._refeed = self._listener is not None
        self._listener = None
        self._watchdog = _Watchdog("toolbreaker-postgres-watchdog")  # its thread is gone

    def _connect(self, role: str = "store") -> Any:
        """A new autocommit connection, with the schema in place."""
        psycopg = _psycopg()
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            application_name=f"toolbreaker-{role}",  # for operators, in pg_stat_activity
            **self._options,
        )
        try:
            if not self._schema_ready:
                with self._watchdog.bound(conn, self._bound):
                    self._install(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _install(self, conn: Any) -> None:
        schema = _SCHEMA.replace("{p}", self.prefix).replace("{limit}", str(_NOTIFY_LIMIT))
        with conn.transaction():
            # The schema must survive a crash, unlike breaker state: commit synchronously.
            conn.execute("SET LOCAL synchronous_commit = on")
            # Concurrent CREATE ... IF NOT EXISTS can collide: one process at a time.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{self.prefix}-schema",))
            exists = conn.execute(
                "SELECT to_regproc(%s) IS NOT NULL AND to_regproc(%s) IS NOT NULL "
                "AND to_regproc(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL, "
                "to_regproc(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL "
                "AND to_regproc(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                (
                    f"{self.prefix}_cas",
                    f"{self.prefix}_journal_put",
                    f"{self.prefix}_notify",
                    f"{self.prefix}_records",
                    f"{self.prefix}_cas_history",
                    f"{self.prefix}_history",
                    f"{self.prefix}_history_append",
                    f"{self.prefix}_record_log",
                ),
            ).fetchone()
            if not (exists and exists[0] and exists[1]):
                # A store of an earlier version gains the history (and the versions of its
                # entries) here, even for a reader, as any process of this version would.
                if not self._create and not (exists and exists[0]):
                    raise StoreUnavailable(
                        f"{self._what} holds no toolbreaker store with prefix "
                        f"{self.prefix!r} (nothing was created)"
                    )
                conn.execute(schema)
        self._schema_ready = True

    def _execute(
        self,
        key: str,
        sql: str,
        params: tuple[Any, ...],
        *,
        journal: bool = False,
        records: bool = False,
        every: bool = False,
        write: bool = False,
    ) -> Any:
        """One statement on the store's connection; a failure is ``StoreUnavailable``.

        ``write``: a journal or record write, whose failure after the statement was sent
        and before the server answered is ``StoreWriteUnknown`` (it may have committed).
        """
        if self._closed:
            raise StoreUnavailable(f"{self._what} is closed", dependency=key)
        with self._lock:
            bound: _Bound | None = None
            sent = False
            try:
                if self._conn is None:
                    self._conn = self._connect()
                with self._watchdog.bound(self._conn, self._bound) as bound:
                    sent = True
                    cursor = self._conn.execute(sql, params)
                    return cursor.fetchall() if every else cursor.fetchone()
            except self._errors as error:
                self._drop_connection()
                exc: BaseException = error
                if bound is not None and bound.fired:
                    exc = _psycopg().OperationalError(
                        f"the server did not answer within {self._bound:g} s"
                    )
                errors = _psycopg().errors
                if isinstance(exc, (errors.UndefinedTable, errors.UndefinedFunction)):
                    self._schema_ready = False  # dropped, or a server restored without it
                # A statement the server answered with an error (a SQLSTATE) was rolled
                # back; one that got no answer (a lost connection, the watchdog) may have
                # committed: autocommit commits each statement as it ends.
                maybe = write and sent and getattr(exc, "sqlstate", None) is None
                if journal:
                    raise self._journal_fault(key, exc, maybe_written=maybe) from error
                if records:  # records take no part in breaker decisions: views stay
                    raise self._write_fault(key, exc, maybe_written=maybe) from error
                self._book.fail()
                raise StoreUnavailable(
                    f"{self._what} unavailable: {exc}", dependency=key
                ) from error

    async def _aexecute(self, key: str, params: tuple[Any, ...]) -> Any:
        """The CAS statement on the asyncio connection, with a client-side timeout too."""
        loop = asyncio.get_running_loop()
        if self._aloop is None:
            self._aloop, self._alock = loop, asyncio.Lock()
        elif loop is not self._aloop:
            raise RuntimeError(
                "this PostgresStore's asyncio connection belongs to another event loop; "
                "use one store per event loop"
            )
        assert self._alock is not None
        async with self._alock:
            try:
                if self._aconn is None:
                    self._aconn = await asyncio.wait_for(self._aconnect(), self.timeout + 2)
                cursor = await asyncio.wait_for(
                    self._aconn.execute(self._cas_sql, params), self.timeout * 2
                )
                return await cursor.fetchone()
            except (*self._errors, asyncio.TimeoutError) as exc:  # type: ignore[misc]
                conn, self._aconn = self._aconn, None
                if conn is not None:
                    # A timed-out connection is in an unknown state: never reuse it.
                    await asyncio.shield(_aclose_quietly(conn, self._errors))
                self._book.fail()
                raise StoreUnavailable(
                    f"{self._what} unavailable: {exc or 'timed out'}", dependency=key
                ) from exc

    async def _aconnect(self) -> Any:
        if not self._schema_ready:
            await asyncio.to_thread(lambda: self._connect().close())
        return await _psycopg().AsyncConnection.connect(
            self.conninfo, autocommit=True, **self._options
        )

    def _validate(self, row: object, key: str) -> Reply:
        try:
            return _reply(row)
        except (ValueError, TypeError) as exc:
            self._book.fail()
            raise StoreUnavailable(
                f"{self._what} answered something that does not validate: {row!r:.200}",
                dependency=key,
            ) from exc

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn, self._errors)

    # -- the listener -------------------------------------------------------------------

    def _start_listener(self) -> None:
        with self._listener_lock:
            if self._listener is None and not self._closed:
                self._listener = threading.Thread(
                    target=self._listen, name="toolbreaker-postgres-listener", daemon=True
                )
                self._listener.start()

    def _listen(self) -> None:
        conn: Any = None
        wait = _WAIT_FIRST
        healthy_since = 0.0
        checked = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    if conn is None:
                        conn = self._connect("listener")
                        checked = time.monotonic()
                        sent = time.monotonic_ns()
                        with self._watchdog.bound(conn, self._bound):
                            conn.execute(f"LISTEN {self._channel}")
                        self._book.lease.renew(sent)
                    # A hung server must not keep the views trusted: every query is bounded.
                    with self._watchdog.bound(conn, self._bound):
                        checked = self._listen_once(conn, checked)
                    healthy_since = healthy_since or time.monotonic()
                except self._errors:
                    # Every lost connection backs off with jitter, reset only after the
                    # listener has worked for a while: a refusing server is not hammered.
                    if healthy_since and time.monotonic() - healthy_since >= _HEALTHY_AFTER:
                        wait = _WAIT_FIRST
                    healthy_since = 0.0
                    self._book.lose_feed()
                    if conn is not None:
                        _close_quietly(conn, self._errors)
                        conn = None
                    self._stop.wait(random.uniform(wait / 2, wait))  # noqa: S311 - jitter only
                    wait = min(wait * 2, _WAIT_MAX)
        finally:
            if conn is not None:
                _close_quietly(conn, self._errors)

    def _listen_once(self, conn: Any, checked: float) -> float:
        """Read stale views, handle what arrives within ~50 ms, check the server when due.

        The check (``SELECT 1``, every ``min(ping_interval, view_lease / 4)`` seconds) is
        the views' heartbeat: its answer renews their lease from the instant it was sent,
        after every notification the server had sent by then. Returns when the last
        check was sent.
        """
        epoch = self._book.epoch
        stale = [
            v for v in self._book.views() if v.wanted and v.policy is not None and v.fed != epoch
        ]
        if stale:
            self._reload(conn, stale)
        # Gather first: the connection runs no query while notifies() waits.
        notes = [note.payload for note in conn.notifies(timeout=0.05)]
        if notes:
            unsent = [v for v in map(self._notified, notes) if v is not None]
            if unsent:
                self._reload(conn, unsent)
        if time.monotonic() - checked >= self._beat:
            checked = time.monotonic()
            sent = time.monotonic_ns()
            conn.execute("SELECT 1")
            # Handle what arrived before the answer first: the views are current as of then.
            notes = [note.payload for note in conn.notifies(timeout=0)]
            unsent = [v for v in map(self._notified, notes) if v is not None]
            if unsent:
                self._reload(conn, unsent)
            self._book.lease.renew(sent)
        return checked

    def _reload(self, conn: Any, views: list[SharedView]) -> None:
        """Read the rows of ``views`` after LISTEN: anything newer will be notified."""
        found = {
            key: (version, state)
            for key, version, state in conn.execute(
                f"SELECT key, version, state FROM {self.prefix}_breakers WHERE key = ANY(%s)",  # noqa: S608 - prefix is validated
                ([v.key for v in views],),
            ).fetchall()
        }
        for view in views:
            policy = view.policy
            if policy is None:
                continue
            version, raw = found.get(view.key, (0, None))
            self._book.sync(view, decode_state(raw, policy), version)

    def _notified(self, payload: str) -> SharedView | None:
        """Feed one notification to its view; the view to read when the state was not sent."""
        try:
            note = json.loads(payload)
            key, version = note["k"], note.get("v")
        except (ValueError, KeyError, TypeError, AttributeError):
            # A message we cannot read: we may be missing changes, so start over.
            raise _psycopg().OperationalError(f"unreadable notification {payload!r:.100}") from None
        view = self._book.find(key) if isinstance(key, str) else None
        if view is None or view.policy is None:
            return None
        if type(version) is int and isinstance(note.get("s"), str):
            self._book.feed(view, decode_state(note["s"], view.policy), version)
            return None
        return view  # too big to send inline, or deleted: read it


class _Bound:
    """One bounded stretch of blocking I/O; ``fired`` once the watchdog cut it short."""

    __slots__ = ("conn", "deadline", "fired")

    def __init__(self, conn: Any, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.fired = False


class _Watchdog:
    """Bounds blocking round trips on synchronous psycopg connections.

    A server that accepts connections and acknowledges data but never answers (hung,
    SIGSTOPped, behind a stalled proxy) defeats every server-side timeout, and TCP
    keepalives and ``tcp_user_timeout`` too: the peer's kernel acknowledges everything.
    Past its deadline the watchdog shuts the connection's socket down, so the waiting
    call fails at once (psycopg raises), and the caller drops the connection. One thread
    per store, started on first use, asleep while nothing is armed.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._armed: set[_Bound] = set()
        self._thread: threading.Thread | None = None
        self._stopped = False

    @contextlib.contextmanager
    def bound(self, conn: Any, seconds: float) -> Iterator[_Bound]:
        """Cut ``conn`` off if the block takes longer than ``seconds``."""
        entry = _Bound(conn, time.monotonic() + seconds)
        with self._cond:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._armed.add(entry)
            self._cond.notify()
        try:
            yield entry
        finally:
            with self._cond:  # once this returns, the watchdog no longer touches conn
                self._armed.discard(entry)

    def stop(self) -> None:
        """Stop the thread (nothing is cut off any more)."""
        with self._cond:
            self._stopped = True
            thread, self._thread = self._thread, None
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                for entry in [e for e in self._armed if e.deadline <= now]:
                    self._armed.discard(entry)
                    entry.fired = True
                    _cut(entry.conn)
                soonest = min((e.deadline for e in self._armed), default=None)
                self._cond.wait(None if soonest is None else max(0.0, soonest - now))


def _cut(conn: Any) -> None:
    """Shut the connection's socket down (never close it: the fd stays psycopg's)."""
    # Already closed, or no socket: nothing to cut.
    with contextlib.suppress(Exception), socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def _close_quietly(conn: Any, errors: tuple[type[BaseException], ...]) -> None:
    with contextlib.suppress(*errors):
        conn.close()


async def _aclose_quietly(conn: Any, errors: tuple[type[BaseException], ...]) -> None:
    with contextlib.suppress(*errors):
        await conn.close()


def _safe_conninfo(conninfo: str) -> str:
    """The connection string without its password, for messages."""
    scheme, sep, rest = conninfo.partition("://")
    if sep:
        if "@" in rest:
            rest = "***@" + rest.rsplit("@", 1)[1]
        return re.sub(r"password=[^&]*", "password=***", f"{scheme}{sep}{rest}")
    return re.sub(r"password\s*=\s*('[^']*'|\S+)", "password=***", conninfo)
