"""Published boundary sheets: publishing, following, refusing (one process, MemoryStore).

Cross-process following over real stores is in ``tests/stores/test_fleet.py``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from toolbreaker import Registry, publish_policy
from toolbreaker.core._breaker.state import OPEN
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.runtime._fleet._published import POLICY_SPACE, read_published
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock

V1 = """\
[defaults]
timeout_ms = 1000
enforce = "cooperative"

[search.read]
failure_threshold = 2
cooldown_ms = 60000
"""

V2 = V1.replace("failure_threshold = 2", "failure_threshold = 5").replace(
    "cooldown_ms = 60000", "cooldown_ms = 90000"
)


def write(tmp_path: Path, text: str, name: str = "sheet.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def wait_for(predicate, *, seconds: float = 20.0) -> None:
    """Bounded polling: never a timed assertion."""
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def fail(breaker) -> None:
    with pytest.raises(ConnectionError):
        breaker.call(lambda: (_ for _ in ()).throw(ConnectionError("down")))


def test_publish_validates_as_from_toml_does(tmp_path):
    """A bad sheet is the same located PolicyError as from_toml's; nothing is published."""
    store = MemoryStore()
    bad = write(tmp_path, V1 + "\n[billing.write]\nfailure_threshold = 0\n")
    with pytest.raises(PolicyError) as published:
        publish_policy(store, bad)
    with pytest.raises(PolicyError) as loaded:
        Registry.from_toml(bad)
    assert published.value.located() == loaded.value.located()
    assert published.value.line == 10
    assert read_published(store) is None


def test_revisions_grow_and_name_who_when_and_why(tmp_path):
    """Each publication is the next revision, with its digest, author, time and note."""
    store = MemoryStore()
    first = publish_policy(store, write(tmp_path, V1), note="first", by="ops@host")
    second = publish_policy(store, write(tmp_path, V2))
    assert (first.revision, second.revision) == (1, 2)
    current = read_published(store)
    assert current is not None
    assert current.revision == 2
    assert current.text == V2
    assert current.sha256 == second.sha256
    assert first.note == "first"
    assert first.published_by == "ops@host"
    assert "@" in current.published_by
    assert current.published_at.endswith("+00:00")


def test_concurrent_publishers_never_lose_a_revision(tmp_path):
    """Sixteen publishers at once: sixteen distinct revisions, 1 to 16."""
    store = MemoryStore()
    path = write(tmp_path, V1)
    revisions: list[int] = []
    lock = threading.Lock()

    def publish(n: int) -> None:
        sheet = publish_policy(store, path, note=f"n{n}")
        with lock:
            revisions.append(sheet.revision)

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(revisions) == list(range(1, 17))


def test_a_registry_follows_and_keeps_state(tmp_path):
    """A new revision changes the policy of a live breaker; its open state stays."""
    store = MemoryStore()
    clock = FakeClock()
    publish_policy(store, write(tmp_path, V1))
    registry = Registry.from_store(store, follow=False, clock=clock)
    breaker = registry.get("search", "read")
    fail(breaker)
    fail(breaker)
    before = breaker.state
    assert before.phase == OPEN
    publish_policy(store, write(tmp_path, V2), note="more patience")
    assert registry.follower is not None
    assert registry.follower.refresh()
    assert breaker.policy.failure_threshold == 5
    assert breaker.state == before  # same phase, same deadline: nothing was reset
    assert registry.published is not None
    assert registry.published.revision == 2
    registry.close()


def test_transitions_name_the_version_they_were_decided_under(tmp_path):
    """After a swap, every record carries the new policy's version."""
    store = MemoryStore()
    publish_policy(store, write(tmp_path, V1))
    registry = Registry.from_store(store, follow=False, clock=FakeClock())
    breaker = registry.get("search", "read")
    seen = []
    breaker.add_listener(lambda record, _: seen.append(record))
    breaker.call(lambda: 1)
    assert seen[-1].policy_version == breaker.policy.version
    old = breaker.policy.version
    publish_policy(store, write(tmp_path, V2))
    assert registry.follower is not None
    assert registry.follower.refresh()
    breaker.call(lambda: 1)
    assert seen[-1].policy_version == breaker.policy.version != old
    assert "policy_version" not in seen[-1].to_dict()  # receipts keep their bytes
    registry.close()


def test_a_call_admitted_under_one_policy_settles_under_it(tmp_path):
    """A swap between admission and settlement never lands mid-call."""
    store = MemoryStore()
    publish_policy(store, write(tmp_path, V1))
    registry = Registry.from_store(store, follow=False, clock=FakeClock())
    breaker = registry.get("search", "read")
    seen = []
    breaker.add_listener(lambda record, _: seen.append(record))
    permit = breaker.allow()
    old = breaker.policy
    publish_policy(store, write(tmp_path, V2))
    assert registry.follower is not None
    assert registry.follower.refresh()
    assert permit.policy is old
    assert breaker.policy is not old
    record = permit.record("failure")
    assert record is not None
    assert record.policy_version == old.version
    registry.close()


def test_an_invalid_revision_is_refused_and_the_last_valid_one_stays(tmp_path, caplog):
    """A revision that does not validate, or a corrupt record, is refused and counted."""
    store = MemoryStore()
    publish_policy(store, write(tmp_path, V1))
    registry = Registry.from_store(store, follow=False, clock=FakeClock())
    breaker = registry.get("search", "read")
    follower = registry.follower
    assert follower is not None
    bad = V1.replace("failure_threshold = 2", "failure_threshold = -1 # sk-live-secret123456")
    published = read_published(store)
    assert published is not None
    import hashlib

    store.record_put(
        POLICY_SPACE,
        "default",
        {
            "schema": "toolbreaker.policy/v1",
            "revision": 2,
            "sha256": hashlib.sha256(bad.encode()).hexdigest(),
            "sheet": bad,
        },
    )
    assert not follower.refresh()
    assert follower.refused == 1
    assert breaker.policy.failure_threshold == 2
    assert "refused" in caplog.text
    assert "default@2" in caplog.text
    # A record whose text does not match its digest: refused too.
    store.record_put(
        POLICY_SPACE,
        "default",
        {"schema": "toolbreaker.policy/v1", "revision": 3, "sha256": "0" * 64, "sheet": V2},
    )
    assert not follower.refresh()
    assert follower.refused == 2
    assert breaker.policy.failure_threshold == 2
    assert follower.current is not None
    assert follower.current.revision == 1
    # The next good revision is adopted.
    publish_policy(store, write(tmp_path, V2))
    assert follower.refresh()
    assert breaker.policy.failure_threshold == 5
    registry.close()


class _Unreachable(MemoryStore):
    down = False

    def record_get(self, space, key):
        if self.down:
            raise StoreUnavailable("store down")
        return super().record_get(space, key)


def test_a_store_that_cannot_be_read_keeps_the_last_valid_revision(tmp_path):
    """Polls that fail are counted; the policy stays."""
    store = _Unreachable()
    publish_policy(store, write(tmp_path, V1))
    registry = Registry.from_store(store, follow=False, clock=FakeClock())
    breaker = registry.get("search", "read")
    store.down = True
    assert registry.follower is not None
    assert not registry.follower.refresh()
    assert registry.follower.read_errors == 1
    assert breaker.policy.failure_threshold == 2
    registry.close()


def test_from_store_refuses_to_start_without_a_valid_sheet(tmp_path):
    """Nothing published, or a published sheet that does not validate: no registry."""
    store = MemoryStore()
    with pytest.raises(PolicyError, match="no boundary sheet"):
        Registry.from_store(store)
    import hashlib

    bad = "[defaults]\ntimeout = -1\n"
    store.record_put(
        POLICY_SPACE,
        "default",
        {
            "schema": "toolbreaker.policy/v1",
            "revision": 1,
            "sha256": hashlib.sha256(bad.encode()).hexdigest(),
            "sheet": bad,
        },
    )
    with pytest.raises(PolicyError) as info:
        Registry.from_store(store)
    assert info.value.located().startswith("default@1:2:")


def test_the_follower_thread_picks_up_a_new_revision(tmp_path):
    """follow() polls on a thread: a new revision arrives within the poll bound."""
    store = MemoryStore()
    publish_policy(store, write(tmp_path, V1))
    registry = Registry.from_store(store, poll=0.05)
    breaker = registry.get("search", "read")
    publish_policy(store, write(tmp_path, V2))
    wait_for(lambda: breaker.policy.failure_threshold == 5)
    assert registry.follower is not None
    assert registry.follower.adopted == 1
    registry.close()


def test_a_plain_registry_can_follow_and_scoped_breakers_follow_too(tmp_path):
    """follow() on a registry built from a file; a scoped row's tenants take the row too."""
    scoped = V1 + 'scope = "tenant"\n'
    store = MemoryStore()
    registry = Registry.from_toml(write(tmp_path, scoped), store=store, clock=FakeClock())
    breaker = registry.get("search", "read")
    tenant = breaker.for_scope("acme")
    publish_policy(store, write(tmp_path, V2 + 'scope = "tenant"\n'))
    follower = registry.follow(poll=30)
    assert follower.current is not None
    assert follower.current.revision == 1
    assert tenant.policy.failure_threshold == 5
    assert breaker.policy.failure_threshold == 5
    registry.close()


def test_poll_is_bounded(tmp_path):
    """A poll interval outside 0.05 s .. 1 h is a PolicyError."""
    store = MemoryStore()
    publish_policy(store, write(tmp_path, V1))
    with pytest.raises(PolicyError) as info:
        Registry.from_store(store, poll=0)
    assert info.value.field == "poll"
