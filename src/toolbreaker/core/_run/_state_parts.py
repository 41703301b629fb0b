"""The values a run state is made of: an action, a stop, its history and tallies, what fired.

Small frozen records, each checking its own fields and (a stop, a fired condition)
writing and reading its own JSON: :class:`Action` (one intended tool call),
:class:`Stop` (why a run stopped, with the conditions it may name), :class:`Attempt`
and :class:`Tally` (what the run remembers of the actions it began) and :class:`Fired`
(a condition that fired, with its effect). They hold no run and decide nothing, so they
live apart from :class:`~toolbreaker.core._run.state.RunState`, which is built from them;
:mod:`toolbreaker.core._run.state` re-exports every name here, and that is where they are
imported from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from toolbreaker.core._run._values import (
    MAX_NAME,
    RISK_CLASSES,
    RiskClass,
    as_count,
    as_name,
    as_risk,
)
from toolbreaker.errors import RunStateError

__all__ = [
    "BUDGET_CONDITIONS",
    "EFFECTS",
    "PRECEDENCE",
    "RUNNING",
    "STOP_CONDITIONS",
    "Action",
    "Attempt",
    "Effect",
    "Fired",
    "Stop",
    "Tally",
    "action_for",
    "attempt_of",
    "tally_of",
]

#: The conditions :func:`~toolbreaker.core._run.limits.check` can name, in its order.
PRECEDENCE: Final = (
    "deadline",
    "uncertain-side-effect",
    "max-cost",
    "class-max-cost",
    "max-tool-calls",
    "class-max-calls",
    "loop",
    "repeated-action",
)
#: The stops a larger budget lifts (``RunGuard.extend``): time, money and counts.
BUDGET_CONDITIONS: Final = frozenset(
    {"deadline", "max-cost", "class-max-cost", "max-tool-calls", "class-max-calls"}
)
#: Every condition a :class:`Stop` may carry. ``operator`` and ``dependency-open`` are set
#: by shells' events; ``over-budget`` (a call whose cost reservation the budget cannot
#: cover, refused without stopping the run) and ``tool-failures`` (a tool that failed too
#: often with one error class, no longer called in the run) by the run machine.
#: ``budget-unavailable`` is what a guard sharing its run through a store answers while
#: the store cannot be read: no call is admitted against an unknown budget (it is never
#: recorded in a state: nothing could be written).
STOP_CONDITIONS: Final = (
    *PRECEDENCE,
    "operator",
    "dependency-open",
    "over-budget",
    "tool-failures",
    "extended",
    "budget-unavailable",
)

#: The condition a stop packet names while the run has not stopped.
RUNNING: Final = "running"


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """One intended tool call, as the budget sees it.

    Attributes:
        tool: the tool name.
        fingerprint: the semantic fingerprint of the call (see
            :mod:`toolbreaker.core._run.fingerprint`); equal intentions share it.
        risk: the tool's risk class.
        recovery: a read-only status check or reconcile call that may still run after
            the run stopped. Only reads can be recovery actions; the flag on a write
            grants nothing.
    """

    tool: str
    fingerprint: str
    risk: RiskClass = "read"
    recovery: bool = False

    def __post_init__(self) -> None:
        tool, fingerprint = self.tool, self.fingerprint
        if (  # the common case in one expression (one is built for every call)
            type(tool) is str
            and 0 < len(tool) <= MAX_NAME
            and type(fingerprint) is str
            and 0 < len(fingerprint) <= MAX_NAME
            and self.risk in RISK_CLASSES
            and type(self.recovery) is bool
        ):
            return
        as_name(self.tool, "tool")
        as_name(self.fingerprint, "fingerprint")
        as_risk(self.risk, "risk")
        if type(self.recovery) is not bool:
            raise RunStateError(
                f"recovery must be a boolean, got {self.recovery!r}", field="recovery"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class Stop:
    """Why a run stopped (or would stop): the exact condition and its numbers.

    Attributes:
        condition: one of :data:`STOP_CONDITIONS`.
        detail: the condition in words with the numbers, e.g. ``"tool call 51 exceeds
            max_tool_calls=50"``.
        at: when it was decided, integer ms on the run's monotonic clock.
        risk: the risk class of the action that crossed the limit, when there was one.
        fingerprint: the fingerprint of that action, when there was one.
    """

    condition: str
    detail: str
    at: int
    risk: RiskClass | None = None
    fingerprint: str | None = None

    def __post_init__(self) -> None:
        if self.condition not in STOP_CONDITIONS:
            raise RunStateError(
                f"condition must be one of {', '.join(STOP_CONDITIONS)}, got {self.condition!r}",
                field="condition",
            )
        if not isinstance(self.detail, str):
            raise RunStateError(f"detail must be a string, got {self.detail!r}", field="detail")
        as_count(self.at, "at")
        if self.risk is not None:
            as_risk(self.risk, "risk")
        if self.fingerprint is not None:
            as_name(self.fingerprint, "fingerprint")

    def to_dict(self) -> dict[str, Any]:
        """The stop as a JSON-ready dict."""
        return {
            "condition": self.condition,
            "detail": self.detail,
            "at": self.at,
            "risk": self.risk,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_dict(cls, data: object) -> Stop:
        """Load a stop written by :meth:`to_dict`.

        Raises:
            RunStateError: the data is not exactly such a dict.
        """
        fields = ("condition", "detail", "at", "risk", "fingerprint")
        if not isinstance(data, Mapping) or set(data) != set(fields):
            raise RunStateError(f"a stop must be an object with keys {', '.join(fields)}")
        return cls(**{name: data[name] for name in fields})


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One entry of a run's recent history: an action that began.

    Attributes:
        tool: the tool name (stop details name cycles by their tools).
        fingerprint: the action's fingerprint.
        evidence: the run's evidence count when it began.
    """

    tool: str
    fingerprint: str
    evidence: int

    def __post_init__(self) -> None:
        tool, fingerprint, evidence = self.tool, self.fingerprint, self.evidence
        if (  # the common case in one expression (one is built for every call)
            type(tool) is str
            and 0 < len(tool) <= MAX_NAME
            and type(fingerprint) is str
            and 0 < len(fingerprint) <= MAX_NAME
            and type(evidence) is int
            and evidence >= 0
        ):
            return
        as_name(self.tool, "tool")
        as_name(self.fingerprint, "fingerprint")
        as_count(self.evidence, "evidence")


@dataclasses.dataclass(frozen=True, slots=True)
class Tally:
    """How one fingerprint has come back during a run.

    Attributes:
        fingerprint: the action's fingerprint.
        occurrences: how many times it began.
        evidence: the run's evidence count when its last occurrence began; for a write,
            raised to the count after its result (and its own change) when it finished.
            A new occurrence with the run's evidence still at this value is a repeat.
        repeats: the repeat number of its last occurrence.
    """

    fingerprint: str
    occurrences: int
    evidence: int
    repeats: int

    def __post_init__(self) -> None:
        fingerprint, occurrences, repeats = self.fingerprint, self.occurrences, self.repeats
        if (  # the common case in one expression (one is built for every call)
            type(fingerprint) is str
            and 0 < len(fingerprint) <= MAX_NAME
            and type(self.evidence) is int
            and self.evidence >= 0
            and type(repeats) is int
            and repeats >= 0
            and type(occurrences) is int
            and occurrences > repeats
        ):
            return
        as_name(self.fingerprint, "fingerprint")
        as_count(self.evidence, "evidence")
        as_count(self.repeats, "repeats")
        if as_count(self.occurrences, "occurrences") <= self.repeats:
            raise RunStateError(
                f"occurrences ({self.occurrences}) must exceed repeats ({self.repeats})",
                field="occurrences",
            )


_new: Final = object.__new__
_set: Final = object.__setattr__


def tally_of(fingerprint: str, occurrences: int, evidence: int, repeats: int) -> Tally:
    """A :class:`Tally` of values a transition of the core made from checked ones.

    Unchecked, and so for the core's transitions alone (as
    :func:`~toolbreaker.core._run.state.changed`): a run builds one or two per call, and
    checking values it made itself (a count plus one, a fingerprint its action checked)
    cost more than the rest of the record.
    """
    tally: Tally = _new(Tally)
    _set(tally, "fingerprint", fingerprint)
    _set(tally, "occurrences", occurrences)
    _set(tally, "evidence", evidence)
    _set(tally, "repeats", repeats)
    return tally


def action_for(action: Action, fingerprint: str) -> Action:
    """``action`` (a checked one) for another call of its tool: the call's ``fingerprint``.

    Unchecked, as :func:`tally_of`: for a fingerprint
    :func:`~toolbreaker.core._run.fingerprint.fingerprint` made (64 hex digits). A run
    guard's quiet path builds one for every call of a tool whose action it checked once.
    """
    found: Action = _new(Action)
    _set(found, "tool", action.tool)
    _set(found, "fingerprint", fingerprint)
    _set(found, "risk", action.risk)
    _set(found, "recovery", action.recovery)
    return found


def attempt_of(tool: str, fingerprint: str, evidence: int) -> Attempt:
    """An :class:`Attempt` of checked values, unchecked (see :func:`tally_of`)."""
    attempt: Attempt = _new(Attempt)
    _set(attempt, "tool", tool)
    _set(attempt, "fingerprint", fingerprint)
    _set(attempt, "evidence", evidence)
    return attempt


#: Why a condition fired: it stopped the run, blocked its writes, refused a call its
#: budget could not cover (the first such refusal of each tool), stopped one tool, or an
#: operator raised the budget and resumed the run (condition ``extended``).
Effect = Literal["stopped", "writes-blocked", "refused", "tool-stopped", "resumed"]
#: The effects, in the order they are listed.
EFFECTS: Final[tuple[Effect, ...]] = get_args(Effect)


@dataclasses.dataclass(frozen=True, slots=True)
class Fired:
    """One condition that fired in a run: it stopped the run or blocked its writes.

    A run keeps them in the order they fired (the run state's
    :attr:`~toolbreaker.core._run.state.RunState.conditions`), so a stop packet shows the
    whole story: writes blocked by an unknown outcome at step 2, then the run stopped on
    a repeat at step 9, not the last condition alone.

    Attributes:
        stop: the condition, its words and numbers, when, and the action's risk class and
            fingerprint (when an action crossed it).
        effect: ``stopped`` or ``writes-blocked``.
        step: the run's step it fired at (the run state's
            :attr:`~toolbreaker.core._run.state.RunState.steps`: the tool requests the run was
            asked about, numbered from 1); 0 before the first step (a resumed run's
            unresolved writes).
        tool: the tool of the step's action, when there was one.
    """

    stop: Stop
    effect: Effect
    step: int
    tool: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stop, Stop):
            raise RunStateError(f"stop must be a Stop, got {self.stop!r}", field="stop")
        if self.effect not in EFFECTS:
            raise RunStateError(
                f"effect must be one of {', '.join(EFFECTS)}, got {self.effect!r}",
                field="effect",
            )
        as_count(self.step, "step")
        if self.tool is not None:
            as_name(self.tool, "tool")

    def to_dict(self) -> dict[str, Any]:
        """The condition as a JSON-ready dict: the stop's fields, the effect, step and tool."""
        return {**self.stop.to_dict(), "effect": self.effect, "step": self.step, "tool": self.tool}

    @classmethod
    def from_dict(cls, data: object) -> Fired:
        """Load a condition written by :meth:`to_dict`.

        Raises:
            RunStateError: the data is not exactly such a dict.
        """
        own = ("effect", "step", "tool")
        stop_fields = ("condition", "detail", "at", "risk", "fingerprint")
        if not isinstance(data, Mapping) or set(data) != {*stop_fields, *own}:
            raise RunStateError(
                f"a fired condition must be an object with keys {', '.join((*stop_fields, *own))}"
            )
        stop = Stop.from_dict({name: data[name] for name in stop_fields})
        return cls(stop, data["effect"], data["step"], data["tool"])
