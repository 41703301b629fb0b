"""Every answer of the degradation matrix, pinned: what the model and the user read."""

from __future__ import annotations

from toolbreaker.runtime._result import (
    degraded_result,
    dependency_stop_result,
    handoff_result,
    omitted_result,
    queued_result,
    stale_result,
)


def test_omitted_result_is_pinned():
    """The exact omitted result shape."""
    assert omitted_result("search", {"q": "cable"}, reason="open") == {
        "degradation": "omit",
        "instruction": 'The tool "search" is out of service (open). Go on without it: in your '
        'answer, say that the data "search" would have returned for {"q": '
        '"cable"} is missing. Do not call it again in this run, and do not '
        "estimate or invent the data.",
        "missing": 'the data "search" would have returned for {"q": "cable"}',
        "ok": False,
        "reason": "open",
        "retryable": False,
        "tool": "search",
        "tool_unavailable": True,
        "user_message": 'Some data is unavailable right now: the data "search" would have '
        'returned for {"q": "cable"}. This answer was made without it.',
    }


def test_stale_result_is_pinned():
    """The exact stale result shape."""
    assert stale_result(
        "search",
        {"r": 1},
        label="as of 14:02 UTC, 7 minutes old",
        as_of="2026-11-30T14:02:00Z",
        age_seconds=420,
    ) == {
        "age_seconds": 420,
        "as_of": "2026-11-30T14:02:00Z",
        "degradation": "stale",
        "instruction": 'The tool "search" is out of service. This is its last good answer, as '
        "of 14:02 UTC, 7 minutes old: it is STALE. Say in your answer that "
        "this data is as of 14:02 UTC, 7 minutes old and may have changed; do "
        "not present it as current.",
        "ok": True,
        "result": {"r": 1},
        "stale": True,
        "tool": "search",
        "user_message": "Showing the last known data from search, as of 14:02 UTC, 7 minutes "
        "old: the live source is unavailable right now.",
    }


def test_degraded_result_is_pinned():
    """The exact degraded result shape."""
    assert degraded_result("search", "snap", {"r": 2}, note="say prices may be out of date.") == {
        "degradation": "degraded",
        "degraded": True,
        "instruction": 'The tool "search" is out of service; this answer comes from the local '
        'substitute "snap", which may be less complete or less current. In '
        "your answer, say prices may be out of date.",
        "ok": True,
        "result": {"r": 2},
        "served_by": "snap",
        "tool": "search",
        "user_message": "search is unavailable right now; this answer comes from a simpler "
        "local substitute.",
    }


def test_queued_result_is_pinned():
    """The exact queued result shape."""
    assert queued_result("create_ticket", "q-1", "k-1") == {
        "degradation": "queue",
        "done": False,
        "idempotency_key": "k-1",
        "instruction": '"create_ticket" could not be made now (its service is out). The '
        "request is queued as q-1 and will be made once the service recovers. "
        "It has NOT happened yet: do not tell the user it is done, and do not "
        "call it again.",
        "ok": False,
        "queue_id": "q-1",
        "queued": True,
        "retryable": False,
        "tool": "create_ticket",
        "user_message": "Your request (create_ticket) is queued as q-1; it has not been "
        "carried out yet and will be once the service is back.",
    }


def test_handoff_result_is_pinned():
    """The exact handoff result shape."""
    assert handoff_result(
        "create_ticket", "rc-1", {"schema": "toolbreaker.stop/v1", "detail": "x"}
    ) == {
        "degradation": "handoff",
        "handoff": True,
        "instruction": 'The tool "create_ticket" is out of service and this request was '
        "handed to a person (reference rc-1). Do not call it again in this "
        "run; tell the user a person will follow up with reference rc-1.",
        "ok": False,
        "packet": {"detail": "x", "schema": "toolbreaker.stop/v1"},
        "reconciliation_id": "rc-1",
        "retryable": False,
        "tool": "create_ticket",
        "user_message": "A person will follow up on this request (reference rc-1).",
    }


def test_dependency_stop_result_is_pinned():
    """The exact dependency stop result shape."""
    assert dependency_stop_result(
        "create_ticket", "rc-1", {"detail": "required tool 'create_ticket' is unavailable (open)"}
    ) == {
        "condition": "dependency-open",
        "degradation": "stop",
        "detail": "required tool 'create_ticket' is unavailable (open)",
        "instruction": "This run was stopped: required tool 'create_ticket' is unavailable "
        "(open). Do not call tools that change anything again in this run. You "
        "may summarise what was done and tell the user that an operator will "
        "resume it (reference rc-1). Do not invent results.",
        "ok": False,
        "packet": {"detail": "required tool 'create_ticket' is unavailable (open)"},
        "reconciliation_id": "rc-1",
        "retryable": False,
        "run_stopped": True,
        "tool": "create_ticket",
        "user_message": "This task was stopped because a service it needs is down; an "
        "operator will pick it up (reference rc-1).",
        "writes_blocked": False,
    }


def test_a_dependency_stop_says_writes_are_blocked_only_when_its_packet_does():
    """The packet's counters say whether the run's writes were blocked before it stopped."""
    blocked = {"detail": "x", "counters": {"writes_blocked": {"condition": "x"}}}
    clear = {"detail": "x", "counters": {"writes_blocked": None}}
    assert dependency_stop_result("t", "rc-1", blocked)["writes_blocked"] is True
    assert dependency_stop_result("t", "rc-1", clear)["writes_blocked"] is False
