"""The degradation matrix against the real local ToolService and real stores.

Every mode is served by a breaker whose dependency is really down (the service answers
503), with its records in a real store: memory, an SQLite file, a redis-server and a
PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from secrets_corpus import SECRETS, leaks
from toolbreaker import (
    Budget,
    GuardedTool,
    MemoryStore,
    PolicyError,
    Registry,
    RunGuard,
    SQLiteStore,
)
from toolbreaker.cli import main
from toolbreaker.runtime.breaker._degrade import HANDOFF_SPACE, STALE_SPACE, check_store
from toolbreaker.testing import FakeClock, ToolService, request_json

NOON = 1_796_040_000_000 - 1_796_040_000_000 % 86_400_000 + 12 * 3_600_000  # 12:00 UTC
MINUTE = 60_000


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A real store that keeps records."""
    kind = request.param
    if kind == "memory":
        made: Any = MemoryStore()
    elif kind == "sqlite":
        made = SQLiteStore(str(tmp_path / "tb.db"))
    elif kind == "redis":
        from toolbreaker import RedisStore

        url = request.getfixturevalue("redis_url")
        made = RedisStore(url, prefix=f"tb-{tmp_path.name}")
    else:
        from toolbreaker import PostgresStore

        url = request.getfixturevalue("postgres_url")
        made = PostgresStore(url, prefix=f"tb_{uuid.uuid4().hex[:12]}")
    try:
        made.record_get("probe", "probe")
    except NotImplementedError:
        made.close()
        pytest.skip(f"{kind}: records not on this store yet")
    yield made
    if kind != "memory":
        made.close()


@pytest.fixture
def service() -> Iterator[ToolService]:
    with ToolService() as svc:
        yield svc


class Wall:
    """A wall clock for kept answers: moves only when told."""

    def __init__(self) -> None:
        self.now = NOON

    def __call__(self) -> int:
        return self.now


def sheet(**rows: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "defaults": {"timeout": 2.0, "failure_threshold": 1, "cooldown_ms": 30_000},
        "tools": {"local": ["search_snapshot"]},
    }
    for name, row in rows.items():
        dependency, operation = name.split("__")
        data.setdefault(dependency, {})[operation] = row
    return data


def search_tool(service: ToolService) -> Callable[..., Any]:
    def search(q: str) -> Any:
        query = urllib.parse.quote(q)
        return request_json("GET", f"{service.url}/search?q={query}", timeout=2)

    return search


def ticket_tool(service: ToolService) -> Callable[..., Any]:
    def create_ticket(title: str, body: str, idempotency_key: str) -> Any:
        return request_json(
            "POST",
            f"{service.url}/tickets",
            body={"title": title, "body": body},
            headers={"Idempotency-Key": idempotency_key},
            timeout=2,
        )

    return create_ticket


# -- stale ----------------------------------------------------------------------------------


def test_stale_serves_the_last_good_answer_with_its_age_then_cuts_off(store, service):
    """A read row serves its last good answer labelled stale, until ``max_stale``; then omit."""
    registry = Registry.from_dict(
        sheet(
            search__read={
                "tool": "search",
                "degrade": ["stale", "omit"],
                "max_stale": 600,
                "stale_every": 0,
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
        sheet(search__read={"degrade": "stale", "max_stale": 60, "stale_every": 30}),
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
        sheet(search__read={"degrade": ["stale"], "max_stale": 60, "stale_every": 0}),
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
    from toolbreaker import RedisStore

    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    assert binary is not None, "redis-server is not installed"
    server = RedisServer(binary, tmp_path)  # no append-only file: a restart forgets
    server.start()
    redis_url = server.url
    sheet_data = sheet(tickets__write={"tool": "create_ticket", "degrade": ["queue", "handoff"]})
    args = {"title": "Refund", "body": "order A-1001", "idempotency_key": "key-1"}
    service.outage("POST /tickets")
    with RedisStore(redis_url, prefix=f"tb-{uuid.uuid4().hex[:8]}") as volatile:
        breaker = Registry.from_dict(sheet_data, store=volatile).get("tickets", "write")
        answer = breaker.guard(ticket_tool(service), tool="create_ticket")(**args)
        assert answer.get("queued") is not True
        assert answer["degradation"] == "handoff"
        assert volatile.record_list("toolbreaker.queue") == []
    with RedisStore(
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
        "[defaults]\ntimeout = 2.0\n\n[billing.write]\ntool = 'charge_card'\n"
        'degrade = ["stale", "queue"]\nmax_stale = 60\n'
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
    path.write_text("[search.read]\ntimeout = 2.0\ndegrade = 'stale'\n")
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
        ({"degrade": ["omit", "stale"], "max_stale": 5}, "search.read.degrade"),
        ({"degrade": "degraded"}, "search.read.degrade"),
        ({"degrade": "omit", "max_stale": 5}, "search.read.max_stale"),
        ({"degrade": "stale", "max_stale": -1}, "search.read.max_stale"),
        ({"stale_every": 7200}, "search.read.stale_every"),
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
        sheet(search__read={"degrade": ["stale", "omit"], "max_stale": 60}), store=store
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
        sheet(search__read={"degrade": "stale", "max_stale": 60}), store=MemoryStore()
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
            search__read={"degrade": "stale", "max_stale": 60, "stale_every": 0},
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
    from toolbreaker.runtime.breaker._degrade import QUEUE_SPACE
    from toolbreaker.stores._records import DURABLE_SPACES

    assert {QUEUE_SPACE, HANDOFF_SPACE} <= DURABLE_SPACES


# -- one owner per piece of work: a drainer or a person ----------------------------------


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
    from toolbreaker.core.run.fingerprint import write_key

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
