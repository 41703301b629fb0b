"""The history's pure rules: requests a replay needs, and time in the store's order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker import Policy
from toolbreaker.core import Event, apply, replay
from toolbreaker.core._breaker.history import (
    QuietCall,
    in_store_order,
    quiet_entry,
    record_of,
    replayable,
    transition_entry,
)
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.core._breaker.trace import parse_event, trace_event


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


# -- quiet calls (issue 34, item 10) ---------------------------------------------------------

POLICY = Policy(failure_threshold=2, cooldown_ms=1_000)


class Store:
    """A store reduced to its rule, for the pure placement: the core decides each event;
    a new state is a write (entries with the version it made), anything else is counted
    by the process that decided it, per the version it met."""

    def __init__(self) -> None:
        self.state = BreakerState()
        self.version = 0
        self.entries: list[dict[str, Any]] = []
        self.calls: dict[QuietCall, int] = {}
        self.rejected: dict[int, int] = {}
        self.first_at: dict[int, int] = {}
        self.admitted_on: dict[str, int] = {}

    def apply(self, event: Event) -> Any:
        new, records = apply(self.state, event, POLICY)
        if new != self.state:
            self.version += 1
            self.state = new
            for record in records:
                self.entries.append({**transition_entry(record, 0.0), "version": self.version})
            self.admitted_on.pop(event.call or "", None)
            return records
        self.first_at.setdefault(self.version, event.at)
        if event.type == "request" and records[-1].attempted:
            self.admitted_on[event.call or ""] = self.version
        elif event.type == "request":
            self.rejected[self.version] = self.rejected.get(self.version, 0) + 1
        elif event.call in self.admitted_on:
            segment = QuietCall(
                self.admitted_on.pop(event.call), self.version, event.type, event.generation or 0
            )
            self.calls[segment] = self.calls.get(segment, 0) + 1
        return records

    def quiet(self, source: str = "p1") -> dict[str, Any]:
        return quiet_entry(
            "k", source, self.calls, rejected=self.rejected, first_at=self.first_at, wall=0.0
        )


def run_calls(store: Store, plan: str, start: int = 0) -> dict[str, int]:
    """``s`` a call that succeeds, ``f`` one that fails, ``.`` a millisecond passes; the
    counts the breaker's callers saw."""
    seen = {"remote": 0, "rejected": 0}
    at = start
    for n, step in enumerate(plan):
        if step == ".":
            at += 100
            continue
        call = f"c{n}"
        records = store.apply(Event("request", at, "k", call=call))
        if not records[-1].attempted:
            seen["rejected"] += 1
            continue
        seen["remote"] += 1
        kind = "success" if step == "s" else "failure"
        store.apply(Event(kind, at, "k", call=call, generation=records[-1].generation))
    return seen


def replayed(entries: list[dict[str, Any]], unplaced: list[int] | None = None) -> Any:
    events = []
    for entry in replayable(entries, unplaced=unplaced):
        record = record_of(entry)
        if record is not None:
            line = trace_event(record)
            assert line is not None
            events.append(parse_event(line))
    return replay(events, POLICY)["dependencies"]["k"]


def test_an_export_counts_the_calls_that_changed_nothing():
    """Successes while closed and rejections while open are no transition; with the quiet
    entry, a replay of the history makes every remote attempt and local rejection the
    callers saw, and passes through the same states."""
    store = Store()
    seen = run_calls(store, "sssss" + "ff" + "ssss" + ".." * 6 + "s" + "ssss")
    entries = [*store.entries, store.quiet()]
    got = replayed(entries)
    assert (got["remote_attempts"], got["local_rejections"]) == (seen["remote"], seen["rejected"])
    assert seen["rejected"] == 4
    assert got["final_state"] == store.state.to_dict()
    without = replayed(store.entries)  # the defect: the transitions alone
    assert without["remote_attempts"] < seen["remote"]
    assert without["local_rejections"] == 0


def test_the_same_totals_written_twice_count_once():
    """A quiet entry is running totals: written again (a lost answer, a later flush) it
    adds nothing; another process's totals add up."""
    store = Store()
    seen = run_calls(store, "ssss" + "ff" + "sss")
    once = replayed([*store.entries, store.quiet()])
    twice = replayed([*store.entries, store.quiet(), store.quiet()])
    assert once == twice
    assert once["remote_attempts"] == seen["remote"]
    other = replayed([*store.entries, store.quiet("p1"), store.quiet("p2")])
    assert other["remote_attempts"] == once["remote_attempts"] + sum(store.calls.values())


def test_calls_on_a_state_no_longer_in_the_history_are_said_not_placed():
    """The history was trimmed past the version the calls met: they are not placed, and
    the caller learns how many."""
    store = Store()
    run_calls(store, "ff" + "ssss")  # opens at version 2: four rejections on it
    trimmed = [e for e in store.entries if e["version"] != 2]
    unplaced: list[int] = []
    got = replayed([*trimmed, store.quiet()], unplaced)
    assert unplaced == [4]
    assert got["local_rejections"] == 0


def test_quiet_calls_of_a_breaker_never_written_still_replay():
    """A healthy breaker the store never wrote has only quiet calls: they replay at the
    instant the process first counted them."""
    store = Store()
    seen = run_calls(store, "sssss", start=500)
    got = replayed([store.quiet()])
    assert got["remote_attempts"] == seen["remote"] == 5
    assert got["final_state"]["state"] == "closed"


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet="sf.", max_size=80).filter(lambda p: "s" in p or "f" in p), st.integers(0, 3)
)
def test_property_any_run_replays_to_what_its_callers_saw(plan, flushes):
    """Any run: the history and its quiet entries (flushed any number of times) replay to
    the callers' remote attempts and local rejections and to the store's final state."""
    store = Store()
    seen = run_calls(store, plan)
    entries = [*store.entries, *[store.quiet() for _ in range(max(1, flushes))]]
    got = replayed(entries)
    assert (got["remote_attempts"], got["local_rejections"]) == (seen["remote"], seen["rejected"])
    assert got["final_state"] == store.state.to_dict()
