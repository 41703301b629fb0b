"""OTLP JSON of GenAI spans, made by the OpenTelemetry SDK, as recorded runs.

The spans are real: toolbreaker's own instrumentation around a live run guard, and tool
and model spans a program makes by the GenAI conventions with the SDK's tracer; the SDK's
OTLP encoder writes them as OTLP JSON (protobuf's JSON mapping: base64 ids, times as
text), and an export's hex spelling is read too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the opentelemetry extra is not installed")

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from toolbreaker import RunGuard
from toolbreaker.cli import main
from toolbreaker.errors import TraceError
from toolbreaker.importing import import_runs
from toolbreaker.instrumentation.opentelemetry import instrument


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def otlp_file(tmp_path: Path, exporter: InMemorySpanExporter, name: str = "spans.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(MessageToDict(encode_spans(exporter.get_finished_spans()))))
    return path


def test_spans_a_program_makes_by_the_conventions_become_its_run(tmp_path, spans):
    """A chat span with its usage is a model step; execute_tool spans with their opt-in
    arguments and results are calls; a failed one's error.type is read as the classifier
    reads that class (httpx's ConnectTimeout is a timeout, a 503 a failure)."""
    provider, exporter = spans
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent support"):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.usage.input_tokens": 1200,
                "gen_ai.usage.output_tokens": 40,
            },
        ):
            pass
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order"}
        with tracer.start_as_current_span("execute_tool lookup_order") as span:
            span.set_attributes(
                {
                    **tool,
                    "gen_ai.tool.call.arguments": '{"order": "A-1"}',
                    "gen_ai.tool.call.result": '{"status": "shipped"}',
                }
            )
        for error_type in ("httpx.ConnectTimeout", "503", "KeyError"):
            with tracer.start_as_current_span("execute_tool lookup_order") as span:
                span.set_attributes(
                    {
                        **tool,
                        "gen_ai.tool.call.arguments": '{"order": "A-2"}',
                        "error.type": error_type,
                    }
                )
                span.set_status(Status(StatusCode.ERROR))
    [run] = import_runs("otel", otlp_file(tmp_path, exporter))
    model, ok, timed_out, unavailable, raised = run.steps
    assert {k: v for k, v in model.items() if k != "at"} == {
        "model": "gpt-4o-2024-08-06",
        "input_tokens": 1200,
        "output_tokens": 40,
    }
    assert ok["tool"] == "lookup_order"
    assert ok["args"] == {"order": "A-1"}
    assert ok["result"] == {"status": "shipped"}
    assert (timed_out["outcome"], timed_out["error"]) == ("failure", "timeout")
    assert (unavailable["outcome"], unavailable["error"]) == ("failure", "http-503")
    assert (raised["outcome"], raised["error"]) == ("ignored", "unknown-exception:KeyError")
    assert run.warnings == ()
    assert [step["at"] for step in run.steps] == sorted(step["at"] for step in run.steps)


def test_a_write_that_failed_so_it_may_have_been_made_is_unknown(tmp_path, spans):
    """With ``--risk``'s class, a write whose span says it timed out has an unknown
    outcome, as the guard would settle it."""
    provider, exporter = spans
    with provider.get_tracer("agent").start_as_current_span("execute_tool refund") as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "refund",
                "gen_ai.tool.call.arguments": '{"order": "A-1"}',
                "error.type": "TimeoutError",
            }
        )
        span.set_status(Status(StatusCode.ERROR))
    [run] = import_runs("otel", otlp_file(tmp_path, exporter), risks={"refund": "irreversible"})
    [call] = run.steps
    assert (call["risk"], call["outcome"], call["error"]) == ("irreversible", "unknown", "timeout")


def test_toolbreakers_own_spans_import_and_say_what_they_lack(tmp_path, spans, capsys):
    """toolbreaker's instrumentation records no arguments or results (they may hold
    secrets): the run imports, each call of a tool reads as the same action, and the
    warnings say so; a failure keeps its class (a refused connection). The calls are in
    one trace (the agent's span around them), so they are one run."""
    provider, exporter = spans
    guard = RunGuard("t-otel")
    instrument(guard, tracer_provider=provider)

    @guard.tool()
    def search(q: str) -> dict:
        return {"hits": [q]}

    @guard.tool()
    def crm(customer: str) -> dict:
        raise ConnectionRefusedError(111, "refused")

    with provider.get_tracer("agent").start_as_current_span("invoke_agent support"):
        search(q="lamp")
        crm(customer="c-1")
    path = otlp_file(tmp_path, exporter)
    [run] = import_runs("otel", path)
    assert [(s["tool"], s["args"], s.get("outcome", "success")) for s in run.steps] == [
        ("search", {}, "success"),
        ("crm", {}, "failure"),
    ]
    assert run.steps[1]["error"] == "network:ECONNREFUSED"
    assert any("gen_ai.tool.call.arguments" in w for w in run.warnings)
    assert any("gen_ai.tool.call.result" in w for w in run.warnings)
    out = tmp_path / "run.jsonl"
    assert main(["import", "otel", str(path), "-o", str(out)]) == 0
    assert "warning: " in capsys.readouterr().err
    assert main(["check-run", str(out)]) == 0


def test_json_lines_of_exports_with_hex_ids_are_one_run_a_trace(tmp_path, spans):
    """The collector's file exporter writes one request a line with hex ids: each trace
    is one run, whichever line its spans are on."""
    provider, exporter = spans
    tracer = provider.get_tracer("agent")
    for name in ("first", "second"):
        with (
            tracer.start_as_current_span(f"invoke_agent {name}"),
            tracer.start_as_current_span("execute_tool t") as span,
        ):
            span.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.arguments": "{}",
                    "gen_ai.tool.call.result": "ok",
                }
            )
    lines = []
    for span in exporter.get_finished_spans():
        request = MessageToDict(encode_spans([span]))
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for item in scope["spans"]:
                    item["traceId"] = f"{span.context.trace_id:032x}"
        lines.append(json.dumps(request))
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n")
    runs = import_runs("otel", path)
    assert sorted(run.steps[0]["tool"] for run in runs) == ["first", "second"]
    assert all(len(run.name) == 32 for run in runs)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"resourceSpans": 3}', "an OTLP export has resourceSpans"),
        ('{"spans": []}', "an OTLP export has resourceSpans"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab"}]}]}]}',
            "startTimeUnixNano",
        ),
        ('{"resourceSpans": [', "malformed JSON"),
        ("", "the file is empty"),
    ],
)
def test_a_file_that_is_no_otlp_export_is_one_error_naming_it(tmp_path, capsys, text, message):
    """Not OTLP JSON: a TraceError naming the file; the command prints one line, exit 2."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        import_runs("otel", path)
    assert main(["import", "otel", str(path), "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}")
    assert len(err.splitlines()) == 1


def test_a_bad_line_of_json_lines_is_named(tmp_path):
    """In JSON Lines, the error names the line."""
    path = tmp_path / "spans.jsonl"
    path.write_text('{"resourceSpans": []}\n{"resourceSpans": 7}\n')
    with pytest.raises(TraceError, match=r"spans.jsonl: not the otel format: line 2: "):
        import_runs("otel", path)
