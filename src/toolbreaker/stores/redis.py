"""The Redis store: breaker state shared by processes and hosts, one round trip per change.

Needs the ``redis`` extra (``pip install 'toolbreaker[redis]'``); ``redis`` is imported
only when a :class:`RedisStore` is built.

How a transition happens. The Python core decides; Redis only guards the write. Each
breaker is one hash ``<prefix>:{<key>}:state`` holding its canonical JSON state and an
integer version. To apply an event the store takes the state it last saw (its view), lets
:func:`~toolbreaker.core.apply` compute the result, and sends one script (``redis_cas.lua``)
that writes the result only if the version is still the one it computed from, refreshes
the key's time to live and publishes the new version on ``<prefix>:{<key>}:events``. On a
conflict the script returns the current state and the store computes again (bounded, then
:class:`~toolbreaker.errors.StoreUnavailable`). So a change costs one round trip when the
view is current, nothing is read and written across round trips without a version check,
and no lock is ever held, let alone while a protected call runs. Both keys of a breaker
share one hash tag, so every script touches one slot, as Redis Cluster requires.

Views. A feed thread per store subscribes to the events of every viewed key and keeps the
views current, so the runtime's fast path admits calls in a quiet closed state and rejects
them while open without a round trip, and an opening or an operator's release reaches
every process as soon as Redis delivers the message. The feed pings an idle subscription;
when it is lost every view is emptied (calls ask the store again) until the feed has
resubscribed and a round trip has confirmed the state. On a cluster the feed holds one
sharded subscription (``SSUBSCRIBE``) per master, for the channels of that master's
slots: losing a master (killed, silent past a ping, or its slot moved away) empties the
views of exactly those slots, so no call is admitted on a view of a slot without a
master, and they are trusted again once the promoted replica confirmed the subscription.
Keep ``ping_interval`` plus the ping's wait well below ``cluster-node-timeout``, so that a
frozen master is noticed before its replica can take writes.

Time. Events must carry one clock for all hosts. :meth:`RedisStore.clock` is the Redis
server's clock as seen from this process (an offset to the local monotonic clock, learned
from the server's ``TIME`` on each round trip, that never goes backwards); use it as the
breakers' clock::

    store = RedisStore("redis://cache:6379/0")
    registry = Registry(store=store, clock=store.clock)

Fail closed. A refused connection, a timeout (``socket_timeout``, 0.25 s by default) or a
reply that does not validate raises ``StoreUnavailable``: the breaker denies the call with
the reason ``store-unavailable``. A journal or record write whose request may have
reached the server before it failed (a timeout waiting for the reply) raises its
subclass ``StoreWriteUnknown``: the write may have been made. A stored state that does
not validate loads as the core's recovered-from-corruption open state. A server that
comes back is used again without a restart. Idle breakers expire after ``idle_ttl``
(never an isolated one, and never one a process still views: the feed refreshes those),
and probe leases carry their owner and admission time, so a crashed worker cannot leave
a breaker half-open forever.

Records (:class:`~toolbreaker.stores.Records`). One hash per space,
``<prefix>:{records:<space>}:records``, maps each key to ``"<version> <json>"``; a
compare-and-set is one script on that hash. The space is the hash tag, so on a cluster a
whole space lives in one slot and listing it is one ``HGETALL`` on one node. A space that
carries a hash tag of its own (a breaker's, ``bulkhead/{<key>}``) is the hash
``<prefix>:<space>:records``: it lives in the slot of that breaker's state. Records
never expire (a lease carries its own end) and follow the server's persistence settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import os
import random
import threading
import time
from collections.abc import Generator
from importlib import resources
from typing import Any, Final, NamedTuple

from toolbreaker.core.breaker.machine import apply as core_apply
from toolbreaker.core.breaker.machine import held_by_operator
from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.state import BreakerState, Event, Transition
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.stores._shell import SharedStore
from toolbreaker.stores._views import SharedView, decode_state, encode_state

__all__ = ["RedisStore"]

_WRITTEN: Final = 1
_VERIFIED: Final = 2
_MY_TURN: Final = 3
_THEIR_TURN: Final = 4
_TURN_MS: Final = 25  # how long a starving writer's reserved turn lasts at most
_RESERVE_AFTER: Final = 2  # conflicts in a row before a writer asks for the turn
_SCRIPT_FILE: Final = "redis_cas.lua"
# The feed's reconnect backoff (seconds): doubled after each lost subscription, with
# jitter, and reset only after a subscription has worked for a while.
_FEED_WAIT_FIRST: Final = 0.02
_FEED_WAIT_MAX: Final = 2.0
_FEED_HEALTHY_AFTER: Final = 5.0
_REFRESH_TTL: Final = """
if redis.call('PTTL', KEYS[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
"""
_JOURNAL_PUT: Final = """
local written
if ARGV[3] == '1' then
  written = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
  if written == 0 then return 0 end
else
  written = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
if written == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
"""


# Records: one hash per space, ``field = key``, ``value = "<version> <json>"``. One key per
# space keeps a space in one slot (its name is the hash tag) and makes a list one HGETALL.
_RECORD_PUT: Final = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local version = 0
if cur then
  version = tonumber(string.match(cur, '^(%d+) '))
  if version == nil then return -1 end
end
if ARGV[3] ~= '' and tonumber(ARGV[3]) ~= version then return 0 end
version = version + 1
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', version) .. ' ' .. ARGV[2])
return version
"""
_RECORD_DELETE: Final = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
if ARGV[2] ~= '' and string.match(cur, '^(%d+) ') ~= ARGV[2] then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
"""


# Both keys share the task's hash tag: one slot, one atomic read (also on a cluster).
_JOURNAL_ALL: Final = """
return {redis.call('LRANGE', KEYS[2], 0, -1), redis.call('HGETALL', KEYS[1])}
"""


class _Args(NamedTuple):
    key: str
    expected: int
    payload: str
    ttl_ms: int
    channel: str
    writer: str = ""
    reserve: bool = False
    pause: float = 0.0  # seconds to wait before sending
    sharded: bool = False  # on a cluster: announce with SPUBLISH too

    def argv(self) -> list[str | int]:
        return [
            self.expected,
            self.payload,
            self.ttl_ms,
            self.channel,
            self.writer,
            "1" if self.reserve else "0",
            _TURN_MS,
            "1" if self.sharded else "0",
        ]


class _Reply(NamedTuple):
    status: int
    version: int
    state: bytes | None


_Transaction = Generator[_Args, _Reply, tuple[BreakerState, tuple[Transition, ...]]]


def _redis() -> Any:
    try:
        import redis
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "RedisStore needs the redis client: pip install 'toolbreaker[redis]'"
        ) from None
    return redis


def _parse(reply: object) -> tuple[_Reply, int]:
    """The script's reply and the server's time in ms; anything else is a store fault."""
    if not isinstance(reply, list) or len(reply) != 4:
        raise ValueError(reply)
    status, version, state, server_ms = reply
    if status not in (0, 1, 2, 3, 4) or not isinstance(server_ms, int):
        raise ValueError(reply)
    number = int(version)  # bytes of digits, or ValueError
    if number < 0 or (state is not None and not isinstance(state, bytes)):
        raise ValueError(reply)
    return _Reply(status, number, state), server_ms


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


class RedisStore(SharedStore):
    """Breaker states and the run journal in Redis, shared by processes and hosts.

    Args:
        url: a redis-py URL (``redis://``, ``rediss://``, ``unix://``), with credentials.
        prefix: the first part of every key and channel name.
        socket_timeout: seconds to connect, or to wait for a reply, before the store is
            unavailable.
        idle_ttl: seconds after which a breaker no process uses is forgotten.
        journal_ttl: seconds a task's journal is kept after its last entry; 0 keeps it.
        max_attempts: compare-and-set attempts per event before giving up.
        backoff: after a failure, seconds during which calls fail at once.
        ping_interval: seconds of silence after which the feed pings its subscription;
            without an answer within ``4 * socket_timeout`` (at least a second) the
            subscription is treated as lost.
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
        redis = _redis()
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
        self._source = resources.files(__package__).joinpath(_SCRIPT_FILE).read_text("utf-8")
        self._script: Any = self._client.register_script(self._source)
        self._refresh: Any = self._client.register_script(_REFRESH_TTL)
        self._journal_put: Any = self._client.register_script(_JOURNAL_PUT)
        self._journal_all: Any = self._client.register_script(_JOURNAL_ALL)
        self._record_put: Any = self._client.register_script(_RECORD_PUT)
        self._record_delete: Any = self._client.register_script(_RECORD_DELETE)
        self._aclient: Any = None
        self._ascript: Any = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._batch: _Batch | None = None
        self._clock = _ServerClock()
        self._ping_interval = float(ping_interval)
        self._writer_token = os.urandom(4).hex()
        self._writers = itertools.count(1)
        self._feed: _Feed | _ShardedFeed | None = None
        self._feed_lock = threading.Lock()
        self._what = f"Redis store {_safe_url(url)}"
        super().__init__(backoff=backoff, volatile_journal=volatile_journal)

    # -- round trips (the shell in _shell.py does the rest) -------------------------------

    def _watch(self, view: SharedView) -> None:
        self._subscription().add(self._channel(view.key).encode("utf-8"), view)

    def _round_trip(
        self, view: SharedView, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """One compare-and-set script (more on conflict)."""
        with view.lock:
            steps = self._transaction(view, event, policy)
            try:
                args = next(steps)
                while True:
                    if args.pause:
                        time.sleep(args.pause)
                    started = time.monotonic_ns()
                    try:
                        raw = self._script(keys=[args.key], args=args.argv())
                    except self._errors as exc:
                        raise self._fault(view.key, exc) from exc
                    args = steps.send(self._reply(raw, started, view.key))
            except StopIteration as done:
                result: tuple[BreakerState, tuple[Transition, ...]] = done.value
                return result
            finally:
                steps.close()

    async def _around_trip(
        self, view: SharedView, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """The same on the asyncio client, bound to the event loop that first uses it."""
        script = self._async_script()
        steps = self._transaction(view, event, policy)
        try:
            args = next(steps)
            while True:
                if args.pause:
                    await asyncio.sleep(args.pause)
                started = time.monotonic_ns()
                try:
                    if self._batch is not None:
                        raw = await self._batch.run(args)
                    else:
                        raw = await script(keys=[args.key], args=args.argv())
                except self._errors as exc:
                    raise self._fault(view.key, exc) from exc
                args = steps.send(self._reply(raw, started, view.key))
        except StopIteration as done:
            result: tuple[BreakerState, tuple[Transition, ...]] = done.value
            return result
        finally:
            steps.close()

    def _read(self, view: SharedView, policy: Policy) -> BreakerState:
        key = view.key
        token = self._book.token(view)
        started = time.monotonic_ns()
        try:
            raw = self._script(keys=[self._state_key(key)], args=self._read_args(key).argv())
        except self._errors as exc:
            raise self._fault(key, exc) from exc
        reply = self._reply(raw, started, key)
        state = decode_state(reply.state, policy)
        self._book.learn(view, state, reply.version, token)
        return state

    def clock(self) -> int:
        """Milliseconds on the Redis server's clock, never going backwards.

        Pass it as the ``clock`` of every breaker that uses this store, on every host.
        Until the first round trip it follows the local wall clock.
        """
        return self._clock()

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
            raw: object = self._client.hget(self._records_key(space), key)
        except self._errors as exc:
            raise self._record_fault(space, exc) from exc
        return None if raw is None else _split_record(raw, space)

    def _record_write(self, space: str, key: str, text: str, version: int | None) -> int | None:
        expected = "" if version is None else str(version)
        try:
            written = self._record_put(keys=[self._records_key(space)], args=[key, text, expected])
        except self._errors as exc:
            raise self._write_fault(space, exc, maybe_written=_maybe_sent(exc)) from exc
        if type(written) is not int or written < 0:
            raise StoreUnavailable(f"a record in space {space!r} does not validate")
        return written or None

    def _record_remove(self, space: str, key: str, version: int | None) -> bool:
        expected = "" if version is None else str(version)
        try:
            removed = self._record_delete(keys=[self._records_key(space)], args=[key, expected])
        except self._errors as exc:
            raise self._write_fault(space, exc, maybe_written=_maybe_sent(exc)) from exc
        return bool(removed == 1)

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
            text, version = _split_record(raw, space)
            rows.append((name.decode("utf-8", "replace"), text, version))
        return rows

    def _record_fault(self, space: str, exc: BaseException) -> StoreUnavailable:
        # Records take no part in breaker decisions: the views stay as they are.
        return StoreUnavailable(f"{self._what} unavailable: {exc}", dependency=space)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the feed and close the synchronous connections."""
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
        redis = _redis()
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

    def _transaction(self, view: SharedView, event: Event, policy: Policy) -> _Transaction:
        """The compare-and-set loop, free of I/O: it yields script arguments, gets replies."""
        key = view.key
        token = self._book.token(view)
        state, version = view.known, view.version
        fresh = False
        if state is None:
            reply = yield self._read_args(key)
            state, version, fresh = decode_state(reply.state, policy), reply.version, True
            self._book.learn(view, state, version, token)
        writer = f"{os.getpid():x}.{self._writer_token}.{next(self._writers)}"
        pause = 0.0
        for attempt in range(self.max_attempts):
            new, records = core_apply(state, event, policy)
            unchanged = new == state
            if unchanged and fresh:
                return new, records  # computed on what the server just said: nothing to write
            payload = "" if unchanged else encode_state(new)
            ttl = self._ttl_ms(new, policy)
            reply = yield _Args(
                self._state_key(key),
                version,
                payload,
                ttl,
                self._channel(key),
                writer,
                attempt >= _RESERVE_AFTER,
                pause,
                self.cluster,
            )
            if reply.status in (_WRITTEN, _VERIFIED):
                self._book.learn(view, new, reply.version, token)
                return new, records
            state, version, fresh = decode_state(reply.state, policy), reply.version, True
            self._book.learn(view, state, version, token)
            # Holding the turn: go at once. Another writer's turn: let it finish (the
            # pauses of max_attempts tries outlast a turn whose holder died). After
            # repeated plain conflicts: a little jitter.
            if reply.status == _THEIR_TURN:
                pause = random.uniform(0.0002, 0.001)  # noqa: S311 - jitter only
            elif reply.status == _MY_TURN or attempt + 1 < _RESERVE_AFTER:
                pause = 0.0
            else:
                pause = random.uniform(0.00005, 0.0005)  # noqa: S311 - jitter only
        self._book.fail()
        raise StoreUnavailable(
            f"{self._what}: {self.max_attempts} conflicting writes in a row on {key!r}",
            dependency=key,
        )

    def _read_args(self, key: str) -> _Args:
        return _Args(self._state_key(key), -1, "", 0, self._channel(key))

    def _reply(self, raw: object, started: int, key: str) -> _Reply:
        try:
            reply, server_ms = _parse(raw)
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

    def _channel(self, key: str) -> str:
        return f"{self.prefix}:{{{key}}}:events"

    def _journal_key(self, task: str) -> str:
        return f"{self.prefix}:{{{task}}}:journal"

    def _order_key(self, task: str) -> str:
        return f"{self.prefix}:{{{task}}}:journal-order"

    def _records_key(self, space: str) -> str:
        if _tagged(space):
            return f"{self.prefix}:{space}:records"  # in the slot its tag names
        return f"{self.prefix}:{{records:{space}}}:records"

    def _async_script(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._aclient is None:
            redis = _redis()
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
            self._batch = None if self.cluster else _Batch(self._aclient, self._ascript)
        elif loop is not self._aloop:
            raise RuntimeError(
                "this RedisStore's asyncio client belongs to another event loop; "
                "use one store per event loop"
            )
        return self._ascript

    def _subscription(self) -> _Feed | _ShardedFeed:
        with self._feed_lock:
            if self._feed is None:
                if self._closed:
                    raise StoreUnavailable(f"{self._what} is closed")
                self._feed = _ShardedFeed(self) if self.cluster else _Feed(self)
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
                    self._refresh(keys=[self._state_key(view.key)], args=[ttl])
            return
        with self._client.pipeline(transaction=False) as pipe:
            for view in views:
                known = view.known or BreakerState()
                ttl = self._ttl_ms(known, view.policy or Policy())
                if ttl:
                    self._refresh(keys=[self._state_key(view.key)], args=[ttl], client=pipe)
            pipe.execute()


#: How many callers of a batch are woken per turn of the event loop.
_WAKE = 16
#: The most scripts one pipeline carries (a batch of more is sent as several).
_PIPELINE = 32


class _Batch:
    """The asyncio round trips of one event loop that are due together, as few pipelines.

    A task's script call joins the batch of the loop's current iteration; the batch is
    sent once every task made ready in that iteration has had its turn. Two hundred
    breakers settling at once cost one pipeline (one write, one read loop) instead of two
    hundred commands, each with its own connection checkout, timeout and parse: the loop
    stays responsive when a slow store answers many calls at the same moment. Each
    script is still one atomic compare-and-set; a failed send fails every call in it.
    """

    __slots__ = ("_client", "_pending", "_script", "_sending")

    def __init__(self, client: Any, script: Any) -> None:
        self._client = client
        self._script = script
        self._pending: list[tuple[_Args, asyncio.Future[object]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, args: _Args) -> object:
        """Run the script with ``args`` in the next pipeline; its raw reply.

        Raises:
            redis.RedisError, OSError: the pipeline could not be sent or read.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._pending.append((args, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        reply = await future
        if isinstance(reply, _Failed):
            raise reply.error
        return reply

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        # Pipelines of at most _PIPELINE scripts, on connections of their own: a crowd of
        # replies is parsed in several turns of the loop, not all in one.
        for start in range(0, len(batch), _PIPELINE):
            task = asyncio.ensure_future(self._send(batch[start : start + _PIPELINE]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[_Args, asyncio.Future[object]]]) -> None:
        try:
            replies = await self._pipeline([args for args, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - every caller gets its own copy
            replies = [_Failed(exc)] * len(batch)
        for start in range(0, len(batch), _WAKE):
            if start:
                # The callers woken so far run before the next slice is woken: the loop
                # takes its timers and I/O between slices, not after all of them.
                await asyncio.sleep(0)
            for (_, future), reply in zip(
                batch[start : start + _WAKE], replies[start : start + _WAKE], strict=True
            ):
                if not future.done():  # a caller cancelled meanwhile is not answered
                    future.set_result(reply)

    async def _pipeline(self, batch: list[_Args]) -> list[object]:
        """Every script's reply (or error) in order.

        Scripts the server did not know (first use, a restart, ``SCRIPT FLUSH``) never
        ran: the script is loaded and they are sent once more.
        """
        replies: list[object] = [None] * len(batch)
        todo = list(range(len(batch)))
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for index in todo:
                args = batch[index]
                pipe.evalsha(self._script.sha, 1, args.key, *args.argv())
            answers = await pipe.execute(raise_on_error=False)
            missing = []
            for index, answer in zip(todo, answers, strict=True):
                if attempt == 0 and _no_script(answer):
                    missing.append(index)
                else:
                    replies[index] = _Failed(answer) if isinstance(answer, Exception) else answer
            if not missing:
                break
            await self._client.script_load(self._script.script)
            todo = missing
        return replies


class _Failed:
    """A batched call's error, handed to its caller to raise."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _maybe_sent(exc: BaseException) -> bool:
    """Whether a failed command may have reached the server (its write may be made).

    Not when the server answered with an error (it refused the command), nor when no
    connection could be made (redis-py words those "... connecting to ..."). Anything
    else (a reply slower than ``socket_timeout``, a connection lost mid-way, an error
    of the client's own) may have come after the server ran the command.
    """
    errors = _redis().exceptions
    if isinstance(exc, errors.ResponseError):
        return False
    connecting = isinstance(exc, (errors.ConnectionError, errors.TimeoutError))
    return not (connecting and "connecting to" in str(exc))


def _no_script(answer: object) -> bool:
    return isinstance(answer, _redis().exceptions.NoScriptError)


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


def _announcement(payload: object) -> tuple[int, bytes] | None:
    """A published change, ``b"<version> <state>"``, as (version, state); else ``None``."""
    if not isinstance(payload, bytes):
        return None
    head, _, body = payload.partition(b" ")
    try:
        return int(head), body
    except ValueError:
        return None


def _connection_factory(store: RedisStore) -> tuple[Any, dict[str, Any]]:
    """The class and options of a connection like the store's pool makes, for a feed."""
    redis = _redis()
    pool = redis.ConnectionPool.from_url(
        store.url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0), **store._options
    )
    try:
        return pool.connection_class, dict(pool.connection_kwargs)
    finally:
        pool.disconnect()


class _Feed:
    """The subscription thread: keeps views current, notices a lost subscription."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._book = store._book
        self._errors = store._errors
        self._connection_class, self._connection_kwargs = _connection_factory(store)
        self._lock = threading.Lock()
        self._channels: dict[bytes, SharedView] = {}
        self._conn: Any = None
        self._stopping = threading.Event()
        self._dead_after = max(1.0, 4 * store.socket_timeout)
        self._ping_interval = store._ping_interval
        self._refresh_every = min(store.idle_ttl_ms / 3000, 3600.0)
        self._last_heard = 0.0
        self._pinged = 0.0
        self._healthy_since = 0.0  # when the current connection first proved it works
        self._thread = threading.Thread(
            target=self._run, name="toolbreaker-redis-feed", daemon=True
        )
        self._thread.start()

    def add(self, channel: bytes, view: SharedView) -> None:
        """Deliver the changes of ``view``'s key from now on."""
        with self._lock:
            if channel in self._channels:
                return
            self._channels[channel] = view
            conn = self._conn
            if conn is not None:
                # On failure the feed thread notices the broken connection and resubscribes.
                with contextlib.suppress(*self._errors):
                    conn.send_command("SUBSCRIBE", channel)

    def stop(self) -> None:
        """Stop the thread and close the subscription."""
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        wait = _FEED_WAIT_FIRST
        refreshed = time.monotonic()
        try:
            while not self._stopping.is_set():
                try:
                    conn = self._conn or self._connect()
                    self._pump(conn)
                    if time.monotonic() - refreshed > self._refresh_every:
                        refreshed = time.monotonic()
                        self._store._refresh_ttls()
                except self._errors:
                    # Every way of losing the subscription backs off, with jitter: a
                    # server that accepts connections but refuses SUBSCRIBE (an ACL, a
                    # proxy) fails right after connect(), and must not be hammered.
                    if self._healthy_since and (
                        time.monotonic() - self._healthy_since >= _FEED_HEALTHY_AFTER
                    ):
                        wait = _FEED_WAIT_FIRST  # it worked for a while: a fresh fault
                    self._drop()
                    self._stopping.wait(random.uniform(wait / 2, wait))  # noqa: S311 - jitter only
                    wait = min(wait * 2, _FEED_WAIT_MAX)
        finally:
            self._drop()

    def _connect(self) -> Any:
        kwargs = self._connection_kwargs
        if self._store.cluster:
            # Pub/sub messages reach every node of a cluster: any live one will do, and
            # after a failure the next attempt may pick another.
            nodes = self._store._client.get_nodes()
            if nodes:
                node = random.choice(nodes)  # noqa: S311 - spreading load, not security
                kwargs = {**kwargs, "host": node.host, "port": node.port}
        conn = self._connection_class(**kwargs)
        try:
            conn.connect()
            with self._lock:
                if self._channels:
                    conn.send_command("SUBSCRIBE", *self._channels)
                self._conn = conn
        except BaseException:
            conn.disconnect()
            raise
        self._last_heard = time.monotonic()
        self._pinged = 0.0
        return conn

    def _drop(self) -> None:
        self._healthy_since = 0.0
        with self._lock:
            conn, self._conn = self._conn, None
        self._book.lose_feed()
        if conn is not None:
            conn.disconnect()

    def _pump(self, conn: Any) -> None:
        """Handle what arrives within ~50 ms; ping an idle subscription."""
        if conn.can_read(timeout=0.05):
            while True:
                self._handle(conn.read_response())
                if not conn.can_read(timeout=0):
                    break
            self._last_heard = time.monotonic()
            self._healthy_since = self._healthy_since or self._last_heard
            self._pinged = 0.0
            return
        now = time.monotonic()
        if self._pinged:
            if now - self._pinged > self._dead_after:
                raise self._broken("the subscription did not answer a ping")
        elif now - self._last_heard > self._ping_interval:
            with self._lock:
                conn.send_command("PING")
            self._pinged = now

    def _broken(self, why: str) -> BaseException:
        error: BaseException = _redis().ConnectionError(why)
        return error

    def _handle(self, message: object) -> None:
        if not isinstance(message, list) or len(message) < 2:
            return
        kind = message[0]
        view = self._channels.get(message[1]) if isinstance(message[1], bytes) else None
        if view is None:
            return
        if kind == b"subscribe":
            self._book.confirm(view)
        elif kind == b"message" and len(message) == 3 and view.policy is not None:
            announced = _announcement(message[2])
            if announced is None:
                # A message we cannot read: we may be missing changes, so start over.
                raise self._broken(f"unreadable message {message[2]!r:.100}")
            self._book.feed(view, decode_state(announced[1], view.policy), announced[0])


class _Link:
    """One sharded subscription: a connection to one master and the channels it carries."""

    __slots__ = ("address", "channels", "conn", "last_heard", "pinged")

    def __init__(self, address: tuple[str, int], conn: Any) -> None:
        self.address = address
        self.conn = conn
        self.channels: set[bytes] = set()
        self.last_heard = time.monotonic()
        self.pinged = 0.0


class _ShardedFeed:
    """A cluster's feed: one sharded subscription (``SSUBSCRIBE``) per master.

    A breaker's channel shares its hash tag, so its changes are announced (``SPUBLISH``)
    on the master of its slot only, and the feed listens to each channel on that master.
    Losing a master's connection (killed, frozen past a ping, or the slot moved away:
    ``sunsubscribe``) untrusts exactly the views of the channels it carried; they are
    trusted again only once the slot's new master confirmed the subscription and a round
    trip confirmed the state. So no process admits a call on a view of a slot that has no
    master, and the views of every other slot keep working.
    """

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._book = store._book
        self._errors = store._errors
        self._connection_class, self._connection_kwargs = _connection_factory(store)
        self._lock = threading.Lock()
        self._channels: dict[bytes, SharedView] = {}
        self._pending: set[bytes] = set()  # channels no live link carries
        self._links: dict[tuple[str, int], _Link] = {}
        self._stale = False  # the slot map may be wrong: relearn it before assigning
        self._retry_at = 0.0
        self._wait = _FEED_WAIT_FIRST
        self._calm_since = 0.0  # since when every channel has had a live link
        self._stopping = threading.Event()
        self._dead_after = max(1.0, 4 * store.socket_timeout)
        self._ping_interval = store._ping_interval
        self._refresh_every = min(store.idle_ttl_ms / 3000, 3600.0)
        self._thread = threading.Thread(
            target=self._run, name="toolbreaker-redis-sharded-feed", daemon=True
        )
        self._thread.start()

    def add(self, channel: bytes, view: SharedView) -> None:
        """Deliver the changes of ``view``'s key from now on (the thread subscribes)."""
        with self._lock:
            if channel not in self._channels:
                self._channels[channel] = view
                self._pending.add(channel)

    def stop(self) -> None:
        """Stop the thread and close every subscription."""
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        refreshed = time.monotonic()
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if self._pending and now >= self._retry_at:
                    self._assign()
                self._pump_all()
                if self._calm_since and now - self._calm_since >= _FEED_HEALTHY_AFTER:
                    self._wait = _FEED_WAIT_FIRST  # it worked for a while: a fresh fault
                if now - refreshed > self._refresh_every:
                    refreshed = now
                    with contextlib.suppress(*self._errors):  # tried again next time
                        self._store._refresh_ttls()
        finally:
            for link in list(self._links.values()):
                self._close(link)
            self._book.lose_feed()

    def _assign(self) -> None:
        """Subscribe every pending channel on the master of its slot."""
        client = self._store._client
        try:
            if self._stale:
                client.nodes_manager.initialize()
                self._stale = False
            with self._lock:
                pending = list(self._pending)
            groups: dict[tuple[str, int], list[bytes]] = {}
            for channel in pending:
                node = client.get_node_from_key(channel)
                groups.setdefault((node.host, int(node.port)), []).append(channel)
            for address, channels in groups.items():
                link = self._links.get(address) or self._open(address)
                with self._lock:
                    link.conn.send_command("SSUBSCRIBE", *channels)
                    link.channels.update(channels)
                    self._pending.difference_update(channels)
        except self._errors:
            self._trouble()
            return
        if not self._pending:
            self._calm_since = self._calm_since or time.monotonic()

    def _open(self, address: tuple[str, int]) -> _Link:
        conn = self._connection_class(
            **{**self._connection_kwargs, "host": address[0], "port": address[1]}
        )
        try:
            conn.connect()
        except BaseException:
            conn.disconnect()
            raise
        link = self._links[address] = _Link(address, conn)
        return link

    def _pump_all(self) -> None:
        links = list(self._links.values())
        if not links:
            self._stopping.wait(0.05)
            return
        budget = 0.05 / len(links)
        for link in links:
            try:
                self._pump(link, budget)
            except self._errors:
                self._lose(link)

    def _pump(self, link: _Link, budget: float) -> None:
        """Handle what arrives on ``link`` within ``budget`` seconds; ping it when idle."""
        conn = link.conn
        if conn.can_read(timeout=budget):
            while True:
                self._handle(link, conn.read_response())
                if not conn.can_read(timeout=0):
                    break
            link.last_heard = time.monotonic()
            link.pinged = 0.0
            return
        now = time.monotonic()
        if link.pinged:
            if now - link.pinged > self._dead_after:
                raise _redis().ConnectionError("the subscription did not answer a ping")
        elif now - link.last_heard > self._ping_interval:
            with self._lock:
                conn.send_command("PING")
            link.pinged = now

    def _handle(self, link: _Link, message: object) -> None:
        if not isinstance(message, list) or len(message) < 2:
            return
        kind, channel = message[0], message[1]
        view = self._channels.get(channel) if isinstance(channel, bytes) else None
        if view is None or channel not in link.channels:
            return
        if kind == b"ssubscribe":
            self._book.confirm(view)
        elif kind == b"sunsubscribe":
            # The slot moved (a failover, a resharding): its new master must confirm.
            with self._lock:
                link.channels.discard(channel)
                self._pending.add(channel)
            self._book.lose([view])
            self._trouble()
        elif kind == b"smessage" and len(message) == 3 and view.policy is not None:
            announced = _announcement(message[2])
            if announced is None:
                # A message we cannot read: we may be missing changes, so start over.
                raise _redis().ConnectionError(f"unreadable message {message[2]!r:.100}")
            self._book.feed(view, decode_state(announced[1], view.policy), announced[0])

    def _lose(self, link: _Link) -> None:
        """``link`` failed: untrust exactly its views, and subscribe them again later."""
        self._close(link)
        with self._lock:
            channels = list(link.channels)
            self._pending.update(channels)
            views = [self._channels[c] for c in channels if c in self._channels]
        self._book.lose(views)
        self._trouble()

    def _close(self, link: _Link) -> None:
        if self._links.get(link.address) is link:
            del self._links[link.address]
        link.conn.disconnect()

    def _trouble(self) -> None:
        """Something failed: relearn the slots, and back off (with jitter) before retrying."""
        self._stale = True
        self._calm_since = 0.0
        self._retry_at = time.monotonic() + random.uniform(self._wait / 2, self._wait)  # noqa: S311 - jitter only
        self._wait = min(self._wait * 2, _FEED_WAIT_MAX)


def _tagged(name: str) -> bool:
    """Whether ``name`` has a Redis Cluster hash tag: ``{``, then a ``}`` after one char."""
    start = name.find("{")
    return start >= 0 and name.find("}", start + 1) > start + 1


def _split_record(raw: object, space: str) -> tuple[object, int]:
    """A stored ``b"<version> <json>"`` as (json, version); anything else is a store fault."""
    head, sep, body = raw.partition(b" ") if isinstance(raw, bytes) else (b"", b"", b"")
    if not sep or not head.isdigit() or int(head) < 1:
        raise StoreUnavailable(f"a record in space {space!r} does not validate")
    return body, int(head)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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
