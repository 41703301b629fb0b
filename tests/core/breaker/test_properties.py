"""Properties of the core under random traces (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from toolbreaker import Policy
from toolbreaker.core import Event, Replay, replay

policies = st.builds(
    Policy,
    failure_threshold=st.integers(1, 4),
    window_ms=st.one_of(st.none(), st.integers(1, 200)),
    cooldown_ms=st.integers(1, 100),
    cooldown_multiplier=st.integers(1, 3),
    cooldown_max_ms=st.just(400),
    probe_limit=st.integers(1, 3),
    success_threshold=st.integers(1, 3),
    lease_ttl_ms=st.integers(1, 150),
)


@st.composite
def traces(draw: st.DrawFn) -> list[Event]:
    """Valid traces for two dependencies: outcomes only settle admitted, unsettled calls."""
    policy = draw(policies)
    driver = Replay(policy)
    events: list[Event] = []
    clock = {"a": 0, "b": 0}
    unsettled: dict[str, list[str]] = {"a": [], "b": []}
    for n in range(draw(st.integers(0, 60))):
        dep = draw(st.sampled_from("ab"))
        clock[dep] += draw(st.integers(0, 60))
        kinds = ["request"] + (
            ["success", "failure", "ignored", "ambiguous"] if unsettled[dep] else []
        )
        kind = draw(st.sampled_from(kinds))
        if kind == "request":
            event = Event(kind, clock[dep], dep, call=f"c{n}")
        else:
            call = draw(st.sampled_from(unsettled[dep]))
            unsettled[dep].remove(call)
            event = Event(kind, clock[dep], dep, call=call)
        records = driver.feed(event)
        if kind == "request" and records[-1].attempted:
            unsettled[dep].append(f"c{n}")
        events.append(event)
    return [policy, *events]  # type: ignore[list-item]


@settings(max_examples=300, deadline=None)
@given(traces())
def test_replay_is_deterministic(trace):
    """The same events and policy give the same receipt, hash included."""
    policy, events = trace[0], trace[1:]
    assert replay(events, policy) == replay(events, policy)


@settings(max_examples=300, deadline=None)
@given(traces())
def test_admission_invariants(trace):
    """Rejected requests are never attempted; closed never rejects; leases never exceed the limit;
    outcomes never attempt anything."""
    policy, events = trace[0], trace[1:]
    driver = Replay(policy)
    for event in events:
        for record in driver.feed(event):
            assert not (record.rejected and record.attempted)
            if record.from_phase == "closed" and record.event.type == "request":
                assert record.attempted
            if record.event.type != "request":
                assert not record.attempted
                assert not record.rejected
        for ledger in driver._ledgers.values():
            assert len(ledger.state.leases) <= policy.probe_limit


class BreakerMachine(RuleBasedStateMachine):
    """Drive one breaker with arbitrary requests, outcomes and clock steps."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = Policy(
            failure_threshold=2, cooldown_ms=50, probe_limit=2, success_threshold=2, lease_ttl_ms=80
        )
        self.driver = Replay(self.policy)
        self.now = 0
        self.n = 0
        self.unsettled: list[str] = []
        self.admitted_total = 0

    @rule(ms=st.integers(0, 120))
    def wait(self, ms: int) -> None:
        self.now += ms

    @rule()
    def request(self) -> None:
        self.n += 1
        call = f"c{self.n}"
        records = self.driver.feed(Event("request", self.now, "d", call=call))
        if records[-1].attempted:
            self.unsettled.append(call)
            self.admitted_total += 1

    @precondition(lambda self: self.unsettled)
    @rule(
        kind=st.sampled_from(["success", "failure", "ignored", "ambiguous"]),
        index=st.integers(0, 10),
    )
    def settle(self, kind: str, index: int) -> None:
        call = self.unsettled.pop(index % len(self.unsettled))
        before = self.driver._ledgers["d"].state
        record = self.driver.feed(Event(kind, self.now, "d", call=call))[-1]
        if kind == "success" and record.to_phase == "closed":
            assert before.phase in ("closed", "half_open")
        if record.reason == "stale-outcome":
            assert record.from_phase == record.to_phase

    @invariant()
    def leases_bounded(self) -> None:
        if "d" in self.driver._ledgers:
            state = self.driver._ledgers["d"].state
            assert len(state.leases) <= self.policy.probe_limit
            assert state.phase == "half_open" or not state.leases

    @invariant()
    def counts_match_receipt(self) -> None:
        if "d" in self.driver._ledgers:
            dep = self.driver.receipt()["dependencies"]["d"]
            assert dep["remote_attempts"] == self.admitted_total


TestBreakerMachine = BreakerMachine.TestCase
TestBreakerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
