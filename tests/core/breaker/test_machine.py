"""The transition function, boundary by boundary."""

from __future__ import annotations

import pytest

from toolbreaker import Policy
from toolbreaker.core import BreakerState, Event, Replay, apply
from toolbreaker.core._breaker.machine import step
from toolbreaker.core._breaker.predicates import admission, is_quiet
from toolbreaker.core._breaker.state import CORRUPT
from toolbreaker.errors import TraceError

POLICY = Policy(failure_threshold=3, cooldown_ms=20_000, success_threshold=2, probe_limit=1)


def feed(policy: Policy, *events: tuple[int, str] | tuple[int, str, str]) -> list[tuple[str, ...]]:
    """Replay (at, type[, call]) events of one dependency; return (reason, from, to) rows."""
    driver = Replay(policy)
    rows = []
    for item in events:
        at, kind = item[0], item[1]
        call = item[2] if len(item) > 2 else None
        for record in driver.feed(Event(type=kind, at=at, dependency="d", call=call)):
            rows.append((record.reason, record.from_phase, record.to_phase))
    return rows


def open_at_25(policy: Policy = POLICY) -> list[tuple[int, str]]:
    return [
        (0, "request"),
        (5, "failure"),
        (10, "request"),
        (15, "failure"),
        (20, "request"),
        (25, "failure"),
    ]


def test_threshold_failure_itself_opens():
    """The failure that reaches failure_threshold opens the breaker."""
    rows = feed(POLICY, *open_at_25())
    assert rows[-1] == ("qualifying-failure", "closed", "open")
    assert [r[2] for r in rows[:-1]] == ["closed"] * 5


def test_success_resets_consecutive_count():
    """Without a window, a success resets the failure count."""
    rows = feed(
        POLICY,
        (0, "request"),
        (1, "failure"),
        (2, "request"),
        (3, "failure"),
        (4, "request"),
        (5, "success"),
        (6, "request"),
        (7, "failure"),
    )
    assert rows[-1] == ("qualifying-failure", "closed", "closed")


def test_exact_cooldown_instant_admits_one_probe():
    """One ms before the deadline is a cooldown rejection; the deadline itself probes."""
    rows = feed(POLICY, *open_at_25(), (20_024, "request"), (20_025, "request"))
    assert rows[-2] == ("cooldown", "open", "open")
    assert rows[-1] == ("probe-admitted", "open", "half_open")


def test_two_requests_at_the_deadline_get_one_probe():
    """Two requests at the same instant at the deadline: one probe, one probe-limit."""
    rows = feed(POLICY, *open_at_25(), (20_025, "request"), (20_025, "request"))
    assert rows[-2:] == [
        ("probe-admitted", "open", "half_open"),
        ("probe-limit", "half_open", "half_open"),
    ]


def test_quorum_of_probe_successes_closes():
    """success_threshold successful probes close; fewer keep it half-open."""
    rows = feed(
        POLICY,
        *open_at_25(),
        (20_025, "request"),
        (20_030, "success"),
        (20_031, "request"),
        (20_035, "success"),
    )
    assert rows[-3] == ("probe-success", "half_open", "half_open")
    assert rows[-1] == ("probe-quorum", "half_open", "closed")


def test_failed_probe_reopens_at_once():
    """A failed probe reopens the breaker immediately."""
    rows = feed(POLICY, *open_at_25(), (20_025, "request"), (20_030, "failure"))
    assert rows[-1] == ("probe-failed", "half_open", "open")


def test_ambiguous_probe_reopens_and_is_never_a_success():
    """An ambiguous probe outcome reopens; in closed it counts like a failure."""
    rows = feed(POLICY, *open_at_25(), (20_025, "request"), (20_030, "ambiguous"))
    assert rows[-1] == ("ambiguous-outcome", "half_open", "open")
    closed = feed(Policy(failure_threshold=1), (0, "request"), (1, "ambiguous"))
    assert closed[-1] == ("ambiguous-outcome", "closed", "open")


def test_ignored_outcome_releases_the_lease_without_counting():
    """An ignored probe outcome frees its lease: the next request probes again."""
    rows = feed(
        POLICY, *open_at_25(), (20_025, "request"), (20_026, "ignored"), (20_027, "request")
    )
    assert rows[-2] == ("non-qualifying", "half_open", "half_open")
    assert rows[-1] == ("probe-admitted", "half_open", "half_open")


def test_ignored_outcome_does_not_count_in_closed():
    """Validation-style outcomes never move a closed breaker."""
    rows = feed(Policy(failure_threshold=1), (0, "request"), (1, "ignored"))
    assert rows[-1] == ("non-qualifying", "closed", "closed")


def test_expired_lease_reopens_at_its_expiry_instant():
    """A lease unsettled for lease_ttl_ms reopens the breaker at expiry, before the next event."""
    policy = Policy(failure_threshold=1, cooldown_ms=100, lease_ttl_ms=50)
    driver = Replay(policy)
    for event in [Event("request", 0, "d"), Event("failure", 1, "d"), Event("request", 101, "d")]:
        driver.feed(event)
    records = driver.feed(Event("request", 151, "d"))
    assert [r.reason for r in records] == ["lease-expired", "cooldown"]
    assert records[0].event.at == 151  # admitted at 101 + ttl 50
    assert records[0].to_phase == "open"
    assert records[0].open_until == 151 + 100


def test_lease_expiring_exactly_at_the_next_event_counts():
    """Expiry at the very instant of the next event is already due."""
    policy = Policy(failure_threshold=1, cooldown_ms=100, lease_ttl_ms=50)
    driver = Replay(policy)
    for event in [Event("request", 0, "d"), Event("failure", 1, "d"), Event("request", 101, "d")]:
        driver.feed(event)
    assert driver.feed(Event("request", 150, "d"))[0].reason == "probe-limit"
    assert driver.feed(Event("request", 151, "d"))[0].reason == "lease-expired"


def test_late_success_after_reopen_is_stale():
    """A success for a call admitted before the breaker opened changes nothing."""
    policy = Policy(failure_threshold=1)
    rows = feed(
        policy,
        (0, "request", "slow"),
        (1, "request", "fast"),
        (2, "failure", "fast"),
        (3, "success", "slow"),
    )
    assert rows[-1] == ("stale-outcome", "open", "open")


def test_stale_outcome_cannot_close_half_open():
    """A call from the closed generation settling during half-open is stale."""
    policy = Policy(failure_threshold=1, cooldown_ms=10, success_threshold=1)
    rows = feed(
        policy,
        (0, "request", "old"),
        (1, "request", "x"),
        (2, "failure", "x"),
        (12, "request", "probe"),
        (13, "success", "old"),
    )
    assert rows[-1] == ("stale-outcome", "half_open", "half_open")


def test_window_mode_counts_recent_failures_only():
    """With a window, only failures less than window_ms old count, and success does not reset."""
    policy = Policy(failure_threshold=3, window_ms=100)
    rows = feed(
        policy,
        (0, "request"),
        (0, "failure"),
        (50, "request"),
        (50, "success"),
        (60, "request"),
        (60, "failure"),
        (100, "request"),
        (100, "failure"),
    )
    # at 100 the failure from 0 is exactly window_ms old: it no longer counts.
    assert rows[-1] == ("qualifying-failure", "closed", "closed")
    rows = feed(
        policy,
        (0, "request"),
        (1, "failure"),
        (50, "request"),
        (50, "success"),
        (60, "request"),
        (60, "failure"),
        (100, "request"),
        (100, "failure"),
    )
    assert rows[-1] == ("qualifying-failure", "closed", "open")


def test_cooldown_grows_with_consecutive_openings_and_resets_on_close():
    """Each reopening waits longer; closing resets the growth."""
    policy = Policy(
        failure_threshold=1,
        cooldown_ms=100,
        cooldown_multiplier=3,
        cooldown_max_ms=500,
        success_threshold=1,
    )
    driver = Replay(policy)
    driver.feed(Event("request", 0, "d"))
    until = driver.feed(Event("failure", 0, "d"))[-1].open_until
    assert until is not None
    waits = [until]
    for _ in range(3):
        t = until
        driver.feed(Event("request", t, "d"))
        until = driver.feed(Event("failure", t, "d"))[-1].open_until
        assert until is not None
        waits.append(until - t)
    assert waits == [100, 300, 500, 500]
    t = until
    driver.feed(Event("request", t, "d"))
    assert driver.feed(Event("success", t, "d"))[-1].reason == "probe-quorum"
    driver.feed(Event("request", t, "d"))
    assert driver.feed(Event("failure", t, "d"))[-1].open_until == t + 100


def test_retry_after_extends_the_opening_cooldown():
    """A failure carrying retry_after_ms keeps the breaker open at least that long."""
    state = BreakerState()
    _, _first = step(state, Event("request", 0, "d", call="c"), Policy(failure_threshold=1))
    new, record = step(
        state,
        Event("failure", 5, "d", call="c", generation=0, retry_after_ms=60_000),
        Policy(failure_threshold=1),
    )
    assert record.open_until == 60_005
    assert admission(new, 59_000, Policy()) == "cooldown"
    shorter = step(
        state,
        Event("failure", 5, "d", call="c", generation=0, retry_after_ms=1),
        Policy(failure_threshold=1),
    )[1]
    assert shorter.open_until == 20_005


def test_every_phase_change_bumps_the_generation():
    """Generations count phase changes, and only those."""
    driver = Replay(POLICY)
    gens = []
    for at, kind in [
        *open_at_25(),
        (20_025, "request"),
        (20_030, "success"),
        (20_031, "request"),
        (20_035, "success"),
    ]:
        gens.append(driver.feed(Event(kind, at, "d"))[-1].generation)
    assert gens == [0, 0, 0, 0, 0, 1, 2, 2, 2, 3]


def test_corrupt_state_loads_open_with_cooldown_from_first_touch():
    """A state that does not validate is open; its cooldown starts at the first event."""
    assert BreakerState.from_dict({"state": "ajar"}, POLICY) == CORRUPT
    driver = Replay(POLICY, {"d": BreakerState.from_dict({"state": "ajar"}, POLICY)})
    first = driver.feed(Event("request", 1_000, "d"))[0]
    assert (first.reason, first.open_until) == ("cooldown", 21_000)
    assert driver.feed(Event("request", 21_000, "d"))[0].reason == "probe-admitted"
    assert driver.receipt()["dependencies"]["d"]["recovered_from_corruption"] is True


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "closed",
        {},
        {"state": "closed", "generation": -1},
        {"state": "closed", "generation": "1"},
        {"state": "closed", "generation": True},
        {"state": "closed", "failures": [1, 2, 3]},  # as many as the threshold: impossible
        {
            "state": "half_open",
            "leases": [{"call": "a", "admitted_at": 1}, {"call": "b", "admitted_at": 1}],
        },
        {"state": "open"},  # open with no deadline and not isolated
        {"state": "closed", "extra": 1},
        {"state": "closed", "schema": "toolbreaker.state/v0"},
        {"state": "half_open", "leases": [{"call": 1, "admitted_at": 1}]},
    ],
)
def test_hostile_states_fail_closed(data):
    """Unknown names, wrong types, negative counters and too many leases load as open."""
    state = BreakerState.from_dict(data, POLICY)
    assert state.phase == "open"
    assert state.recovered_from_corruption


def test_state_round_trips_through_its_dict():
    """A valid state survives to_dict/from_dict unchanged."""
    driver = Replay(POLICY)
    for at, kind in [*open_at_25(), (20_025, "request")]:
        driver.feed(Event(kind, at, "d"))
    final = driver.receipt()["dependencies"]["d"]["final_state"]
    assert BreakerState.from_dict(final, POLICY).to_dict() == final
    assert not BreakerState.from_dict(final, POLICY).recovered_from_corruption


def test_isolate_and_release():
    """An operator can force a breaker open until released; isolation rejects every request."""
    state, record = step(BreakerState(), Event("isolate", 0, "d"), POLICY)
    assert (record.reason, state.phase) == ("isolated", "open")
    state, record = step(state, Event("request", 10**9, "d", call="c"), POLICY)
    assert (record.reason, record.rejected) == ("isolated", True)
    state, record = step(state, Event("release", 10**9, "d"), POLICY)
    assert (record.reason, state.phase) == ("released", "closed")


def test_unknown_event_type_raises():
    """An event type the core does not know is a TraceError, not a silent no-op."""
    with pytest.raises(TraceError, match="unknown event type"):
        step(BreakerState(), Event("mystery", 0, "d"), POLICY)


def test_negative_time_raises():
    """Time is a non-negative integer."""
    with pytest.raises(TraceError, match="negative"):
        step(BreakerState(), Event("request", -1, "d"), POLICY)


def test_quiet_states_are_really_quiet():
    """is_quiet promises request and success leave the state as it is."""
    policy = Policy()
    state = BreakerState()
    assert is_quiet(state, policy)
    assert step(state, Event("request", 1, "d", call="c"), policy)[0] is state
    assert step(state, Event("success", 1, "d", call="c", generation=0), policy)[0] is state
    counted = BreakerState(failures=(1,))
    assert not is_quiet(counted, policy)
    assert is_quiet(counted, Policy(window_ms=10))


def test_apply_without_due_expiry_is_step():
    """apply() only adds a record when a lease is due."""
    _state, records = apply(BreakerState(), Event("request", 0, "d", call="c"), POLICY)
    assert len(records) == 1
    assert records[0].reason == "call-admitted"


@pytest.mark.parametrize("at", [0, 5, 19_999, 20_000, 20_001])
def test_idle_rejection_agrees_with_step(at):
    """idle_rejection names a rejection exactly when step() rejects and changes nothing."""
    from toolbreaker.core._breaker.predicates import idle_rejection

    policy = Policy()
    states = [
        BreakerState(),
        BreakerState(phase="open", generation=1, open_until=20_000, opens=1),
        BreakerState(phase="open", generation=1, isolated=True),
        CORRUPT,
        BreakerState(phase="half_open", generation=2, leases=()),
    ]
    for state in states:
        new, record = step(state, Event("request", at, "d", call="c"), policy)
        expected = record.reason if record.rejected and new == state else None
        assert idle_rejection(state, at, policy) == expected


@pytest.mark.parametrize(
    "raw",
    [
        '{"state": "open", "open_until": 5, "state": "closed"}',
        '{"state": "closed", "generation": ' + "9" * 5000 + "}",
        '{"state": "closed", "generation": 9007199254740992}',
        '{"state": "closed", "failures": ' + "[" * 100_000 + "}",
        b'{"state": "closed\xff"}',
        '{"state": "\\ud800"}',
    ],
    ids=["duplicate-key", "5000-digits", "beyond-2**53", "deep", "not-utf8", "surrogate"],
)
def test_stored_json_that_is_not_strict_loads_as_corrupt(raw):
    """A stored state whose text is not strict JSON loads open and flagged, never raises."""
    from toolbreaker.core._breaker.state import BreakerState

    state = BreakerState.from_json(raw, Policy())
    assert state.phase == "open"
    assert state.recovered_from_corruption


def test_stored_json_round_trips():
    """A valid stored state loads as itself."""
    from toolbreaker.core._breaker.state import BreakerState
    from toolbreaker.core._canonical import canonical_json

    state = BreakerState(failures=(1, 2), generation=3)
    assert BreakerState.from_json(canonical_json(state.to_dict()), Policy()) == state


# -- the transition table --------------------------------------------------------------------


def test_the_table_has_a_move_for_every_event_in_every_phase_but_one():
    """Every event type a trace or an operator may send is a move of every phase; the
    core's own ``lease-expired`` is a move of a half-open breaker only."""
    from toolbreaker.core._breaker.machine import MOVES, OPERATOR_TYPES
    from toolbreaker.core._breaker.state import EVENT_TYPES, PHASES

    for kind in EVENT_TYPES | OPERATOR_TYPES:
        assert set(MOVES[kind]) == set(PHASES), kind
    assert set(MOVES["lease-expired"]) == {"half_open"}
    assert set(MOVES) == EVENT_TYPES | OPERATOR_TYPES | {"lease-expired"}


@pytest.mark.parametrize(
    "state",
    [BreakerState(), BreakerState(phase="open", generation=1, open_until=50, opens=1)],
)
def test_an_illegal_move_raises(state):
    """A lease expiring outside half-open is no move: a TraceError, never a silent no-op."""
    expired = Event("lease-expired", 10, "d", call="c", generation=state.generation)
    with pytest.raises(TraceError, match="lease-expired is no move of a"):
        step(state, expired, POLICY)


def test_a_state_of_no_known_phase_is_no_move():
    """A state built by hand with a phase the core does not know cannot be stepped."""
    with pytest.raises(TraceError, match="no move of a sideways breaker"):
        step(BreakerState(phase="sideways"), Event("request", 0, "d"), POLICY)
