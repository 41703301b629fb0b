"""The core's predicates, which every shell asks instead of comparing phases itself.

Each is held to what :func:`apply` does on random event sequences (requests, outcomes,
operator events) under random policies (shadow, forced, rate and health-check ones too).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker.core._breaker.machine import apply, step
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.predicates import (
    admits_all,
    check_due,
    held_by_operator,
    idle_rejection,
    idle_window,
    is_evictable,
    may_probe,
    may_start_rejecting,
    rejects_callers,
    retry_after_ms,
)
from toolbreaker.core._breaker.state import (
    CORRUPT,
    BreakerState,
    Event,
    Lease,
    admitted_probe,
    changed_phase,
    half_opened,
    opened,
    opening,
    reopened,
)

OUTCOMES = ["success", "failure", "ignored", "ambiguous"]


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    """Plain policies mostly; shadow, forced, rate and health-check ones too."""
    fields = {
        "failure_threshold": draw(st.integers(1, 4)),
        "window_ms": draw(st.one_of(st.none(), st.integers(1, 200))),
        "cooldown_ms": draw(st.integers(1, 100)),
        "probe_limit": draw(st.integers(1, 3)),
        "success_threshold": draw(st.integers(1, 3)),
        "lease_ttl_ms": draw(st.integers(1, 150)),
        "mode": draw(st.sampled_from(["enforce", "enforce", "shadow"])),
        "force": draw(st.sampled_from([None, None, None, "open", "closed"])),
        "probes": draw(st.sampled_from(["calls", "calls", "health-check"])),
    }
    if draw(st.integers(0, 3)) == 0:
        fields.update(failure_rate_permille=500, minimum_calls=2, window_calls=4, window_ms=None)
    return Policy(**fields)


KINDS = ["request"] * 4 + OUTCOMES * 2 + ["isolate", "force-closed", "release"]


def _walk(policy: Policy, start: BreakerState, steps: list[tuple[str, int, bool]]):
    """Feed the steps; yields (state before, event, new state, records)."""
    state, at, issued = start, 0, []
    for n, (kind, gap, settle) in enumerate(steps):
        at += gap
        call: str | None = f"c{n}"
        generation: int | None = None
        if kind in OUTCOMES:
            if settle and issued:
                call, generation = issued.pop(0)
            else:
                generation = state.generation
        event = Event(
            kind, at, "dep", call, generation, reason="ops" if kind != "release" else None
        )
        new, records = apply(state, event, policy)
        yield state, event, new, records
        if kind == "request" and records[-1].attempted:
            issued.append((call, records[-1].generation))
        state = new


walks = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 80), st.booleans()), max_size=60)


@settings(max_examples=400, deadline=None)
@given(policies(), st.sampled_from([BreakerState(), CORRUPT]), walks)
def test_rejects_callers_is_what_a_request_gets(policy, start, steps):
    """A breaker that rejects callers refuses a user's request (unless its cooldown is
    over and the request becomes a probe); one that does not admits it (unless every
    probe slot of a half-open breaker is taken). Shadow mode and a forced close never
    reject on the phase alone; isolation and ``force = "open"`` always do."""
    for before, event, _new, _records in _walk(policy, start, steps):
        request = Event("request", event.at, "dep", "probe?")
        record = step(before, request, policy)[1]
        if rejects_callers(before, policy):
            assert not record.attempted or (
                before.phase == "open" and record.reason == "probe-admitted"
            )
            assert not admits_all(before, policy) or before.isolated or policy.force == "open"
        else:
            assert record.attempted or record.reason == "probe-limit"
        if idle_rejection(before, event.at, policy) is not None:
            assert rejects_callers(before, policy)


@settings(max_examples=400, deadline=None)
@given(policies(), st.sampled_from([BreakerState(), CORRUPT]), walks)
def test_record_predicates_follow_the_phases(policy, start, steps):
    """opened, reopened, half_opened and changed_phase read the record's two phases;
    opening says the same from the two states; every record after which the breaker
    began to reject callers is one that may_start_rejecting flags."""
    for before, _event, new, records in _walk(policy, start, steps):
        for record in records:
            assert opened(record) == (record.to_phase == "open" != record.from_phase)
            phases = (record.from_phase, record.to_phase)
            assert reopened(record) == (phases == ("half_open", "open"))
            assert half_opened(record) == (record.to_phase == "half_open" != record.from_phase)
            assert changed_phase(record) == (record.from_phase != record.to_phase)
            assert admitted_probe(record) == (
                record.attempted and record.to_phase == "half_open" and not record.would_reject
            )
            if admitted_probe(record):
                assert record.reason == "probe-admitted"
            if opened(record):
                assert may_start_rejecting(record)
        if len(records) == 1:
            assert opening(before, new) == opened(records[0])
        if rejects_callers(new, policy) and not rejects_callers(before, policy):
            assert any(may_start_rejecting(record) for record in records)


@settings(max_examples=300, deadline=None)
@given(policies(), walks)
def test_a_probe_is_admitted_only_where_may_probe_says(policy, steps):
    """A request admitted as a probe came to a breaker that was not closed."""
    for before, event, _new, records in _walk(policy, BreakerState(), steps):
        if event.type == "request" and any(admitted_probe(r) for r in records):
            assert may_probe(before)


def test_a_forced_close_that_opens_still_admits():
    """The operator's forced close: a failure opens the phase, callers are not refused."""
    policy = Policy(failure_threshold=1)
    forced, _ = apply(BreakerState(), Event("force-closed", 0, "d", reason="keep"), policy)
    admitted, records = apply(forced, Event("request", 1, "d", "c1"), policy)
    opened_state, records = apply(admitted, Event("failure", 2, "d", "c1", 1), policy)
    assert opened(records[0])
    assert opened_state.phase == "open"
    assert not rejects_callers(opened_state, policy)
    isolated, records = apply(opened_state, Event("isolate", 3, "d", reason="x"), policy)
    assert not opened(records[0])  # open to open
    assert may_start_rejecting(records[0])
    assert rejects_callers(isolated, policy)


def test_shadow_and_forced_policies():
    """Shadow mode and force = "closed" admit an open breaker's callers; force = "open"
    refuses them while the phase is closed; isolation refuses them in shadow mode."""
    open_state = BreakerState(phase="open", generation=1, open_until=100, opens=1)
    isolated = BreakerState(phase="open", generation=1, isolated=True)
    assert rejects_callers(open_state, Policy())
    assert not rejects_callers(open_state, Policy(mode="shadow"))
    assert not rejects_callers(open_state, Policy(force="closed"))
    assert rejects_callers(BreakerState(), Policy(force="open"))
    assert rejects_callers(isolated, Policy(mode="shadow"))
    assert not rejects_callers(BreakerState(), Policy())
    half_open = BreakerState(phase="half_open", generation=2, opens=1)
    assert not rejects_callers(half_open, Policy())
    # Under health-check probes a half-open breaker lets only the checker's probe through.
    assert rejects_callers(half_open, Policy(probes="health-check"))
    assert not rejects_callers(half_open, Policy(probes="health-check", mode="shadow"))


def test_check_due():
    """The health checker's question: idle while closed or held by an operator, due once
    an open breaker's deadline passed or while a probe slot is free, else wait."""
    policy = Policy(probe_limit=1, lease_ttl_ms=50, probes="health-check")
    assert check_due(BreakerState(), 0, policy) == "idle"
    assert check_due(BreakerState(phase="open", isolated=True), 0, policy) == "idle"
    assert check_due(BreakerState(forced_closed=True), 0, policy) == "idle"
    cooling = BreakerState(phase="open", generation=1, open_until=100, opens=1)
    assert check_due(cooling, 99, policy) == "wait"
    assert check_due(cooling, 100, policy) == "due"
    assert check_due(CORRUPT, 0, policy) == "due"
    probing = BreakerState(phase="half_open", generation=2, opens=1, leases=(Lease("c", 10),))
    assert check_due(probing, 59, policy) == "wait"
    assert check_due(probing, 60, policy) == "due"  # the lease expires: the core reopens
    assert check_due(BreakerState(phase="half_open", generation=2, opens=1), 0, policy) == "due"


def test_held_by_operator():
    """Isolated or forced closed until released; such a breaker is never forgotten."""
    assert held_by_operator(BreakerState(phase="open", isolated=True))
    assert held_by_operator(BreakerState(forced_closed=True))
    assert not held_by_operator(BreakerState())
    assert not is_evictable(BreakerState(forced_closed=True))
    assert is_evictable(BreakerState())


# -- the core's fast builders ----------------------------------------------------------------

ints = st.integers(0, 2**53 - 1)
maybe_ints = st.one_of(st.none(), ints)
texts = st.one_of(st.none(), st.text(max_size=5))


@given(
    st.tuples(
        st.sampled_from(["closed", "open", "half_open"]),
        ints,
        st.lists(ints, max_size=3).map(tuple),
        maybe_ints,
        ints,
        ints,
        st.lists(st.builds(Lease, st.text(max_size=3), ints), max_size=2).map(tuple),
        st.booleans(),
        st.booleans(),
        st.lists(st.tuples(ints, ints, ints, ints), max_size=2).map(tuple),
        st.booleans(),
        texts,
    )
)
def test_built_state_is_the_constructor(fields):
    """built_state(...) is BreakerState(...): equal, same hash, same dict."""
    from toolbreaker.core._breaker.state import built_state

    fast, slow = built_state(*fields), BreakerState(*fields)
    assert type(fast) is BreakerState
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert fast.to_dict() == slow.to_dict()


@given(
    st.text(max_size=4),
    st.sampled_from(KINDS),
    st.tuples(
        st.sampled_from(["closed", "open", "half_open"]),
        st.sampled_from(["closed", "open", "half_open"]),
        st.booleans(),
        st.booleans(),
        st.sampled_from(["call-admitted", "cooldown", "success"]),
        ints,
        maybe_ints,
        st.booleans(),
    ),
)
def test_built_record_is_the_constructor(dependency, kind, rest):
    """built_record(...) is Transition(...) with no policy version: equal, same dict."""
    from toolbreaker.core._breaker.state import Transition, built_record

    event = Event(kind, 1, dependency)
    fast, slow = built_record(dependency, event, *rest), Transition(dependency, event, *rest)
    assert type(fast) is Transition
    assert fast == slow
    assert fast.policy_version is None
    assert fast.to_dict() == slow.to_dict()


@settings(max_examples=400, deadline=None)
@given(policies(), st.sampled_from([BreakerState(), CORRUPT]), walks, st.lists(st.integers(0, 400)))
def test_an_idle_window_holds_what_the_predicates_say_at_every_moment_in_it(
    policy, start, steps, offsets
):
    """Inside an idle window every moment gets the window's reason from
    :func:`idle_rejection`, the window's wait from :func:`retry_after_ms`, and a request
    there changes nothing in :func:`step`; with no window, :func:`idle_rejection` says
    ``None``: a shell that rejects for the whole window decides as the core would."""
    for before, event, _new, _records in _walk(policy, start, steps):
        window = idle_window(before, event.at, policy)
        if window is None:
            assert idle_rejection(before, event.at, policy) is None
            continue
        for t in [event.at, *(event.at + o for o in offsets)]:
            if t >= window.until:
                continue
            assert idle_rejection(before, t, policy) == window.reason
            wait = retry_after_ms(before, t, policy)
            assert wait == (None if window.admits_at is None else window.admits_at - t)
            new, record = step(before, Event("request", t, "dep", "x"), policy)
            assert new == before
            assert not record.attempted
            assert record.reason == window.reason


@given(
    st.text(st.characters(blacklist_characters="[]:"), min_size=1, max_size=12),
    st.sampled_from(["default", "read", "write"]),
    st.text(st.characters(blacklist_characters="[]"), min_size=1, max_size=12),
)
def test_a_scoped_breakers_key_finds_its_rows_key(dependency, operation, label):
    """The one format of breaker keys: a scope's breaker is named by its row's dependency
    with the scope in brackets, and taking the brackets out gives the row's key back."""
    from toolbreaker.core._breaker.keys import breaker_key, row_of, scoped_dependency

    row = breaker_key(dependency, operation)
    assert row == (dependency if operation == "default" else f"{dependency}:{operation}")
    assert row_of(breaker_key(scoped_dependency(dependency, label), operation)) == row
    assert row_of(row) == row
