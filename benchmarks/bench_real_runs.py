"""Which real agent runs would a budget stop: the successful ones, or the failed ones?

Every run of the real-runs corpus (public agent runs with a known outcome, converted by
``benchmarks/build_real_runs.py``; see ``benchmarks/real_runs.md``) is replayed through
the driver ``toolbreaker check-run`` uses (a live ``RunGuard`` whose tools end as
recorded), under each budget: the default ``Budget()`` and the documented
``examples/budget.toml``, plus any ``--budget FILE``. Per source and budget it prints:

- the successful runs stopped and the failed runs stopped (the run stopped: its next
  calls refused), and the runs of each whose calls were refused otherwise (a tool
  stopped, writes blocked);
- the calls saved (recorded calls the guard refused) and the cost saved (the recorded
  cost after a stop, model steps included, and of refused calls), on failed runs and on
  successful ones (there, a loss);
- the conditions that stopped runs, and how far into a successful run its stop came.

    python benchmarks/bench_real_runs.py                  # the corpus in ../shared/real-runs
    python benchmarks/bench_real_runs.py --corpus DIR --budget my-budget.toml
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from toolbreaker import Budget
from toolbreaker.runtime._run._recorded import RecordedRun
from toolbreaker.runtime._run._recorded_step import parse_step

ROOT = Path(__file__).resolve().parents[1]
#: Where the corpus lives: shared/ beside the repository, unless told otherwise.
DEFAULT_CORPUS = ROOT.parent / "shared" / "real-runs"
DOCUMENTED = ROOT / "examples" / "budget.toml"


@dataclass
class Tally:
    """What one budget did to one source's runs."""

    runs: Counter[str] = field(default_factory=Counter)
    stopped: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    calls_saved: Counter[str] = field(default_factory=Counter)
    cost: dict[str, Decimal] = field(
        default_factory=lambda: {"success": Decimal(0), "failure": Decimal(0)}
    )
    cost_saved: dict[str, Decimal] = field(
        default_factory=lambda: {"success": Decimal(0), "failure": Decimal(0)}
    )
    conditions: Counter[str] = field(default_factory=Counter)
    where: list[float] = field(default_factory=list)


def corpus(directory: Path) -> Iterator[tuple[str, list[dict]]]:
    """Each source of the corpus: its name and its runs."""
    files = sorted(directory.glob("*.jsonl.gz"))
    if not files:
        sys.exit(
            f"no corpus in {directory}: build it with benchmarks/build_real_runs.py "
            "(benchmarks/real_runs.md) or give --corpus DIR"
        )
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            yield path.name.removesuffix(".jsonl.gz"), [json.loads(line) for line in lines]


def replay(run: dict, budget: Budget, tally: Tally) -> None:
    """Replay one run and add what the budget did to it to ``tally``."""
    outcome = run["outcome"]
    steps = []
    last = None
    for data in run["steps"]:
        step = parse_step(data, last)
        last = step.at
        steps.append(step)
    recorded = RecordedRun(f"real-{run['run']}", budget)
    stop_at = None
    refused = 0
    saved = Decimal(0)
    for index, step in enumerate(steps):
        done = recorded.replay(step)
        cost = Decimal(str(step.cost)) if step.cost is not None else Decimal(0)
        tally.cost[outcome] += cost
        if step.tool is not None:
            tally.calls[outcome] += 1
        if stop_at is not None:
            saved += cost  # the agent would have ended at the stop: nothing after it is spent
            if done.decision is not None:
                refused += 1
            continue
        if done.decision is None:
            continue
        if not done.ran:
            refused += 1
            saved += cost
            if done.decision.verdict == "stopped":
                stop_at = index
                assert done.decision.stop is not None
                tally.conditions[done.decision.stop.condition] += 1
    tally.runs[outcome] += 1
    tally.calls_saved[outcome] += refused
    tally.cost_saved[outcome] += saved
    if stop_at is not None:
        tally.stopped[outcome] += 1
        if outcome == "success":
            tally.where.append(stop_at / len(steps))
    elif refused:
        tally.refused[outcome] += 1


def share(part: int, whole: int) -> str:
    return f"{part} ({100 * part / whole:.1f}%)" if whole else "0"


def money(amount: Decimal, whole: Decimal) -> str:
    if not whole:
        return "-"
    return f"${amount:.2f} of ${whole:.2f}"


def report(source: str, name: str, tally: Tally) -> str:
    ok, bad = tally.runs["success"], tally.runs["failure"]
    where = f"{statistics.median(tally.where):.0%}" if tally.where else "-"
    conditions = ", ".join(f"{c} {n}" for c, n in tally.conditions.most_common()) or "-"
    return (
        f"| {source} | {name} | {ok} / {bad} "
        f"| {share(tally.stopped['success'], ok)} | {share(tally.stopped['failure'], bad)} "
        f"| {tally.refused['success']} / {tally.refused['failure']} "
        f"| {tally.calls_saved['failure']} of {tally.calls['failure']} "
        f"/ {tally.calls_saved['success']} of {tally.calls['success']} "
        f"| {money(tally.cost_saved['failure'], tally.cost['failure'])} "
        f"/ {money(tally.cost_saved['success'], tally.cost['success'])} "
        f"| {where} | {conditions} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        type=Path,
        default=Path(os.environ.get("TOOLBREAKER_REAL_RUNS", DEFAULT_CORPUS)),
        help="the corpus directory (default: shared/real-runs beside the repository)",
    )
    parser.add_argument("--budget", action="append", default=[], type=Path, help="budget TOML")
    args = parser.parse_args(argv)
    budgets = [
        ("Budget()", Budget()),
        (f"{DOCUMENTED.relative_to(ROOT)}", Budget.from_toml(DOCUMENTED)),
    ]
    budgets += [(str(path), Budget.from_toml(path)) for path in args.budget]
    print(
        "| source | budget | runs ok / failed | ok runs stopped | failed runs stopped "
        "| ok / failed runs with calls refused, not stopped "
        "| calls saved: failed / ok runs | cost saved: failed / ok runs "
        "| median point of an ok run's stop | stops by condition |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for source, runs in corpus(args.corpus):
        for name, budget in budgets:
            tally = Tally()
            for run in runs:
                replay(run, budget, tally)
            print(report(source, name, tally), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
