"""Breaker state, events and transition records: plain frozen data.

They serialise to the same dicts in memory, in SQLite and in Redis. Loading a state
never trusts its input: anything that does not validate loads as ``open`` and is flagged
``recovered_from_corruption`` (fail closed), instead of raising or defaulting to healthy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, Final

from toolbreaker.core._breaker.policy import WINDOW_BUCKETS, Policy
from toolbreaker.core._files import loads_json

__all__ = [
    "CLOSED",
    "EVENT_TYPES",
    "FAILED_OUTCOMES",
    "HALF_OPEN",
    "MAX_TIME_MS",
    "OPEN",
    "OUTCOME_TYPES",
    "PHASES",
    "REASONS",
    "STATE_SCHEMA",
    "BreakerState",
    "Event",
    "Lease",
    "Transition",
    "admitted_probe",
    "built_record",
    "built_state",
    "changed_phase",
    "forced",
    "half_opened",
    "opened",
    "opening",
    "phase_changed",
    "reopened",
    "was_open",
]

CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half_open"
PHASES: Final = (CLOSED, OPEN, HALF_OPEN)

#: Outcome events: they settle an admitted call.
OUTCOME_TYPES: Final = frozenset({"success", "failure", "ignored", "ambiguous"})
#: The outcomes that say the dependency did not serve the call (an ambiguous one may not have).
FAILED_OUTCOMES: Final = frozenset({"failure", "ambiguous"})
#: Events a trace may contain; ``lease-expired`` is only ever made by the core itself.
EVENT_TYPES: Final = frozenset({"request"}) | OUTCOME_TYPES

REASONS: Final = (
    "call-admitted",
    "probe-admitted",
    "cooldown",
    "probe-limit",
    "success",
    "probe-success",
    "probe-quorum",
    "qualifying-failure",
    "probe-failed",
    "ambiguous-outcome",
    "non-qualifying",
    "stale-outcome",
    "not-admitted",
    "lease-expired",
    "isolated",
    "released",
    "slow-call",
    "failure-rate",
    "slow-call-rate",
    "slow-probe",
    "forced-open",
    "forced-closed",
)

STATE_SCHEMA: Final = "toolbreaker.state/v1"

#: The largest instant or counter a state (or trace) may hold: 2**53 - 1, the largest
#: integer every JSON reader keeps exact. Anything larger loads as corrupt.
MAX_TIME_MS: Final = 2**53 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One input to the state machine.

    Attributes:
        type: ``request``, an outcome (``success``, ``failure``, ``ignored``,
            ``ambiguous``), or ``lease-expired`` (made by the core).
        at: integer milliseconds on a monotonic clock; never decreases per dependency.
        dependency: the breaker key.
        call: the call id a request admits or an outcome settles.
        generation: for outcomes, the generation the settled call was admitted in;
            ``None`` for a call this policy never admitted (a replay under another policy).
        retry_after_ms: for failures, the least time the provider asked us to wait.
        duration_ms: for successes, how long the call took (filled in when the policy
            sets ``slow_call_ms``).
        reason: for operator events, the operator's reason (shown to the model while the
            breaker is isolated).
        health_check: for requests, made by the breaker's health checker rather than a
            user's call (only these probe under ``probes = "health-check"``). Left out
            of :meth:`to_dict` while false.
    """

    type: str
    at: int
    dependency: str
    call: str | None = None
    generation: int | None = None
    retry_after_ms: int | None = None
    duration_ms: int | None = None
    reason: str | None = None
    health_check: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The event as it appears in receipts; absent optional fields are left out."""
        out: dict[str, Any] = {"type": self.type, "at": self.at}
        if self.call is not None:
            out["call"] = self.call
        if self.retry_after_ms is not None:
            out["retry_after_ms"] = self.retry_after_ms
        if self.duration_ms is not None:
            out["duration_ms"] = self.duration_ms
        if self.reason is not None:
            out["reason"] = self.reason
        if self.health_check:
            out["health_check"] = True
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """A probe in flight while half-open; it expires at ``admitted_at + lease_ttl_ms``."""

    call: str
    admitted_at: int


@dataclasses.dataclass(frozen=True, slots=True)
class BreakerState:
    """The persisted state of one breaker.

    Attributes:
        phase: ``closed``, ``open`` or ``half_open``.
        generation: bumped on every change of phase; outcomes of older calls are stale.
        failures: instants of the failures counted toward the threshold while closed.
        open_until: while open, the instant a request may probe; ``None`` while open
            means the cooldown starts at the next event (a recovered corrupt state).
        opens: consecutive openings since the breaker last closed (drives the cooldown).
        successes: successful probes in the current half-open generation.
        leases: probes in flight while half-open.
        isolated: held open by an operator until released.
        recovered_from_corruption: loaded from a state that did not validate.
        window: while closed under a rate rule, the calls in the window as
            ``(at, calls, failures, slow)`` entries: one per call for a count-based
            window, one per aligned bucket (``at`` is the bucket's index) for a time-based
            one. Left out of :meth:`to_dict` while empty.
        forced_closed: an operator forced the breaker closed (``force-closed``) until
            released: it decides and records, but admits every request.
        operator_reason: the reason of the operator event that isolated or forced the
            breaker, when one was given. Both are left out of :meth:`to_dict` while unset.
    """

    phase: str = CLOSED
    generation: int = 0
    failures: tuple[int, ...] = ()
    open_until: int | None = None
    opens: int = 0
    successes: int = 0
    leases: tuple[Lease, ...] = ()
    isolated: bool = False
    recovered_from_corruption: bool = False
    window: tuple[tuple[int, int, int, int], ...] = ()
    forced_closed: bool = False
    operator_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as a JSON-ready dict, tagged with its schema."""
        out: dict[str, Any] = {
            "schema": STATE_SCHEMA,
            "state": self.phase,
            "generation": self.generation,
            "failures": list(self.failures),
            "open_until": self.open_until,
            "opens": self.opens,
            "successes": self.successes,
            "leases": [{"call": x.call, "admitted_at": x.admitted_at} for x in self.leases],
            "isolated": self.isolated,
            "recovered_from_corruption": self.recovered_from_corruption,
        }
        if self.window:
            out["window"] = [list(entry) for entry in self.window]
        if self.forced_closed:
            out["forced_closed"] = True
        if self.operator_reason is not None:
            out["operator_reason"] = self.operator_reason
        return out

    @classmethod
    def from_dict(cls, data: object, policy: Policy) -> BreakerState:
        """Load a state, failing closed.

        Anything that does not validate (unknown state name, wrong types, negative
        counters, more leases than the policy allows, another schema) loads as ``open``
        with the cooldown starting at the next event, flagged ``recovered_from_corruption``.
        Missing optional fields take their defaults; ``state`` itself is required.
        """
        try:
            return _validated(data, policy)
        except (ValueError, TypeError, KeyError):
            return CORRUPT

    @classmethod
    def from_json(cls, raw: str | bytes, policy: Policy) -> BreakerState:
        """Load a state from its stored JSON text, failing closed.

        Text that is not strict JSON (a duplicate key, so that ``"state"`` could say two
        things; a number of thousands of digits; deep nesting; invalid UTF-8) loads as
        corrupt, like a state that does not validate.
        """
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            data = loads_json(text, _NotJSON, mark_duplicates=True, max_depth=8)
        except (_NotJSON, UnicodeDecodeError):
            return CORRUPT
        return cls.from_dict(data, policy)


class _NotJSON(ValueError):
    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)


#: What every state that fails validation loads as.
CORRUPT: Final = BreakerState(phase=OPEN, open_until=None, opens=0, recovered_from_corruption=True)

_STATE_KEYS: Final = frozenset(
    {
        "schema",
        "state",
        "generation",
        "failures",
        "open_until",
        "opens",
        "successes",
        "leases",
        "isolated",
        "recovered_from_corruption",
        "window",
        "forced_closed",
        "operator_reason",
    }
)


def _count(value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_TIME_MS:
        raise ValueError("not a count")
    return value


def _flag(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError("not a flag")
    return value


def _validated(data: object, policy: Policy) -> BreakerState:
    if not isinstance(data, Mapping) or not set(data) <= _STATE_KEYS:
        raise ValueError("not a state")
    if data.get("schema", STATE_SCHEMA) != STATE_SCHEMA:
        raise ValueError("schema")
    phase = data["state"]
    if phase not in PHASES:
        raise ValueError(phase)
    failures = data.get("failures", [])
    leases = data.get("leases", [])
    window = data.get("window", [])
    if not isinstance(failures, list) or not isinstance(leases, list):
        raise TypeError("lists")
    open_until = data.get("open_until")
    state = BreakerState(
        phase=phase,
        generation=_count(data.get("generation", 0)),
        failures=tuple(_count(x) for x in failures),
        open_until=None if open_until is None else _count(open_until),
        opens=_count(data.get("opens", 0)),
        successes=_count(data.get("successes", 0)),
        leases=tuple(_lease(x) for x in leases),
        isolated=_flag(data.get("isolated", False)),
        recovered_from_corruption=_flag(data.get("recovered_from_corruption", False)),
        window=_window(window, policy),
        forced_closed=_flag(data.get("forced_closed", False)),
        operator_reason=_reason(data.get("operator_reason")),
    )
    consistent = (
        len(state.leases) <= policy.probe_limit
        and len(state.failures) < policy.failure_threshold
        and state.successes < policy.success_threshold
        and (state.phase == HALF_OPEN or not (state.leases or state.successes))
        and (state.phase == CLOSED or not state.failures)
        and (state.phase == OPEN or (state.open_until is None and not state.isolated))
        and (state.phase != OPEN or state.open_until is not None or state.isolated)
        and len({x.call for x in state.leases}) == len(state.leases)
        and (state.phase == CLOSED or not state.window)
        and not (state.isolated and state.forced_closed)
        and (state.operator_reason is None or state.isolated or state.forced_closed)
    )
    if not consistent:
        raise ValueError("inconsistent")
    return state


def _window(value: object, policy: Policy) -> tuple[tuple[int, int, int, int], ...]:
    """The window, entry by entry validated; fitted to ``policy`` when it has changed.

    A malformed entry is corruption. A well-formed window kept under another policy is
    not: a policy without a rate rule drops it, a shorter window keeps its newest entries,
    and a window of the other kind (count or time) starts empty, so changing a rate rule
    never fails every closed breaker closed.
    """
    if not isinstance(value, list):
        raise TypeError("window")
    entries = []
    for item in value:
        if not isinstance(item, list) or len(item) != 4:
            raise ValueError(item)
        at, calls, failures, slow = (_count(x) for x in item)
        if calls < 1 or failures > calls or slow > calls:
            raise ValueError(item)
        entries.append((at, calls, failures, slow))
    if not policy.uses_rates:
        return ()
    limit = policy.window_calls
    if limit is not None:
        return tuple(entries[-limit:]) if all(entry[1] == 1 for entry in entries) else ()
    if any(a[0] >= b[0] for a, b in pairwise(entries)):
        return ()  # not a time-based window: this policy's starts empty
    return tuple(entries[-WINDOW_BUCKETS:])


def _reason(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > 300):
        raise ValueError("operator_reason")
    return value


def _lease(value: object) -> Lease:
    if not isinstance(value, Mapping) or set(value) != {"call", "admitted_at"}:
        raise ValueError(value)
    call = value["call"]
    if not isinstance(call, str):
        raise TypeError(call)
    return Lease(call=call, admitted_at=_count(value["admitted_at"]))


@dataclasses.dataclass(frozen=True, slots=True)
class Transition:
    """What the core did with one event: the unit of receipts and listeners.

    Attributes:
        dependency: the breaker key.
        event: the input event (or the core's own ``lease-expired``).
        from_phase: the phase before the event.
        to_phase: the phase after it.
        attempted: the event admitted a call to the remote dependency.
        rejected: the event was a request rejected locally.
        reason: why, one of :data:`REASONS`.
        generation: the generation after the event.
        open_until: the cooldown deadline after the event, while open.
        would_reject: the request was admitted only because the policy admits every
            request (shadow mode, forced closed); ``reason`` says why it would have
            been rejected. Left out of :meth:`to_dict` while false.
        policy_version: the version of the policy the core decided under, stamped by a
            breaker that follows a published sheet (``None`` otherwise). Never in
            :meth:`to_dict`: a receipt names its one policy version at its top.
    """

    dependency: str
    event: Event
    from_phase: str
    to_phase: str
    attempted: bool
    rejected: bool
    reason: str
    generation: int
    open_until: int | None
    would_reject: bool = False
    policy_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as it appears in receipts."""
        out: dict[str, Any] = {
            "event": self.event.to_dict(),
            "from": self.from_phase,
            "to": self.to_phase,
            "attempted": self.attempted,
            "rejected": self.rejected,
            "reason": self.reason,
            "generation": self.generation,
            "open_until": self.open_until,
        }
        if self.would_reject:
            out["would_reject"] = True
        return out


# -- building states and records fast, for the core's hot path ------------------------------
# A frozen dataclass's __init__ sets each field through object.__setattr__ (a lookup and a
# generic call per field); setting the slots through their own descriptors builds the same
# object in well under half the time. The core builds a state or a record per event, so
# step() and a replay spend much of their time here. Only the core calls these; a
# property test holds them equal to the constructors (tests/core/breaker/test_predicates.py).

_new = object.__new__
(
    _s_phase,
    _s_generation,
    _s_failures,
    _s_open_until,
    _s_opens,
    _s_successes,
    _s_leases,
    _s_isolated,
    _s_recovered,
    _s_window,
    _s_forced_closed,
    _s_operator_reason,
) = (BreakerState.__dict__[f.name].__set__ for f in dataclasses.fields(BreakerState))
(
    _t_dependency,
    _t_event,
    _t_from_phase,
    _t_to_phase,
    _t_attempted,
    _t_rejected,
    _t_reason,
    _t_generation,
    _t_open_until,
    _t_would_reject,
    _t_policy_version,
) = (Transition.__dict__[f.name].__set__ for f in dataclasses.fields(Transition))


def built_state(  # noqa: PLR0917 - every field, in order, for speed
    phase: str,
    generation: int,
    failures: tuple[int, ...],
    open_until: int | None,
    opens: int,
    successes: int,
    leases: tuple[Lease, ...],
    isolated: bool,
    recovered_from_corruption: bool,
    window: tuple[tuple[int, int, int, int], ...],
    forced_closed: bool,
    operator_reason: str | None,
) -> BreakerState:
    """``BreakerState(...)`` with every field given in order, built faster (core only)."""
    state: BreakerState = _new(BreakerState)
    _s_phase(state, phase)
    _s_generation(state, generation)
    _s_failures(state, failures)
    _s_open_until(state, open_until)
    _s_opens(state, opens)
    _s_successes(state, successes)
    _s_leases(state, leases)
    _s_isolated(state, isolated)
    _s_recovered(state, recovered_from_corruption)
    _s_window(state, window)
    _s_forced_closed(state, forced_closed)
    _s_operator_reason(state, operator_reason)
    return state


def built_record(  # noqa: PLR0917 - every field but the policy version, for speed
    dependency: str,
    event: Event,
    from_phase: str,
    to_phase: str,
    attempted: bool,
    rejected: bool,
    reason: str,
    generation: int,
    open_until: int | None,
    would_reject: bool,
) -> Transition:
    """``Transition(...)`` with every field but ``policy_version`` (``None``), built faster."""
    record: Transition = _new(Transition)
    _t_dependency(record, dependency)
    _t_event(record, event)
    _t_from_phase(record, from_phase)
    _t_to_phase(record, to_phase)
    _t_attempted(record, attempted)
    _t_rejected(record, rejected)
    _t_reason(record, reason)
    _t_generation(record, generation)
    _t_open_until(record, open_until)
    _t_would_reject(record, would_reject)
    _t_policy_version(record, None)
    return record


# -- what a record (or a pair of states) says happened: the only place phases are compared ---
# Shells (the breaker's counters, replay, tuning, the dashboard, listeners) ask these
# instead of comparing phases themselves, so "did it open" has one meaning everywhere.


def forced(phase: str, generation: int, *, open_until: int = 0) -> BreakerState:
    """The state an operator or a test puts a breaker in: ``phase`` from now on.

    ``open`` lasts until ``open_until``; ``half_open`` starts with no probe in flight;
    ``closed`` has empty counters. Every forced state counts as a fresh ``generation``.

    Raises:
        ValueError: ``phase`` is none of :data:`CLOSED`, :data:`OPEN`, :data:`HALF_OPEN`.
    """
    if phase == OPEN:
        return BreakerState(phase=OPEN, generation=generation, open_until=open_until, opens=1)
    if phase == HALF_OPEN:
        return BreakerState(phase=HALF_OPEN, generation=generation, opens=1, leases=())
    if phase == CLOSED:
        return BreakerState(generation=generation)
    raise ValueError(f"unknown phase {phase!r}")


def opened(record: Transition) -> bool:
    """Whether the transition opened the breaker: from closed, or back from half-open.

    An event seen while the breaker was already open (a rejection, an isolation of an
    open breaker) did not open it.
    """
    return record.to_phase == OPEN and record.from_phase != OPEN


def opening(before: BreakerState, after: BreakerState) -> bool:
    """:func:`opened` for a transition known by its two states (a replay's fast path)."""
    return after.phase == OPEN and before.phase != OPEN


def was_open(record: Transition) -> bool:
    """Whether the breaker was open when the record's event arrived.

    A tally that starts in the middle of a stream may start with the breaker open.
    """
    return record.from_phase == OPEN


def reopened(record: Transition) -> bool:
    """Whether a failed, slow or expired probe sent a half-open breaker back to open."""
    return record.to_phase == OPEN and record.from_phase == HALF_OPEN


def half_opened(record: Transition) -> bool:
    """Whether the transition moved the breaker to half-open (its first probe)."""
    return record.to_phase == HALF_OPEN and record.from_phase != HALF_OPEN


def changed_phase(record: Transition) -> bool:
    """Whether the breaker is in another phase after the transition than before it."""
    return record.to_phase != record.from_phase


def phase_changed(before: BreakerState, after: BreakerState) -> bool:
    """:func:`changed_phase` for a transition known by its two states (a replay's fast path)."""
    return after.phase != before.phase


def admitted_probe(record: Transition) -> bool:
    """Whether the record admitted a probe: a call whose outcome decides recovery.

    A request admitted only because the policy admits everything (``would_reject``) is
    not a probe, even while half-open.
    """
    return record.attempted and record.to_phase == HALF_OPEN and not record.would_reject
