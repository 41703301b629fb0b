"""The Redis store on a real Redis Cluster (3 masters, 3 replicas on 127.0.0.1).

The conformance suite through redis-py's cluster client; every key of a breaker in one
slot; and a master killed during a run: calls that need the slot are denied
(``store-unavailable``) until its replica is promoted, then admitted again by the same
store, without a restart.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
import redis
from conformance import POLICY, RecordsContract, StoreContract, Twin

from toolbreaker import Breaker, Event, Policy, StoreUnavailable
from toolbreaker.stores import RedisStore

pytestmark = pytest.mark.slow


class TestRedisClusterStore(StoreContract, RecordsContract):
    @pytest.fixture
    def store(self, redis_cluster):
        with RedisStore(redis_cluster.url, cluster=True, volatile_journal=True) as store:
            yield store

    @pytest.fixture
    def twin(self, redis_cluster):
        with RedisStore(redis_cluster.url, cluster=True, volatile_journal=True) as twin:
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
        while time.monotonic() - started < 20:
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
