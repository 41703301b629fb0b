"""Calibrating a run budget on recorded runs whose outcome is known.

Theory of operation
-------------------
A budget is right for an agent when it stops the runs that go nowhere early and leaves
the ones that succeed alone. Given recorded runs with their outcome (``success`` or
``failure``), :func:`suggest` proposes the tightest budget that stops at most a rate of
the successful runs the user names, the way ``toolbreaker tune`` searches policies for
breakers.

Each run is measured once, under a *probe* budget whose searched limits are wide open
(:func:`probe`): before each request, :func:`~toolbreaker.core._run.limits.needs` says
the least value of each limit that lets it run (its :class:`Profile`). A run is stopped
by a candidate budget at the first request some limit of the candidate does not let
through (:func:`stops_at`); until then the run is the same under the candidate as under
the probe, so nothing else needs replaying. The limits searched (:data:`LIMITS`):
``max_tool_calls``, each class's ``max_calls`` and ``max_repeats``, ``loop_cycles``,
``max_cost`` (when the runs report costs) and ``deadline_ms`` (when they have a clock).
The others stay as the base budget has them (``max_tool_failures``, the write
breaker's ``max_uncertain_side_effects``, class cost limits, prices ...): a run they
touch under the probe (a tool stopped, writes blocked, a loop no ``loop_cycles`` lets
through) is touched under every candidate.

The search (:func:`suggest`) starts from the loosest candidate, where every limit lets
every successful run through (so only what the search cannot change stops one), and
tightens one limit a step at a time, to the largest value a successful run it still
lets through needs, choosing each time the step that saves the most tool calls of
failed runs per successful run newly stopped (steps that stop no new successful run
first), while the successful runs stopped stay within ``rate``. A limit no successful
run reaches (a class they never call) is left as the base budget has it. Costs and
deadlines are rounded up to two significant digits (a budget a person reads), never
below what a run let through needs. Pure: the profiles are data; nothing is replayed
here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final, Literal

from toolbreaker.core._run._values import RISK_CLASSES, RiskClass
from toolbreaker.core._run.budget import Budget, ClassLimits
from toolbreaker.core._run.limits import Needs
from toolbreaker.core._run.state import MAX_LOOP_CYCLES
from toolbreaker.errors import PolicyError

__all__ = [
    "LIMITS",
    "Profile",
    "RunOutcome",
    "Suggestion",
    "limits_of",
    "probe",
    "stops_at",
    "suggest",
    "with_limits",
]

#: What a recorded run achieved, as the user's outcomes say.
RunOutcome = Literal["success", "failure"]

#: The limits :func:`suggest` searches, in the order ties are broken.
LIMITS: Final = (
    "max_tool_calls",
    *(f"classes.{risk}.max_calls" for risk in RISK_CLASSES),
    *(f"classes.{risk}.max_repeats" for risk in RISK_CLASSES),
    "loop_cycles",
    "max_cost",
    "deadline_ms",
)
#: Wide enough that no recorded run reaches it.
_OPEN: Final = 10**9

Limits = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Profile:
    """One recorded run as calibration sees it (measured under :func:`probe`).

    Attributes:
        name: the run's name (its file).
        outcome: ``success``, ``failure``, or ``None`` when not known.
        needs: for each request the run machine checked, in order: its risk class and
            what it needed (:class:`~toolbreaker.core._run.limits.Needs`).
        touched: a limit the search leaves as it is touched the run under the probe (a
            tool stopped, writes blocked, a stop no searched limit lifts).
        calls: the tool calls the recording holds.
        cost: what the recording spent in all (tool calls and model steps).
    """

    name: str
    outcome: RunOutcome | None
    needs: tuple[tuple[RiskClass, Needs], ...]
    touched: bool
    calls: int
    cost: Decimal


def probe(budget: Budget) -> Budget:
    """``budget`` with every searched limit wide open: what a run is measured under."""
    classes = {
        risk: ClassLimits(max_calls=None, max_repeats=_OPEN, max_cost=budget.classes[risk].max_cost)
        for risk in RISK_CLASSES
    }
    return dataclasses.replace(
        budget,
        max_tool_calls=_OPEN,
        max_repeats=_OPEN,
        loop_cycles=MAX_LOOP_CYCLES,
        max_cost=None,
        deadline_ms=None,
        classes=classes,
    )


def limits_of(budget: Budget) -> Limits:
    """The searched limits of ``budget`` (:data:`LIMITS`), by name."""
    found: Limits = {
        "max_tool_calls": budget.max_tool_calls,
        "loop_cycles": budget.loop_cycles,
        "max_cost": budget.max_cost,
        "deadline_ms": budget.deadline_ms,
    }
    for risk in RISK_CLASSES:
        found[f"classes.{risk}.max_calls"] = budget.classes[risk].max_calls
        found[f"classes.{risk}.max_repeats"] = budget.repeats_for(risk)[0]
    return found


def with_limits(budget: Budget, limits: Mapping[str, Any]) -> Budget:
    """``budget`` with the searched limits set to ``limits``.

    Each class's repeat limit is set on the class (left to the budget's own
    ``max_repeats`` when it is that); its cost limit is kept.
    """
    classes = {}
    for risk in RISK_CLASSES:
        repeats = limits[f"classes.{risk}.max_repeats"]
        if budget.classes[risk].max_repeats is None and repeats == budget.max_repeats:
            repeats = None  # as it was: the budget's own repeat limit
        classes[risk] = ClassLimits(
            max_calls=limits[f"classes.{risk}.max_calls"],
            max_repeats=repeats,
            max_cost=budget.classes[risk].max_cost,
        )
    return dataclasses.replace(
        budget,
        max_tool_calls=limits["max_tool_calls"],
        loop_cycles=limits["loop_cycles"],
        max_cost=limits["max_cost"],
        deadline_ms=limits["deadline_ms"],
        classes=classes,
    )


def _blocks(risk: RiskClass, need: Needs, limits: Limits, budget: Budget) -> bool:
    """Whether ``limits`` (and ``budget``'s other limits) refuse a request that needed ``need``."""
    deadline = limits["deadline_ms"]
    if deadline is not None and need.elapsed >= deadline:
        return True
    if need.blocked:
        return False  # refused by the write breaker: no other limit is asked
    max_cost = limits["max_cost"]
    class_cost = budget.classes[risk].max_cost
    class_calls = limits[f"classes.{risk}.max_calls"]
    return (
        (max_cost is not None and need.cost >= max_cost)
        or (class_cost is not None and need.class_cost >= class_cost)
        or need.calls > limits["max_tool_calls"]
        or (class_calls is not None and need.class_calls > class_calls)
        or need.loop_cycles > limits["loop_cycles"]
        or need.repeats > limits[f"classes.{risk}.max_repeats"]
    )


def stops_at(profile: Profile, limits: Limits, budget: Budget) -> int | None:
    """The index of the request at which ``limits`` stop the run, or ``None``."""
    for i, (risk, need) in enumerate(profile.needs):
        if _blocks(risk, need, limits, budget):
            return i
    return None


def _saved(profile: Profile, at: int | None) -> int:
    """Tool calls of the recording a stop at request ``at`` saves."""
    if at is None:
        return 0
    return profile.calls - (profile.needs[at][1].calls - 1)


@dataclasses.dataclass(frozen=True, slots=True)
class Suggestion:
    """What :func:`suggest` proposes, and what it found on the way.

    Attributes:
        budget: the suggested budget (the base one with the searched limits set).
        limits: the searched limits it sets, by name (:data:`LIMITS`).
        allowed: the successful runs the rate lets it stop.
        false_stops: the successful runs it stops (or touches otherwise).
        fixed: the successful runs touched whatever the searched limits (a tool
            stopped, writes blocked, a loop no ``loop_cycles`` lets through): when more
            than ``allowed``, no budget of the search meets the rate.
        successes: the successful runs measured.
        failures: the failed runs measured.
        saved: tool calls of failed runs it saves (predicted from the profiles).
    """

    budget: Budget
    limits: Mapping[str, Any]
    allowed: int
    false_stops: int
    fixed: int
    successes: int
    failures: int
    saved: int

    @property
    def meets_rate(self) -> bool:
        """Whether it stops no more successful runs than the rate allows."""
        return self.false_stops <= self.allowed


def _ceiling(value: Decimal | int, above: bool) -> Decimal:
    """``value`` rounded up to two significant digits; strictly above it with ``above``."""
    amount = Decimal(value)
    if amount <= 0:
        return Decimal(1) if above else Decimal(0)
    exponent = amount.adjusted() - 1
    step = Decimal(1).scaleb(exponent)
    rounded = (amount / step).to_integral_value(rounding=ROUND_CEILING) * step
    if above and rounded <= amount:
        rounded += step
    return rounded


def _candidates(name: str, profiles: Sequence[Profile]) -> list[Any]:
    """The values ``name`` may take, loosest first: what each successful run needs of it."""
    found: set[Any] = set()
    for profile in profiles:
        if profile.outcome != "success":
            continue
        top: Any = None
        for risk, need in profile.needs:
            value = _need(name, risk, need)
            if value is not None and (top is None or value > top):
                top = value
        if top is not None:
            found.add(top)
    if name in ("max_cost", "deadline_ms") and not any(found):
        return []  # the runs report no cost (or have no clock): nothing to calibrate on
    values: list[Any]
    if name == "max_cost":
        values = [_ceiling(v, above=True) for v in found]
    elif name == "deadline_ms":
        values = [int(_ceiling(v, above=True)) for v in found]
    elif name == "loop_cycles":
        values = [max(2, v) for v in found if v <= MAX_LOOP_CYCLES]
    else:
        values = list(found)
    return sorted(set(values), reverse=True)


def _need(name: str, risk: RiskClass, need: Needs) -> Any:
    """What the request needs of limit ``name`` (``None``: the limit does not concern it)."""
    if name == "deadline_ms":
        return need.elapsed
    if need.blocked:
        return None
    if name == "max_tool_calls":
        return need.calls
    if name == "loop_cycles":
        return need.loop_cycles
    if name == "max_cost":
        return need.cost
    _, of, kind = name.split(".")
    if of != risk:
        return None
    return need.class_calls if kind == "max_calls" else need.repeats


def suggest(profiles: Iterable[Profile], rate: float, base: Budget) -> Suggestion:
    """The tightest budget that stops at most ``rate`` of the successful runs.

    Args:
        profiles: the measured runs (their outcome known, else they are not counted).
        rate: the share of successful runs it may stop, from 0 to 1.
        base: the budget whose other fields it keeps (and whose limits it keeps where no
            successful run needs them).

    Raises:
        PolicyError: ``rate`` is not a number from 0 to 1, or no run succeeded.
    """
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise PolicyError(f"the false-stop rate must be from 0 to 1, got {rate!r}", field="rate")
    runs = [p for p in profiles if p.outcome is not None]
    successes = [p for p in runs if p.outcome == "success"]
    failures = [p for p in runs if p.outcome == "failure"]
    if not successes:
        raise PolicyError("no run succeeded: a budget cannot be calibrated on failures alone")
    allowed = math.floor(rate * len(successes) + 1e-9)
    options = {name: _candidates(name, runs) for name in LIMITS}
    current = limits_of(base)
    for name, values in options.items():
        if values:
            current[name] = values[0]  # the loosest value every successful run passes
    index = dict.fromkeys(LIMITS, 0)
    stopped, saved = _judge(runs, current, base)
    while True:
        best: tuple[tuple[float, int, int], str, Limits, int, int] | None = None
        for order, name in enumerate(LIMITS):
            position = index[name] + 1
            if position >= len(options[name]):
                continue
            trial = {**current, name: options[name][position]}
            trial_stopped, trial_saved = _judge(runs, trial, base)
            if trial_stopped > allowed:
                continue
            added, gain = trial_stopped - stopped, trial_saved - saved
            key = (math.inf if added == 0 else gain / added, gain, -order)
            if best is None or key > best[0]:
                best = (key, name, trial, trial_stopped, trial_saved)
        if best is None:
            break
        _, chosen, current, stopped, saved = best
        index[chosen] += 1
    fixed = sum(1 for p in successes if p.touched)
    return Suggestion(
        budget=with_limits(base, current),
        limits={name: current[name] for name in LIMITS},
        allowed=allowed,
        false_stops=stopped,
        fixed=fixed,
        successes=len(successes),
        failures=len(failures),
        saved=saved,
    )


def _judge(runs: Sequence[Profile], limits: Limits, base: Budget) -> tuple[int, int]:
    """The successful runs ``limits`` stop, and the calls of failed runs they save.

    A successful run a limit the search leaves as it is touches counts as stopped.
    """
    stopped = saved = 0
    for profile in runs:
        at = stops_at(profile, limits, base)
        if profile.outcome == "success":
            stopped += at is not None or profile.touched
        else:
            saved += _saved(profile, at)
    return stopped, saved
