"""Limits are traced, not only counted: a ``saturated`` or ``deferred`` answer is a notice.

A bulkhead's (or a worker pool's) ``saturated`` answer and a run guard's per-turn
``deferred`` answer reach listeners as ``toolbreaker.limit/v1`` records, the way the
degradation matrix's choices reach them as ``toolbreaker.degrade/v1`` records; the
TraceRecorder keeps both in a notices file of its own (the breaker trace, and so every
receipt, is unchanged), and the event stream the dashboard reads carries them.
"""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import pytest

from toolbreaker import Breaker, Budget, GuardedTool, Registry, RunGuard, TraceRecorder
from toolbreaker.cli import main
from toolbreaker.errors import CircuitOpen
from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher
from toolbreaker.testing import FakeClock


def saturated_breaker(**options: Any) -> Breaker:
    return Breaker("search", timeout=5, max_concurrent=1, enforce="cooperative", **options)


def test_a_saturated_bulkhead_answer_is_a_limit_notice():
    """The answer is given at once as before; listeners get one record per answer."""
    breaker = saturated_breaker()
    heard: list[dict[str, Any]] = []
    breaker.degradation.add_listener(heard.append)
    first = breaker.begin("search", {"q": "a"})
    second = breaker.begin("search", {"q": "b"})
    assert second.answer["reason"] == "saturated"
    [record] = heard
    assert record["schema"] == "toolbreaker.limit/v1"
    assert record["kind"] == "saturated"
    assert record["by"] == "bulkhead"
    assert record["limit"] == 1
    assert record["breaker"] == breaker.key
    assert record["retry_after_ms"] == 5000
    assert isinstance(record["at"], int)
    json.dumps(record)  # JSON-ready
    first.succeeded({"ok": True})
    assert breaker.stats.saturated == 1


def test_a_call_refused_for_hung_calls_is_a_limit_notice():
    """A sync call refused because hung calls hold the workers it may use is a notice of
    its own kind, ``hung``, naming how many are hung and the limit."""
    breaker = Breaker("search", timeout=0.3, max_workers=2)  # one worker kept for probes
    heard: list[dict[str, Any]] = []
    breaker.degradation.add_listener(heard.append)
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            breaker.call(release.wait, 10)  # runs on past its deadline
        with pytest.raises(CircuitOpen) as info:
            breaker.call(lambda: None)
        assert info.value.reason == "hung"
        [record] = heard
        assert record["schema"] == "toolbreaker.limit/v1"
        assert (record["kind"], record["hung"], record["limit"]) == ("hung", 1, 1)
        assert record["retry_after_ms"] == breaker.policy.cooldown_ms
        assert (record["dependency"], record["operation"]) == ("search", "default")
        json.dumps(record)  # JSON-ready
    finally:
        release.set()
        breaker.close()


def test_a_listener_that_raises_never_changes_the_saturated_answer():
    """Counted in the degradation's faults and logged; the answer stands."""
    breaker = saturated_breaker()

    def broken(record: dict[str, Any]) -> None:
        raise RuntimeError("listener down")

    breaker.degradation.add_listener(broken)
    breaker.begin("search", {"q": "a"})
    assert breaker.begin("search", {"q": "b"}).answer["reason"] == "saturated"
    assert breaker.degradation.faults == 1


def turn_guard(limit: int = 2) -> RunGuard:
    guard = RunGuard("task-1", budget=Budget(max_calls_per_turn=limit))
    guard.add_tool(GuardedTool(name="search", fn=lambda q: {"q": q}))
    return guard


def test_a_deferred_answer_is_a_limit_notice():
    """Calls past ``max_calls_per_turn`` are deferred; each deferral is one record."""
    guard = turn_guard(2)
    heard: list[dict[str, Any]] = []
    guard.notices.add_listener(heard.append)
    guard.mark_turn(1)
    answers = [guard.call("search", {"q": str(n)}) for n in range(4)]
    assert [bool(a.get("deferred")) for a in answers] == [False, False, True, True]
    assert [(r["schema"], r["kind"], r["tool"], r["limit"]) for r in heard] == [
        ("toolbreaker.limit/v1", "deferred", "search", 2)
    ] * 2
    assert heard[0]["task"] == "task-1"
    assert guard.state.deferred == 2


def test_no_listener_no_notice_and_no_cost():
    """Without listeners nothing is built (the answers are exactly as before)."""
    guard = turn_guard(1)
    guard.mark_turn(1)
    guard.call("search", {"q": "a"})
    assert guard.call("search", {"q": "b"})["deferred"] is True
    assert not guard.notices


def test_the_recorder_keeps_notices_apart_and_the_trace_unchanged(tmp_path, seed_policy):
    """With ``notices=``, saturation, deferral and degradation choices go to their own
    JSON Lines file; the breaker trace has exactly the lines it has without it, so
    ``toolbreaker replay`` gives the same receipt."""

    def run(notices: io.StringIO | None) -> str:
        trace = io.StringIO()
        clock = FakeClock()
        registry = Registry.from_dict(
            {
                "defaults": {"timeout_ms": 5000, "enforce": "cooperative"},
                "search": {"read": {"tool": "search", "max_concurrent": 1, "degrade": "omit"}},
            },
            clock=clock,
        )
        breaker = registry.get("search", "read")
        guard = turn_guard(1)
        with TraceRecorder(trace, notices=notices) as recorder:
            recorder.attach(registry, guard)
            held = breaker.begin("search", {"q": "a"})
            assert breaker.begin("search", {"q": "b"}).answer["reason"] == "saturated"
            held.succeeded({"ok": True})
            breaker.isolate()
            assert breaker.begin("search", {"q": "c"}).answer["degradation"] == "omit"
            guard.mark_turn(1)
            guard.call("search", {"q": "x"})
            assert guard.call("search", {"q": "y"})["deferred"] is True
        return trace.getvalue()

    notices = io.StringIO()
    with_notices = run(notices)
    assert with_notices == run(None)
    kinds = [
        (r["schema"], r.get("kind"), r.get("mode"))
        for r in map(json.loads, notices.getvalue().splitlines())
    ]
    assert kinds == [
        ("toolbreaker.limit/v1", "saturated", None),
        ("toolbreaker.degrade/v1", None, "omit"),
        ("toolbreaker.limit/v1", "deferred", None),
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text(with_notices)
    assert main(["replay", str(path)]) == 0


def test_the_event_stream_carries_notices_and_readers_skip_what_they_do_not_know(capsys):
    """The dashboard feed gets ``kind: limit`` and ``kind: degrade`` entries; export and
    the dashboard's fold keep working on a stream that holds them."""
    from toolbreaker.cli._board import Board  # the dashboard's state

    stream = MemoryStream()
    publisher = StreamPublisher(stream)
    breaker = saturated_breaker(degrade="omit")
    guard = turn_guard(1)
    publisher.attach(breaker, guard)
    held = breaker.begin("search", {"q": "a"})
    breaker.begin("search", {"q": "b"})
    held.succeeded({"ok": True})
    guard.mark_turn(1)
    guard.call("search", {"q": "x"})
    guard.call("search", {"q": "y"})
    entries = [entry for _, entry in stream.read(None, 1000)]
    notices = [e for e in entries if e["kind"] in ("limit", "degrade")]
    assert [(e["kind"], e["notice"]["kind"]) for e in notices] == [
        ("limit", "saturated"),
        ("limit", "deferred"),
    ]
    assert all(e["schema"] == "toolbreaker.stream/v1" and "wall" in e for e in notices)
    board = Board()
    board.feed(entries)
    assert board.entries == len(entries)


@pytest.mark.parametrize("kind", ["saturated", "deferred"])
def test_notice_records_hold_no_secret(kind):
    """A task id or tool name carrying a secret is masked in the record."""
    secret = "sk-proj-" + "A1b2C3d4" * 5
    heard: list[dict[str, Any]] = []
    if kind == "saturated":
        breaker = Breaker(f"svc-{secret}", timeout=5, max_concurrent=1, enforce="cooperative")
        breaker.degradation.add_listener(heard.append)
        breaker.begin("t", {})
        breaker.begin("t", {})
    else:
        guard = RunGuard(f"task-{secret}", budget=Budget(max_calls_per_turn=1))
        guard.add_tool(GuardedTool(name="search", fn=lambda q: q))
        guard.notices.add_listener(heard.append)
        guard.mark_turn(1)
        guard.call("search", {"q": "a"})
        guard.call("search", {"q": "b"})
    assert heard
    assert secret not in json.dumps(heard)


def test_a_degradation_choice_is_masked_where_it_is_made():
    """A tool name carrying a secret never reaches a listener of degradation choices
    unmasked (lesson: mask where the object is built, not where it is printed)."""
    secret = "sk-proj-" + "A1b2C3d4" * 5
    registry = Registry.from_dict(
        {"search": {"read": {"tool": "search", "timeout_ms": 5000, "degrade": ["omit"]}}}
    )
    breaker = registry.get("search", "read")
    heard: list[dict[str, Any]] = []
    breaker.degradation.add_listener(heard.append)
    breaker.isolate("maintenance")
    step = breaker.begin(f"search-{secret}", {"q": "lamp"})
    assert step.answer is not None
    [record] = heard
    assert record["schema"] == "toolbreaker.degrade/v1"
    assert record["mode"] == "omit"
    assert secret not in json.dumps(record)
    assert "[REDACTED]" in record["tool"]
