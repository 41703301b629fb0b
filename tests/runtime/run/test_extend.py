"""After the stop (issue 23): an operator raises a stopped run's budget and resumes it,
recorded in the journal with who and why (masked); the resumed run repeats no
confirmed write."""

from __future__ import annotations

from typing import Any

import pytest

from toolbreaker import Budget, ClassLimits, RunGuard
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore

SECRET = "sk-proj-abcdefghijklmnopqrstuvwx123456"
OPEN = {
    "read": ClassLimits(max_calls=None),
    "reversible_write": ClassLimits(max_calls=None, max_repeats=5),
}


def guarded(journal: MemoryStore, budget: Budget) -> tuple[RunGuard, list[Any]]:
    guard = RunGuard("task-x", budget=budget, journal=journal)
    made: list[Any] = []

    @guard.tool(risk="reversible_write")
    def update(ticket: str, idempotency_key: str) -> dict[str, str]:
        made.append(ticket)
        return {"id": ticket, "key": idempotency_key}

    @guard.tool()
    def search(q: str) -> dict[str, str]:
        return {"q": q}

    del update, search
    return guard, made


def test_extend_resumes_a_run_stopped_by_its_budget_and_records_who_and_why():
    """Stopped at max_tool_calls=2; extended to 4 by an operator: the run goes on, the
    journal holds the masked record, the packet's history shows the stop then the
    extension, and the confirmed write is answered from the journal, not made again."""
    journal = MemoryStore()
    guard, made = guarded(journal, Budget(max_tool_calls=2, classes=OPEN))
    guard.call("update", {"ticket": "T-1"})
    guard.call("search", {"q": "a"})
    stopped = guard.call("search", {"q": "b"})
    assert stopped["run_stopped"] is True
    assert guard.stopped is not None
    assert guard.stopped.condition == "max-tool-calls"

    packet = guard.extend(max_tool_calls=4, by="ops@example.com", why=f"approved, key {SECRET}")
    assert guard.stopped is None
    assert packet.condition == "running"
    assert [h["effect"] for h in packet.history] == ["stopped", "resumed"]
    assert "max_tool_calls 2 -> 4" in packet.history[1]["detail"]
    assert SECRET not in packet.to_json()

    records = [e for e in journal.journal_entries("task-x") if e.get("kind") == "budget-extension"]
    assert len(records) == 1
    assert records[0]["by"] == "ops@example.com"
    assert records[0]["changed"] == {"max_tool_calls": {"from": 2, "to": 4}}
    assert records[0]["stopped"] == "max-tool-calls"
    assert SECRET not in str(records[0])

    again = guard.call("update", {"ticket": "T-1"})
    assert again["id"] == "T-1"
    assert made == ["T-1"]  # answered from the journal
    assert guard.call("search", {"q": "c"}) == {"q": "c"}
    assert guard.stop_packet().uncertain == ()


def test_a_second_extension_is_recorded_beside_the_first():
    """Each extension has its own journal record."""
    journal = MemoryStore()
    guard, _ = guarded(journal, Budget(max_tool_calls=1, classes=OPEN))
    guard.extend(max_tool_calls=2, by="a", why="one")
    guard.extend(max_tool_calls=3, by="b", why="two")
    keys = [e["by"] for e in journal.journal_entries("task-x")]
    assert keys == ["a", "b"]
    assert guard.budget.max_tool_calls == 3


def test_a_resumed_guard_reads_the_extension_record_as_nothing_unresolved():
    """A new guard for the task (a resume) counts the record as no unresolved write."""
    journal = MemoryStore()
    guard, _ = guarded(journal, Budget(max_tool_calls=1, classes=OPEN))
    guard.extend(max_tool_calls=2, by="a", why="one")
    resumed, made = guarded(journal, Budget(classes=OPEN))
    assert resumed.call("update", {"ticket": "T-2"})["id"] == "T-2"
    assert made == ["T-2"]
    assert resumed.writes_blocked is None


def test_a_stop_that_is_not_about_the_budget_stays():
    """An operator's stop (or a loop) is not lifted by more budget."""
    guard, _ = guarded(MemoryStore(), Budget(classes=OPEN))
    guard.stop("hold on")
    guard.extend(max_tool_calls=300, by="ops", why="more")
    assert guard.stopped is not None
    assert guard.stopped.condition == "operator"


def test_extend_refuses_to_lower_a_limit_or_to_go_unexplained():
    """Lowering, a limit that is unlimited, no limit at all, or no who/why: a typed error,
    nothing recorded."""
    journal = MemoryStore()
    guard, _ = guarded(journal, Budget(max_tool_calls=10, classes=OPEN))
    for kwargs in (
        {"max_tool_calls": 5, "by": "a", "why": "b"},
        {"max_cost": "1", "by": "a", "why": "b"},
        {"by": "a", "why": "b"},
        {"max_tool_calls": 20, "by": " ", "why": "b"},
    ):
        with pytest.raises(PolicyError):
            guard.extend(**kwargs)
    assert journal.journal_entries("task-x") == []
