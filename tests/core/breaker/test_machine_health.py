"""Health-check probes in the core: under ``probes = "health-check"`` only the checker probes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker import Policy
from toolbreaker.core import Event, Replay
from toolbreaker.core._breaker.machine import apply
from toolbreaker.core._breaker.predicates import admission, idle_rejection, retry_after_ms
from toolbreaker.core._breaker.state import CLOSED, HALF_OPEN, OPEN, BreakerState
from toolbreaker.core._breaker.trace import parse_event
from toolbreaker.errors import PolicyError

HEALTH = Policy(failure_threshold=1, cooldown_ms=100, success_threshold=2, probes="health-check")


def opened(policy: Policy = HEALTH) -> BreakerState:
    state, _ = apply(BreakerState(), Event("request", 0, "d", call="c0"), policy)
    state, _ = apply(state, Event("failure", 1, "d", call="c0", generation=0), policy)
    assert state.phase == OPEN
    return state


def test_the_flag_is_left_out_at_its_default_and_named_when_set():
    """``probes = "calls"`` keeps old policies' dict and version; the flag shows when set."""
    assert Policy(probes="calls").to_dict() == Policy().to_dict()
    assert Policy(probes="calls").version == Policy().version
    assert HEALTH.to_dict()["probes"] == "health-check"
    assert HEALTH.health_probes
    assert not Policy().health_probes


@pytest.mark.parametrize("value", ["users", "", 1, None])
def test_an_unknown_probe_source_is_refused(value):
    """Only ``calls`` and ``health-check`` are probe sources."""
    with pytest.raises(PolicyError) as info:
        Policy(probes=value)
    assert info.value.field == "probes"


def test_a_users_request_past_the_cooldown_is_rejected_without_a_change():
    """Past the deadline a user's request is still ``cooldown``, and rejected locally."""
    state = opened()
    assert admission(state, 500, HEALTH) == "cooldown"
    assert idle_rejection(state, 500, HEALTH) == "cooldown"
    assert retry_after_ms(state, 500, HEALTH) is None  # until a check passes
    assert retry_after_ms(state, 50, HEALTH) == 51  # before the deadline, as ever
    new, (record,) = apply(state, Event("request", 500, "d", call="u1"), HEALTH)
    assert new == state
    assert record.rejected
    assert record.reason == "cooldown"


def test_the_checkers_request_probes_and_its_successes_close():
    """The checker takes the probe lease; user requests see ``probe-limit`` meanwhile."""
    state = opened()
    assert admission(state, 500, HEALTH, health_check=True) == "probe-admitted"
    state, (record,) = apply(state, Event("request", 500, "d", "h1", health_check=True), HEALTH)
    assert record.reason == "probe-admitted"
    assert state.phase == HALF_OPEN
    assert record.event.to_dict()["health_check"] is True
    _, (user,) = apply(state, Event("request", 501, "d", call="u1"), HEALTH)
    assert user.rejected
    assert user.reason == "probe-limit"
    generation = state.generation
    state, _ = apply(state, Event("success", 510, "d", "h1", generation=generation), HEALTH)
    assert state.phase == HALF_OPEN  # one success of a quorum of two
    state, _ = apply(state, Event("request", 600, "d", "h2", health_check=True), HEALTH)
    state, (done,) = apply(state, Event("success", 610, "d", "h2", generation=generation), HEALTH)
    assert state.phase == CLOSED
    assert done.reason == "probe-quorum"


def test_a_failed_check_reopens_with_a_longer_cooldown():
    """A failed health probe is a failed probe: reopened, opening counted."""
    policy = Policy(
        failure_threshold=1, cooldown_ms=100, cooldown_multiplier=2, probes="health-check"
    )
    state = opened(policy)
    state, _ = apply(state, Event("request", 500, "d", "h1", health_check=True), policy)
    state, (record,) = apply(
        state, Event("failure", 510, "d", "h1", generation=state.generation), policy
    )
    assert state.phase == OPEN
    assert record.reason == "probe-failed"
    assert state.open_until == 510 + 200


def test_without_the_flag_a_checkers_request_is_an_ordinary_probe():
    """Under ``probes = "calls"`` both kinds of request probe alike."""
    policy = Policy(failure_threshold=1, cooldown_ms=100)
    state = opened(policy)
    assert admission(state, 500, policy) == "probe-admitted"
    assert admission(state, 500, policy, health_check=True) == "probe-admitted"


def test_the_trace_field_round_trips_and_is_checked():
    """``health_check`` in a trace: true on requests only."""
    event = parse_event({"at": 1, "dependency": "d", "type": "request", "health_check": True})
    assert event.health_check
    assert event.to_dict()["health_check"] is True
    for bad in (
        {"at": 1, "dependency": "d", "type": "success", "health_check": True},
        {"at": 1, "dependency": "d", "type": "request", "health_check": 1},
    ):
        with pytest.raises(Exception, match="health_check"):
            parse_event(bad)
    assert "health_check" not in Event("request", 1, "d").to_dict()


@st.composite
def mixed_traces(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    at = 0
    open_calls: list[str] = []
    for n in range(draw(st.integers(0, 50))):
        at += draw(st.integers(0, 80))
        if open_calls and draw(st.booleans()):
            call = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            kind = draw(st.sampled_from(["success", "failure", "ambiguous"]))
            events.append(Event(kind, at, "d", call=call))
        else:
            call = f"c{n}"
            open_calls.append(call)
            events.append(Event("request", at, "d", call, health_check=draw(st.booleans())))
    return events


@settings(max_examples=200, deadline=None)
@given(
    mixed_traces(),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 200),
    st.sampled_from(["enforce", "shadow"]),
)
def test_no_users_request_ever_probes_under_health_check_probes(
    trace, threshold, quorum, cooldown, mode
):
    """Whatever happens, a user's request never takes a probe lease, and a request the
    core rejects locally through idle_rejection is rejected by step() alike."""
    policy = Policy(
        failure_threshold=threshold,
        success_threshold=quorum,
        cooldown_ms=cooldown,
        probes="health-check",
        mode=mode,
    )
    driver = Replay(policy)
    for event in trace:
        for record in driver.feed(event):
            if record.event.type != "request":
                continue
            if not record.event.health_check:
                assert record.reason != "probe-admitted"
                assert not (record.to_phase == HALF_OPEN and record.from_phase == OPEN)
            if record.to_phase == HALF_OPEN and record.from_phase == OPEN:
                assert record.event.health_check
