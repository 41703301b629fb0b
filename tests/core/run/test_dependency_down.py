"""The run machine decides what a dependency going down does to the run (not the guard)."""

from __future__ import annotations

import pytest

from toolbreaker.core._run.budget import Action, Budget, RunState
from toolbreaker.core._run.machine import RunEvent, apply

TOOL = Action(tool="mail", fingerprint="f" * 64, risk="reversible_write")


@pytest.mark.parametrize(
    ("mode", "reason", "required", "stops"),
    [
        (None, "opened", True, True),  # a required tool is out: the run cannot go on
        (None, "retry-budget", True, True),
        (None, "opened", False, False),  # an optional one: the model hears, the run goes on
        (None, "saturated", True, False),  # a full bulkhead clears in seconds: not down
        ("stop", "opened", False, True),  # the sheet's row said stop
        ("queue", "opened", True, False),  # the row chose what the caller gets
        ("handoff", "isolated", True, False),
        ("omit", "cooldown", True, False),
    ],
)
def test_what_a_dependency_going_down_does_to_the_run(mode, reason, required, stops):
    """The mode served decides first; without one, a required tool stops the run unless
    the reason is a passing one."""
    run = RunState.start("t", 0)
    event = RunEvent(
        "dependency-down", 5, TOOL, required=required, reason=reason, mode=mode, detail="down"
    )
    run, decision = apply(run, event, Budget())
    assert (decision.verdict == "stopped") is stops
    assert (run.stopped is not None) is stops
    if stops:
        assert run.stopped.condition == "dependency-open"


def test_a_write_that_became_uncertain_later_counts_and_blocks_writes():
    """``uncertain``: a write whose queued item may or may not exist counts against
    ``max_uncertain_side_effects`` like an unknown outcome."""
    run = RunState.start("t", 0)
    run, _ = apply(run, RunEvent("uncertain", 1, TOOL, detail="it may be queued as q-1"), Budget())
    assert run.uncertain == 1
    assert run.writes_blocked is not None
    assert "it may be queued as q-1" in run.writes_blocked.detail
    allowed = Budget(max_uncertain_side_effects=1)
    run, _ = apply(RunState.start("t", 0), RunEvent("uncertain", 1, TOOL), allowed)
    assert (run.uncertain, run.writes_blocked) == (1, None)
