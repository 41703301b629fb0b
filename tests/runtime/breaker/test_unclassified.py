"""Exceptions the classifier does not know: they never count, and that is never silent.

The seeds' rule holds: only evidence that another attempt is unsafe or wasteful counts
toward opening, so an exception the classifier does not know is ``ignored``. But a custom
``MyAPIError`` raised ten times must not leave a closed breaker and nothing else: each
breaker counts its unclassified exceptions by type (``stats.unclassified``), logs the
first of each type once, and Prometheus, the event stream (so the dashboard and
``toolbreaker advise``) carry them.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from toolbreaker import Breaker, Policy, Registry, scope
from toolbreaker.cli import main
from toolbreaker.instrumentation.stream import StreamPublisher, iter_entries, open_stream
from toolbreaker.testing import FakeClock


class MyAPIError(Exception):
    """A client library's own error: nothing in it says whether the service is down."""


class QuotaGone(Exception):
    pass


def fail(exc: type[Exception] = MyAPIError) -> None:
    raise exc("the API said no")


@pytest.mark.parametrize("enforce", ["cooperative", "thread"])
def test_ten_unknown_errors_leave_it_closed_and_are_counted_and_logged_once(enforce, caplog):
    """MyAPIError raised 10 times: still closed (the rule), 10 in stats.unclassified, one
    log line naming the type, the breaker and what to do; a second type, a second line."""
    breaker = Breaker("search", policy=Policy(failure_threshold=3), timeout=2.0, enforce=enforce)
    with caplog.at_level(logging.WARNING, logger="toolbreaker"):
        try:
            for _ in range(10):
                with pytest.raises(MyAPIError):
                    breaker.call(fail)
            with pytest.raises(QuotaGone):
                breaker.call(fail, QuotaGone)
        finally:
            breaker.close()  # its idle worker threads go
    assert breaker.state.phase == "closed"
    assert breaker.stats.unclassified == {"MyAPIError": 10, "QuotaGone": 1}
    assert breaker.stats.to_dict()["unclassified"] == {"MyAPIError": 10, "QuotaGone": 1}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "MyAPIError" in lines[0]
    assert "'search'" in lines[0]
    assert "classif" in lines[0]
    assert "QuotaGone" in lines[1]


def test_known_failures_and_other_ignored_outcomes_are_not_unclassified():
    """A timeout counts (a qualifying failure); a validation error or a 404 is ignored for a
    known reason: none of them is unclassified, and nothing is logged for them."""

    class NotFound(Exception):
        status_code = 404

    breaker = Breaker("search", timeout=2.0, enforce="cooperative")
    for exc in (TimeoutError, NotFound, ConnectionRefusedError):
        with pytest.raises(exc):
            breaker.call(fail, exc)
    assert breaker.stats.unclassified == {}
    assert "unclassified" not in breaker.stats.to_dict()


def test_the_guard_decorator_and_the_two_step_api_count_them_too():
    """Every path that settles an outcome counts it: the decorator (which hands the model
    an error result) and begin/failed."""
    breaker = Breaker("search", timeout=2.0, enforce="cooperative")
    tool = breaker.guard(lambda q: fail())
    assert tool("x")["ok"] is False
    step = breaker.begin("search", {"q": "x"})
    step.failed(MyAPIError("no"))
    assert breaker.stats.unclassified == {"MyAPIError": 2}


def test_a_scoped_rows_count_sums_its_tenants():
    """A scoped row's family_stats sums each tenant breaker's unclassified counts."""
    registry = Registry(default_timeout=2.0, default_enforce="cooperative")
    llm = registry.get("llm", scope="tenant")
    for tenant in ("acme", "globex"):
        with scope(tenant=tenant), pytest.raises(MyAPIError):
            llm.call(fail)
    assert llm.family_stats().unclassified == {"MyAPIError": 2}


def test_the_stream_carries_them_and_advise_says_classify_it(capsys):
    """Each unclassified outcome reaches the event stream with its class; advise counts them
    per breaker and type and says: MyAPIError was raised 10 times by search and never
    counted: classify it."""
    clock = FakeClock()
    stream = open_stream(f"memory://unclassified-{uuid.uuid4().hex}")
    registry = Registry(clock=clock, default_timeout=2.0, default_enforce="cooperative")
    StreamPublisher(stream).attach(registry)
    search = registry.get("search")
    for _ in range(10):
        with pytest.raises(MyAPIError):
            search.call(fail)
        clock.advance(1_000)
    records = [e for _, e in iter_entries(stream) if e["record"]["event"]["type"] == "ignored"]
    classes = [e.get("class") for e in records]
    assert classes == ["unknown-exception:MyAPIError"] * 10

    assert main(["advise", "--store", stream.url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (signals,) = doc["signals"]
    assert signals["unclassified"] == {"MyAPIError": 10}
    (finding,) = [f for f in doc["findings"] if f["rule"] == "unclassified"]
    assert finding["key"] == "search"
    assert main(["advise", "--store", stream.url]) == 0
    out = capsys.readouterr().out
    assert "`MyAPIError` was raised 10 times by search and never counted" in out
    assert "classify it" in out


WORKER = textwrap.dedent(
    """
    import sys
    from toolbreaker import Breaker
    from toolbreaker.instrumentation.stream import StreamPublisher, open_stream
    from toolbreaker.stores import SQLiteStore

    class MyAPIError(Exception):
        pass

    def fail():
        raise MyAPIError("no")

    store = SQLiteStore(sys.argv[1])
    breaker = Breaker("search", store=store, timeout=2.0, enforce="cooperative")
    StreamPublisher(open_stream(sys.argv[2])).attach(breaker)
    for _ in range(5):
        try:
            breaker.call(fail)
        except MyAPIError:
            pass
    print(breaker.stats.unclassified["MyAPIError"], breaker.state.phase)
    """
)


@pytest.mark.slow
def test_processes_sharing_a_breaker_count_in_stats_each_and_in_the_stream_together(
    tmp_path: Path, capsys
):
    """Two processes share one breaker (SQLite store) and one stream: each one's stats count
    its own 5 (per process), the stream holds all 10, and advise reads 10 (every process
    that publishes). The breaker stays closed."""
    store, events = tmp_path / "breakers.db", tmp_path / "events.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    outs = [
        subprocess.run(
            [sys.executable, "-c", WORKER, str(store), f"sqlite://{events}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        ).stdout.split()
        for _ in range(2)
    ]
    assert outs == [["5", "closed"], ["5", "closed"]]
    assert main(["advise", "--store", f"sqlite://{events}", "--json"]) == 0
    (signals,) = json.loads(capsys.readouterr().out)["signals"]
    assert signals["unclassified"] == {"MyAPIError": 10}
