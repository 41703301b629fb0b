"""Draining queued work: exactly once per key, after recovery, even when a drainer dies.

Real parts only: the ToolService counts every POST it receives, the stores are real (an
SQLite file, a redis-server, a PostgreSQL server), and the drainer that is killed is a
real ``toolbreaker drain`` process sent SIGKILL while its call is in flight.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store_kinds import closing, kinds, open_store
from toolbreaker import Registry, drain, prune_done
from toolbreaker.cli import main
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._clock import wall_ms
from toolbreaker.runtime._fleet._drain import queued_items
from toolbreaker.testing import FakeClock, Fault, ToolService, request_json

QUEUE = "toolbreaker.queue"
HOUR = 3600


# Every kind other processes reach, but the Redis Cluster's six servers: the cluster's
# own tests cover it (tests/stores/test_redis_cluster.py).
@pytest.fixture(params=kinds(shared=True, cluster=False))
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A store other processes can reach, and its URL."""
    made, url = open_store(request.param, request, tmp_path)
    with closing(made):
        yield made, url


def tickets_tool(service: ToolService) -> Callable[..., Any]:
    def create_ticket(title: str, body: str, idempotency_key: str) -> Any:
        return request_json(
            "POST",
            f"{service.url}/tickets",
            body={"title": title, "body": body},
            headers={"Idempotency-Key": idempotency_key},
            timeout=5,
        )

    return create_ticket


def reconcile_tool(service: ToolService) -> Callable[..., Any]:
    def find(key: str, _args: Any) -> Any:
        found = request_json("GET", f"{service.url}/tickets?idempotency_key={key}", timeout=5)
        return found["tickets"][0] if found["tickets"] else None

    return find


def registry_for(store: Any, clock: FakeClock | None = None, timeout_ms: int = 5000) -> Registry:
    return Registry.from_dict(
        {
            "defaults": {"timeout_ms": timeout_ms, "failure_threshold": 1, "cooldown_ms": 30_000},
            "tickets": {"write": {"tool": "create_ticket", "degrade": ["queue", "handoff"]}},
        },
        store=store,
        clock=clock,
    )


def queue_tickets(registry: Registry, service: ToolService, count: int) -> list[str]:
    """Queue ``count`` tickets through a breaker the service's outage opened."""
    breaker = registry.get("tickets", "write")
    create = breaker.guard(tickets_tool(service), tool="create_ticket")
    service.outage("POST /tickets")
    ids = []
    for n in range(count):
        answer = create(title=f"T{n}", body="b", idempotency_key=f"key-{n}")
        assert answer["queued"] is True, answer
        ids.append(answer["queue_id"])
    service.recover("POST /tickets")
    return ids


def test_queued_work_is_drained_exactly_once_after_recovery(store, service):
    """While open: waiting. After the cooldown: every item made once. Again: nothing."""
    clock = FakeClock()
    registry = registry_for(store, clock)
    ids = queue_tickets(registry, service, 5)
    tools = {"create_ticket": tickets_tool(service)}
    still_open = drain(store, tools, registry=registry)
    assert sorted(still_open.waiting) == sorted(ids)
    assert service.created("tickets") == []

    clock.advance(seconds=31)  # the breaker lets a probe through; it succeeds and closes
    report = drain(store, tools, registry=registry)
    assert sorted(report.done) == sorted(ids)
    assert drain(store, tools, registry=registry).to_dict() == {key: [] for key in report.to_dict()}
    created = service.created("tickets")
    assert sorted(t["idempotency_key"] for t in created) == [f"key-{n}" for n in range(5)]
    assert service.hits["POST /tickets"] == 1 + 5  # the failure that opened it, then 5
    assert {item["status"] for item in queued_items(store)} == {"done"}


def test_two_drainers_at_once_make_each_item_once(store, service):
    """Drainers racing over the same queue: the compare-and-set claim lets one win each."""
    registry = registry_for(store)
    ids = queue_tickets(registry, service, 12)
    registry.get("tickets", "write").release()  # closed again, by hand
    tools = {"create_ticket": tickets_tool(service)}
    reports: list[Any] = []
    threads = [
        threading.Thread(target=lambda: reports.append(drain(store, tools))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    done = [key for report in reports for key in report.done]
    assert sorted(done) == sorted(ids)
    assert service.hits["POST /tickets"] == 1 + 12
    assert len(service.created("tickets")) == 12


def test_a_failure_without_effect_is_requeued_and_a_refusal_fails(store, service):
    """A 503 made nothing: queued again for a later drain. A 422 cannot be fixed: failed."""
    registry = registry_for(store)
    [queue_id] = queue_tickets(registry, service, 1)
    registry.get("tickets", "write").release()
    tools = {"create_ticket": tickets_tool(service)}
    service.inject("POST /tickets", Fault(status=503))
    assert drain(store, tools).requeued == (queue_id,)
    registry.get("tickets", "write").release()  # that 503 opened it again
    service.inject("POST /tickets", Fault(status=422))
    assert drain(store, tools).failed == (queue_id,)
    assert service.created("tickets") == []
    assert queued_items(store)[0]["status"] == "failed"


def test_a_timeout_after_commit_is_never_replayed_but_reconciled(store, service):
    """The write committed, then the call timed out: unknown, then found by the check."""
    registry = registry_for(store, timeout_ms=500)
    [queue_id] = queue_tickets(registry, service, 1)
    registry.get("tickets", "write").release()
    service.inject("POST /tickets", Fault(commit_then_delay=2.0))
    tools = {"create_ticket": tickets_tool(service)}
    report = drain(
        store, tools, reconcile={"create_ticket": reconcile_tool(service)}, registry=registry
    )
    assert report.reconciled == (queue_id,)
    assert report.done == ()
    assert len(service.created("tickets")) == 1
    assert isinstance(queued_items(store)[0]["finished_at"], int)  # prunable later
    assert service.hits["POST /tickets"] == 2  # the outage's 503, then the one attempt


def test_a_claim_whose_drainer_died_before_starting_is_claimed_again(store, service):
    """``claimed`` with its lease run out never started: another drainer makes it."""
    registry = registry_for(store)
    [queue_id] = queue_tickets(registry, service, 1)
    registry.get("tickets", "write").release()
    [(_, item, version)] = store.record_list(QUEUE)
    store.record_put(
        QUEUE,
        queue_id,
        {**item, "status": "claimed", "holder": "dead", "until": 1},
        version=version,
    )
    report = drain(store, {"create_ticket": tickets_tool(service)})
    assert report.done == (queue_id,)
    assert len(service.created("tickets")) == 1


def test_started_work_of_a_dead_drainer_stays_unknown_without_a_check(store, service):
    """``running`` with its lease run out: never run again; unknown until a person decides."""
    registry = registry_for(store)
    [queue_id] = queue_tickets(registry, service, 1)
    registry.get("tickets", "write").release()
    [(_, item, version)] = store.record_list(QUEUE)
    store.record_put(
        QUEUE,
        queue_id,
        {**item, "status": "running", "holder": "dead", "until": 1},
        version=version,
    )
    report = drain(store, {"create_ticket": tickets_tool(service)})
    assert report.unknown == (queue_id,)
    assert service.hits.get("POST /tickets", 0) == 1  # only the outage's 503
    assert queued_items(store)[0]["status"] == "unknown"


def test_a_live_drainers_claim_is_left_alone(store, service):
    """A lease that has not run out is respected: skipped, not stolen."""
    registry = registry_for(store)
    [queue_id] = queue_tickets(registry, service, 1)
    [(_, item, version)] = store.record_list(QUEUE)
    until = wall_ms() + 60_000
    store.record_put(
        QUEUE,
        queue_id,
        {**item, "status": "running", "holder": "b", "until": until},
        version=version,
    )
    assert drain(store, {"create_ticket": tickets_tool(service)}).skipped == (queue_id,)


_TOOLS_MODULE = """
import os
from toolbreaker.testing import request_json

URL = os.environ["TB_SERVICE_URL"]


def create_ticket(title, body, idempotency_key):
    return request_json(
        "POST",
        URL + "/tickets",
        body={"title": title, "body": body},
        headers={"Idempotency-Key": idempotency_key},
        timeout=60,
    )


TOOLS = {"create_ticket": create_ticket}
"""


@pytest.mark.slow
def test_a_drainer_killed_mid_call_is_finished_by_another_without_a_duplicate(
    shared, service, tmp_path
):
    """SIGKILL while the first item's call is in flight: the next drainer reconciles that
    item (found made, not replayed) and makes the others, each exactly once."""
    store, url = shared
    registry = registry_for(store, timeout_ms=20_000)
    ids = queue_tickets(registry, service, 3)
    registry.get("tickets", "write").release()
    (tmp_path / "drain_tools.py").write_text(textwrap.dedent(_TOOLS_MODULE))
    # The first call commits, then hangs: the drainer is killed with it in flight.
    service.inject("POST /tickets", Fault(commit_then_delay=30.0))
    env = {**os.environ, "TB_SERVICE_URL": service.url}
    drainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolbreaker",
            "drain",
            "--store",
            url,
            "--tools",
            "drain_tools:TOOLS",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):  # bounded: up to about 60 s on a loaded machine
            if service.created("tickets") or drainer.poll() is not None:
                break
            time.sleep(0.1)
        assert drainer.poll() is None, drainer.communicate()
        assert len(service.created("tickets")) == 1
        os.kill(drainer.pid, signal.SIGKILL)
    finally:
        drainer.kill()
        drainer.communicate(timeout=10)
    statuses = sorted(item["status"] for item in queued_items(store))
    assert statuses == ["queued", "queued", "running"]

    # Later (past the dead drainer's lease), another drainer finishes the queue.
    report = drain(
        store,
        {"create_ticket": tickets_tool(service)},
        reconcile={"create_ticket": reconcile_tool(service)},
        wall_clock=lambda: wall_ms() + 120_000,
    )
    assert len(report.reconciled) == 1
    assert sorted([*report.reconciled, *report.done]) == sorted(ids)
    created = service.created("tickets")
    assert sorted(t["idempotency_key"] for t in created) == ["key-0", "key-1", "key-2"]
    assert service.hits["POST /tickets"] == 1 + 3  # the outage's 503, then one each


def test_drain_list_shows_the_queue_masked(shared, service, capsys):
    """``toolbreaker drain --list`` prints the queue, one JSON line per item, masked."""
    store, url = shared
    registry = registry_for(store)
    breaker = registry.get("tickets", "write")
    breaker.isolate()
    step = breaker.begin(
        "create_ticket",
        {"title": "t", "body": "password=hunter2hunter2", "idempotency_key": "k"},
    )
    assert step.answer["queued"] is True
    assert main(["drain", "--store", url, "--list"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    item = json.loads(line)
    assert item["status"] == "queued"
    assert "hunter2" not in line


def test_drain_without_tools_is_one_error_line(shared, capsys):
    """``drain`` needs ``--tools`` (or ``--list``): one error line, exit 2."""
    _, url = shared
    assert main(["drain", "--store", url]) == 2
    assert capsys.readouterr().err == "error: drain needs --tools MODULE:NAME (or --list)\n"


@pytest.mark.slow
def test_queued_work_and_its_drain_survive_a_crash_of_postgresql(postgres_bindir, service):
    """The model was told its work is queued: a PostgreSQL crash right after must not
    forget it; nor may a crash forget that a drain started or finished an item (a lost
    ``running`` would run the work again). The server's WAL writer is made lazy (10 s) so
    that an asynchronously committed record is certainly lost by the crash."""
    from stores.conftest import PostgresServer
    from toolbreaker.stores import PostgresStore

    server = PostgresServer(postgres_bindir, "-c", "wal_writer_delay=10000")
    server.start()
    prefix = f"tb_{uuid.uuid4().hex[:12]}"
    try:
        with PostgresStore(server.url, prefix=prefix) as store:
            registry = registry_for(store)
            ids = queue_tickets(registry, service, 3)
        server.kill()
        server.start()
        with PostgresStore(server.url, prefix=prefix) as store:
            assert sorted(item["id"] for item in queued_items(store)) == sorted(ids)
            registry_for(store).get("tickets", "write").release()
            report = drain(store, {"create_ticket": tickets_tool(service)})
            assert sorted(report.done) == sorted(ids)
        server.kill()
        server.start()
        with PostgresStore(server.url, prefix=prefix) as store:
            assert [item["status"] for item in queued_items(store)] == ["done"] * 3
            assert drain(store, {"create_ticket": tickets_tool(service)}).done == ()
        assert len(service.created("tickets")) == 3
    finally:
        server.remove()


# -- pruning done work ----------------------------------------------------------------------


def _hand_made(store: Any, queue_id: str, status: str, **fields: Any) -> None:
    """A queue item written by hand, long ago (finished at 1 ms past the epoch)."""
    item = {
        "schema": "toolbreaker.queue/v1",
        "id": queue_id,
        "breaker": "tickets.write",
        "dependency": "tickets",
        "operation": "write",
        "tool": "create_ticket",
        "args": {"title": "t", "body": "b", "idempotency_key": queue_id},
        "idempotency_key": queue_id,
        "status": status,
        "queued_at": 1,
        "finished_at": 1,
        "until": 1,
        **fields,
    }
    assert store.record_put(QUEUE, queue_id, item, version=0) is not None


def test_prune_done_deletes_only_done_work_older_than_the_bound(store, service):
    """Done and reconciled items past the bound go; newer done items, and every item that
    is pending, claimed, running, failed or unknown, stay, however old."""
    registry = registry_for(store)
    ids = queue_tickets(registry, service, 3)
    registry.get("tickets", "write").release()
    assert sorted(drain(store, {"create_ticket": tickets_tool(service)}).done) == sorted(ids)
    _hand_made(store, "q-reconciled", "done", reconciled=True)
    others = [f"q-{status}" for status in ("queued", "claimed", "running", "failed", "unknown")]
    for queue_id in others:
        _hand_made(store, queue_id, queue_id[2:])

    first = prune_done(store, older_than=HOUR)
    assert [item["id"] for item in first.pruned] == ["q-reconciled"]
    assert first.kept == 3  # done within the hour: still dedupe markers

    dry = prune_done(
        store, older_than=HOUR, dry_run=True, wall_clock=lambda: wall_ms() + 2 * HOUR * 1000
    )
    assert sorted(item["id"] for item in dry.pruned) == sorted(ids)
    assert len(queued_items(store)) == 3 + len(others)  # a dry run deletes nothing

    later = prune_done(store, older_than=HOUR, wall_clock=lambda: wall_ms() + 2 * HOUR * 1000)
    assert sorted(item["id"] for item in later.pruned) == sorted(ids)
    assert later.kept == 0
    assert sorted(item["id"] for item in queued_items(store)) == sorted(others)


def test_a_pruned_key_can_be_queued_again(store, service):
    """Pruning ends the dedupe window: while a done item is kept, the same call is
    "already queued"; once it is pruned, the same call is queued (and drained) anew."""
    registry = registry_for(store)
    [queue_id] = queue_tickets(registry, service, 1)
    breaker = registry.get("tickets", "write")
    breaker.release()
    assert drain(store, {"create_ticket": tickets_tool(service)}).done == (queue_id,)
    args = {"title": "T0", "body": "b", "idempotency_key": "key-0"}
    breaker.isolate()
    kept = breaker.begin("create_ticket", args).answer
    assert kept["queue_id"] == queue_id
    assert "already queued" in kept["instruction"]
    assert [item["id"] for item in prune_done(store, older_than=0).pruned] == [queue_id]
    again = breaker.begin("create_ticket", args).answer
    assert again["queue_id"] == queue_id
    assert "already queued" not in again["instruction"]
    assert queued_items(store)[0]["status"] == "queued"


def test_prune_refuses_a_negative_bound(store):
    """``older_than`` is seconds from 0: anything else is a PolicyError naming it."""
    with pytest.raises(PolicyError) as caught:
        prune_done(store, older_than=-1)
    assert caught.value.field == "older_than"


def test_drain_prune_done_prints_one_escaped_line_per_item(shared, capsys):
    """``toolbreaker drain --prune-done 7d``: a line per pruned item, then a summary line;
    untrusted text from the store is escaped, never sent raw to the terminal."""
    store, url = shared
    _hand_made(
        store,
        "q-evil",
        "done",
        dependency="tick\x1b[31mets",
        tool="create\x1b]0;pwned\x07_ticket",
        idempotency_key="k\nforged: line",
    )
    _hand_made(store, "q-waiting", "queued")
    assert main(["drain", "--store", url, "--prune-done", "7d"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\x07" not in out
    lines = out.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("pruned q-evil ")
    assert "\\x1b" in lines[0]
    assert "1970-01-01T00:00:00Z" in lines[0]
    assert lines[1] == (
        "pruned 1 done item finished more than 7d ago (0 newer kept; pending, in-flight, "
        "failed and unknown items are never pruned)"
    )
    assert store.record_get(QUEUE, "q-evil") is None
    assert store.record_get(QUEUE, "q-waiting") is not None


def test_drain_prune_done_dry_run_deletes_nothing(shared, capsys):
    """``--dry-run`` says what would be pruned, and keeps it."""
    store, url = shared
    _hand_made(store, "q-old", "done")
    assert main(["drain", "--store", url, "--prune-done", "1h", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("would prune q-old ")
    assert lines[1].startswith("would prune 1 done item finished more than 1h ago")
    assert store.record_get(QUEUE, "q-old") is not None


@pytest.mark.parametrize("bound", ["soon", "-5", "7w", "", "1e9999"])
def test_drain_prune_done_with_a_bad_bound_is_one_error_line(shared, capsys, bound):
    """A bound that is not a duration: one error line, exit 2, nothing deleted."""
    store, url = shared
    _hand_made(store, "q-old", "done")
    assert main(["drain", "--store", url, "--prune-done", bound]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: toolbreaker drain: argument --prune-done: must be a duration ")
    assert "7d, 12h, 30m, 90s or 3600 (seconds)" in err
    assert err.count("\n") == 1
    assert store.record_get(QUEUE, "q-old") is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dry-run"], "error: --dry-run goes with --prune-done\n"),
        (
            ["--prune-done", "7d", "--tools", "x:y"],
            "error: --prune-done runs nothing: no --tools, --reconcile or --sheet\n",
        ),
    ],
)
def test_drain_prune_options_that_do_not_fit_are_one_error_line(shared, capsys, extra, message):
    """``--dry-run`` alone, or a prune with tools to run: one error line, exit 2."""
    store, url = shared
    _hand_made(store, "q-old", "done")
    assert main(["drain", "--store", url, *extra]) == 2
    assert capsys.readouterr().err == message
    assert store.record_get(QUEUE, "q-old") is not None


# -- a queue write the store acknowledged late -------------------------------------------


@pytest.fixture
def late_queue(redis_url: str, tmp_path: Path) -> Iterator[tuple[Any, Any, Any]]:
    """(a store whose queue writes are answered late, the proxy, a direct store): Redis.

    The proxy holds the reply to the armed queue write: the server makes it, the store's
    client times out first (its socket timeout), as on a slow or overloaded server.
    """
    from lag_proxy import LaggingProxy
    from stores.patient import patient_redis
    from toolbreaker.stores import RedisStore

    prefix = f"tb-{tmp_path.name}"
    port = int(redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    direct = patient_redis(redis_url, prefix=prefix)
    direct.record_put("warm", "k", {})  # the record script is loaded on the server
    with LaggingProxy(port, QUEUE.encode()) as proxy:
        url = proxy.url("redis")
        # The held answer is never sent before the client gives up, however long it waits:
        # a timeout of seconds costs the test that once, and keeps the breaker's other
        # round trips through the proxy (isolate, admit, release) from timing out on a
        # loaded machine (0.2 s did once, in CI).
        slow = RedisStore(url, prefix=prefix, socket_timeout=2.0, volatile_journal=True)
        try:
            yield slow, proxy, direct
        finally:
            slow.close()
            direct.close()


def test_a_queue_write_answered_late_is_maybe_queued_and_done_once(late_queue, service):
    """The store makes the queued item but its answer comes after the client gave up: the
    write is unknown, not failed. The model is told it may already be queued (with its
    id), never that a person took it over; the run journals it maybe-queued (writes are
    blocked, the packet names the queue id and says a drain makes it), no handoff packet
    exists, and the drain makes it once."""
    from toolbreaker import GuardedTool, RunGuard
    from toolbreaker.runtime._breaker._degrade import HANDOFF_SPACE

    slow, proxy, direct = late_queue
    registry = registry_for(slow)
    breaker = registry.get("tickets", "write")
    guard = RunGuard("task-late", journal=direct)
    guard.add_tool(
        GuardedTool(
            "create_ticket", tickets_tool(service), risk="reversible_write", breaker=breaker
        )
    )
    breaker.isolate()
    proxy.arm()
    answer = guard.call("create_ticket", {"title": "Refund", "body": "order A-1001"})
    proxy.held()  # the queue write reached the server; its answer is being held
    proxy.release()
    assert answer.get("degradation") == "queue", answer
    assert answer["outcome_unknown"] is True
    assert answer["queued"] is None
    assert f"may already be queued as {answer['queue_id']}" in answer["instruction"]
    assert direct.record_list(HANDOFF_SPACE) == []  # nobody was asked to do it by hand
    [(queue_id, item, _)] = direct.record_list(QUEUE)
    assert (queue_id, item["status"]) == (answer["queue_id"], "queued")
    entry = direct.journal_get("task-late", answer["idempotency_key"])
    assert (entry["status"], entry["queue_id"]) == ("maybe-queued", queue_id)
    assert guard.writes_blocked is not None  # an unknown write, within no allowance
    packet = guard.stop_packet()
    [uncertain] = packet.uncertain
    assert uncertain["queue_id"] == queue_id
    assert "will be made by a drain" in packet.next_safe_action
    assert "do not carry them out by hand" in packet.next_safe_action

    breaker.release()
    report = drain(direct, {"create_ticket": tickets_tool(service)})
    assert report.done == (queue_id,)
    assert drain(direct, {"create_ticket": tickets_tool(service)}).done == ()
    assert service.hits["POST /tickets"] == 1
    assert len(service.created("tickets")) == 1
    # The drain confirmed it in the run's journal: a resumed run answers it from there.
    assert direct.journal_get("task-late", answer["idempotency_key"])["status"] == "confirmed"
