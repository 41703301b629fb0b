"""The Redis store on a real Redis Cluster (3 masters, 3 replicas on 127.0.0.1).

The conformance suite through redis-py's cluster client; every key of a breaker in one
slot; and a master killed during a run: calls that need the slot are denied
(``store-unavailable``) until its replica is promoted, then admitted again by the same
store, without a restart; the sharded feed (one ``SSUBSCRIBE`` per master) untrusts the
views of exactly the lost master's slots before the replica can take writes.
"""

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
    RecordsContract,
    RoundTripContract,
    StoreContract,
    Twin,
    wait_for,
)
from patient import patient_redis

from store_kinds import redis_scripts_run
from toolbreaker import Breaker, Policy
from toolbreaker.core import Event
from toolbreaker.errors import StoreUnavailable
from toolbreaker.stores import RedisStore

pytestmark = pytest.mark.slow


class TestRedisClusterStore(StoreContract, RecordsContract, RoundTripContract):
    @pytest.fixture
    def counted(self, private_cluster):
        """A store on a cluster of the test's own, and the scripts its nodes ran."""
        clients = [redis.Redis.from_url(node.url) for node in private_cluster.nodes]
        try:
            with RedisStore(private_cluster.url, cluster=True, volatile_journal=True) as store:
                yield store, lambda: redis_scripts_run(*clients)
        finally:
            for client in clients:
                client.close()

    @pytest.fixture
    def store(self, redis_cluster):
        with patient_redis(redis_cluster.url, cluster=True, volatile_journal=True) as store:
            yield store

    @pytest.fixture
    def twin(self, redis_cluster):
        with patient_redis(redis_cluster.url, cluster=True, volatile_journal=True) as twin:
            yield twin

    def write_raw(self, store, key, raw, policy):
        with redis.RedisCluster.from_url(store.url) as client:
            client.hset(f"tb:{{{key}}}:state", mapping={"v": 7, "s": raw})

    async def close_async(self, store):
        await store.aclose()


def test_every_key_of_a_breaker_and_of_a_journal_lives_in_one_slot(redis_cluster):
    """State, channel and journal keys share their hash tag; the keys exist on that slot."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    task = f"task-{uuid.uuid4().hex[:8]}"
    with (
        RedisStore(redis_cluster.url, cluster=True, volatile_journal=True) as store,
        redis.RedisCluster.from_url(redis_cluster.url) as client,
    ):
        Twin(store, key, POLICY).trip()
        store.journal_put(task, "w-1", {"status": "confirmed"})
        names = [store._state_key(key), store._channel(key)]
        assert len({client.keyslot(name) for name in names}) == 1
        journal = [store._journal_key(task), store._order_key(task)]
        assert len({client.keyslot(name) for name in journal}) == 1
        owner = client.get_node_from_key(names[0])
        with redis.Redis(host=owner.host, port=owner.port) as node:
            assert node.exists(names[0]) == 1  # on the master that owns the slot
        assert store.journal_entries(task) == [{"status": "confirmed"}]


def test_journal_durability_is_checked_on_every_master(redis_cluster):
    """The cluster's masters keep no append-only file: the journal is refused."""
    from toolbreaker.errors import JournalNotDurable

    with RedisStore(redis_cluster.url, cluster=True) as store:
        assert not store.journal_durable()
        with pytest.raises(JournalNotDurable, match="appendonly no"):
            store.journal_get("t", "k")


def test_a_killed_master_denies_its_slot_until_the_replica_is_promoted(private_cluster):
    """Kill the master of a breaker's slot mid-run: calls needing it are denied, none is
    admitted from a view the store can no longer confirm, and the same store admits calls
    again once the replica has taken over."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    policy = Policy(failure_threshold=100_000, window_ms=60_000)
    with (
        RedisStore(private_cluster.url, cluster=True, backoff=0.05) as store,
        redis.RedisCluster.from_url(private_cluster.url) as client,
    ):
        breaker = Breaker(key, policy=policy, store=store, clock=store.clock, timeout=1,
                          enforce="cooperative")  # fmt: skip
        # A failure costs a round trip every time: each call asks the slot's master.
        permit = breaker.allow()
        assert permit.admitted
        permit.record("failure")
        owner = client.get_node_from_key(store._state_key(key))
        victim = next(n for n in private_cluster.nodes if n.port == owner.port)
        victim.kill()

        denied = 0
        admitted_after_denial = []
        started = time.monotonic()
        while time.monotonic() - started < HANG_GUARD:  # a hang guard: it breaks on success
            permit = breaker.allow()
            if not permit.admitted:
                assert permit.reason == "store-unavailable"
                denied += 1
                time.sleep(0.01)
                continue
            with contextlib.suppress(StoreUnavailable):  # the master may die meanwhile
                permit.record("failure")
            if denied:
                admitted_after_denial.append(time.monotonic())
                if len(admitted_after_denial) > 3:
                    break
            time.sleep(0.005)
        assert denied > 0, "no call was denied while the slot had no master"
        assert len(admitted_after_denial) > 3, "calls were not admitted after the failover"
        client.nodes_manager.initialize()  # this client sent nothing since: relearn slots
        promoted = client.get_node_from_key(store._state_key(key))
        assert promoted.port != victim.port
        state, _ = store.apply(key, Event("failure", 10**9, key, call="z", generation=0), policy)
        assert len(state.failures) >= 2


def role(port: int) -> bytes:
    """The ``ROLE`` of the node on ``port`` (b"master" or b"slave")."""
    with redis.Redis(port=port, socket_timeout=2) as node:
        return bytes(node.execute_command("ROLE")[0])


def test_no_quiet_call_is_admitted_while_a_slot_has_no_master(private_cluster):
    """Quiet calls are admitted from a trusted view without a round trip. Kill the slot's
    master: the feed loses exactly that master's subscription, so from the moment the
    replica could have taken over until it has, no call is admitted; once it has, the
    same store admits calls again and trusts its view again (resubscribed on the new
    master), without a restart."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with (
        RedisStore(private_cluster.url, cluster=True, backoff=0.05) as store,
        redis.RedisCluster.from_url(private_cluster.url) as client,
    ):
        breaker = Breaker(key, store=store, clock=store.clock, timeout=1, enforce="cooperative")

        def quiet() -> bool:
            permit = breaker.allow()
            if permit.admitted:
                permit.record("success")
            return permit.admitted

        wait_for(lambda: quiet() and breaker._view.state is not None)
        owner = client.get_node_from_key(store._state_key(key))
        victim = next(n for n in private_cluster.nodes if n.port == owner.port)
        victim_id = client.cluster_myid(owner)

        def replicas_of_victim() -> list[bytes]:
            with redis.Redis(port=owner.port) as node:
                return list(node.execute_command("CLUSTER", "REPLICAS", victim_id))

        # A new cluster's master learns of its replica a moment after the cluster says ok
        # (seen on a loaded machine: no replica listed yet, nothing to fail over to).
        wait_for(lambda: bool(replicas_of_victim()))
        replicas = replicas_of_victim()
        replica_port = int(replicas[0].split()[1].split(b"@")[0].rsplit(b":", 1)[1])
        victim.kill()

        # The view must be untrusted before the replica can take writes: from then on,
        # another process could change the state on the new master unseen.
        admitted_untrusted = denied = 0
        noticed = False
        deadline = time.monotonic() + HANG_GUARD
        while True:
            assert time.monotonic() < deadline, "the replica was never promoted"
            trusted = breaker._view.state is not None
            admitted = quiet()
            # Asked last: if the replica is not master now, it was not before either.
            if role(replica_port) == b"master":
                break
            noticed = noticed or not trusted
            if not trusted:
                admitted_untrusted += admitted
                denied += not admitted
            time.sleep(0.005)
        assert noticed, "the view was still trusted when the replica took over"
        assert admitted_untrusted == 0, "a call was admitted while the slot had no master"
        assert denied > 0
        wait_for(quiet)
        wait_for(lambda: quiet() and breaker._view.state is not None)


def test_losing_one_master_untrusts_only_the_views_of_its_slots(private_cluster):
    """Two breakers on two masters, both trusted; kill one master: only its view is
    untrusted, the other is still answered from its view (its master's subscription is
    untouched)."""
    with (
        RedisStore(private_cluster.url, cluster=True) as store,
        redis.RedisCluster.from_url(private_cluster.url) as client,
    ):
        keys: dict[int, str] = {}
        while len(keys) < 2:
            key = f"dep-{uuid.uuid4().hex[:8]}"
            keys.setdefault(client.get_node_from_key(store._state_key(key)).port, key)
        (doomed_port, doomed), (_, spared) = keys.items()
        breakers = {
            key: Breaker(key, store=store, clock=store.clock, timeout=1, enforce="cooperative")
            for key in (doomed, spared)
        }
        for breaker in breakers.values():
            wait_for(lambda b=breaker: b.allow().admitted and b._view.state is not None)
        next(n for n in private_cluster.nodes if n.port == doomed_port).kill()
        wait_for(lambda: breakers[doomed]._view.state is None)
        assert breakers[spared]._view.state is not None
        assert breakers[spared].allow().admitted


def test_a_space_lives_in_one_slot_and_lists_from_one_node(redis_cluster):
    """Every record of a space is in one hash (one slot), whatever its keys."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_cluster.url, prefix=prefix, cluster=True) as store:
        keys = [f"key-{n}" for n in range(50)]
        for key in keys:
            store.record_put("fleet", key, {"k": key})
        assert [row[0] for row in store.record_list("fleet")] == sorted(keys)
        client = redis.RedisCluster.from_url(redis_cluster.url)
        try:
            assert client.type(f"{prefix}:{{records:fleet}}:records") == b"hash"
            assert client.hlen(f"{prefix}:{{records:fleet}}:records") == 50
        finally:
            client.close()


def test_a_sharded_feed_refused_ssubscribe_backs_off(private_cluster):
    """Masters that accept connections but refuse SSUBSCRIBE (an ACL) are not hammered:
    every reconnect backs off with jitter, the view stays untrusted, round trips work."""
    for node in private_cluster.nodes:
        node.command(
            "ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all",
            "-subscribe", "-psubscribe", "-ssubscribe",
        )  # fmt: skip

    def connections() -> int:
        total = 0
        for node in private_cluster.nodes:
            with redis.Redis(port=node.port) as admin:
                total += int(admin.info("stats")["total_connections_received"])
        return total

    port = private_cluster.nodes[0].port
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with RedisStore(f"redis://nosub:pw@127.0.0.1:{port}", cluster=True) as store:
        view = store.view(key)
        store.apply(key, Event("request", 0, key, call="a"), POLICY)
        before = connections()
        time.sleep(3.0)
        reconnects = connections() - before - len(private_cluster.nodes)  # our own probes
        assert reconnects <= 40, reconnects  # ~6 rounds by the schedule, each a few
        assert view.state is None
        _, records = store.apply(key, Event("failure", 1, key, call="a", generation=0), POLICY)
        assert records[-1].reason == "qualifying-failure"
        assert view.state is None


@pytest.mark.parametrize("cluster", [False, True], ids=["server", "cluster"])
def test_any_client_failure_denies_the_call(cluster, redis_url, redis_cluster):
    """The client may raise what is not a RedisError: redis-py's cluster client lets an
    internal error of a topology change through, with the connection attached to it (for
    its metrics), so it holds a lock. The store is then unavailable: the call is denied,
    never crashed (a worker of a test once died of such an exception, unpicklable)."""
    url = redis_cluster.url if cluster else redis_url
    with RedisStore(url, cluster=cluster, volatile_journal=True) as store:
        breaker = Breaker(f"flaky-client-{uuid.uuid4()}", store=store, timeout=1.0)
        breaker.allow().record("failure")  # a state that is not quiet: calls ask the store
        permit = breaker.allow()
        assert permit.admitted

        def broken(*args, **kwargs):
            error = IndexError("list index out of range")
            error.connection = threading.Lock()  # what redis-py attaches: unpicklable
            raise error

        store._script = broken
        assert permit.record("failure") is None  # the outcome is lost, nothing raised
        rejection = breaker.allow()
        assert not rejection.admitted
        assert rejection.reason == "store-unavailable"


# A breaker key chosen so that a record space that is not tagged with the breaker's key
# (``{records:bulkhead/inventory}``, how bulkhead slots were named before they were put in
# their breaker's slot) hashes to another master than the breaker's state does.
SPREAD_KEY = "inventory"


def cluster_keys(cluster, prefix: str) -> set[str]:
    """Every key of ``prefix`` on the cluster's nodes (replicas repeat their master's)."""
    found: set[str] = set()
    for node in cluster.nodes:
        with redis.Redis(port=node.port, socket_timeout=2) as client:
            found.update(k.decode() for k in client.keys(f"{prefix}:*"))
    return found


def test_every_key_of_a_breaker_with_a_bulkhead_lives_in_its_slot(redis_cluster):
    """A breaker with ``max_concurrent`` holding a slot: its state and the record of its
    bulkhead's slots hash to one slot (``CLUSTER KEYSLOT``), its state's."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with RedisStore(redis_cluster.url, prefix=prefix, cluster=True) as store:
        breaker = Breaker(SPREAD_KEY, store=store, clock=store.clock, timeout=5,
                          max_concurrent=2, enforce="cooperative")  # fmt: skip
        breaker.allow().record("failure")  # the state is written to the store
        permit = breaker.allow()  # holds a slot: a lease in the store
        assert permit.admitted
        try:
            keys = cluster_keys(redis_cluster, prefix)
            with redis.Redis(port=redis_cluster.nodes[0].port) as node:
                slots = {name: node.execute_command("CLUSTER", "KEYSLOT", name) for name in keys}
            state = store._state_key(breaker.key)
            assert state in slots
            assert len(slots) >= 2, slots  # the state and the slots' record
            assert set(slots.values()) == {slots[state]}, slots
        finally:
            permit.record("success")


def test_a_breaker_with_a_bulkhead_needs_only_the_master_of_its_slot(private_cluster):
    """Every master but the one that owns the breaker's slot stops taking writes
    (``CLIENT PAUSE ... WRITE``: alive to the cluster, so nothing fails over). The
    breaker's calls, each of which takes a bulkhead slot in the store and gives it back,
    are still admitted."""
    with (
        RedisStore(private_cluster.url, cluster=True) as store,
        redis.RedisCluster.from_url(private_cluster.url) as client,
    ):
        breaker = Breaker(SPREAD_KEY, store=store, clock=store.clock, timeout=5,
                          max_concurrent=2, enforce="cooperative")  # fmt: skip
        assert breaker.call(lambda: "warm") == "warm"
        owner = client.get_node_from_key(store._state_key(breaker.key)).port
        masters = [n for n in private_cluster.nodes if role(n.port) == b"master"]
        others = [n for n in masters if n.port != owner]
        assert len(others) == 2
        for node in others:
            node.command("CLIENT", "PAUSE", "30000", "WRITE")
        try:
            answers = []
            for _ in range(5):
                try:
                    answers.append(breaker.call(lambda: "ok"))
                except Exception as exc:  # noqa: BLE001 - what the test reports
                    answers.append(getattr(exc, "reason", repr(exc)))
        finally:
            for node in others:
                node.command("CLIENT", "UNPAUSE")
        assert answers == ["ok"] * 5
        assert breaker.stats.record_faults == 0
