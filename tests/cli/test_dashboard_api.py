"""The dashboard's board and HTTP API without a browser: folding, actions, the command."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from toolbreaker import Policy, Registry
from toolbreaker.cli import main
from toolbreaker.cli._dashboard import Board, build_app, store_actor
from toolbreaker.instrumentation.stream import (
    MemoryStream,
    SQLiteStream,
    StreamPublisher,
    iter_entries,
)
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import FakeClock

pytest.importorskip("starlette")
from starlette.testclient import TestClient

ORIGIN = "http://127.0.0.1"


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
    """--allow-actions on memory:// (another process's memory) is a usage error."""
    assert main(["dashboard", "--store", "memory://x", "--allow-actions"]) == 2
    assert "needs the breakers' store" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.slow
def test_the_command_serves_the_stream(tmp_path):
    """toolbreaker dashboard --store sqlite:///... serves the stream's breakers on loopback."""
    path = tmp_path / "events.db"
    stream = SQLiteStream(path)
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(stream).attach(breakers.get("search"))
    breakers.get("search").call(lambda: "ok")
    stream.close()
    port = _free_port()
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


def test_a_missing_extra_says_what_to_install(monkeypatch, capsys):
    """Without starlette/uvicorn the command prints the extra to install, exit 2."""
    import toolbreaker.cli._dashboard as dashboard

    def missing(module: str, extra: str):
        raise ImportError(
            f"this toolbreaker adapter needs {module!r}: pip install 'toolbreaker[{extra}]'"
        )

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
