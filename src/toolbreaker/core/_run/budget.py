"""Run budgets and loop detection: the pure counters behind a run guard.

Theory of operation
-------------------
A *run* is one user task. :class:`RunState` counts what the run has done: tool calls in
total and per risk class, cost, writes whose outcome is unknown, the distinct results
it has observed and the changes it may have made (its *evidence*), its recent actions
and, per action fingerprint, how often that action came back without new evidence.
:class:`Budget` says how far a run may go. Three pure functions move a run forward, one
tool call at a time::

    from toolbreaker.core._run.limits import begin, check, finish

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
``finish`` reports a digest of the observed result; the run's ``evidence`` grows when
that digest was never seen in the run, and when the call may have changed the world: a
write (by its risk class, which may be the call's own: a shell command that edits a
file) that succeeded or whose outcome is unknown (:func:`changes_world`). An action
whose fingerprint comes back while ``evidence`` has not grown since its previous
occurrence is a repeat; a repeat number above the applicable ``max_repeats`` stops the
run (new evidence resets the number to 0, the first occurrence is never a repeat). So a
test command run again after an edit is iteration, not a repeat, even when it prints
the same thing (or nothing). For a read, "since" counts from when the previous
occurrence began, so its own new result licenses the next one (a status that changed,
the next message of a queue); for a write it counts from when the previous occurrence
finished, because a write's own result (a receipt, a fresh id) and its own change are no
reason to write again.

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

Where it lives
--------------
This module holds :class:`Budget` and :class:`ClassLimits` (how far a run may go) and
re-exports the run's state: :mod:`~toolbreaker.core._run.state` holds :class:`RunState`
and its parts, :mod:`~toolbreaker.core._run.limits` the limit decisions
(:func:`~toolbreaker.core._run.limits.check`, ``begin``, ``finish`` ...), which read a
budget: they are imported from there, so the two modules do not import each other.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from toolbreaker.core._canonical import canonical_json
from toolbreaker.core._config import known_fields, load_toml
from toolbreaker.core._run._values import (
    RISK_CLASSES,
    WRITES,
    RiskClass,
    RiskMap,
    as_amount,
    decimal_text,
    policy_amount,
    policy_int,
)
from toolbreaker.core._run.state import (
    EVIDENCE_LIMIT,
    HISTORY_LIMIT,
    MAX_CYCLE,
    MAX_LOOP_CYCLES,
    OUTCOMES,
    PRECEDENCE,
    RUN_SCHEMA,
    STOP_CONDITIONS,
    TALLY_LIMIT,
    Action,
    Attempt,
    Outcome,
    RunState,
    Stop,
    Tally,
)
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
    "ModelPrice",
    "Outcome",
    "Prices",
    "RiskClass",
    "RunState",
    "RunStateError",
    "Stop",
    "Tally",
]

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
                policy_int(value, name, 0)
        object.__setattr__(self, "max_cost", policy_amount(self.max_cost, "max_cost"))

    def to_dict(self) -> dict[str, Any]:
        """The limits as a JSON-ready dict; the cost as exact text."""
        return {
            "max_calls": self.max_calls,
            "max_repeats": self.max_repeats,
            "max_cost": None if self.max_cost is None else decimal_text(self.max_cost),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ModelPrice:
    """What one model's tokens cost, per million, as the user's price table says.

    toolbreaker ships no price list (one would go stale); a budget's ``prices`` table is
    the user's. Amounts are exact decimals (strings or integers, never floats); 0 is a
    free model.

    Attributes:
        input_per_million: the price of a million input (prompt) tokens.
        output_per_million: the price of a million output (completion) tokens.
    """

    input_per_million: Decimal
    output_per_million: Decimal

    def __post_init__(self) -> None:
        for name in ("input_per_million", "output_per_million"):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, as_amount(value))
            except (TypeError, ValueError) as exc:
                raise PolicyError(f"{name} {exc}", field=name) from None

    def to_dict(self) -> dict[str, str]:
        """The prices as exact text."""
        return {
            "input_per_million": decimal_text(self.input_per_million),
            "output_per_million": decimal_text(self.output_per_million),
        }


class Prices(Mapping[str, ModelPrice]):
    """A budget's price table: an immutable, hashable mapping of model names to prices."""

    __slots__ = ("_items",)

    def __init__(self, values: Mapping[str, ModelPrice] | None = None) -> None:
        self._items: dict[str, ModelPrice] = dict(values or {})

    def __getitem__(self, key: str) -> ModelPrice:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __repr__(self) -> str:
        return f"Prices({self._items!r})"


#: The per-class limits of a :class:`Budget` that names none: five repeated searches are
#: annoying, five repeated refunds are an incident. Reads have no count of their own (the
#: run's ``max_tool_calls`` bounds them, repeats and loops still stop them): a coding agent
#: does all its work through one shell tool, and a read cap of 40 stopped 30% of the
#: successful runs of SWE-bench Verified (``benchmarks/bench_real_runs.py``).
DEFAULT_CLASSES: Final[Mapping[RiskClass, ClassLimits]] = RiskMap(
    {
        "read": ClassLimits(),
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


#: The limits an operator may raise (:meth:`Budget.raised`).
_RAISABLE: Final = ("max_cost", "max_tool_calls", "deadline_ms", "max_recovery_calls")
#: Integer fields that may be ``None`` (no limit, or the default), each at least 1.
_OPTIONAL_INTS: Final = ("max_calls_per_turn", "reservation_lease_ms", "max_tool_failures")


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """How far one run may go: reviewed configuration, validated at construction.

    Attributes:
        max_tool_calls: tool calls allowed in the run; call ``max_tool_calls + 1`` is denied.
            The default 250 is the step limit coding agents are commonly run with; the
            longest successful run of the project's corpus made 124 calls.
        max_repeats: repeats of one action without new evidence allowed before the run
            stops (the first occurrence is not a repeat); a class limit overrides it.
        max_cost: spent cost at which the next call is denied (a call's own cost is only
            known after it ran, so the total can overshoot by one call). A call (or model
            step) that declares its cost reserves it first: it is refused when spent plus
            reserved plus its own would exceed ``max_cost`` (see
            :mod:`toolbreaker.core._run.costs`).
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
        reservation_lease_ms: how long a cost reservation is held for a call that does
            not settle (a killed worker); then it is spent at its amount. ``None``: the
            default lease, :data:`~toolbreaker.core._run.costs.DEFAULT_RESERVATION_LEASE_MS`
            (and no key in :meth:`to_dict`).
        max_tool_failures: the failure of one tool with one error class (the
            classifier's: ``validation``, ``http-422`` ...), whatever its arguments, at
            which the run stops calling that tool: the N-th such failure. ``None``: no
            limit (and no key in :meth:`to_dict`).
        prices: the user's price table, model name to :class:`ModelPrice`: what a model's
            reported usage (``RunGuard.add_usage``, which every adapter feeds) costs
            against ``max_cost``. A key may hold ``*`` wildcards (``"gpt-4o*"``): the
            exact name wins, then the longest pattern. Empty (the default): the model's
            tokens are counted, its cost is not. With a table, a model it does not
            price stops a run that has a ``max_cost``: its cost would be unknown.
    """

    max_tool_calls: int = 250
    max_repeats: int = 2
    max_cost: Decimal | None = None
    deadline_ms: int | None = None
    max_uncertain_side_effects: int = 0
    loop_cycles: int = 3
    max_recovery_calls: int = 10
    classes: Mapping[RiskClass, ClassLimits] = DEFAULT_CLASSES
    max_calls_per_turn: int | None = None
    reservation_lease_ms: int | None = None
    max_tool_failures: int | None = None
    prices: Mapping[str, ModelPrice] = Prices()

    def __post_init__(self) -> None:
        for name in _OPTIONAL_INTS:
            if getattr(self, name) is not None:
                policy_int(getattr(self, name), name, 1)
        for name, minimum in _BUDGET_INTS:
            policy_int(getattr(self, name), name, minimum)
        if self.loop_cycles > MAX_LOOP_CYCLES:
            raise PolicyError(
                f"loop_cycles must be at most {MAX_LOOP_CYCLES}, got {self.loop_cycles}",
                field="loop_cycles",
            )
        if self.deadline_ms is not None:
            policy_int(self.deadline_ms, "deadline_ms", 1)
        object.__setattr__(self, "max_cost", policy_amount(self.max_cost, "max_cost"))
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
        object.__setattr__(self, "classes", RiskMap(merged))
        object.__setattr__(self, "prices", _prices(self.prices))

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
        if "prices" in fields:
            fields["prices"] = _prices_from(fields["prices"])
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
            "max_cost": None if self.max_cost is None else decimal_text(self.max_cost),
            "deadline_ms": self.deadline_ms,
            "max_uncertain_side_effects": self.max_uncertain_side_effects,
            "loop_cycles": self.loop_cycles,
            "max_recovery_calls": self.max_recovery_calls,
            "classes": {risk: self.classes[risk].to_dict() for risk in RISK_CLASSES},
            # Only when set: a budget without them keeps its version (and its receipts).
            **{
                name: getattr(self, name)
                for name in _OPTIONAL_INTS
                if getattr(self, name) is not None
            },
            **(
                {"prices": {model: p.to_dict() for model, p in sorted(self.prices.items())}}
                if self.prices
                else {}
            ),
        }

    @property
    def version(self) -> str:
        """A short SHA-256 of the canonical JSON of the fields; equal budgets share it."""
        return hashlib.sha256(canonical_json(self.to_dict())).hexdigest()[:12]

    def raised(self, **fields: Any) -> Budget:
        """This budget with ``fields`` raised: what an operator's extension makes.

        The fields: ``max_cost``, ``max_tool_calls``, ``deadline_ms``,
        ``max_recovery_calls``.

        Raises:
            PolicyError: a field that is not one of those, or a value that lowers the
                limit (a limit that was ``None``, no limit, cannot be raised).
        """
        out: dict[str, Any] = {}
        for name, value in fields.items():
            if name not in _RAISABLE:
                raise PolicyError(
                    f"only {', '.join(_RAISABLE)} can be raised, not {name}", field=name
                )
            old = getattr(self, name)
            new = policy_amount(value, name) if name == "max_cost" else value
            if name != "max_cost":
                policy_int(new, name, 1)
            if old is None:
                raise PolicyError(f"{name} has no limit to raise", field=name)
            if new < old:
                raise PolicyError(f"{name} may only be raised: {new} is below {old}", field=name)
            out[name] = new
        return dataclasses.replace(self, **out)

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


def _prices(value: object) -> Prices:
    """A budget's price table, checked: model names to :class:`ModelPrice`."""
    if not isinstance(value, Mapping):
        raise PolicyError(f"prices must map model names to prices, got {value!r}", field="prices")
    for model, price in value.items():
        if not isinstance(model, str) or not model.strip():
            raise PolicyError(f"prices: a model name must be text, got {model!r}", field="prices")
        if not isinstance(price, ModelPrice):
            raise PolicyError(
                f"prices.{model} must be a ModelPrice, got {price!r}", field=f"prices.{model}"
            )
    return value if isinstance(value, Prices) else Prices(value)


def _prices_from(value: object) -> dict[str, ModelPrice]:
    """``[prices."MODEL"]`` tables of ``input_per_million`` and ``output_per_million``."""
    if not isinstance(value, Mapping):
        raise PolicyError(f"prices must be a table of models, got {value!r}", field="prices")
    known = [f.name for f in dataclasses.fields(ModelPrice)]
    out: dict[str, ModelPrice] = {}
    for model, table in value.items():
        where = f"prices.{model}"
        if not isinstance(table, Mapping):
            raise PolicyError(f"{where} must be a table of prices, got {table!r}", field=where)
        wrong = sorted(set(table) ^ set(known))
        if wrong:
            raise PolicyError(
                f"{where} takes exactly {', '.join(known)} (per million tokens)",
                field=f"{where}.{wrong[0]}",
            )
        try:
            out[model] = ModelPrice(**table)
        except PolicyError as exc:
            raise PolicyError(f"{where}.{exc.message}", field=f"{where}.{exc.field}") from None
    return out
