"""The transition function: the one place where a breaker decides anything.

Theory of operation
-------------------
A breaker is ``closed`` while its dependency looks healthy: every request is admitted
and qualifying failures (and ambiguous outcomes, which are never successes) are counted.
The failure that reaches ``failure_threshold`` opens it. While ``open`` every request
is rejected locally until the cooldown deadline; the first request at or after the
deadline moves it to ``half_open`` and becomes a probe holding a lease. While half-open,
at most ``probe_limit`` leases are in flight; ``success_threshold`` successful probes
close the breaker, and any failed, ambiguous or expired probe reopens it with a longer
cooldown. Every change of phase starts a new generation, and an outcome of a call
admitted in an older generation changes nothing: a late success never closes a breaker
that opened after the call began.

Opening rules. By default ``failure_threshold`` qualifying failures (consecutive, or
within ``window_ms``) open the breaker. A policy with a rate rule keeps, while closed, a
window of calls (the last ``window_calls``, or ``window_ms`` in ten aligned buckets) and
opens when failures reach ``failure_rate_permille`` of them, or successes slower than
``slow_call_ms`` reach ``slow_call_rate_permille`` of them, never below ``minimum_calls``
calls. Arithmetic is on integers only, so a replay is exact.

Health-check probes. Under ``probes = "health-check"`` a user's request never probes:
it is rejected while open (``cooldown``, past the deadline too) and half-open
(``probe-limit``); only a request marked ``health_check`` (the breaker's health checker)
takes a probe lease, and its outcome counts toward the same success quorum.

Rollout and the kill switch. ``force = "open"`` rejects every request (``forced-open``);
an operator's isolation (the ``isolate`` event, persisted with the state until
``release``) rejects every request too. Otherwise ``mode = "shadow"``, ``force =
"closed"`` and the ``force-closed`` operator event admit the requests the breaker would
reject: the state evolves
exactly as it would under enforcement (outcomes of calls enforcement would not have made
are stale), and each such request's record carries ``would_reject`` and the reason.

The table. :func:`step` looks the event up in :data:`MOVES` by its type and the state's
phase and calls the move found there; a pair with no move (the core's own
``lease-expired`` outside half-open, a phase it does not know) raises ``TraceError``.

The predicates. Shells never compare phases: they ask the predicates of
:mod:`toolbreaker.core._breaker.predicates` (does a caller get refused, how long until a
call could be admitted, may a shell skip the store ...) and the record predicates of
:mod:`toolbreaker.core._breaker.state` (did this record open the breaker), so a rule has
one home (``tests/test_quality.py`` finds any phase comparison outside the core). The
machine uses them too, and re-exports them where they were before they had a module.

Everything here is pure: time arrives inside events, nothing is read, locked or stored.
Shells feed events through :func:`apply` (or :func:`step`) and carry out the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from toolbreaker.core._breaker.policy import WINDOW_BUCKETS, Policy
from toolbreaker.core._breaker.predicates import admission, admits_all, due_expiry
from toolbreaker.core._breaker.state import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    PHASES,
    BreakerState,
    Event,
    Lease,
    Transition,
    built_record,
    built_state,
)
from toolbreaker.errors import TraceError

__all__ = [
    "ADMITTED",
    "MOVES",
    "OPERATOR_TYPES",
    "apply",
    "plain_record",
    "plain_step",
    "record_flags",
    "step",
]

#: Operator events: force a breaker open (``isolate``), force it closed (``force-closed``:
#: it keeps deciding and recording but admits every request), or end either (``release``).
OPERATOR_TYPES: Final = frozenset({"isolate", "force-closed", "release"})

#: The reasons of a request that reaches the dependency (a call, or a probe).
ADMITTED: Final = frozenset({"call-admitted", "probe-admitted"})
_Window = tuple[tuple[int, int, int, int], ...]

_OUTCOME_REASONS: Final = {
    "failure": ("qualifying-failure", "probe-failed"),
    "ambiguous": ("ambiguous-outcome", "ambiguous-outcome"),
}


def apply(
    state: BreakerState, event: Event, policy: Policy
) -> tuple[BreakerState, tuple[Transition, ...]]:
    """Feed one event, first expiring any probe lease that is due by its time.

    An expired lease reopens the breaker at its expiry instant, recorded as its own
    ``lease-expired`` transition before the event that observed it.
    """
    lease = due_expiry(state, event.at, policy)
    if lease is None:
        new, record = step(state, event, policy)
        return new, (record,)
    expired = Event(
        type="lease-expired",
        at=lease.admitted_at + policy.lease_ttl_ms,
        dependency=event.dependency,
        call=lease.call,
        generation=state.generation,
    )
    middle, first = step(state, expired, policy)
    new, second = step(middle, event, policy)
    return new, (first, second)


#: ``quick(state, type, at, dependency, call, generation)``: see :func:`plain_step`.
PlainStep = Callable[
    [BreakerState, str, int, str, "str | None", "int | None"], "tuple[BreakerState, str] | None"
]


def plain_step(policy: Policy) -> PlainStep | None:
    """:func:`apply` for the common case of a plain policy, without building records.

    ``None`` unless the policy is plain: enforced, not forced, no rate rule, any request
    may probe. Otherwise a function ``quick(state, type, at, dependency, call,
    generation)`` that answers for the event ``Event(type, at, dependency, call,
    generation)`` (a request or an outcome; ``at`` not negative) with ``(new state,
    reason)``, exactly what :func:`apply` decides when it makes one record, or ``None``
    when it would not answer that cheaply: a probe lease is due to expire (two records),
    or an operator forced the breaker closed (records that carry ``would_reject``). The
    record :func:`apply` would make is then :func:`plain_record` of the same fields.

    It follows the branches of :func:`step` for such a policy without building an event
    or a record (which cost more than the decision); a hypothesis test holds it equal to
    :func:`apply`. A replay of a big trace spends most of its time here.
    """
    if policy.force is not None or policy.mode != "enforce" or policy.uses_rates:
        return None
    if policy.probes != "calls":
        return None
    window_ms = policy.window_ms
    threshold = policy.failure_threshold
    probe_limit = policy.probe_limit
    quorum = policy.success_threshold

    def quick(  # noqa: PLR0917 - called once per event by a replay
        state: BreakerState,
        kind: str,
        at: int,
        dependency: str,
        call: str | None,
        generation: int | None,
    ) -> tuple[BreakerState, str] | None:
        # The branches of step() for this policy, in the same order; apply() adds only
        # lease expiry, which is left to it.
        if state.forced_closed:
            return None
        phase = state.phase
        if phase == CLOSED:
            if kind == "request":
                return state, "call-admitted"
            if generation is None:
                return state, "not-admitted"
            if generation != state.generation:
                return state, "stale-outcome"
            if kind == "success":
                if window_ms is None and state.failures:
                    return _with(state, failures=()), "success"
                return state, "success"
            if kind == "ignored":
                return state, "non-qualifying"
            reason = _OUTCOME_REASONS[kind][0]
            recent = state.failures
            if window_ms is not None:
                recent = tuple(t for t in recent if at - t < window_ms)
            failures = (*recent, at)
            if len(failures) >= threshold:
                return _open(state, at, policy, opening=state.opens + 1), reason
            return _with(state, failures=failures), reason
        if phase == OPEN:
            until = state.open_until
            if until is None or state.isolated:
                return None
            if kind != "request":
                return state, "not-admitted" if generation is None else "stale-outcome"
            if at < until:
                return state, "cooldown"
            probing = built_state(
                HALF_OPEN,
                state.generation + 1,
                (),
                None,
                state.opens,
                0,
                (Lease(call or "", at),),
                False,
                state.recovered_from_corruption,
                (),
                False,
                state.operator_reason,
            )
            return probing, "probe-admitted"
        leases = state.leases
        if leases and due_expiry(state, at, policy) is not None:
            return None
        if kind == "request":
            if len(leases) >= probe_limit:
                return state, "probe-limit"
            return _with(state, leases=(*leases, Lease(call or "", at))), "probe-admitted"
        if generation is None:
            return state, "not-admitted"
        if generation != state.generation:
            return state, "stale-outcome"
        kept = tuple(x for x in leases if x.call != call)
        if len(kept) == len(leases):
            return state, "stale-outcome"
        if kind == "ignored":
            return _with(state, leases=kept), "non-qualifying"
        if kind == "success":
            successes = state.successes + 1
            if successes >= quorum:
                return _closed(state), "probe-quorum"
            return _with(state, leases=kept, successes=successes), "probe-success"
        return _open(state, at, policy, opening=state.opens + 1), _OUTCOME_REASONS[kind][1]

    return quick


def record_flags(kind: str, reason: str, would_reject: bool = False) -> tuple[bool, bool]:
    """``(attempted, rejected)`` of the record of a ``kind`` event decided for ``reason``.

    The one rule: a request reaches the dependency when it is admitted (or admitted
    although enforcement would reject it: ``would_reject``), and is rejected locally
    otherwise; any other event is neither. :func:`step` has it inlined (its hot path), and
    a property test holds every record it makes to it.
    """
    if kind != "request":
        return False, False
    attempted = would_reject or reason in ADMITTED
    return attempted, not attempted


def plain_record(  # noqa: PLR0917 - the fields plain_step() decided, in its order
    dependency: str,
    kind: str,
    at: int,
    call: str | None,
    generation: int | None,
    before: BreakerState,
    after: BreakerState,
    reason: str,
) -> Transition:
    """The record :func:`apply` makes for an event :func:`plain_step` answered.

    The event is ``Event(kind, at, dependency, call, generation)``; ``plain_step`` turned
    ``before`` into ``after`` for ``reason``.
    """
    attempted, rejected = record_flags(kind, reason)
    event = Event(kind, at, dependency, call, generation)
    return built_record(
        dependency,
        event,
        before.phase,
        after.phase,
        attempted,
        rejected,
        reason,
        after.generation,
        after.open_until,
        False,
    )


def step(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, Transition]:
    """Apply one event to one breaker's state and say what happened.

    The move is looked up in :data:`MOVES` by the event's type and the state's phase.

    Raises:
        TraceError: the event type is unknown, it is no move of the state's phase (a
            ``lease-expired`` outside half-open), or its time is negative.
    """
    at = event.at
    if at < 0:
        raise TraceError(f"time must not be negative, got {at}")
    if state.open_until is None and state.phase == OPEN and not state.isolated:
        # A recovered corrupt state: its cooldown starts at the first event touching it.
        state = _open(state, at, policy, opening=max(state.opens, 1), generation=state.generation)
    kind = event.type
    moves = MOVES.get(kind)
    if moves is None:
        raise TraceError(f"unknown event type {kind!r}")
    phase = state.phase
    move = moves.get(phase)
    if move is None:
        raise TraceError(f"{kind} is no move of a {phase} breaker")
    new, reason = move(state, event, policy)
    if kind == "request":
        # Shadow mode and a forced close admit what enforcement rejects, and record it.
        would_reject = reason in _SHADOWED and admits_all(state, policy)
        admitted = would_reject or reason in ADMITTED  # record_flags(), inlined
        return new, built_record(
            event.dependency,
            event,
            phase,
            new.phase,
            admitted,
            not admitted,
            reason,
            new.generation,
            new.open_until,
            would_reject,
        )
    return new, built_record(
        event.dependency,
        event,
        phase,
        new.phase,
        False,
        False,
        reason,
        new.generation,
        new.open_until,
        False,
    )


# -- the moves: one function per (event type, phase) entry of MOVES ----------------------
# Each takes the state (a recovered corrupt one already given its cooldown), the event and
# the policy, and returns the new state and the reason of the record.

_Move = Callable[[BreakerState, Event, Policy], tuple[BreakerState, str]]
#: Rejections that shadow mode and a forced close admit (recorded ``would_reject``).
_SHADOWED: Final = frozenset({"cooldown", "probe-limit"})


def _request_closed(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    return state, "forced-open" if policy.force == "open" else "call-admitted"


def _request_open(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    reason = admission(state, event.at, policy, health_check=event.health_check)
    if reason != "probe-admitted":
        return state, reason
    probing = built_state(
        HALF_OPEN,
        state.generation + 1,
        (),
        None,
        state.opens,
        0,
        (Lease(event.call or "", event.at),),
        False,
        state.recovered_from_corruption,
        (),
        state.forced_closed,
        state.operator_reason,
    )
    return probing, reason


def _request_half_open(
    state: BreakerState, event: Event, policy: Policy
) -> tuple[BreakerState, str]:
    reason = admission(state, event.at, policy, health_check=event.health_check)
    if reason != "probe-admitted":
        return state, reason
    return _with(state, leases=(*state.leases, Lease(event.call or "", event.at))), reason


def _unsettled(state: BreakerState, event: Event) -> str | None:
    """Why an outcome settles nothing in this generation, or ``None``."""
    if event.generation is None:
        # The call never reached the dependency under this policy (a replay of a trace
        # recorded under another one): its outcome says nothing about health.
        return "not-admitted"
    if event.generation != state.generation:
        return "stale-outcome"
    return None


def _outcome_open(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    # No call is ever admitted in the open phase, so every outcome seen there is stale.
    return state, "not-admitted" if event.generation is None else "stale-outcome"


def _outcome_closed(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    unsettled = _unsettled(state, event)
    if unsettled is not None:
        return state, unsettled
    kind = event.type
    if kind == "ignored":
        return state, "non-qualifying"
    at = event.at
    failed = kind != "success"
    if failed:
        reason = _OUTCOME_REASONS[kind][0]
    else:
        reason = "slow-call" if _slow(event, policy) else "success"
    window = state.window
    if policy.uses_rates:
        window = _slide(window, at, failed=failed, slow=reason == "slow-call", policy=policy)
        opening = _rate_opening(window, policy)
        if opening is not None:
            hint = event.retry_after_ms
            return _open(state, at, policy, opening=state.opens + 1, hint=hint), opening
        if policy.failure_rate_permille is not None:
            # The failure rate replaces the failure count.
            return _with(state, window=window), reason
    if not failed:
        if policy.window_ms is None and state.failures:
            return _with(state, failures=(), window=window), reason
        return (state if window is state.window else _with(state, window=window)), reason
    recent = state.failures
    if policy.window_ms is not None:
        recent = tuple(t for t in recent if at - t < policy.window_ms)
    failures = (*recent, at)
    if len(failures) >= policy.failure_threshold:
        return _open(state, at, policy, opening=state.opens + 1, hint=event.retry_after_ms), reason
    return _with(state, failures=failures, window=window), reason


def _outcome_half_open(
    state: BreakerState, event: Event, policy: Policy
) -> tuple[BreakerState, str]:
    unsettled = _unsettled(state, event)
    if unsettled is not None:
        return state, unsettled
    leases = tuple(x for x in state.leases if x.call != event.call)
    if len(leases) == len(state.leases):
        # Not one of this generation's probes: nothing it says can be trusted.
        return state, "stale-outcome"
    kind = event.type
    if kind == "ignored":
        return _with(state, leases=leases), "non-qualifying"
    if kind == "success":
        if policy.slow_call_rate_permille is not None and _slow(event, policy):
            # Slow is down: a slow probe does not vouch for the dependency.
            return _open(state, event.at, policy, opening=state.opens + 1), "slow-probe"
        successes = state.successes + 1
        if successes >= policy.success_threshold:
            return _closed(state), "probe-quorum"
        return _with(state, leases=leases, successes=successes), "probe-success"
    reason = _OUTCOME_REASONS[kind][1]
    return _open(
        state, event.at, policy, opening=state.opens + 1, hint=event.retry_after_ms
    ), reason


def _lease_expired(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    # Made by apply() for this generation's oldest probe; checked like any probe outcome.
    if event.generation != state.generation or all(x.call != event.call for x in state.leases):
        return state, "stale-outcome"
    return _open(state, event.at, policy, opening=state.opens + 1), "lease-expired"


def _isolate(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    isolated = built_state(
        OPEN,
        state.generation + 1,
        (),
        None,
        state.opens,
        0,
        (),
        True,
        state.recovered_from_corruption,
        (),
        False,
        event.reason,
    )
    return isolated, "isolated"


def _force_closed(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    forced = built_state(
        CLOSED,
        state.generation + 1,
        (),
        None,
        0,
        0,
        (),
        False,
        state.recovered_from_corruption,
        (),
        True,
        event.reason,
    )
    return forced, "forced-closed"


def _release(state: BreakerState, event: Event, policy: Policy) -> tuple[BreakerState, str]:
    released = built_state(
        CLOSED,
        state.generation + 1,
        (),
        None,
        0,
        0,
        (),
        False,
        state.recovered_from_corruption,
        (),
        False,
        None,
    )
    return released, "released"


_OUTCOME_MOVES: Final[dict[str, _Move]] = {
    CLOSED: _outcome_closed,
    OPEN: _outcome_open,
    HALF_OPEN: _outcome_half_open,
}

#: The transition table: event type -> phase -> move. A pair that is missing is no move
#: at all, and step() raises TraceError for it (``lease-expired`` is made by apply() for
#: a half-open breaker's expired probe, nowhere else).
MOVES: Final[dict[str, dict[str, _Move]]] = {
    "request": {CLOSED: _request_closed, OPEN: _request_open, HALF_OPEN: _request_half_open},
    "success": _OUTCOME_MOVES,
    "failure": _OUTCOME_MOVES,
    "ambiguous": _OUTCOME_MOVES,
    "ignored": _OUTCOME_MOVES,
    "lease-expired": {HALF_OPEN: _lease_expired},
    "isolate": dict.fromkeys(PHASES, _isolate),
    "force-closed": dict.fromkeys(PHASES, _force_closed),
    "release": dict.fromkeys(PHASES, _release),
}


def _slow(event: Event, policy: Policy) -> bool:
    limit, took = policy.slow_call_ms, event.duration_ms
    return limit is not None and took is not None and took > limit


def _slide(window: _Window, at: int, *, failed: bool, slow: bool, policy: Policy) -> _Window:
    """The window with one more call.

    The last ``window_calls`` calls, or the aligned buckets of the last ``window_ms``.
    """
    f, s = int(failed), int(slow)
    if policy.window_calls is not None:
        return (*window, (at, 1, f, s))[-policy.window_calls :]
    index = at // policy.bucket_ms
    if window:
        # Clocks of several processes may disagree by a little: never go back a bucket.
        index = max(index, window[-1][0])
    kept = tuple(entry for entry in window if entry[0] > index - WINDOW_BUCKETS)
    if kept and kept[-1][0] == index:
        _, calls, failures, slows = kept[-1]
        return (*kept[:-1], (index, calls + 1, failures + f, slows + s))
    return (*kept, (index, 1, f, s))


def _rate_opening(window: _Window, policy: Policy) -> str | None:
    """The rate rule the window breaks, if it holds at least ``minimum_calls`` calls."""
    calls = sum(entry[1] for entry in window)
    if calls < (policy.minimum_calls or 1):
        return None
    limit = policy.failure_rate_permille
    if limit is not None and sum(entry[2] for entry in window) * 1000 >= limit * calls:
        return "failure-rate"
    limit = policy.slow_call_rate_permille
    if limit is not None and sum(entry[3] for entry in window) * 1000 >= limit * calls:
        return "slow-call-rate"
    return None


def _open(
    state: BreakerState,
    at: int,
    policy: Policy,
    *,
    opening: int,
    hint: int | None = None,
    generation: int | None = None,
) -> BreakerState:
    wait = policy.cooldown_for(opening)
    if hint is not None and hint > wait:
        wait = hint
    return built_state(
        OPEN,
        state.generation + 1 if generation is None else generation,
        (),
        at + wait,
        opening,
        0,
        (),
        False,
        state.recovered_from_corruption,
        (),
        state.forced_closed,
        state.operator_reason,
    )


def _closed(state: BreakerState) -> BreakerState:
    """Closed again after a probe quorum: a new generation, what an operator set kept."""
    return built_state(
        CLOSED,
        state.generation + 1,
        (),
        None,
        0,
        0,
        (),
        False,
        state.recovered_from_corruption,
        (),
        state.forced_closed,
        state.operator_reason,
    )


def _with(
    state: BreakerState,
    *,
    failures: tuple[int, ...] | None = None,
    leases: tuple[Lease, ...] | None = None,
    successes: int | None = None,
    window: _Window | None = None,
) -> BreakerState:
    """The same phase and generation with some counters changed."""
    return built_state(
        state.phase,
        state.generation,
        state.failures if failures is None else failures,
        state.open_until,
        state.opens,
        state.successes if successes is None else successes,
        state.leases if leases is None else leases,
        state.isolated,
        state.recovered_from_corruption,
        state.window if window is None else window,
        state.forced_closed,
        state.operator_reason,
    )
