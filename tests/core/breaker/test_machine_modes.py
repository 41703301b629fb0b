"""Opening rules (failure rate, slow calls), shadow mode and the kill switch, in the core."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker import Policy
from toolbreaker.core import BreakerState, Event, Replay, replay
from toolbreaker.core._breaker.predicates import (
    admission,
    idle_rejection,
    is_quiet,
    retry_after_ms,
)
from toolbreaker.core._breaker.state import CORRUPT
from toolbreaker.core._breaker.trace import parse_event
from toolbreaker.errors import PolicyError, TraceError

RATE = Policy(failure_rate_permille=500, minimum_calls=4, window_calls=4, cooldown_ms=1000)
SLOW = Policy(
    slow_call_ms=100, slow_call_rate_permille=600, minimum_calls=3, window_calls=3, cooldown_ms=10
)


def run(policy: Policy, *items: tuple) -> list[tuple[str, str, str]]:
    """Replay ``(at, type[, call[, duration_ms]])`` items of one dependency."""
    driver = Replay(policy)
    rows = []
    for at, kind, *rest in items:
        call = rest[0] if rest else None
        duration = rest[1] if len(rest) > 1 else None
        for record in driver.feed(Event(kind, at, "d", call=call, duration_ms=duration)):
            rows.append((record.reason, record.from_phase, record.to_phase))
    return rows


def calls(*outcomes: str, start: int = 0, every: int = 10) -> list[tuple]:
    """A request and its outcome per item, ``every`` ms apart."""
    items: list[tuple] = []
    for n, outcome in enumerate(outcomes):
        at = start + n * every
        items += [(at, "request", f"c{at}"), (at + 1, outcome, f"c{at}")]
    return items


# -- policy ----------------------------------------------------------------------------


def test_added_fields_at_their_defaults_keep_the_version():
    """A policy that uses none of the new fields keeps its dict and its version."""
    assert Policy(mode="enforce").to_dict() == Policy().to_dict()
    assert Policy(mode="enforce").version == Policy().version
    assert "mode" in Policy(mode="shadow").to_dict()
    assert Policy(mode="shadow").version != Policy().version


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"failure_rate_permille": 500, "window_calls": 10}, "minimum_calls"),
        ({"failure_rate_permille": 500, "minimum_calls": 5}, "window_calls"),
        (
            {"failure_rate_permille": 500, "minimum_calls": 5, "window_calls": 5, "window_ms": 9},
            "window_calls",
        ),
        ({"failure_rate_permille": 1001, "minimum_calls": 1, "window_calls": 1}, None),
        ({"failure_rate_permille": 500, "minimum_calls": 6, "window_calls": 5}, "minimum_calls"),
        ({"failure_rate_permille": 500, "minimum_calls": 1, "window_calls": 1001}, None),
        ({"slow_call_ms": 100}, "slow_call_ms"),
        ({"slow_call_rate_permille": 100, "minimum_calls": 1, "window_calls": 1}, None),
        ({"minimum_calls": 3}, "minimum_calls"),
        ({"window_calls": 3}, "window_calls"),
        ({"mode": "dry-run"}, "mode"),
        ({"force": "half_open"}, "force"),
        ({"force_reason": "incident 12"}, "force_reason"),
        ({"force": "open", "force_reason": " "}, "force_reason"),
        ({"failure_rate_permille": True, "minimum_calls": 1, "window_calls": 1}, None),
    ],
)
def test_invalid_rules_and_modes_name_the_field(fields, field):
    """Rates need a volume and exactly one window; modes and forces are closed sets."""
    with pytest.raises(PolicyError) as info:
        Policy(**fields)
    if field is not None:
        assert info.value.field == field


# -- failure rate ----------------------------------------------------------------------


def test_failure_rate_opens_at_the_threshold_once_the_volume_is_reached():
    """Two failures in four calls is 500 per mille: the fourth call opens the breaker."""
    rows = run(RATE, *calls("failure", "success", "failure", "success"))
    outcomes = rows[1::2]
    assert [r[0] for r in outcomes] == [
        "qualifying-failure",
        "success",
        "qualifying-failure",
        "failure-rate",
    ]
    assert outcomes[-1][1:] == ("closed", "open")


def test_failure_rate_never_opens_below_the_minimum_volume():
    """Three failures in three calls open nothing when minimum_calls is four."""
    rows = run(RATE, *calls("failure", "failure", "failure"))
    assert all(to == "closed" for _, _, to in rows)


def test_failure_rate_replaces_the_failure_count():
    """failure_threshold (default 3) does not open a breaker that has a failure rate."""
    policy = dataclasses.replace(RATE, failure_rate_permille=1000)
    rows = run(policy, *calls("failure", "failure", "failure", "success", "failure"))
    assert all(to == "closed" for _, _, to in rows)


def test_count_window_slides():
    """Only the last window_calls calls count: old failures leave the window."""
    policy = dataclasses.replace(RATE, failure_rate_permille=750)
    rows = run(
        policy, *calls("failure", "failure", "success", "success", "failure", "failure", "success")
    )
    assert all(to == "closed" for _, _, to in rows)
    rows = run(policy, *calls("success", "failure", "failure", "failure"))
    assert rows[-1] == ("failure-rate", "closed", "open")


def test_time_window_forgets_old_buckets():
    """A time-based window keeps ten buckets of window_ms / 10: older calls drop out."""
    policy = Policy(failure_rate_permille=500, minimum_calls=4, window_ms=1000)
    # Three failures, then three successes 2 s later: the failures are out of the window.
    rows = run(
        policy,
        *calls("failure", "failure", "failure"),
        *calls("success", "success", "success", "failure", start=2000),
    )
    assert all(to == "closed" for _, _, to in rows)
    rows = run(policy, *calls("failure", "failure", "success", "failure"))
    assert rows[-1] == ("failure-rate", "closed", "open")


def test_ignored_outcomes_are_not_calls_and_ambiguous_ones_are_failures():
    """ignored outcomes do not count toward the volume; ambiguous outcomes are failures."""
    rows = run(RATE, *calls("ignored", "ignored", "ignored", "ignored", "ambiguous"))
    assert all(to == "closed" for _, _, to in rows)
    rows = run(RATE, *calls("ambiguous", "ambiguous", "success", "success"))
    assert rows[-1] == ("failure-rate", "closed", "open")


def test_window_is_in_the_state_and_round_trips():
    """The window is persisted with the state, validated on load, and empty once open."""
    driver = Replay(RATE)
    for event in (Event(k, at, "d", call=c) for at, k, c in calls("failure", "success")):
        driver.feed(event)
    state = driver._ledgers["d"].state
    data = state.to_dict()
    assert data["window"] == [[1, 1, 1, 0], [11, 1, 0, 0]]
    assert BreakerState.from_dict(data, RATE) == state
    assert BreakerState.from_dict({**data, "window": [[1, 1, 2, 0]]}, RATE) is CORRUPT
    assert BreakerState.from_dict({**data, "window": [[1, 0, 0, 0]]}, RATE) is CORRUPT
    assert BreakerState.from_dict({**data, "window": [[1, 1, 0]]}, RATE) is CORRUPT
    assert "window" not in BreakerState().to_dict()


def test_a_changed_rate_rule_fits_the_stored_window_instead_of_failing_closed():
    """A window stored under another policy is trimmed or dropped, never corruption:
    changing a rate rule must not open every closed breaker."""
    data = {"state": "closed", "window": [[n, 1, n % 2, 0] for n in range(6)]}
    assert BreakerState.from_dict(data, RATE).window == tuple((n, 1, n % 2, 0) for n in range(2, 6))
    assert BreakerState.from_dict(data, Policy()) == BreakerState()
    timed = Policy(failure_rate_permille=500, minimum_calls=4, window_ms=1000)
    assert len(BreakerState.from_dict(data, timed).window) == 6  # increasing: kept
    repeated = {"state": "closed", "window": [[7, 1, 0, 0], [7, 1, 1, 0]]}
    assert BreakerState.from_dict(repeated, timed).window == ()
    buckets = {"state": "closed", "window": [[1, 3, 1, 0]]}
    assert BreakerState.from_dict(buckets, RATE).window == ()


def test_rate_policies_are_never_quiet():
    """Every success changes the window, so the shells may not skip it."""
    assert not is_quiet(BreakerState(), RATE)
    assert is_quiet(BreakerState(), Policy())


# -- slow calls ------------------------------------------------------------------------


def test_slow_successes_open_on_the_slow_call_rate():
    """Successes slower than slow_call_ms are slow calls; their rate opens the breaker."""
    rows = run(
        SLOW,
        (0, "request", "a"),
        (150, "success", "a", 150),
        (200, "request", "b"),
        (300, "success", "b", 100),
        (400, "request", "c"),
        (501, "success", "c", 101),
    )
    assert [r[0] for r in rows[1::2]] == ["slow-call", "success", "slow-call-rate"]
    assert rows[-1][2] == "open"


def test_a_slow_probe_reopens():
    """Slow is down: a slow probe does not count toward closing the breaker."""
    slow = [(n, kind, f"c{n // 2}", 500) for n, kind in enumerate(["request", "success"] * 3)]
    rows = run(SLOW, *slow, (20, "request", "p"), (21, "success", "p", 500))
    assert rows[5] == ("slow-call-rate", "closed", "open")
    assert rows[-1] == ("slow-probe", "half_open", "open")


def test_duration_is_left_out_of_events_without_it():
    """duration_ms is in an event's dict only when set, and traces carry it on successes."""
    assert "duration_ms" not in Event("success", 1, "d", call="c").to_dict()
    event = Event("success", 1, "d", call="c", duration_ms=7)
    assert event.to_dict()["duration_ms"] == 7
    assert parse_event({**event.to_dict(), "dependency": "d"}) == event
    with pytest.raises(TraceError):
        parse_event({"at": 1, "dependency": "d", "type": "failure", "duration_ms": 7})


# -- shadow mode and the kill switch --------------------------------------------------


def test_shadow_admits_what_enforcement_rejects_and_says_so():
    """In shadow mode the breaker opens as usual, but requests are admitted and recorded
    with would_reject and the reason; their outcomes change nothing."""
    shadow = Policy(failure_threshold=1, cooldown_ms=100, mode="shadow")
    driver = Replay(shadow)
    for event in [
        Event("request", 0, "d", call="a"),
        Event("failure", 1, "d", call="a"),
        Event("request", 2, "d", call="b"),
    ]:
        records = driver.feed(event)
    assert (records[-1].attempted, records[-1].rejected) == (True, False)
    assert records[-1].reason == "cooldown"
    assert records[-1].to_dict()["would_reject"] is True
    after = driver.feed(Event("failure", 3, "d", call="b"))
    assert after[-1].reason == "stale-outcome"
    receipt = driver.receipt()["dependencies"]["d"]
    assert (receipt["local_rejections"], receipt["would_reject"]) == (0, 1)
    assert "would_reject" not in replay([Event("request", 0, "d")], Policy())["dependencies"]["d"]


def test_shadow_does_not_override_an_operator():
    """An operator's isolation rejects in shadow mode too."""
    rows = run(Policy(mode="shadow"), (0, "isolate"), (1, "request"))
    assert rows[-1][0] == "isolated"
    records = Replay(Policy(mode="shadow"))
    records.feed(Event("isolate", 0, "d"))
    assert records.feed(Event("request", 1, "d"))[-1].rejected


def test_forced_open_rejects_every_request_with_no_retry_time():
    """force = "open" rejects in every phase, locally, with no time to wait for."""
    policy = Policy(force="open", force_reason="incident 12")
    assert admission(BreakerState(), 0, policy) == "forced-open"
    assert idle_rejection(BreakerState(), 0, policy) == "forced-open"
    assert not is_quiet(BreakerState(), policy)
    assert retry_after_ms(BreakerState(phase="open", open_until=50), 0, policy) is None
    record = Replay(policy).feed(Event("request", 0, "d"))[-1]
    assert (record.rejected, record.attempted, record.reason) == (True, False, "forced-open")


def test_forced_closed_admits_and_records_what_it_would_reject():
    """force = "closed" admits while open; the record says it would have been rejected."""
    policy = Policy(failure_threshold=1, force="closed")
    driver = Replay(policy)
    driver.feed(Event("request", 0, "d", call="a"))
    driver.feed(Event("failure", 1, "d", call="a"))
    record = driver.feed(Event("request", 2, "d", call="b"))[-1]
    assert (record.attempted, record.would_reject, record.to_phase) == (True, True, "open")


def test_a_force_closed_event_admits_until_released_and_survives_phase_changes():
    """The store's force-closed event keeps the breaker deciding, admits what it would
    reject, and lasts through openings and probes until an operator releases it."""
    driver = Replay(Policy(failure_threshold=1, cooldown_ms=10, success_threshold=1))
    driver.feed(Event("force-closed", 0, "d", reason="rollout"))
    driver.feed(Event("request", 1, "d", call="a"))
    driver.feed(Event("failure", 2, "d", call="a"))
    record = driver.feed(Event("request", 3, "d", call="b"))[-1]
    assert (record.from_phase, record.attempted, record.would_reject) == ("open", True, True)
    driver.feed(Event("request", 20, "d", call="p"))
    driver.feed(Event("success", 21, "d", call="p"))
    state = driver._ledgers["d"].state
    assert (state.phase, state.forced_closed, state.operator_reason) == ("closed", True, "rollout")
    assert driver.receipt()["dependencies"]["d"]["would_reject"] == 1
    driver.feed(Event("release", 30, "d"))
    assert not driver._ledgers["d"].state.forced_closed


def test_a_forced_open_policy_wins_over_a_forced_close_in_the_store():
    """Forced open in configuration rejects even a breaker an operator forced closed."""
    driver = Replay(Policy(force="open"))
    driver.feed(Event("force-closed", 0, "d", reason="rollout"))
    assert driver.feed(Event("request", 1, "d"))[-1].reason == "forced-open"


def test_the_operators_reason_is_kept_with_the_state_and_in_traces():
    """isolate and force-closed events carry the reason into the state and trace lines;
    an isolate without one (older traces) leaves the state as it always was."""
    policy = Policy()
    isolated = replay([Event("isolate", 0, "d", reason="incident 7")], policy)
    final = isolated["dependencies"]["d"]["final_state"]
    assert final["operator_reason"] == "incident 7"
    assert BreakerState.from_dict(final, policy).operator_reason == "incident 7"
    plain = replay([Event("isolate", 0, "d")], policy)["dependencies"]["d"]["final_state"]
    assert "operator_reason" not in plain
    assert "forced_closed" not in plain
    line = {"at": 0, "dependency": "d", "type": "isolate", "reason": "incident 7"}
    assert parse_event(line).reason == "incident 7"
    with pytest.raises(TraceError):
        parse_event({**line, "type": "request"})
    both = {**final, "forced_closed": True}
    assert BreakerState.from_dict(both, policy) is CORRUPT


# -- properties ------------------------------------------------------------------------

_KINDS = ("success", "failure", "ignored", "ambiguous")


@st.composite
def rate_policies(draw: st.DrawFn) -> Policy:
    minimum = draw(st.integers(1, 12))
    window = draw(
        st.one_of(
            st.builds(dict, window_calls=st.integers(minimum, 15)),
            st.builds(dict, window_ms=st.integers(1, 400)),
        )
    )
    return Policy(
        failure_rate_permille=draw(st.integers(1, 1000)),
        minimum_calls=minimum,
        cooldown_ms=draw(st.integers(1, 100)),
        probe_limit=draw(st.integers(1, 2)),
        success_threshold=draw(st.integers(1, 2)),
        lease_ttl_ms=draw(st.integers(1, 150)),
        **window,
    )


@st.composite
def runs(draw: st.DrawFn, policy: Policy, *, operators: bool = False) -> list[Event]:
    """A valid trace of one dependency: outcomes settle admitted, unsettled calls only."""
    driver = Replay(policy)
    events: list[Event] = []
    now, unsettled = 0, []
    for n in range(draw(st.integers(0, 60))):
        now += draw(st.integers(0, 40))
        kinds = ["request"] + (list(_KINDS) if unsettled else [])
        operator = ["isolate", "force-closed", "release"] if operators else []
        kind = draw(st.sampled_from(kinds + operator))
        if kind in ("request", *operator):
            event = Event(kind, now, "d", call=f"c{n}")
        else:
            call = unsettled.pop(draw(st.integers(0, len(unsettled) - 1)))
            duration = draw(st.integers(0, 300)) if kind == "success" else None
            event = Event(kind, now, "d", call=call, duration_ms=duration)
        if driver.feed(event)[-1].attempted:
            unsettled.append(event.call)
        events.append(event)
    return events


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_failure_rate_windows_never_open_below_the_minimum_volume(data):
    """Every opening from closed under a failure rate is a rate opening, after at least
    minimum_calls counted calls since the breaker last closed."""
    policy = data.draw(rate_policies())
    driver = Replay(policy)
    counted = 0
    for event in data.draw(runs(policy)):
        for record in driver.feed(event):
            if record.from_phase != "closed":
                counted = 0
                continue
            if record.event.type in ("success", "failure", "ambiguous") and record.reason not in (
                "stale-outcome",
                "not-admitted",
            ):
                counted += 1
            if record.to_phase == "open":
                assert record.reason == "failure-rate"
                assert counted >= policy.minimum_calls


shadow_policies = st.builds(
    Policy,
    failure_threshold=st.integers(1, 3),
    window_ms=st.one_of(st.none(), st.integers(1, 200)),
    cooldown_ms=st.integers(1, 100),
    probe_limit=st.integers(1, 2),
    success_threshold=st.integers(1, 2),
    lease_ttl_ms=st.integers(1, 150),
    mode=st.just("shadow"),
)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_shadow_never_rejects_and_decides_as_enforcement_does(data):
    """Shadow mode never rejects a request, and the phases it goes through are the ones
    enforcement goes through on the same trace."""
    shadow = data.draw(shadow_policies)
    events = data.draw(runs(shadow))
    enforce = dataclasses.replace(shadow, mode="enforce")
    shadow_driver, enforce_driver = Replay(shadow), Replay(enforce)
    for event in events:
        seen = shadow_driver.feed(event)
        assert not any(record.rejected for record in seen)
        enforced = enforce_driver.feed(event)
        assert [(r.from_phase, r.to_phase) for r in seen] == [
            (r.from_phase, r.to_phase) for r in enforced
        ]
        assert [r.would_reject for r in seen if r.event.type == "request"] == [
            r.rejected for r in enforced if r.event.type == "request"
        ]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_forced_open_row_never_admits(data):
    """Whatever happened before, once a row is forced open no request is admitted."""
    policy = data.draw(shadow_policies.map(lambda p: dataclasses.replace(p, mode="enforce")))
    events = data.draw(runs(policy, operators=True))
    cut = data.draw(st.integers(0, len(events)))
    driver = Replay(policy)
    for event in events[:cut]:
        driver.feed(event)
    driver.policy = dataclasses.replace(
        policy, force="open", mode=data.draw(st.sampled_from(["enforce", "shadow"]))
    )
    for event in events[cut:]:
        records = driver.feed(event)
        assert not any(record.attempted for record in records)
