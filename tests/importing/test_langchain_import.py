"""A LangGraph run's message history, as a recorded run.

The run is LangChain's own: ``create_agent`` with real tools (one raises a
``ToolException`` it handles, so the tool message is an error) and LangChain's
``GenericFakeChatModel``, taught to take tools, replying with tool calls, usage and its
model's name. The history is
dumped as users keep it: ``messages_to_dict``, and the LangGraph state serialised with
``dumpd``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage


from toolbreaker.cli import main
from toolbreaker.errors import TraceError
from toolbreaker.importing import import_runs

needs("langchain", reason="the langchain extra is not installed")
frameworks_imported = imported(
    "langchain.agents", "langchain_core.load", "langchain_core.messages", "langchain_trace_parts"
)


def reply(calls: list[dict[str, Any]], text: str = "") -> AIMessage:
    from langchain_core.messages import AIMessage

    return AIMessage(
        content=text,
        tool_calls=[{"name": c["name"], "args": c["args"], "id": c["id"]} for c in calls],
        usage_metadata={"input_tokens": 500, "output_tokens": 20, "total_tokens": 520},
        response_metadata={"model_name": "gpt-4o-mini"},
    )


def history() -> list[Any]:
    from langchain.agents import create_agent
    from langchain_trace_parts import ToolModel, lookup, refund

    model = ToolModel(
        messages=iter(
            [
                reply([{"name": "lookup", "args": {"order": "A-1"}, "id": "c1"}]),
                reply([{"name": "refund", "args": {"order": "A-1"}, "id": "c2"}]),
                reply([], "It was refunded already."),
            ]
        )
    )
    agent = create_agent(model, [lookup, refund])
    state = agent.invoke({"messages": [{"role": "user", "content": "refund A-1"}]})
    return list(state["messages"])


def check(run: Any) -> None:
    models = [s for s in run.steps if "tool" not in s]
    calls = [s for s in run.steps if "tool" in s]
    assert [(m["model"], m["input_tokens"], m["output_tokens"]) for m in models] == [
        ("gpt-4o-mini", 500, 20)
    ] * 3
    assert calls[0] == {
        "at": 0,
        "tool": "lookup",
        "args": {"order": "A-1"},
        "result": {"order": "A-1", "status": "shipped"},
    }
    assert (calls[1]["tool"], calls[1]["outcome"], calls[1]["error"]) == (
        "refund",
        "ignored",
        "unknown-exception:ToolReportedError",
    )


def test_a_langgraph_history_dumped_with_messages_to_dict(tmp_path):
    """Each AI message is a model step with its model and usage; each tool call a call,
    its tool message the result; the error message LangGraph wrote for the tool that
    raised is the tool's own refusal, as the LangChain adapter settles it."""
    from langchain_core.messages import messages_to_dict

    path = tmp_path / "history.json"
    path.write_text(json.dumps(messages_to_dict(history())))
    [run] = import_runs("langchain", path)
    check(run)
    assert run.name == "history"


def test_a_langgraph_state_serialised_with_dumpd(tmp_path):
    """The state with its messages in LangChain's serialisation reads the same."""
    from langchain_core.load import dumpd

    path = tmp_path / "state.json"
    path.write_text(json.dumps({"messages": [dumpd(m) for m in history()]}))
    [run] = import_runs("langchain", path)
    check(run)


def test_a_write_refused_so_may_be_made_again(tmp_path):
    """The refund LangGraph answered with an error made nothing: as a write it is
    ``ignored``, and check-run lets the run go on."""
    from langchain_core.messages import messages_to_dict

    path = tmp_path / "history.json"
    path.write_text(json.dumps(messages_to_dict(history())))
    out = tmp_path / "run.jsonl"
    assert (
        main(["import", "langchain", str(path), "-o", str(out), "--risk", "refund=irreversible"])
        == 0
    )
    assert '"outcome": "ignored"' in out.read_text()
    assert main(["check-run", str(out)]) == 0


def test_an_unanswered_call_is_left_out_with_a_warning(tmp_path):
    """A tool call with no tool message never ran: left out, and the warning says so."""
    from langchain_core.messages import messages_to_dict

    messages = messages_to_dict(history())[:-2]  # the refund's answer and after are gone
    path = tmp_path / "history.json"
    path.write_text(json.dumps(messages))
    [run] = import_runs("langchain", path)
    assert [s["tool"] for s in run.steps if "tool" in s] == ["lookup"]
    assert run.warnings == ("a tool call without a tool message is left out",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"state": []}', "a message history is a list of messages"),
        ("[3]", "message 1 is not an object"),
        ('[{"content": "hi"}]', "message 1 has no type"),
        ('[{"type": "ai", "tool_calls": [{"args": {}}]}]', "a tool call without a name"),
        ('[{"type": "ai", "tool_calls": [{"name": "t", "args": []}]}]', "are no object"),
    ],
)
def test_a_file_that_is_no_history_is_one_error_naming_it(tmp_path, capsys, text, message):
    """Not a message history: a TraceError naming the file; one line, exit 2."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        import_runs("langchain", path)
    assert main(["import", "langchain", str(path), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: not the langchain format: ")


def test_the_file_is_read_as_json(tmp_path: Path):
    """A history that is not JSON is named with the decoder's line."""
    path = tmp_path / "bad.json"
    path.write_text('[\n{"type": "ai",\n')
    with pytest.raises(TraceError, match=r"bad.json:3: malformed JSON"):
        import_runs("langchain", path)
