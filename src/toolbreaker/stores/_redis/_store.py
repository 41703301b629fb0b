"""The Redis store itself: round trips, the journal, records and the server's clock.

The theory of operation is in the package's docstring (:mod:`toolbreaker.stores._redis`);
the scripts are in :mod:`~toolbreaker.stores._redis._script`, the feeds that keep the
views current in :mod:`~toolbreaker.stores._redis._feeds`, and the compare-and-set loop in
the shared shell (:class:`~toolbreaker.stores._shell.CompareAndSetStore`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import random
import threading
import time
from typing import Any, Final

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.predicates import held_by_operator
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.stores._records import corrupt_record
from toolbreaker.stores._redis._feeds import Feed, FeedSettings, ShardedFeed
from toolbreaker.stores._redis._script import (
    HISTORY_APPEND,
    JOURNAL_ALL,
    JOURNAL_PUT,
    MY_TURN,
    RECORD_APPEND,
    RECORD_DELETE,
    RECORD_LOG_READ,
    RECORD_PUT,
    REFRESH_TTL,
    THEIR_TURN,
    Args,
    Batch,
    cas_source,
    parse_reply,
    redis_module,
)
from toolbreaker.stores._shell import CompareAndSetStore, Reply, Write
from toolbreaker.stores._views import DEFAULT_VIEW_LEASE, SharedView

__all__ = ["RedisStore"]

_RESERVE_AFTER: Final = 2  # conflicts in a row before a writer asks for the turn


class _ServerClock:
    """Milliseconds on the Redis server's clock, read through the local monotonic clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Until the server has answered, the local wall clock is the best guess of its clock.
        self._offset = time.time_ns() // 1_000_000 - time.monotonic_ns() // 1_000_000
        self._synced = False
        self._last = 0

    def __call__(self) -> int:
        # No lock on this hot path: the local clock is monotonic and the offset moves by
        # at most a millisecond per sample; _last absorbs a step back.
        now: int = time.monotonic_ns() // 1_000_000 + self._offset
        if now <= self._last:
            return self._last
        self._last = now
        return now

    def sample(self, server_ms: int, local_ns: int) -> None:
        """Learn from one reply: the server said ``server_ms`` about ``local_ns``."""
        estimate = server_ms - local_ns // 1_000_000
        with self._lock:
            if not self._synced:
                self._offset, self._synced = estimate, True
            elif abs(estimate - self._offset) > 1:
                # Slew by a millisecond at a time: follows drift, ignores round-trip jitter.
                self._offset += 1 if estimate > self._offset else -1


class RedisStore(CompareAndSetStore):
    """Breaker states and the run journal in Redis, shared by processes and hosts.

    Args:
        url: a redis-py URL (``redis://``, ``rediss://``, ``unix://``), with credentials.
        prefix: the first part of every key and channel name.
        socket_timeout: seconds to connect, or to wait for a reply, before the store is
            unavailable.
        idle_ttl: seconds after which a breaker no process uses is forgotten (its
            history with it).
        journal_ttl: seconds a task's journal is kept after its last entry; 0 keeps it.
        max_attempts: compare-and-set attempts per event before giving up.
        backoff: after a failure, seconds during which calls fail at once.
        ping_interval: seconds between the feed's pings of its subscription (at most
            ``view_lease / 4``); a ping without an answer within ``4 * socket_timeout``
            (at least a second) means the subscription is lost.
        cluster: ``url`` names one node of a Redis Cluster: use redis-py's cluster
            client. Every key of a breaker (and of a task's journal) shares one hash tag,
            so every script touches one slot; the feed subscribes to each breaker's
            sharded channel (``SSUBSCRIBE``) on its slot's master, so losing a master
            untrusts exactly the views of its slots until its replica is promoted.
        volatile_journal: keep the run journal even on a server that may forget it.
            By default the first journal use checks that Redis appends every write to
            its append-only file and fsyncs it before answering (``appendonly yes``,
            ``appendfsync always``) and raises
            :class:`~toolbreaker.errors.JournalNotDurable` otherwise, because a
            restarted server that forgot confirmed writes makes a resumed run repeat
            them. Breaker state needs no durability (it fails closed and relearns).
        history: transition entries each breaker keeps, about (``XADD MAXLEN ~``; 0
            keeps none): a stream per breaker, ``<prefix>:{<key>}:history``, in the
            breaker's slot, appended by the script that writes the state.
        view_lease: seconds a view is trusted after the server last answered the feed's
            ping: the bound on how long a server that dies, hangs or is cut off goes
            unnoticed by the calls, which then ask it and are denied.

    Use it as a context manager, or call :meth:`close` (and ``await`` :meth:`aclose`
    after asyncio use), to stop the feed and close the connections.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "tb",
        socket_timeout: float = 0.25,
        idle_ttl: float = 86_400.0,
        journal_ttl: float = 30 * 86_400.0,
        max_attempts: int = 64,
        backoff: float = 0.1,
        ping_interval: float = 1.0,
        cluster: bool = False,
        volatile_journal: bool = False,
        history: int = 1_000,
        view_lease: float = DEFAULT_VIEW_LEASE,
    ) -> None:
        for name, value, least in (
            ("socket_timeout", socket_timeout, 0.001),
            ("idle_ttl", idle_ttl, 1.0),
            ("journal_ttl", journal_ttl, 0.0),
            ("max_attempts", max_attempts, 1),
            ("backoff", backoff, 0.0),
            ("ping_interval", ping_interval, 0.01),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise PolicyError(f"{name} must be a number >= {least}, got {value!r}", field=name)
        if not prefix or "{" in prefix or "}" in prefix:
            raise PolicyError(
                f"prefix must be non-empty, without braces: {prefix!r}", field="prefix"
            )
        redis = redis_module()
        self.url = url
        self.prefix = prefix
        self.socket_timeout = float(socket_timeout)
        self.idle_ttl_ms = round(idle_ttl * 1000)
        self.journal_ttl_ms = round(journal_ttl * 1000)
        self.max_attempts = int(max_attempts)
        self._options: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            **_driver_options(redis),
        }
        self.cluster = bool(cluster)
        # No silent retries: a resent script could apply one event twice. A dead pooled
        # connection is replaced by redis-py when it is checked out; a cluster client
        # relearns the slots after a failure and follows MOVED redirections.
        client_class = redis.RedisCluster if self.cluster else redis.Redis
        self._client: Any = client_class.from_url(
            url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0), **self._options
        )
        # Any failure of a client call is the store being unavailable (a call is denied, a
        # feed reconnects), never a crash: redis-py raises more than RedisError. Its
        # cluster client raises RedisClusterException when no node answers, and lets the
        # internal errors of a topology change through (an IndexError, with the connection
        # attached for its metrics).
        self._errors: tuple[type[BaseException], ...] = (Exception,)
        self._source = cas_source()
        self._script: Any = self._client.register_script(self._source)
        self._refresh: Any = self._client.register_script(REFRESH_TTL)
        self._append: Any = self._client.register_script(HISTORY_APPEND)
        self._journal_put: Any = self._client.register_script(JOURNAL_PUT)
        self._journal_all: Any = self._client.register_script(JOURNAL_ALL)
        self._record_put: Any = self._client.register_script(RECORD_PUT)
        self._record_delete: Any = self._client.register_script(RECORD_DELETE)
        self._record_add: Any = self._client.register_script(RECORD_APPEND)
        self._record_log: Any = self._client.register_script(RECORD_LOG_READ)
        self._aclient: Any = None
        self._ascript: Any = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._batch: Batch | None = None
        self._clock = _ServerClock()
        self._ping_interval = float(ping_interval)
        self._writer_token = os.urandom(4).hex()
        self._feed: Feed | ShardedFeed | None = None
        self._feed_lock = threading.Lock()
        self._what = f"Redis store {_safe_url(url)}"
        super().__init__(
            backoff=backoff,
            volatile_journal=volatile_journal,
            history=history,
            view_lease=view_lease,
        )

    # -- round trips (the shell in _shell.py does the rest) -------------------------------

    def _watch(self, view: SharedView) -> None:
        self._subscription().add(self._channel(view.key).encode("utf-8"), view)

    def _send(self, view: SharedView, write: Write, policy: Policy) -> Reply:
        """One run of the compare-and-set script."""
        args = self._args(view.key, write, policy)
        started = time.monotonic_ns()
        try:
            raw = self._script(keys=args.keys(), args=args.argv())
        except self._errors as exc:
            raise self._fault(view.key, exc) from exc
        return self._reply(raw, started, view.key)

    async def _asend(self, view: SharedView, write: Write, policy: Policy) -> Reply:
        """The same on the asyncio client, batched with the loop's other round trips.

        The asyncio client is bound to the event loop that first uses it.
        """
        script = self._async_script()
        args = self._args(view.key, write, policy)
        started = time.monotonic_ns()
        try:
            if self._batch is not None:
                raw = await self._batch.run(args)
            else:
                raw = await script(keys=args.keys(), args=args.argv())
        except self._errors as exc:
            raise self._fault(view.key, exc) from exc
        return self._reply(raw, started, view.key)

    def clock(self) -> int:
        """Milliseconds on the Redis server's clock, never going backwards.

        Pass it as the ``clock`` of every breaker that uses this store, on every host.
        Until the first round trip it follows the local wall clock.
        """
        return self._clock()

    # -- history ------------------------------------------------------------------------

    def _history_append(self, key: str, text: str) -> None:
        keys = [self._history_key(key), self._state_key(key)]
        try:
            self._append(keys=keys, args=[self.history_retain, text, self.idle_ttl_ms])
        except self._errors as exc:
            raise self._record_fault(key, exc) from exc

    def _history_read(self, key: str | None) -> list[tuple[str, object, int | None]]:
        """Each breaker's stream, merged by stream id (the servers' clocks; see the docs)."""
        head, tail = f"{self.prefix}:{{", "}:history"
        try:
            if key is not None:
                names = [self._history_key(key).encode("utf-8")]
            else:
                pattern = _glob_escape(self.prefix) + ":{*}:history"
                names = sorted(set(self._client.scan_iter(match=pattern, count=1000)))
            rows: list[tuple[tuple[int, int], str, object, int | None]] = []
            for name in names:
                text = name.decode("utf-8", "surrogateescape")
                if not (text.startswith(head) and text.endswith(tail)):
                    continue
                for raw_id, fields in self._client.xrange(name, "-", "+"):
                    stream_id = raw_id.decode()
                    ms, _, seq = stream_id.partition("-")
                    made = fields.get(b"v")
                    version = int(made) if isinstance(made, bytes) and made.isdigit() else None
                    rows.append(((int(ms), int(seq or 0)), stream_id, fields.get(b"e"), version))
        except self._errors as exc:
            raise self._record_fault(key or "history", exc) from exc
        rows.sort(key=lambda row: row[0])
        return [(stream_id, raw, version) for _, stream_id, raw, version in rows]

    # -- journal ------------------------------------------------------------------------

    def _journal_write(self, task: str, key: str, text: str, *, only_new: bool) -> bool:
        keys = [self._journal_key(task), self._order_key(task)]
        try:
            written = self._journal_put(
                keys=keys, args=[key, text, "1" if only_new else "0", self.journal_ttl_ms]
            )
        except self._errors as exc:
            raise self._journal_fault(task, exc, maybe_written=_maybe_sent(exc)) from exc
        return bool(written)

    def _journal_read(self, task: str, key: str) -> object:
        try:
            raw: object = self._client.hget(self._journal_key(task), key)
        except self._errors as exc:
            raise self._journal_fault(task, exc) from exc
        return raw

    def _journal_read_all(self, task: str) -> list[object]:
        """One atomic round trip."""
        try:
            reply = self._journal_all(keys=[self._journal_key(task), self._order_key(task)])
        except self._errors as exc:
            raise self._journal_fault(task, exc) from exc
        try:
            order, flat = reply
            entries = dict(zip(flat[::2], flat[1::2], strict=True))
        except (TypeError, ValueError):
            order, entries = None, None
        if not isinstance(order, list) or not isinstance(entries, dict):
            raise StoreUnavailable(f"the journal of task {task!r} does not validate")
        if any(name not in entries for name in order):
            raise StoreUnavailable(f"the journal of task {task!r} does not validate")
        return [entries[name] for name in order]

    # -- records ------------------------------------------------------------------------

    def _record_read(self, space: str, key: str) -> tuple[object, int] | None:
        try:
            found: object = self._client.hmget(self._records_key(space), key, _beside(key))
        except self._errors as exc:
            raise self._record_fault(space, exc) from exc
        if not isinstance(found, list) or len(found) != 2:
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        raw, beside = found
        if raw is None:
            return None
        text, version = _split_record(raw, space, key)
        return text, _version_now(version, beside, space, key)

    def _record_write(self, space: str, key: str, text: str, version: int | None) -> int | None:
        expected = "" if version is None else str(version)
        try:
            keys = self._record_keys(space, key)
            written = self._record_put(keys=keys, args=[key, _beside(key), text, expected])
        except self._errors as exc:
            raise self._write_fault(space, exc, maybe_written=_maybe_sent(exc)) from exc
        if type(written) is not int or written < 0:
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        return written or None

    def _record_append(self, space: str, key: str, text: str, version: int) -> int | None:
        try:
            keys = self._record_keys(space, key)
            written = self._record_add(keys=keys, args=[key, _beside(key), text, version])
        except self._errors as exc:
            raise self._write_fault(space, exc, maybe_written=_maybe_sent(exc)) from exc
        if type(written) is not int or written < 0:
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        return written or None

    def _record_log_read(
        self, space: str, key: str
    ) -> tuple[object, int, list[tuple[int, object]]] | None:
        try:
            keys = self._record_keys(space, key)
            reply: object = self._record_log(keys=keys, args=[key, _beside(key)])
        except self._errors as exc:
            raise self._record_fault(space, exc) from exc
        if reply == []:
            return None
        if not isinstance(reply, list) or len(reply) != 3 or not isinstance(reply[2], list):
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        text, version = _split_record(reply[0], space, key)
        entries: list[tuple[int, object]] = []
        for raw in reply[2]:
            body, made = _split_record(raw, space, key)
            entries.append((made, body))
        return text, _version_now(version, reply[1], space, key), entries

    def _record_remove(self, space: str, key: str, version: int | None) -> bool:
        expected = "" if version is None else str(version)
        try:
            keys = self._record_keys(space, key)
            removed = self._record_delete(keys=keys, args=[key, _beside(key), expected])
        except self._errors as exc:
            raise self._write_fault(space, exc, maybe_written=_maybe_sent(exc)) from exc
        if type(removed) is not int or removed < 0:
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        return removed == 1

    def _record_read_all(self, space: str) -> list[tuple[str, object, int]]:
        try:
            found = self._client.hgetall(self._records_key(space))
        except self._errors as exc:
            raise self._record_fault(space, exc) from exc
        if not isinstance(found, dict):
            raise StoreUnavailable(f"the records of space {space!r} do not validate")
        rows = []
        for name, raw in found.items():
            if not isinstance(name, bytes):
                raise StoreUnavailable(f"the records of space {space!r} do not validate")
            if name.startswith(_BESIDE):
                continue  # the version of a record with entries, read with it below
            key = name.decode("utf-8", "replace")
            text, version = _split_record(raw, space, key)
            rows.append((key, text, _version_now(version, found.get(_BESIDE + name), space, key)))
        return rows

    def _record_fault(self, space: str, exc: BaseException) -> StoreUnavailable:
        # Records take no part in breaker decisions: the views stay as they are.
        return StoreUnavailable(f"{self._what} unavailable: {exc}", dependency=space)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Append the quiet counts left, stop the feed, close the synchronous connections."""
        if not self._closed:
            self._close_quiet()
        self._closed = True
        with self._feed_lock:
            feed, self._feed = self._feed, None
        if feed is not None:
            feed.stop()
        self._client.close()

    async def aclose(self) -> None:
        """Close the asyncio client (call :meth:`close` as well for the rest)."""
        client, self._aclient, self._ascript, self._aloop = self._aclient, None, None, None
        self._batch = None
        if client is not None:
            closer = getattr(client, "aclose", None) or client.close
            await closer()

    def __repr__(self) -> str:
        return f"<RedisStore {_safe_url(self.url)} prefix={self.prefix!r}>"

    # -- internals ----------------------------------------------------------------------

    def _forked(self) -> None:
        # In a forked child: the feed thread is gone and its socket belongs to the parent
        # (closing it would cut the parent's subscription), and an asyncio client is
        # bound to the parent's loop. Drop them; redis-py renews its own pool by itself.
        super()._forked()
        self._feed_lock = threading.Lock()
        self._refeed = self._feed is not None
        self._feed = None
        self._aclient = self._ascript = self._aloop = None

    def _durability(self, task: str) -> tuple[bool, str]:
        """Whether the server keeps confirmed writes across a restart, and if not why."""
        redis = redis_module()
        try:
            try:
                if self.cluster:
                    return self._cluster_durability()
                config = self._client.config_get("append*")
            except redis.ResponseError as exc:  # renamed, disabled or not permitted
                with contextlib.suppress(redis.ResponseError):
                    if not self._client.info("persistence").get("aof_enabled", 1):
                        return False, "its append-only file is off (appendonly no)"
                return False, f"CONFIG GET is refused ({exc}), so persistence cannot be checked"
        except self._errors as exc:
            raise self._journal_fault(task, exc) from exc
        return _judge(config)

    def _cluster_durability(self) -> tuple[bool, str]:
        """Every master must keep what it confirms: the journal of a task is on one."""
        for node in self._client.get_primaries():
            durable, reason = _judge(self._client.config_get("append*", target_nodes=node))
            if not durable:
                return False, f"{node.name}: {reason}"
        return True, "appendonly yes, appendfsync always on every master"

    def _resume_feed(self) -> None:
        for view in self._book.views():
            if view.wanted:
                self._subscription().add(self._channel(view.key).encode("utf-8"), view)

    def _args(self, key: str, write: Write, policy: Policy) -> Args:
        """The script's arguments for one write of the compare-and-set loop."""
        if write.state is None:  # only read
            state_key, history_key = self._state_key(key), self._history_key(key)
            return Args(state_key, -1, "", 0, self._channel(key), history_key=history_key)
        return Args(
            self._state_key(key),
            write.expected,
            write.payload,
            self._ttl_ms(write.state, policy),
            self._channel(key),
            f"{os.getpid():x}.{self._writer_token}.{write.writer}",
            write.attempt >= _RESERVE_AFTER,
            self.cluster,
            self._history_key(key),
            self.history_retain,
            write.history,
            write.at,
        )

    def _pause(self, attempt: int, status: int) -> float:
        """How long to wait after a conflict before trying again.

        Holding the turn: go at once. Another writer's turn: let it finish (the pauses of
        ``max_attempts`` tries outlast a turn whose holder died). After repeated plain
        conflicts: a little jitter.
        """
        if status == THEIR_TURN:
            return random.uniform(0.0002, 0.001)  # noqa: S311 - jitter only
        if status == MY_TURN or attempt + 1 < _RESERVE_AFTER:
            return 0.0
        return random.uniform(0.00005, 0.0005)  # noqa: S311 - jitter only

    def _reply(self, raw: object, started: int, key: str) -> Reply:
        try:
            reply, server_ms = parse_reply(raw)
        except (ValueError, TypeError) as exc:
            self._book.fail()
            raise StoreUnavailable(
                f"{self._what} answered something that does not validate: {raw!r:.200}",
                dependency=key,
            ) from exc
        self._clock.sample(server_ms, (started + time.monotonic_ns()) // 2)
        return reply

    def _fault(self, key: str, exc: BaseException) -> StoreUnavailable:
        self._book.fail()
        return StoreUnavailable(f"{self._what} unavailable: {exc}", dependency=key)

    def _ttl_ms(self, state: BreakerState, policy: Policy) -> int:
        if held_by_operator(state):
            return 0  # an operator's isolation (or forced close) lasts until released
        return max(self.idle_ttl_ms, 2 * (policy.cooldown_max_ms + policy.lease_ttl_ms))

    def _state_key(self, key: str) -> str:
        return f"{self.prefix}:{{{key}}}:state"

    def _history_key(self, key: str) -> str:
        return f"{self.prefix}:{{{key}}}:history"

    def _breaker_keys(self, key: str) -> list[str]:
        return [self._state_key(key), self._history_key(key)]

    def _channel(self, key: str) -> str:
        return f"{self.prefix}:{{{key}}}:events"

    def _journal_key(self, task: str) -> str:
        return f"{self.prefix}:{{{task}}}:journal"

    def _order_key(self, task: str) -> str:
        return f"{self.prefix}:{{{task}}}:journal-order"

    def _record_keys(self, space: str, key: str) -> list[str]:
        """The hash of ``space`` and the list of ``key``'s entries: one slot (its tag)."""
        records = self._records_key(space)
        return [records, f"{records}:log:{key}"]

    def _records_key(self, space: str) -> str:
        if _tagged(space):
            return f"{self.prefix}:{space}:records"  # in the slot its tag names
        return f"{self.prefix}:{{records:{space}}}:records"

    def _async_script(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._aclient is None:
            redis = redis_module()
            importlib.import_module("redis.asyncio.retry")
            importlib.import_module("redis.asyncio.cluster")
            client_class = redis.asyncio.RedisCluster if self.cluster else redis.asyncio.Redis
            self._aclient = client_class.from_url(
                self.url,
                retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0),
                **self._options,
            )
            self._ascript = self._aclient.register_script(self._source)
            self._aloop = loop
            # A cluster routes each script by its key's slot; one server takes them in
            # one pipeline.
            self._batch = None if self.cluster else Batch(self._aclient, self._ascript)
        elif loop is not self._aloop:
            raise RuntimeError(
                "this RedisStore's asyncio client belongs to another event loop; "
                "use one store per event loop"
            )
        return self._ascript

    def _subscription(self) -> Feed | ShardedFeed:
        with self._feed_lock:
            if self._feed is None:
                if self._closed:
                    raise StoreUnavailable(f"{self._what} is closed")
                settings = FeedSettings(
                    self._book,
                    self._errors,
                    self.url,
                    self._options,
                    self._client,
                    self.socket_timeout,
                    self._ping_interval,
                    self.idle_ttl_ms,
                    self._refresh_ttls,
                )
                self._feed = ShardedFeed(settings) if self.cluster else Feed(settings)
            return self._feed

    def _refresh_ttls(self) -> None:
        """Keep every viewed breaker's key alive: only unused breakers should expire."""
        views = [v for v in self._book.views() if v.wanted and v.policy is not None]
        if not views:
            return
        if self.cluster:  # one key per call: keys of many slots cannot share a pipeline
            for view in views:
                ttl = self._ttl_ms(view.known or BreakerState(), view.policy or Policy())
                if ttl:
                    self._refresh(keys=self._breaker_keys(view.key), args=[ttl])
            return
        with self._client.pipeline(transaction=False) as pipe:
            for view in views:
                known = view.known or BreakerState()
                ttl = self._ttl_ms(known, view.policy or Policy())
                if ttl:
                    self._refresh(keys=self._breaker_keys(view.key), args=[ttl], client=pipe)
            pipe.execute()


def _driver_options(redis: Any) -> dict[str, Any]:
    """The client's name and version for ``CLIENT SETINFO``, looked up once, here.

    Left to itself, redis-py reads its own package metadata for every new connection (a
    few milliseconds each): on the asyncio client that blocks the event loop once per
    connection its pool opens.
    """
    version = str(getattr(redis, "__version__", "") or "unknown")
    try:
        driver_info = importlib.import_module("redis.driver_info")
    except ImportError:  # pragma: no cover - redis < 7 takes the (later deprecated) kwarg
        return {"lib_version": version}
    return {"driver_info": driver_info.DriverInfo(lib_version=version)}


def _maybe_sent(exc: BaseException) -> bool:
    """Whether a failed command may have reached the server (its write may be made).

    Not when the server answered with an error (it refused the command), nor when no
    connection could be made (redis-py words those "... connecting to ..."). Anything
    else (a reply slower than ``socket_timeout``, a connection lost mid-way, an error
    of the client's own) may have come after the server ran the command.
    """
    errors = redis_module().exceptions
    if isinstance(exc, errors.ResponseError):
        return False
    connecting = isinstance(exc, (errors.ConnectionError, errors.TimeoutError))
    return not (connecting and "connecting to" in str(exc))


def _tagged(name: str) -> bool:
    """Whether ``name`` has a Redis Cluster hash tag: ``{``, then a ``}`` after one char."""
    start = name.find("{")
    return start >= 0 and name.find("}", start + 1) > start + 1


#: What starts the name of the field that holds, beside a record with entries, its
#: version (a record's key is printable: no key starts so).
_BESIDE: Final = b"\0"


def _beside(key: str) -> bytes:
    """The field beside the record ``key`` that holds its version while it has entries."""
    return _BESIDE + key.encode("utf-8")


def _version_now(written: int, beside: object, space: str, key: str) -> int:
    """The version of a record now: ``beside`` it (the last append's), else ``written``.

    ``beside`` is ``None`` while the record has no entries; one that does not validate
    (not a version after ``written``) is corrupt.
    """
    if beside is None:
        return written
    if not isinstance(beside, bytes) or not beside.isdigit() or int(beside) <= written:
        raise corrupt_record(space, key, None)
    return int(beside)


def _split_record(raw: object, space: str, key: str) -> tuple[object, int]:
    """A stored ``b"<version> <json>"`` as (json, version); anything else is corrupt."""
    head, sep, body = raw.partition(b" ") if isinstance(raw, bytes) else (b"", b"", b"")
    if not sep or not head.isdigit() or int(head) < 1:
        raise corrupt_record(space, key, None)
    return body, int(head)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def _judge(config: object) -> tuple[bool, str]:
    """Whether ``CONFIG GET append*`` says confirmed writes survive a restart; if not, why."""
    settings = {_text(k): _text(v) for k, v in dict(config).items()}  # type: ignore[call-overload]
    if settings.get("appendonly") != "yes":
        return False, "its append-only file is off (appendonly no)"
    if settings.get("appendfsync") != "always":
        fsync = settings.get("appendfsync")
        return False, (
            f"appendfsync {fsync} acknowledges writes before they are on disk, so a "
            "host crash loses the last ones (use appendfsync always)"
        )
    return True, "appendonly yes, appendfsync always"
