"""The breaker's predicates: the questions every shell asks instead of comparing phases.

A shell never compares a phase or restates a rule of the machine: it asks here. Does a
caller get refused now (:func:`rejects_callers`: forced states, isolation and shadow mode
included)? What would a request get, cheaply (:func:`admission`, :func:`idle_rejection`,
and for how long: :func:`idle_window`), and may the shell skip the store
(:func:`is_quiet`, :func:`fast_path_safe`)? How long until a call could be admitted
(:func:`retry_after_ms`)? Is a health check due (:func:`check_due`)? The record
predicates (did this transition open the breaker ...) are in
:mod:`toolbreaker.core._breaker.state`, beside the records they read.

Each is a pure function of a state (or a record) and a policy;
``tests/core/breaker/test_predicates.py`` holds each to :func:`~.machine.apply` on random
walks.
"""

from __future__ import annotations

import sys
from typing import Final, Literal, NamedTuple

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    BreakerState,
    Lease,
    Transition,
)

__all__ = [
    "FOREVER",
    "UNCLASSIFIED",
    "IdleWindow",
    "admission",
    "admits_all",
    "check_due",
    "due_expiry",
    "fast_path_safe",
    "held_by_operator",
    "idle_rejection",
    "idle_window",
    "is_evictable",
    "is_quiet",
    "may_probe",
    "may_start_rejecting",
    "rejects_callers",
    "retry_after_ms",
    "unclassified_type",
]

#: The failure class of an exception the classifier does not know, before its type:
#: ``unknown-exception:MyAPIError``. It is ``ignored``: it never counts toward opening.
UNCLASSIFIED: Final = "unknown-exception"


def admission(state: BreakerState, at: int, policy: Policy, *, health_check: bool = False) -> str:
    """What a request at ``at`` would get, without building anything.

    Returns ``call-admitted``, ``probe-admitted``, ``cooldown``, ``probe-limit``,
    ``isolated`` or ``forced-open``: what enforcement decides (shadow mode and a forced
    close are applied by :func:`step`). Half-open answers ignore lease expiry;
    :func:`apply` handles that first. Shells use this to decide cheaply whether a call
    must go through :func:`step`. Under ``probes = "health-check"`` only a request made
    by the health checker (``health_check``) may probe: a user's request is rejected
    with ``cooldown`` while open and ``probe-limit`` while half-open.
    """
    if policy.force == "open":
        return "forced-open"
    phase = state.phase
    if phase == CLOSED:
        return "call-admitted"
    checker_only = policy.probes == "health-check" and not health_check
    if phase == OPEN:
        if state.isolated:
            return "isolated"
        if state.open_until is None or at < state.open_until or checker_only:
            return "cooldown"
        return "probe-admitted"
    if checker_only or len(state.leases) >= policy.probe_limit:
        return "probe-limit"
    return "probe-admitted"


def idle_rejection(state: BreakerState, at: int, policy: Policy) -> str | None:
    """The reason a request at ``at`` is rejected *without changing the state*, or ``None``.

    ``None`` means the request must go through :func:`step`: it is admitted, or its
    rejection changes something (a recovered corrupt state starts its cooldown at the
    first event that touches it), or a probe lease may be due to expire. Shells use this
    to reject locally, without a lock or a round trip. It answers for a user's request,
    never for a health checker's.
    """
    # The open branch of admission(), minus the cases where step() changes the state.
    if policy.force == "open":
        # A recovered corrupt state starts its cooldown at its next event, forced or not.
        return "forced-open" if fast_path_safe(state) else None
    if state.phase != OPEN or (admits_all(state, policy) and not state.isolated):
        return None
    if state.isolated:
        return "isolated"
    until = state.open_until
    if until is None:
        return None
    # Under health-check probes a user's request waits for the checker, past the deadline too.
    return "cooldown" if at < until or policy.probes == "health-check" else None


#: The end of a window no time ends: an isolation or a forced open lasts until an operator acts.
FOREVER: Final = sys.maxsize


class IdleWindow(NamedTuple):
    """What :func:`idle_window` found: a rejection that holds, unchanged, for a while."""

    #: The reason every user's request gets (:func:`idle_rejection`'s answer).
    reason: str
    #: The window ends here (exclusive): from then on, ask again. :data:`FOREVER` if never.
    until: int
    #: When a request could be admitted (:func:`retry_after_ms` is the time left until
    #: then), or ``None`` when that is unknown (isolated, forced open, waiting for checks).
    admits_at: int | None


def idle_window(state: BreakerState, at: int, policy: Policy) -> IdleWindow | None:
    """:func:`idle_rejection` at ``at``, with how long its answer holds; ``None`` if none.

    For every ``t`` with ``at <= t < until``, a user's request at ``t`` is rejected with
    ``reason`` without changing the state, and :func:`retry_after_ms` at ``t`` is
    ``admits_at - t`` (``None`` with ``admits_at``). A shell rejects locally for the
    whole window, as long as the state and the policy are the same objects, without
    asking again: the open state's hot path.
    """
    reason = idle_rejection(state, at, policy)
    if reason is None:
        return None
    until = state.open_until
    if reason != "cooldown" or until is None or at >= until:
        # Isolated, forced open, or (health-check probes) waiting past the cooldown for a
        # passing check: nothing but an event ends it, and the wait is unknown.
        return IdleWindow(reason, FOREVER, None)
    return IdleWindow(reason, until, until)


def admits_all(state: BreakerState, policy: Policy) -> bool:
    """Whether requests that enforcement would reject are admitted (and recorded as such).

    Shadow mode, a policy forced closed, and an operator's forced close (unless the
    policy forces the breaker open). Isolation and ``force = "open"`` still reject:
    :func:`rejects_callers` says what a caller gets.
    """
    return policy.admits_all or (state.forced_closed and policy.force is None)


def rejects_callers(state: BreakerState, policy: Policy) -> bool:
    """Whether the breaker refuses its callers now: the question every shell asks.

    True while the policy forces it open, while an operator isolates it, while it is open
    under enforcement (a probe may still be admitted once the cooldown is over), and while
    it is half-open under ``probes = "health-check"`` (only the checker's probe gets
    through). False while closed, half-open with probes from calls, and whenever shadow
    mode or a forced close admits every request: then nothing that needs the dependency
    should be cancelled, told it is unavailable, or denied a retry because of the phase.
    """
    if policy.force == "open" or state.isolated:
        return True
    phase = state.phase
    if phase == CLOSED or admits_all(state, policy):
        return False
    return phase == OPEN or policy.probes == "health-check"


def may_start_rejecting(record: Transition) -> bool:
    """Whether after this transition the breaker may refuse callers it admitted before.

    It opened, or an operator isolated it. Whether it then refuses anyone depends on the
    state and policy (a forced close, shadow mode): ask :func:`rejects_callers`. A
    listener uses this to look at the state only when something may have changed.
    """
    return record.reason == "isolated" or (record.to_phase == OPEN and record.from_phase != OPEN)


def may_probe(state: BreakerState) -> bool:
    """Whether a request admitted now may be a probe (the breaker is not closed).

    A shell keeps a reserve for probes (a worker thread) that such a request may take.
    """
    return state.phase != CLOSED


def check_due(state: BreakerState, at: int, policy: Policy) -> Literal["due", "wait", "idle"]:
    """What a health checker should do for ``state`` at ``at``.

    ``idle`` while closed, isolated or forced closed (nothing to check, or an operator
    decides); ``due`` while open past its deadline (or with no deadline: a recovered
    corrupt state), and while half-open with a free probe slot or a probe lease due to
    expire (a lease of a process that died expires only when an event reaches the core:
    the checker's request makes the core reopen the breaker); ``wait`` otherwise.
    """
    if state.phase == CLOSED or held_by_operator(state):
        return "idle"
    if state.phase == OPEN:
        until = state.open_until
        return "due" if until is None or at >= until else "wait"
    free = len(state.leases) < policy.probe_limit
    return "due" if free or due_expiry(state, at, policy) is not None else "wait"


def is_quiet(state: BreakerState, policy: Policy) -> bool:
    """True when a request is admitted and a success leaves ``state`` unchanged.

    A shell may then skip :func:`step` for those two events and emit no record: the
    core has already said what step would do. A failure is never quiet.
    """
    return (
        state.phase == CLOSED
        and not policy.uses_rates
        and policy.force != "open"
        and (policy.window_ms is not None or not state.failures)
    )


def held_by_operator(state: BreakerState) -> bool:
    """Whether an operator holds the breaker where it is (isolated, or forced closed).

    Such a state lasts until released: no cooldown, expiry or health check moves it.
    """
    return state.isolated or state.forced_closed


def is_evictable(state: BreakerState) -> bool:
    """Whether a process may forget its breaker object for this state (a scope limit).

    Only a closed breaker with nothing an operator set: an open, half-open, isolated or
    forced breaker is never dropped to make room.
    """
    return state.phase == CLOSED and not held_by_operator(state)


def fast_path_safe(state: BreakerState) -> bool:
    """Whether a process may act on ``state`` from its local view, without the store.

    A store hands its views only states for which this holds. A recovered corrupt state
    (open, no deadline, not isolated) does not: its cooldown starts at the next event
    the store applies, and a local rejection would never get it there.
    """
    return not (state.phase == OPEN and state.open_until is None and not state.isolated)


def retry_after_ms(state: BreakerState, at: int, policy: Policy | None = None) -> int | None:
    """Milliseconds until a rejected request could be admitted; ``None`` if unknown.

    While open: until the cooldown deadline (unknown while isolated). While half-open
    with ``policy``: until the oldest probe lease expires, the latest a slot frees up.
    Unknown while the policy forces the breaker open, and under ``probes =
    "health-check"`` once the deadline has passed or while half-open (until a check
    passes).
    """
    if policy is not None and policy.force == "open":
        return None
    checker_only = policy is not None and policy.probes == "health-check"
    if state.phase == OPEN:
        if state.open_until is None or state.isolated:
            return None
        if checker_only and at >= state.open_until:
            return None
        return max(0, state.open_until - at)
    if state.phase == HALF_OPEN and state.leases and policy is not None and not checker_only:
        oldest = min(lease.admitted_at for lease in state.leases)
        return max(0, oldest + policy.lease_ttl_ms - at)
    return None


def due_expiry(state: BreakerState, at: int, policy: Policy) -> Lease | None:
    """The earliest probe lease that expires at or before ``at``, if any."""
    if state.phase != HALF_OPEN or not state.leases:
        return None
    oldest = min(state.leases, key=lambda lease: lease.admitted_at)
    return oldest if oldest.admitted_at + policy.lease_ttl_ms <= at else None


def unclassified_type(failure_class: str) -> str | None:
    """The exception type of an unclassified outcome's class (``MyAPIError``), else ``None``."""
    prefix, colon, name = failure_class.partition(":")
    return name or None if prefix == UNCLASSIFIED and colon else None
