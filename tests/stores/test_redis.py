"""The Redis store against a real redis-server: the conformance suite, and what a network does."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
import redis
from conformance import (
    HANG_GUARD,
    POLICY,
    AmbiguousWriteContract,
    RecordsContract,
    RoundTripContract,
    StoreContract,
    Twin,
    closed_port,
    fork_and_check,
    wait_for,
    without_hanging,
)
from patient import patient_redis

from lag_proxy import LaggingProxy
from store_kinds import redis_scripts_run
from toolbreaker import Breaker, Policy
from toolbreaker.core import BreakerState, Event, apply
from toolbreaker.core._breaker.state import CORRUPT
from toolbreaker.errors import JournalNotDurable, PolicyError, StoreUnavailable
from toolbreaker.stores import LocalFallback, RedisStore
from toolbreaker.stores._redis._script import THEIR_TURN

SHORT = Policy(
    failure_threshold=2, cooldown_ms=100, cooldown_max_ms=100, lease_ttl_ms=100, probe_limit=1
)


def state_key(key: str, prefix: str = "tb") -> str:
    return f"{prefix}:{{{key}}}:state"


@pytest.fixture
def client(redis_url):
    with redis.Redis.from_url(redis_url) as client:
        yield client


def round_trips(client: redis.Redis) -> int:
    """Commands clients sent (scripts count once, whatever they call inside)."""
    return redis_scripts_run(client)


def fed(store: RedisStore, key: str, policy: Policy = POLICY):
    """The view of ``key`` once the feed has confirmed it (after one confirming load)."""
    view = store.view(key)

    def trusted() -> bool:
        store.load(key, policy)
        return view.state is not None

    wait_for(trusted)
    return view


class TestRedisStore(StoreContract, RecordsContract, AmbiguousWriteContract, RoundTripContract):
    @pytest.fixture
    def counted(self, private_redis):
        """A store on a server of the test's own, and its count of scripts run."""
        with (
            RedisStore(private_redis.url) as store,
            redis.Redis.from_url(private_redis.url) as client,
        ):
            yield store, lambda: round_trips(client)

    # The session's server keeps nothing on disk: the journal tests opt out of durability.
    @pytest.fixture
    def store(self, redis_url):
        with patient_redis(redis_url, volatile_journal=True) as store:
            yield store

    @pytest.fixture
    def lagging(self, redis_server):
        @contextlib.contextmanager
        def through(pattern: str):
            with LaggingProxy(redis_server.port, pattern.encode()) as proxy:
                url = proxy.url("redis")
                with RedisStore(url, socket_timeout=0.2, volatile_journal=True) as store:
                    yield store, proxy

        return through

    @pytest.fixture
    def refused(self):
        url = f"redis://127.0.0.1:{closed_port()}/0"
        with RedisStore(url, backoff=0.0, volatile_journal=True) as store:
            yield store

    @pytest.fixture
    def twin(self, redis_url):
        with patient_redis(redis_url, volatile_journal=True) as twin:
            yield twin

    def write_raw(self, store, key, raw, policy):
        with redis.Redis.from_url(store.url) as client:
            client.hset(state_key(key), mapping={"v": 7, "s": raw})

    async def close_async(self, store):
        await store.aclose()


@pytest.mark.parametrize(
    "setup",
    [
        lambda c, k: c.set(k, "a string"),
        lambda c, k: c.rpush(k, "a", "list"),
        lambda c, k: c.hset(k, mapping={"v": "seven", "s": '{"state": "closed"}'}),
        lambda c, k: c.hset(k, mapping={"v": "-3", "s": '{"state": "closed"}'}),
        lambda c, k: c.hset(k, mapping={"v": "2.5", "s": '{"state": "closed"}'}),
        lambda c, k: c.hset(k, mapping={"v": "4"}),
        lambda c, k: c.hset(k, mapping={"s": '{"state": "closed"}'}),
    ],
    ids=[
        "string",
        "list",
        "version-text",
        "version-negative",
        "version-float",
        "no-state",
        "no-version",
    ],
)
def test_a_key_that_is_not_a_valid_state_hash_fails_closed(redis_url, client, setup):
    """Another type, or a hash without a sound version and state, loads corrupt and is replaced."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    setup(client, state_key(key))
    with RedisStore(redis_url) as store:
        assert store.load(key, POLICY) == CORRUPT
        state, records = store.apply(key, Event("request", 9, key, call="a"), POLICY)
        assert records[-1].reason == "cooldown"
        assert state.open_until == 9 + POLICY.cooldown_ms
    assert client.type(state_key(key)) == b"hash"
    with RedisStore(redis_url) as other:
        assert other.load(key, POLICY) == state


def test_keys_share_one_hash_tag_and_idle_breakers_expire(redis_url, client):
    """State and events share the {key} tag; the key has a TTL, except while isolated."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url, idle_ttl=3600) as store:
        Twin(store, key, POLICY).trip()
        ttl = client.pttl(state_key(key))
        assert 3_500_000 < ttl <= 3_600_000
        store.apply(key, Event("isolate", 100, key, call="operator:x"), POLICY)
        assert client.pttl(state_key(key)) == -1
        store.apply(key, Event("release", 101, key, call="operator:x"), POLICY)
        assert client.pttl(state_key(key)) > 3_500_000
        store.apply(key, Event("force-closed", 102, key, reason="rollout"), POLICY)
        assert client.pttl(state_key(key)) == -1  # a forced close lasts until released
        store.apply(key, Event("release", 103, key), POLICY)
        assert client.pttl(state_key(key)) > 3_500_000
        assert store._channel(key) == f"tb:{{{key}}}:events"


def test_the_ttl_covers_the_longest_cooldown(redis_url, client):
    """An open breaker never expires before its cooldown and a probe lease could end."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    policy = Policy(failure_threshold=1, cooldown_ms=1000, cooldown_max_ms=3_000_000)
    with RedisStore(redis_url, idle_ttl=10) as store:
        Twin(store, key, policy).trip()
        assert client.pttl(state_key(key)) > 2 * 3_000_000 - 10_000


@pytest.mark.slow
def test_viewed_breakers_do_not_expire(redis_url, client):
    """The feed keeps the keys of viewed breakers alive; unviewed idle ones expire."""
    viewed, unviewed = (f"dep-{uuid.uuid4().hex[:8]}" for _ in range(2))
    with RedisStore(redis_url, idle_ttl=1.5) as store:
        Twin(store, viewed, SHORT).trip()
        fed(store, viewed, SHORT)
        Twin(store, unviewed, SHORT).trip()
        time.sleep(2.0)
        assert client.exists(state_key(viewed))
        assert not client.exists(state_key(unviewed))


def test_an_unreachable_server_is_unavailable_fast_and_denies(redis_binary, tmp_path):
    """Nothing listening: StoreUnavailable at once; the breaker denies as store-unavailable.

    "At once" without a clock: the socket timeout is longer than the hang guard, so a
    store that waited it out (or retried until it ran out) would fail the guard."""
    from stores.conftest import RedisServer

    port = RedisServer(redis_binary, tmp_path).port  # a free port, no server on it
    url = f"redis://127.0.0.1:{port}/0"
    with RedisStore(url, backoff=0, socket_timeout=2 * HANG_GUARD) as store:
        with pytest.raises(StoreUnavailable):
            without_hanging(lambda: store.apply("k", Event("request", 0, "k", call="a"), POLICY))
        with pytest.raises(StoreUnavailable):
            without_hanging(lambda: store.load("k", POLICY))
        breaker = Breaker("k", store=store, timeout=1, clock=store.clock)
        rejection = breaker.allow()
        assert not rejection.admitted
        assert rejection.reason == "store-unavailable"
        assert isinstance(store.clock(), int)


@pytest.mark.slow
def test_a_stopped_server_denies_and_a_restarted_one_is_used_again(private_redis):
    """Server down: calls denied as store-unavailable. Server back: calls admitted again."""
    with RedisStore(private_redis.url) as store:
        breaker = Breaker(
            "search", store=store, clock=store.clock, timeout=1, enforce="cooperative"
        )
        wait_for(lambda: breaker.allow().admitted and breaker._view.state is not None)
        private_redis.stop()
        wait_for(lambda: breaker._view.state is None)
        for _ in range(3):
            rejection = breaker.allow()
            assert not rejection.admitted
            assert rejection.reason == "store-unavailable"
        private_redis.start()

        def works() -> bool:
            permit = breaker.allow()
            if permit.admitted:
                permit.record("success")
            return permit.admitted

        wait_for(works)
        wait_for(lambda: breaker.allow().admitted and breaker._view.state is not None)


def test_a_lost_subscription_empties_views_until_confirmed_again(redis_url, client):
    """Killing the subscription connection drops the views; they come back after a round trip."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url) as store:
        view = fed(store, key)
        client.client_kill_filter(_type="pubsub")
        wait_for(lambda: view.state is None)
        fed(store, key)


def test_an_answer_that_does_not_validate_is_a_store_fault(redis_url, monkeypatch):
    """A malformed script reply raises StoreUnavailable and empties the views."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url, backoff=0) as store:
        view = fed(store, key)
        for garbage in ([1, 2], "OK", [7, b"1", None, 5], [0, b"x", None, 5], [0, b"1", 3, 5]):
            monkeypatch.setattr(store, "_script", lambda *a, g=garbage, **k: g)
            with pytest.raises(StoreUnavailable):
                store.apply(key, Event("failure", 1, key, call="z", generation=0), POLICY)
            assert view.state is None


def test_conflicts_are_retried_then_bounded(redis_url):
    """A stale guess costs a retry; max_attempts conflicts in a row raise StoreUnavailable."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url) as one, RedisStore(redis_url, max_attempts=1) as two:
        two.apply(key, Event("request", 0, key, call="a"), POLICY)
        one.apply(key, Event("failure", 1, key, call="a", generation=0), POLICY)
        with pytest.raises(StoreUnavailable):
            two.apply(key, Event("failure", 2, key, call="b", generation=0), POLICY)
        state, _ = one.apply(key, Event("failure", 3, key, call="c", generation=0), POLICY)
        assert len(state.failures) == 2


def test_clock_follows_the_server_and_never_goes_back(redis_url, client):
    """clock() is the server's time in ms within a few ms, and monotonic."""
    with RedisStore(redis_url) as store:
        store.load("k", POLICY)  # one round trip teaches the offset
        seconds, micros = client.time()
        server_ms = seconds * 1000 + micros // 1000
        assert abs(store.clock() - server_ms) < 50
        readings = [store.clock() for _ in range(1000)]
        assert readings == sorted(readings)


def test_aapply_belongs_to_one_event_loop(redis_url):
    """Using one store's asyncio client from a second loop is refused clearly."""
    import asyncio

    with RedisStore(redis_url) as store:
        event = Event("request", 0, "k", call="a")

        async def first() -> BreakerState:
            state, _ = await store.aapply("k", event, POLICY)
            return state

        async def second() -> None:
            with pytest.raises(RuntimeError, match="event loop"):
                await store.aapply("k", Event("failure", 1, "k", call="a", generation=0), POLICY)

        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(first()) == BreakerState()
            asyncio.run(second())
            loop.run_until_complete(store.aclose())
        finally:
            loop.close()


def test_read_only_keys_fall_back_locally_and_writes_are_denied(redis_binary, tmp_path):
    """With the server down, a named read key gets a local breaker; a write key is denied."""
    from stores.conftest import RedisServer

    server = RedisServer(redis_binary, tmp_path)
    with RedisStore(server.url, backoff=0) as primary:
        store = LocalFallback(primary, keys=lambda key: key.endswith(":read"))
        read = Breaker("search", operation="read", store=store, timeout=1)
        write = Breaker("billing", operation="write", store=store, timeout=1)
        permit = read.allow()
        assert permit.admitted
        permit.record("success")
        rejection = write.allow()
        assert rejection.reason == "store-unavailable"
        server.start()
        try:
            wait_for(lambda: write.allow().admitted)
        finally:
            server.stop()


def test_a_shared_run_through_a_fallback_admits_nothing_while_the_server_is_down():
    """Records never fall back, the log of a shared run included: with every key allowed
    to fall back, a call against a budget on a server that is down is refused."""
    from test_shared_run import shared_guard

    from toolbreaker.stores._protocol import RecordLog

    url = f"redis://127.0.0.1:{closed_port()}/0"
    with RedisStore(url, backoff=0.0, volatile_journal=True) as primary:
        fallback = LocalFallback(primary, keys=lambda key: True)
        assert isinstance(fallback, RecordLog)
        ran: list[str] = []
        _, search = shared_guard(fallback, "t", ran)
        assert search(q="x")["condition"] == "budget-unavailable"
        assert ran == []


@pytest.mark.parametrize(
    "bad",
    [
        {"socket_timeout": 0},
        {"idle_ttl": 0.5},
        {"max_attempts": 0},
        {"prefix": "a{b"},
        {"prefix": ""},
    ],
)
def test_options_are_validated(bad):
    """Options that cannot work are refused at construction."""
    with pytest.raises(PolicyError):
        RedisStore("redis://127.0.0.1:1/0", **bad)


def test_a_starving_writers_turn_holds_writes_back_briefly_and_lapses(redis_url, client):
    """Another writer's turn makes a write wait, never a read; a dead holder's turn lapses.

    No clock: the turn is planted to last far longer than the test, the write is seen
    being refused and retried while the turn holds (and not made), then the turn is made
    to lapse and the same write goes through. Patience enough to outlast the hang guard
    keeps the waiting write from giving up first."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url, max_attempts=10**7) as store:
        twin = Twin(store, key, POLICY)
        twin.request(0)
        twin.outcome("failure", 1)
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros // 1000
        far = now_ms + 10 * 60_000
        client.hset(state_key(key), mapping={"t": "a-dead-writer", "u": far})
        version = client.hget(state_key(key), "v")
        assert store.load(key, POLICY) == twin.state  # a read is not held back
        refusals: list[int] = []
        pause = store._pause

        def counted(attempt: int, status: int) -> float:
            refusals.append(status)
            return pause(attempt, status)

        store._pause = counted
        writing = threading.Thread(
            target=lambda: results.append(
                store.apply(key, Event("failure", 2, key, call="c", generation=0), POLICY)
            ),
            daemon=True,
        )
        results: list = []
        writing.start()
        wait_for(lambda: len(refusals) >= 2)  # refused, and retrying
        assert set(refusals) == {THEIR_TURN}
        assert not results  # held back while the turn lasts
        assert client.hget(state_key(key), "v") == version  # and nothing was written
        client.hset(state_key(key), "u", now_ms)  # the dead holder's turn lapses
        writing.join(HANG_GUARD)
        assert not writing.is_alive(), "the write never went through"
        state, _ = results[0]
        assert state.failures == (1, 2)
        assert client.hget(state_key(key), "t") is None


def test_a_forked_child_trusts_no_inherited_view(redis_url):
    """After fork the child asks the store, resubscribes, and trusts its views again."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url) as store:
        view = fed(store, key)

        def child() -> bool:
            if view.state is not None:
                return False
            deadline = time.monotonic() + HANG_GUARD
            while view.state is None and time.monotonic() < deadline:
                store.apply(key, Event("request", 0, key, call="x"), POLICY)
                time.sleep(0.01)
            return view.state is not None

        assert fork_and_check(child) == 0
        assert view.state is not None
        assert store.load(key, POLICY) == BreakerState()


def test_registry_on_redis_uses_the_servers_clock(redis_url):
    """A registry (and its breakers) on a RedisStore take the store's clock by default."""
    from toolbreaker import Registry
    from toolbreaker.stores import RedisStore

    store = RedisStore(redis_url)
    try:
        registry = Registry(store=store, default_timeout=1.0)
        assert registry.clock == store.clock
        assert registry.get("search").clock == store.clock
    finally:
        store.close()


def connections(client: redis.Redis) -> int:
    """Connections the server has accepted since it started."""
    return int(client.info("stats")["total_connections_received"])


@pytest.mark.slow
def test_a_feed_refused_subscribe_backs_off_and_leaves_views_untrusted(private_redis):
    """A server that accepts connections but refuses SUBSCRIBE is not hammered.

    Before the fix, the feed reconnected 600 to 730 times a second; it now backs off with
    jitter on every reconnect path (doubling to 2 s). Calls still work through round trips.
    """
    with redis.Redis.from_url(private_redis.url) as admin:
        admin.acl_setuser(
            "nosub",
            enabled=True,
            passwords=["+pw"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-subscribe", "-psubscribe", "-ssubscribe"],
        )
        url = f"redis://nosub:pw@127.0.0.1:{private_redis.port}/0"
        key = f"dep-{uuid.uuid4().hex[:8]}"
        with RedisStore(url) as store:
            view = store.view(key)
            store.apply(key, Event("request", 0, key, call="a"), POLICY)
            before = connections(admin)
            time.sleep(3.0)
            reconnects = connections(admin) - before
            assert reconnects <= 12, reconnects  # ~6 at most by the schedule; was ~2000
            assert view.state is None
            _, records = store.apply(key, Event("failure", 1, key, call="a", generation=0), POLICY)
            assert records[-1].reason == "qualifying-failure"
            assert view.state is None


# -- a journal that does not forget ---------------------------------------------------


def test_a_server_without_an_append_only_file_refuses_the_journal(redis_url):
    """appendonly no: journal calls raise JournalNotDurable; breaker state still works."""
    with RedisStore(redis_url) as store:
        assert not store.journal_durable()
        for use in (
            lambda: store.journal_put("t", "k", {"status": "pending"}),
            lambda: store.journal_get("t", "k"),
            lambda: store.journal_entries("t"),
        ):
            with pytest.raises(JournalNotDurable, match="appendonly no") as caught:
                use()
            assert "volatile_journal=True" in str(caught.value)
            assert not isinstance(caught.value, StoreUnavailable)  # retrying cannot help
        store.apply("k", Event("request", 0, "k", call="a"), POLICY)
    with RedisStore(redis_url, volatile_journal=True) as store:
        assert store.journal_put("t", "k", {"status": "pending"})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "durable", "reason"),
    [
        (("--appendonly", "yes", "--appendfsync", "always"), True, None),
        (("--appendonly", "yes", "--appendfsync", "everysec"), False, "appendfsync everysec"),
        (("--appendonly", "yes", "--rename-command", "CONFIG", '""'), False, "CONFIG GET"),
        (("--rename-command", "CONFIG", '""'), False, "appendonly no"),
    ],
    ids=["always", "everysec", "config-disabled", "config-disabled-no-aof"],
)
def test_journal_durability_follows_the_servers_persistence(
    redis_binary, tmp_path, options, durable, reason
):
    """Only appendonly yes with appendfsync always counts; a hidden CONFIG cannot vouch."""
    from stores.conftest import RedisServer

    server = RedisServer(redis_binary, tmp_path, *options)
    server.start()
    try:
        with RedisStore(server.url) as store:
            assert store.journal_durable() is durable
            if durable:
                assert store.journal_put("t", "k", {"status": "confirmed"})
            else:
                with pytest.raises(JournalNotDurable, match=reason):
                    store.journal_put("t", "k", {"status": "confirmed"})
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("durable", [True, False], ids=["aof-always", "volatile"])
def test_a_confirmed_journal_entry_survives_a_killed_server(redis_binary, tmp_path, durable):
    """SIGKILL redis-server after a confirmed write; restarted, the entry is still there.

    The volatile run is the control: the same kill loses the entry, which is exactly
    what the refusal above protects a resumed run from.
    """
    from stores.conftest import RedisServer

    options = ("--appendonly", "yes", "--appendfsync", "always") if durable else ()
    server = RedisServer(redis_binary, tmp_path, *options)
    server.start()
    try:
        with RedisStore(server.url, volatile_journal=not durable, backoff=0) as store:
            task = f"task-{uuid.uuid4().hex[:8]}"
            entry = {"status": "confirmed", "tool": "refund", "idempotency_key": "r-1"}
            assert store.journal_put(task, "r-1", {"status": "pending"})
            assert store.journal_put(task, "r-1", entry)  # confirmed: Redis answered
            server.kill()
            with pytest.raises(StoreUnavailable):
                store.journal_get(task, "r-1")
            server.start()  # same port, same directory; the process is not restarted
            got = wait_until_answered(lambda: store.journal_get(task, "r-1"))
            if durable:
                assert got == entry
                assert store.journal_entries(task) == [entry]
            else:
                assert got is None
    finally:
        server.stop()


def wait_until_answered(read):
    """The first answer ``read()`` gives once the store is reachable again."""
    answers = []

    def answered() -> bool:
        try:
            answers.append(read())
        except StoreUnavailable:
            return False
        return True

    wait_for(answered)
    return answers[-1]


# -- records ------------------------------------------------------------------------------


def test_records_on_an_unreachable_server_are_unavailable(redis_binary, tmp_path):
    """Every record operation fails closed with StoreUnavailable."""
    from stores.conftest import RedisServer

    port = RedisServer(redis_binary, tmp_path).port  # a free port, no server on it
    with RedisStore(f"redis://127.0.0.1:{port}/0", backoff=0) as store:
        for call in (
            lambda: store.record_get("s", "k"),
            lambda: store.record_put("s", "k", {}),
            lambda: store.record_delete("s", "k"),
            lambda: store.record_list("s"),
        ):
            with pytest.raises(StoreUnavailable):
                call()


def test_a_corrupt_record_fails_closed(redis_url, client):
    """A record that does not validate (no version, bad JSON, wrong type): StoreUnavailable."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url, prefix=prefix) as store:
        store.record_put("s", "k", {"ok": 1})
        hash_key = f"{prefix}:{{records:s}}:records"
        assert client.hget(hash_key, "k") == b'1 {"ok":1}'
        for raw in (b"nope", b"1 {nope", b"0 {}"):
            client.hset(hash_key, "k", raw)
            with pytest.raises(StoreUnavailable):
                store.record_get("s", "k")
            with pytest.raises(StoreUnavailable):
                store.record_list("s")
        client.hset(hash_key, "k", b"nope")
        with pytest.raises(StoreUnavailable):
            store.record_put("s", "k", {"ok": 2}, version=1)
        client.delete(hash_key)
        client.set(hash_key, "a string")
        with pytest.raises(StoreUnavailable):
            store.record_put("s", "k", {"ok": 2})


def test_an_append_leaves_the_record_as_written_untouched(redis_url, client):
    """Appending moves the version on beside the record: the written record (tens of KB
    for a long run's state) is never read or rewritten by an append."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url, prefix=prefix) as store:
        store.record_put("s", "k", {"blob": "x" * 40_000}, version=0)
        hash_key = f"{prefix}:{{records:s}}:records"
        written = client.hget(hash_key, "k")
        assert written is not None
        assert written.startswith(b"1 ")
        for version in range(1, 6):
            assert store.record_append("s", "k", {"e": version}, version=version) == version + 1
        assert client.hget(hash_key, "k") == written
        assert store.record_get("s", "k") == ({"blob": "x" * 40_000}, 6)
        assert store.record_put("s", "k", {"small": 1}, version=6) == 7
        assert client.hget(hash_key, "k") == b'7 {"small":1}'
        assert client.hkeys(hash_key) == [b"k"]  # nothing beside it once written again
        assert client.exists(f"{hash_key}:log:k") == 0


@pytest.mark.parametrize("raw", [b"seven", b"-1", b"", b"2.5"])
def test_a_corrupt_version_beside_a_record_fails_closed(redis_url, client, raw):
    """The version an append left beside a record does not validate: nothing reads,
    lists, writes, appends to or removes the record as if it held another version."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_url, prefix=prefix) as store:
        store.record_put("s", "k", {"ok": 1}, version=0)
        assert store.record_append("s", "k", {"e": 1}, version=1) == 2
        hash_key = f"{prefix}:{{records:s}}:records"
        (beside,) = [name for name in client.hkeys(hash_key) if name != b"k"]
        client.hset(hash_key, beside, raw)
        for read in (
            lambda: store.record_get("s", "k"),
            lambda: store.record_list("s"),
            lambda: store.record_read_log("s", "k"),
            lambda: store.record_put("s", "k", {"ok": 2}, version=2),
            lambda: store.record_append("s", "k", {"e": 2}, version=2),
            lambda: store.record_delete("s", "k", version=2),
        ):
            with pytest.raises(StoreUnavailable):
                read()


# -- asyncio round trips go out together ----------------------------------------------


def _failures(n: int) -> list[tuple[str, Event]]:
    keys = [f"batch-{uuid.uuid4().hex[:8]}-{i}" for i in range(n)]
    return [(key, Event("failure", 0, key)) for key in keys]


#: What the core makes of one failure on a new key: every store must say the same.
ONE_FAILURE = apply(BreakerState(), Event("failure", 0, "k"), POLICY)[0]


def test_concurrent_async_round_trips_share_one_pipeline(private_redis):
    """200 tasks settling at once on one loop: their scripts go out together on one or
    two connections, and each gets exactly what the core says for its own key."""
    import asyncio

    events = _failures(200)
    # What is counted is round trips and connections, not speed: a loaded machine's slow
    # connect must not end the test as an outage (the default gives up after 0.25 s).
    patient = RedisStore(private_redis.url, socket_timeout=HANG_GUARD)
    with patient as store, redis.Redis.from_url(private_redis.url) as client:

        async def main() -> tuple[list[BreakerState], int]:
            results = await asyncio.gather(*(store.aapply(k, e, POLICY) for k, e in events))
            connections = sum(1 for c in client.client_list() if c.get("lib-name") == "redis-py")
            await store.aclose()
            return [state for state, _ in results], connections

        before = round_trips(client)
        states, connections = asyncio.run(main())
        # At most a read and a compare-and-set per new key, none resent: how many scripts
        # go out depends on how the tasks' round trips meet (fewer, 328, seen under load).
        assert round_trips(client) - before <= 400
        assert connections <= 3  # this client, plus the pipeline's one or two
        assert states == [ONE_FAILURE] * 200
        for key, _ in events:
            assert store.load(key, POLICY) == ONE_FAILURE


def test_a_script_the_server_forgot_is_loaded_again_not_failed(private_redis):
    """After SCRIPT FLUSH (or a restart) the scripts of a batch never ran: they are loaded
    and sent once more, and nothing is applied twice."""
    import asyncio

    patient = RedisStore(private_redis.url, socket_timeout=HANG_GUARD)  # as above
    with patient as store, redis.Redis.from_url(private_redis.url) as client:
        events = _failures(20)

        async def main() -> list[BreakerState]:
            first = await store.aapply(*events[0], POLICY)
            client.script_flush()
            rest = await asyncio.gather(*(store.aapply(k, e, POLICY) for k, e in events[1:]))
            await store.aclose()
            return [first[0]] + [state for state, _ in rest]

        states = asyncio.run(main())
        assert states == [ONE_FAILURE] * 20


def test_a_failed_pipeline_fails_every_call_in_it_closed(private_redis):
    """The server stops: every call of the batch raises StoreUnavailable (nothing waved
    through), and each caller gets an exception of its own."""
    import asyncio

    with RedisStore(private_redis.url, socket_timeout=1.0) as store:
        events = _failures(30)

        async def main() -> list[BaseException | tuple]:
            await store.aapply(*events[0], POLICY)  # the client and its script, warmed up
            private_redis.stop()
            outcomes = await asyncio.gather(
                *(store.aapply(k, e, POLICY) for k, e in events[1:]), return_exceptions=True
            )
            await store.aclose()
            return outcomes

        outcomes = asyncio.run(main())
        assert all(isinstance(o, StoreUnavailable) for o in outcomes)
        assert len({id(o) for o in outcomes}) == len(outcomes)


def test_a_cancelled_caller_leaves_the_rest_of_its_batch_answered(redis_url):
    """One caller of a batch is cancelled while the pipeline is out; the others get their
    answers."""
    import asyncio

    with RedisStore(redis_url) as store:
        events = _failures(10)

        async def main() -> list[object]:
            await store.aapply(*events[0], POLICY)
            tasks = [asyncio.create_task(store.aapply(k, e, POLICY)) for k, e in events[1:]]
            await asyncio.sleep(0)
            await asyncio.sleep(0)  # the batch is out
            tasks[0].cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            await store.aclose()
            return outcomes

        outcomes = asyncio.run(main())
        assert isinstance(outcomes[0], asyncio.CancelledError)
        assert [o[0] for o in outcomes[1:]] == [ONE_FAILURE] * 8
