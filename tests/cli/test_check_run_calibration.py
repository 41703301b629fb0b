"""check-run on many runs with known outcomes: calibrating a budget (issue 33, item 6).

``toolbreaker check-run RUNS... --outcomes FILE`` prints, per condition, the successful
and the failed runs a budget stops and what it saves; ``--suggest --max-false-stops
RATE`` proposes the tightest budget under the rate and replays the runs under it. On
generated runs, and on real runs of a customer-service agent (tau-bench airline, in
``tau_bench_airline/``: see its README for the source and the conversion).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolbreaker.cli import main
from toolbreaker.cli._calibrate import budget_toml
from toolbreaker.core._run.budget import Budget, ClassLimits, ModelPrice

TAU = Path(__file__).parent / "tau_bench_airline"


def write(folder: Path, name: str, steps: list[dict], outcome: str | None) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    with (folder / "runs.jsonl").open("a") as index:
        index.write(json.dumps({"file": f"{name}.jsonl", "outcome": outcome}) + "\n")


def searches(n: int, cost: str = "0.01") -> list[dict]:
    return [
        {"at": i * 10, "tool": "search", "args": {"q": i}, "result": {"n": i}, "cost": cost}
        for i in range(n)
    ]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Five successful runs (3 to 12 calls) and three failed ones that go on (270 calls)."""
    folder = tmp_path / "runs"
    for n in (3, 5, 8, 10, 12):
        write(folder, f"ok-{n}", searches(n), "success")
    for i in range(3):
        write(folder, f"lost-{i}", searches(270), "failure")
    return folder


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by condition (the first table printed)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("condition"))
    found = {}
    for line in lines[start + 1 :]:
        if " runs stopped" in line:
            break
        cells = line.split()
        found[cells[0]] = cells[1:]
    return found


def test_the_table_counts_successful_and_failed_runs_per_condition(runs, capsys):
    """The default budget (250 tool calls) stops the three failed runs at their 251st
    call and no successful run; 20 calls and their cost saved in each."""
    assert main(["check-run", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "runs:   8 (5 successful, 3 failed)" in out
    assert rows(out)["max-tool-calls"] == ["stops", "the", "run", "0", "3", "60", "0.6"]
    assert "successful runs stopped or touched: 0 of 5 (0.0%)" in out
    assert "failed runs stopped or touched: 3 of 3 (100.0%)" in out


def test_a_budget_that_stops_a_successful_run_exits_1(runs, tmp_path, capsys):
    """A false stop is no all-clear: exit 1, and the successful run is counted."""
    budget = tmp_path / "tight.toml"
    budget.write_text("max_tool_calls = 9\n")
    assert main(["check-run", str(runs), "--budget", str(budget)]) == 1
    out = capsys.readouterr().out
    assert rows(out)["max-tool-calls"][3:5] == ["2", "3"]  # ok-10, ok-12; the three lost


def test_outcomes_file_names_runs_by_path_or_name(runs, tmp_path, capsys):
    """--outcomes: a run is matched by its path relative to the file, or by its name;
    a run it does not name is counted apart, of unknown outcome."""
    outcomes = tmp_path / "outcomes.jsonl"
    outcomes.write_text(
        json.dumps({"file": "runs/ok-3.jsonl", "outcome": "success"})
        + "\n"
        + json.dumps({"file": "lost-0.jsonl", "outcome": "failure"})
        + "\n"
    )
    files = [str(runs / "ok-3.jsonl"), str(runs / "lost-0.jsonl"), str(runs / "lost-1.jsonl")]
    assert main(["check-run", *files, "--outcomes", str(outcomes)]) == 1
    out = capsys.readouterr().out
    assert "runs:   3 (1 successful, 1 failed, 1 of unknown outcome)" in out
    assert rows(out)["max-tool-calls"][3:6] == ["0", "1", "1"]


def test_suggest_proposes_the_tightest_budget_and_replays_under_it(runs, tmp_path, capsys):
    """--suggest with a rate of 0: every successful run passes, the failed ones stop at
    their 13th call; the budget printed (and written with --to) loads back, and the table
    under it is a replay, not a prediction."""
    target = tmp_path / "suggested.toml"
    code = main(
        ["check-run", str(runs), "--suggest", "--max-false-stops", "0", "--to", str(target)]
    )
    assert code == 0
    out = capsys.readouterr().out
    suggested = Budget.from_toml(target)
    assert suggested.max_tool_calls == 12
    assert suggested.classes["read"].max_calls == 12
    assert suggested.max_cost == Budget.from_dict({"max_cost": "0.12"}).max_cost
    assert suggested.deadline_ms == 120
    under = out.split("under the suggested budget", 1)[1]
    assert "successful runs stopped or touched: 0 of 5" in under
    assert "failed runs stopped or touched: 3 of 3" in under
    assert "calls saved" in under
    assert budget_toml(suggested) == target.read_text()


def test_a_rate_lets_the_suggestion_stop_a_successful_run(runs, capsys):
    """A rate of one in five lets the search stop the longest successful run, and no
    more."""
    assert main(["check-run", str(runs), "--suggest", "--max-false-stops", "20%"]) == 0
    under = capsys.readouterr().out.split("under the suggested budget", 1)[1]
    assert "successful runs stopped or touched: 1 of 5 (20.0%)" in under


def test_real_customer_service_runs(tmp_path, capsys):
    """tau-bench airline (GPT-4o): the default budget stops no successful run and five
    failed ones (a fourth cancellation, loops while a payment kept failing); the tightest
    budget at a rate of 0 stops no successful run either, and six failed ones. The
    numbers are docs/guide/run-guard.md's."""
    assert main(["check-run", str(TAU)]) == 0
    out = capsys.readouterr().out
    assert "runs:   19 (10 successful, 9 failed)" in out
    table = rows(out)
    assert table["class-max-calls"][3:] == ["0", "2", "4", "0"]
    assert table["loop"][3:] == ["0", "3", "20", "0"]
    target = tmp_path / "airline.toml"
    args = ["check-run", str(TAU), "--suggest", "--max-false-stops", "0", "--to", str(target)]
    assert main(args) == 0
    under = capsys.readouterr().out.split("under the suggested budget", 1)[1]
    assert "successful runs stopped or touched: 0 of 10" in under
    assert "failed runs stopped or touched: 6 of 9" in under
    suggested = Budget.from_toml(target)
    assert (suggested.max_tool_calls, suggested.loop_cycles) == (13, 2)
    assert suggested.classes["read"] == ClassLimits(max_calls=12, max_repeats=0)
    assert suggested.classes["irreversible"].max_calls == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suggest"], "--suggest and --max-false-stops RATE go together"),
        (["--max-false-stops", "0.1"], "--suggest and --max-false-stops RATE go together"),
        (["--suggest", "--max-false-stops", "lots"], "a percentage (1%), got 'lots'"),
        (["--suggest", "--max-false-stops", "150%"], "from 0 to 1"),
        (["--to", "x.toml"], "--to writes the budget --suggest proposes"),
    ],
)
def test_bad_options_are_one_line_errors(runs, capsys, args, message):
    assert main(["check-run", str(runs), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert message in err


def test_bad_outcomes_and_empty_folders_are_one_line_errors(runs, tmp_path, capsys):
    """An outcomes line that is no such object, an outcome that is no outcome, a folder
    without runs, a --to that exists: one line naming the file, exit 2."""
    bad = tmp_path / "bad.jsonl"
    for text, message in (
        ('["ok-3.jsonl"]\n', '"file" and its "outcome"'),
        ('{"file": "ok-3.jsonl", "outcome": "won"}\n', "got 'won'"),
    ):
        bad.write_text(text)
        assert main(["check-run", str(runs), "--outcomes", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {bad}:1: ")
        assert message in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["check-run", str(empty), str(runs)]) == 2
    assert "holds no run" in capsys.readouterr().err
    taken = tmp_path / "taken.toml"
    taken.write_text("")
    args = ["check-run", str(runs), "--suggest", "--max-false-stops", "0", "--to", str(taken)]
    assert main(args) == 2
    assert "would overwrite it" in capsys.readouterr().err


def test_budget_toml_loads_back_equal(tmp_path):
    """The suggested budget is written as TOML that loads back to the same budget: costs
    as exact text, class limits in tables, prices by model."""
    budget = Budget(
        max_tool_calls=17,
        max_cost="0.35",
        deadline_ms=90_000,
        max_tool_failures=3,
        classes={"read": ClassLimits(max_calls=60, max_repeats=3, max_cost="0.2")},
        prices={"gpt-4o": ModelPrice(input_per_million="2.5", output_per_million="10")},
    )
    text = budget_toml(budget)
    assert 'max_cost = "0.35"' in text.splitlines()
    path = tmp_path / "budget.toml"
    path.write_text(text)
    assert Budget.from_toml(path) == budget
