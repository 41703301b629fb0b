"""check-run and a live RunGuard are one driver: fed the same run, they give the same answers.

A recorded run is generated (:mod:`recorded_runs`: reads after a refused write, unknown
writes, costs on refused steps, reworded repeats, alternations, deadlines, model steps); a
live :class:`RunGuard` runs it with real tool functions that behave as each step recorded,
and ``toolbreaker check-run`` replays the file. Both must stop at the same step, for the
same condition, with the same counters and the same packet.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorded_runs import TASK, budgets, live, recorded_runs
from toolbreaker.cli._run import check_run
from toolbreaker.core._run.budget import Budget

# -- the recorded side: check-run on the file ------------------------------------------


_WORDS = {"allowed": "run", "STOP": "stopped", "BLOCKED": "writes-blocked"}


def recorded(records: list[dict[str, Any]], budget: Budget) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        out = io.StringIO()
        code = check_run(str(path), budget, TASK, out)
    text = out.getvalue()
    table, _, tail = text.partition("\n\n")
    decisions = []
    for row in table.splitlines()[1:]:
        if "(model step)" in row:
            continue  # a model step's cost, not a decision
        number, _at, _tool, word, *rest = row.split()
        if word in _WORDS:
            condition = rest[0].rstrip(":") if word != "allowed" else None
            decisions.append((int(number), _WORDS[word], condition))
        elif word == "answered":
            decisions.append((int(number), "journal", None))
        else:
            assert word == "reconcile", row
            decisions.append((int(number), "reconcile", None))
    found: dict[str, Any] = {"code": code, "decisions": decisions}
    if code == 0:
        found["counters"] = json.loads(tail.split(": ", 1)[1])
    else:
        where, _, packet = tail.partition("\n")
        found["where"] = int(where.rsplit(":", 1)[1])
        found["packet"] = json.loads(packet)
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=recorded_runs(), budget=budgets, settle=st.booleans())
def test_check_run_and_a_live_guard_decide_alike(records, budget, settle):
    """The same steps decided the same way, the same stop (or block) at the same step,
    the same counters and the same packet, history included."""
    seen = live(records, budget, settle=settle)
    replayed = recorded(records, budget)
    if settle:
        assert replayed["decisions"] == seen["decisions"]
    assert replayed["code"] == (1 if seen["stops"] else 0)
    if replayed["code"] == 0:
        assert replayed["counters"] == seen["counters"]
        return
    assert replayed["packet"] == seen["packet"]
    history = seen["packet"]["history"]
    stops = [c for c in history if c["effect"] == "stopped"]
    first = (stops or history)[0]
    if first["tool"] is None:  # a model step's usage or cost stopped the run
        assert replayed["where"] == seen["model_stop"]
    else:
        assert replayed["where"] == seen["lines"][first["step"]]
