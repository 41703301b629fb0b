"""One list of breakers: observers attach to a registry, a run guard or a breaker and see
every breaker it holds, now and later (scoped breakers too), until they detach."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from toolbreaker import Breaker, Policy, Registry, RunGuard, TraceRecorder, scope
from toolbreaker.core import read_trace, replay
from toolbreaker.errors import PolicyError
from toolbreaker.runtime import Attachment
from toolbreaker.runtime._fleet._attach import breakers_of
from toolbreaker.testing import FakeClock, capture_transitions


class Unavailable(Exception):
    status_code = 503


def fail() -> None:
    raise Unavailable


POLICY = Policy(failure_threshold=2, cooldown_ms=1_000)


def registry(clock: FakeClock, **sheet: object) -> Registry:
    """A registry of cooperative breakers with ``sheet``'s rows (none by default)."""
    return Registry.from_dict(
        {
            "defaults": {
                "timeout_ms": 1000,
                "enforce": "cooperative",
                "failure_threshold": 2,
                "cooldown_ms": 1_000,
            },
            **sheet,
        },
        clock=clock,
    )


def outage(breaker: Breaker, clock: FakeClock) -> None:
    """A success, two failures (open), a rejected re-call, a probe that closes it."""
    breaker.call(lambda: "ok")
    for _ in range(2):
        with pytest.raises(Unavailable):
            breaker.call(fail)
    breaker.guard(lambda: "ok")()
    clock.advance(1_000)
    breaker.call(lambda: "ok")


def reasons(path: object) -> dict[str, list[str]]:
    """The replayed transitions of a recorded trace, by dependency."""
    receipt = replay([event for _, event in read_trace(path)], POLICY)
    return {
        name: [t["reason"] for t in dependency["transitions"]]
        for name, dependency in receipt["dependencies"].items()
    }


def test_a_recorder_attached_to_a_registry_records_breakers_made_later(tmp_path):
    """docs/guide/replay.md's pattern: attach to the registry first, the breakers come later (the
    way every adapter makes them); each one is recorded from its first call."""
    clock = FakeClock()
    breakers = registry(clock)
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as recorder:
        recorder.attach(breakers)
        search = breakers.get("search")
        with capture_transitions(search) as live:
            outage(search, clock)
        breakers.get("orders", "read").call(lambda: "ok")
    assert len(live) > 5
    assert reasons(path)["search"] == [r.reason for r in live]
    assert reasons(path)["orders:read"] == ["call-admitted", "success"]


def test_a_recorder_records_the_notices_of_scoped_breakers(tmp_path):
    """A scoped row makes one breaker per tenant on first use: its transitions and its
    degradation choices reach the recorder like the row's own (the row's breaker existed
    before the recorder attached, the tenant's did not)."""
    clock = FakeClock()
    breakers = registry(clock, search={"read": {"scope": "tenant", "degrade": ["omit"]}})
    trace, notices = io.StringIO(), io.StringIO()
    recorder = TraceRecorder(trace, notices=notices)
    search = breakers.get("search", "read")
    recorder.attach(breakers)
    with scope(tenant="acme"):
        for _ in range(3):
            step = search.begin("search", {"q": "lamp"})
            if step.answer is None:
                step.failed(Unavailable())
    recorder.close()
    keys = {json.loads(line)["dependency"] for line in trace.getvalue().splitlines()}
    assert keys == {"search[tenant=acme]:read"}
    choices = [json.loads(line) for line in notices.getvalue().splitlines()]
    # The failure that opened it and the call rejected after: both answered by omission.
    assert [(c["breaker"], c["mode"]) for c in choices] == [
        ("search[tenant=acme]:read", "omit")
    ] * 2


def test_a_recorder_attached_to_a_run_guard_records_its_tools_breakers(tmp_path):
    """A run guard's tools' breakers are recorded, a tool added after attach included."""
    clock = FakeClock()
    breakers = registry(clock)
    guard = RunGuard("task-1", clock=clock)
    guard.tool("search", breaker=breakers.get("search"))(lambda q: {"hits": [q]})
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as recorder:
        recorder.attach(guard)
        guard.call("search", {"q": "lamp"})
        guard.tool("orders", breaker=Breaker("orders", timeout=1.0, clock=clock))(
            lambda order: {"order": order}
        )
        guard.call("orders", {"order": "A-1"})
    assert reasons(path) == {
        "search": ["call-admitted", "success"],
        "orders": ["call-admitted", "success"],
    }


def test_one_breaker_reached_two_ways_is_recorded_once(tmp_path):
    """Attached to a registry and to a run guard whose tool uses one of its breakers,
    the recorder writes each record once."""
    clock = FakeClock()
    breakers = registry(clock)
    guard = RunGuard("task-1", clock=clock)
    guard.tool("search", breaker=breakers.get("search"))(lambda q: {"hits": [q]})
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as recorder:
        recorder.attach(breakers, guard)
        recorder.attach(guard)
        guard.call("search", {"q": "lamp"})
    assert reasons(path) == {"search": ["call-admitted", "success"]}
    assert len(read_trace(path)) == 2


def test_detach_removes_the_recorder_from_current_and_future_breakers(tmp_path):
    """After detach nothing more is recorded, from the breakers there were or new ones;
    detaching twice, then closing, is harmless."""
    clock = FakeClock()
    breakers = registry(clock)
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as recorder:
        detach = recorder.attach(breakers)
        breakers.get("search").call(lambda: "ok")
        detach()
        breakers.get("search").call(lambda: "ok")
        breakers.get("orders").call(lambda: "ok")
        detach()
    assert reasons(path) == {"search": ["call-admitted", "success"]}


# -- the mechanism ----------------------------------------------------------------------------


def test_an_attachment_lists_every_breaker_it_hears_scoped_ones_included():
    """breakers() is what the attachment hears now: the registry's breakers, a breaker
    attached on its own, and each scoped row's live tenant breakers."""
    clock = FakeClock()
    breakers = registry(clock, search={"read": {"scope": "tenant"}})
    alone = Breaker("alone", timeout=1.0, clock=clock)
    seen = Attachment(transition=lambda record, breaker: None)
    seen.attach(breakers, alone)
    orders = breakers.get("orders")
    with scope(tenant="acme"):
        breakers.get("search", "read").call(lambda: "ok")
    tenant = breakers.get("search", "read").for_scope("acme")
    assert set(seen.breakers()) == {alone, orders, breakers.get("search", "read"), tenant}
    assert set(breakers_of(breakers)) == {orders, breakers.get("search", "read"), tenant}
    assert seen.attached
    seen.close()
    assert not seen.attached
    assert seen.breakers() == ()


def test_a_breaker_reached_by_two_targets_stays_attached_until_both_detach():
    """Detaching one target keeps the listener on a breaker another attached target
    still reaches; detaching both removes it."""
    clock = FakeClock()
    breakers = registry(clock)
    search = breakers.get("search")
    guard = RunGuard("task-1", clock=clock)
    guard.tool("search", breaker=search)(lambda q: {"hits": [q]})
    records: list[str] = []
    seen = Attachment(transition=lambda record, breaker: records.append(record.reason))
    from_registry = seen.attach(breakers)
    from_guard = seen.attach(guard)
    from_registry()
    search.call(lambda: "ok")
    assert records == ["call-admitted", "success"]
    from_guard()
    search.call(lambda: "ok")
    assert records == ["call-admitted", "success"]


def test_a_raising_listener_on_a_late_breaker_never_changes_the_outcome():
    """A listener attached through the registry that raises on a breaker made later:
    the call returns its result, the fault is counted on that breaker."""
    clock = FakeClock()
    breakers = registry(clock)

    def broken(record: object, breaker: object) -> None:
        raise RuntimeError("metrics backend down")

    Attachment(transition=broken).attach(breakers)
    search = breakers.get("search")
    assert search.call(lambda: "ok") == "ok"
    assert search.stats.listener_errors == 2  # call-admitted, success


def test_a_raising_watcher_never_stops_a_breaker_being_made():
    """A registry watcher that raises is counted on the breaker and logged; get() still
    hands the breaker out and it works."""
    clock = FakeClock()
    breakers = registry(clock)

    def broken(breaker: Breaker) -> None:
        raise RuntimeError("observer bug")

    breakers.watch_breakers(broken)
    search = breakers.get("search")
    assert search.call(lambda: "ok") == "ok"
    assert search.stats.listener_errors == 1


def test_a_watcher_hears_each_breaker_once_and_stops_when_removed():
    """watch_breakers tells of the breakers there are, then of each new one, once; the
    remover stops it (and removing twice does nothing)."""
    clock = FakeClock()
    breakers = registry(clock)
    first = breakers.get("first")
    heard: list[str] = []
    remove = breakers.watch_breakers(lambda breaker: heard.append(breaker.key))
    breakers.get("second")
    breakers.get("second")
    breakers.get("first")
    remove()
    remove()
    breakers.get("third")
    assert heard == [first.key, "second"]


def test_breakers_made_while_attaching_are_each_attached_once():
    """Threads making breakers while another attaches: every breaker ends up with the
    listener exactly once (one record per event), whichever came first."""
    clock = FakeClock()
    breakers = registry(clock)
    records: list[str] = []
    seen = Attachment(transition=lambda record, breaker: records.append(record.dependency))
    start = threading.Barrier(5)

    def make(n: int) -> None:
        start.wait()
        for i in range(50):
            breakers.get(f"dep-{n}-{i}")

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    start.wait()
    seen.attach(breakers)
    for thread in threads:
        thread.join()
    assert len(breakers) == 200
    for breaker in breakers:
        breaker.call(lambda: "ok")
    assert sorted(records) == sorted(b.key for b in breakers for _ in range(2))


def test_attaching_to_nothing_or_to_the_wrong_thing_is_refused():
    """attach() with no target, or with something that holds no breakers, raises a
    PolicyError naming the target, and attaches nothing."""
    seen = Attachment(transition=lambda record, breaker: None)
    with pytest.raises(PolicyError, match="attach needs") as nothing:
        seen.attach()
    assert nothing.value.field == "target"
    search = Breaker("search", timeout=1.0)
    with pytest.raises(PolicyError, match="cannot attach to str"):
        seen.attach(search, "search")
    assert not seen.attached
    assert seen.breakers() == ()


# -- faults around the call -------------------------------------------------------------------


def test_a_full_disk_never_changes_an_outcome_and_is_counted(caplog):
    """A recorder writing to a full disk (/dev/full): every call returns its result, the
    failed writes are counted on the recorder and logged once per failing streak."""
    clock = FakeClock()
    breakers = registry(clock)
    recorder = TraceRecorder("/dev/full")
    recorder.attach(breakers)
    with caplog.at_level(logging.ERROR, logger="toolbreaker"):
        results = [breakers.get("search").call(lambda: "ok") for _ in range(3)]
    recorder.close()
    assert results == ["ok"] * 3
    assert recorder.write_errors >= 6
    assert recorder.recorded == 0
    assert breakers.get("search").stats.listener_errors == 0
    failures = [r for r in caplog.records if "a write failed" in r.getMessage()]
    assert len(failures) == 1


def test_a_recorder_closed_without_being_attached_says_it_recorded_nothing(tmp_path, caplog):
    """No false all-clear: a recorder that was never attached logs that the trace is
    empty because it was attached to nothing."""
    with caplog.at_level(logging.WARNING, logger="toolbreaker"), TraceRecorder(tmp_path / "t"):
        pass
    assert "closed without being attached to anything" in caplog.text
    caplog.clear()
    with TraceRecorder(tmp_path / "u") as recorder:
        recorder.attach(Registry())
    assert "without being attached" not in caplog.text


def test_capture_transitions_follows_a_registry_through_the_block():
    """capture_transitions(registry) collects the records of breakers the registry
    makes while the block runs, and nothing after it."""
    clock = FakeClock()
    breakers = registry(clock)
    with capture_transitions(breakers) as records:
        breakers.get("search").call(lambda: "ok")
    breakers.get("search").call(lambda: "ok")
    assert [(r.dependency, r.reason) for r in records] == [
        ("search", "call-admitted"),
        ("search", "success"),
    ]
