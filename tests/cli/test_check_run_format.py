"""check-run reads what real runs record: error classes, results that report a failure,
a per-call "changes state" mark, model steps with their usage; old files read as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolbreaker.cli import main


def write_run(tmp_path: Path, *steps: dict, name: str = "run.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    return str(path)


def budget_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "budget.toml"
    path.write_text(text)
    return str(path)


def test_failures_of_different_classes_do_not_add_up_to_a_tool_stop(tmp_path, capsys):
    """Each failure keeps its error class: a 503, a timeout and a reset connection are
    three kinds, so max_tool_failures = 2 (two of one kind) lets the run go on; every
    recorded failure used to read as a refused connection, and the third one stopped it."""
    run = write_run(
        tmp_path,
        *(
            {"at": i, "tool": "crm", "args": {"id": i}, "outcome": "failure", "error": error}
            for i, error in enumerate(["http-503", "timeout", "network:ECONNRESET"])
        ),
        {"at": 9, "tool": "crm", "args": {"id": 9}},
    )
    budget = budget_file(tmp_path, "max_tool_failures = 2\n")
    assert main(["check-run", run, "--budget", budget]) == 0
    assert "TOOL-STOPPED" not in capsys.readouterr().out


def test_two_failures_of_one_class_stop_the_tool_and_name_the_class(tmp_path, capsys):
    """The second 503 of one tool is its max_tool_failures = 2: the next call of the tool
    is refused, for the class recorded (what check-run then exits with is the run's
    verdict, not this format's)."""
    run = write_run(
        tmp_path,
        *(
            {"at": i, "tool": "crm", "args": {"id": i}, "outcome": "failure", "error": "http-503"}
            for i in range(3)
        ),
    )
    budget = budget_file(tmp_path, "max_tool_failures = 2\n")
    main(["check-run", run, "--budget", budget])
    refused = capsys.readouterr().out.splitlines()[3]
    assert "TOOL-STOPPED" in refused
    assert "class http-503" in refused


def test_an_old_file_reads_every_failure_as_a_refused_connection(tmp_path, capsys):
    """A file written before ``error`` existed reads as it did: a failure is a refused
    connection, so two of them are one class."""
    run = write_run(
        tmp_path,
        *({"at": i, "tool": "crm", "args": {"id": i}, "outcome": "failure"} for i in range(3)),
    )
    budget = budget_file(tmp_path, "max_tool_failures = 2\n")
    main(["check-run", run, "--budget", budget])
    refused = capsys.readouterr().out.splitlines()[3]
    assert "TOOL-STOPPED" in refused
    assert "class network:ECONNREFUSED" in refused


def test_a_command_that_exited_non_zero_is_a_result_not_a_failure(tmp_path, capsys):
    """A shell command that ran and exited 1 returned a result that reports a failure:
    four of them never count against max_tool_failures = 1."""
    run = write_run(
        tmp_path,
        *(
            {
                "at": i,
                "tool": "bash",
                "args": {"command": f"pytest tests/test_{i}.py"},
                "result": {"returncode": 1, "output": f"{i} failed"},
                "result_error": "exit-1",
            }
            for i in range(4)
        ),
    )
    budget = budget_file(tmp_path, "max_tool_failures = 1\n")
    assert main(["check-run", run, "--budget", budget]) == 0
    out = capsys.readouterr().out
    assert out.count("allowed (success)") == 4


def test_a_write_whose_result_reports_a_failure_made_nothing(tmp_path, capsys):
    """A booking answered "Error: payment failed" was not made: the same booking again
    runs again (it is not answered from the journal as a confirmed write would be)."""
    booking = {
        "tool": "book",
        "args": {"flight": "HAT136", "pay": "gift_card_1"},
        "risk": "reversible_write",
        "business_key": ["flight", "pay"],
        "result": "Error: gift card balance is not enough",
        "result_error": "tool-error",
    }
    run = write_run(tmp_path, {"at": 0, **booking}, {"at": 5, **booking})
    assert main(["check-run", run]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "allowed (success)" in lines[1]
    assert "allowed (success, repeat 1)" in lines[2]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"outcome": "failure", "error": "http-404"}, "its outcome is ignored, not failure"),
        ({"outcome": "ignored", "error": "http-503"}, "its outcome is failure, not ignored"),
        (
            {"outcome": "failure", "error": "timeout", "risk": "reversible_write"},
            "may have been made: it is unknown",
        ),
        (
            {"outcome": "unknown", "error": "http-404", "risk": "reversible_write"},
            "certainly was not made: it is ignored, not unknown",
        ),
        ({"outcome": "failure", "error": "dns trouble"}, "error must be one of timeout"),
        ({"outcome": "success", "error": "timeout"}, "this one's outcome is success"),
        ({"outcome": "failure", "error": "unknown-exception:TimeoutError"}, ": timeout"),
        ({"result_error": "exit-0"}, "result_error must be one of exit-<N>"),
        ({"outcome": "failure", "result_error": "exit-2"}, "its outcome is success, not failure"),
        ({"changes_state": "yes"}, "changes_state must be true or false"),
        ({"model": "gpt-4o"}, "model belongs on a model step"),
    ],
)
def test_a_field_that_contradicts_the_step_is_one_line_naming_it(tmp_path, capsys, step, message):
    """An error class the classifier does not give, or one that contradicts the outcome
    (a 404 is no failure of the dependency, a write that timed out may have been made),
    and a field on the wrong kind of line: one line, the file and line, exit 2."""
    run = write_run(tmp_path, {"at": 0, "tool": "t", "args": {}}, {"at": 1, "tool": "t", **step})
    assert main(["check-run", run]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run}:2: ")
    assert message in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"input_tokens": 10}, "need the model they were spent on"),
        ({"model": "m", "output_tokens": -1}, "output_tokens must be a non-negative integer"),
        ({"model": " "}, "model must be a model's name"),
        ({"error": "timeout"}, "error belongs on a tool call"),
    ],
)
def test_a_bad_model_step_is_one_line_naming_it(tmp_path, capsys, step, message):
    """A model step's usage needs its model, counts of tokens, and no tool fields."""
    run = write_run(tmp_path, {"at": 0, **step})
    assert main(["check-run", run]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run}:1: ")
    assert message in err


def test_a_model_steps_recorded_cost_counts_without_a_price_table(tmp_path, capsys):
    """A model step with usage and a cost: with no price for its model, the recorded cost
    is what it spent, and it crosses max_cost."""
    run = write_run(
        tmp_path,
        {"at": 0, "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 100, "cost": "0.5"},
        {"at": 1, "tool": "search", "args": {"q": "x"}},
    )
    budget = budget_file(tmp_path, 'max_cost = "0.4"\n')
    assert main(["check-run", run, "--budget", budget]) == 1
    assert "STOP max-cost" in capsys.readouterr().out


def test_a_priced_model_step_costs_its_usage_not_its_recorded_cost(tmp_path, capsys):
    """With the budget's price for the model, the usage is priced (1,000 input and 100
    output tokens at $2 and $8 a million: $0.0028) and the recorded $0.50 is not spent
    again: the run completes under $0.40, and the counters carry the usage."""
    run = write_run(
        tmp_path,
        {"at": 0, "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 100, "cost": "0.5"},
        {"at": 1, "tool": "search", "args": {"q": "x"}},
    )
    budget = budget_file(
        tmp_path,
        'max_cost = "0.4"\n[prices."gpt-4o"]\ninput_per_million = "2"\noutput_per_million = "8"\n',
    )
    assert main(["check-run", run, "--budget", budget]) == 0
    counters = json.loads(capsys.readouterr().out.rsplit("budget: ", 1)[1])
    assert counters["cost"] == "0.0028"
    assert counters["usage"] == [
        {
            "model": "gpt-4o",
            "input_tokens": 1000,
            "output_tokens": 100,
            "requests": 1,
            "cost": "0.0028",
        }
    ]


def test_a_call_marked_as_changing_state_is_read(tmp_path, capsys):
    """``changes_state`` is a per-call mark (an edit through a generic shell tool): the
    file reads, and a tool whose calls differ in it is still one tool."""
    run = write_run(
        tmp_path,
        {"at": 0, "tool": "bash", "args": {"command": "sed -i s/a/b/ f.py"}, "changes_state": True},
        {"at": 1, "tool": "bash", "args": {"command": "cat f.py"}, "changes_state": False},
    )
    assert main(["check-run", run]) == 0
    assert capsys.readouterr().out.count("allowed") == 2
