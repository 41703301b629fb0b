"""The dashboard's board and HTTP API without a browser: folding, actions, the command."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from ports import free_port
from toolbreaker import Budget, GuardedTool, Policy, Registry, RunGuard
from toolbreaker.cli import main
from toolbreaker.cli._board import Board
from toolbreaker.cli._dashboard import build_app, store_actor
from toolbreaker.errors import MissingExtra
from toolbreaker.instrumentation.stream import (
    MemoryStream,
    SQLiteStream,
    StreamPublisher,
    iter_entries,
    open_stream,
)
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import FakeClock

pytest.importorskip("starlette")
from starlette.testclient import TestClient

ORIGIN = "http://127.0.0.1"
SECRET = "sk-live-abcdefghijklmnopqrstuvwx"


def eventually(check):
    """Wait (bounded) for another store's change to reach this process's view."""
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


class Unavailable(Exception):
    status_code = 503


def fail() -> None:
    raise Unavailable


def test_the_board_folds_transitions_into_rows():
    """State, since when, demand / admitted / rejected, opens by reason, probes, fallback."""
    clock = FakeClock()
    stream = MemoryStream()
    breakers = Registry(
        Policy(failure_threshold=1, cooldown_ms=1_000, success_threshold=1),
        clock=clock,
        default_timeout=1.0,
        default_enforce="cooperative",
    )
    breakers.get("search_cache", "read")
    search = breakers.get("search", "read", fallback="search_cache")
    StreamPublisher(stream).attach(search)
    with pytest.raises(Unavailable):
        search.call(fail)
    search.guard(lambda: "ok")()
    clock.advance(1_000)
    search.call(lambda: "ok")
    board = Board()
    board.feed(entry for _, entry in stream.read())
    row = board.breakers["search:read"]
    assert (row["phase"], row["demand"], row["admitted"], row["rejected"]) == ("closed", 3, 2, 1)
    assert row["opens"] == {"qualifying-failure": 1}
    assert row["probes"] == {"ok": 1, "failed": 0, "expired": 0}
    assert row["fallback"] == "search_cache"
    assert row["since_known"]
    snapshot = board.snapshot()
    assert snapshot["full"]
    assert len(snapshot["breakers"][0]["last"]) == 1  # rows carry the newest transition only
    assert len(board.breaker("search:read")["last"]) > 1
    assert board.snapshot(board.revision)["breakers"] == []
    series = snapshot["series"]
    assert len(series["t"]) >= 120
    assert sum(series["demand"]) == 3
    assert sum(series["rejected"]) == 1


def test_the_board_skips_what_it_cannot_read():
    """Entries from other processes that do not parse are skipped, not fatal."""
    board = Board()
    board.feed([{"kind": "transition", "record": "nonsense"}, {"kind": 3}, {}])
    assert board.breakers == {}
    assert board.entries == 3


def test_the_board_keeps_keys_whole_while_it_cuts_what_it_shows():
    """Two breakers whose names share their first 200 characters stay two rows (the page
    names breakers by key); the tool name it shows is cut."""
    stream = MemoryStream()
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(stream).attach(breakers)
    for operation in ("read", "write"):
        breakers.get("d" * 200, operation, tool="t" * 300).call(lambda: "ok")
    board = board_of(stream)
    assert sorted(board.breakers) == [f"{'d' * 200}:read", f"{'d' * 200}:write"]
    assert {row["tool"] for row in board.breakers.values()} == {"t" * 200}


@pytest.fixture
def acting(tmp_path):
    path = tmp_path / "breakers.db"
    url = f"sqlite://{path}"
    store = SQLiteStore(path)
    breakers = Registry(store=store, default_timeout=5.0, default_enforce="cooperative")
    search = breakers.get("search", "read")
    stream = SQLiteStream(path)
    StreamPublisher(stream).attach(search)
    search.call(lambda: "ok")
    board = Board()
    actor = store_actor(url, board, stream)
    app = build_app(stream, actor=actor, token="t0ken", board=board)
    with TestClient(app, base_url=ORIGIN) as client:
        client.get("/api/snapshot")  # the board has read the stream
        yield client, search, stream
    stream.close()
    store.close()
    actor.close()


def act(client, body, **headers):
    base = {"Origin": ORIGIN, "Content-Type": "application/json", "X-Toolbreaker-Token": "t0ken"}
    return client.post("/api/action", content=json.dumps(body), headers={**base, **headers})


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        ({"key": "search:read", "action": "isolate", "reason": " "}, 400, "reason"),
        ({"key": "search:read", "action": "delete", "reason": "x"}, 400, "isolate or release"),
        ({"key": "search:read"}, 400, "body"),
        ({"key": "nope", "action": "isolate", "reason": "x"}, 409, "no breaker"),
    ],
)
def test_bad_actions_are_refused(acting, body, status, why):
    """Every action needs a known breaker, isolate or release, and a reason."""
    client, search, _ = acting
    response = act(client, body)
    assert response.status_code == status
    assert why in response.json()["error"]
    assert search.state.phase == "closed"


def test_wrong_token_and_foreign_origin_are_refused(acting):
    """The token and the page's own origin are both required."""
    client, search, _ = acting
    body = {"key": "search:read", "action": "isolate", "reason": "x"}
    assert act(client, body, **{"X-Toolbreaker-Token": "guess"}).status_code == 403
    assert act(client, body, Origin="http://127.0.0.1.evil.example").status_code == 403
    assert client.get("/api/action").status_code == 405
    assert search.state.phase == "closed"


def test_isolate_and_release_go_through_the_store_and_into_the_stream(acting):
    """An action changes the shared state and is itself recorded with its reason."""
    client, search, stream = acting
    body = {"key": "search:read", "action": "isolate", "reason": "provider incident 7"}
    response = act(client, body)
    assert response.status_code == 200, response.text
    assert response.json()["record"]["reason"] == "isolated"
    assert eventually(lambda: search.state.isolated)
    assert act(client, {**body, "action": "release"}).status_code == 200
    assert eventually(lambda: search.state.phase == "closed" and not search.state.isolated)
    calls = [e["record"]["event"].get("call") for _, e in iter_entries(stream)]
    assert calls[-2:] == ["operator:provider incident 7"] * 2


def test_an_action_on_a_breaker_whose_name_was_masked_is_refused(tmp_path):
    """A breaker named with a URL password shows masked on the board; isolating what
    the page shows would isolate a breaker no call goes through, so it is refused and
    the real breaker is left as it was."""
    path = tmp_path / "breakers.db"
    store = SQLiteStore(path)
    breakers = Registry(store=store, default_timeout=5.0, default_enforce="cooperative")
    crm = breakers.get(f"https://ops:{SECRET}@crm.example.com", "read")
    stream = SQLiteStream(path)
    StreamPublisher(stream).attach(crm)
    crm.call(lambda: "ok")
    board = Board()
    actor = store_actor(f"sqlite://{path}", board, stream)
    try:
        app = build_app(stream, actor=actor, token="t0ken", board=board)
        with TestClient(app, base_url=ORIGIN) as client:
            (row,) = client.get("/api/snapshot").json()["breakers"]
            assert SECRET not in row["key"]
            body = {"key": row["key"], "action": "isolate", "reason": "incident"}
            response = act(client, body)
        assert response.status_code == 409
        assert "masked or cut" in response.json()["error"]
        assert crm.state.phase == "closed"
    finally:
        stream.close()
        actor.close()
        store.close()


def test_assets_are_served_with_a_strict_policy():
    """The page and its vendored chart library come from the package; no framing."""
    with TestClient(build_app(MemoryStream()), base_url=ORIGIN) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert client.get("/assets/uPlot.iife.min.js").status_code == 200
        assert "MIT" in client.get("/assets/LICENSE.uPlot.txt").text
        assert client.get("/assets/../../etc/passwd").status_code == 404
        assert client.get("/assets/nothing.js").status_code == 404


def test_actions_need_a_reachable_store(capsys):
    """--allow-actions on memory:// is a usage error: another process's memory is refused
    as a stream, and even this process's memory stream is no breaker store."""
    assert main(["dashboard", "--store", "memory://x", "--allow-actions"]) == 2
    assert "memory:// is one process's memory" in capsys.readouterr().err
    open_stream("memory://actions-here")
    assert main(["dashboard", "--store", "memory://actions-here", "--allow-actions"]) == 2
    assert "needs the breakers' store" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_serves_the_stream(tmp_path):
    """toolbreaker dashboard --store sqlite:///... serves the stream's breakers on loopback."""
    path = tmp_path / "events.db"
    stream = SQLiteStream(path)
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(stream).attach(breakers.get("search"))
    breakers.get("search").call(lambda: "ok")
    stream.close()
    port = free_port()
    command = [sys.executable, "-m", "toolbreaker", "dashboard", "--store", f"sqlite://{path}"]
    server = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        doc = None
        while doc is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/snapshot", timeout=5
                ) as response:
                    doc = json.loads(response.read())
            except OSError:
                time.sleep(0.1)
        assert doc is not None, "the dashboard did not answer"
        assert [row["key"] for row in doc["breakers"]] == ["search"]
        assert doc["actions"] is False
    finally:
        server.terminate()
        server.communicate(timeout=10)


@pytest.mark.slow
def test_an_interrupt_with_a_page_connected_ends_the_command_cleanly(tmp_path):
    """Ctrl-C while a page holds /api/events open: the event stream ends, the command
    exits 130 as every command does on an interrupt, with no traceback (uvicorn used to
    cancel the open stream after its grace period and print the CancelledError)."""
    path = tmp_path / "events.db"
    SQLiteStream(path).close()
    port = free_port()
    command = [sys.executable, "-m", "toolbreaker", "dashboard", "--store", f"sqlite://{path}"]
    server = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline, page = time.monotonic() + 30, None
        while page is None and time.monotonic() < deadline:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/events", timeout=30)
            except OSError:
                time.sleep(0.1)
        assert page is not None, "the dashboard did not answer"
        assert page.readline().startswith(b"data: ")
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=30)
        page.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    text = output.decode()
    assert server.returncode == 130, text
    assert "Traceback" not in text
    assert "CancelledError" not in text


def test_a_missing_extra_says_what_to_install(monkeypatch, capsys):
    """Without starlette/uvicorn the command prints the extra to install, exit 2."""
    import toolbreaker.cli._dashboard as dashboard

    def missing(module: str, extra: str, **_: object):
        raise MissingExtra(module, extra)

    monkeypatch.setattr(dashboard, "require", missing)
    assert main(["dashboard", "--store", "memory://y"]) == 2
    assert "toolbreaker[dashboard]" in capsys.readouterr().err


def test_the_first_snapshot_in_the_page_cannot_break_out():
    """A hostile breaker name in the page's embedded snapshot stays inert text."""
    stream = MemoryStream()
    hostile = "</script><script>alert(1)</script><!--"
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(stream).attach(breakers.get(hostile))
    breakers.get(hostile).call(lambda: "ok")
    with TestClient(build_app(stream), base_url=ORIGIN) as client:
        page = client.get("/").text
    assert page.count("<script") == 3  # the data block, uPlot and app.js
    assert "alert(1)" in page  # it is there, escaped, as data
    assert hostile not in page


# -- degradation choices and limit notices ------------------------------------------------

SECRET = "sk-live-abcdefghijklmnopqrstuvwx"
STALE_AGE_MS = 65_000


def incident(stream, *, publisher=None):
    """A real incident on real breakers, published to ``stream``; returns the breakers.

    - ``catalog.read`` (bulkhead of 2, ``degrade = ["omit"]``): two real concurrent calls
      hold both slots, a third is answered ``saturated``; then the row is isolated and
      a call is answered ``omit``;
    - ``prices.read`` (``degrade = ["stale", "omit"]``): a success is kept, the row is
      isolated, the same call gets the kept answer, 65 s old on the degradation's clock;
    - ``orders.read``: a run guard with ``max_calls_per_turn = 1`` defers the second call
      of a turn.
    """
    registry = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 10_000, "enforce": "cooperative"},
            "catalog": {
                "read": {"tool": "search_catalog", "max_concurrent": 2, "degrade": ["omit"]}
            },
            "prices": {
                "read": {"tool": "get_price", "degrade": ["stale", "omit"], "max_stale_ms": 900_000}
            },
            "orders": {"read": {"tool": "lookup_order"}},
        }
    )
    catalog, prices, orders = (registry.get(d, "read") for d in ("catalog", "prices", "orders"))
    publisher = publisher or StreamPublisher(stream)
    publisher.attach(registry)

    gate, entered = threading.Event(), threading.Semaphore(0)

    @catalog.guard(tool="search_catalog")
    def search_catalog(q):
        entered.release()
        assert gate.wait(30)
        return {"q": q, "hits": []}

    holders = [threading.Thread(target=search_catalog, args=(f"q{n}",)) for n in range(2)]
    for holder in holders:
        holder.start()
    try:
        assert all(entered.acquire(timeout=30) for _ in holders), "the calls did not start"
        assert search_catalog("q3")["reason"] == "saturated"  # both slots are held
    finally:
        gate.set()
        for holder in holders:
            holder.join(30)
    catalog.isolate("provider incident 9")
    assert search_catalog("q4")["degradation"] == "omit"

    @prices.guard(tool="get_price")
    def get_price(sku):
        return {"sku": sku, "price": 3}

    assert get_price("a") == {"sku": "a", "price": 3}
    prices.isolate("provider incident 9")
    real = prices.degradation.wall_clock
    prices.degradation.wall_clock = lambda: real() + STALE_AGE_MS
    assert get_price("a")["degradation"] == "stale"

    guard = RunGuard("refund-42", budget=Budget(max_calls_per_turn=1))
    guard.add_tool(GuardedTool(name="lookup_order", fn=lambda id: {"id": id}, breaker=orders))
    publisher.attach(guard)
    guard.mark_turn(1)
    guard.call("lookup_order", {"id": "1"})
    assert guard.call("lookup_order", {"id": "2"})["deferred"] is True
    return catalog, prices, orders


def board_of(stream):
    board = Board()
    board.feed(entry for _, entry in stream.read())
    return board


def test_the_board_counts_notices_per_breaker_beside_its_state():
    """Degradation choices by mode and limit notices by kind, per breaker row."""
    stream = MemoryStream()
    incident(stream)
    board = board_of(stream)
    rows = {row["key"]: row for row in board.snapshot()["breakers"]}
    assert rows["catalog:read"]["phase"] == "open"
    assert rows["catalog:read"]["notices"] == {"degrade": {"omit": 1}, "limit": {"saturated": 1}}
    assert rows["prices:read"]["notices"] == {"degrade": {"stale": 1}, "limit": {}}
    assert rows["orders:read"]["notices"] == {"degrade": {}, "limit": {"deferred": 1}}


def test_the_newest_notices_are_listed_with_tool_mode_and_reason():
    """Newest first: time, breaker and dependency, tool, mode or kind, reason; a stale
    answer carries its age, a saturated one the limit, a deferral the task."""
    stream = MemoryStream()
    incident(stream)
    notices = board_of(stream).snapshot()["notices"]
    assert notices["window_s"] == 600
    recent = notices["recent"]
    assert [(n["kind"], n["name"], n["dependency"], n["tool"]) for n in recent] == [
        ("limit", "deferred", "orders", "lookup_order"),
        ("degrade", "stale", "prices", "get_price"),
        ("degrade", "omit", "catalog", "search_catalog"),
        ("limit", "saturated", "catalog", "search_catalog"),
    ]
    deferred, stale, omit, saturated = recent
    assert deferred["task"] == "refund-42"
    assert deferred["reason"] == "max_calls_per_turn 1 reached"
    assert STALE_AGE_MS <= stale["stale_age_ms"] < STALE_AGE_MS + 60_000
    assert (stale["reason"], omit["reason"]) == ("isolated", "isolated")
    assert saturated["reason"] == "bulkhead full (limit 2)"
    assert saturated["retry_after_ms"] == 10_000
    assert all(isinstance(n["wall"], float) and n["source"] for n in recent)
    assert [c["key"] for c in notices["counts"]] == ["catalog:read", "orders:read", "prices:read"]


def test_notice_counts_cover_the_window_and_leave_it():
    """Counts are over the series' window, ending at the stream's newest second: when
    newer entries move it past a notice, its count goes (the row is pushed again), and
    the list keeps it."""
    stream = MemoryStream()
    incident(stream)
    entries = [entry for _, entry in stream.read()]
    board = Board(seconds=60)
    board.feed(entries)
    revision = board.revision
    later = [
        {**entry, "wall": entry["wall"] + 61}
        for entry in entries
        if entry["kind"] == "transition" and entry["key"] == "orders:read"
    ]
    board.feed(later[:1])
    changed = board.snapshot(revision)
    rows = {row["key"]: row for row in changed["breakers"]}
    assert board.notice_counts("catalog:read") == {"degrade": {}, "limit": {}}
    assert "catalog:read" in rows  # pushed again: its counts changed
    assert rows["catalog:read"]["notices"] == {"degrade": {}, "limit": {}}
    assert changed["notices"]["counts"] == []
    assert len(changed["notices"]["recent"]) == 4
    # Incremental snapshots carry the notices only when they changed.
    assert board.snapshot(board.revision)["notices"] is None


def test_notices_from_other_processes_are_bounded_and_skipped_when_unreadable():
    """Unknown modes and kinds count as ``other``; long texts are cut; a notice that is
    not an object is skipped; none of it can grow the board or break the fold."""
    board = Board()
    board.feed(
        [
            {"kind": "degrade", "wall": 5.0, "notice": {"breaker": "a", "mode": "x" * 5000}},
            {"kind": "limit", "wall": 5.0, "notice": {"breaker": "a", "kind": "flood"}},
            {"kind": "degrade", "wall": 5.0, "notice": {"breaker": "a", "tool": "t" * 5000}},
            {"kind": "degrade", "wall": "soon", "notice": {"mode": None, "skipped": [1, [2]]}},
            {"kind": "limit", "notice": "nonsense"},
            {"kind": "degrade"},
        ]
    )
    assert board.notice_counts("a") == {"degrade": {"other": 1, "plain": 1}, "limit": {"other": 1}}
    assert board.notice_counts("") == {"degrade": {"plain": 1}, "limit": {}}
    recent = board.snapshot()["notices"]["recent"]
    assert len(recent) == 4
    assert max(len(json.dumps(n)) for n in recent) < 1000
    assert board.entries == 6


def test_the_api_exposes_notice_counts_masked():
    """/api/snapshot and /api/breaker carry the counts and the recent notices; a secret
    in a tool name a caller passed is masked there, as stop packets are."""
    stream = MemoryStream()
    publisher = StreamPublisher(stream)
    catalog, _, _ = incident(stream, publisher=publisher)
    assert catalog.guard(lambda: 1, tool=f"export_api_key={SECRET}")()["degradation"] == "omit"
    with TestClient(build_app(stream), base_url=ORIGIN) as client:
        snapshot = client.get("/api/snapshot")
        one = client.get("/api/breaker", params={"key": "catalog:read"}).json()
    assert SECRET not in snapshot.text
    assert SECRET not in json.dumps(one)
    rows = {row["key"]: row for row in snapshot.json()["breakers"]}
    assert rows["catalog:read"]["notices"]["degrade"] == {"omit": 2}
    assert one["notices"] == {"degrade": {"omit": 2}, "limit": {"saturated": 1}}
    assert [n["name"] for n in one["recent_notices"]] == ["omit", "omit", "saturated"]
    assert "[REDACTED]" in one["recent_notices"][0]["tool"]


class WallClock:
    """A wall clock a test moves by hand (Unix seconds)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_window_ends_at_the_given_time_while_the_stream_is_quiet():
    """The fold reads no clock, but ``now`` moves the window's end: with no new entry,
    counts and the chart's seconds leave it once it has passed them, the revision moves
    (so pages are pushed the change), and every document says the second it ends at."""
    stream = MemoryStream()
    incident(stream)
    entries = [entry for _, entry in stream.read()]
    newest = int(max(entry["wall"] for entry in entries))
    board = Board(seconds=60)
    board.feed(entries)
    first = board.snapshot()
    assert first["as_of"] == first["notices"]["as_of"] == newest
    assert first["window_s"] == 60
    assert board.snapshot(now=newest - 30)["as_of"] == newest  # an earlier clock: no change
    assert board.notice_counts("catalog:read")["limit"] == {"saturated": 1}

    revision = board.revision
    assert not board.advance(float("nan"))  # a broken clock moves nothing
    assert not board.advance(float("inf"))
    assert not board.advance(newest + 30)  # still inside the window
    assert board.revision == revision
    assert board.snapshot(revision, now=newest + 30)["breakers"] == []

    changed = board.snapshot(revision, now=newest + 61)
    assert changed["as_of"] == newest + 61
    assert changed["revision"] > revision
    rows = {row["key"]: row["notices"] for row in changed["breakers"]}
    assert rows["catalog:read"] == {"degrade": {}, "limit": {}}
    assert changed["notices"]["counts"] == []
    assert len(changed["notices"]["recent"]) == 4  # the list keeps them
    assert changed["series"]["t"][-1] == newest + 61
    assert not any(changed["series"]["demand"])
    one = board.breaker("catalog:read", now=newest + 62)
    assert one is not None
    assert one["as_of"] == newest + 62
    # An entry older than the window, read late, is listed but not counted.
    late = {**entries[-1], "wall": float(newest)}
    board.feed([late])
    recent = board.snapshot()["notices"]["recent"]
    assert len(recent) == 4  # the same notice again: its line counts it
    assert recent[0]["count"] == 2
    assert recent[0]["first_wall"] == newest
    assert board.notice_counts(late["notice"].get("breaker") or "") == {"degrade": {}, "limit": {}}


def test_the_api_counts_fall_off_with_the_servers_clock():
    """/api/snapshot and /api/breaker end the window at the server's clock: while the
    stream is quiet, the counts leave it when the clock passes them."""
    stream = MemoryStream()
    incident(stream)
    newest = max(entry["wall"] for _, entry in stream.read())
    clock = WallClock(newest + 1)
    with TestClient(build_app(stream, clock=clock), base_url=ORIGIN) as client:
        before = client.get("/api/snapshot").json()
        assert before["as_of"] == int(newest + 1)
        rows = {row["key"]: row["notices"] for row in before["breakers"]}
        assert rows["catalog:read"] == {"degrade": {"omit": 1}, "limit": {"saturated": 1}}
        assert sum(before["series"]["demand"]) > 0

        clock.now = newest + 601
        after = client.get("/api/snapshot").json()
        one = client.get("/api/breaker", params={"key": "catalog:read"}).json()
    assert after["as_of"] == int(newest + 601)
    assert after["notices"]["as_of"] == int(newest + 601)
    rows = {row["key"]: row["notices"] for row in after["breakers"]}
    assert all(n == {"degrade": {}, "limit": {}} for n in rows.values())
    assert after["notices"]["counts"] == []
    assert sum(after["series"]["demand"]) == 0
    assert one["notices"] == {"degrade": {}, "limit": {}}
    assert one["as_of"] == int(newest + 601)
    assert one["window_s"] == 600
    # Totals are not windowed: they say what the stream held.
    assert after["breakers"]
    assert after["total"] == before["total"]


class WatchedBoard(Board):
    """A board that notes every use, and takes its time, so overlapping uses show."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.overlaps = 0
        self.uses = 0
        self._watch = threading.Lock()

    def _use(self, method, *args, **kwargs):
        with self._watch:
            self.inside += 1
            self.uses += 1
            self.overlaps += self.inside > 1
        try:
            time.sleep(0.002)  # widen the window a concurrent use would fall into
            return method(*args, **kwargs)
        finally:
            with self._watch:
                self.inside -= 1

    def feed(self, entries):
        return self._use(super().feed, list(entries))

    def advance(self, now):
        return self._use(super().advance, now)

    def snapshot(self, since=0):
        return self._use(super().snapshot, since)

    def breaker(self, key, **kwargs):
        return self._use(super().breaker, key, **kwargs)


def test_requests_never_read_the_board_while_a_refresh_changes_it():
    """Each request refreshes the board on a worker thread, then reads it on the event
    loop: another request's refresh could change it mid-read (a dict changing size while
    it is iterated). Every use of the board is now one at a time."""
    stream = MemoryStream()
    registry = Registry(Policy(), default_timeout=1.0, default_enforce="cooperative")
    publisher = StreamPublisher(stream)
    stop = threading.Event()

    def traffic() -> None:
        for i in range(1_000_000):
            if stop.wait(0.0005):
                return
            breaker = registry.get(f"dep-{i % 300}", "read")  # new rows, then new calls
            if i < 300:
                publisher.attach(breaker)
            breaker.call(lambda: "ok")

    board = WatchedBoard()
    errors: list[object] = []
    with TestClient(build_app(stream, board=board, interval=0.0), base_url=ORIGIN) as client:

        def reader() -> None:
            for n in range(20):
                path = "/api/snapshot" if n % 2 else "/api/breaker?key=dep-1:read"
                status = client.get(path).status_code
                if status not in (200, 404):
                    errors.append(status)

        writer = threading.Thread(target=traffic)
        writer.start()
        readers = [threading.Thread(target=reader) for _ in range(3)]
        try:
            for thread in readers:
                thread.start()
            for thread in readers:
                thread.join(timeout=120)
        finally:
            stop.set()
            writer.join(timeout=60)
    assert errors == []
    assert board.uses >= 60  # 60 reads, and the refreshes' folds
    assert board.overlaps == 0


def test_a_call_refused_for_hung_calls_is_listed_with_how_many_hang():
    """A sync call refused because a call hung past its deadline holds the only worker
    it may use: the board counts a ``hung`` limit notice and says how many hang."""
    stream = MemoryStream()
    registry = Registry.from_dict({"search": {"read": {"timeout_ms": 300}}})
    breaker = registry.get("search", "read")
    breaker._runner.max_workers = 1  # one hung call holds every worker
    StreamPublisher(stream).attach(registry)
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            breaker.call(release.wait, 30)
        with pytest.raises(Exception, match="hung"):
            breaker.call(lambda: None)
    finally:
        release.set()
        breaker.close()
    board = board_of(stream)
    assert board.notice_counts("search:read")["limit"] == {"hung": 1}
    [notice] = board.snapshot()["notices"]["recent"]
    assert notice["reason"] == "calls still running past their deadline: 1 (limit 1)"
    assert notice["retry_after_ms"] == breaker.policy.cooldown_ms


def test_open_until_is_a_wall_clock_time():
    """The breaker's clock is monotonic: a line carries its open-until time as wall time
    (the entry's own wall plus the offset), beside the raw instant, never instead of it."""
    clock = FakeClock(773_000)
    stream = MemoryStream()
    breakers = Registry(
        Policy(failure_threshold=1, cooldown_ms=30_000, cooldown_max_ms=30_000),
        clock=clock,
        default_timeout=1.0,
        default_enforce="cooperative",
    )
    search = breakers.get("search", "read")
    StreamPublisher(stream).attach(search)
    with pytest.raises(Unavailable):
        search.call(fail)
    clock.advance(500)
    search.guard(lambda: "ok")()
    board = Board()
    board.feed(entry for _, entry in stream.read())
    rejected, opening, _ = board.breaker("search:read")["last"]
    assert opening["open_until"] == 803_000  # the breaker's clock, for the receipt
    assert opening["open_until_wall"] == opening["wall"] + 30.0
    assert rejected["group"] == "rejected"
    assert rejected["open_until_wall"] == rejected["last_wall"] + 29.5


def test_the_operators_reason_and_who_are_on_the_row():
    """An isolation puts its reason (masked) and its source on the row; a release clears it."""
    stream = MemoryStream()
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    search = breakers.get("search", "read")
    StreamPublisher(stream).attach(search)
    search.isolate(f"provider incident 7, token={SECRET}")
    board = Board()
    board.feed(entry for _, entry in stream.read())
    (row,) = board.snapshot()["breakers"]
    operator = row["operator"]
    assert operator["action"] == "isolate"
    assert operator["reason"].startswith("provider incident 7")
    assert SECRET not in json.dumps(row)
    (entry,) = [e for _, e in stream.read()]
    assert operator["by"] == entry["source"]
    assert operator["wall"] == entry["wall"]
    search.release("fixed")
    board.feed(entry for _, entry in stream.read()[1:])
    assert board.snapshot()["breakers"][0]["operator"] is None


def test_the_boards_advice_knows_the_degraded_answers_served():
    """The page's findings say what the model was served instead, and ask for no fallback."""
    clock = FakeClock()
    stream = MemoryStream()
    breakers = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1_000, "enforce": "cooperative", "failure_threshold": 1},
            "search": {"read": {"degrade": ["omit"]}},
            "orders": {"read": {}},
        },
        clock=clock,
    )
    StreamPublisher(stream).attach(breakers)
    for name in ("search", "orders"):
        breaker = breakers.get(name, "read")
        with pytest.raises(Unavailable):
            breaker.call(fail)
        breaker.guard(lambda: "ok")()  # a re-call before the retry time
    board = Board()
    board.feed(entry for _, entry in stream.read())
    advice = {f["key"]: f["advice"] for f in board.snapshot()["findings"]}
    assert "it already has 1 degraded answer served (omit 1)" in advice["search:read"]
    assert "name a fallback" not in advice["search:read"]
    assert "name a fallback" in advice["orders:read"]


class MyAPIError(Exception):
    """An exception no classifier knows."""


def defaults_and_unknown(raised: int) -> MemoryStream:
    """A stream where ``search:read`` has a sheet row and ``weather`` runs on the sheet's
    defaults and raised ``MyAPIError`` (never counted) ``raised`` times."""

    def unknown() -> None:
        raise MyAPIError("no")

    stream = MemoryStream()
    registry = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative"},
            "search": {"read": {"owner": "catalog-team"}},
        }
    )
    StreamPublisher(stream).attach(registry)
    registry.get("search").call(lambda: "ok")
    weather = registry.get("weather")
    for _ in range(raised):
        with pytest.raises(MyAPIError):
            weather.call(unknown)
    return stream


def test_the_board_shows_breakers_on_the_defaults_and_unclassified_exceptions():
    """A row says when its breaker runs on the sheet's defaults (no row of its own), and
    counts, by type, the exceptions its classifier never counted."""
    stream = defaults_and_unknown(3)
    board = Board()
    board.feed(entry for _, entry in stream.read())
    assert board.breakers["weather"]["on_defaults"] is True
    assert board.breakers["weather"]["unclassified"] == {"MyAPIError": 3}
    assert board.breakers["search:read"]["on_defaults"] is False
    assert board.breakers["search:read"]["unclassified"] == {}
    rows = {row["key"]: row for row in board.snapshot()["breakers"]}
    assert rows["weather"]["on_defaults"] is True
    assert rows["weather"]["unclassified"] == {"MyAPIError": 3}


# -- a policy is named by its sheet, or by what it does (issue 34, item 11) -----------------


def test_a_policy_is_named_by_its_sheet_or_by_what_it_does(tmp_path):
    """The board names a breaker's policy by the sheet its row came from (the file, or the
    published sheet and its revision), or by what it does for one made in code; the
    version hash stays beside it, for the tooltip."""
    from toolbreaker import publish_policy
    from toolbreaker.cli._board import Board, policy_label
    from toolbreaker.instrumentation.stream import iter_entries
    from toolbreaker.stores import SQLiteStore

    text = (
        "[defaults]\ntimeout_ms = 5000\nenforce = 'cooperative'\n"
        "[crm.read]\nfailure_threshold = 4\n"
    )
    sheet = tmp_path / "boundaries.toml"
    sheet.write_text(text, encoding="utf-8")
    stream = MemoryStream()
    publisher = StreamPublisher(stream)
    from_file = Registry.from_toml(sheet)
    publisher.attach(from_file)
    from_file.get("crm", "read").call(lambda: "ok")
    billing = tmp_path / "billing.toml"
    billing.write_text(text.replace("[crm.read]", "[billing.read]"), encoding="utf-8")
    store = SQLiteStore(tmp_path / "b.db")
    try:
        publish_policy(store, billing)
        published = Registry.from_store(store, follow=False)
        publisher.attach(published)
        published.get("billing", "read").call(lambda: "ok")
    finally:
        store.close()
    in_code = Registry(Policy(failure_threshold=3, cooldown_ms=20_000), default_timeout=1.0)
    publisher.attach(in_code)
    in_code.get("search").call(lambda: "ok")
    board = Board()
    board.feed(entry for _, entry in iter_entries(stream))
    rows = {row["key"]: row for row in board.snapshot(0)["breakers"]}
    assert rows["crm:read"]["policy"] == "boundaries.toml"
    assert rows["billing:read"]["policy"] == "default rev. 1"
    assert rows["search"]["policy"] == "3 failures · 20 s"
    assert all(len(row["policy_version"]) == 12 for row in rows.values())
    rate = Policy(failure_rate_permille=400, minimum_calls=4, window_calls=10, mode="shadow")
    assert policy_label(None, rate.to_dict()) == "40% of 10 calls · 20 s · shadow"
    assert policy_label(None, None) == ""
