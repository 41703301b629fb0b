"""The shared event stream: bounded, read-only history in memory, SQLite and real Redis."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid

import pytest

from store_kinds import kinds
from stream_helpers import Unavailable, close_opened, closing, eventually, fail, opened  # noqa: F401 - close_opened is an autouse fixture
from toolbreaker import Budget, Policy, Registry, RunGuard, scope
from toolbreaker.cli import main
from toolbreaker.cli._observe import export_trace
from toolbreaker.core import read_trace, replay
from toolbreaker.core._breaker.history import record_of
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.instrumentation.stream import (
    MemoryStream,
    RedisStream,
    SQLiteStream,
    StreamPublisher,
    instructions_version,
    iter_entries,
    open_stream,
)
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import FakeClock, capture_transitions


class NotFound(Exception):
    status_code = 404


POLICY = Policy(failure_threshold=2, cooldown_ms=1_000)


def outage(breakers: Registry, clock: FakeClock, name: str = "search") -> None:
    """Two failures open the breaker, two re-calls are rejected, a probe closes it."""
    search = breakers.get(name)
    search.call(lambda: "ok")
    for _ in range(2):
        with pytest.raises(Unavailable):
            search.call(fail)
    for _ in range(2):
        search.guard(lambda: "ok")()  # rejected: the model called again too soon
    clock.advance(1_000)
    search.call(lambda: "ok")


@pytest.fixture(params=kinds(stream=True))
def stream_url(request, tmp_path):
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'events.db'}"
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        return f"{url}{'&' if '?' in url else '?'}prefix=tb_{uuid.uuid4().hex[:12]}"
    url = request.getfixturevalue("redis_url")
    return f"{url}?key=tb-test:{uuid.uuid4().hex}"


def test_every_transition_reaches_the_stream_with_policy_version_and_class(stream_url):
    """Each record the listener sees is one entry, with its key, policy version, reason
    and, for failures, the failure class."""
    clock = FakeClock()
    breakers = Registry(POLICY, clock=clock, default_timeout=1.0, default_enforce="cooperative")
    stream = opened(stream_url)
    publisher = StreamPublisher(stream)
    with capture_transitions(breakers.get("search")) as live:
        publisher.attach(breakers)
        outage(breakers, clock)
    entries = [entry for _, entry in iter_entries(stream)]
    assert [e["record"]["reason"] for e in entries] == [r.reason for r in live]
    assert {e["policy_version"] for e in entries} == {POLICY.version}
    assert [e.get("class") for e in entries if e["record"]["event"]["type"] == "failure"] == [
        "http-503",
        "http-503",
    ]
    assert [record_of(e) for e in entries] == [
        record_of({"kind": "transition", "key": r.dependency, "record": r.to_dict()}) for r in live
    ]
    assert publisher.appended == len(entries)
    assert publisher.append_errors == 0
    stream.close()


def test_export_replays_to_the_same_transitions(stream_url, tmp_path, capsys):
    """toolbreaker export writes a trace that replay turns into the live transitions."""
    clock = FakeClock()
    breakers = Registry(POLICY, clock=clock, default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(opened(stream_url)).attach(breakers.get("search"))
    with capture_transitions(breakers.get("search")) as live:
        outage(breakers, clock)
    out = tmp_path / "trace.jsonl"
    assert main(["export", "--store", stream_url, "--out", str(out)]) == 0
    assert "exported" in capsys.readouterr().err
    receipt = replay([event for _, event in read_trace(out)], POLICY)
    assert [t["reason"] for t in receipt["dependencies"]["search"]["transitions"]] == [
        r.reason for r in live
    ]
    assert main(["replay", str(out)]) == 0


def test_a_publisher_attached_to_a_registry_publishes_breakers_made_later(
    stream_url, tmp_path, capsys
):
    """docs/guide/watching.md's pattern: the publisher attaches to the registry before any
    breaker exists; what the breakers made later (a tenant's scoped one too) did reaches the
    stream, so export, replay and advise see it."""
    clock = FakeClock()
    breakers = Registry.from_dict(
        {
            "defaults": {
                "timeout_ms": 1000,
                "enforce": "cooperative",
                "failure_threshold": 2,
                "cooldown_ms": 1_000,
            },
            "orders": {"read": {"scope": "tenant", "degrade": ["omit"]}},
        },
        clock=clock,
    )
    stream = opened(stream_url)
    StreamPublisher(stream).attach(breakers)
    outage(breakers, clock)
    with scope(tenant="acme"):
        step = breakers.get("orders", "read").begin("orders", {"id": 1})
        assert step.answer is None
        step.succeeded({"id": 1})
    entries = [entry for _, entry in iter_entries(stream)]
    keys = {e.get("key") for e in entries if e["kind"] == "transition"}
    assert keys == {"search", "orders[tenant=acme]:read"}
    out = tmp_path / "trace.jsonl"
    assert main(["export", "--store", stream_url, "--out", str(out)]) == 0
    receipt = replay([event for _, event in read_trace(out)], POLICY)
    search = receipt["dependencies"]["search"]
    assert search["opens"] == 1
    assert search["local_rejections"] == 2
    capsys.readouterr()
    assert main(["advise", "--store", stream_url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(s["key"] for s in doc["signals"]) == ["orders[tenant=acme]:read", "search"]


def test_run_guard_stops_go_to_the_stream_masked(stream_url):
    """A run that stops appends its packet, with secrets masked."""
    stream = opened(stream_url)
    guard = RunGuard("task-1", budget=Budget(max_tool_calls=1))
    guard.tool("lookup")(lambda api_key: {"ok": True})
    StreamPublisher(stream).attach(guard)
    guard.call("lookup", {"api_key": "sk-live-abcdefghijklmnopqrstuvwx"})
    guard.call("lookup", {"api_key": "sk-live-abcdefghijklmnopqrstuvwx"})
    stops = [e for _, e in iter_entries(stream) if e["kind"] == "stop"]
    assert len(stops) == 1
    assert stops[0]["task"] == "task-1"
    text = json.dumps(stops[0])
    assert stops[0]["packet"]["condition"] != "running"
    assert "sk-live-abcdefghijklmnopqrstuvwx" not in text


def test_the_stream_is_bounded(tmp_path):
    """Memory keeps maxlen entries, SQLite keeps retain rows; the newest survive."""
    memory = MemoryStream(maxlen=3)
    sqlite = SQLiteStream(tmp_path / "e.db", retain=3)
    for n in range(10):
        memory.append({"n": n})
        sqlite.append({"n": n})
    assert [e["n"] for _, e in memory.read()] == [7, 8, 9]
    assert [e["n"] for _, e in sqlite.read()] == [7, 8, 9]
    cursor = sqlite.read()[0][0]
    assert [e["n"] for _, e in sqlite.read(cursor)] == [8, 9]
    sqlite.close()


def test_redis_stream_is_capped(redis_url):
    """XADD MAXLEN ~ keeps the stream near its cap, never unbounded."""
    stream = RedisStream(redis_url, key=f"tb-test:{uuid.uuid4().hex}", maxlen=100)
    for n in range(2_000):
        stream.append({"n": n})
    kept = [e["n"] for _, e in iter_entries(stream)]
    assert 100 <= len(kept) < 400
    assert kept[-1] == 1_999
    stream.close()


class Broken:
    url = "broken://"

    def append(self, entry):
        raise StoreUnavailable("down")


def test_a_failed_append_never_changes_an_outcome(caplog):
    """With the stream down every call behaves the same; the failures are counted."""
    clock = FakeClock()
    breakers = Registry(POLICY, clock=clock, default_timeout=1.0, default_enforce="cooperative")
    publisher = StreamPublisher(Broken())
    publisher.attach(breakers.get("search"))
    with (
        caplog.at_level(logging.WARNING, logger="toolbreaker"),
        capture_transitions(breakers.get("search")) as live,
    ):
        outage(breakers, clock)
    baseline_clock = FakeClock()
    baseline = Registry(
        POLICY, clock=baseline_clock, default_timeout=1.0, default_enforce="cooperative"
    )
    with capture_transitions(baseline.get("search")) as expected:
        outage(baseline, baseline_clock)
    assert [r.to_dict() for r in live] == [r.to_dict() for r in expected]
    assert publisher.append_errors == len(live)
    assert breakers.get("search").stats.listener_errors == 0
    assert len([r for r in caplog.records if "append failed" in r.message]) == 1


def test_a_down_redis_is_counted_not_raised(private_redis):
    """A Redis stream whose server stopped: appends fail, calls go on."""
    clock = FakeClock()
    breakers = Registry(POLICY, clock=clock, default_timeout=1.0, default_enforce="cooperative")
    publisher = StreamPublisher(opened(private_redis.url))
    publisher.attach(breakers.get("search"))
    private_redis.stop()
    assert breakers.get("search").call(lambda: "ok") == "ok"
    assert publisher.append_errors == 2


CHILD = """
import sys
from toolbreaker import Policy, Registry
from toolbreaker.instrumentation.stream import StreamPublisher, open_stream
from toolbreaker.stores import SQLiteStore

class Unavailable(Exception):
    status_code = 503

def fail():
    raise Unavailable

breakers = Registry(
    Policy(failure_threshold=2, cooldown_ms=60_000),
    store=SQLiteStore(sys.argv[1]),
    default_timeout=5.0,
    default_enforce="cooperative",
)
StreamPublisher(open_stream(sys.argv[2])).attach(breakers.get("search"))
try:
    breakers.get("search").call(fail)
except Unavailable:
    pass
"""


def test_processes_sharing_an_sqlite_store_export_one_trace(tmp_path):
    """Two processes on one SQLite store and one stream give one trace whose replay ends
    where the store is."""
    policy = Policy(failure_threshold=2, cooldown_ms=60_000)
    state, url = tmp_path / "state.db", f"sqlite://{tmp_path / 'events.db'}"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    subprocess.run([sys.executable, str(script), str(state), url], check=True, timeout=60)
    breakers = Registry(
        policy,
        store=closing(SQLiteStore(state)),
        default_timeout=5.0,
        default_enforce="cooperative",
    )
    StreamPublisher(opened(url)).attach(breakers.get("search"))
    with pytest.raises(Unavailable):
        breakers.get("search").call(fail)
    assert breakers.get("search").guard(lambda: "ok")()["tool_unavailable"]
    out = io.StringIO()
    assert export_trace((e for _, e in iter_entries(opened(url))), out) == (5, 0)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["type"] for e in events] == ["request", "failure"] * 2 + ["request"]
    sources = {e["source"] for _, e in iter_entries(opened(url))}
    assert len(sources) == 2
    receipt = replay([e for _, e in read_trace_text(out.getvalue(), tmp_path)], policy)
    assert receipt["dependencies"]["search"]["final_state"]["state"] == "open"
    assert receipt["dependencies"]["search"]["local_rejections"] == 1


def read_trace_text(text, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    return read_trace(path)


def test_export_filters_and_drops_orphan_outcomes():
    """--dependency keeps one dependency; an outcome whose request was cut off is dropped."""
    entries = [
        {"kind": "transition", "key": "a", "dependency": "a", "record": rec("a", "request", "c1")},
        {"kind": "transition", "key": "b", "dependency": "b", "record": rec("b", "success", "c0")},
        {"kind": "transition", "key": "a", "dependency": "a", "record": rec("a", "success", "c1")},
        {"kind": "stop", "task": "t"},
        {"kind": "transition", "garbage": True},
    ]
    out = io.StringIO()
    assert export_trace(entries, out) == (2, 1)
    out = io.StringIO()
    assert export_trace(entries, out, dependency="b") == (0, 1)


def test_an_empty_stream_is_never_an_all_clear(capsys, tmp_path):
    """No false all-clear: advise and export of a stream nothing was published to say
    that there was nothing to judge (and how to publish), never "no findings"; the same
    for an empty trace."""
    url = f"memory://{uuid.uuid4().hex}"
    opened(url)  # this process's own stream (another process's is refused)
    assert main(["advise", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "no findings" not in out
    assert f"{url} holds no breaker events" in out
    assert "StreamPublisher" in out
    assert main(["export", "--store", url]) == 0
    err = capsys.readouterr().err
    assert "exported 0 events" in err
    assert f"{url} holds no breaker events" in err
    empty = tmp_path / "trace.jsonl"
    empty.write_text("")
    assert main(["advise", str(empty)]) == 0
    out = capsys.readouterr().out
    assert "no findings" not in out
    assert f"{empty} holds no breaker events" in out
    # Entries, but none of them a transition: the same words, with what there was.
    opened(url).append({"kind": "stop", "task": "t", "wall": 0})
    assert main(["advise", "--store", url, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["signals"] == []
    assert f"{url} holds no breaker events (only 1 entries of other kinds)" in captured.err


def rec(key, kind, call):
    return {
        "event": {"type": kind, "at": 5, "call": call},
        "from": "closed",
        "to": "closed",
        "attempted": kind == "request",
        "rejected": False,
        "reason": "call-admitted" if kind == "request" else "success",
        "generation": 0,
        "open_until": None,
    }


@pytest.mark.parametrize(
    "url", ["ftp://x", "memory://x?maxlen=0", "sqlite://", "memory://y?color=red"]
)
def test_bad_stream_urls_are_one_line_errors(url, capsys):
    """A URL the stream cannot use is a usage error (exit 2), never a traceback."""
    with pytest.raises(PolicyError):
        open_stream(url)
    assert main(["export", "--store", url]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_since_filters_by_wall_time(capsys):
    """--since takes an age or an ISO time."""
    stream = opened("memory://since-test")
    stream.append({"kind": "transition", "wall": 0, "key": "a", "record": rec("a", "request", "x")})
    assert main(["export", "--store", "memory://since-test", "--since", "1h"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["export", "--store", "memory://since-test", "--since", "1970-01-01"]) == 0
    assert '"call": "x"' in capsys.readouterr().out
    assert main(["export", "--store", "memory://since-test", "--since", "yesterday"]) == 2


def test_advise_reads_the_stream(stream_url, capsys):
    """advise --store derives the findings from the shared stream, classes included."""
    clock = FakeClock()
    breakers = Registry(POLICY, clock=clock, default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(opened(stream_url)).attach(breakers.get("search"))
    outage(breakers, clock)
    assert main(["advise", "--store", stream_url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (signals,) = doc["signals"]
    assert signals["early_recalls"] == 2
    assert signals["failures_by_class"] == {"http-503": 2}
    assert "model-recalls" in [f["rule"] for f in doc["findings"]]
    (obeyed,) = doc["compliance"]
    assert (obeyed["tool"], obeyed["early_recalls"]) == ("search", 2)
    assert obeyed["instructions_version"] == instructions_version({})
    assert main(["advise", "--store", stream_url]) == 0
    assert "model compliance" in capsys.readouterr().out


def test_advise_knows_what_the_model_was_served_instead(stream_url, capsys):
    """advise --store: a breaker whose model was served degraded answers while it was
    open is not told to name a fallback (the advice says what it had); one that served
    nothing is."""
    clock = FakeClock()
    breakers = Registry.from_dict(
        {
            "defaults": {
                "timeout_ms": 1_000,
                "enforce": "cooperative",
                "failure_threshold": 2,
                "cooldown_ms": 1_000,
                "cooldown_max_ms": 1_000,
            },
            "search": {"default": {"degrade": ["omit"]}},
        },
        clock=clock,
    )
    publisher = StreamPublisher(opened(stream_url))
    publisher.attach(breakers)
    outage(breakers, clock)  # its two re-calls are answered "omit"
    outage(breakers, clock, "orders")  # plainly unavailable
    assert main(["advise", "--store", stream_url, "--json"]) == 0
    advice = {f["key"]: f["advice"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert "name a fallback" not in advice["search"]
    assert "it already has 2 degraded answers served (omit 2)" in advice["search"]
    assert "name a fallback" in advice["orders"]


def test_instruction_wordings_get_their_own_version():
    """Breakers whose models read other words carry another instructions version."""
    plain = Registry(default_timeout=1.0).get("a")
    reworded = Registry(default_timeout=1.0).get(
        "b", instructions={"open": "{tool} is down. Wait {seconds} s. Do not call it."}
    )
    assert instructions_version(plain.instructions) != instructions_version(reworded.instructions)
    assert instructions_version({}) == instructions_version(plain.instructions)


def test_the_dashboard_reads_and_acts_on_redis(redis_url):
    """Breakers on a Redis store publish to a Redis stream; the dashboard shows them and
    isolates through the same Redis, and every process's breaker sees it."""
    pytest.importorskip("starlette")
    from patient import patient_redis
    from starlette.testclient import TestClient

    from toolbreaker.cli._board import Board
    from toolbreaker.cli._dashboard import build_app, store_actor

    name = f"search-{uuid.uuid4().hex[:8]}"
    store = patient_redis(redis_url)  # the dashboard's actor uses the default prefix too
    url = f"{redis_url}?key=tb-test:{name}:events"
    breakers = Registry(POLICY, store=store, clock=store.clock, default_timeout=5.0)
    search = breakers.get(name, "read")
    StreamPublisher(opened(url)).attach(search)
    with pytest.raises(Unavailable):
        search.call(fail)
    stream, board = opened(url), Board()
    actor = closing(store_actor(url, board, stream))
    origin = "http://127.0.0.1"
    with TestClient(build_app(stream, actor=actor, token="t", board=board), base_url=origin) as c:
        doc = c.get("/api/snapshot").json()
        (row,) = doc["breakers"]
        # Below the threshold the failure changed nothing: a run of calls, by class.
        assert (row["key"], row["demand"], row["last"][0]["classes"]) == (
            search.key,
            1,
            {"http-503": 1},
        )
        headers = {"Origin": origin, "Content-Type": "application/json", "X-Toolbreaker-Token": "t"}
        body = {"key": search.key, "action": "isolate", "reason": "incident 9"}
        response = c.post("/api/action", content=json.dumps(body), headers=headers)
        assert response.status_code == 200, response.text
    assert eventually(lambda: search.state.isolated)
    assert search.guard(lambda: "ok")()["reason"] == "isolated"
    store.close()


def test_the_dashboard_reads_and_acts_on_postgres(postgres_url):
    """Breakers on a PostgreSQL store publish to the stream beside its tables (one URL
    for both); the dashboard shows them and isolates through the same database."""
    pytest.importorskip("starlette")
    from patient import patient_postgres
    from starlette.testclient import TestClient

    from toolbreaker.cli._board import Board
    from toolbreaker.cli._dashboard import build_app, store_actor

    prefix = f"tb_{uuid.uuid4().hex[:12]}"
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}prefix={prefix}"
    store = patient_postgres(postgres_url, prefix=prefix)
    breakers = Registry(POLICY, store=store, default_timeout=5.0)
    search = breakers.get("search", "read")
    StreamPublisher(opened(url)).attach(search)
    with pytest.raises(Unavailable):
        search.call(fail)
    stream, board = opened(url), Board()
    actor = closing(store_actor(url, board, stream))
    origin = "http://127.0.0.1"
    with TestClient(build_app(stream, actor=actor, token="t", board=board), base_url=origin) as c:
        (row,) = c.get("/api/snapshot").json()["breakers"]
        assert (row["key"], row["last"][0]["classes"]) == (search.key, {"http-503": 1})
        headers = {"Origin": origin, "Content-Type": "application/json", "X-Toolbreaker-Token": "t"}
        body = {"key": search.key, "action": "isolate", "reason": "incident 9"}
        response = c.post("/api/action", content=json.dumps(body), headers=headers)
        assert response.status_code == 200, response.text
    assert eventually(lambda: search.state.isolated)
    assert search.guard(lambda: "ok")()["reason"] == "isolated"
    store.close()


def test_a_postgres_database_without_a_stream_is_no_all_clear(postgres_url, capsys):
    """A reader never creates the stream's table: a database without one (and without the
    store's tables) is one line and exit 2; a bad prefix is a usage error."""
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}prefix=tb_{uuid.uuid4().hex[:12]}"
    with pytest.raises(StoreUnavailable, match="holds no event stream"):
        open_stream(url, create=False)
    for command in (["export", "--store", url], ["advise", "--store", url]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ")
        assert err.count("\n") == 1
    with pytest.raises(PolicyError, match="prefix"):
        open_stream(f"{postgres_url}{'&' if '?' in postgres_url else '?'}prefix=x;drop")


def test_stream_urls_never_show_a_password():
    """A Redis password stays out of the stream's url, its errors and the dashboard."""
    from toolbreaker.instrumentation.stream import masked_url

    assert masked_url("redis://:s3cret@cache:6379/0") == "redis://:***@cache:6379/0"
    assert masked_url("redis://app:s3cret@cache/0") == "redis://app:***@cache/0"
    assert masked_url("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"
    stream = RedisStream("redis://:s3cret@127.0.0.1:1/0")
    assert "s3cret" not in stream.url
    with pytest.raises(StoreUnavailable) as down:
        stream.append({"n": 1})
    assert "s3cret" not in str(down.value)
    stream.close()
    with pytest.raises(PolicyError) as bad:
        open_stream("redis://:s3cret@cache/0?colour=red")
    assert "s3cret" not in str(bad.value)


def test_export_keeps_durations_and_operator_reasons():
    """Fields the trace format carries (a success's duration, an operator's reason)
    survive the stream, so slow-call rules and isolations replay."""
    success = rec("a", "success", "c1")
    success["event"]["duration_ms"] = 250
    isolate = rec("a", "isolate", "operator")
    isolate["event"]["reason"] = "incident 4"
    entries = [
        {"kind": "transition", "key": "a", "record": rec("a", "request", "c1")},
        {"kind": "transition", "key": "a", "record": success},
        {"kind": "transition", "key": "a", "record": isolate},
    ]
    out = io.StringIO()
    assert export_trace(entries, out) == (3, 0)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[1]["duration_ms"] == 250
    assert lines[2]["reason"] == "incident 4"
