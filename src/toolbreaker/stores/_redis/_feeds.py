"""The Redis store's feeds: keep this process's views current as Redis announces changes.

A feed thread per store subscribes to the channel of every viewed key
(``<prefix>:{<key>}:events``, on which the compare-and-set script publishes each new
version) and hands every announced state to the store's views
(:class:`~toolbreaker.stores._views.ViewBook`). It pings the subscription every
``min(ping_interval, view_lease / 4)`` seconds, busy or not: each answer renews the views'
lease from the instant the ping was sent (the server was alive after it), so a server
that dies or freezes leaves the calls on their views for at most ``view_lease`` seconds,
whatever the feed notices. A ping unanswered for long means the subscription is lost:
it empties every view (calls ask the store again) until it has resubscribed. On a
cluster, :class:`ShardedFeed` holds one sharded subscription (``SSUBSCRIBE``) per master,
for the channels of that master's slots, each with its own lease, and losing a master
untrusts exactly the views of its slots.

A feed knows its store only through :class:`FeedSettings`.
"""

from __future__ import annotations

import collections
import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from toolbreaker.stores._protocol import Lease
from toolbreaker.stores._redis._script import redis_module
from toolbreaker.stores._views import SharedView, ViewBook, decode_state

__all__ = ["Feed", "FeedSettings", "ShardedFeed"]

# The feed's reconnect backoff (seconds): doubled after each lost subscription, with
# jitter, and reset only after a subscription has worked for a while.
_FEED_WAIT_FIRST: Final = 0.02
_FEED_WAIT_MAX: Final = 2.0
_FEED_HEALTHY_AFTER: Final = 5.0


class FeedSettings(NamedTuple):
    """What a feed needs of its store.

    Attributes:
        book: the store's views, fed and untrusted by the feed.
        errors: the client's exceptions that mean the subscription is lost.
        url: the store's URL (with credentials), for the feed's own connections.
        options: the store's connection options.
        client: the store's client (a cluster feed asks it which master owns a slot).
        socket_timeout: the store's reply timeout: a ping unanswered for four times
            this (at least a second) means the subscription is lost.
        ping_interval: seconds between the feed's pings (at most a quarter of the lease).
        idle_ttl_ms: the store's time to live of an idle breaker.
        refresh: keeps every viewed key alive (called about three times per time to live).
    """

    book: ViewBook
    errors: tuple[type[BaseException], ...]
    url: str
    options: dict[str, Any]
    client: Any
    socket_timeout: float
    ping_interval: float
    idle_ttl_ms: int
    refresh: Callable[[], None]


def _announcement(payload: object) -> tuple[int, bytes] | None:
    """A published change, ``b"<version> <state>"``, as (version, state); else ``None``."""
    if not isinstance(payload, bytes):
        return None
    head, _, body = payload.partition(b" ")
    try:
        return int(head), body
    except ValueError:
        return None


def _is_pong(message: object) -> bool:
    """The answer to a PING on a subscribed connection (``[b"pong", b""]``; RESP3: PONG)."""
    if isinstance(message, list) and message:
        return message[0] in (b"pong", b"PONG")
    return message in (b"PONG", "PONG")


class _Heartbeat:
    """The pings of one subscription in flight, and the lease their answers renew.

    Times are ``time.monotonic_ns()``.
    """

    __slots__ = ("every", "lease", "sent", "unanswered")

    def __init__(self, lease: Lease, every: float) -> None:
        self.lease = lease
        self.every = round(every * 1e9)
        self.sent = 0  # when the last ping went out (0: none yet on this connection)
        self.unanswered: collections.deque[int] = collections.deque()

    def due(self, now: int) -> bool:
        return now - self.sent >= self.every

    def went(self, now: int) -> None:
        self.sent = now
        self.unanswered.append(now)

    def answered(self) -> None:
        """A PONG: answers come in order, so it answers the oldest ping in flight."""
        if self.unanswered:
            self.lease.renew(self.unanswered.popleft())

    def silent_for(self, now: int) -> float:
        """Seconds the oldest unanswered ping has waited (0: none waits)."""
        return (now - self.unanswered[0]) / 1e9 if self.unanswered else 0.0


def _connection_factory(settings: FeedSettings) -> tuple[Any, dict[str, Any]]:
    """The class and options of a connection like the store's pool makes, for a feed."""
    redis = redis_module()
    retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    pool = redis.ConnectionPool.from_url(settings.url, retry=retry, **settings.options)
    try:
        return pool.connection_class, dict(pool.connection_kwargs)
    finally:
        pool.disconnect()


class _Subscriber:
    """What both feeds keep: the store's settings, the channels, and the feed's thread."""

    def __init__(self, settings: FeedSettings) -> None:
        self._settings = settings
        self._book = settings.book
        self._errors = settings.errors
        self._connection_class, self._connection_kwargs = _connection_factory(settings)
        self._lock = threading.Lock()
        self._channels: dict[bytes, SharedView] = {}
        self._stopping = threading.Event()
        self._dead_after = max(1.0, 4 * settings.socket_timeout)
        # Several pings per lease: one late answer does not let the views lapse.
        self._beat = min(settings.ping_interval, settings.book.lease.seconds / 4)
        self._refresh_every = min(settings.idle_ttl_ms / 3000, 3600.0)
        self._thread: threading.Thread | None = None

    def _start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close the subscriptions."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


class Feed(_Subscriber):
    """The subscription thread: keeps views current, notices a lost subscription."""

    def __init__(self, settings: FeedSettings) -> None:
        super().__init__(settings)
        self._conn: Any = None
        self._heartbeat = _Heartbeat(self._book.lease, self._beat)
        self._healthy_since = 0.0  # when the current connection first proved it works
        self._start("toolbreaker-redis-feed")

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
                        self._settings.refresh()
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
        conn = self._connection_class(**self._connection_kwargs)
        self._heartbeat = _Heartbeat(self._book.lease, self._beat)
        try:
            conn.connect()
            with self._lock:
                if self._channels:
                    conn.send_command("SUBSCRIBE", *self._channels)
                self._conn = conn
        except BaseException:
            conn.disconnect()
            raise
        return conn

    def _drop(self) -> None:
        self._healthy_since = 0.0
        with self._lock:
            conn, self._conn = self._conn, None
        self._book.lose_feed()
        if conn is not None:
            conn.disconnect()

    def _pump(self, conn: Any) -> None:
        """Handle what arrives within ~50 ms; ping when the heartbeat is due."""
        if conn.can_read(timeout=0.05):
            while True:
                self._handle(conn.read_response())
                if not conn.can_read(timeout=0):
                    break
            self._healthy_since = self._healthy_since or time.monotonic()
        heartbeat = self._heartbeat
        now = time.monotonic_ns()
        if heartbeat.silent_for(now) > self._dead_after:
            raise self._broken("the subscription did not answer a ping")
        if heartbeat.due(now):
            with self._lock:
                conn.send_command("PING")
            heartbeat.went(now)

    def _broken(self, why: str) -> BaseException:
        error: BaseException = redis_module().ConnectionError(why)
        return error

    def _handle(self, message: object) -> None:
        if _is_pong(message):
            self._heartbeat.answered()
            return
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
    """One sharded subscription: a connection to one master, its channels and its lease."""

    __slots__ = ("address", "channels", "conn", "heartbeat")

    def __init__(self, address: tuple[str, int], conn: Any, heartbeat: _Heartbeat) -> None:
        self.address = address
        self.conn = conn
        self.channels: set[bytes] = set()
        self.heartbeat = heartbeat


class ShardedFeed(_Subscriber):
    """A cluster's feed: one sharded subscription (``SSUBSCRIBE``) per master.

    A breaker's channel shares its hash tag, so its changes are announced (``SPUBLISH``)
    on the master of its slot only, and the feed listens to each channel on that master.
    Losing a master's connection (killed, frozen past a ping, or the slot moved away:
    ``sunsubscribe``) untrusts exactly the views of the channels it carried; they are
    trusted again only once the slot's new master confirmed the subscription and a round
    trip confirmed the state. So no process admits a call on a view of a slot that has no
    master, and the views of every other slot keep working.
    """

    def __init__(self, settings: FeedSettings) -> None:
        super().__init__(settings)
        self._pending: set[bytes] = set()  # channels no live link carries
        self._links: dict[tuple[str, int], _Link] = {}
        self._stale = False  # the slot map may be wrong: relearn it before assigning
        self._retry_at = 0.0
        self._wait = _FEED_WAIT_FIRST
        self._calm_since = 0.0  # since when every channel has had a live link
        self._start("toolbreaker-redis-sharded-feed")

    def add(self, channel: bytes, view: SharedView) -> None:
        """Deliver the changes of ``view``'s key from now on (the thread subscribes)."""
        with self._lock:
            if channel not in self._channels:
                self._channels[channel] = view
                self._pending.add(channel)

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
                        self._settings.refresh()
        finally:
            for link in list(self._links.values()):
                self._close(link)
            self._book.lose_feed()

    def _assign(self) -> None:
        """Subscribe every pending channel on the master of its slot."""
        client = self._settings.client
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
        lease = Lease(self._book.lease.seconds)  # this master's: its views' only
        link = self._links[address] = _Link(address, conn, _Heartbeat(lease, self._beat))
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
        """Handle what arrives on ``link`` within ``budget`` seconds; ping it when due."""
        conn = link.conn
        if conn.can_read(timeout=budget):
            while True:
                self._handle(link, conn.read_response())
                if not conn.can_read(timeout=0):
                    break
        heartbeat = link.heartbeat
        now = time.monotonic_ns()
        if heartbeat.silent_for(now) > self._dead_after:
            raise redis_module().ConnectionError("the subscription did not answer a ping")
        if heartbeat.due(now):
            with self._lock:
                conn.send_command("PING")
            heartbeat.went(now)

    def _handle(self, link: _Link, message: object) -> None:
        if _is_pong(message):
            link.heartbeat.answered()
            return
        if not isinstance(message, list) or len(message) < 2:
            return
        kind, channel = message[0], message[1]
        view = self._channels.get(channel) if isinstance(channel, bytes) else None
        if view is None or channel not in link.channels:
            return
        if kind == b"ssubscribe":
            view.lease = link.heartbeat.lease  # trusted as long as this master answers
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
                raise redis_module().ConnectionError(f"unreadable message {message[2]!r:.100}")
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
        link.heartbeat.lease.end()  # its views lapse now, whatever else holds them
        link.conn.disconnect()

    def _trouble(self) -> None:
        """Something failed: relearn the slots, and back off (with jitter) before retrying."""
        self._stale = True
        self._calm_since = 0.0
        self._retry_at = time.monotonic() + random.uniform(self._wait / 2, self._wait)  # noqa: S311 - jitter only
        self._wait = min(self._wait * 2, _FEED_WAIT_MAX)
