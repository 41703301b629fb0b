"""Agents' own trajectories as recorded runs: tau-bench, SWE-agent, mini-swe-agent.

Each importer runs on real files from its source, kept beside the real-runs corpus in
``shared/real-runs/samples/`` (public runs are data the project keeps outside its
repository: see benchmarks/real_runs.md; the tests that read them say so when they are
not there), and on small files written here in each format's shape, which always run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from toolbreaker.cli import main
from toolbreaker.errors import TraceError
from toolbreaker.importing import import_runs
from toolbreaker.importing._tau import RISKS as TAU_BENCH_RISKS
from toolbreaker.runtime._run._recorded_step import parse_step

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("TOOLBREAKER_REAL_RUNS", ROOT.parent / "shared" / "real-runs"))
SAMPLES = CORPUS / "samples"


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"the real-runs samples are not in {SAMPLES} (benchmarks/real_runs.md)")
    return path


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def loads(run: Any) -> None:
    """Every line of the run is one check-run reads."""
    last = None
    for line in run.steps:
        last = parse_step(line, last).at


# -- tau-bench ---------------------------------------------------------------------------


def tau_run(reward: float, answers: list[str]) -> dict[str, Any]:
    traj: list[dict[str, Any]] = [{"role": "system", "content": "policy"}]
    traj.append({"role": "user", "content": "book it"})
    for n, answer in enumerate(answers):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "book_reservation", "arguments": '{"flight": "HAT1"}'},
        }
        traj.append({"role": "assistant", "content": None, "tool_calls": [call]})
        traj.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{n}",
                "name": "book_reservation",
                "content": answer,
            }
        )
    traj.append({"role": "assistant", "content": "done"})
    return {"task_id": 7, "trial": 1, "reward": reward, "info": {}, "traj": traj}


def test_tau_bench_runs_keep_their_reward_risk_and_error_answers(tmp_path):
    """A run's reward is its outcome; a booking is a reversible write; the answer
    "Error: ..." is a result that reports a failure, not a failure of the dependency."""
    path = write(
        tmp_path, "t.json", [tau_run(1.0, ["{}"]), tau_run(0.0, ["Error: no seats", "{}"])]
    )
    first, second = import_runs("tau-bench", path)
    assert (first.name, first.outcome, first.detail["reward"]) == ("task-7-trial-1", "success", 1.0)
    assert second.outcome == "failure"
    assert second.name == "task-7-trial-1-2"  # the same task and trial twice in one file
    refused = next(s for s in second.steps if "tool" in s)
    assert refused == {
        "at": 0,
        "tool": "book_reservation",
        "args": {"flight": "HAT1"},
        "risk": "reversible_write",
        "result": "Error: no seats",
        "result_error": "tool-error",
    }
    assert sum(1 for s in second.steps if "tool" not in s) == 3  # every assistant turn


def test_a_booking_retried_after_an_error_answer_runs_again(tmp_path, capsys):
    """The refused booking made nothing: its retry runs (it is not answered from the
    journal), as the guard would let it."""
    path = write(tmp_path, "t.json", [tau_run(0.0, ["Error: payment failed", "{}"])])
    out = tmp_path / "run.jsonl"
    assert main(["import", "tau-bench", str(path), "-o", str(out)]) == 0
    assert main(["check-run", str(out)]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if "book_reservation" in r]
    assert ["allowed" in r for r in rows] == [True, True]


def test_tau_bench_real_runs(tmp_path):
    """Three real runs of tau-bench's gpt-4o airline trajectories: outcomes by reward,
    every line readable, the tools' risk classes from the table."""
    runs = import_runs("tau-bench", sample("tau-bench-airline-gpt-4o-3-runs.json"))
    assert [r.outcome for r in runs] == ["success", "failure", "failure"]
    for run in runs:
        loads(run)
        for step in run.steps:
            if "tool" in step:
                assert step.get("risk", "read") == TAU_BENCH_RISKS.get(step["tool"], "read")
    assert any(s.get("result_error") == "tool-error" for s in runs[2].steps)


# -- mini-swe-agent --------------------------------------------------------------------------


def mini_message(role: str, content: str, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": content}
    if extra:
        message["extra"] = extra
    return message


def mini_trajectory() -> dict[str, Any]:
    """The v2 format's shape (``trajectory_format`` ``mini-swe-agent-1.1``)."""
    usage = {"prompt_tokens": 900, "completion_tokens": 30}
    return {
        "instance_id": "demo__demo-1",
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"exit_status": "Submitted", "config": {"model": {"model_name": "m-1"}}},
        "messages": [
            mini_message("system", "you are a coder"),
            mini_message("user", "fix the bug"),
            mini_message(
                "assistant",
                "run the tests\n\n```mswea_bash_command\npytest -q\n```",
                actions=[{"command": "pytest -q"}],
                cost=0.002,
                timestamp=1000.0,
                response={"usage": usage},
            ),
            mini_message(
                "user",
                "<returncode>1</returncode>\n<output>\n1 failed\n</output>",
                returncode=1,
                timestamp=1003.5,
            ),
            mini_message("assistant", "no command here", cost=0.001, timestamp=1004.0),
            mini_message("user", "Please always provide EXACTLY ONE action", timestamp=1004.1),
            mini_message(
                "assistant",
                "sleep\n\n```mswea_bash_command\nsleep 100\n```",
                actions=[{"command": "sleep 100"}],
                timestamp=1005.0,
            ),
            mini_message(
                "user",
                "The last command <command>sleep 100</command> timed out and has been killed.",
                timestamp=1065.0,
            ),
        ],
    }


def test_mini_swe_agent_maps_commands_exit_statuses_and_model_turns(tmp_path):
    """A command is a call of bash; its exit status 1 a result that reports a failure; a
    reply without a command a model step only; a command killed after its timeout a
    timeout; each model step with its usage and cost, at its time."""
    [run] = import_runs("mini-swe-agent", write(tmp_path, "demo.traj.json", mini_trajectory()))
    assert run.name == "demo__demo-1"
    assert run.detail == {"instance_id": "demo__demo-1", "exit_status": "Submitted"}
    assert run.steps == (
        {"at": 0, "model": "m-1", "input_tokens": 900, "output_tokens": 30, "cost": "0.002"},
        {
            "at": 3500,
            "tool": "bash",
            "args": {"command": "pytest -q"},
            "result": {"returncode": 1, "output": "<output>\n1 failed\n</output>"},
            "result_error": "exit-1",
        },
        {"at": 4000, "model": "m-1", "cost": "0.001"},
        {"at": 5000, "model": "m-1"},
        {
            "at": 65000,
            "tool": "bash",
            "args": {"command": "sleep 100"},
            "outcome": "failure",
            "error": "timeout",
        },
    )


FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("name", ["mini-text", "mini-toolcall"])
def test_mini_swe_agent_v2_runs_made_by_mini_swe_agent_itself(name):
    """mini-swe-agent 2.4.6's own agent, scripted model and local shell (fixtures/README.md):
    ``ls`` returned, ``test -f missing.txt`` exited 1 (a result, not a failure), ``sleep
    5`` outlived the shell's 1 s timeout; each reply is a model step with its cost."""
    [run] = import_runs("mini-swe-agent", FIXTURES / f"{name}.traj.json")
    loads(run)
    calls = [s for s in run.steps if "tool" in s]
    assert [c["args"]["command"] for c in calls][:3] == ["ls", "test -f missing.txt", "sleep 5"]
    assert calls[0]["result"]["returncode"] == 0
    assert calls[1]["result_error"] == "exit-1"
    assert (calls[2]["outcome"], calls[2]["error"]) == ("failure", "timeout")
    assert all(s.get("model") == "scripted" and "cost" in s for s in run.steps if "tool" not in s)
    # The scripted replies are stamped before the observations they follow.
    assert run.warnings[0].startswith("a step recorded before the step it follows")
    if name == "mini-text":
        assert run.detail["exit_status"] == "Submitted"
        # The submission command's output is in v2's exit message.
        assert calls[-1]["args"]["command"] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        assert sum(1 for s in run.steps if "tool" not in s) == 5  # a reply without a command too


def test_mini_swe_agent_real_run():
    """A real mini-swe-agent run (v1 format) from a public SWE-bench Verified run: every
    command is a bash call with its exit status, every reply a model step with the
    provider's usage and cost, the clock from the responses."""
    [run] = import_runs("mini-swe-agent", sample("mini-swe-agent-astropy__astropy-13453.traj.json"))
    loads(run)
    calls = [s for s in run.steps if "tool" in s]
    models = [s for s in run.steps if "tool" not in s]
    assert len(models) == 30  # its model_stats.api_calls
    assert all("input_tokens" in m and "cost" in m for m in models)
    assert calls[0]["args"] == {"command": "ls -la"}
    assert calls[0]["result"]["returncode"] == 0
    assert run.steps[-1]["at"] > 0
    assert run.warnings == ()


def test_trimmed_results_are_equal_exactly_when_the_whole_ones_are(tmp_path):
    """Trimming keeps a digest, the length, the head and the tail: the same output twice
    is the same trimmed result, a different one a different one."""
    data = mini_trajectory()
    long_a, long_b = "x" * 5000, "x" * 4999 + "y"
    messages = data["messages"][:2]
    for n, output in enumerate([long_a, long_b, long_a]):
        messages.append(
            mini_message("assistant", f"```mswea_bash_command\ncat f{n}\n```", timestamp=1000.0 + n)
        )
        messages.append(
            mini_message("user", f"<returncode>0</returncode>\n{output}", timestamp=1000.5 + n)
        )
    data["messages"] = messages
    [run] = import_runs("mini-swe-agent", write(tmp_path, "t.traj.json", data), trim=100)
    a, b, c = (s["result"]["output"] for s in run.steps if "tool" in s)
    assert a == c != b
    assert (a["length"], len(a["head"]), len(a["tail"])) == (5000, 50, 50)


# -- SWE-agent -------------------------------------------------------------------------------


def test_swe_agent_function_calls_and_their_state_changes(tmp_path):
    """With function calling, each step's tool call is the call; an editing command
    changes state, a viewing one does not, a shell command is left unmarked; the usage
    kept only in total is one model step at the end, with warnings."""
    calls = [
        ("str_replace_editor", {"command": "view", "path": "a.py"}),
        (
            "str_replace_editor",
            {"command": "str_replace", "path": "a.py", "old_str": "1", "new_str": "2"},
        ),
        ("bash", {"command": "python -m pytest"}),
    ]
    history = [{"role": "system", "content": "s"}]
    steps = []
    for n, (name, args) in enumerate(calls):
        call = {"id": f"c{n}", "function": {"name": name, "arguments": json.dumps(args)}}
        history.append({"role": "assistant", "content": "", "action": str(n), "tool_calls": [call]})
        history.append({"role": "tool", "content": f"out {n}"})
        steps.append({"action": str(n), "observation": f"out {n}", "thought": ""})
    data = {
        "trajectory": steps,
        "history": history,
        "info": {
            "exit_status": "submitted",
            "model_stats": {"instance_cost": 0.5, "tokens_sent": 9000, "tokens_received": 300},
        },
    }
    [run] = import_runs("swe-agent", write(tmp_path, "demo.traj", data))
    made = [s for s in run.steps if "tool" in s]
    assert [(s["tool"], s.get("changes_state")) for s in made] == [
        ("str_replace_editor", False),
        ("str_replace_editor", True),
        ("bash", None),
    ]
    assert run.steps[-1] == {"at": 0, "cost": "0.5"}
    assert run.name == "demo"
    assert len(run.warnings) == 2


def test_swe_agent_real_run():
    """A real SWE-agent run (gpt-4 on a SWE-bench instance, from SWE-agent's repository):
    each action is a bash call with the observation as its result; its edits change
    state."""
    [run] = import_runs("swe-agent", sample("swe-agent-pydicom__pydicom-1458.traj"))
    loads(run)
    calls = [s for s in run.steps if "tool" in s]
    assert len(calls) == 12
    assert calls[0]["args"] == {"command": "create reproduce_bug.py"}
    assert calls[0]["changes_state"] is True
    assert calls[-1]["args"] == {"command": "submit"}


# -- malformed files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "data", "message"),
    [
        ("tau-bench", [{"reward": 1}], "run 1: traj is missing or not a list"),
        ("tau-bench", [{"traj": [], "reward": "yes"}], "run 1: reward is missing or not a number"),
        (
            "tau-bench",
            [{"traj": [{"role": "tool", "content": "x"}], "reward": 0}],
            "a tool answer without a call",
        ),
        ("mini-swe-agent", {"info": {}}, "messages is missing or not a list"),
        ("mini-swe-agent", {"messages": [{"content": "x"}]}, "message 1: role is missing"),
        ("swe-agent", {"history": []}, "trajectory is missing or not a list"),
        ("swe-agent", {"trajectory": [{"observation": "x"}]}, "step 1: action is missing"),
    ],
)
def test_a_file_that_is_not_of_its_format_is_one_error_naming_it(
    tmp_path, capsys, fmt, data, message
):
    """What is wrong, naming the file (and the run, message or step): one line, exit 2."""
    path = write(tmp_path, "bad.json", data)
    with pytest.raises(TraceError, match=message):
        import_runs(fmt, path)
    assert main(["import", fmt, str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: not the {fmt} format: ")
    assert len(err.splitlines()) == 1
