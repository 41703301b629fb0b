"""The history's pure rules: requests a replay needs, and time in the store's order."""

from __future__ import annotations

from typing import Any

from toolbreaker import Event
from toolbreaker.core.breaker.history import in_store_order, record_of, replayable


def test_the_history_is_written_in_replayable_form():
    """Each outcome whose request changed nothing gets a request just before it."""
    with_requests = list(
        replayable(
            [
                {"kind": "transition", "key": "k", "seq": "1", "wall": 1.0, "record": rec("f", 1)},
                {"kind": "transition", "key": "k", "seq": "2", "wall": 2.0, "record": rec("f", 2)},
            ]
        )
    )
    assert [(e["record"]["event"]["type"], e["seq"]) for e in with_requests] == [
        ("request", "1"),
        ("failure", "1"),
        ("request", "2"),
        ("failure", "2"),
    ]


def rec(call: str, at: int) -> dict[str, Any]:
    return {
        "event": {"type": "failure", "at": at, "call": f"{call}{at}"},
        "from": "closed",
        "to": "closed",
        "attempted": False,
        "rejected": False,
        "reason": "qualifying-failure",
        "generation": 0,
        "open_until": None,
    }


def test_a_request_in_the_history_is_not_written_twice():
    """An outcome whose request (a probe) is in the history gets no second request."""
    probe = {**rec("p", 1), "event": {"type": "request", "at": 1, "call": "p1"}}
    probe.update({"from": "open", "to": "half_open", "reason": "probe-admitted"})
    out = list(
        replayable(
            [
                {"kind": "transition", "key": "k", "seq": "1", "wall": 1.0, "record": probe},
                {"kind": "transition", "key": "k", "seq": "2", "wall": 2.0, "record": rec("p", 1)},
            ]
        )
    )
    assert [e["record"]["event"]["type"] for e in out] == ["request", "failure"]
    assert record_of(out[0]) is not None


def test_an_event_is_applied_no_earlier_than_the_state_it_meets():
    """Earlier: moved to the floor, nothing else changed; not earlier: the same event."""
    event = Event("failure", 50, "k", call="c", generation=3, retry_after_ms=9)
    moved = in_store_order(event, 100)
    assert (moved.at, moved.call, moved.generation, moved.retry_after_ms) == (100, "c", 3, 9)
    assert in_store_order(event, 50) is event
    assert in_store_order(event, 0) is event
