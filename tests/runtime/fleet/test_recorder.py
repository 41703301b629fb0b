"""TraceRecorder: live breakers record a trace that replays to the same transitions."""

from __future__ import annotations

import threading

import pytest

from toolbreaker import Policy, Registry, TraceRecorder
from toolbreaker.core import read_trace, replay
from toolbreaker.testing import FakeClock, capture_transitions


class Unavailable(Exception):
    status_code = 503


def fail() -> None:
    raise Unavailable


def test_recorded_live_traffic_replays_to_the_same_transitions(tmp_path):
    """Record a breaker through an outage and recovery; the replay matches record for
    record, including the lease expiry the core makes itself."""
    clock = FakeClock()
    policy = Policy(failure_threshold=2, cooldown_ms=1_000, lease_ttl_ms=500)
    breakers = Registry(policy, clock=clock, default_timeout=0.5, default_enforce="cooperative")
    search = breakers.get("search")
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as recorder, capture_transitions(search) as live:
        recorder.attach(breakers)
        search.call(lambda: "ok")
        for _ in range(2):
            with pytest.raises(Unavailable):
                search.call(fail)
        clock.advance(1_000)
        probe = search.allow()  # a probe that is never settled: its lease expires
        assert probe.admitted
        clock.advance(600)
        with pytest.raises(Exception, match="rejected"):
            search.call(lambda: "ok")
        clock.advance(1_000)
        search.call(lambda: "ok")
        search.call(lambda: "ok")
    receipt = replay([event for _, event in read_trace(path)], policy)
    replayed = receipt["dependencies"]["search"]["transitions"]
    assert [r["reason"] for r in replayed] == [r.reason for r in live]
    assert "lease-expired" in [r.reason for r in live]
    assert receipt["dependencies"]["search"]["final_state"]["state"] == "closed"


def test_recorder_is_thread_safe(tmp_path):
    """Concurrent calls write whole lines."""
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as recorder:
        recorder.attach(breakers.get("a"), breakers.get("b"))
        threads = [
            threading.Thread(target=lambda b=b: [breakers.get(b).call(int) for _ in range(50)])
            for b in ("a", "b") * 4
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = read_trace(path)
    assert len(lines) == 8 * 50 * 2
    for dependency in ("a", "b"):
        times = [event.at for _, event in lines if event.dependency == dependency]
        assert times == sorted(times)
    replay([event for _, event in lines], Policy())  # replays without a time error
