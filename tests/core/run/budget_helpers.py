"""Actions and steps the run budget's tests share: a run driven through check, begin, finish."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolbreaker.core._run.budget import DEFAULT_CLASSES, Action, Budget, ClassLimits, RunState
from toolbreaker.core._run.limits import begin, check, finish

SEARCH = Action("search", "fp-search")
REFINE = Action("refine", "fp-refine")
FETCH = Action("fetch", "fp-fetch")
RANK = Action("rank", "fp-rank")
UPDATE = Action("update_ticket", "fp-update", risk="reversible_write")
SEND = Action("send_email", "fp-send", risk="irreversible")
STATUS = Action("ticket_status", "fp-status", recovery=True)

#: A budget whose class limits never bind, to test one run-wide limit at a time.
OPEN_CLASSES = {risk: ClassLimits() for risk in DEFAULT_CLASSES}


def done(
    run: RunState,
    action: Action,
    now: int = 0,
    *,
    evidence: str | None = None,
    outcome: Any = "success",
    cost: Any = None,
) -> RunState:
    """Begin and finish one action."""
    run = begin(run, action, now)
    return finish(run, action, outcome, now, evidence=evidence, cost=cost)


def allowed_run(
    budget: Budget, actions: Sequence[Action], *, evidence: Sequence[str | None] | None = None
) -> RunState:
    """Run actions through check, begin and finish, asserting each one is allowed."""
    run = RunState.start("task-1", 0)
    for i, action in enumerate(actions):
        decision = check(run, action, budget, i)
        assert decision.allowed, (i, decision)
        run = done(run, action, i, evidence=None if evidence is None else evidence[i])
    return run


def fresh(n: int) -> list[str]:
    """n distinct results: every call brings new evidence."""
    return [f"result-{i}" for i in range(n)]
