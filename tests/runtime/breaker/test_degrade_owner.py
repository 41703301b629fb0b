"""One owner per piece of work: a drainer or a person, never both (the degradation matrix).

A write queued for a drain, handed to a person or stopped for one is journaled as such; a
queue write whose answer was lost is never handed off; a resumed run makes a write a person
was given only if they say so. Real stores and the real local ToolService, as in
``test_degrade.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from degrade_helpers import sheet, ticket_tool

from toolbreaker import GuardedTool, Registry, RunGuard
from toolbreaker.runtime._breaker._degrade import HANDOFF_SPACE
from toolbreaker.stores import MemoryStore


def test_a_person_and_a_drain_never_both_own_the_work(store, service):
    """Work is handed to a person only by creating its queue record as handed-off: a
    drain never runs it and queuing it again answers the handoff (same reference); work a
    drainer owns is answered "already queued" by a handoff row, never handed off too."""
    from toolbreaker import drain

    queue_rows = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "queue"}), store=store
    )
    handoff_rows = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "handoff"}), store=store
    )
    queued = queue_rows.get("tickets", "write")
    handed = handoff_rows.get("tickets", "write")
    queued.isolate()
    handed.isolate()
    tool = ticket_tool(service)
    person = handed.guard(tool, tool="create_ticket")(title="a", body="b", idempotency_key="k1")
    assert person["degradation"] == "handoff"
    again = queued.guard(tool, tool="create_ticket")(title="a", body="b", idempotency_key="k1")
    assert (again["degradation"], again["reconciliation_id"]) == (
        "handoff",
        person["reconciliation_id"],
    )
    first = queued.guard(tool, tool="create_ticket")(title="c", body="d", idempotency_key="k2")
    assert first["queued"] is True
    later = handed.guard(tool, tool="create_ticket")(title="c", body="d", idempotency_key="k2")
    assert (later["degradation"], later["queue_id"]) == ("queue", first["queue_id"])
    assert "already queued" in later["instruction"]
    assert [rid for rid, _, _ in store.record_list(HANDOFF_SPACE)] == [person["reconciliation_id"]]
    for breaker in (queued, handed):  # each counts the mode it served
        assert breaker.stats.to_dict()["degraded"] == {"handoff": 1, "queue": 1}
    queued.release()
    handed.release()
    report = drain(store, {"create_ticket": tool})
    assert (report.done, report.skipped) == ((first["queue_id"],), ())
    assert service.hits["POST /tickets"] == 1
    assert [t["title"] for t in service.created("tickets")] == ["c"]


def test_a_guard_journals_a_handed_off_write_and_never_makes_it(service):
    """A write handed to a person is journaled handed-off: a resumed run answers it as
    handed off and never calls the tool; the packet says it is a person's."""
    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "handoff"}), store=store
    )
    breaker = registry.get("tickets", "write")

    def guard() -> RunGuard:
        made = RunGuard("task-h", journal=store)
        made.add_tool(
            GuardedTool(
                "create_ticket", ticket_tool(service), risk="reversible_write", breaker=breaker
            )
        )
        return made

    first = guard()
    breaker.isolate()
    answer = first.call("create_ticket", {"title": "t", "body": "b"})
    assert answer["degradation"] == "handoff"
    [entry] = store.journal_entries("task-h")
    assert (entry["status"], entry["reconciliation_id"]) == (
        "handed-off",
        answer["reconciliation_id"],
    )
    assert first.writes_blocked is None  # a person owns it: nothing is uncertain
    breaker.release()
    resumed = guard()
    again = resumed.call("create_ticket", {"title": "t", "body": "b"})
    assert (again["handoff"], again["reconciliation_id"]) == (True, answer["reconciliation_id"])
    assert service.hits.get("POST /tickets") is None
    stopped = resumed.stop()
    assert stopped.uncertain[0]["reconciliation_id"] == answer["reconciliation_id"]
    assert "a person's to carry out or drop" in stopped.next_safe_action


class QueueDown(MemoryStore):
    """A store whose queue space cannot be written; ``late``: the write is made, its answer lost."""

    def __init__(self, *, late: bool = False) -> None:
        super().__init__()
        self.late = late

    def record_put(self, space, key, value, *, version=None):
        from toolbreaker.errors import StoreUnavailable, StoreWriteUnknown

        if space != "toolbreaker.queue":
            return super().record_put(space, key, value, version=version)
        if self.late:
            super().record_put(space, key, value, version=version)
            raise StoreWriteUnknown("the answer was lost")
        raise StoreUnavailable("the queue is down")


def test_a_queue_write_that_may_have_been_made_is_never_handed_off():
    """A queued item whose store write may have been made is unknown: the caller is told
    it may already be queued, and the chain never goes on to hand it to a person."""
    store = QueueDown(late=True)
    breaker = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]}),
        store=store,
    ).get("tickets", "write")
    breaker.isolate()
    answer = breaker.begin("create_ticket", {"title": "t", "idempotency_key": "k"}).answer
    assert (answer["degradation"], answer["queued"], answer["outcome_unknown"]) == (
        "queue",
        None,
        True,
    )
    assert "may already be queued" in answer["instruction"]
    assert store.record_list(HANDOFF_SPACE) == []
    [(queue_id, item, _)] = store.record_list("toolbreaker.queue")
    assert (queue_id, item["status"]) == (answer["queue_id"], "queued")


def test_a_handoff_that_could_not_check_the_queue_says_to_look_first():
    """When the queue cannot be asked, the work is still handed off, and the packet tells
    the person to make sure it is not queued before carrying it out."""
    store = QueueDown()
    breaker = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]}),
        store=store,
    ).get("tickets", "write")
    breaker.isolate()
    answer = breaker.begin("create_ticket", {"title": "t", "idempotency_key": "k"}).answer
    assert answer["degradation"] == "handoff"
    action = answer["packet"]["next_safe_action"]
    assert "The queue could not be checked" in action
    assert "toolbreaker drain --list" in action


def test_a_write_the_stop_mode_gave_a_person_is_made_by_a_resumed_run_only_if_they_say_so(
    service,
):
    """``stop`` hands the attempted write to a person (journaled handed-off, the packet
    names its key and how to record what they did): a resumed run never makes it on its
    own, and makes it once the operator records it as not made."""
    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "stop"}), store=store
    )
    breaker = registry.get("tickets", "write")

    def guard() -> RunGuard:
        made = RunGuard("task-s", journal=store)
        made.add_tool(
            GuardedTool(
                "create_ticket", ticket_tool(service), risk="reversible_write", breaker=breaker
            )
        )
        return made

    breaker.isolate()
    stopped = guard().call("create_ticket", {"title": "t", "body": "b"})
    assert stopped["degradation"] == "stop"
    key = stopped["packet"]["attempted"]["idempotency_key"]
    assert f"RunGuard.resolve({key!r}, committed=True)" in stopped["packet"]["next_safe_action"]
    assert store.journal_get("task-s", key)["status"] == "handed-off"
    breaker.release()
    resumed = guard()
    again = resumed.call("create_ticket", {"title": "t", "body": "b"})
    assert again["handoff"] is True
    assert service.hits.get("POST /tickets") is None
    resumed.resolve(key, committed=False)
    assert resumed.call("create_ticket", {"title": "t", "body": "b"})["id"] == "T-1"
    assert service.hits["POST /tickets"] == 1


def test_a_queued_write_journaled_before_the_protocol_had_queued_still_reads_queued(service):
    """Journals written by earlier versions kept a queued write as ``pending`` with its
    queue id: a resumed run answers it as queued, never makes it, and blocks no write."""
    from toolbreaker.core._run.fingerprint import write_key

    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "queue"}), store=store
    )
    args = {"title": "t", "body": "b"}
    key = write_key("create_ticket", args, None, task="task-old")
    old = {"tool": "create_ticket", "idempotency_key": key, "status": "pending"}
    store.journal_put("task-old", key, {**old, "result": {"queue_id": "q-old"}})
    resumed = RunGuard("task-old", journal=store)
    resumed.add_tool(
        GuardedTool(
            "create_ticket",
            ticket_tool(service),
            risk="reversible_write",
            breaker=registry.get("tickets", "write"),
        )
    )
    answer = resumed.call("create_ticket", args)
    assert (answer["queued"], answer["queue_id"]) == (True, "q-old")
    assert resumed.writes_blocked is None
    assert resumed.call("create_ticket", {"title": "u", "body": "b"})["id"] == "T-1"
    assert service.hits["POST /tickets"] == 1  # only the other write
    assert [u["queue_id"] for u in resumed.stop_packet().uncertain] == ["q-old"]


def test_an_async_run_journals_a_maybe_queued_write_as_uncertain(service):
    """On the event loop too: a queue write whose answer was lost is journaled
    maybe-queued, counts as uncertain (writes blocked), and is never handed off."""
    store = QueueDown(late=True)
    breaker = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]}),
        store=store,
    ).get("tickets", "write")

    async def create_ticket(title: str, body: str, idempotency_key: str) -> Any:
        return await asyncio.to_thread(ticket_tool(service), title, body, idempotency_key)

    guard = RunGuard("task-async", journal=store)
    guard.add_tool(
        GuardedTool("create_ticket", create_ticket, risk="reversible_write", breaker=breaker)
    )
    breaker.isolate()
    answer = asyncio.run(guard.acall("create_ticket", {"title": "t", "body": "b"}))
    assert (answer["degradation"], answer["outcome_unknown"]) == ("queue", True)
    entry = store.journal_get("task-async", answer["idempotency_key"])
    assert (entry["status"], entry["queue_id"]) == ("maybe-queued", answer["queue_id"])
    assert guard.writes_blocked is not None
    assert store.record_list(HANDOFF_SPACE) == []
