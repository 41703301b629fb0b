"""toolbreaker import: files of a format in, recorded runs out, nothing overwritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolbreaker.cli import main


def tau_file(tmp_path: Path, *rewards: float) -> Path:
    runs: list[dict[str, Any]] = []
    for trial, reward in enumerate(rewards):
        call = {
            "id": "c",
            "function": {"name": "get_user_details", "arguments": '{"user_id": "u"}'},
        }
        traj = [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "name": "get_user_details", "content": "{}"},
        ]
        runs.append({"task_id": 1, "trial": trial, "reward": reward, "traj": traj})
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(runs))
    return path


def test_runs_go_to_a_directory_with_their_index(tmp_path, capsys):
    """Each run is NAME.jsonl and a line of runs.jsonl (its file, source, outcome,
    detail and warnings); each is one line on stdout."""
    out = tmp_path / "runs"
    assert main(["import", "tau-bench", str(tau_file(tmp_path, 1.0, 0.0)), "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"{out}/task-1-trial-0.jsonl: 2 steps, 1 tool calls, success",
        f"{out}/task-1-trial-1.jsonl: 2 steps, 1 tool calls, failure",
    ]
    index = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(i["file"], i["outcome"], i["detail"]["reward"]) for i in index] == [
        ("task-1-trial-0.jsonl", "success", 1.0),
        ("task-1-trial-1.jsonl", "failure", 0.0),
    ]
    assert main(["check-run", str(out / "task-1-trial-0.jsonl")]) == 0


def test_one_jsonl_file_takes_exactly_one_run(tmp_path, capsys):
    """``-o run.jsonl`` with two runs in the input is one error line, nothing written."""
    out = tmp_path / "run.jsonl"
    assert main(["import", "tau-bench", str(tau_file(tmp_path, 1.0, 0.0)), "-o", str(out)]) == 2
    assert "hold 2 runs: -o needs a directory" in capsys.readouterr().err
    assert not out.exists()


def test_nothing_is_overwritten(tmp_path, capsys):
    """A file the import would write exists already: one error line, nothing written."""
    out = tmp_path / "runs"
    out.mkdir()
    (out / "task-1-trial-1.jsonl").write_text("mine\n")
    assert main(["import", "tau-bench", str(tau_file(tmp_path, 1.0, 0.0)), "-o", str(out)]) == 2
    assert "would overwrite it" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["task-1-trial-1.jsonl"]
    assert (out / "task-1-trial-1.jsonl").read_text() == "mine\n"


def test_risk_names_a_tools_class(tmp_path):
    """``--risk TOOL=CLASS`` gives a tool the source does not describe its class."""
    out = tmp_path / "run.jsonl"
    path = tau_file(tmp_path, 1.0)
    assert (
        main(
            [
                "import",
                "tau-bench",
                str(path),
                "-o",
                str(out),
                "--risk",
                "get_user_details=reversible_write",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text().splitlines()[1])["risk"] == "reversible_write"


@pytest.mark.parametrize("risk", ["get_user_details", "=read", "t=dangerous"])
def test_a_bad_risk_is_one_error_line(tmp_path, capsys, risk):
    """A ``--risk`` that is not TOOL=CLASS of a known class: one line, exit 2."""
    out = tmp_path / "run.jsonl"
    assert (
        main(["import", "tau-bench", str(tau_file(tmp_path, 1.0)), "-o", str(out), "--risk", risk])
        == 2
    )
    assert "--risk takes TOOL=CLASS" in capsys.readouterr().err


def test_a_swe_bench_report_gives_each_run_its_outcome(tmp_path, capsys):
    """``--resolved``: the report's resolved instances succeeded, its unresolved failed,
    and runs it does not name keep no outcome."""
    runs = []
    for instance in ("a__a-1", "b__b-2", "c__c-3"):
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]
        path = tmp_path / f"{instance}.traj.json"
        path.write_text(json.dumps({"instance_id": instance, "messages": messages, "info": {}}))
        runs.append(str(path))
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"resolved_ids": ["a__a-1"], "unresolved_ids": ["b__b-2"]}))
    out = tmp_path / "out"
    assert main(["import", "mini-swe-agent", *runs, "-o", str(out), "--resolved", str(report)]) == 0
    index = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(i["name"], i["outcome"]) for i in index] == [
        ("a__a-1", "success"),
        ("b__b-2", "failure"),
        ("c__c-3", None),
    ]


def test_a_report_that_is_none_is_one_error_line(tmp_path, capsys):
    """A --resolved file that is no SWE-bench report names itself."""
    report = tmp_path / "report.json"
    report.write_text('{"passed": 3}')
    out = tmp_path / "out"
    assert (
        main(
            [
                "import",
                "tau-bench",
                str(tau_file(tmp_path, 1.0)),
                "-o",
                str(out),
                "--resolved",
                str(report),
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"error: {report}: no SWE-bench report: it names no resolved instances\n"
    )


def test_a_missing_file_is_one_error_line(tmp_path, capsys):
    """An input that does not exist: one line naming it, exit 2."""
    missing = tmp_path / "nope.json"
    assert main(["import", "langchain", str(missing), "-o", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {missing}: ")
    assert len(err.splitlines()) == 1


def test_trim_must_be_positive(tmp_path, capsys):
    """``--trim 0`` keeps nothing: refused, one line."""
    out = tmp_path / "o.jsonl"
    assert (
        main(["import", "tau-bench", str(tau_file(tmp_path, 1.0)), "-o", str(out), "--trim", "0"])
        == 2
    )
    assert "--trim must be a positive number" in capsys.readouterr().err
