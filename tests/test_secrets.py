"""Issue 9 §5: no secret in anything a person or a model reads.

Every shape of ``tests/secrets_corpus.py`` (API keys of the major providers, bearer
tokens, JWTs, URL credentials, cloud keys, private keys, password fields), raw, escaped,
URL-encoded and nested, goes through every output: stop packets (object, str and JSON),
approval requests, model-facing results, check-run's output, the journal, logs and
metrics labels.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from secrets_corpus import SECRETS, leaks, nested, variants
from toolbreaker import Breaker, Budget, Policy, Registry, RunGuard
from toolbreaker.cli import main
from toolbreaker.runtime import StopPacket
from toolbreaker.runtime._run._guard import ActionRequest
from toolbreaker.stores import MemoryStore

#: A few forms of each shape: raw, after a newline in a repr, JSON, URL-encoded, nested.
FORMS = (0, 2, 5, 9)


def forms(secret: str) -> list[str]:
    every = variants(secret)
    return [every[i] for i in FORMS if i < len(every)]


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_stop_packets_hold_no_secret(name: str, secret: str) -> None:
    """A packet's fields, str(), repr() and JSON are masked when it is built."""
    for text in forms(secret):
        packet = StopPacket(
            task="t",
            condition="operator",
            detail=f"failed with {text}",
            confirmed=({"external_id": text, "result": nested(secret)[0]},),
            uncertain=(),
            attempted={"tool": "x", "args": text},
            counters={},
            next_safe_action="wait",
        )
        for output in (packet.detail, str(packet), repr(packet), packet.to_json()):
            assert not leaks(output, secret), (name, text)


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_model_results_approvals_journal_and_logs_hold_no_secret(
    name: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool whose arguments, exceptions and results carry the secret, run under a guard."""
    requests: list[ActionRequest] = []
    journal = MemoryStore()
    guard = RunGuard(f"t-{name}", journal=journal, budget=Budget(max_repeats=50))

    def approve(request: ActionRequest) -> bool:
        requests.append(request)
        return True

    @guard.tool(risk="irreversible", authorize=approve)
    def pay(note: str, idempotency_key: str) -> dict[str, Any]:
        # The tool's own result is its data for the model; its journal copy is masked.
        return {"ok": True, "echo": note, "deep": [nested(secret)[0]]}

    @guard.tool()
    def lookup(q: str) -> Any:
        raise PermissionError(f"denied for {q}")

    def noisy(_record: Any, _breaker: Breaker) -> None:
        raise RuntimeError(f"metrics down: {secret}")

    breaker = Breaker("svc", timeout=1.0, enforce="cooperative")
    breaker.add_listener(noisy)

    @breaker.guard
    def call_api(q: str) -> str:
        raise ConnectionResetError(f"reset talking with token {q}")

    with caplog.at_level(logging.DEBUG, logger="toolbreaker"):
        for text in forms(secret):
            pay(note=text)
            for output in (lookup(q=text), call_api(q=text)):
                assert not leaks(json.dumps(output, default=str), secret), (name, text)
    for request in requests:
        assert not leaks(repr(request.args), secret), name
    assert not leaks(journal.journal_entries(f"t-{name}"), secret), name
    assert not leaks(caplog.text, secret), name


@pytest.mark.parametrize(("name", "secret"), SECRETS[::5])
def test_check_run_output_holds_no_secret(
    name: str, secret: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-run prints tool names and stop details: masked."""
    tool = f"search {secret}"[:256]
    lines = [
        {"at": i, "tool": tool, "args": {"q": secret}, "result": {"same": 1}} for i in range(5)
    ]
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(x) + "\n" for x in lines))
    main(["check-run", str(run)])
    captured = capsys.readouterr()
    assert not leaks(captured.out + captured.err, secret), name


@pytest.mark.parametrize(("name", "secret"), SECRETS[::5])
def test_metrics_labels_hold_no_secret(name: str, secret: str) -> None:
    """Prometheus labels (dependency, operation, tool) are masked."""
    from prometheus_client import CollectorRegistry, generate_latest

    from toolbreaker.instrumentation.prometheus import register

    registry = Registry()
    registry.get(f"api-{secret}"[:200], tool=f"tool {secret}"[:200], timeout=1.0)
    target = CollectorRegistry()
    register(registry, target)
    assert not leaks(generate_latest(target).decode(), secret), name


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_an_operators_reason_is_masked_where_its_event_is_made(name: str, secret: str) -> None:
    """An isolation's reason rides in its record (call id and reason), the stored state
    and every receipt, trace and stream entry made from them: masked in the event."""
    breaker = Breaker("svc", timeout=1.0, enforce="cooperative")
    for text in forms(secret):
        for record in (breaker.isolate(f"paged: {text}"), breaker.force_close(text)):
            assert not leaks(record.to_dict(), secret), (name, text)
            assert not leaks(breaker.state.to_dict(), secret), (name, text)
        assert "[REDACTED]" in str(breaker.release(text).event.call)


#: The shapes of the slower end-to-end tests: every fifth, and issue 22's URL password.
SOME = [s for i, s in enumerate(SECRETS) if i % 5 == 0 or s[0] == "https-url-password"]


def _first_push(url: str) -> dict[str, Any]:
    """The first document ``/api/events`` pushes (the full snapshot)."""
    with urllib.request.urlopen(url + "api/events", timeout=20) as response:
        for raw in response:
            line = raw.decode()
            if line.startswith("data: "):
                pushed: dict[str, Any] = json.loads(line[len("data: ") :])
                return pushed
    raise AssertionError("the event stream closed before its first push")


@pytest.mark.parametrize(("name", "secret"), SOME)
def test_the_stream_and_the_dashboard_hold_no_secret(name: str, secret: str) -> None:
    """Issue 22: a run whose task id, tool name, breaker name and operator reason carry
    the secret goes through a real run guard and breaker, the event stream and a real
    dashboard server: no stream entry (transitions, the notice of a deferred call, the
    stop), nor the page, ``/api/snapshot``, ``/api/events`` or ``/api/breaker`` shows it,
    while the task and the tool are still there, masked."""
    from stream_helpers import Server
    from toolbreaker import GuardedTool
    from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher, iter_entries

    pytest.importorskip("starlette")
    stream = MemoryStream()
    registry = Registry(default_timeout=1.0, default_enforce="cooperative")
    tool = f"lookup {secret}"[:200]  # the registry's longest name
    crm = registry.get(f"crm {secret}"[:200], "read", tool=tool)
    task = f"refund {secret}"[:256]  # the longest task id
    guard = RunGuard(task, budget=Budget(max_tool_calls=2, max_calls_per_turn=1))
    guard.add_tool(GuardedTool(name=tool, fn=lambda id: {"id": id}, breaker=crm))
    StreamPublisher(stream).attach(registry, guard)
    guard.mark_turn(1)
    guard.call(tool, {"id": "1"})
    assert guard.call(tool, {"id": "2"})["deferred"] is True
    guard.mark_turn(2)
    guard.call(tool, {"id": "2"})
    guard.mark_turn(3)
    guard.call(tool, {"id": "3"})  # past max_tool_calls: the run stops
    crm.isolate(f"incident with {secret}")

    entries = [entry for _, entry in iter_entries(stream)]
    assert {e["kind"] for e in entries} == {"transition", "limit", "stop"}
    for entry in entries:
        assert not leaks(json.dumps(entry), secret), (name, entry["kind"])
    with Server(stream) as server:
        with urllib.request.urlopen(server.url, timeout=20) as response:
            page = response.read().decode()
        with urllib.request.urlopen(server.url + "api/snapshot", timeout=20) as response:
            snapshot = json.loads(response.read())
        pushed = _first_push(server.url)
        (row,) = snapshot["breakers"]
        query = urllib.parse.urlencode({"key": row["key"]})
        with urllib.request.urlopen(server.url + "api/breaker?" + query, timeout=20) as response:
            one = json.loads(response.read())
    for output in (page, snapshot, pushed, one):
        assert not leaks(output, secret), name
    (stop,) = snapshot["stops"]
    assert stop["task"].startswith("refund ")
    assert stop["task"] == stop["packet"]["task"]
    assert row["tool"].startswith("lookup ")
    assert one["last"][0]["reason"] == "isolated"


@pytest.mark.parametrize(("name", "secret"), SOME)
def test_trace_retry_and_notice_lines_hold_no_secret(
    name: str, secret: str, tmp_path: Path
) -> None:
    """Issue 22: the trace recorder's lines are masked where each is built. A breaker
    whose dependency, operation and tool carry the secret fails with it in its error
    message (a classifier keeps the message as the verdict's detail), retries, is
    isolated with it in the reason, and serves a run guard whose task id carries it: no
    trace line (dependency, call id, reason), retry line (dependency, operation, detail,
    decision) or notice (task, tool, breaker) shows it, and the trace still replays."""
    import io

    from toolbreaker import RetryPolicy, TraceRecorder, Verdict
    from toolbreaker.testing import FakeClock

    clock = FakeClock()
    tool = f"lookup {secret}"[:200]
    breaker = Breaker(
        f"crm {secret}"[:200],
        operation=f"read {secret}"[:200],
        tool=tool,
        timeout=1.0,
        enforce="cooperative",
        clock=clock,
        retry=RetryPolicy(max_attempts=3, base_ms=10, deadline_ms=60_000),
        classifier=lambda exc: Verdict("failure", detail=f"failed: {exc}"),
        sleep=lambda seconds: clock.advance(seconds=seconds),
    )

    def down() -> None:
        raise ConnectionResetError(f"reset by {secret}")

    guard = RunGuard(f"refund {secret}"[:256], budget=Budget(max_calls_per_turn=1), clock=clock)
    guard.tool(tool, breaker=breaker)(lambda id: {"id": id})
    trace, retries, notices = io.StringIO(), io.StringIO(), io.StringIO()
    with TraceRecorder(trace, retries=retries, notices=notices) as recorder:
        recorder.attach(breaker, guard)
        with pytest.raises(ConnectionResetError):
            breaker.call(down)
        guard.mark_turn(1)
        guard.call(tool, {"id": "1"})
        assert guard.call(tool, {"id": "2"})["deferred"] is True
        breaker.isolate(f"incident with {secret}")
    outputs = {"trace": trace, "retries": retries, "notices": notices}
    for what, out in outputs.items():
        assert out.getvalue(), what
        assert not leaks(out.getvalue(), secret), (name, what)
    path = tmp_path / "trace.jsonl"
    path.write_text(trace.getvalue(), encoding="utf-8")
    assert main(["replay", str(path)]) == 0


def _otel_outputs(registry: Registry, drive: Any) -> tuple[list[Any], list[Any]]:
    """Run ``drive()`` with ``registry`` instrumented through the real OpenTelemetry SDK:
    the finished spans and the ``toolbreaker.transitions`` data points."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from toolbreaker.instrumentation.opentelemetry import instrument

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    undo = instrument(
        registry,
        meter_provider=MeterProvider(metric_readers=[reader]),
        tracer_provider=tracer_provider,
    )
    try:
        with tracer_provider.get_tracer("test").start_as_current_span("agent turn"):
            drive()
    finally:
        undo()
        tracer_provider.shutdown()
    points = [
        point
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "toolbreaker.transitions"
        for point in metric.data.data_points
    ]
    return list(spans.get_finished_spans()), points


def _down() -> None:
    raise ConnectionResetError("reset")


def _span_texts(spans: list[Any]) -> list[Any]:
    """Every name, attribute and event of ``spans``, as data."""
    return [
        {
            "name": span.name,
            "attributes": dict(span.attributes or {}),
            "events": [(e.name, dict(e.attributes or {})) for e in span.events],
        }
        for span in spans
    ]


def test_a_breaker_named_after_a_url_with_a_password_is_masked_in_opentelemetry() -> None:
    """Issue 34 item 14, as the docs word it: the span attribute, the transition event
    and the metric labels read ``https://ops:[REDACTED]@crm.internal``."""
    registry = Registry(Policy(failure_threshold=1), default_enforce="cooperative")
    crm = registry.get("https://ops:s3cr3t@crm.internal", "read", timeout=1.0, tool="lookup")

    def drive() -> None:
        step = crm.begin("lookup", {"id": "1"}, call_id="call-1")
        step.failed(ConnectionResetError("reset"))

    spans, points = _otel_outputs(registry, drive)
    masked = "https://ops:[REDACTED]@crm.internal"
    (tool,) = [s for s in spans if s.name.startswith("execute_tool ")]
    assert tool.attributes["toolbreaker.dependency"] == masked
    events = [e for s in spans for e in s.events if e.name == "toolbreaker.transition"]
    assert events
    assert {e.attributes["toolbreaker.dependency"] for e in events} == {masked}
    assert points
    assert {p.attributes["toolbreaker.dependency"] for p in points} == {masked}
    assert not leaks(_span_texts(spans), "s3cr3t")
    assert not leaks([dict(p.attributes) for p in points], "s3cr3t")


@pytest.mark.parametrize(("name", "secret"), SOME)
def test_every_exporter_masks_a_breaker_whose_names_carry_a_secret(
    name: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One breaker whose dependency, operation and tool carry the secret, run through a
    run guard, failing, opening and rejecting: no OpenTelemetry span (its name, its
    attributes), transition event or metric label, no Prometheus label, no stream entry
    and no log line shows it."""
    from prometheus_client import CollectorRegistry, generate_latest

    from toolbreaker.instrumentation.prometheus import register
    from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher, iter_entries

    registry = Registry(Policy(failure_threshold=1), default_enforce="cooperative")
    tool = f"lookup {secret}"[:200]
    snapshot = f"snapshot {secret}"[:200]
    registry.get(f"cache {secret}"[:200], tool=snapshot, timeout=1.0)
    crm = registry.get(
        f"crm {secret}"[:200], f"read {secret}"[:200], tool=tool, timeout=1.0, fallback=snapshot
    )
    guard = RunGuard("t", budget=Budget(max_repeats=50))
    guard.tool(tool, breaker=crm)(lambda id: _down())
    stream = MemoryStream()
    StreamPublisher(stream).attach(registry, guard)
    target = CollectorRegistry()
    register(registry, target)

    def drive() -> None:
        for n in range(3):  # a failure opens it; the next calls are rejected
            guard.call(tool, {"id": str(n)})
        step = crm.begin(tool, {"id": "x"}, call_id="c-1")
        assert step.answer is not None

    with caplog.at_level(logging.DEBUG, logger="toolbreaker"):
        spans, points = _otel_outputs(registry, drive)
    assert [s for s in spans if s.name.startswith("execute_tool ")]
    assert points
    outputs = {
        "spans": _span_texts(spans),
        "metrics": [dict(p.attributes) for p in points],
        "prometheus": generate_latest(target).decode(),
        "stream": [entry for _, entry in iter_entries(stream)],
        "logs": caplog.text,
    }
    for what, output in outputs.items():
        assert not leaks(output, secret), (name, what)


@pytest.mark.parametrize(("name", "secret"), SOME)
def test_no_log_line_of_toolbreaker_can_show_a_secret(
    name: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every record of the ``toolbreaker`` logger is masked once, as it is made: its
    message and arguments (a breaker's key in a queue line), its traceback, whatever
    module logged it, so no log line can forget (the degradation queue logged a
    breaker's raw key)."""
    breaker = Breaker(
        f"crm {secret}"[:200],
        operation="write",
        tool="create_ticket",
        timeout=1.0,
        enforce="cooperative",
        degrade=["queue"],
    )

    @breaker.guard
    def create_ticket(title: str, idempotency_key: str) -> dict[str, Any]:
        return {"ok": True}

    with caplog.at_level(logging.DEBUG, logger="toolbreaker"):
        breaker.isolate("maintenance")
        assert create_ticket(title="refund", idempotency_key="k-1")["queued"] is True
        logger = logging.getLogger("toolbreaker")
        logger.info("toolbreaker: %s said %r", f"crm {secret}", {"token": secret})
        try:
            raise ConnectionResetError(f"reset by {secret}")
        except ConnectionResetError:
            logger.exception("toolbreaker: lost %s", secret)
    assert "queued" in caplog.text
    assert len(caplog.records) >= 3
    for record in caplog.records:
        assert not leaks(record.getMessage(), secret), name
    assert not leaks(caplog.text, secret), name


def test_no_exporter_reads_a_breakers_raw_names() -> None:
    """Every exporter (OpenTelemetry, Prometheus, the event stream) reads a breaker's
    names from ``breaker.shown``, masked once where the breaker was built, never the raw
    ``dependency``, ``operation``, ``tool``, ``key`` or ``fallback``: none can forget."""
    import ast

    import toolbreaker.instrumentation as package

    raw = {"dependency", "operation", "tool", "key", "fallback"}
    found: list[str] = []
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in raw
                and isinstance(node.value, ast.Name)
                and "breaker" in node.value.id
            ):
                found.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    assert found == []
