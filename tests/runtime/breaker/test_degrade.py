"""The degradation matrix against the real local ToolService and real stores.

Every mode is served by a breaker whose dependency is really down (the service answers
503), with its records in a real store: memory, an SQLite file, a redis-server and a
PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from typing import Any

import pytest
from degrade_helpers import search_tool, sheet, ticket_tool

from secrets_corpus import SECRETS, leaks
from toolbreaker import Budget, GuardedTool, Registry, RunGuard
from toolbreaker.cli import main
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._breaker._degrade import HANDOFF_SPACE, STALE_SPACE, check_store
from toolbreaker.stores import MemoryStore, SQLiteStore
from toolbreaker.testing import FakeClock, request_json

NOON = 1_796_040_000_000 - 1_796_040_000_000 % 86_400_000 + 12 * 3_600_000  # 12:00 UTC
MINUTE = 60_000


class Wall:
    """A wall clock for kept answers: moves only when told."""

    def __init__(self) -> None:
        self.now = NOON

    def __call__(self) -> int:
        return self.now


# -- stale ----------------------------------------------------------------------------------


def test_stale_serves_the_last_good_answer_with_its_age_then_cuts_off(store, service):
    """A read row serves its last good answer labelled stale, until ``max_stale``; then omit."""
    registry = Registry.from_dict(
        sheet(
            search__read={
                "tool": "search",
                "degrade": ["stale", "omit"],
                "max_stale_ms": 600_000,
                "stale_every_ms": 0,
            }
        ),
        store=store,
        clock=FakeClock(),
    )
    breaker = registry.get("search", "read")
    wall = breaker.degradation.wall_clock = Wall()
    search = breaker.guard(search_tool(service), tool="search")
    live = search(q="cable")
    assert live["query"] == "cable"

    service.outage("GET /search")
    wall.now += 7 * MINUTE - 2_000
    opened = search(q="cable")  # this failure opens the breaker: the answer is already stale
    assert opened["stale"] is True
    assert opened["result"] == live
    assert opened["age_seconds"] == 7 * 60 - 2
    assert "STALE" in opened["instruction"]
    wall.now += 2_000
    again = search(q="cable")
    assert "as of 12:00 UTC, 7 minutes old" in again["instruction"]
    assert again["as_of"].endswith("12:00:00Z")

    wall.now = NOON + 600_001  # one millisecond past max_stale
    cut = search(q="cable")
    assert cut["degradation"] == "omit"
    assert store.record_list(STALE_SPACE) == []  # an answer never served again is dropped
    assert '"search" would have returned for {"q": "cable"}' in cut["missing"]
    other = search(q="hdmi")  # never answered: nothing kept for these arguments
    assert other["degradation"] == "omit"
    assert breaker.stats.to_dict()["degraded"] == {"stale": 2, "omit": 2}


def test_a_busy_read_refreshes_its_kept_answer_at_most_once_per_stale_every(store, service):
    """Successes within ``stale_every`` write the kept answer once (no round trip per call)."""
    registry = Registry.from_dict(
        sheet(search__read={"degrade": "stale", "max_stale_ms": 60_000, "stale_every_ms": 30_000}),
        store=store,
    )
    breaker = registry.get("search", "read")
    wall = breaker.degradation.wall_clock = Wall()
    search = breaker.guard(search_tool(service), tool="search")
    for _ in range(5):
        search(q="cable")
    [(_, kept, version)] = store.record_list(STALE_SPACE)
    assert version == 1
    assert kept["at"] == NOON
    wall.now += 30_000
    search(q="cable")
    assert store.record_list(STALE_SPACE)[0][2] == 2


def test_stale_through_the_two_step_api_on_the_event_loop(store, service):
    """``abegin``/``asucceeded`` keep and serve the answer off the loop, the same way."""
    registry = Registry.from_dict(
        sheet(search__read={"degrade": ["stale"], "max_stale_ms": 60_000, "stale_every_ms": 0}),
        store=store,
    )
    breaker = registry.get("search", "read")
    breaker.degradation.wall_clock = Wall()
    search = search_tool(service)

    async def run() -> tuple[Any, Any]:
        step = await breaker.abegin("search", {"q": "usb"})
        first = await step.asucceeded(await asyncio.to_thread(search, q="usb"))
        breaker.isolate("maintenance")
        rejected = await breaker.abegin("search", {"q": "usb"})
        closing = getattr(store, "aclose", None)
        if closing is not None:
            await closing()  # the loop's connections close with the loop
        return first, rejected.answer

    first, answer = asyncio.run(run())
    assert answer["stale"] is True
    assert answer["result"] == first


# -- degraded -------------------------------------------------------------------------------


def test_degraded_runs_the_named_local_tool(store, service):
    """``degraded`` answers with the row's fallback tool, run locally, labelled degraded."""
    registry = Registry.from_dict(
        sheet(
            search__read={
                "tool": "search",
                "fallback": "search_snapshot",
                "fallback_note": "say prices may be out of date",
                "degrade": ["degraded", "omit"],
            }
        ),
        store=store,
    )

    def search_snapshot(q: str) -> Any:
        return request_json("GET", f"{service.url}/search_snapshot?q={q}", timeout=2)

    registry.register_local("search_snapshot", search_snapshot)
    breaker = registry.get("search", "read")
    search = breaker.guard(search_tool(service), tool="search")
    service.outage("GET /search")
    answer = search(q="cable")
    assert answer["degradation"] == "degraded"
    assert answer["served_by"] == "search_snapshot"
    assert answer["result"]["stale"] is True  # the snapshot says so itself
    assert "say prices may be out of date" in answer["instruction"]

    service.outage("GET /search_snapshot")
    fallen = search(q="cable")  # the local tool failed too: the chain goes on
    assert fallen["degradation"] == "omit"
    assert breaker.degradation.faults == 1
    assert breaker.stats.degraded == {"degraded": 1, "omit": 1}


def test_an_unregistered_degraded_tool_gives_the_plain_answer_naming_the_fallback(store):
    """Without its code registered, ``degraded`` passes; the model is told the fallback."""
    registry = Registry.from_dict(
        sheet(search__read={"fallback": "search_snapshot", "degrade": "degraded"}),
        store=store,
    )
    breaker = registry.get("search", "read")
    breaker.isolate()
    answer = breaker.begin("search", {"q": "x"}).answer
    assert answer["tool_unavailable"] is True
    assert answer["fallback"] == "search_snapshot"
    assert "degradation" not in answer


def test_register_local_refuses_an_unknown_tool():
    """Only a tool the registry knows may have local code."""
    registry = Registry.from_dict(sheet())
    with pytest.raises(PolicyError, match="not a registered tool"):
        registry.register_local("nope", print)


# -- queue ----------------------------------------------------------------------------------


def test_queued_work_is_saved_once_per_key_and_said_not_done(store, service):
    """``queue`` saves the work with its key; the same call again finds it queued."""
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]}),
        store=store,
    )
    breaker = registry.get("tickets", "write")
    create = breaker.guard(ticket_tool(service), tool="create_ticket")
    service.outage("POST /tickets")
    args = {"title": "Refund", "body": "order A-1001", "idempotency_key": "key-1"}
    first = create(**args)
    assert first["queued"] is True
    assert first["done"] is False
    assert "NOT happened" in first["instruction"]
    again = create(**args)
    assert again["queue_id"] == first["queue_id"]
    assert "already queued" in again["instruction"]
    [(queue_id, item, _)] = store.record_list("toolbreaker.queue")
    assert queue_id == first["queue_id"]
    assert item["idempotency_key"] == "key-1"
    assert item["args"] == args
    assert breaker.stats.degraded == {"queue": 2}


def test_work_is_never_queued_on_a_store_that_would_forget_it(tmp_path, service):
    """A Redis without persistence would lose queued work on a restart, after the model
    was told it is queued: the queue refuses it (the next mode serves, here handoff), as
    the run journal refuses such a store; ``volatile_journal=True`` is the explicit
    opt-out."""
    from stores.conftest import RedisServer
    from stores.patient import patient_redis

    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    assert binary is not None, "redis-server is not installed"
    server = RedisServer(binary, tmp_path)  # no append-only file: a restart forgets
    server.start()
    redis_url = server.url
    sheet_data = sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]})
    args = {"title": "Refund", "body": "order A-1001", "idempotency_key": "key-1"}
    service.outage("POST /tickets")
    with patient_redis(redis_url, prefix=f"tb-{uuid.uuid4().hex[:8]}") as volatile:
        breaker = Registry.from_dict(sheet_data, store=volatile).get("tickets", "write")
        answer = breaker.guard(ticket_tool(service), tool="create_ticket")(**args)
        assert answer.get("queued") is not True
        assert answer["degradation"] == "handoff"
        assert volatile.record_list("toolbreaker.queue") == []
    with patient_redis(
        redis_url, prefix=f"tb-{uuid.uuid4().hex[:8]}", volatile_journal=True
    ) as accepted:
        breaker = Registry.from_dict(sheet_data, store=accepted).get("tickets", "write")
        answer = breaker.guard(ticket_tool(service), tool="create_ticket")(**args)
        assert answer["queued"] is True
    server.stop()


# -- handoff and stop -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_handoff_packets_hold_no_secret(name, secret, tmp_path):
    """The handoff answer, its packet in the store and the log never show a secret."""
    store = SQLiteStore(str(tmp_path / "tb.db"))
    try:
        check_handoff(store, secret)
    finally:
        store.close()


def check_handoff(store: Any, secret: str) -> None:
    """Hand a call carrying ``secret`` off through ``store``; nothing shows the secret."""
    registry = Registry.from_dict(
        sheet(mail__write={"tool": "send_email", "degrade": "handoff"}), store=store
    )
    breaker = registry.get("mail", "write")
    breaker.isolate()
    args = {"to": "a@example.com", "note": f"use {secret} to log in"}
    answer = breaker.begin("send_email", args).answer
    assert answer["degradation"] == "handoff"
    assert answer["reconciliation_id"].startswith("rc-")
    assert answer["packet"]["reconciliation_id"] == answer["reconciliation_id"]
    assert not leaks(json.dumps(answer), secret)
    [(rid, kept, _)] = store.record_list(HANDOFF_SPACE)
    assert rid == answer["reconciliation_id"]
    assert not leaks(json.dumps(kept), secret)
    [(_, marker, _)] = store.record_list("toolbreaker.queue")  # the person owns the work
    assert marker["status"] == "handed-off"
    assert not leaks(json.dumps(marker), secret)
    # The same request handed off again keeps its reconciliation id.
    assert breaker.begin("send_email", args).answer["reconciliation_id"] == rid


def test_stop_mode_stops_the_run_with_the_guards_packet(service):
    """``stop``: the run guard stops the run; the packet is the run's, masked."""
    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "stop"}), store=store
    )
    breaker = registry.get("tickets", "write")
    guard = RunGuard("task-7", budget=Budget(), journal=store)
    guard.add_tool(
        GuardedTool("create_ticket", ticket_tool(service), risk="reversible_write", breaker=breaker)
    )
    service.outage("POST /tickets")
    secret = SECRETS[0][1]
    answer = guard.call("create_ticket", {"title": "t", "body": f"token {secret}"})
    assert answer["degradation"] == "stop"
    assert answer["run_stopped"] is True
    assert guard.stopped is not None
    assert guard.stopped.condition == "dependency-open"
    assert answer["packet"]["task"] == "task-7"
    assert answer["packet"]["condition"] == "dependency-open"
    assert not leaks(json.dumps(answer), secret)
    later = guard.call("create_ticket", {"title": "u", "body": "v"})
    assert later["run_stopped"] is True  # the run stays stopped


def test_a_guard_queues_a_write_and_journals_it_queued(service):
    """Through a run guard, the queued item carries the write's key and its task, and the
    journal says it is queued (with its id): a resumed run answers it so, never makes it,
    and its other writes are not blocked by it (a queued write is owned, not uncertain)."""
    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "queue"}), store=store
    )
    guard = RunGuard("task-8", journal=store)
    guard.add_tool(
        GuardedTool(
            "create_ticket",
            ticket_tool(service),
            risk="reversible_write",
            breaker=registry.get("tickets", "write"),
        )
    )
    registry.get("tickets", "write").isolate()
    answer = guard.call("create_ticket", {"title": "t", "body": "b"})
    assert answer["queued"] is True
    [(_, item, _)] = store.record_list("toolbreaker.queue")
    assert item["task"] == "task-8"
    assert item["args"]["idempotency_key"] == answer["idempotency_key"]
    entry = store.journal_get("task-8", answer["idempotency_key"])
    assert entry is not None
    assert (entry["status"], entry["queue_id"]) == ("queued", answer["queue_id"])
    assert guard.stopped is None  # a queued write lets the run go on
    registry.get("tickets", "write").release()
    resumed = RunGuard("task-8", journal=store)
    resumed.add_tool(
        GuardedTool(
            "create_ticket",
            ticket_tool(service),
            risk="reversible_write",
            breaker=registry.get("tickets", "write"),
        )
    )
    again = resumed.call("create_ticket", {"title": "t", "body": "b"})
    assert (again["queued"], again["queue_id"]) == (True, answer["queue_id"])
    assert resumed.writes_blocked is None
    assert resumed.call("create_ticket", {"title": "other", "body": "b"})["id"] == "T-1"
    assert service.hits.get("POST /tickets") == 1  # only the other write


# -- the loader -----------------------------------------------------------------------------


def test_the_loader_refuses_stale_for_a_write_with_file_and_line(tmp_path):
    """``degrade = ["stale"]`` on a write row is refused at load: ``FILE:LINE:``."""
    path = tmp_path / "sheet.toml"
    path.write_text(
        "[defaults]\ntimeout_ms = 2000\n\n[billing.write]\ntool = 'charge_card'\n"
        'degrade = ["stale", "queue"]\nmax_stale_ms = 60000\n'
    )
    with pytest.raises(PolicyError) as caught:
        Registry.from_toml(path)
    assert caught.value.located() == (
        f"{path}:6: billing.write.a 'write' row never falls back to 'stale' (only a read row "
        "may: a write is queued, handed off or stopped instead)"
    )


def test_drain_reports_a_bad_sheet_as_one_located_line(tmp_path, capsys):
    """``toolbreaker drain --sheet`` with a bad row: ``error: FILE:LINE: ...``, exit 2."""
    path = tmp_path / "sheet.toml"
    path.write_text("[search.read]\ntimeout_ms = 2000\ndegrade = 'stale'\n")
    db = tmp_path / "tb.db"
    code = main(["drain", "--store", f"sqlite:///{db}", "--sheet", str(path), "--tools", "x:y"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:3: search.read.degrade 'stale' needs max_stale")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"degrade": "later"}, "search.read.degrade"),
        ({"degrade": ["omit", "stale"], "max_stale_ms": 5000}, "search.read.degrade"),
        ({"degrade": "degraded"}, "search.read.degrade"),
        ({"degrade": "omit", "max_stale_ms": 5000}, "search.read.max_stale_ms"),
        ({"degrade": "stale", "max_stale_ms": -1}, "search.read.max_stale_ms"),
        ({"stale_every_ms": 7_200_000}, "search.read.stale_every_ms"),
    ],
)
def test_bad_rows_name_their_field(row, field):
    """Every refusal names the row's field."""
    with pytest.raises(PolicyError) as caught:
        Registry.from_dict(sheet(search__read=row))
    assert caught.value.field == field


def test_a_store_without_records_cannot_keep_stale_or_queued_work():
    """A row with ``stale`` or ``queue`` on a store that keeps no records fails at load."""
    registry = Registry.from_dict(sheet(t__write={"degrade": "queue"}))
    with pytest.raises(PolicyError, match="needs a store that keeps records"):
        check_store(registry.boundaries(), object())


def test_rows_without_a_chain_answer_exactly_as_before():
    """No ``degrade``: the plain unavailable result, and no ``degraded`` counter."""
    registry = Registry.from_dict(sheet(search__read={}))
    breaker = registry.get("search", "read")
    breaker.isolate()
    answer = breaker.begin("search", {"q": "x"}).answer
    assert "degradation" not in answer
    assert "degraded" not in breaker.stats.to_dict()


def test_a_queued_write_called_again_in_the_run_is_still_queued_then_journaled(service):
    """The run re-calls its queued write: still queued, not replayed. Once drained, the
    run's journal answers it."""
    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "queue"}), store=store
    )
    breaker = registry.get("tickets", "write")
    guard = RunGuard("task-9", journal=store)
    create = ticket_tool(service)
    guard.add_tool(GuardedTool("create_ticket", create, risk="reversible_write", breaker=breaker))
    breaker.isolate()
    first = guard.call("create_ticket", {"title": "t", "body": "b"})
    again = guard.call("create_ticket", {"title": "t", "body": "b"})
    assert again["queue_id"] == first["queue_id"]
    assert "already queued" in again["instruction"]
    assert guard.writes_blocked is None
    breaker.release()
    from toolbreaker import drain

    assert drain(store, {"create_ticket": create}).done == (first["queue_id"],)
    after = guard.call("create_ticket", {"title": "t", "body": "b"})
    assert after["id"] == "T-1"  # from the journal: the drained result
    assert service.hits["POST /tickets"] == 1


def test_every_choice_is_recorded_for_listeners(store):
    """A listener sees each choice: the mode, and why earlier modes were passed over."""
    registry = Registry.from_dict(
        sheet(search__read={"degrade": ["stale", "omit"], "max_stale_ms": 60_000}), store=store
    )
    breaker = registry.get("search", "read")
    breaker.degradation.wall_clock = Wall()
    seen: list[dict[str, Any]] = []
    breaker.degradation.add_listener(seen.append)
    breaker.degradation.add_listener(lambda record: 1 / 0)  # counted, never in the way
    breaker.isolate()
    assert breaker.begin("search", {"q": "x"}).answer["degradation"] == "omit"
    assert seen == [
        {
            "schema": "toolbreaker.degrade/v1",
            "breaker": "search:read",
            "tool": "search",
            "reason": "isolated",
            "at": NOON,
            "mode": "omit",
            "skipped": [["stale", "no last good answer is kept"]],
        }
    ]
    assert breaker.degradation.faults == 1


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_stop_packets_hold_no_secret(name, secret):
    """The stop answer and its packet never show a secret from the arguments or the run."""
    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": "stop"}), store=store
    )
    breaker = registry.get("tickets", "write")
    guard = RunGuard("task-s", journal=store)
    guard.add_tool(GuardedTool("create_ticket", print, risk="reversible_write", breaker=breaker))
    breaker.isolate(f"rotated {secret}")
    answer = guard.call("create_ticket", {"title": "t", "body": f"token {secret}"})
    assert answer["degradation"] == "stop"
    assert not leaks(json.dumps(answer), secret)
    assert not leaks(guard.stop_packet().to_json(), secret)


def test_a_write_tool_may_not_use_a_row_that_serves_stale():
    """A run guard refuses a write tool whose breaker row could answer it with a stale read."""
    registry = Registry.from_dict(
        sheet(search__read={"degrade": "stale", "max_stale_ms": 60_000}), store=MemoryStore()
    )
    guard = RunGuard("task-w")
    spec = GuardedTool(
        "update_price", print, risk="reversible_write", breaker=registry.get("search", "read")
    )
    with pytest.raises(PolicyError, match="never falls back to a stale answer"):
        guard.add_tool(spec)


def test_a_guard_on_the_event_loop_degrades_off_the_loop(store):
    """``RunGuard.abegin``: the rejection's degradation (a queue write) is awaited."""
    registry = Registry.from_dict(
        sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]}),
        store=store,
    )
    breaker = registry.get("tickets", "write")
    guard = RunGuard("task-a", journal=MemoryStore())

    async def create_ticket(**_: Any) -> Any:
        raise AssertionError("never called while isolated")

    guard.add_tool(
        GuardedTool("create_ticket", create_ticket, risk="reversible_write", breaker=breaker)
    )
    breaker.isolate()

    async def run() -> Any:
        answer = await guard.acall("create_ticket", {"title": "t", "body": "b"})
        closing = getattr(store, "aclose", None)
        if closing is not None:
            await closing()
        return answer

    answer = asyncio.run(run())
    assert answer["queued"] is True
    [(_, item, _)] = store.record_list("toolbreaker.queue")
    assert item["task"] == "task-a"


def test_sibling_branches_count_a_queued_write_as_degraded_and_a_stale_read_as_completed():
    """In a sibling group, a queued write is *degraded* (not failed); a stale read completed
    with its stale label for the model to read."""
    from toolbreaker import Siblings

    store = MemoryStore()
    registry = Registry.from_dict(
        sheet(
            tickets__write={"tool": "create_ticket", "degrade": "queue"},
            search__read={"degrade": "stale", "max_stale_ms": 60_000, "stale_every_ms": 0},
        ),
        store=store,
    )
    tickets, search = registry.get("tickets", "write"), registry.get("search", "read")
    search.degradation.wall_clock = Wall()
    search.begin("search", {"q": "x"}).succeeded({"results": [1]})
    tickets.isolate()
    search.isolate()
    group = Siblings()
    group.add("ticket", lambda: tickets.begin("create_ticket", {"title": "t"}).answer)
    group.add("search", lambda: search.begin("search", {"q": "x"}).answer)
    outcome = group.run()
    assert outcome.degraded == ("ticket",)
    assert outcome["ticket"].reason == "queue"
    assert outcome.completed == ("search",)
    assert outcome["search"].result["stale"] is True


def test_the_spaces_of_queued_work_and_handoffs_are_kept_durably():
    """The stores commit queued work and handoff packets as they commit the journal."""
    from toolbreaker.runtime._breaker._degrade import QUEUE_SPACE
    from toolbreaker.stores._records import DURABLE_SPACES

    assert {QUEUE_SPACE, HANDOFF_SPACE} <= DURABLE_SPACES
