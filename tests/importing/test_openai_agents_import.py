"""The OpenAI Agents SDK's trace export of a real run, as a recorded run.

The run is the SDK's own: a Runner, an Agent with function tools (one raises), and the
SDK's ``ScriptedModel`` inside a model whose generation span names the model and its
usage (as the SDK's own model implementations record them). A tracing processor keeps
``trace.export()`` and ``span.export()``, the items the SDK's exporter sends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from agents_trace_parts import Collector


from toolbreaker.cli import main
from toolbreaker.errors import TraceError
from toolbreaker.importing import import_runs

needs("agents", reason="the openai-agents extra is not installed")
frameworks_imported = imported(
    "agents", "agents.testing", "agents.tracing", "agents.usage", "agents_trace_parts"
)


@pytest.fixture
def collector():
    from agents import set_tracing_disabled
    from agents.tracing import set_trace_processors
    from agents_trace_parts import Collector

    found = Collector()
    set_trace_processors([found])
    set_tracing_disabled(False)
    yield found
    set_tracing_disabled(True)
    set_trace_processors([])


def exported_run(collector: Collector, tmp_path: Path) -> Path:
    from agents import Agent, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.usage import Usage
    from agents_trace_parts import TracedModel, lookup, refund

    usage = Usage(requests=1, input_tokens=700, output_tokens=30, total_tokens=730)
    script = ScriptedModel(
        [
            {"output": [function_call("lookup", {"order": "A-1"}, call_id="c1")], "usage": usage},
            {"output": [function_call("refund", {"order": "A-1"}, call_id="c2")], "usage": usage},
            {"output": [assistant_message("The refund failed.")], "usage": usage},
        ]
    )
    agent = Agent("support", model=TracedModel(script, "gpt-4o-mini"), tools=[lookup, refund])
    result = Runner.run_sync(agent, "refund order A-1")
    assert result.final_output == "The refund failed."
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"data": collector.items}))
    return path


def test_a_runs_export_is_its_calls_and_model_steps(collector, tmp_path):
    """Each generation is a model step with its model and usage; each function span a
    call with its arguments and result; the tool that raised failed, with the class the
    export cannot name (and a warning that says so)."""
    [run] = import_runs("openai-agents", exported_run(collector, tmp_path))
    assert run.detail == {"workflow": "Agent workflow"}
    models = [s for s in run.steps if "tool" not in s]
    calls = [s for s in run.steps if "tool" in s]
    assert [(m["model"], m["input_tokens"], m["output_tokens"]) for m in models] == [
        ("gpt-4o-mini", 700, 30)
    ] * 3
    assert [(c["tool"], c["args"]) for c in calls] == [
        ("lookup", {"order": "A-1"}),
        ("refund", {"order": "A-1"}),
    ]
    # The SDK exports str() of what the tool returned: the result is that text.
    assert calls[0]["result"] == "{'order': 'A-1', 'status': 'shipped'}"
    assert (calls[1]["outcome"], calls[1]["error"]) == ("ignored", "unknown-exception:Exception")
    assert any("not its exception's class" in w for w in run.warnings)


def test_a_write_whose_failure_has_no_class_is_unknown(collector, tmp_path):
    """The export does not say how the refund failed: as a write, it may have been made,
    and check-run blocks the writes after it."""
    path = exported_run(collector, tmp_path)
    [run] = import_runs("openai-agents", path, risks={"refund": "irreversible"})
    refund_step = next(s for s in run.steps if s.get("tool") == "refund")
    assert refund_step["outcome"] == "unknown"
    out = tmp_path / "run.jsonl"
    assert (
        main(
            ["import", "openai-agents", str(path), "-o", str(out), "--risk", "refund=irreversible"]
        )
        == 0
    )
    assert main(["check-run", str(out)]) == 1


def test_json_lines_of_items_read_as_the_export_does(collector, tmp_path):
    """One item a line (a processor that appends to a file) is the same run."""
    path = exported_run(collector, tmp_path)
    items = json.loads(path.read_text())["data"]
    lines = tmp_path / "export.jsonl"
    lines.write_text("".join(json.dumps(item) + "\n" for item in items))
    assert (
        import_runs("openai-agents", lines)[0].steps == import_runs("openai-agents", path)[0].steps
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"data": 3}', "an export is a list of traces and spans"),
        ('[{"object": "trace.span", "trace_id": "t"}]', "a span without its trace_id or span_data"),
        (
            '[{"object": "trace.span", "trace_id": "t", "span_data": {}, "started_at": "noon"}]',
            "started_at is not an ISO time",
        ),
        (
            '[{"object": "trace.span", "trace_id": "t", "started_at": "2026-01-01T00:00:00",'
            ' "span_data": {"type": "function"}}]',
            "a function span without the tool's name",
        ),
    ],
)
def test_a_file_that_is_no_export_is_one_error_naming_it(tmp_path, capsys, text, message):
    """Not an export: a TraceError naming the file; the command prints one line, exit 2."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        import_runs("openai-agents", path)
    assert main(["import", "openai-agents", str(path), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: not the openai-agents format: ")
