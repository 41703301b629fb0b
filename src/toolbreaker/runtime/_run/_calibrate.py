"""Recorded runs judged by a budget, and measured for calibrating one.

Both go through the one run driver (:class:`~toolbreaker.runtime._run._recorded.RecordedRun`,
a live guard whose tools end as recorded), so what is counted here is what a live guard
decides:

- :func:`judge` replays a run under a budget and says what it would have changed: the
  first condition that stopped the run, blocked its writes or stopped one of its tools,
  and the tool calls and cost of the recording that would not have been spent (a
  stopped run ends: nothing after its stop is spent, model steps included; a refused
  call spends nothing);
- :func:`measure` replays it under the calibration probe
  (:func:`toolbreaker._tuning._budgets.probe`) and records, before each request, what
  it needed of each limit (:func:`toolbreaker.core._run.limits.needs`): the run's
  :class:`~toolbreaker._tuning._budgets.Profile`, which the pure search reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from decimal import Decimal

from toolbreaker._tuning._budgets import Profile, RunOutcome, probe
from toolbreaker.core._run._values import ZERO, as_amount, exact_sum
from toolbreaker.core._run.budget import Budget, RiskClass, RunState
from toolbreaker.core._run.limits import Needs, needs
from toolbreaker.core._run.machine import NOT_ASKED
from toolbreaker.runtime._run._recorded import RecordedRun, RecordedStep

__all__ = ["EFFECTS", "Judged", "judge", "measure"]

#: The effects of a condition on a run that ``judge`` reports, in the words it uses.
EFFECTS = ("stopped", "writes-blocked", "tool-stopped")


@dataclasses.dataclass(frozen=True, slots=True)
class Judged:
    """What a budget would have changed in one recorded run.

    Attributes:
        name: the run's name (its file).
        outcome: ``success``, ``failure``, or ``None`` when not known.
        condition: the first condition that touched the run (``repeated-action``,
            ``uncertain-side-effect`` ...); ``None``: the budget lets all of it run.
        effect: what it did: ``stopped``, ``writes-blocked`` or ``tool-stopped``.
        stopped_after: when the budget stops the run: the tool calls it had made (the
            stop packet's ``calls``); ``None``: it does not stop the run.
        calls: the tool calls the recording holds.
        cost: what the recording spent in all.
        saved_calls: tool calls of the recording that would not have run.
        saved_cost: cost of the recording that would not have been spent.
    """

    name: str
    outcome: RunOutcome | None
    condition: str | None
    effect: str | None
    stopped_after: int | None
    calls: int
    cost: Decimal
    saved_calls: int
    saved_cost: Decimal


def _cost(step: RecordedStep) -> Decimal:
    return ZERO if step.cost is None else as_amount(step.cost)


def judge(
    name: str,
    outcome: RunOutcome | None,
    steps: Iterable[RecordedStep],
    budget: Budget,
    task: str = "recorded-run",
) -> Judged:
    """Replay a recorded run under ``budget``: what it would have changed.

    Raises:
        ValueError: a step the driver refuses (see ``RecordedRun.replay``).
    """
    replay = RecordedRun(task, budget)
    calls = ran = 0
    cost = spent = ZERO
    for step in steps:
        stopped = replay.guard is not None and replay.guard.stopped is not None
        done = replay.replay(step)
        cost = exact_sum(cost, _cost(step), "cost")
        if step.tool is not None:
            calls += 1
            ran += done.ran
        if done.ran or (step.tool is None and not stopped):
            spent = exact_sum(spent, _cost(step), "cost")  # a stopped run asks no model
    packet = replay.packet()
    at_stop = replay.stopped_packet
    stopped_after = None if at_stop is None else int(at_stop.to_dict()["counters"]["calls"])
    history = [] if packet is None else list(packet.history)
    first = next((c for c in history if c["effect"] in EFFECTS), None)
    return Judged(
        name=name,
        outcome=outcome,
        condition=None if first is None else str(first["condition"]),
        effect=None if first is None else str(first["effect"]),
        stopped_after=stopped_after,
        calls=calls,
        cost=cost,
        saved_calls=calls - ran,
        saved_cost=cost - spent,
    )


def measure(
    name: str,
    outcome: RunOutcome | None,
    steps: Iterable[RecordedStep],
    budget: Budget,
    task: str = "recorded-run",
) -> Profile:
    """Replay a recorded run under ``budget``'s probe: what each request needed of it.

    Raises:
        ValueError: a step the driver refuses (see ``RecordedRun.replay``).
    """
    probed = probe(budget)
    replay = RecordedRun(task, probed)
    found: list[tuple[RiskClass, Needs]] = []
    calls = 0
    cost = ZERO
    for step in steps:
        guard = replay.guard
        before = RunState.start(task, step.at) if guard is None else guard.state
        stopped = guard is not None and guard.stopped is not None
        done = replay.replay(step)
        cost = exact_sum(cost, _cost(step), "cost")
        if step.tool is None:
            continue
        calls += 1
        decision, action = done.decision, done.action
        if stopped or decision is None or action is None or decision.verdict in NOT_ASKED:
            continue  # after a stop nothing is asked again; a reconcile asks no limit
        found.append((action.risk, needs(before, action, probed, step.at)))
    packet = replay.packet()
    touched = packet is not None and any(c["effect"] in EFFECTS for c in packet.history)
    return Profile(name, outcome, tuple(found), touched, calls, cost)
