"""One list of breakers: observers attach to a registry, a run guard or a breaker and see
every breaker it holds, now and later (scoped breakers too), until they detach."""

from __future__ import annotations

import io
import json

import pytest

from toolbreaker import Breaker, Policy, Registry, RunGuard, TraceRecorder, replay, scope
from toolbreaker.core import read_trace
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
                "timeout": 1.0,
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
    """The README's pattern: attach to the registry first, the breakers come later (the
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
