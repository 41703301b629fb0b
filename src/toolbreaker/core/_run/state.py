"""A run's state: what one task has done so far, as the budget's decisions see it.

:class:`RunState` counts what the run has done: tool calls in total and per risk class,
cost, writes whose outcome is unknown, the distinct results it has observed and the
changes it may have made (its *evidence*), its recent actions and, per action
fingerprint, how often that action came back without new evidence; and why it stopped
or blocks writes. The decisions that move it are :mod:`toolbreaker.core._run.limits`
(``check``, ``begin``, ``finish``) and the run machine
(:mod:`toolbreaker.core._run.machine`); the limits are a
:class:`~toolbreaker.core._run.budget.Budget`.

The state stays small whatever the agent does (see :data:`HISTORY_LIMIT`,
:data:`TALLY_LIMIT`, :data:`EVIDENCE_LIMIT`), and round-trips through JSON
(:meth:`RunState.to_dict`, :meth:`RunState.from_dict`) exactly.

The records it is built from (:class:`Action`, :class:`Stop` and the conditions it may
name, :class:`Attempt`, :class:`Tally`, :class:`Fired`) are defined in
``core/_run/_state_parts.py`` and imported from here, as is :class:`Recent` (what its
tallies and digests are: sequences found by key).
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final, Literal, get_args

from toolbreaker.core._run._state_parts import (
    BUDGET_CONDITIONS,
    EFFECTS,
    PRECEDENCE,
    RUNNING,
    STOP_CONDITIONS,
    Action,
    Attempt,
    Effect,
    Fired,
    Stop,
    Tally,
)
from toolbreaker.core._run._values import (
    DIGEST_LENGTH,
    RISK_CLASSES,
    ZERO,
    Recent,
    RiskClass,
    RiskMap,
    as_amount,
    as_count,
    as_name,
    decimal_text,
    exact_sum,
)
from toolbreaker.core._run.holds import (
    FAILURE_LIMIT,
    USAGE_LIMIT,
    FailureCount,
    ModelUsage,
    Reservation,
    ToolStop,
)
from toolbreaker.errors import RunStateError

__all__ = [
    "BUDGET_CONDITIONS",
    "EFFECTS",
    "EVIDENCE_LIMIT",
    "FIRED_LIMIT",
    "HISTORY_LIMIT",
    "MAX_CYCLE",
    "MAX_LOOP_CYCLES",
    "OUTCOMES",
    "PRECEDENCE",
    "RUNNING",
    "RUN_SCHEMA",
    "STOP_CONDITIONS",
    "TALLY_LIMIT",
    "Action",
    "Attempt",
    "Effect",
    "Fired",
    "Outcome",
    "Recent",
    "RunState",
    "Stop",
    "Tally",
    "changed",
    "checked",
    "fired",
]

#: How a call ended; ``unknown`` means a write may or may not have happened.
Outcome = Literal["success", "failure", "unknown", "ignored"]
#: The outcomes :func:`~toolbreaker.core._run.limits.finish` accepts.
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)

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
#: Conditions a run keeps (its first writes block and its stop always among them).
FIRED_LIMIT: Final = 16
#: The schema tag of :meth:`RunState.to_dict`. v3 writes the history and the tallies as
#: rows (their fields in order) rather than objects: a long run's state is a third smaller
#: and encodes in half the time, which a shared run pays on every write.
RUN_SCHEMA: Final = "toolbreaker.run/v3"
_RUN_SCHEMA_V2: Final = "toolbreaker.run/v2"
_RUN_SCHEMA_V1: Final = "toolbreaker.run/v1"
#: The schemas :meth:`RunState.from_dict` reads; v1 and v2 keep items as objects.
_READS: Final = (RUN_SCHEMA, _RUN_SCHEMA_V2, _RUN_SCHEMA_V1)

_HEX: Final = frozenset("0123456789abcdef")
_EXACT: Final = decimal.Context(prec=60, traps=[decimal.Inexact, decimal.InvalidOperation])


def fired(run: RunState, entry: Fired) -> RunState:
    """``run`` with ``entry`` added to its conditions, bounded by :data:`FIRED_LIMIT`.

    Beyond the bound the oldest condition is forgotten, but never the first of each effect
    (the first writes block, the stop): those are what an operator reads first.
    """
    kept = (*run.conditions, entry)
    if len(kept) > FIRED_LIMIT:
        firsts = {next(i for i, f in enumerate(kept) if f.effect == e) for e in _effects(kept)}
        drop = next(i for i in range(len(kept)) if i not in firsts)
        kept = kept[:drop] + kept[drop + 1 :]
    return changed(run, conditions=kept)


def _effects(conditions: tuple[Fired, ...]) -> set[Effect]:
    return {f.effect for f in conditions}


_NO_CALLS: Final[Mapping[RiskClass, int]] = RiskMap(dict.fromkeys(RISK_CLASSES, 0))
_NO_COST: Final[Mapping[RiskClass, Decimal]] = RiskMap(dict.fromkeys(RISK_CLASSES, ZERO))
_NO_TALLIES: Final[Recent[Tally]] = Recent()
_NO_DIGESTS: Final[Recent[str]] = Recent()


# Not slotted: a transition copies the fields as one dict (see ``changed``).
@dataclasses.dataclass(frozen=True)
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
        evidence: new evidence observed so far: distinct results, and calls that may
            have changed the world (writes made or of unknown outcome).
        recovery_calls: recovery reads begun after the run stopped.
        history: the last :data:`HISTORY_LIMIT` actions begun, oldest first.
        tallies: per fingerprint, the :data:`TALLY_LIMIT` most recently begun, oldest first
            (a :class:`Recent`: found by fingerprint without a scan; built from a
            tuple too).
        digests: the last :data:`EVIDENCE_LIMIT` distinct result digests, oldest first
            (likewise).
        stopped: why the run stopped; the first stop is kept.
        writes_blocked: why writes are refused (too many writes with an unknown
            outcome); reads go on. Set and cleared by :mod:`toolbreaker.core._run.machine`.
        turn: model turns begun (counted only under ``Budget.max_calls_per_turn``).
        turn_calls: tool calls begun in the current turn (likewise).
        deferred: calls deferred to a later turn by ``max_calls_per_turn``.
        steps: the tool requests the run was asked about, whatever their verdict (the
            step numbers of :attr:`conditions`).
        conditions: every condition that stopped the run or blocked its writes, in the
            order it fired, each with its step (:class:`Fired`); at most
            :data:`FIRED_LIMIT`, the first of each effect always kept.
        reservations: cost held for calls admitted and not settled yet, oldest first
            (:mod:`toolbreaker.core._run.costs`); ``cost`` is what was committed.
        reservations_made: reservations made in the run (the next one's id is this + 1).
        over_budget: calls refused because their reservation would cross a cost limit.
        expired: reservations whose lease ended unsettled (spent at their amount).
        failures: failures per tool and error class, the :data:`FAILURE_LIMIT` most
            recently failed, oldest first.
        tools_stopped: tools the run no longer calls, each with why.
        usage: per model, the tokens the framework reported and what they cost (the
            :data:`~toolbreaker.core._run.holds.USAGE_LIMIT` most recently used); their
            cost is part of ``cost``.

    The three turn counters are left out of :meth:`counters` and :meth:`to_dict` while
    zero, so runs without a turn limit serialise as before; ``steps`` and ``conditions``
    are in :meth:`to_dict` (not :meth:`counters`: a stop packet shows the conditions on
    their own) once the run has any.
    """

    task: str
    started_at: int
    calls: int = 0
    class_calls: Mapping[RiskClass, int] = _NO_CALLS
    cost: Decimal = ZERO
    class_cost: Mapping[RiskClass, Decimal] = _NO_COST
    uncertain: int = 0
    evidence: int = 0
    recovery_calls: int = 0
    history: tuple[Attempt, ...] = ()
    tallies: Recent[Tally] = _NO_TALLIES
    digests: Recent[str] = _NO_DIGESTS
    stopped: Stop | None = None
    writes_blocked: Stop | None = None
    turn: int = 0
    turn_calls: int = 0
    deferred: int = 0
    steps: int = 0
    conditions: tuple[Fired, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    reservations_made: int = 0
    over_budget: int = 0
    expired: int = 0
    failures: tuple[FailureCount, ...] = ()
    tools_stopped: tuple[ToolStop, ...] = ()
    usage: tuple[ModelUsage, ...] = ()

    def __post_init__(self) -> None:
        # Cheap checks only. A transition does not come here: it builds its state from
        # checked values with ``changed``. from_dict checks the rest.
        as_name(self.task, "task")
        for name in (
            "started_at",
            "calls",
            "uncertain",
            "evidence",
            "recovery_calls",
            "steps",
            *_TURN_KEYS,
            *_COST_KEYS,
        ):
            as_count(getattr(self, name), name)
        calls = _risk_map(self.class_calls, "class_calls", as_count)
        if sum(calls.values()) != self.calls:
            raise RunStateError(
                f"class_calls sum to {sum(calls.values())}, not calls={self.calls}",
                field="class_calls",
            )
        object.__setattr__(self, "class_calls", calls)
        object.__setattr__(self, "cost", _state_amount(self.cost, "cost"))
        costs = _risk_map(self.class_cost, "class_cost", _state_amount)
        spent = ZERO
        for risk in RISK_CLASSES:
            spent = exact_sum(spent, costs[risk], "class_cost")
        if spent > self.cost:
            raise RunStateError(
                f"class_cost sum to {decimal_text(spent)}, more than cost="
                f"{decimal_text(self.cost)}",
                field="class_cost",
            )
        object.__setattr__(self, "class_cost", costs)
        if self.recovery_calls > self.calls or (self.recovery_calls and self.stopped is None):
            raise RunStateError(
                "recovery_calls count calls begun after a stop", field="recovery_calls"
            )
        if type(self.history) is not tuple or len(self.history) > HISTORY_LIMIT:
            raise RunStateError(
                f"history must be a tuple of at most {HISTORY_LIMIT}", field="history"
            )
        tallies = _recent(self.tallies, "tallies", TALLY_LIMIT, Tally, "a fingerprint")
        object.__setattr__(self, "tallies", tallies)
        digests = _recent(self.digests, "digests", EVIDENCE_LIMIT, str, "a digest")
        object.__setattr__(self, "digests", digests)
        if len(self.digests) > self.evidence:
            raise RunStateError("more digests than evidence", field="digests")
        for name in ("stopped", "writes_blocked"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Stop):
                raise RunStateError(f"{name} must be a Stop, got {value!r}", field=name)
        holds: tuple[tuple[str, type, int | None], ...] = (
            ("reservations", Reservation, None),
            ("failures", FailureCount, FAILURE_LIMIT),
            ("tools_stopped", ToolStop, None),
            ("usage", ModelUsage, USAGE_LIMIT),
        )
        for field, kind, bound in holds:
            held = getattr(self, field)
            if held and (
                type(held) is not tuple
                or (bound is not None and len(held) > bound)
                or not all(isinstance(x, kind) for x in held)
            ):
                raise RunStateError(f"{field} must be a tuple of {kind.__name__}", field=field)
        conditions = self.conditions
        if conditions and (
            type(conditions) is not tuple
            or len(conditions) > FIRED_LIMIT
            or not all(isinstance(f, Fired) for f in conditions)
        ):
            raise RunStateError(
                f"conditions must be a tuple of at most {FIRED_LIMIT} fired conditions",
                field="conditions",
            )

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
            "cost": decimal_text(self.cost),
            "class_cost": {risk: decimal_text(v) for risk, v in self.class_cost.items()},
            "uncertain": self.uncertain,
            "evidence": self.evidence,
            "recovery_calls": self.recovery_calls,
            "stopped": None if self.stopped is None else self.stopped.to_dict(),
            "writes_blocked": None
            if self.writes_blocked is None
            else self.writes_blocked.to_dict(),
            **{name: getattr(self, name) for name in _TURN_KEYS if getattr(self, name)},
            # Only for runs that reserved: what is held beside what was committed (``cost``).
            **(
                {
                    "reserved": decimal_text(self.reserved()),
                    "reservations_held": len(self.reservations),
                    "over_budget": self.over_budget,
                    "expired": self.expired,
                }
                if self.reservations_made or self.over_budget
                else {}
            ),
            **(
                {"tools_stopped": [t.to_dict() for t in self.tools_stopped]}
                if self.tools_stopped
                else {}
            ),
            # Only for runs whose model usage was reported: the models' part of ``cost``.
            **(
                {
                    "model_cost": decimal_text(self.model_cost()),
                    "usage": [u.to_dict() for u in self.usage],
                }
                if self.usage
                else {}
            ),
        }

    def model_cost(self) -> Decimal:
        """The part of ``cost`` the models' reported usage made (priced models only)."""
        total = ZERO
        for found in self.usage:
            if found.cost is not None:
                total = exact_sum(total, found.cost, "model_cost")
        return total

    def reserved(self, risk: RiskClass | None = None) -> Decimal:
        """Cost held by unsettled reservations: all of it, or those of tool calls of ``risk``."""
        # One context for the whole sum (this runs on every request that reserves): amounts
        # below 10**18 with at most 18 places add exactly in 60 digits.
        total = _EXACT.add(ZERO, ZERO)
        for hold in self.reservations:
            if risk is None or hold.risk == risk:
                total = _EXACT.add(total, hold.amount)
        return exact_sum(total, ZERO, "reserved")

    def to_dict(self) -> dict[str, Any]:
        """The whole state as a JSON-ready dict tagged with :data:`RUN_SCHEMA`.

        Decimals are exact text; :meth:`from_dict` restores an equal state.
        """
        return {
            "schema": RUN_SCHEMA,
            **self.counters(),
            "history": [[a.tool, a.fingerprint, a.evidence] for a in self.history],
            "tallies": [
                [t.fingerprint, t.occurrences, t.evidence, t.repeats] for t in self.tallies
            ],
            "digests": list(self.digests),
            # Only once there are any: a run that never stopped serialises as before.
            **({"steps": self.steps} if self.steps else {}),
            **({"conditions": [f.to_dict() for f in self.conditions]} if self.conditions else {}),
            **{name: getattr(self, name) for name in _COST_KEYS if getattr(self, name)},
            **{
                name: [x.to_dict() for x in getattr(self, name)]
                for name in _HOLD_KEYS
                if getattr(self, name)
            },
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
        # What counters() derives for a stop packet is not state: dropped when loading.
        data = {k: v for k, v in data.items() if k not in _DERIVED_KEYS}
        expected = set(_STATE_KEYS) | {name for name in _OPTIONAL_KEYS if name in data}
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
        if data["schema"] not in _READS:
            raise RunStateError(
                f"schema must be {RUN_SCHEMA!r}, got {data['schema']!r}", field="schema"
            )
        rows = data["schema"] == RUN_SCHEMA
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
            history=_json_items(data["history"], "history", Attempt, rows=rows),
            tallies=_recent(
                _json_items(data["tallies"], "tallies", Tally, rows=rows),
                "tallies",
                TALLY_LIMIT,
                Tally,
                "a fingerprint",
            ),
            digests=_recent(
                tuple(
                    _json_digest(x, f"digests[{i}]")
                    for i, x in enumerate(_json_list(data, "digests"))
                ),
                "digests",
                EVIDENCE_LIMIT,
                str,
                "a digest",
            ),
            stopped=None if data["stopped"] is None else _json_stop(data["stopped"]),
            writes_blocked=None
            if data.get("writes_blocked") is None
            else _json_stop(data["writes_blocked"], "writes_blocked"),
            **{name: data[name] for name in _TURN_KEYS if name in data},
            steps=data.get("steps", 0),
            conditions=_json_conditions(data.get("conditions", [])),
            **{name: data[name] for name in _COST_KEYS if name in data},
            reservations=_json_holds(data.get("reservations", []), "reservations", Reservation),
            failures=_json_holds(data.get("failures", []), "failures", FailureCount),
            tools_stopped=_json_holds(data.get("tools_stopped", []), "tools_stopped", ToolStop),
            usage=_json_holds(data.get("usage", []), "usage", ModelUsage),
        )
        _check_consistent(state)
        return state


#: Optional counters of :class:`RunState`, present only when non-zero.
_TURN_KEYS: Final = ("turn", "turn_calls", "deferred")
#: Counters of reservations, present only when non-zero.
_COST_KEYS: Final = ("reservations_made", "over_budget", "expired")
#: Held values (reservations, failure counts, stopped tools), present only when any.
_HOLD_KEYS: Final = ("reservations", "failures", "tools_stopped", "usage")
#: What :meth:`RunState.counters` derives for people: not loaded back.
_DERIVED_KEYS: Final = frozenset({"reserved", "reservations_held", "model_cost"})
#: Keys of :meth:`RunState.to_dict` present only when the run has any.
_OPTIONAL_KEYS: Final = (*_TURN_KEYS, "steps", "conditions", *_COST_KEYS, *_HOLD_KEYS)

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


def changed(run: RunState, /, **fields: Any) -> RunState:
    """``run`` with ``fields`` set: how a transition of the core makes the next state.

    Unchecked, and so for the core's transitions alone (:mod:`~toolbreaker.core._run.limits`,
    :mod:`~toolbreaker.core._run.costs`, the run machine), which build every value from
    values checked where they entered (a state by :class:`RunState` or
    :meth:`RunState.from_dict`, an action, an event, an amount): checking the whole state
    again on every step cost more than the step. One dict copy, whatever the run's
    length: the tallies, digests and history are shared with ``run`` unless set.
    """
    if not _FIELDS.issuperset(fields):
        raise TypeError(f"RunState has no field {sorted(set(fields) - _FIELDS)}")
    new = object.__new__(RunState)
    object.__setattr__(new, "__dict__", {**run.__dict__, **fields})
    return new


def checked(run: RunState) -> RunState:
    """``run`` checked as :class:`RunState` checks a state built by hand (a copy).

    Raises:
        RunStateError: what :class:`RunState` raises.
    """
    return RunState(**run.__dict__)


_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(RunState))


def _recent(value: object, field: str, limit: int, kind: type, noun: str) -> Recent[Any]:
    """A state's tallies or digests: a tuple of at most ``limit`` of ``kind``, or kept.

    A tuple's items are kept by their keys (a tally's fingerprint, a digest itself);
    one key twice is refused (``noun`` says what it is).
    """
    if (
        not isinstance(value, (tuple, Recent))
        or len(value) > limit
        or not all(isinstance(item, kind) for item in value)
    ):
        raise RunStateError(
            f"{field} must be a tuple of at most {limit} {kind.__name__}", field=field
        )
    if isinstance(value, Recent):
        return value
    found = Recent((item if kind is str else item.fingerprint, item) for item in value)
    if len(found) != len(value):
        raise RunStateError(f"{field} hold {noun} twice", field=field)
    return found


def _state_amount(value: object, field: str) -> Decimal:
    if not isinstance(value, Decimal):
        raise RunStateError(f"{field} must be a Decimal, got {value!r}", field=field)
    try:
        return as_amount(value)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"{field} {exc}", field=field) from None


def _risk_map(value: object, field: str, convert: Any) -> RiskMap[Any]:
    if type(value) is RiskMap:
        # Built by a transition from values already checked (a count plus one, an exact
        # sum of checked amounts): checking them again on every step costs more than the
        # step itself. Anything else (a dict from a caller or a file) is checked here.
        return value
    if not isinstance(value, Mapping) or set(value) != set(RISK_CLASSES):
        raise RunStateError(
            f"{field} must map exactly {', '.join(RISK_CLASSES)}, got {value!r}", field=field
        )
    return RiskMap({risk: convert(value[risk], f"{field}.{risk}") for risk in RISK_CLASSES})


def _json_list(data: Mapping[str, Any], field: str) -> list[Any]:
    value = data[field]
    if not isinstance(value, list):
        raise RunStateError(f"{field} must be a list, got {value!r}", field=field)
    return value


def _json_amount(value: object, field: str) -> Decimal:
    if not isinstance(value, str):
        raise RunStateError(f"{field} must be a decimal string, got {value!r}", field=field)
    try:
        return as_amount(value)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"{field} {exc}", field=field) from None


def _json_items(value: object, field: str, kind: Any, *, rows: bool) -> tuple[Any, ...]:
    """The items of ``field``: rows in the dataclass's field order, or (before v3) objects.

    Every value is checked by the item's own constructor. A shared run decodes a few
    hundred items on every read, so the loop builds an item's name (``field[i]``, ``i``
    being how many items came before) only for an error.
    """
    if not isinstance(value, list):
        raise RunStateError(f"{field} must be a list, got {value!r}", field=field)
    names = _field_names(kind)
    count = len(names)
    out: list[Any] = []
    for item in value:
        if rows:
            if not isinstance(item, list) or len(item) != count:
                where = f"{field}[{len(out)}]"
                raise RunStateError(
                    f"{where} must be a list of {count}: {', '.join(names)}", field=where
                )
        elif not isinstance(item, Mapping) or set(item) != set(names):
            where = f"{field}[{len(out)}]"
            raise RunStateError(
                f"{where} must be an object with keys {', '.join(names)}", field=where
            )
        try:
            out.append(kind(*item) if rows else kind(**{name: item[name] for name in names}))
        except RunStateError as exc:
            where = f"{field}[{len(out)}]"
            raise RunStateError(f"{where}.{exc.message}", field=f"{where}.{exc.field}") from None
    return tuple(out)


@functools.cache
def _field_names(kind: Any) -> tuple[str, ...]:
    """The field names of the dataclass ``kind``, in order."""
    return tuple(f.name for f in dataclasses.fields(kind))


def _json_digest(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) != DIGEST_LENGTH or not set(value) <= _HEX:
        raise RunStateError(
            f"{field} must be {DIGEST_LENGTH} lowercase hex digits, got {value!r}", field=field
        )
    return value


def _json_stop(value: object, name: str = "stopped") -> Stop:
    try:
        return Stop.from_dict(value)
    except RunStateError as exc:
        field = f"{name}.{exc.field}" if exc.field else name
        raise RunStateError(f"{name}: {exc.message}", field=field) from None


def _json_holds(value: object, field: str, kind: Any) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise RunStateError(f"{field} must be a list, got {value!r}", field=field)
    out = []
    for i, item in enumerate(value):
        try:
            out.append(kind.from_dict(item))
        except RunStateError as exc:
            where = f"{field}[{i}]"
            raise RunStateError(f"{where}: {exc.message}", field=where) from None
    return tuple(out)


def _json_conditions(value: object) -> tuple[Fired, ...]:
    if not isinstance(value, list) or len(value) > FIRED_LIMIT:
        raise RunStateError(
            f"conditions must be a list of at most {FIRED_LIMIT}, got {value!r}",
            field="conditions",
        )
    out = []
    for i, item in enumerate(value):
        try:
            out.append(Fired.from_dict(item))
        except RunStateError as exc:
            where = f"conditions[{i}]"
            field = f"{where}.{exc.field}" if exc.field else where
            raise RunStateError(f"{where}: {exc.message}", field=field) from None
    return tuple(out)


def _check_consistent(state: RunState) -> None:
    """What the cheap constructor checks leave out: the evidence marks."""
    marks = [(f"history[{i}]", a.evidence) for i, a in enumerate(state.history)]
    marks += [(f"tallies[{i}]", t.evidence) for i, t in enumerate(state.tallies)]
    for where, mark in marks:
        if mark > state.evidence:
            raise RunStateError(
                f"{where}.evidence ({mark}) exceeds evidence ({state.evidence})",
                field=f"{where}.evidence",
            )
