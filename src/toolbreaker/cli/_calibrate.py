"""``toolbreaker check-run RUNS... --outcomes FILE [--suggest --max-false-stops RATE]``.

A budget calibrated on the user's own recorded runs. Each run is replayed through the
one run driver (a live guard whose tools end as recorded,
:mod:`toolbreaker.runtime._run._calibrate`); per condition, the table says how many
successful runs the budget would stop (or touch: block their writes, stop one of their
tools), how many failed runs, and the tool calls and cost of the failed runs it would
save. ``--suggest`` proposes the tightest budget under the rate of successful runs
stopped the user names (:func:`toolbreaker._tuning._budgets.suggest`), prints it as
budget TOML (``--to FILE`` writes it) and its own table, replayed: the numbers are the
live guard's, not a prediction.

Outcomes come from ``--outcomes FILE``: JSON Lines, one object a run with its ``file``
(a path relative to the outcomes file, or the run file's name) and its ``outcome``
(``success``, ``failure``, or ``null``: not known), the index ``toolbreaker import``
writes beside the runs it converts (``runs.jsonl``; other keys are ignored). A directory
given as a run stands for its ``*.jsonl`` runs, with its ``runs.jsonl`` as their outcomes
when ``--outcomes`` is not given. A run without an outcome is counted apart and never
calibrated on. Exit 1 when the budget stops (or touches) a successful run or one of
unknown outcome, else 0; bad input is one line, exit 2.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from toolbreaker._tuning._budgets import RunOutcome, Suggestion, suggest
from toolbreaker.core._files import iter_lines, loads_json, printable, shown
from toolbreaker.core._run._values import RISK_CLASSES, ZERO, decimal_text, exact_sum
from toolbreaker.core._run.budget import Budget
from toolbreaker.errors import PolicyError, ToolbreakerError, TraceError
from toolbreaker.runtime._run._calibrate import Judged, judge, measure
from toolbreaker.runtime._run._recorded import RecordedStep

__all__ = ["INDEX", "budget_toml", "calibrate", "false_stop_rate", "read_outcomes"]

#: The index of runs ``toolbreaker import`` writes into a directory: their outcomes.
INDEX: Final = "runs.jsonl"
_OUTCOMES: Final = ("success", "failure")
_RATE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")
_EFFECT_WORDS: Final = {
    "stopped": "stops the run",
    "writes-blocked": "blocks writes",
    "tool-stopped": "stops a tool",
}


def false_stop_rate(text: str) -> float:
    """``--max-false-stops``: a share from 0 to 1 (``0.01``) or a percentage (``1%``).

    Raises:
        PolicyError: anything else.
    """
    found = _RATE.match(text)
    value = None if found is None else float(found.group(1)) / (100 if found.group(2) else 1)
    if value is None or not 0 <= value <= 1:
        raise PolicyError(
            "--max-false-stops takes a share of successful runs from 0 to 1 (0.01) or a "
            f"percentage (1%), got {shown(text)}",
            field="max_false_stops",
        )
    return value


def read_outcomes(path: str) -> dict[Path, RunOutcome | None]:
    """The outcomes file: each run's resolved path and its outcome.

    Raises:
        TraceError: naming the file and line of a line that is not such an object.
    """
    found: dict[Path, RunOutcome | None] = {}
    base = Path(path).parent
    for number, raw in iter_lines(path, TraceError):
        if not raw.strip():
            continue
        data = loads_json(raw, TraceError, file=path, line=number)
        if not isinstance(data, dict) or not isinstance(data.get("file"), str):
            raise TraceError(
                'an outcome is an object with the run\'s "file" and its "outcome"',
                file=path,
                line=number,
            )
        outcome = data.get("outcome")
        if outcome is not None and outcome not in _OUTCOMES:
            raise TraceError(
                f"outcome must be success, failure or null, got {shown(outcome)}",
                file=path,
                line=number,
            )
        found[(base / data["file"]).resolve()] = outcome
    return found


def _runs(paths: Sequence[str], outcomes: str | None) -> list[tuple[str, RunOutcome | None]]:
    """The run files named (directories expanded) with their outcome."""
    known: dict[Path, RunOutcome | None] = {} if outcomes is None else read_outcomes(outcomes)
    runs: list[str] = []
    for name in paths:
        path = Path(name)
        if not path.is_dir():
            runs.append(name)
            continue
        inside = sorted(p for p in path.glob("*.jsonl") if p.name != INDEX)
        if not inside:
            raise TraceError("the directory holds no run (*.jsonl)", file=name)
        runs.extend(str(p) for p in inside)
        if outcomes is None and (path / INDEX).is_file():
            known.update(read_outcomes(str(path / INDEX)))
    by_name: dict[str, list[RunOutcome | None]] = {}
    for file, outcome in known.items():
        by_name.setdefault(file.name, []).append(outcome)
    found = []
    for run in runs:
        outcome = known.get(Path(run).resolve())
        same = by_name.get(Path(run).name, [])
        if outcome is None and len(same) == 1:
            outcome = same[0]
        found.append((run, outcome))
    return found


def _steps(path: str) -> list[RecordedStep]:
    from toolbreaker.cli._run import read_recorded_run

    steps = [step for _, step in read_recorded_run(path)]
    if not steps:
        raise TraceError(
            "the run has no steps: check-run needs one JSON object per line", file=path
        )
    return steps


def calibrate(
    paths: Sequence[str],
    budget: Budget,
    out: TextIO,
    *,
    outcomes: str | None = None,
    rate: float | None = None,
    to: str | None = None,
    budget_name: str = "the built-in defaults",
) -> int:
    """Judge every run under ``budget`` (and with ``rate``, suggest one); print the tables.

    Raises:
        TraceError: a bad run or outcomes file (its line named), or ``to`` exists.
        PolicyError: a rate with no successful run to calibrate on.
    """
    runs = []
    for path, outcome in _runs(paths, outcomes):
        try:
            runs.append((path, outcome, _steps(path)))
        except (ToolbreakerError, ValueError) as exc:
            raise _located(exc, path) from None
    if to is not None and Path(to).exists():
        raise TraceError("--to would overwrite it", file=to)
    judged = [_judge(path, outcome, steps, budget) for path, outcome, steps in runs]
    out.write(f"budget: {budget_name} (version {budget.version})\n")
    _table(judged, out)
    touched = any(j.condition is not None and j.outcome != "failure" for j in judged)
    if rate is None:
        return 1 if touched else 0
    profiles = [measure(path, outcome, steps, budget, _task(path)) for path, outcome, steps in runs]
    found = suggest(profiles, rate, budget)
    text = budget_toml(found.budget)
    out.write(f"\n{_headline(found, rate)}\n{text}")
    if to is not None:
        Path(to).write_text(text, encoding="utf-8")
        out.write(f"(written to {printable(to)})\n")
    replayed = [_judge(path, outcome, steps, found.budget) for path, outcome, steps in runs]
    out.write(f"\nunder the suggested budget (version {found.budget.version}):\n")
    _table(replayed, out)
    return 1 if touched else 0


def _task(path: str) -> str:
    return Path(path).stem or "recorded-run"


def _judge(
    path: str, outcome: RunOutcome | None, steps: list[RecordedStep], budget: Budget
) -> Judged:
    try:
        return judge(path, outcome, steps, budget, _task(path))
    except (ToolbreakerError, ValueError) as exc:
        raise _located(exc, path) from None


def _located(exc: BaseException, path: str) -> TraceError:
    if isinstance(exc, TraceError):
        return exc
    return TraceError(str(getattr(exc, "message", exc)), file=path)


def _headline(found: Suggestion, rate: float) -> str:
    allowed = "none" if found.allowed == 0 else f"at most {found.allowed}"
    line = (
        f"suggested budget: the tightest found that stops {allowed} of the "
        f"{found.successes} successful runs (at most {rate * 100:g}% of them)"
    )
    if not found.meets_rate:
        line += (
            f"; no budget the search makes meets the rate: {found.fixed} successful run(s) "
            "are touched by limits it leaves as they are (max_tool_failures, the write "
            "breaker, a loop no loop_cycles lets through ...)"
        )
    elif rate > 0 and found.successes * rate < 1:
        line += (
            f"; {found.successes} successful runs measure a rate no finer than "
            f"{1 / found.successes:.2%}"
        )
    return line + ":"


def _table(judged: Sequence[Judged], out: TextIO) -> None:
    """Per condition: successful, failed and unknown runs touched; what it saves."""
    counts = {o: sum(1 for j in judged if j.outcome == o) for o in (*_OUTCOMES, None)}
    unknown = counts[None] > 0
    runs = f"runs:   {len(judged)} ({counts['success']} successful, {counts['failure']} failed"
    out.write(runs + (f", {counts[None]} of unknown outcome)\n\n" if unknown else ")\n\n"))
    rows: dict[tuple[str, str], list[Judged]] = {}
    for j in judged:
        if j.condition is not None and j.effect is not None:
            rows.setdefault((j.condition, j.effect), []).append(j)
    head = ["condition", "effect", "successful", "failed"] + (["unknown"] if unknown else [])
    head += ["calls saved (failed)", "cost saved (failed)"]
    table = [head]
    for (condition, effect), touched in sorted(rows.items()):
        table.append(_row(condition, _EFFECT_WORDS[effect], touched, unknown))
    table.append(_row("any", "", [j for j in judged if j.condition is not None], unknown))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for row in table:
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.write(printable("  ".join(cells).rstrip()) + "\n")
    for outcome, word in (("success", "successful"), ("failure", "failed")):
        total = counts[outcome]
        stopped = sum(1 for j in judged if j.outcome == outcome and j.condition is not None)
        share = f" ({stopped / total:.1%})" if total else ""
        out.write(f"{word} runs stopped or touched: {stopped} of {total}{share}\n")


def _row(condition: str, effect: str, runs: Iterable[Judged], unknown: bool) -> list[str]:
    hit = list(runs)
    failed = [j for j in hit if j.outcome == "failure"]
    cost = ZERO
    for j in failed:
        cost = exact_sum(cost, j.saved_cost, "cost")
    row = [condition, effect]
    row += [str(sum(1 for j in hit if j.outcome == o)) for o in _OUTCOMES]
    if unknown:
        row.append(str(sum(1 for j in hit if j.outcome is None)))
    return [*row, str(sum(j.saved_calls for j in failed)), decimal_text(cost)]


def budget_toml(budget: Budget) -> str:
    """``budget`` as TOML that ``Budget.from_toml`` (and ``--budget``) loads back equal."""
    data = budget.to_dict()
    lines = []
    for name, value in data.items():
        if name in ("classes", "prices") or value is None:
            continue
        lines.append(f"{name} = {_toml_value(value, name)}")
    for risk in RISK_CLASSES:
        limits = {k: v for k, v in data["classes"][risk].items() if v is not None}
        lines.append(f"\n[classes.{risk}]")
        lines += [f"{k} = {_toml_value(v, k)}" for k, v in limits.items()]
    for model, price in data.get("prices", {}).items():
        lines.append(f"\n[prices.{_toml_string(model)}]")
        lines += [f"{k} = {_toml_string(v)}" for k, v in price.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any, name: str) -> str:
    if name.endswith("max_cost"):
        return _toml_string(str(value))  # exact decimal text, never a float
    return str(value)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
