"""The limit decisions: may this action run next, and what its start and end change.

Three pure functions move a run forward, one tool call at a time (the theory of
operation is :mod:`toolbreaker.core._run.budget`'s)::

    decision = check(run, action, budget, now)   # before: may this action run?
    run = begin(run, action, now)                # it runs: count the attempt
    run = finish(run, action, outcome, now, evidence=digest, cost=cost)   # after

plus :func:`add_cost`, :func:`stop` (the first stop wins) and :func:`admit` (check and
begin in one step). Pure: ``now`` is passed in; states are frozen values.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._run._state_parts import attempt_of, tally_of
from toolbreaker.core._run._values import (
    DIGEST_LENGTH,
    RISK_CLASSES,
    WRITES,
    RiskClass,
    as_amount,
    as_count,
    as_risk,
    decimal_text,
    exact_sum,
    times,
    with_risk,
)
from toolbreaker.core._run.state import (
    EVIDENCE_LIMIT,
    HISTORY_LIMIT,
    MAX_CYCLE,
    MAX_LOOP_CYCLES,
    OUTCOMES,
    PRECEDENCE,
    TALLY_LIMIT,
    Action,
    Attempt,
    Outcome,
    RunState,
    Stop,
    Tally,
    changed,
    checked,
)
from toolbreaker.errors import RunStateError

if TYPE_CHECKING:
    # Only for annotations: the budget module re-exports this one's names.
    from toolbreaker.core._run.budget import Budget

__all__ = [
    "DIGEST_DIGITS",
    "PRECEDENCE",
    "Decision",
    "Needs",
    "Quiet",
    "add_cost",
    "admit",
    "begin",
    "changes_world",
    "check",
    "finish",
    "may_loop",
    "needs",
    "quiet",
    "repeat_of",
    "result_digest",
    "stop",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What :func:`check` says about one action.

    Attributes:
        allowed: the action may run.
        stop: why not; ``None`` exactly when allowed.
        repeat: how many times in a row this exact action would be repeated without new
            evidence (0: first occurrence, or new evidence since the last one).
    """

    allowed: bool
    stop: Stop | None = None
    repeat: int = 0

    def __post_init__(self) -> None:
        if self.allowed != (self.stop is None):
            raise RunStateError("a decision carries a stop exactly when it denies", field="stop")

    def to_dict(self) -> dict[str, Any]:
        """The decision as a JSON-ready dict."""
        return {
            "allowed": self.allowed,
            "stop": None if self.stop is None else self.stop.to_dict(),
            "repeat": self.repeat,
        }


def _check_now(run: RunState, now: int) -> None:
    if type(now) is not int or now < run.started_at:
        raise RunStateError(
            f"now must be integer ms, not before the run started at {run.started_at}; got {now!r}",
            field="now",
        )


def repeat_of(evidence: int, tally: Tally | None) -> int:
    """The repeat number an action would have if it began now.

    ``evidence`` is the run's evidence count, ``tally`` the action's own (``None``: it
    never began): a repeat is an occurrence with no new evidence since the last one.
    """
    if tally is None or evidence != tally.evidence:
        return 0
    return tally.repeats + 1


#: Hex digits of an action's fingerprint that tell two calls of one tool apart in a stop.
DIGEST_DIGITS: Final = 8


def _cycle_names(calls: Sequence[Attempt | Action]) -> str:
    """The calls of one pass of a cycle, as a stop's detail names them.

    By tool name; a tool that comes back within the pass with other arguments (the
    calls of a cycle are distinct actions) is told apart by the first
    :data:`DIGEST_DIGITS` hex digits of each call's fingerprint, a digest of the tool and
    its canonical arguments that shows no argument (the packet has the whole
    fingerprint): ``check_stock (arguments 3f2a1c0d)``.
    """
    tools = [call.tool for call in calls]
    return ", ".join(
        f"{call.tool} (arguments {call.fingerprint[:DIGEST_DIGITS]})"
        if tools.count(call.tool) > 1
        else call.tool
        for call in calls
    )


def may_loop(history: Sequence[Attempt], fingerprint: str) -> bool:
    """Whether an action of ``fingerprint`` beginning after ``history`` may complete a loop.

    A cycle of n the action completes a second time has the action n places back: when
    none of those places holds it, there is no loop under any ``loop_cycles`` (the
    common case, decided at once).
    """
    for attempt in history[-MAX_CYCLE:-1]:  # noqa: SIM110 - any() of a generator costs more
        if attempt.fingerprint == fingerprint:
            return True
    return False


def _loop(run: RunState, action: Action, loop_cycles: int) -> str | None:
    """Describe the loop ``action`` would complete (under ``loop_cycles``), or ``None``."""
    history = run.history
    if not may_loop(history, action.fingerprint):
        return None
    sequence = [attempt.fingerprint for attempt in history]
    sequence.append(action.fingerprint)
    for n in range(2, MAX_CYCLE + 1):
        if len(sequence) < 2 * n:
            break
        pattern = sequence[-n:]
        if len(set(pattern)) != n:
            continue
        times = 1
        while times < loop_cycles and sequence[-(times + 1) * n : -times * n] == pattern:
            times += 1
        # history[-(n - 1)] began the last pass; the candidate action closes it.
        tools = _cycle_names([*history[-(n - 1) :], action])
        if times >= loop_cycles:
            return f"cycle [{tools}] repeated {times} times (loop_cycles={loop_cycles})"
        if times >= 2 and run.evidence == history[-(n - 1)].evidence:
            return f"cycle [{tools}] repeated {times} times without new evidence"
    return None


def _crossing(
    run: RunState, action: Action, budget: Budget, now: int, repeat: int
) -> tuple[str, str] | None:
    """The first limit (in :data:`PRECEDENCE` order) that ``action`` would cross."""
    risk = action.risk
    limits = budget.classes[risk]
    deadline = budget.deadline_ms
    if deadline is not None and now - run.started_at >= deadline:
        elapsed = now - run.started_at
        return "deadline", f"{elapsed} ms since the run started reaches deadline_ms={deadline}"
    if risk in WRITES and run.uncertain > budget.max_uncertain_side_effects:
        n = run.uncertain
        writes = "1 write" if n == 1 else f"{n} writes"
        return "uncertain-side-effect", (
            f"{writes} with unknown outcome, more than max_uncertain_side_effects="
            f"{budget.max_uncertain_side_effects}: {action.tool} ({risk}) may not run "
            "until reconciled"
        )
    if budget.max_cost is not None and run.cost >= budget.max_cost:
        return "max-cost", (
            f"cost {decimal_text(run.cost)} reaches max_cost={decimal_text(budget.max_cost)}"
        )
    if limits.max_cost is not None and run.class_cost[risk] >= limits.max_cost:
        return "class-max-cost", (
            f"{risk} cost {decimal_text(run.class_cost[risk])} reaches "
            f"classes.{risk}.max_cost={decimal_text(limits.max_cost)}"
        )
    if run.calls >= budget.max_tool_calls:
        return "max-tool-calls", (
            f"tool call {run.calls + 1} exceeds max_tool_calls={budget.max_tool_calls}"
        )
    if limits.max_calls is not None and run.class_calls[risk] >= limits.max_calls:
        return "class-max-calls", (
            f"{risk} call {run.class_calls[risk] + 1} ({action.tool}) exceeds "
            f"classes.{risk}.max_calls={limits.max_calls}"
        )
    loop = _loop(run, action, budget.loop_cycles)
    if loop is not None:
        return "loop", loop
    limit, name = budget.repeats_for(risk)
    if repeat > limit:
        return "repeated-action", (
            f"{action.tool} repeated {times(repeat)} without new evidence ({name}={limit})"
        )
    return None


#: The allowing decisions of the first repeat numbers, made once: one is asked for on
#: every call, and a frozen decision is the same value wherever it is shared.
_ALLOWED: Final = tuple(Decision(allowed=True, repeat=n) for n in range(64))


def _allowed(repeat: int) -> Decision:
    return _ALLOWED[repeat] if repeat < len(_ALLOWED) else Decision(allowed=True, repeat=repeat)


def check(run: RunState, action: Action, budget: Budget, now: int) -> Decision:
    """Decide whether ``action`` may run next, without recording anything.

    The run is judged as it would be with the action counted: call ``N`` is allowed
    when the limit is ``N`` and call ``N + 1`` is denied. When several limits are
    crossed the stop names the first in :data:`PRECEDENCE`. A stopped run denies
    everything with its original stop, except recovery reads while fewer than
    ``budget.max_recovery_calls`` have begun since the stop; those skip every other
    limit, since the run is already stopped and they only look.

    Args:
        run: the run so far.
        action: the intended call.
        budget: the run's limits.
        now: integer ms on the run's monotonic clock.

    Returns:
        The decision; its ``repeat`` says how often the action repeats without new
        evidence, whether it is allowed or not.

    Raises:
        RunStateError: ``now`` is not an integer or lies before the run's start.
    """
    _check_now(run, now)
    repeat = repeat_of(run.evidence, run.tallies.get(action.fingerprint))
    if run.stopped is not None:
        recovery = action.recovery and action.risk == "read"
        if recovery and run.recovery_calls < budget.max_recovery_calls:
            return _allowed(repeat)
        return Decision(allowed=False, stop=run.stopped, repeat=repeat)
    crossed = _crossing(run, action, budget, now, repeat)
    if crossed is None:
        return _allowed(repeat)
    condition, detail = crossed
    return Decision(
        allowed=False,
        stop=Stop(condition, detail, now, action.risk, action.fingerprint),
        repeat=repeat,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Quiet:
    """Which calls no limit can stop while the run changes by such calls alone.

    :func:`quiet` works it out once from a state and its budget; a run cell
    (:class:`~toolbreaker.core._run.cell.RunCell`) then begins a call in place, the run
    machine not asked, only when :func:`check` would allow it: a call of a class in
    ``classes``, of no stopped tool, asked before ``before``, while the run's calls are
    below ``calls``, its class's below the class's limit and the turn's below
    ``turn_calls``, that completes no cycle (:func:`may_loop`) and whose repeat number
    (:func:`repeat_of`) is at most its class's limit. Such calls change no cost and stop
    nothing, so what was worked out holds until another event changes the run. Each
    limit :func:`_crossing` checks is read here too; ``tests/core/run/test_cell.py``
    holds the two to each other over every field of a budget.

    Attributes:
        calls: ``max_tool_calls``.
        classes: per class whose calls may be quiet (a read: writes are decided by their
            journal entries; not one whose cost limit is reached), its ``max_calls``
            (``None``: none) and its repeat limit; empty when the run is stopped or
            its ``max_cost`` is reached.
        before: a call at or after this time is not quiet: the deadline, or the first
            reservation's lease end (spent then); ``None``: no such time.
        leases_end: when the first reservation's lease ends (an outcome then is not
            quiet either), else ``None``.
        turn_calls: ``max_calls_per_turn``, else ``None``.
        tools_stopped: the tools the run no longer calls.
    """

    calls: int
    classes: Mapping[RiskClass, tuple[int | None, int]]
    before: int | None
    leases_end: int | None
    turn_calls: int | None
    tools_stopped: frozenset[str]


def quiet(run: RunState, budget: Budget) -> Quiet:
    """The calls of ``run`` no limit of ``budget`` can stop (see :class:`Quiet`)."""
    leases_end = min((hold.expires_at for hold in run.reservations), default=None)
    deadline = budget.deadline_ms
    before = leases_end
    if deadline is not None:
        end = run.started_at + deadline  # a call at now - started_at >= deadline is late
        before = end if before is None else min(before, end)
    classes: dict[RiskClass, tuple[int | None, int]] = {}
    if run.stopped is None and (budget.max_cost is None or run.cost < budget.max_cost):
        for risk in RISK_CLASSES:
            limits = budget.classes[risk]
            if risk in WRITES or (
                limits.max_cost is not None and run.class_cost[risk] >= limits.max_cost
            ):
                continue
            classes[risk] = (limits.max_calls, budget.repeats_for(risk)[0])
    return Quiet(
        calls=budget.max_tool_calls,
        classes=classes,
        before=before,
        leases_end=leases_end,
        turn_calls=budget.max_calls_per_turn,
        tools_stopped=frozenset(found.tool for found in run.tools_stopped),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Needs:
    """What an action needs from a budget not to be refused now: the least of each limit.

    The inverse of :func:`check`, for calibrating a budget on recorded runs
    (`toolbreaker._tuning._budgets`): the action passes a limit exactly when the
    limit is at least (for a cost or the deadline: above) the need.

    Attributes:
        calls: ``max_tool_calls`` at least this: the run's tool calls with this one.
        class_calls: its class's ``max_calls`` at least this.
        repeats: its class's repeat limit at least this: its repeat number.
        loop_cycles: ``loop_cycles`` at least this; 0: it completes no cycle; above
            :data:`~toolbreaker.core._run.state.MAX_LOOP_CYCLES`: a loop under any (a
            cycle completed twice without new evidence, or more often than any limit).
        cost: ``max_cost`` above this: the cost spent before it.
        class_cost: its class's ``max_cost`` above this.
        elapsed: ``deadline_ms`` above this: ms since the run started.
        blocked: a write refused by the write breaker under the budget it was measured
            with (too many writes of unknown outcome): only the deadline can stop the run
            at it, the other limits are not asked.
    """

    calls: int
    class_calls: int
    repeats: int
    loop_cycles: int
    cost: Decimal
    class_cost: Decimal
    elapsed: int
    blocked: bool = False


def needs(run: RunState, action: Action, budget: Budget, now: int) -> Needs:
    """What ``action`` needs from a budget to run next (see :class:`Needs`).

    ``budget`` decides only what is not a limit to calibrate: whether writes are blocked
    (``max_uncertain_side_effects``).

    Raises:
        RunStateError: ``now`` is not an integer or lies before the run's start.
    """
    _check_now(run, now)
    risk = action.risk
    # The least loop_cycles it passes (a loop at n is one at every lower n); 0: any.
    passes = (n for n in range(2, MAX_LOOP_CYCLES + 1) if _loop(run, action, n) is None)
    loop = next(passes, MAX_LOOP_CYCLES + 1)
    return Needs(
        calls=run.calls + 1,
        class_calls=run.class_calls[risk] + 1,
        repeats=repeat_of(run.evidence, run.tallies.get(action.fingerprint)),
        loop_cycles=0 if loop == 2 else loop,
        cost=run.cost,
        class_cost=run.class_cost[risk],
        elapsed=now - run.started_at,
        blocked=risk in WRITES and run.uncertain > budget.max_uncertain_side_effects,
    )


def begin(
    run: RunState,
    action: Action,
    now: int,
    *,
    steps: int | None = None,
    also: Mapping[str, Any] | None = None,
) -> RunState:
    """Count an allowed action as it starts: calls, its class, its tally, the history.

    ``steps``: the run's step count to record with it (the run machine numbers every
    request a step, and counts this one in the same state change). ``also``: other
    fields of the state to set in the same change (the call's cost reservation); the
    state they make is checked as :class:`RunState` checks one.

    Raises:
        RunStateError: ``now`` is not an integer or lies before the run's start, or
            ``steps`` or ``also`` make no valid state.
    """
    _check_now(run, now)
    if not isinstance(action, Action):
        raise RunStateError(f"action must be an Action, got {action!r}", field="action")
    fingerprint = action.fingerprint
    risk = action.risk
    known = run.tallies.get(fingerprint)
    evidence = run.evidence
    # The records are made unchecked: every value is the run's or the checked action's.
    tally = tally_of(
        fingerprint,
        1 if known is None else known.occurrences + 1,
        evidence,
        repeat_of(run.evidence, known),
    )
    history = run.history
    attempt = attempt_of(action.tool, fingerprint, evidence)
    begun = changed(
        run,
        calls=run.calls + 1,
        class_calls=with_risk(run.class_calls, risk, run.class_calls[risk] + 1),
        recovery_calls=run.recovery_calls + (run.stopped is not None),
        history=(*history, attempt) if len(history) < HISTORY_LIMIT else (*history[1:], attempt),
        tallies=run.tallies.latest(fingerprint, tally, TALLY_LIMIT),
        steps=run.steps if steps is None else as_count(steps, "steps"),
    )
    return begun if not also else checked(changed(begun, **also))


def _hashed(evidence: str) -> str:
    return hashlib.sha256(evidence.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_LENGTH]


#: Remembered for evidence of a digest's size (what a shell reports): a tool's results
#: repeat (every ``None`` of a write, a search asked again), and the digest depends on
#: nothing but the text.
_remembered: Final = functools.lru_cache(maxsize=1024)(_hashed)


def result_digest(evidence: str) -> str:
    """The digest a run keeps of a result's evidence (:attr:`RunState.digests`)."""
    return _remembered(evidence) if len(evidence) <= _REMEMBERED else _hashed(evidence)


_REMEMBERED: Final = 128


def finish(
    run: RunState,
    action: Action,
    outcome: Outcome,
    now: int,
    *,
    evidence: str | None = None,
    cost: Decimal | int | str | None = None,
    also: Mapping[str, Any] | None = None,
    made: bool = True,
) -> RunState:
    """Record how a begun action ended.

    Args:
        run: the run after :func:`begin`.
        action: the action that ran.
        outcome: ``success``, ``failure``, ``unknown`` (a write that may or may not have
            happened: it counts toward ``uncertain``) or ``ignored``.
        now: integer ms on the run's monotonic clock.
        evidence: a digest of the observed result; the run's evidence grows when it was
            not seen among the last :data:`EVIDENCE_LIMIT` distinct digests.
        cost: the call's cost, recorded in total and against the action's risk class.
        also: other fields of the state to set in the same change (a settled
            reservation); not together with ``cost``.
        made: the call was made in this run; ``False`` for a write answered from the
            journal (made by an earlier run: it changes nothing now).

    Returns:
        The run with the outcome recorded.

    Raises:
        RunStateError: an unknown outcome, a non-string evidence, an invalid cost, or a
            ``now`` before the run's start.
    """
    _check_now(run, now)
    if outcome not in OUTCOMES:
        raise RunStateError(
            f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}", field="outcome"
        )
    if not isinstance(action, Action):
        raise RunStateError(f"action must be an Action, got {action!r}", field="action")
    count = run.evidence
    digests = run.digests
    if evidence is not None:
        if not isinstance(evidence, str):
            raise RunStateError(f"evidence must be a string, got {evidence!r}", field="evidence")
        digest = result_digest(evidence)
        if not digests.holds(digest):
            count += 1
            digests = digests.latest(digest, digest, EVIDENCE_LIMIT)
        elif digests.newest() != digest:
            digests = digests.latest(digest, digest, EVIDENCE_LIMIT)  # seen again: kept
    writes = action.risk in WRITES
    if made and writes and outcome in _MADE:
        count += 1  # the world may have changed: new evidence for every other action
    tallies = run.tallies
    if writes:
        # A write's own result (a receipt, a new id) is no reason to write again.
        known = tallies.get(action.fingerprint)
        if known is not None:
            mark = tally_of(known.fingerprint, known.occurrences, count, known.repeats)
            tallies = tallies.replaced(action.fingerprint, mark)
    uncertain = run.uncertain + (writes and outcome == "unknown")
    if (
        cost is None
        and not also
        and count == run.evidence
        and digests is run.digests
        and tallies is run.tallies
        and uncertain == run.uncertain
    ):
        return run  # a result seen last, of a read: nothing to record (most calls' outcome)
    finished = changed(
        run,
        evidence=count,
        digests=digests,
        tallies=tallies,
        uncertain=uncertain,
        **({} if cost is None else _costs(run, cost, action.risk)),
    )
    return finished if not also else checked(changed(finished, **also))


def changes_world(action: Action, outcome: Outcome) -> bool:
    """Whether a call that ended with ``outcome`` may have changed the world.

    A write (its risk class says it changes state, see :data:`WRITES`) that succeeded, or
    whose outcome is unknown (it may have committed), did; a write that failed (nothing
    was sent) or was refused by its own check (``ignored``) did not, nor does a read.
    Such a change is new evidence for every action that comes back after it.
    """
    return action.risk in WRITES and outcome in _MADE


_MADE: Final = frozenset({"success", "unknown"})


def add_cost(
    run: RunState, amount: Decimal | int | str, *, risk: RiskClass | None = None
) -> RunState:
    """Add a cost to the run, e.g. of a model step; with ``risk``, also to that class.

    Raises:
        RunStateError: the amount is a float, negative, not finite, has more than 18
            decimal places, or the total would reach 10**18.
    """
    return changed(run, **_costs(run, amount, risk))


def _costs(run: RunState, amount: object, risk: RiskClass | None) -> dict[str, Any]:
    """The cost fields of ``run`` with ``amount`` added, exactly."""
    try:
        value = as_amount(amount)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"cost {exc}", field="cost") from None
    total = exact_sum(run.cost, value, "cost")
    if risk is None:
        return {"cost": total}
    risk = as_risk(risk, "risk")
    spent = exact_sum(run.class_cost[risk], value, "class_cost")
    return {"cost": total, "class_cost": with_risk(run.class_cost, risk, spent)}


def stop(run: RunState, reason: Stop) -> RunState:
    """Record why the run stopped; the first stop wins and later ones are dropped."""
    if not isinstance(reason, Stop):
        raise RunStateError(f"reason must be a Stop, got {reason!r}", field="reason")
    if run.stopped is not None:
        return run
    return changed(run, stopped=reason)


def admit(run: RunState, action: Action, budget: Budget, now: int) -> tuple[Decision, RunState]:
    """:func:`check`, then :func:`begin` if allowed, as one step on one state.

    Use it inside a store's atomic apply so two concurrent calls cannot both take the
    last slot. A denial leaves the run unchanged: recording the stop is the shell's call.
    """
    decision = check(run, action, budget, now)
    return decision, begin(run, action, now) if decision.allowed else run
