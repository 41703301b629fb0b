"""A shared run's record as a snapshot and a log of appended events (issue 35).

A round appends the events it applied to the run's record instead of writing the whole
state; every ``COMPACT_EVERY`` entries it writes the snapshot again. A reader folds the
log into the snapshot with the run machine and must reach the state the writers reached;
a record of the first format is read and written again in this one; a log entry that
does not decode admits nothing.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

import pytest
from test_shared_run import Counting, budget, shared_guard

from store_kinds import closing, kinds, open_store, reopen
from toolbreaker import RunGuard
from toolbreaker.core._run.budget import Budget, RunState
from toolbreaker.errors import RecordCorrupt
from toolbreaker.runtime._run._shared import COMPACT_EVERY, RUNS_SPACE, read_shared
from toolbreaker.stores import MemoryStore, SQLiteStore
from toolbreaker.stores._protocol import RecordLog


class CountingLog(Counting):
    """A real store that keeps a log, its record reads, writes and appends counted."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.appends = 0

    @property
    def puts(self) -> int:
        """The whole snapshots written."""
        return self.writes

    def record_read_log(self, space: str, key: str) -> Any:
        self.reads += 1
        return self.store.record_read_log(space, key)

    def record_append(self, space: str, key: str, entry: Any, *, version: int) -> Any:
        written = self.store.record_append(space, key, entry, version=version)
        self.appends += 1
        self.refused += written is None
        return written


def test_a_guard_alone_appends_its_events_and_writes_the_snapshot_now_and_then(tmp_path):
    """One append per event, no read after the first; the snapshot is written whole once
    every COMPACT_EVERY + 1 rounds, so the log a reader folds in stays short."""
    with SQLiteStore(tmp_path / "runs.db") as store:
        counting = CountingLog(store)
        assert isinstance(counting, RecordLog)
        guard, search = shared_guard(counting, "t", [])
        for n in range(70):
            assert "hits" in search(q=str(n))
        rounds = 2 * 70  # a request and an outcome per call
        assert counting.reads == 1  # the first round: the record is made
        assert counting.refused == 0
        assert counting.puts == len(range(0, rounds, COMPACT_EVERY + 1))
        assert counting.appends == rounds - counting.puts
        doc, version, log = store.record_read_log(RUNS_SPACE, "t")
        assert doc["schema"] == "toolbreaker.shared-run/v2"
        assert version == rounds
        assert [at for at, _ in log] == list(range(doc["base"] + 1, version + 1))
        assert len(log) <= COMPACT_EVERY
        assert guard.stop_packet().counters["calls"] == 70


def test_a_reader_folds_the_log_into_the_state_the_writer_reached(tmp_path):
    """Another process's read of the snapshot and its log gives, field for field, the
    state the writing guard holds: after a compaction, and midway through a log."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        guard = RunGuard("t", budget=budget(), journal=one, shared=True)

        @guard.tool("search", cost="0.01")
        def search(q: str) -> dict[str, str]:
            if q.endswith("3"):
                raise ValueError("no")
            return {"hits": q[:2]}  # repeated results: evidence counts only new ones

        for n in range(COMPACT_EVERY + 11):
            search(q=str(n))
            if n in (4, COMPACT_EVERY - 1, COMPACT_EVERY + 10):
                found = read_shared(two, "t")
                assert found is not None
                state, shared_budget, _ = found
                assert state.to_dict() == guard.state.to_dict()
                assert shared_budget == guard.budget
        guard.extend(by="ops", why="more room", max_cost="3")
        found = read_shared(two, "t")
        assert found is not None
        assert found[1].max_cost == Decimal("3")
        assert found[0].to_dict() == guard.state.to_dict()


@pytest.mark.parametrize("kind", kinds(records=True))
def test_two_guards_taking_turns_through_the_log_spend_one_budget(request, tmp_path, kind):
    """Each guard's append at a stale version is refused; it reads the other's entries,
    folds them into what it knew, and applies its event to that: 100 calls of $0.01 in
    all, the 101st refused, every call counted once. Two handles of one store (the same
    object in memory, where no other handle can open it). The tests' Redis servers keep no
    append-only file: their journal is volatile."""
    options = {"volatile_journal": True} if kind.startswith("redis") else {}
    store, url = open_store(kind, request, tmp_path, **options)
    other = store if kind == "memory" else reopen(url, **options)
    with closing(store), closing(other) if other is not store else contextlib.nullcontext():
        one, two = CountingLog(store), CountingLog(other)
        (_, search_a), (_, search_b) = shared_guard(one, "t", []), shared_guard(two, "t", [])
        answers = [(search_a if n % 2 else search_b)(q=str(n)) for n in range(101)]
        assert sum("hits" in x for x in answers) == 100
        assert answers[-1]["condition"] == "max-cost"
        assert one.refused > 0
        assert two.refused > 0
        assert one.appends > 50
        packet = RunGuard("t", journal=one, shared=True).stop_packet()
        assert packet.counters["calls"] == 100
        assert packet.counters["cost"] == "1"


def test_a_record_of_the_first_format_is_read_and_written_again_in_this_one():
    """A run an earlier version shared (the whole state, schema v1) goes on: its counts
    stand, and the next write makes it a snapshot of this format."""
    store = MemoryStore()
    guard, search = shared_guard(store, "t", [])
    for n in range(5):
        search(q=f"before-{n}")
    earlier = guard.state
    store.record_delete(RUNS_SPACE, "t")
    store.record_put(
        RUNS_SPACE,
        "t",
        {
            "schema": "toolbreaker.shared-run/v1",
            "state": earlier.to_dict(),
            "budget": budget().to_dict(),
            "applied": [],
        },
    )
    found = read_shared(store, "t")
    assert found is not None
    assert found[0].to_dict() == earlier.to_dict()
    joined, search = shared_guard(store, "t", [])
    assert "hits" in search(q="after")
    doc, _, _ = store.record_read_log(RUNS_SPACE, "t")
    assert doc["schema"] == "toolbreaker.shared-run/v2"
    assert joined.stop_packet().counters["calls"] == 6
    assert joined.stop_packet().counters["cost"] == "0.06"


def test_a_log_entry_that_does_not_decode_admits_nothing():
    """A corrupt entry in the log is a corrupt record: no call is admitted against it,
    and reading the run says so (RecordCorrupt), never a state without that entry."""
    store = MemoryStore()
    _, search = shared_guard(store, "t", [])
    assert "hits" in search(q="x")
    _, version, _ = store.record_read_log(RUNS_SPACE, "t")
    bad = {"events": [{"id": "f00d", "event": {"type": "no-such-event", "at": 5}}]}
    assert store.record_append(RUNS_SPACE, "t", bad, version=version) == version + 1
    with pytest.raises(RecordCorrupt, match="log entry"):
        read_shared(store, "t")
    _, other = shared_guard(store, "t", [])
    assert other(q="y")["condition"] == "budget-unavailable"


def test_a_snapshot_whose_base_is_no_version_is_corrupt():
    store = MemoryStore()
    doc = {
        "schema": "toolbreaker.shared-run/v2",
        "state": RunState.start("t", 1).to_dict(),
        "budget": Budget().to_dict(),
        "applied": [],
        "base": 7,
    }
    store.record_put(RUNS_SPACE, "t", doc)
    with pytest.raises(RecordCorrupt, match="base"):
        read_shared(store, "t")


def test_a_handle_without_a_log_refuses_a_record_that_has_one(tmp_path):
    """A store handle that keeps no log (a wrapper without RecordLog) must not write a
    snapshot over entries it cannot read: it admits nothing, and nothing is lost."""
    from test_shared_run import Counting

    with SQLiteStore(tmp_path / "runs.db") as store:
        _, search = shared_guard(store, "t", [])
        for n in range(3):
            assert "hits" in search(q=str(n))
        _, blind = shared_guard(Counting(store), "t", [])
        assert blind(q="x")["condition"] == "budget-unavailable"
        found = read_shared(store, "t")
        assert found is not None
        assert found[0].calls == 3


def test_a_local_fallback_passes_the_log_through_to_its_primary(tmp_path):
    """A shared run through LocalFallback appends to its primary's log, as a guard on the
    primary itself does: the two take turns on one budget, every call counted once."""
    from test_shared_run import Counting

    from toolbreaker.stores import LocalFallback

    with SQLiteStore(tmp_path / "runs.db") as store:
        fallback = LocalFallback(store, keys=lambda key: True)
        assert isinstance(fallback, RecordLog)
        assert not isinstance(LocalFallback(Counting(store), keys=set()), RecordLog)
        (_, through), (_, direct) = shared_guard(fallback, "t", []), shared_guard(store, "t", [])
        for n in range(6):
            assert "hits" in (through if n % 2 else direct)(q=str(n))
        _, version, log = store.record_read_log(RUNS_SPACE, "t")
        assert len(log) == version - 1  # appended after the record was made, none written over
        found = read_shared(store, "t")
        assert found is not None
        assert found[0].calls == 6
