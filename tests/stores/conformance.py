"""The store conformance suite: every store must pass it, the in-memory reference included.

A test module subclasses :class:`StoreContract` and provides:

- the ``store`` fixture: a fresh store, closed when the test ends;
- the ``twin`` fixture: a second handle on the same shared state, as another process
  would open it (the in-memory store, which shares nothing, returns ``store`` itself);
- :meth:`StoreContract.write_raw`: put raw text where the state of a key is persisted;
- ``shared``: whether states are shared between handles (tests of propagation need it).

Stores that talk to a server also subclass :class:`AmbiguousWriteContract`: a write whose
answer is lost raises ``StoreWriteUnknown`` (it may have been made). The in-memory and
SQLite stores commit in the calling process: a write of theirs that fails was not made.

Every transition is checked against the pure core: a store must return exactly what
:func:`toolbreaker.core.apply` returns for the same state and event.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ports import free_port
from toolbreaker import Policy, Transition
from toolbreaker.core import BreakerState, Event, apply
from toolbreaker.core._breaker.state import CORRUPT
from toolbreaker.errors import StoreUnavailable, StoreWriteUnknown

POLICY = Policy(failure_threshold=3, cooldown_ms=20_000, success_threshold=2, probe_limit=1)

#: Stored texts that must all load as the core's recovered-from-corruption open state.
CORRUPT_TEXTS = [
    "not json",
    "",
    "[]",
    "{}",
    '"closed"',
    '{"state": "ajar"}',
    '{"state": "closed", "failures": [-5]}',
    '{"state": "closed", "generation": "7"}',
    '{"state": "closed", "generation": 1.5}',
    '{"state": "closed", "extra": 1}',
    '{"state": "open"}',
    '{"state": "half_open", "leases": [{"call": "a", "admitted_at": 1}, '
    '{"call": "b", "admitted_at": 1}]}',
    '{"schema": "toolbreaker.state/v0", "state": "closed"}',
    # Not strict JSON: the last "state" would win, loading a stored open breaker closed.
    '{"state": "open", "open_until": 99, "state": "closed"}',
    '{"state": "closed", "generation": ' + "9" * 5000 + "}",
    "[" * 100_000,
    '{"state": "closed", "failures": [1, 2, 3]}',
    "[" * 5000,
]


#: Seconds after which a call is taken to hang: a guard against hangs, never a claim about
#: speed (the suite runs twice at once on two shared cores).
HANG_GUARD = 60.0


def wait_for(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` until it holds; fail if it has not after ``HANG_GUARD`` seconds.

    The guard only catches a condition that never comes: how soon it comes is never
    asserted, since the suite shares two cores with another run of itself.
    """
    give_up = time.monotonic() + HANG_GUARD
    while not predicate():
        if time.monotonic() > give_up:
            pytest.fail(f"condition not reached within {HANG_GUARD:.0f} s")
        time.sleep(0.002)


def without_hanging(call: Callable[[], Any]) -> Any:
    """Return what ``call()`` returns (or raise what it raises); fail if it hangs.

    The call runs in a daemon thread so that a hang fails the test with a message instead
    of stalling the suite.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_GUARD)
    if worker.is_alive():
        pytest.fail(f"the call hung for {HANG_GUARD:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def fork_and_check(check) -> int:
    """Run ``check()`` in a forked child; return its exit code (0 when it returned True)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            code = 0 if check() else 1
        except BaseException:  # noqa: BLE001 - anything means the check failed
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class Twin:
    """Feeds the same events to a store and to the pure core; they must agree exactly."""

    def __init__(self, store: Any, key: str, policy: Policy) -> None:
        self.store = store
        self.key = key
        self.policy = policy
        self.state = BreakerState()
        self.unsettled: dict[str, int] = {}
        self.calls = 0

    def feed(self, event: Event) -> tuple[Transition, ...]:
        expected_state, expected = apply(self.state, event, self.policy)
        state, records = self.store.apply(self.key, event, self.policy)
        assert records == expected
        assert state == expected_state
        self.state = state
        if event.type == "request" and records[-1].attempted and event.call is not None:
            self.unsettled[event.call] = records[-1].generation
        return records

    def request(self, at: int) -> Transition:
        self.calls += 1
        return self.feed(Event("request", at, self.key, call=f"c{self.calls}"))[-1]

    def outcome(self, kind: str, at: int, call: str | None = None) -> Transition:
        call = call if call is not None else next(iter(self.unsettled))
        generation = self.unsettled.pop(call)
        return self.feed(Event(kind, at, self.key, call=call, generation=generation))[-1]

    def trip(self, at: int = 0) -> int:
        """Open the breaker with threshold failures from ``at``; returns the last instant."""
        for n in range(self.policy.failure_threshold):
            self.request(at + 2 * n)
            self.outcome("failure", at + 2 * n + 1, call=f"c{self.calls}")
        return at + 2 * self.policy.failure_threshold - 1


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Policy, list[tuple[int, str, int]]]:
    """A policy and (delay, kind, pick) steps; outcomes settle a picked unsettled call."""
    policy = Policy(
        failure_threshold=draw(st.integers(1, 4)),
        window_ms=draw(st.one_of(st.none(), st.integers(1, 200))),
        cooldown_ms=draw(st.integers(1, 100)),
        cooldown_multiplier=draw(st.integers(1, 3)),
        cooldown_max_ms=400,
        probe_limit=draw(st.integers(1, 3)),
        success_threshold=draw(st.integers(1, 3)),
        lease_ttl_ms=draw(st.integers(1, 150)),
    )
    kinds = st.sampled_from(["request", "request", "success", "failure", "ignored", "ambiguous"])
    steps = draw(st.lists(st.tuples(st.integers(0, 60), kinds, st.integers(0, 10)), max_size=40))
    return policy, steps


class StoreContract:
    """The tests every store passes."""

    shared: ClassVar[bool] = True

    def write_raw(self, store: Any, key: str, raw: str, policy: Policy) -> None:
        raise NotImplementedError

    async def close_async(self, store: Any) -> None:
        """Release what ``aapply`` opened (a store with an asyncio client overrides this)."""

    @pytest.fixture
    def key(self) -> str:
        return f"dep-{uuid.uuid4().hex[:12]}"

    # -- the core's transitions, through the store ---------------------------------------

    def test_a_new_key_is_closed(self, store, key):
        """A key never seen loads as the initial closed state."""
        assert store.load(key, POLICY) == BreakerState()

    def test_view_is_one_object_per_key(self, store, key):
        """view() returns the same object for the same key, and its key."""
        assert store.view(key) is store.view(key)
        assert store.view(key).key == key

    def test_threshold_failure_opens(self, store, key):
        """The failure that reaches failure_threshold opens the breaker."""
        twin = Twin(store, key, POLICY)
        twin.trip()
        assert twin.state.phase == "open"
        assert store.load(key, POLICY) == twin.state

    def test_success_resets_consecutive_failures(self, store, key):
        """Without a window, a success resets the count."""
        twin = Twin(store, key, POLICY)
        for at in (0, 2):
            twin.request(at)
            twin.outcome("failure", at + 1)
        twin.request(4)
        twin.outcome("success", 5)
        twin.request(6)
        assert twin.outcome("failure", 7).to_phase == "closed"

    def test_window_counts_recent_failures_only(self, store, key):
        """With a window, only failures younger than window_ms count."""
        twin = Twin(store, key, Policy(failure_threshold=2, window_ms=100))
        twin.request(0)
        twin.outcome("failure", 0)
        twin.request(200)
        assert twin.outcome("failure", 200).to_phase == "closed"
        twin.request(250)
        assert twin.outcome("failure", 250).to_phase == "open"

    def test_deadline_admits_one_probe_and_then_probe_limit(self, store, key):
        """At the cooldown deadline one request probes; the next one gets probe-limit."""
        twin = Twin(store, key, POLICY)
        last = twin.trip()
        deadline = last + POLICY.cooldown_ms
        assert twin.request(deadline - 1).reason == "cooldown"
        assert twin.request(deadline).reason == "probe-admitted"
        assert twin.request(deadline).reason == "probe-limit"

    def test_probe_quorum_closes_and_failed_probe_reopens(self, store, key):
        """success_threshold probe successes close; a failed probe reopens at once."""
        twin = Twin(store, key, POLICY)
        deadline = twin.trip() + POLICY.cooldown_ms
        twin.request(deadline)
        assert twin.outcome("success", deadline + 1).reason == "probe-success"
        twin.request(deadline + 2)
        assert twin.outcome("success", deadline + 3).reason == "probe-quorum"
        assert twin.state.phase == "closed"
        deadline = twin.trip(deadline + 10) + POLICY.cooldown_ms
        twin.request(deadline)
        assert twin.outcome("ambiguous", deadline + 1).to_phase == "open"

    def test_expired_lease_reopens_at_its_expiry_instant(self, store, key):
        """A probe never settled expires at admitted_at + lease_ttl_ms and reopens."""
        policy = Policy(failure_threshold=1, cooldown_ms=100, lease_ttl_ms=50)
        twin = Twin(store, key, policy)
        deadline = twin.trip() + 100
        twin.request(deadline)
        assert twin.request(deadline + 49).reason == "probe-limit"
        records = twin.feed(Event("request", deadline + 50, key, call="late"))
        assert [r.reason for r in records] == ["lease-expired", "cooldown"]
        assert records[0].event.at == deadline + 50
        assert store.load(key, policy).phase == "open"

    def test_stale_outcomes_change_nothing(self, store, key):
        """An outcome of a call admitted in an older generation is stale and changes nothing."""
        twin = Twin(store, key, POLICY)
        twin.request(0)  # c1, admitted in generation 0, settled late
        deadline = twin.trip(1) + POLICY.cooldown_ms
        twin.request(deadline)
        before = store.load(key, POLICY)
        record = twin.outcome("success", deadline + 1, call="c1")
        assert record.reason == "stale-outcome"
        assert store.load(key, POLICY) == before

    def test_isolate_and_release(self, store, key):
        """An operator's isolation holds until released; release starts a closed generation."""
        twin = Twin(store, key, POLICY)
        twin.feed(Event("isolate", 0, key, call="operator:x"))
        assert twin.request(10**9).reason == "isolated"
        twin.feed(Event("release", 10**9 + 1, key, call="operator:x"))
        assert twin.request(10**9 + 2).reason == "call-admitted"

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.differing_executors,  # one class of tests, run once per store
        ],
    )
    @given(scenario=scenarios())
    def test_agrees_with_the_core_on_random_traces(self, store, scenario):
        """Any valid sequence of events gives the core's records and states, one by one."""
        policy, steps = scenario
        twin = Twin(store, f"dep-{uuid.uuid4().hex[:12]}", policy)
        now = 0
        for delay, kind, pick in steps:
            now += delay
            if kind == "request" or not twin.unsettled:
                twin.request(now)
            else:
                calls = list(twin.unsettled)
                twin.outcome(kind, now, calls[pick % len(calls)])
        assert store.load(twin.key, policy) == twin.state

    # -- concurrency ------------------------------------------------------------------

    @pytest.mark.parametrize("probe_limit", [1, 3])
    def test_concurrent_half_open_admission(self, store, twin, key, probe_limit):
        """Many requests at the cooldown deadline at once: exactly probe_limit probes."""
        policy = Policy(failure_threshold=1, cooldown_ms=1000, probe_limit=probe_limit)
        Twin(store, key, policy).trip()
        handles = [store, twin]
        barrier = threading.Barrier(16)
        records: list[Transition] = []
        errors: list[BaseException] = []

        def request(n: int) -> None:
            barrier.wait()
            try:
                event = Event("request", 1001, key, call=f"p{n}")
                records.append(handles[n % 2].apply(key, event, policy)[1][-1])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=request, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], errors
        assert sum(r.attempted for r in records) == probe_limit
        assert {r.reason for r in records if not r.attempted} == {"probe-limit"}
        state = store.load(key, policy)
        assert state.phase == "half_open"
        assert len(state.leases) == probe_limit

    def test_no_lost_update_under_thread_contention(self, store, twin, key):
        """Concurrent failures from several threads and handles are all counted."""
        policy = Policy(failure_threshold=1000)
        handles = [store, twin]
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def fail(n: int) -> None:
            barrier.wait()
            try:
                for i in range(25):
                    event = Event("failure", i, key, call=f"t{n}.{i}", generation=0)
                    handles[n % 2].apply(key, event, policy)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=fail, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], errors
        assert len(store.load(key, policy).failures) == 200

    # -- fail closed ------------------------------------------------------------------

    @pytest.mark.parametrize("raw", CORRUPT_TEXTS, ids=range(len(CORRUPT_TEXTS)))
    def test_corrupt_state_loads_open_and_recovers_through_the_core(self, store, twin, key, raw):
        """Stored state that does not validate loads open; its cooldown starts at first touch."""
        self.write_raw(store, key, raw, POLICY)
        assert twin.load(key, POLICY) == CORRUPT
        expected_state, expected = apply(CORRUPT, Event("request", 500, key, call="x"), POLICY)
        state, records = store.apply(key, Event("request", 500, key, call="x"), POLICY)
        assert (state, records) == (expected_state, expected)
        assert records[-1].reason == "cooldown"
        assert state.open_until == 500 + POLICY.cooldown_ms
        assert state.recovered_from_corruption
        assert twin.load(key, POLICY) == state

    def test_a_view_never_holds_a_state_the_fast_path_cannot_leave(self, store, key):
        """A corrupt state is never offered to the fast path: its cooldown needs the store."""
        if not self.shared:
            pytest.skip("the in-memory store keeps whatever it is forced to")
        view = store.view(key)
        self.write_raw(store, key, "garbage", POLICY)
        # A trusted view may answer load() until its feed brings the raw write (SQLite's
        # poller: one poll interval), so wait for the store to see it.
        wait_for(lambda: store.load(key, POLICY) == CORRUPT)
        assert view.state is None

    # -- async ------------------------------------------------------------------------

    def test_aapply_agrees_with_the_core(self, store, key):
        """aapply gives the same records as the core, without blocking the loop."""

        async def main() -> list[str]:
            try:
                state = BreakerState()
                reasons = []
                for n in range(6):
                    if n % 2 == 0:
                        event = Event("request", n, key, call=f"a{n}")
                    else:
                        event = Event("failure", n, key, call=f"a{n - 1}", generation=0)
                    expected_state, expected = apply(state, event, POLICY)
                    state, records = await store.aapply(key, event, POLICY)
                    assert (state, records) == (expected_state, expected)
                    reasons.append(records[-1].reason)
                return reasons
            finally:
                await self.close_async(store)

        reasons = asyncio.run(main())
        assert reasons[-1] == "qualifying-failure"
        assert store.load(key, POLICY).phase == "open"

    # -- propagation between handles ---------------------------------------------------

    def _fed_view(self, store: Any, key: str) -> Any:
        """A view of ``key`` that the store keeps current (after one confirming load)."""
        view = store.view(key)

        def trusted() -> bool:
            store.load(key, POLICY)
            return view.state is not None

        wait_for(trusted)
        return view

    def test_an_opening_reaches_other_handles_views(self, store, twin, key):
        """Another process's view learns that the breaker opened, without asking."""
        if not self.shared:
            pytest.skip("the in-memory store shares nothing")
        view = self._fed_view(store, key)
        assert view.state is not None
        assert view.state.phase == "closed"
        Twin(twin, key, POLICY).trip()
        wait_for(lambda: view.state is not None and view.state.phase == "open")

    def test_a_release_reaches_every_view_promptly(self, store, twin, key):
        """An operator's isolation and release take effect in other processes' views,
        pushed by the store's feed: this handle never asks the store for them."""
        if not self.shared:
            pytest.skip("the in-memory store shares nothing")
        view = self._fed_view(store, key)
        twin.apply(key, Event("isolate", 0, key, call="operator:x"), POLICY)
        wait_for(lambda: view.state is not None and view.state.isolated)
        twin.apply(key, Event("release", 1, key, call="operator:x"), POLICY)
        wait_for(lambda: view.state is not None and view.state.phase == "closed")
        assert view.state == twin.load(key, POLICY)  # the release itself, not a later state

    def test_an_operators_kill_switch_is_persisted_with_its_reason(self, store, twin, key):
        """An isolation and a forced close are stored with the operator's reason: another
        handle (another process, or this one after a restart) loads and enforces them."""
        Twin(store, key, POLICY).feed(
            Event("isolate", 0, key, call="operator:x", reason="incident 7")
        )
        loaded = twin.load(key, POLICY)
        assert (loaded.isolated, loaded.operator_reason) == (True, "incident 7")
        other = Twin(twin, key, POLICY)
        other.state = loaded
        assert other.request(1).reason == "isolated"
        other.feed(Event("force-closed", 2, key, call="operator:y", reason="rollout"))
        end = other.trip(3)
        record = other.request(end + 1)
        assert (record.from_phase, record.attempted, record.would_reject) == ("open", True, True)
        again = store.load(key, POLICY)
        assert (again.forced_closed, again.operator_reason) == (True, "rollout")
        other.feed(Event("release", end + 2, key, call="operator:y"))
        assert not twin.load(key, POLICY).forced_closed

    # -- journal ----------------------------------------------------------------------

    def test_journal_round_trip_and_order(self, store):
        """Entries come back equal, oldest first; an overwrite keeps the first position."""
        task = f"task-{uuid.uuid4().hex[:8]}"
        assert store.journal_get(task, "a") is None
        assert store.journal_entries(task) == []
        assert store.journal_put(task, "a", {"status": "pending", "n": 1})
        assert store.journal_put(task, "b", {"status": "pending", "args": {"x": [1, "y"]}})
        assert store.journal_put(task, "a", {"status": "confirmed", "n": 1})
        assert store.journal_get(task, "a") == {"status": "confirmed", "n": 1}
        assert store.journal_entries(task) == [
            {"status": "confirmed", "n": 1},
            {"status": "pending", "args": {"x": [1, "y"]}},
        ]

    def test_journal_only_new_never_overwrites(self, store, twin):
        """only_new writes once; the second writer learns it lost."""
        task = f"task-{uuid.uuid4().hex[:8]}"
        assert store.journal_put(task, "k", {"status": "pending"}, only_new=True)
        assert not twin.journal_put(task, "k", {"status": "other"}, only_new=True)
        assert twin.journal_get(task, "k") == {"status": "pending"}

    def test_journal_entries_are_copies(self, store):
        """Changing a returned entry changes nothing stored."""
        task = f"task-{uuid.uuid4().hex[:8]}"
        entry = {"status": "pending", "args": {"x": 1}}
        store.journal_put(task, "k", entry)
        entry["args"]["x"] = 2
        got = store.journal_get(task, "k")
        got["status"] = "mutated"
        assert store.journal_get(task, "k") == {"status": "pending", "args": {"x": 1}}


def load_raw_json(raw: str, policy: Policy) -> BreakerState:
    """How a store that keeps parsed states loads a stored text (fail closed)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return CORRUPT
    return BreakerState.from_dict(data, policy)


class RecordsContract:
    """Records and leases: every store that keeps records must pass this.

    A test module subclasses it next to :class:`StoreContract` (same fixtures).
    """

    @pytest.fixture
    def space(self) -> str:
        return f"space-{uuid.uuid4().hex[:8]}"

    def test_a_record_round_trips_with_versions(self, store, twin, space):
        assert store.record_get(space, "a") is None
        assert store.record_put(space, "a", {"x": 1, "nested": {"y": [1, "two"]}}) == 1
        assert twin.record_get(space, "a") == ({"x": 1, "nested": {"y": [1, "two"]}}, 1)
        assert twin.record_put(space, "a", {"x": 2}) == 2
        assert store.record_get(space, "a") == ({"x": 2}, 2)

    def test_compare_and_set_refuses_a_stale_version(self, store, twin, space):
        assert store.record_put(space, "k", {"n": 1}, version=0) == 1
        assert twin.record_put(space, "k", {"n": 2}, version=0) is None
        assert twin.record_put(space, "k", {"n": 2}, version=1) == 2
        assert store.record_put(space, "k", {"n": 3}, version=1) is None
        assert store.record_get(space, "k") == ({"n": 2}, 2)

    def test_delete_honours_the_version(self, store, twin, space):
        store.record_put(space, "k", {"n": 1})
        assert not twin.record_delete(space, "k", version=7)
        assert twin.record_delete(space, "k", version=1)
        assert store.record_get(space, "k") is None
        assert not store.record_delete(space, "k")

    def test_list_is_sorted_and_scoped_to_its_space(self, store, twin, space):
        for key in ("b", "a", "c"):
            store.record_put(space, key, {"k": key})
        store.record_put(space + "-other", "z", {"k": "z"})
        assert [(k, v, n) for k, v, n in twin.record_list(space)] == [
            ("a", {"k": "a"}, 1),
            ("b", {"k": "b"}, 1),
            ("c", {"k": "c"}, 1),
        ]

    def test_records_are_copies(self, store, space):
        value = {"items": [1]}
        store.record_put(space, "k", value)
        value["items"].append(2)
        got, _ = store.record_get(space, "k")
        got["items"].append(3)
        assert store.record_get(space, "k") == ({"items": [1]}, 1)

    @pytest.mark.parametrize(
        ("space", "key", "value"),
        [("", "k", {}), ("s", "", {}), ("s", "x" * 513, {}), ("s", "a\x1bb", {}), ("s", "k", [1])],
    )
    def test_bad_names_and_values_are_refused(self, store, space, key, value):
        with pytest.raises((ValueError, TypeError)):
            store.record_put(space, key, value)

    def test_an_oversized_record_is_refused(self, store, space):
        with pytest.raises(ValueError, match="at most"):
            store.record_put(space, "k", {"blob": "x" * (1 << 20)})

    def test_one_writer_wins_each_version_under_contention(self, store, twin, space):
        store.record_put(space, "counter", {"n": 0})
        wins: list[int] = []

        def bump(handle: Any) -> None:
            done = 0
            while done < 20:
                value, version = handle.record_get(space, "counter")
                if handle.record_put(space, "counter", {"n": value["n"] + 1}, version=version):
                    done += 1
            wins.append(done)

        threads = [threading.Thread(target=bump, args=(h,)) for h in (store, twin, store, twin)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store.record_get(space, "counter")[0] == {"n": 80}

    def test_entries_append_by_version_and_a_write_or_removal_drops_them(self, store, twin, space):
        """RecordLog: an append is a compare-and-set on the record's version; a reader
        gets the record as written and the entries since; writing it drops them."""
        from toolbreaker.stores._protocol import RecordLog

        assert isinstance(store, RecordLog)
        assert store.record_append(space, "k", {"e": 0}, version=0) is None  # absent
        assert store.record_read_log(space, "k") is None
        assert store.record_put(space, "k", {"snap": 1}, version=0) == 1
        assert store.record_append(space, "k", {"e": 1}, version=1) == 2
        assert twin.record_append(space, "k", {"e": "stale"}, version=1) is None
        assert twin.record_append(space, "k", {"e": 2}, version=2) == 3
        assert twin.record_read_log(space, "k") == ({"snap": 1}, 3, [(2, {"e": 1}), (3, {"e": 2})])
        assert store.record_get(space, "k") == ({"snap": 1}, 3)  # the record as written
        assert store.record_put(space, "k", {"snap": 2}, version=2) is None
        assert store.record_put(space, "k", {"snap": 3}, version=3) == 4
        assert twin.record_read_log(space, "k") == ({"snap": 3}, 4, [])
        assert store.record_append(space, "k", {"e": 5}, version=4) == 5
        assert twin.record_delete(space, "k", version=5)
        assert store.record_read_log(space, "k") is None
        assert store.record_put(space, "k", {"snap": "again"}, version=0) == 1
        assert twin.record_read_log(space, "k") == ({"snap": "again"}, 1, [])  # none left

    def test_appends_under_contention_each_win_one_version(self, store, twin, space):
        store.record_put(space, "log", {"snap": 0}, version=0)
        made: list[int] = []

        def add(handle: Any, who: int) -> None:
            done = 0
            while done < 15:
                _, version, _ = handle.record_read_log(space, "log")
                won = handle.record_append(space, "log", {"who": who}, version=version)
                if won is not None:
                    made.append(won)
                    done += 1

        handles = (store, twin, store, twin)
        threads = [threading.Thread(target=add, args=(h, n)) for n, h in enumerate(handles)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _, version, entries = store.record_read_log(space, "log")
        assert version == 61
        assert sorted(made) == [at for at, _ in entries] == list(range(2, 62))
        assert sorted(e["who"] for _, e in entries) == sorted([0, 1, 2, 3] * 15)

    def test_every_read_sees_the_version_the_appends_made(self, store, twin, space):
        """A record with entries: get, list, a write and a removal all take the version
        the last append made, never the version the record was written at."""
        store.record_put(space, "a", {"snap": "a"}, version=0)
        store.record_put(space, "b", {"snap": "b"}, version=0)
        for version in (1, 2, 3):
            assert store.record_append(space, "a", {"e": version}, version=version)
        assert twin.record_get(space, "a") == ({"snap": "a"}, 4)
        assert twin.record_list(space) == [("a", {"snap": "a"}, 4), ("b", {"snap": "b"}, 1)]
        assert not twin.record_delete(space, "a", version=1)  # the version it was written at
        assert twin.record_put(space, "a", {"snap": "stale"}, version=1) is None
        assert twin.record_put(space, "a", {"snap": "a2"}, version=4) == 5
        assert store.record_list(space) == [("a", {"snap": "a2"}, 5), ("b", {"snap": "b"}, 1)]
        assert store.record_append(space, "a", {"e": 5}, version=5) == 6
        assert not store.record_delete(space, "a", version=5)
        assert store.record_delete(space, "a", version=6)
        assert twin.record_list(space) == [("b", {"snap": "b"}, 1)]
        assert twin.record_append(space, "a", {"e": 7}, version=6) is None  # removed

    def test_writes_and_appends_racing_each_win_one_version(self, store, twin, space):
        """Compaction (a write) racing appends: every version is won once, and the record
        read at the end is the last write and exactly the entries appended after it."""
        store.record_put(space, "r", {"n": 0}, version=0)
        won: list[tuple[int, str]] = []

        def race(handle: Any, compact: bool) -> None:
            for _ in range(15):
                while True:
                    _, version, _ = handle.record_read_log(space, "r")
                    if compact:
                        made = handle.record_put(space, "r", {"n": version}, version=version)
                    else:
                        made = handle.record_append(space, "r", {"at": version}, version=version)
                    if made is not None:
                        won.append((made, "put" if compact else "append"))
                        break

        threads = [
            threading.Thread(target=race, args=(h, compact))
            for h, compact in ((store, True), (twin, False), (store, False), (twin, True))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        snap, version, entries = store.record_read_log(space, "r")
        assert sorted(at for at, _ in won) == list(range(2, 62))
        assert version == 61
        last_put = max(at for at, kind in won if kind == "put")
        assert snap == {"n": last_put - 1}
        assert entries == [(at, {"at": at - 1}) for at in range(last_put + 1, 62)]
        assert store.record_get(space, "r") == (snap, 61)

    def test_one_lease_holder_at_a_time_until_it_expires(self, store, twin, space):
        from toolbreaker.stores._records import acquire_lease, release_lease

        assert acquire_lease(store, space, "checker", "p1", ttl_ms=1_000, now_ms=10_000)
        assert not acquire_lease(twin, space, "checker", "p2", ttl_ms=1_000, now_ms=10_500)
        assert acquire_lease(store, space, "checker", "p1", ttl_ms=1_000, now_ms=10_900)  # renewed
        assert not acquire_lease(twin, space, "checker", "p2", ttl_ms=1_000, now_ms=11_800)
        assert acquire_lease(twin, space, "checker", "p2", ttl_ms=1_000, now_ms=11_900)  # expired
        assert not release_lease(store, space, "checker", "p1")
        assert release_lease(twin, space, "checker", "p2")
        assert acquire_lease(store, space, "checker", "p1", ttl_ms=1_000, now_ms=12_000)


class AmbiguousWriteContract:
    """A store that talks to a server: a write whose answer is lost may have been made.

    Such a write raises :class:`~toolbreaker.errors.StoreWriteUnknown` (a
    ``StoreUnavailable``), never a plain failure: a queued item or a journal entry the
    store did not confirm may be there, and a caller that treated it as absent would
    give the same work to someone else. A write refused before anything was sent, and a
    read, raise a plain ``StoreUnavailable``. A test module provides:

    - ``lagging``: ``lagging(pattern)`` gives a context manager yielding ``(store,
      proxy)``: a fresh store that reaches the server through a
      :class:`lag_proxy.LaggingProxy` holding the answer to the armed request that
      contains ``pattern``;
    - ``refused``: a store whose server refuses every connection;
    - ``twin``: a direct handle on the same server.
    """

    @pytest.fixture
    def pattern(self) -> str:
        return f"lagged-{uuid.uuid4().hex[:12]}"

    def test_a_record_write_answered_late_may_have_been_made(self, lagging, twin, pattern):
        twin.record_put("conformance.lag", "warm", {"n": 0})  # the server is ready for it
        with lagging(pattern) as (store, proxy):
            store.record_get("conformance.lag", "warm")  # connected before the lag
            proxy.arm()
            with pytest.raises(StoreWriteUnknown):
                store.record_put("conformance.lag", pattern, {"n": 1}, version=0)
            proxy.release()
        assert twin.record_get("conformance.lag", pattern) == ({"n": 1}, 1)

    def test_a_record_delete_answered_late_may_have_been_made(self, lagging, twin, pattern):
        twin.record_put("conformance.lag", pattern, {"n": 1})
        twin.record_delete("conformance.lag", "absent")  # the server is ready for it
        with lagging(pattern) as (store, proxy):
            store.record_get("conformance.lag", "warm")
            proxy.arm()
            with pytest.raises(StoreWriteUnknown):
                store.record_delete("conformance.lag", pattern, version=1)
            proxy.release()
        assert twin.record_get("conformance.lag", pattern) is None

    def test_a_journal_write_answered_late_may_have_been_made(self, lagging, twin, pattern):
        twin.journal_put(pattern + "-warm", "k", {"status": "pending"})
        with lagging(pattern) as (store, proxy):
            store.journal_get("warm-" + uuid.uuid4().hex, "k")
            proxy.arm()
            with pytest.raises(StoreWriteUnknown):
                store.journal_put(pattern, "k", {"status": "pending"})
            proxy.release()
        assert twin.journal_get(pattern, "k") == {"status": "pending"}

    def test_a_read_answered_late_is_only_unavailable(self, lagging, twin, pattern):
        twin.record_put("conformance.lag", pattern, {"n": 1})
        with lagging(pattern) as (store, proxy):
            store.record_get("conformance.lag", "warm")
            proxy.arm()
            with pytest.raises(StoreUnavailable) as caught:
                store.record_get("conformance.lag", pattern)
            proxy.release()
        assert not isinstance(caught.value, StoreWriteUnknown)

    def test_a_write_refused_before_it_was_sent_certainly_failed(self, refused, pattern):
        for write in (
            lambda: refused.record_put("conformance.lag", pattern, {"n": 1}),
            lambda: refused.record_delete("conformance.lag", pattern),
            lambda: refused.journal_put(pattern, "k", {"status": "pending"}),
        ):
            with pytest.raises(StoreUnavailable) as caught:
                write()
            assert not isinstance(caught.value, StoreWriteUnknown)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    return free_port()


def _refused() -> None:
    raise ConnectionRefusedError("dependency down")


class RoundTripContract:
    """A shared store costs no round trip while its breaker is quiet.

    A store that talks to a server subclasses it and provides the ``counted`` fixture: a
    fresh store on a server of the test's own, and a function returning how many
    compare-and-set round trips that server has run so far (each store counts its own
    way: Redis its command statistics, PostgreSQL ``pg_stat_statements``).
    """

    def test_round_trips_per_call(self, counted):
        """Quiet closed calls and local rejections cost none; each change costs one."""
        from toolbreaker import Breaker
        from toolbreaker.testing import FakeClock

        store, round_trips = counted
        clock = FakeClock()
        policy = Policy(failure_threshold=3, cooldown_ms=1000, success_threshold=1)
        breaker = Breaker(
            "search", policy=policy, store=store, clock=clock, timeout=1, enforce="cooperative"
        )
        wait_for(lambda: breaker.allow().admitted and breaker._view.state is not None)
        before = round_trips()
        for _ in range(200):
            breaker.call(lambda: "ok")
        assert round_trips() == before  # steady closed: no round trip at all
        for _ in range(3):
            with pytest.raises(ConnectionRefusedError):
                breaker.call(_refused)
        opened = round_trips()
        assert opened - before == 3  # one compare-and-set per failure
        assert breaker.state.phase == "open"
        for _ in range(200):
            assert not breaker.allow().admitted
        assert round_trips() == opened  # local rejections
        clock.advance(1000)
        permit = breaker.allow()
        assert permit.admitted
        assert permit.probe
        assert round_trips() == opened + 1  # one atomic round trip for the lease
        permit.record("success")
        assert round_trips() == opened + 2
        assert breaker.state.phase == "closed"
