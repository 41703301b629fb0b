"""The real-runs corpus reads as check-run reads, and the benchmark counts what it says.

The corpus is kept outside the repository (benchmarks/real_runs.md); the test that reads it
says where it looked when it is not there. The benchmark's counting runs on a small corpus
written here.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from toolbreaker import Budget
from toolbreaker.runtime._run._recorded_step import parse_step

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("TOOLBREAKER_REAL_RUNS", ROOT.parent / "shared" / "real-runs"))


def bench():
    spec = importlib.util.spec_from_file_location(
        "bench_real_runs", ROOT / "benchmarks" / "bench_real_runs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_run_of_the_corpus_has_an_outcome_and_lines_check_run_reads():
    """Each source holds hundreds of runs, each with its outcome; every line parses."""
    files = sorted(CORPUS.glob("*.jsonl.gz"))
    if not files:
        pytest.skip(f"the real-runs corpus is not in {CORPUS} (benchmarks/real_runs.md)")
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            runs = [json.loads(line) for line in lines]
        assert len(runs) >= 200, path
        assert {run["outcome"] for run in runs} == {"success", "failure"}, path
        for run in runs:
            last = None
            for line in run["steps"]:
                last = parse_step(line, last).at


def test_the_benchmark_counts_stops_calls_and_cost_saved():
    """A successful run that completes, and a failed one stopped by its fifth identical
    search (the first one's result was new evidence, so repeats 1 to 3 follow it): one
    failed run stopped, that call and the one after it saved, and the cost after the
    stop."""
    module = bench()
    same = {"tool": "search", "args": {"q": "x"}, "result": {"n": 1}}
    failed = {
        "run": "loops",
        "outcome": "failure",
        "steps": [
            *({"at": n, **same} for n in range(5)),
            {"at": 5, "cost": "0.25"},
            {"at": 6, "tool": "search", "args": {"q": "y"}},
        ],
    }
    ok = {"run": "fine", "outcome": "success", "steps": [{"at": 0, "cost": "1"}, {"at": 1, **same}]}
    tally = module.Tally()
    budget = Budget(max_repeats=2)
    for run in (ok, failed):
        module.replay(run, budget, tally)
    assert (tally.runs["success"], tally.runs["failure"]) == (1, 1)
    assert (tally.stopped["success"], tally.stopped["failure"]) == (0, 1)
    assert tally.conditions == {"repeated-action": 1}
    assert (tally.calls["failure"], tally.calls_saved["failure"]) == (6, 2)
    assert str(tally.cost_saved["failure"]) == "0.25"
    assert str(tally.cost["success"]) == "1"
