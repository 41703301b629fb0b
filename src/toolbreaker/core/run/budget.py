"""Run budgets and loop detection: the pure counters behind a run guard.

Theory of operation
-------------------
A *run* is one user task. :class:`RunState` counts what the run has done: tool calls in
total and per risk class, cost, writes whose outcome is unknown, the distinct results
it has observed (its *evidence*), its recent actions and, per action fingerprint, how
often that action came back without new evidence. :class:`Budget` says how far a run
may go. Three pure functions move a run forward, one tool call at a time::

    decision = check(run, action, budget, now)   # before: may this action run?
    run = begin(run, action, now)                # it runs: count the attempt
    run = finish(run, action, outcome, now, evidence=digest, cost=cost)   # after

:func:`check` judges the run as it would be with the action counted and names the first
limit that would be crossed, in the order of :data:`PRECEDENCE`. It records nothing: a
shell turns a denial into the run's stop with :func:`stop` (the first stop is kept).
A stopped run denies everything except *recovery reads* (read-only status checks and
reconcile calls), and at most ``max_recovery_calls`` of those. :func:`check` and
:func:`begin` must be applied to the same state atomically, or two concurrent calls can
both take the last slot; :func:`admit` does both in one step for stores that apply a
function under a lock or in a transaction.

Evidence, repeats and loops
---------------------------
``finish`` reports a digest of the observed result; the run's ``evidence`` grows only
when that digest was never seen in the run. An action whose fingerprint comes back while
``evidence`` has not grown since its previous occurrence is a repeat; a repeat number
above the applicable ``max_repeats`` stops the run (new evidence resets the number to 0,
the first occurrence is never a repeat). For a read, "since" counts from when the
previous occurrence began, so its own new result licenses the next one (a status that
changed, the next message of a queue); for a write it counts from when the previous
occurrence finished, because a write's own result (a receipt, a fresh id) is no reason
to write again.

A cycle of 2 to 4 distinct fingerprints that the candidate action completes
``loop_cycles`` times in a row is a loop; 2 times are enough when ``evidence`` has not
grown since the second pass began. Alternating plans (search, refine, search, refine)
are caught this way although no single action repeats without new evidence.

Precedence
----------
When several limits are crossed at once, the stop names the first of: an earlier stop
(kept as it was), ``deadline``, ``uncertain-side-effect``, ``max-cost``,
``class-max-cost``, ``max-tool-calls``, ``class-max-calls``, ``loop``,
``repeated-action``. Time first, because nothing buys it back; then the safety of
external state, because an unknown write needs an operator before anything else; then
money, then counts, run-wide before per class; behaviour patterns last, because they
concern only this action and a different action might pass them.

Bounds
------
The state stays small whatever the agent does: the last :data:`HISTORY_LIMIT` actions
(enough for a 4-cycle repeated :data:`MAX_LOOP_CYCLES` times), the tallies of the
:data:`TALLY_LIMIT` most recently begun fingerprints and the last :data:`EVIDENCE_LIMIT`
distinct result digests. Beyond those bounds the oldest are forgotten: an evicted
fingerprint counts as new and an evicted digest as new evidence, which can only make
detection later, never earlier; the call and cost limits remain the backstop. Digests
are hashed again to 16 hex digits when recorded, so a caller that hands in a raw result
never leaks it into journals or stop packets.

Costs are :class:`~decimal.Decimal`, never floats, added exactly without consulting the
thread's decimal context; amounts lie in ``[0, 10**18)`` with at most 18 decimal places.
"""

from __future__ import annotations

import dataclasses
import decimal
import hashlib
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from toolbreaker.core.canonical import canonical_json
from toolbreaker.core.config import known_fields, load_toml
from toolbreaker.errors import PolicyError, RunStateError

__all__ = [
    "DEFAULT_CLASSES",
    "EVIDENCE_LIMIT",
    "HISTORY_LIMIT",
    "MAX_CYCLE",
    "MAX_LOOP_CYCLES",
    "OUTCOMES",
    "PRECEDENCE",
    "RISK_CLASSES",
    "RUN_SCHEMA",
    "STOP_CONDITIONS",
    "TALLY_LIMIT",
    "WRITES",
    "Action",
    "Attempt",
    "Budget",
    "ClassLimits",
    "Decision",
    "Outcome",
    "RiskClass",
    "RunState",
    "RunStateError",
    "Stop",
    "Tally",
    "add_cost",
    "admit",
    "begin",
    "check",
    "finish",
    "stop",
]

#: How much damage a tool call can do: a read, a write that can be undone, or not.
RiskClass = Literal["read", "reversible_write", "irreversible"]
#: How a call ended; ``unknown`` means a write may or may not have happened.
Outcome = Literal["success", "failure", "unknown", "ignored"]

#: The risk classes, in the order they are listed everywhere.
RISK_CLASSES: Final[tuple[RiskClass, ...]] = ("read", "reversible_write", "irreversible")
#: The outcomes :func:`finish` accepts.
OUTCOMES: Final[tuple[Outcome, ...]] = ("success", "failure", "unknown", "ignored")

#: The conditions :func:`check` can name, in the order it evaluates them.
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
#: Every condition a :class:`Stop` may carry; the last two are set by shells.
STOP_CONDITIONS: Final = (*PRECEDENCE, "operator", "dependency-open")

#: The longest cycle loop detection looks for.
MAX_CYCLE: Final = 4
#: The largest ``loop_cycles`` a budget may ask for; it bounds the history kept.
MAX_LOOP_CYCLES: Final = 8
#: Recent actions kept: enough to see a :data:`MAX_CYCLE` cycle :data:`MAX_LOOP_CYCLES` times.
HISTORY_LIMIT: Final = MAX_CYCLE * MAX_LOOP_CYCLES
#: Per-fingerprint tallies kept, the most recently begun ones.
TALLY_LIMIT: Final = 256
#: Distinct result digests kept, the most recently observed ones.
EVIDENCE_LIMIT: Final = 256
#: The schema tag of :meth:`RunState.to_dict`.
RUN_SCHEMA: Final = "toolbreaker.run/v2"
_RUN_SCHEMA_V1: Final = "toolbreaker.run/v1"

#: The risk classes that change something outside.
WRITES: Final = frozenset({"reversible_write", "irreversible"})
_WRITES: Final = WRITES
_MAX_NAME: Final = 256
_DIGEST_LENGTH: Final = 16
_HEX: Final = frozenset("0123456789abcdef")
_AMOUNT_BOUND: Final = Decimal("1e18")
_AMOUNT_PLACES: Final = 18
_ZERO: Final = Decimal(0)

_V = TypeVar("_V")


class _RiskMap(Mapping[RiskClass, _V]):
    """An immutable, hashable mapping with exactly one value per risk class."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[RiskClass, _V]) -> None:
        self._values = tuple(values[risk] for risk in RISK_CLASSES)

    def __getitem__(self, key: RiskClass) -> _V:
        try:
            return self._values[RISK_CLASSES.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[RiskClass]:
        return iter(RISK_CLASSES)

    def __len__(self) -> int:
        return len(RISK_CLASSES)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _RiskMap):
            return self._values == other._values
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return repr(dict(self))


# -- values -------------------------------------------------------------------------------


def _fraction_digits(value: Decimal) -> int:
    """Decimal places of ``value`` once trailing zeros are dropped; reads no context."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite values only
    zeros = 0
    for digit in reversed(digits):
        if digit:
            break
        zeros += 1
    if zeros == len(digits):
        return 0
    return max(0, -(exponent + zeros))


def _amount(value: object) -> Decimal:
    """``value`` as a bounded, non-negative Decimal; the error says what is wrong."""
    if isinstance(value, float):
        raise TypeError(
            f"must be a decimal string or an integer, not the float {value!r} "
            f'(write "{value!r}" in quotes to avoid binary rounding)'
        )
    if isinstance(value, bool) or not isinstance(value, (Decimal, int, str)):
        raise TypeError(f"must be a decimal string or an integer, got {value!r}")
    try:
        # Decimal(str) is exact; the context only decides whether junk raises or is NaN.
        amount = value if isinstance(value, Decimal) else Decimal(value)
    except (decimal.InvalidOperation, ValueError):
        raise ValueError(f"must be a decimal number, got {value!r}") from None
    if not amount.is_finite():
        raise ValueError(f"must be a finite number, got {value!r}")
    if amount < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    if amount >= _AMOUNT_BOUND:
        raise ValueError(f"must be below 10**18, got {value!r}")
    if _fraction_digits(amount) > _AMOUNT_PLACES:
        raise ValueError(f"must have at most {_AMOUNT_PLACES} decimal places, got {value!r}")
    return amount


def _add(left: Decimal, right: Decimal, field: str) -> Decimal:
    """The exact sum of two amounts, independent of the thread's decimal context."""
    exact = decimal.Context(prec=40, traps=[decimal.Inexact, decimal.InvalidOperation])
    total = exact.add(left, right)
    if total >= _AMOUNT_BOUND:
        raise RunStateError(f"{field} would reach 10**18", field=field)
    return total


def _decimal_text(value: Decimal) -> str:
    """Fixed-point text without trailing zeros: equal values give equal text."""
    if not value:
        return "0"
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _policy_int(value: object, field: str, minimum: int) -> None:
    if type(value) is not int:
        raise PolicyError(f"{field} must be an integer, got {value!r}", field=field)
    if value < minimum:
        raise PolicyError(f"{field} must be at least {minimum}, got {value}", field=field)


def _policy_amount(value: object, field: str) -> Decimal | None:
    if value is None:
        return None
    try:
        amount = _amount(value)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{field} {exc}", field=field) from None
    if not amount:
        raise PolicyError(f"{field} must be positive, got {value!r}", field=field)
    return amount


def _count(value: object, field: str) -> int:
    if type(value) is not int or value < 0:
        raise RunStateError(f"{field} must be a non-negative integer, got {value!r}", field=field)
    return value


def _name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise RunStateError(
            f"{field} must be a non-empty string of at most {_MAX_NAME} characters, got {value!r}",
            field=field,
        )
    return value


def _risk(value: object, field: str) -> RiskClass:
    if value not in RISK_CLASSES:
        raise RunStateError(
            f"{field} must be one of {', '.join(RISK_CLASSES)}, got {value!r}", field=field
        )
    return value


def _times(n: int) -> str:
    return "1 time" if n == 1 else f"{n} times"


# -- configuration ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ClassLimits:
    """Limits for the calls of one risk class within a run; ``None`` means no class limit.

    Attributes:
        max_calls: calls of this class allowed in the run; 0 forbids the class.
        max_repeats: repeats without new evidence allowed for one action of this class;
            ``None`` uses the budget's ``max_repeats``.
        max_cost: cost recorded against this class at which its next call is denied.
    """

    max_calls: int | None = None
    max_repeats: int | None = None
    max_cost: Decimal | None = None

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_repeats"):
            value = getattr(self, name)
            if value is not None:
                _policy_int(value, name, 0)
        object.__setattr__(self, "max_cost", _policy_amount(self.max_cost, "max_cost"))

    def to_dict(self) -> dict[str, Any]:
        """The limits as a JSON-ready dict; the cost as exact text."""
        return {
            "max_calls": self.max_calls,
            "max_repeats": self.max_repeats,
            "max_cost": None if self.max_cost is None else _decimal_text(self.max_cost),
        }


#: The per-class limits of a :class:`Budget` that names none: five repeated searches are
#: annoying, five repeated refunds are an incident.
DEFAULT_CLASSES: Final[Mapping[RiskClass, ClassLimits]] = _RiskMap(
    {
        "read": ClassLimits(max_calls=40),
        "reversible_write": ClassLimits(max_calls=5, max_repeats=1),
        "irreversible": ClassLimits(max_calls=3, max_repeats=0),
    }
)

_BUDGET_INTS: Final = (
    ("max_tool_calls", 1),
    ("max_repeats", 0),
    ("max_uncertain_side_effects", 0),
    ("loop_cycles", 2),
    ("max_recovery_calls", 0),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """How far one run may go: reviewed configuration, validated at construction.

    Attributes:
        max_tool_calls: tool calls allowed in the run; call ``max_tool_calls + 1`` is denied.
        max_repeats: repeats of one action without new evidence allowed before the run
            stops (the first occurrence is not a repeat); a class limit overrides it.
        max_cost: spent cost at which the next call is denied (a call's own cost is only
            known after it ran, so the total can overshoot by one call).
        deadline_ms: the run's duration from its start; a call at or after
            ``started_at + deadline_ms`` is denied.
        max_uncertain_side_effects: writes with an unknown outcome tolerated; once there
            are more, every further write is denied (the default 0 means one unknown
            write blocks all writes; reads still run).
        loop_cycles: how many times in a row a cycle of 2 to 4 actions makes a loop (2 is
            enough when the repetitions brought no new evidence); at most
            :data:`MAX_LOOP_CYCLES`.
        max_recovery_calls: recovery reads allowed after the run stopped.
        classes: limits per risk class; classes left out keep :data:`DEFAULT_CLASSES`.
        max_calls_per_turn: tool calls one model turn may start (the adapters mark where
            a turn begins, :meth:`~toolbreaker.RunGuard.mark_turn`); a call beyond it is
            *deferred*: not made, not queued, and the model reads that it may issue it
            again next turn. ``None``: no limit (and no key in :meth:`to_dict`).
    """

    max_tool_calls: int = 50
    max_repeats: int = 2
    max_cost: Decimal | None = None
    deadline_ms: int | None = None
    max_uncertain_side_effects: int = 0
    loop_cycles: int = 3
    max_recovery_calls: int = 10
    classes: Mapping[RiskClass, ClassLimits] = DEFAULT_CLASSES
    max_calls_per_turn: int | None = None

    def __post_init__(self) -> None:
        if self.max_calls_per_turn is not None:
            _policy_int(self.max_calls_per_turn, "max_calls_per_turn", 1)
        for name, minimum in _BUDGET_INTS:
            _policy_int(getattr(self, name), name, minimum)
        if self.loop_cycles > MAX_LOOP_CYCLES:
            raise PolicyError(
                f"loop_cycles must be at most {MAX_LOOP_CYCLES}, got {self.loop_cycles}",
                field="loop_cycles",
            )
        if self.deadline_ms is not None:
            _policy_int(self.deadline_ms, "deadline_ms", 1)
        object.__setattr__(self, "max_cost", _policy_amount(self.max_cost, "max_cost"))
        classes = self.classes
        if not isinstance(classes, Mapping):
            raise PolicyError(
                f"classes must map risk classes to limits, got {classes!r}", field="classes"
            )
        merged = dict(DEFAULT_CLASSES)
        for risk, limits in classes.items():
            if risk not in RISK_CLASSES:
                raise PolicyError(
                    f"unknown risk class classes.{risk} (known: {', '.join(RISK_CLASSES)})",
                    field=f"classes.{risk}",
                )
            if not isinstance(limits, ClassLimits):
                raise PolicyError(
                    f"classes.{risk} must be ClassLimits, got {limits!r}", field=f"classes.{risk}"
                )
            merged[risk] = limits
        object.__setattr__(self, "classes", _RiskMap(merged))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budget:
        """Build a budget from a mapping of field names; unknown keys are an error.

        ``classes`` maps risk classes to tables of :class:`ClassLimits` fields; a table
        changes only the keys it names, the others keep their :data:`DEFAULT_CLASSES`
        value. Costs are decimal strings or integers; floats are refused.

        Raises:
            PolicyError: naming the offending field, dotted for class limits
                (``classes.read.max_calls``).
        """
        fields = known_fields(data, cls, "budget")
        if "classes" in fields:
            fields["classes"] = _classes_from(fields["classes"])
        return cls(**fields)

    @classmethod
    def from_toml(cls, path: str | Path) -> Budget:
        """Load a budget from TOML: top-level fields and ``[classes.<risk>]`` tables.

        Errors name the file and, when the offending key can be found, its line.
        """
        budget: Budget = load_toml(path, cls.from_dict)
        return budget

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict; costs as exact text without trailing zeros."""
        return {
            "max_tool_calls": self.max_tool_calls,
            "max_repeats": self.max_repeats,
            "max_cost": None if self.max_cost is None else _decimal_text(self.max_cost),
            "deadline_ms": self.deadline_ms,
            "max_uncertain_side_effects": self.max_uncertain_side_effects,
            "loop_cycles": self.loop_cycles,
            "max_recovery_calls": self.max_recovery_calls,
            "classes": {risk: self.classes[risk].to_dict() for risk in RISK_CLASSES},
            # Only when set: a budget without it keeps its version (and its receipts).
            **(
                {}
                if self.max_calls_per_turn is None
                else {"max_calls_per_turn": self.max_calls_per_turn}
            ),
        }

    @property
    def version(self) -> str:
        """A short SHA-256 of the canonical JSON of the fields; equal budgets share it."""
        return hashlib.sha256(canonical_json(self.to_dict())).hexdigest()[:12]

    def repeats_for(self, risk: RiskClass) -> tuple[int, str]:
        """The repeat limit that applies to ``risk`` and the name of the field it comes from."""
        limit = self.classes[risk].max_repeats
        if limit is None:
            return self.max_repeats, "max_repeats"
        return limit, f"classes.{risk}.max_repeats"


def _classes_from(value: object) -> dict[str, ClassLimits]:
    if not isinstance(value, Mapping):
        raise PolicyError(
            f"classes must be a table of risk classes, got {value!r}", field="classes"
        )
    known = {f.name for f in dataclasses.fields(ClassLimits)}
    out: dict[str, ClassLimits] = {}
    for risk, table in value.items():
        where = f"classes.{risk}"
        if risk not in RISK_CLASSES:
            raise PolicyError(
                f"unknown risk class {where} (known: {', '.join(RISK_CLASSES)})", field=where
            )
        if not isinstance(table, Mapping):
            raise PolicyError(f"{where} must be a table of limits, got {table!r}", field=where)
        for key in table:
            if key not in known:
                raise PolicyError(
                    f"unknown class limit {where}.{key} (known: {', '.join(sorted(known))})",
                    field=f"{where}.{key}",
                )
        try:
            out[risk] = dataclasses.replace(DEFAULT_CLASSES[risk], **table)
        except PolicyError as exc:
            raise PolicyError(f"{where}.{exc.message}", field=f"{where}.{exc.field}") from None
    return out


# -- actions, stops, decisions --------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """One intended tool call, as the budget sees it.

    Attributes:
        tool: the tool name.
        fingerprint: the semantic fingerprint of the call (see
            :mod:`toolbreaker.core.run.fingerprint`); equal intentions share it.
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
        _name(self.tool, "tool")
        _name(self.fingerprint, "fingerprint")
        _risk(self.risk, "risk")
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
        _count(self.at, "at")
        if self.risk is not None:
            _risk(self.risk, "risk")
        if self.fingerprint is not None:
            _name(self.fingerprint, "fingerprint")

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


# -- run state ------------------------------------------------------------------------------


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
        _name(self.tool, "tool")
        _name(self.fingerprint, "fingerprint")
        _count(self.evidence, "evidence")


@dataclasses.dataclass(frozen=True, slots=True)
class Tally:
    """How one fingerprint has come back during a run.

    Attributes:
        fingerprint: the action's fingerprint.
        occurrences: how many times it began.
        evidence: the run's evidence count when its last occurrence began; for a write,
            raised to the count after its result when that occurrence finished. A new
            occurrence with the run's evidence still at this value is a repeat.
        repeats: the repeat number of its last occurrence.
    """

    fingerprint: str
    occurrences: int
    evidence: int
    repeats: int

    def __post_init__(self) -> None:
        _name(self.fingerprint, "fingerprint")
        _count(self.evidence, "evidence")
        _count(self.repeats, "repeats")
        if _count(self.occurrences, "occurrences") <= self.repeats:
            raise RunStateError(
                f"occurrences ({self.occurrences}) must exceed repeats ({self.repeats})",
                field="occurrences",
            )


_NO_CALLS: Final[Mapping[RiskClass, int]] = _RiskMap(dict.fromkeys(RISK_CLASSES, 0))
_NO_COST: Final[Mapping[RiskClass, Decimal]] = _RiskMap(dict.fromkeys(RISK_CLASSES, _ZERO))


@dataclasses.dataclass(frozen=True, slots=True)
class RunState:
    """The counters of one run (one task). Start one with :meth:`RunState.start`.

    Attributes:
        task: the task id.
        started_at: when the run started, integer ms on a monotonic clock.
        calls: tool calls begun, recovery reads included.
        class_calls: tool calls begun per risk class; they sum to ``calls``.
        cost: the cost recorded so far, tool calls and model steps.
        class_cost: the part of ``cost`` recorded against each risk class.
        uncertain: writes whose outcome was unknown.
        evidence: distinct results observed so far.
        recovery_calls: recovery reads begun after the run stopped.
        history: the last :data:`HISTORY_LIMIT` actions begun, oldest first.
        tallies: per fingerprint, the :data:`TALLY_LIMIT` most recently begun, oldest first.
        digests: the last :data:`EVIDENCE_LIMIT` distinct result digests, oldest first.
        stopped: why the run stopped; the first stop is kept.
        writes_blocked: why writes are refused (too many writes with an unknown
            outcome); reads go on. Set and cleared by :mod:`toolbreaker.core.run.machine`.
        turn: model turns begun (counted only under ``Budget.max_calls_per_turn``).
        turn_calls: tool calls begun in the current turn (likewise).
        deferred: calls deferred to a later turn by ``max_calls_per_turn``.

    The three turn counters are left out of :meth:`counters` and :meth:`to_dict` while
    zero, so runs without a turn limit serialise as before.
    """

    task: str
    started_at: int
    calls: int = 0
    class_calls: Mapping[RiskClass, int] = _NO_CALLS
    cost: Decimal = _ZERO
    class_cost: Mapping[RiskClass, Decimal] = _NO_COST
    uncertain: int = 0
    evidence: int = 0
    recovery_calls: int = 0
    history: tuple[Attempt, ...] = ()
    tallies: tuple[Tally, ...] = ()
    digests: tuple[str, ...] = ()
    stopped: Stop | None = None
    writes_blocked: Stop | None = None
    turn: int = 0
    turn_calls: int = 0
    deferred: int = 0

    def __post_init__(self) -> None:
        # Cheap checks only: this runs on every transition. from_dict checks the rest.
        _name(self.task, "task")
        for name in (
            "started_at",
            "calls",
            "uncertain",
            "evidence",
            "recovery_calls",
            *_TURN_KEYS,
        ):
            _count(getattr(self, name), name)
        calls = _risk_map(self.class_calls, "class_calls", _count)
        if sum(calls.values()) != self.calls:
            raise RunStateError(
                f"class_calls sum to {sum(calls.values())}, not calls={self.calls}",
                field="class_calls",
            )
        object.__setattr__(self, "class_calls", calls)
        object.__setattr__(self, "cost", _state_amount(self.cost, "cost"))
        costs = _risk_map(self.class_cost, "class_cost", _state_amount)
        spent = _ZERO
        for risk in RISK_CLASSES:
            spent = _add(spent, costs[risk], "class_cost")
        if spent > self.cost:
            raise RunStateError(
                f"class_cost sum to {_decimal_text(spent)}, more than cost="
                f"{_decimal_text(self.cost)}",
                field="class_cost",
            )
        object.__setattr__(self, "class_cost", costs)
        if self.recovery_calls > self.calls or (self.recovery_calls and self.stopped is None):
            raise RunStateError(
                "recovery_calls count calls begun after a stop", field="recovery_calls"
            )
        for name, limit in (
            ("history", HISTORY_LIMIT),
            ("tallies", TALLY_LIMIT),
            ("digests", EVIDENCE_LIMIT),
        ):
            items = getattr(self, name)
            if type(items) is not tuple or len(items) > limit:
                raise RunStateError(f"{name} must be a tuple of at most {limit}", field=name)
        if len(self.digests) > self.evidence:
            raise RunStateError("more digests than evidence", field="digests")
        for name in ("stopped", "writes_blocked"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Stop):
                raise RunStateError(f"{name} must be a Stop, got {value!r}", field=name)

    @classmethod
    def start(cls, task: str, now: int) -> RunState:
        """A fresh run of ``task`` starting at ``now`` (integer ms, monotonic)."""
        return cls(task=task, started_at=now)

    def counters(self) -> dict[str, Any]:
        """The counters alone, JSON-ready: what a stop packet shows an operator."""
        return {
            "task": self.task,
            "started_at": self.started_at,
            "calls": self.calls,
            "class_calls": dict(self.class_calls),
            "cost": _decimal_text(self.cost),
            "class_cost": {risk: _decimal_text(v) for risk, v in self.class_cost.items()},
            "uncertain": self.uncertain,
            "evidence": self.evidence,
            "recovery_calls": self.recovery_calls,
            "stopped": None if self.stopped is None else self.stopped.to_dict(),
            "writes_blocked": None
            if self.writes_blocked is None
            else self.writes_blocked.to_dict(),
            **{name: getattr(self, name) for name in _TURN_KEYS if getattr(self, name)},
        }

    def to_dict(self) -> dict[str, Any]:
        """The whole state as a JSON-ready dict tagged with :data:`RUN_SCHEMA`.

        Decimals are exact text; :meth:`from_dict` restores an equal state.
        """
        return {
            "schema": RUN_SCHEMA,
            **self.counters(),
            "history": [
                {"tool": a.tool, "fingerprint": a.fingerprint, "evidence": a.evidence}
                for a in self.history
            ],
            "tallies": [
                {
                    "fingerprint": t.fingerprint,
                    "occurrences": t.occurrences,
                    "evidence": t.evidence,
                    "repeats": t.repeats,
                }
                for t in self.tallies
            ],
            "digests": list(self.digests),
        }

    @classmethod
    def from_dict(cls, data: object) -> RunState:
        """Load a state written by :meth:`to_dict`, validating everything.

        Raises:
            RunStateError: a key is missing or unknown, a value has the wrong type or
                range, or the parts contradict each other; ``field`` names the place.
        """
        if not isinstance(data, Mapping):
            raise RunStateError(f"a run state must be an object, got {type(data).__name__}")
        expected = set(_STATE_KEYS) | {name for name in _TURN_KEYS if name in data}
        if data.get("schema") == _RUN_SCHEMA_V1:
            # v1 had no write breaker in the state: it loads with writes not blocked.
            expected.discard("writes_blocked")
        if set(data) != expected:
            missing = sorted(expected - set(data))
            extra = sorted(str(k) for k in set(data) - expected)
            raise RunStateError(
                f"run state keys differ: missing {missing}, unknown {extra}",
                field=(missing or extra)[0],
            )
        if data["schema"] not in (RUN_SCHEMA, _RUN_SCHEMA_V1):
            raise RunStateError(
                f"schema must be {RUN_SCHEMA!r}, got {data['schema']!r}", field="schema"
            )
        state = cls(
            task=data["task"],
            started_at=data["started_at"],
            calls=data["calls"],
            class_calls=data["class_calls"],
            cost=_json_amount(data["cost"], "cost"),
            class_cost=_risk_map(data["class_cost"], "class_cost", _json_amount),
            uncertain=data["uncertain"],
            evidence=data["evidence"],
            recovery_calls=data["recovery_calls"],
            history=_json_items(data["history"], "history", Attempt),
            tallies=_json_items(data["tallies"], "tallies", Tally),
            digests=tuple(
                _json_digest(x, f"digests[{i}]") for i, x in enumerate(_json_list(data, "digests"))
            ),
            stopped=None if data["stopped"] is None else _json_stop(data["stopped"]),
            writes_blocked=None
            if data.get("writes_blocked") is None
            else _json_stop(data["writes_blocked"], "writes_blocked"),
            **{name: data[name] for name in _TURN_KEYS if name in data},
        )
        _check_consistent(state)
        return state


#: Optional counters of :class:`RunState`, present only when non-zero.
_TURN_KEYS: Final = ("turn", "turn_calls", "deferred")

_STATE_KEYS: Final = (
    "schema",
    "task",
    "started_at",
    "calls",
    "class_calls",
    "cost",
    "class_cost",
    "uncertain",
    "evidence",
    "recovery_calls",
    "history",
    "tallies",
    "digests",
    "stopped",
    "writes_blocked",
)


def _state_amount(value: object, field: str) -> Decimal:
    if not isinstance(value, Decimal):
        raise RunStateError(f"{field} must be a Decimal, got {value!r}", field=field)
    try:
        return _amount(value)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"{field} {exc}", field=field) from None


def _risk_map(value: object, field: str, convert: Any) -> _RiskMap[Any]:
    if not isinstance(value, Mapping) or set(value) != set(RISK_CLASSES):
        raise RunStateError(
            f"{field} must map exactly {', '.join(RISK_CLASSES)}, got {value!r}", field=field
        )
    return _RiskMap({risk: convert(value[risk], f"{field}.{risk}") for risk in RISK_CLASSES})


def _json_list(data: Mapping[str, Any], field: str) -> list[Any]:
    value = data[field]
    if not isinstance(value, list):
        raise RunStateError(f"{field} must be a list, got {value!r}", field=field)
    return value


def _json_amount(value: object, field: str) -> Decimal:
    if not isinstance(value, str):
        raise RunStateError(f"{field} must be a decimal string, got {value!r}", field=field)
    try:
        return _amount(value)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"{field} {exc}", field=field) from None


def _json_items(value: object, field: str, kind: Any) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise RunStateError(f"{field} must be a list, got {value!r}", field=field)
    names = [f.name for f in dataclasses.fields(kind)]
    out = []
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping) or set(item) != set(names):
            raise RunStateError(
                f"{where} must be an object with keys {', '.join(names)}", field=where
            )
        try:
            out.append(kind(**{name: item[name] for name in names}))
        except RunStateError as exc:
            raise RunStateError(f"{where}.{exc.message}", field=f"{where}.{exc.field}") from None
    return tuple(out)


def _json_digest(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) != _DIGEST_LENGTH or not set(value) <= _HEX:
        raise RunStateError(
            f"{field} must be {_DIGEST_LENGTH} lowercase hex digits, got {value!r}", field=field
        )
    return value


def _json_stop(value: object, name: str = "stopped") -> Stop:
    try:
        return Stop.from_dict(value)
    except RunStateError as exc:
        field = f"{name}.{exc.field}" if exc.field else name
        raise RunStateError(f"{name}: {exc.message}", field=field) from None


def _check_consistent(state: RunState) -> None:
    """What the cheap constructor checks leave out: uniqueness and evidence marks."""
    if len({t.fingerprint for t in state.tallies}) != len(state.tallies):
        raise RunStateError("tallies name a fingerprint twice", field="tallies")
    if len(set(state.digests)) != len(state.digests):
        raise RunStateError("digests hold a digest twice", field="digests")
    marks = [(f"history[{i}]", a.evidence) for i, a in enumerate(state.history)]
    marks += [(f"tallies[{i}]", t.evidence) for i, t in enumerate(state.tallies)]
    for where, mark in marks:
        if mark > state.evidence:
            raise RunStateError(
                f"{where}.evidence ({mark}) exceeds evidence ({state.evidence})",
                field=f"{where}.evidence",
            )


# -- transitions ------------------------------------------------------------------------------


def _check_now(run: RunState, now: int) -> None:
    if type(now) is not int or now < run.started_at:
        raise RunStateError(
            f"now must be integer ms, not before the run started at {run.started_at}; got {now!r}",
            field="now",
        )


def _with(mapping: Mapping[RiskClass, _V], risk: RiskClass, value: _V) -> _RiskMap[_V]:
    return _RiskMap({**mapping, risk: value})


def _tally(run: RunState, fingerprint: str) -> Tally | None:
    for tally in reversed(run.tallies):  # the most recently begun first
        if tally.fingerprint == fingerprint:
            return tally
    return None


def _repeat(run: RunState, action: Action) -> int:
    """The repeat number ``action`` would have if it began now."""
    tally = _tally(run, action.fingerprint)
    if tally is None or run.evidence != tally.evidence:
        return 0
    return tally.repeats + 1


def _loop(run: RunState, action: Action, budget: Budget) -> str | None:
    """Describe the loop ``action`` would complete, or return ``None``."""
    history = run.history
    sequence = [attempt.fingerprint for attempt in history]
    sequence.append(action.fingerprint)
    for n in range(2, MAX_CYCLE + 1):
        if len(sequence) < 2 * n:
            break
        pattern = sequence[-n:]
        if len(set(pattern)) != n:
            continue
        times = 1
        while times < budget.loop_cycles and sequence[-(times + 1) * n : -times * n] == pattern:
            times += 1
        # history[-(n - 1)] began the last pass; the candidate action closes it.
        tools = ", ".join([attempt.tool for attempt in history[-(n - 1) :]] + [action.tool])
        if times >= budget.loop_cycles:
            return f"cycle [{tools}] repeated {times} times (loop_cycles={budget.loop_cycles})"
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
    if risk in _WRITES and run.uncertain > budget.max_uncertain_side_effects:
        n = run.uncertain
        writes = "1 write" if n == 1 else f"{n} writes"
        return "uncertain-side-effect", (
            f"{writes} with unknown outcome, more than max_uncertain_side_effects="
            f"{budget.max_uncertain_side_effects}: {action.tool} ({risk}) may not run "
            "until reconciled"
        )
    if budget.max_cost is not None and run.cost >= budget.max_cost:
        return "max-cost", (
            f"cost {_decimal_text(run.cost)} reaches max_cost={_decimal_text(budget.max_cost)}"
        )
    if limits.max_cost is not None and run.class_cost[risk] >= limits.max_cost:
        return "class-max-cost", (
            f"{risk} cost {_decimal_text(run.class_cost[risk])} reaches "
            f"classes.{risk}.max_cost={_decimal_text(limits.max_cost)}"
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
    loop = _loop(run, action, budget)
    if loop is not None:
        return "loop", loop
    limit, name = budget.repeats_for(risk)
    if repeat > limit:
        return "repeated-action", (
            f"{action.tool} repeated {_times(repeat)} without new evidence ({name}={limit})"
        )
    return None


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
    repeat = _repeat(run, action)
    if run.stopped is not None:
        recovery = action.recovery and action.risk == "read"
        if recovery and run.recovery_calls < budget.max_recovery_calls:
            return Decision(allowed=True, repeat=repeat)
        return Decision(allowed=False, stop=run.stopped, repeat=repeat)
    crossed = _crossing(run, action, budget, now, repeat)
    if crossed is None:
        return Decision(allowed=True, repeat=repeat)
    condition, detail = crossed
    return Decision(
        allowed=False,
        stop=Stop(condition, detail, now, action.risk, action.fingerprint),
        repeat=repeat,
    )


def begin(run: RunState, action: Action, now: int) -> RunState:
    """Count an allowed action as it starts: calls, its class, its tally, the history.

    Raises:
        RunStateError: ``now`` is not an integer or lies before the run's start.
    """
    _check_now(run, now)
    fingerprint = action.fingerprint
    tally = _tally(run, fingerprint)
    occurrences = 1 if tally is None else tally.occurrences + 1
    tallies = (
        *(t for t in run.tallies if t.fingerprint != fingerprint),
        Tally(fingerprint, occurrences, run.evidence, _repeat(run, action)),
    )
    return dataclasses.replace(
        run,
        calls=run.calls + 1,
        class_calls=_with(run.class_calls, action.risk, run.class_calls[action.risk] + 1),
        recovery_calls=run.recovery_calls + (run.stopped is not None),
        history=(*run.history, Attempt(action.tool, fingerprint, run.evidence))[-HISTORY_LIMIT:],
        tallies=tallies[-TALLY_LIMIT:],
    )


def _digest(evidence: str) -> str:
    return hashlib.sha256(evidence.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_LENGTH]


def finish(
    run: RunState,
    action: Action,
    outcome: Outcome,
    now: int,
    *,
    evidence: str | None = None,
    cost: Decimal | int | str | None = None,
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
    count = run.evidence
    digests = run.digests
    if evidence is not None:
        if not isinstance(evidence, str):
            raise RunStateError(f"evidence must be a string, got {evidence!r}", field="evidence")
        digest = _digest(evidence)
        if digest in digests:
            # Seen again: keep it among the remembered ones.
            digests = (*(d for d in digests if d != digest), digest)
        else:
            count += 1
            digests = (*digests, digest)[-EVIDENCE_LIMIT:]
    tallies = run.tallies
    if action.risk in _WRITES:
        # A write's own result (a receipt, a new id) is no reason to write again.
        for i in range(len(tallies) - 1, -1, -1):
            if tallies[i].fingerprint == action.fingerprint:
                mark = dataclasses.replace(tallies[i], evidence=count)
                tallies = (*tallies[:i], mark, *tallies[i + 1 :])
                break
    unknown_write = outcome == "unknown" and action.risk in _WRITES
    return dataclasses.replace(
        run,
        evidence=count,
        digests=digests,
        tallies=tallies,
        uncertain=run.uncertain + unknown_write,
        **({} if cost is None else _costs(run, cost, action.risk)),
    )


def add_cost(
    run: RunState, amount: Decimal | int | str, *, risk: RiskClass | None = None
) -> RunState:
    """Add a cost to the run, e.g. of a model step; with ``risk``, also to that class.

    Raises:
        RunStateError: the amount is a float, negative, not finite, has more than 18
            decimal places, or the total would reach 10**18.
    """
    return dataclasses.replace(run, **_costs(run, amount, risk))


def _costs(run: RunState, amount: object, risk: RiskClass | None) -> dict[str, Any]:
    """The cost fields of ``run`` with ``amount`` added, exactly."""
    try:
        value = _amount(amount)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"cost {exc}", field="cost") from None
    total = _add(run.cost, value, "cost")
    if risk is None:
        return {"cost": total}
    risk = _risk(risk, "risk")
    spent = _add(run.class_cost[risk], value, "class_cost")
    return {"cost": total, "class_cost": _with(run.class_cost, risk, spent)}


def stop(run: RunState, reason: Stop) -> RunState:
    """Record why the run stopped; the first stop wins and later ones are dropped."""
    if not isinstance(reason, Stop):
        raise RunStateError(f"reason must be a Stop, got {reason!r}", field="reason")
    if run.stopped is not None:
        return run
    return dataclasses.replace(run, stopped=reason)


def admit(run: RunState, action: Action, budget: Budget, now: int) -> tuple[Decision, RunState]:
    """:func:`check`, then :func:`begin` if allowed, as one step on one state.

    Use it inside a store's atomic apply so two concurrent calls cannot both take the
    last slot. A denial leaves the run unchanged: recording the stop is the shell's call.
    """
    decision = check(run, action, budget, now)
    return decision, begin(run, action, now) if decision.allowed else run
