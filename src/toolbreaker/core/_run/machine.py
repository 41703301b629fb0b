"""The run machine: the one place where a run guard decides anything.

Theory of operation
-------------------
A run guard asks, before every tool call of a task, *may this run take this action?*,
and tells the run how each call ended. This module answers with one pure function::

    run, decision = apply(run, event, budget)

Events (:class:`RunEvent`) are facts the shell observed; the decision (:class:`RunDecision`)
is what the shell must carry out. A ``request`` gets one of five verdicts:

- ``run``: execute the call (it is counted against the budgets);
- ``journal``: a write the journal confirms was already made: answer from the journal and
  never execute it again (how a resumed task skips completed work);
- ``reconcile``: an earlier attempt of this write has an unknown outcome (``unknown``,
  ``reconciled-absent``, or ``pending`` after a crash): never replay it, run the
  read-only reconcile check;
- ``queued`` / ``handed-off``: the write was saved for a drainer (or may have been) or
  handed to a person: answer so, never make it here;
- ``writes-blocked``: a write while more writes have an unknown outcome than
  ``max_uncertain_side_effects`` allows: refused, and the run goes on with reads (the
  run's *write breaker*; ``RunState.writes_blocked`` records why, for the stop packet);
- ``stopped``: the run is stopped (a budget, a loop, a required dependency, an operator);
  the stop is recorded in the state and kept (the first stop wins). A stopped run still
  admits a few recovery reads (see :mod:`toolbreaker.core._run.budget`);
- ``deferred``: the current model turn has started ``Budget.max_calls_per_turn`` calls
  already: this one is not made and not queued (the model may issue it again next turn);
  it is counted in ``RunState.deferred`` and does not count against any other limit.
  A ``turn`` event (the adapter saw the model start a new turn) starts the count again;
- ``over-budget``: the request declared its cost (``reserve``) and holding it would take
  spent plus reserved cost over ``max_cost`` or its class's: refused before it runs, the
  run goes on (a cheaper call may fit). Counted in ``RunState.over_budget``; the first
  refusal of each tool is kept among the conditions;
- ``tool-stopped``: the tool failed ``Budget.max_tool_failures`` times with one error
  class in this run, whatever its arguments: it is not called again, the run goes on.

A request that declares its cost and runs holds a reservation (the decision's
``reservation``); its ``outcome`` event settles it (the actual ``cost``, or none reported:
the amount held is spent), and an outcome's ``error`` (the classifier's class of a
failure) counts toward the tool's failures. A model step reserves with a ``reserve``
event (verdict ``reserved`` or ``over-budget``) and settles with ``settle``, or with
the ``usage`` its response reported (the model's tokens, priced by the budget's table:
:func:`toolbreaker.core._run.costs.used`; a ``usage`` without a reservation commits its
cost at once). Before any
event, reservations whose lease ended are spent at their amount.

``extend`` is an operator raising the budget (the event is applied with the new one): a
run stopped by time, money or counts resumes (the stop stays in ``RunState.conditions``,
followed by an ``extended`` condition with who and why); other stops stay. The rules are
:mod:`toolbreaker.core._run.costs`'.

Outcome events settle a ``run`` call: ``unknown`` for a write that may have committed
counts toward the uncertain writes (and may block writes), as does ``uncertain``, a write
that became so after its call was recorded (the store's write of its queued item got no
answer: it may be queued, see :mod:`toolbreaker.core._run.protocol`); ``resolved`` records that an
uncertain write's outcome became known (a reconcile check found it, or an operator
decided); ``resume`` carries the writes an earlier run of the task left unresolved in the
journal, so a resumed run refuses writes exactly as the original did. ``dependency-down``
(a tool's dependency is out) stops the run when the degradation matrix served ``stop``,
or, when it served nothing, when the tool was required and the reason is not a passing
one (a full bulkhead clears in seconds: :func:`toolbreaker.core._degrade.passing`); any
other mode served lets the run go on (the sheet chose what the caller gets). Every
denial names the exact condition.

Every request is a *step* of the run, numbered from 1 (``RunState.steps``; the decision
carries the number, and the shell names it in the events about that call). Each
condition that stops the run or blocks its writes is kept in ``RunState.conditions`` in
the order it fired, with its step: a run whose writes were blocked at step 2 and that
stopped on a repeat at step 9 keeps both, so its stop packet tells the whole story.

What a journal status means for a request is the write protocol's
(:mod:`toolbreaker.core._run.protocol`). Everything here is pure: ``now`` arrives inside
events; the journal is read by the shell and its answer arrives as the event's
``journal`` status.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any, Final, Literal, cast, get_args

from toolbreaker.core._degrade import passing
from toolbreaker.core._run import costs, limits, protocol
from toolbreaker.core._run._values import RiskClass, decimal_text
from toolbreaker.core._run.budget import WRITES, Action, Budget, Outcome, RunState, Stop
from toolbreaker.core._run.state import BUDGET_CONDITIONS, Fired, changed, fired
from toolbreaker.errors import RunStateError

__all__ = [
    "ANSWERED",
    "EVENT_TYPES",
    "JOURNAL_STATUSES",
    "NOT_ASKED",
    "VERDICTS",
    "RunDecision",
    "RunEvent",
    "Verdict",
    "apply",
]

#: What a decision tells the shell to do.
Verdict = Literal[
    "run",
    "journal",
    "reconcile",
    "queued",
    "handed-off",
    "writes-blocked",
    "stopped",
    "deferred",
    "over-budget",
    "tool-stopped",
    "reserved",
    "recorded",
]
VERDICTS: Final[tuple[Verdict, ...]] = get_args(Verdict)
#: The events the run machine accepts.
EVENT_TYPES: Final = (
    "request",
    "outcome",
    "dependency-down",
    "uncertain",
    "resolved",
    "resume",
    "cost",
    "stop",
    "turn",
    "reserve",
    "settle",
    "extend",
    "usage",
)
_EVENT_TYPES: Final = frozenset(EVENT_TYPES)
_set_fields: Final = object.__setattr__
#: The events whose decision a shell acts on: a caller waits for these. The others are
#: facts to record (an outcome, a cost, a usage, a turn ...): a shell that shares the run
#: through a store may write them later, in order, without changing any decision.
ANSWERED: Final = frozenset({"request", "reserve", "dependency-down", "stop", "extend"})
#: Journal statuses a shell may report with a write request (the write protocol's).
JOURNAL_STATUSES: Final = protocol.STATUSES
#: The verdicts a write request gets from its journal entry alone: the budget is not
#: asked (no limit is checked, nothing is counted but the step).
NOT_ASKED: Final[frozenset[Verdict]] = frozenset({"reconcile", "queued", "handed-off"})


# Not slotted, with its own __init__: a shell builds two for every tool call, and setting
# twenty slots of a frozen dataclass one by one cost more than the run machine's step.
# The fields are set as one dict (as ``state.changed`` does); the test holds the
# signature to the fields.
@dataclasses.dataclass(frozen=True, init=False)
class RunEvent:
    """One fact about a run, fed to :func:`apply`.

    Attributes:
        type: one of :data:`EVENT_TYPES`.
        at: integer ms on the run's monotonic clock.
        action: the call a ``request``, ``outcome`` or ``dependency-down`` is about.
        journal: for a write ``request``, the status of its journal entry, if any.
        outcome: for ``outcome``, how the call ended.
        evidence: a digest of the observed result (``outcome``), or of the journaled
            result (a ``request`` the journal confirms).
        cost: the call's (or, for ``cost``, the model step's) cost.
        required: for ``dependency-down``, the run cannot go on without the tool.
        reason: for ``dependency-down``, why the tool is unavailable (the breaker's
            rejection reason: ``opened``, ``saturated``, ``retry-budget`` ...).
        mode: for ``dependency-down``, the degradation mode served instead, if any.
        detail: words for the stop or the block (``dependency-down``, ``stop``, ``resume``).
        count: for ``resume``, how many writes of earlier runs are unresolved.
        step: for ``outcome``, ``dependency-down`` and ``uncertain``, the step the event
            is about (the :attr:`RunDecision.step` its request got); 0: the run's latest.
        reserve: for ``request`` and ``reserve``, the cost to hold before the call runs;
            for ``outcome`` and ``settle``, the amount that was held (what a settle after
            the lease ended compares the actual cost with).
        reservation: for ``outcome`` and ``settle``, the reservation to settle (the
            :attr:`RunDecision.reservation` its request got); 0: none.
        error: for ``outcome``, the error class of a failure (the classifier's), which
            counts toward ``Budget.max_tool_failures``.
        model: for ``usage``, the model whose response reported it.
        input_tokens: for ``usage``, the response's input (prompt) tokens.
        output_tokens: for ``usage``, the response's output (completion) tokens.
        risk: for ``cost``, the risk class of the tool call it is the cost of, if any.
    """

    type: str
    at: int
    action: Action | None = None
    journal: str | None = None
    outcome: Outcome | None = None
    evidence: str | None = None
    cost: Decimal | str | int | None = None
    required: bool = False
    detail: str = ""
    count: int = 0
    reason: str = ""
    mode: str | None = None
    step: int = 0
    reserve: Decimal | str | int | None = None
    reservation: int = 0
    error: str | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    risk: RiskClass | None = None

    def __init__(  # noqa: PLR0917 - positional as the dataclass's generated one was
        self,
        type: str,
        at: int,
        action: Action | None = None,
        journal: str | None = None,
        outcome: Outcome | None = None,
        evidence: str | None = None,
        cost: Decimal | str | int | None = None,
        required: bool = False,
        detail: str = "",
        count: int = 0,
        reason: str = "",
        mode: str | None = None,
        step: int = 0,
        reserve: Decimal | str | int | None = None,
        reservation: int = 0,
        error: str | None = None,
        model: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        risk: RiskClass | None = None,
    ) -> None:
        _set_fields(
            self,
            "__dict__",
            {
                "type": type,
                "at": at,
                "action": action,
                "journal": journal,
                "outcome": outcome,
                "evidence": evidence,
                "cost": cost,
                "required": required,
                "detail": detail,
                "count": count,
                "reason": reason,
                "mode": mode,
                "step": step,
                "reserve": reserve,
                "reservation": reservation,
                "error": error,
                "model": model,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "risk": risk,
            },
        )
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.type not in _EVENT_TYPES:
            raise RunStateError(
                f"run event type must be one of {', '.join(EVENT_TYPES)}, got {self.type!r}",
                field="type",
            )
        if self.type in ("request", "outcome", "dependency-down") and self.action is None:
            raise RunStateError(f"a {self.type} event needs its action", field="action")
        if self.action is not None and not isinstance(self.action, Action):
            raise RunStateError(f"action must be an Action, got {self.action!r}", field="action")
        if type(self.count) is not int:
            raise RunStateError(f"count must be an integer, got {self.count!r}", field="count")
        if self.type == "usage" and not self.model:
            raise RunStateError("a usage event needs its model", field="model")
        if self.journal is not None and self.journal not in JOURNAL_STATUSES:
            raise RunStateError(
                f"journal status must be one of {', '.join(JOURNAL_STATUSES)}, "
                f"got {self.journal!r}",
                field="journal",
            )


# Not slotted, with its own __init__, as RunEvent: the run machine makes one for every
# request, and a frozen dataclass set its six slots one by one.
@dataclasses.dataclass(frozen=True, init=False)
class RunDecision:
    """What :func:`apply` tells the shell to do.

    Attributes:
        verdict: one of :data:`VERDICTS` (``recorded`` for events that are not requests).
        stop: the condition behind ``stopped`` and ``writes-blocked``.
        repeat: for requests, the action's repeat number without new evidence.
        step: for requests, the run's number for this step (``RunState.steps``, from 1):
            the step a condition it fires is recorded with, and that the shell names
            in the events about its outcome.
        reservation: the reservation held for a ``run`` (or ``reserved``) that declared
            its cost; its outcome (or ``settle``) event names it. 0: none.
        left: for ``over-budget``, what the binding cost limit leaves (exact text).
    """

    verdict: Verdict
    stop: Stop | None = None
    repeat: int = 0
    step: int = 0
    reservation: int = 0
    left: str | None = None

    def __init__(  # noqa: PLR0917 - positional as the dataclass's generated one was
        self,
        verdict: Verdict,
        stop: Stop | None = None,
        repeat: int = 0,
        step: int = 0,
        reservation: int = 0,
        left: str | None = None,
    ) -> None:
        _set_fields(
            self,
            "__dict__",
            {
                "verdict": verdict,
                "stop": stop,
                "repeat": repeat,
                "step": step,
                "reservation": reservation,
                "left": left,
            },
        )

    @property
    def runs(self) -> bool:
        """Whether the shell must execute the call."""
        return self.verdict == "run"

    def to_dict(self) -> dict[str, object]:
        """The decision as a JSON-ready dict."""
        return {
            "verdict": self.verdict,
            "stop": None if self.stop is None else self.stop.to_dict(),
            "repeat": self.repeat,
            "step": self.step,
            **({"reservation": self.reservation} if self.reservation else {}),
            **({"left": self.left} if self.left is not None else {}),
        }


_RECORDED: Final = RunDecision("recorded")


def apply(run: RunState, event: RunEvent, budget: Budget) -> tuple[RunState, RunDecision]:
    """Feed one event to a run and say what the shell must do.

    Raises:
        RunStateError: an impossible event (a time before the run started, an outcome
            that is not one of :data:`~toolbreaker.core._run.budget.OUTCOMES` ...).
    """
    kind = event.type
    at = event.at
    if run.reservations:
        run = costs.expire(run, at)  # a lease that ended: spent at its amount
    if kind == "request":
        assert event.action is not None
        return _request(run, event.action, event, budget)
    step = event.step or run.steps
    if kind == "outcome":
        assert event.action is not None
        if event.outcome is None:
            raise RunStateError("an outcome event needs its outcome", field="outcome")
        held = event.reservation
        run = limits.finish(
            run,
            event.action,
            event.outcome,
            at,
            evidence=event.evidence,
            cost=None if held else event.cost,
        )
        if held:  # finish left the cost and the reservations as they were
            run = _settle(run, event, event.action.risk)
        if event.error is not None and event.outcome in ("failure", "ignored"):
            run = costs.failed(run, event.action.tool, event.error, at, budget)
            run = _tool_stopped(run, event.action, step)
        if event.outcome == "unknown" and event.action.risk in WRITES:
            run = _block_if_uncertain(run, event.action, at, budget, event.detail, step=step)
        return run, _RECORDED
    if kind == "dependency-down":
        assert event.action is not None
        if not _stops(event):
            return run, _RECORDED
        stop = Stop(
            "dependency-open", event.detail, at, event.action.risk, event.action.fingerprint
        )
        run = _stopped(run, stop, step, event.action.tool)
        return run, RunDecision("stopped", run.stopped, step=step)
    if kind == "uncertain":
        run = changed(run, uncertain=run.uncertain + 1)
        return _block_if_uncertain(
            run, event.action, at, budget, event.detail, step=step
        ), _RECORDED
    if kind == "resolved":
        uncertain = max(0, run.uncertain - max(1, event.count))
        blocked = run.writes_blocked if uncertain > budget.max_uncertain_side_effects else None
        return changed(run, uncertain=uncertain, writes_blocked=blocked), _RECORDED
    if kind == "resume":
        if event.count <= 0:
            return run, _RECORDED
        run = changed(run, uncertain=run.uncertain + event.count)
        return _block_if_uncertain(run, None, at, budget, event.detail, step=step), _RECORDED
    if kind == "cost":
        return limits.add_cost(run, event.cost or 0, risk=event.risk), _RECORDED
    if kind == "reserve":
        return _reserve_step(run, event, budget)
    if kind == "extend":
        return _extended(run, event, step)
    if kind == "settle":
        return _settle(run, event, None), _RECORDED
    if kind == "usage":
        return _used(run, event, budget, step)
    if kind == "turn":
        if budget.max_calls_per_turn is None:
            return run, _RECORDED  # nothing is counted without a turn limit
        return changed(run, turn=run.turn + 1, turn_calls=0), _RECORDED
    # kind == "stop": an operator's
    run = _stopped(run, Stop("operator", event.detail or "stopped by an operator", at), step)
    return run, RunDecision("stopped", run.stopped, step=step)


def _request(
    run: RunState, action: Action, event: RunEvent, budget: Budget
) -> tuple[RunState, RunDecision]:
    at = event.at
    step = run.steps + 1  # every request is a step, counted in the state it leaves
    # RunEvent validated the status against the protocol's.
    status = cast("protocol.Status | None", event.journal if action.risk in WRITES else None)
    answer = protocol.on_request(status)
    if answer in NOT_ASKED:
        # Never made here: its outcome is unknown (only a status check may look), or a
        # drainer or a person owns it.
        return changed(run, steps=step), RunDecision(answer, step=step)
    decision = limits.check(run, action, budget, at)
    if answer == "journal":
        if decision.allowed:
            run = limits.begin(run, action, at, steps=step)
            # Made by an earlier run: its result is evidence, but nothing changed now.
            run = limits.finish(run, action, "success", at, evidence=event.evidence, made=False)
            return run, RunDecision("journal", repeat=decision.repeat, step=step)
        assert decision.stop is not None
        if decision.stop.condition == "uncertain-side-effect":
            # Answering a completed write from the journal changes nothing outside.
            run = changed(run, steps=step)
            return run, RunDecision("journal", repeat=decision.repeat, step=step)
    if decision.allowed:
        closed = costs.tool_stopped(run, action.tool)
        if closed is not None:
            why = Stop("tool-failures", closed.detail, at, action.risk, action.fingerprint)
            run = changed(run, steps=step)
            return run, RunDecision("tool-stopped", why, decision.repeat, step)
        amount = None if event.reserve is None else costs.amount_of(event.reserve, "reserve")
        if amount is not None:
            short = costs.cover(
                run,
                budget,
                amount,
                risk=action.risk,
                what=action.tool,
                now=at,
                fingerprint=action.fingerprint,
            )
            if short is not None:
                run = _refused(run, short.stop, step, action.tool)
                left = decimal_text(short.left)
                return run, RunDecision("over-budget", short.stop, decision.repeat, step, 0, left)
        limit = budget.max_calls_per_turn
        if limit is not None and run.turn_calls >= limit and run.stopped is None:
            run = changed(run, deferred=run.deferred + 1, steps=step)
            return run, RunDecision("deferred", repeat=decision.repeat, step=step)
        also: dict[str, object] = {}
        if limit is not None:
            also["turn_calls"] = run.turn_calls + 1
        held = 0
        if amount is not None:
            fields, hold = costs.holding(
                run, amount, budget, risk=action.risk, tool=action.tool, now=at
            )
            also.update(fields)
            held = hold.id
        run = limits.begin(run, action, at, steps=step)
        if also:
            run = changed(run, **also)
        return run, RunDecision("run", repeat=decision.repeat, step=step, reservation=held)
    stop = decision.stop
    assert stop is not None
    run = changed(run, steps=step)
    if stop.condition == "uncertain-side-effect" and run.stopped is None:
        run = _blocked(run, stop, step, action.tool)
        return run, RunDecision("writes-blocked", run.writes_blocked, decision.repeat, step)
    run = _stopped(run, stop, step, action.tool)
    return run, RunDecision("stopped", run.stopped, decision.repeat, step)


def _extended(run: RunState, event: RunEvent, step: int) -> tuple[RunState, RunDecision]:
    """An operator raised the budget (``budget`` is the new one): a budget stop is lifted.

    Only stops a larger budget answers (:data:`~toolbreaker.core._run.state.BUDGET_CONDITIONS`)
    are lifted; a loop, a repeat, an unknown write or an operator's stop stay. A limit
    the new budget still crosses stops the run again at its next call.
    """
    stopped = run.stopped
    if stopped is None or stopped.condition not in BUDGET_CONDITIONS:
        return run, RunDecision("recorded", stopped, step=step)
    run = changed(run, stopped=None, recovery_calls=0)
    mark = Stop("extended", event.detail or "the budget was raised", event.at)
    return fired(run, Fired(mark, "resumed", step)), RunDecision("recorded", step=step)


def _reserve_step(run: RunState, event: RunEvent, budget: Budget) -> tuple[RunState, RunDecision]:
    """A model step's reservation: held, or refused (the run goes on)."""
    amount = costs.amount_of(event.reserve or 0, "reserve")
    short = costs.cover(run, budget, amount, risk=None, what="a model step", now=event.at)
    if short is not None:
        run = _refused(run, short.stop, run.steps, None)
        return run, RunDecision("over-budget", short.stop, left=decimal_text(short.left))
    run, hold = costs.reserve(run, amount, budget, risk=None, tool=None, now=event.at)
    return run, RunDecision("reserved", reservation=hold.id)


def _used(
    run: RunState, event: RunEvent, budget: Budget, step: int
) -> tuple[RunState, RunDecision]:
    """A model response's usage, priced by the budget's table (see :func:`costs.used`)."""
    assert event.model is not None
    estimate = None if event.reserve is None else costs.amount_of(event.reserve, "reserve")
    run, unknown = costs.used(
        run,
        budget,
        event.model,
        (event.input_tokens, event.output_tokens),
        event.at,
        reservation=event.reservation,
        estimate=estimate,
    )
    if unknown is None:
        return run, _RECORDED
    run = _stopped(run, unknown, step)
    return run, RunDecision("stopped", run.stopped, step=step)


def _settling(run: RunState, event: RunEvent, risk: RiskClass | None) -> dict[str, Any]:
    actual = None if event.cost is None else costs.amount_of(event.cost)
    estimate = None if event.reserve is None else costs.amount_of(event.reserve, "reserve")
    return costs.settling(run, event.reservation, actual, estimate=estimate, risk=risk)


def _settle(run: RunState, event: RunEvent, risk: RiskClass | None) -> RunState:
    fields = _settling(run, event, risk)
    return changed(run, **fields) if fields else run


def _refused(run: RunState, stop: Stop, step: int, tool: str | None) -> RunState:
    """A refused reservation counted; the first refusal of each tool kept as a condition."""
    first = not any(f.effect == "refused" and f.tool == tool for f in run.conditions)
    run = changed(run, over_budget=run.over_budget + 1, steps=step)
    return fired(run, Fired(stop, "refused", step, tool)) if first else run


def _tool_stopped(run: RunState, action: Action, step: int) -> RunState:
    """Keep the condition when this outcome stopped its tool."""
    closed = costs.tool_stopped(run, action.tool)
    if closed is None or any(
        f.effect == "tool-stopped" and f.tool == action.tool for f in run.conditions
    ):
        return run
    stop = Stop("tool-failures", closed.detail, closed.at, action.risk, action.fingerprint)
    return fired(run, Fired(stop, "tool-stopped", step, action.tool))


def _stops(event: RunEvent) -> bool:
    """Whether a dependency going down stops the run (see the module)."""
    if event.mode is not None:
        return event.mode == "stop"  # the sheet's row chose what the caller gets
    return event.required and not passing(event.reason)


def _stopped(run: RunState, stop: Stop, step: int, tool: str | None = None) -> RunState:
    """The run stopped by ``stop``, the condition kept; the first stop wins."""
    if run.stopped is not None:
        return run
    return fired(limits.stop(run, stop), Fired(stop, "stopped", step, tool))


def _blocked(run: RunState, stop: Stop, step: int, tool: str | None) -> RunState:
    """The run's writes blocked by ``stop``, the condition kept; a block in force stays."""
    if run.writes_blocked is not None:
        return run
    return fired(changed(run, writes_blocked=stop), Fired(stop, "writes-blocked", step, tool))


def _block_if_uncertain(
    run: RunState, action: Action | None, at: int, budget: Budget, why: str, *, step: int
) -> RunState:
    """Open the run's write breaker once too many writes have an unknown outcome."""
    if run.uncertain <= budget.max_uncertain_side_effects or run.writes_blocked is not None:
        return run
    n = run.uncertain
    writes = "1 write" if n == 1 else f"{n} writes"
    what = f"{action.tool}: {why}" if action is not None and why else why or "an earlier run"
    detail = (
        f"{writes} with unknown outcome ({what}), more than max_uncertain_side_effects="
        f"{budget.max_uncertain_side_effects}: no write may run until reconciled"
    )
    stop = Stop(
        "uncertain-side-effect",
        detail,
        at,
        None if action is None else action.risk,
        None if action is None else action.fingerprint,
    )
    return _blocked(run, stop, step, None if action is None else action.tool)
