"""The retry machine: may this failed attempt be tried again, and after how long?

Theory of operation
-------------------
A *logical operation* is one call a caller asked for; it may be carried out by several
*attempts*. The first attempt needs nobody's permission. After a failed attempt the shell
asks :func:`decide` with what it observed (:class:`Failure`) and gets a
:class:`RetryDecision`: retry after ``wait_ms``, or give up for a named ``reason``. The
reasons are checked in this order, and the first that applies wins:

1. ``run-stopped``: the run guard said stop;
2. ``breaker-open``: the dependency's breaker is open (or this failure opened it);
3. ``quota-exhausted``: the provider said the quota is spent (a 429 that is not transient);
4. ``outcome-unknown``: the attempt may have committed a write: never replayed;
5. ``not-retryable``: a class no retry can fix (validation, auth, a refusal,
   cancellation, a 4xx other than 408 and 429, an unknown exception);
6. ``hint-too-long``: the server asked for a wait beyond ``max_retry_after_ms``: the tool
   is unavailable for this run, never waited out;
7. ``max-attempts``: ``max_attempts`` attempts (the first included) were made;
8. ``deadline``: the wait would end at or after the end-to-end deadline, which covers
   every attempt and every wait;
9. ``budget-exhausted``: the dependency's retry budget (a token bucket that retries spend
   and successes refill, :class:`RetryBudget`) has no token left.

The wait is exponential backoff, ``base_ms * 2 ** (retry - 1)`` capped at
``max_backoff_ms``, with *full* jitter (uniform in ``[0, backoff]``) or *decorrelated*
jitter (uniform in ``[base_ms, 3 * previous wait]``, capped, the first retry's
previous wait being ``base_ms``), and never shorter than the server's hint. Jitter comes
from a deterministic PRNG (splitmix64) seeded per operation; the seed is in every
:class:`RetryRecord`, so :func:`replay` recomputes every decision of a recorded operation
exactly, on any machine.

Pure: ``now`` arrives in the failure; nothing here reads a clock, sleeps or locks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, get_args

from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import PolicyError, TraceError

__all__ = [
    "JITTERS",
    "REASONS",
    "RETRY_SCHEMA",
    "Failure",
    "RetryBudget",
    "RetryDecision",
    "RetryPolicy",
    "RetryRecord",
    "RetryState",
    "decide",
    "is_transient",
    "refill",
    "remaining_ms",
    "replay",
    "spend",
    "start",
    "unavailable_reason",
]

#: Jitter strategies.
Jitter = Literal["full", "decorrelated"]
JITTERS: Final[tuple[Jitter, ...]] = get_args(Jitter)
#: Every reason :func:`decide` gives, ``retry`` first.
REASONS: Final = (
    "retry",
    "run-stopped",
    "breaker-open",
    "quota-exhausted",
    "outcome-unknown",
    "not-retryable",
    "hint-too-long",
    "max-attempts",
    "deadline",
    "budget-exhausted",
)
#: The schema name of a retry record.
RETRY_SCHEMA: Final = "toolbreaker.retry/v1"

_MASK: Final = (1 << 64) - 1
_MILLI: Final = 1000  # budget tokens are counted in thousandths


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one boundary-sheet row retries (a nested ``retry`` table of the row).

    Attributes:
        max_attempts: attempts per logical operation, the first included (1: no retry).
        base_ms: the first backoff.
        max_backoff_ms: the cap of one wait.
        jitter: ``full`` or ``decorrelated``.
        deadline_ms: the end-to-end deadline of the operation: every attempt and every
            wait fit in it.
        budget: the retry budget's capacity, in retries (the bucket starts full).
        budget_refill_percent: how much of one retry each success gives back (10: one
            retry per ten successes once the bucket is empty).
        idempotent: the operation may be replayed even when an attempt may have committed
            (a read, or a write the provider deduplicates by key). ``read`` rows are.
    """

    max_attempts: int = 3
    base_ms: int = 200
    max_backoff_ms: int = 5_000
    jitter: Jitter = "full"
    deadline_ms: int = 20_000
    budget: int = 10
    budget_refill_percent: int = 10
    idempotent: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "jitter":
                if value not in JITTERS:
                    raise PolicyError(
                        f"jitter must be 'full' or 'decorrelated', got {value!r}", field="jitter"
                    )
            elif f.name == "idempotent":
                if type(value) is not bool:
                    raise PolicyError("idempotent must be true or false", field="idempotent")
            elif type(value) is not int or value < (0 if f.name == "budget" else 1):
                raise PolicyError(
                    f"{f.name} must be a positive integer, got {value!r}", field=f.name
                )
        if self.budget_refill_percent > 100:
            raise PolicyError(
                "budget_refill_percent must not exceed 100", field="budget_refill_percent"
            )
        if self.max_backoff_ms < self.base_ms:
            raise PolicyError(
                f"max_backoff_ms ({self.max_backoff_ms}) must not be below base_ms "
                f"({self.base_ms})",
                field="max_backoff_ms",
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryPolicy:
        """Build a policy from a mapping of field names; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"retry must be a table, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise PolicyError(
                    f"unknown retry field {key!r} (known: {', '.join(sorted(known))})",
                    field=str(key),
                )
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, slots=True)
class RetryBudget:
    """A dependency's retry budget: a token bucket retries spend and successes refill.

    Attributes:
        milli: thousandths of a retry left.
    """

    milli: int

    @classmethod
    def full(cls, policy: RetryPolicy) -> RetryBudget:
        """A full bucket for ``policy``."""
        return cls(policy.budget * _MILLI)

    @property
    def retries(self) -> int:
        """Whole retries left."""
        return self.milli // _MILLI


def refill(bucket: RetryBudget, policy: RetryPolicy) -> RetryBudget:
    """The bucket after one success: ``budget_refill_percent`` of a retry, up to capacity."""
    gained = bucket.milli + policy.budget_refill_percent * _MILLI // 100
    return RetryBudget(min(policy.budget * _MILLI, gained))


@dataclasses.dataclass(frozen=True, slots=True)
class RetryState:
    """One logical operation's retries so far.

    Attributes:
        seed: the operation's jitter seed (recorded, so it replays).
        started_at: when the first attempt began (ms).
        attempts: attempts made so far.
        rng: the PRNG state.
        last_wait_ms: the previous wait (decorrelated jitter grows from it).
    """

    seed: int
    started_at: int
    attempts: int = 1
    rng: int = 0
    last_wait_ms: int = 0


def start(at: int, seed: int) -> RetryState:
    """The state of an operation whose first attempt begins at ``at``."""
    if type(seed) is not int or not 0 <= seed <= _MASK:
        raise TraceError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    return RetryState(seed=seed, started_at=at, rng=seed)


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """What the shell observed about one failed attempt.

    Attributes:
        at: when the attempt ended (ms, same clock as ``started_at``).
        kind: the verdict's kind (``failure``, ``ambiguous``, ``ignored``).
        detail: the verdict's detail (``http-503``, ``timeout``, ``quota-exhausted`` ...).
        status: the HTTP status, when one was found.
        retry_after_ms: the wait the server asked for, if any.
        may_have_committed: the attempt may have taken effect (a write's unknown outcome).
        breaker_open: the dependency's breaker is open now.
        run_stopped: the run guard said stop.
    """

    at: int
    kind: str
    detail: str
    status: int | None = None
    retry_after_ms: int | None = None
    may_have_committed: bool = False
    breaker_open: bool = False
    run_stopped: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class RetryDecision:
    """What :func:`decide` tells the shell to do.

    Attributes:
        reason: ``retry`` or why not (one of :data:`REASONS`).
        wait_ms: for ``retry``, how long to wait before the next attempt.
        attempt: the number of the attempt that failed.
    """

    reason: str
    wait_ms: int = 0
    attempt: int = 1

    @property
    def retry(self) -> bool:
        """Whether the shell must make another attempt."""
        return self.reason == "retry"


def is_transient(kind: str, detail: str, status: int | None) -> bool:
    """Whether a failure of this class may go away on its own (so a retry can help).

    Failures (5xx, 429, timeouts, network) and ambiguous outcomes are; a 408 is; a spent
    quota, validation, auth, refusals, cancellation, other 4xx and unknown exceptions are not.
    """
    if detail == "quota-exhausted":
        return False
    if status == 408:  # Request Timeout: the server gave up waiting
        return True
    return kind in ("failure", "ambiguous")


def spend(bucket: RetryBudget) -> tuple[RetryBudget, bool]:
    """Spend one retry on a retry made elsewhere (the model re-issuing a failed call).

    Returns the bucket after and whether the retry may go ahead; an empty bucket is left
    as it is.
    """
    if bucket.milli < _MILLI:
        return bucket, False
    return RetryBudget(bucket.milli - _MILLI), True


def unavailable_reason(
    failure: Failure, budget: RetryBudget | None, *, max_retry_after_ms: int | None
) -> str | None:
    """Why, after this failure, the tool is unavailable for the rest of the run, if it is.

    ``quota-exhausted`` (no wait helps), ``rate-limited`` (the server asked for a wait
    beyond ``max_retry_after_ms``: never waited out) or ``retry-budget`` (a transient
    failure, but the dependency's retry budget is spent: nobody, the model included,
    should retry). ``None``: the caller may be told whether retrying can help.
    """
    if failure.detail == "quota-exhausted":
        return "quota-exhausted"
    hint = failure.retry_after_ms
    if hint is not None and max_retry_after_ms is not None and hint > max_retry_after_ms:
        return "rate-limited"
    if (
        budget is not None
        and budget.milli < _MILLI
        and is_transient(failure.kind, failure.detail, failure.status)
        and not failure.may_have_committed
    ):
        return "retry-budget"
    return None


def remaining_ms(state: RetryState, at: int, policy: RetryPolicy) -> int:
    """Milliseconds left of the end-to-end deadline at ``at`` (never negative)."""
    return max(0, state.started_at + policy.deadline_ms - at)


def decide(
    state: RetryState,
    failure: Failure,
    policy: RetryPolicy,
    budget: RetryBudget,
    *,
    max_retry_after_ms: int | None = None,
) -> tuple[RetryState, RetryBudget, RetryDecision]:
    """Decide whether the attempt that just failed is retried, and after how long.

    A retry spends one token of ``budget``; anything else leaves it alone.

    Raises:
        TraceError: ``failure.at`` is before the operation started.
    """
    at = failure.at
    if at < state.started_at:
        raise TraceError(f"a failure at {at} precedes its operation's start {state.started_at}")
    n = state.attempts
    reason = _refusal(state, failure, policy, max_retry_after_ms)
    if reason is not None:
        return state, budget, RetryDecision(reason, attempt=n)
    rng, draw = _splitmix(state.rng)
    if policy.jitter == "full":
        backoff = policy.base_ms << min(n - 1, 40)
        wait = draw % (min(backoff, policy.max_backoff_ms) + 1)
    else:
        # The first retry grows from base_ms too ([base, 3 * base]): a first wait of
        # exactly base_ms for every caller would send callers that fail together back
        # together.
        previous = state.last_wait_ms or policy.base_ms
        high = min(policy.max_backoff_ms, max(policy.base_ms, previous * 3))
        wait = policy.base_ms + draw % (high - policy.base_ms + 1)
    hint = failure.retry_after_ms
    if hint is not None and hint > wait:
        wait = hint
    if at + wait >= state.started_at + policy.deadline_ms:
        return state, budget, RetryDecision("deadline", attempt=n)
    if budget.milli < _MILLI:
        return state, budget, RetryDecision("budget-exhausted", attempt=n)
    new = RetryState(state.seed, state.started_at, n + 1, rng, wait)
    return new, RetryBudget(budget.milli - _MILLI), RetryDecision("retry", wait, n)


def _refusal(
    state: RetryState, failure: Failure, policy: RetryPolicy, max_retry_after_ms: int | None
) -> str | None:
    """The reason no retry can happen whatever the jitter draws, if there is one."""
    if failure.run_stopped:
        return "run-stopped"
    if failure.breaker_open:
        return "breaker-open"
    if failure.detail == "quota-exhausted":
        return "quota-exhausted"
    if failure.may_have_committed and not policy.idempotent:
        return "outcome-unknown"
    if not is_transient(failure.kind, failure.detail, failure.status):
        return "not-retryable"
    hint = failure.retry_after_ms
    if hint is not None and max_retry_after_ms is not None and hint > max_retry_after_ms:
        return "hint-too-long"
    if state.attempts >= policy.max_attempts:
        return "max-attempts"
    return None


def _splitmix(x: int) -> tuple[int, int]:
    """One step of splitmix64: the next state and a 64-bit output."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return x, z ^ (z >> 31)


# ---------------------------------------------------------------------------
# Records and replay


@dataclasses.dataclass(frozen=True, slots=True)
class RetryRecord:
    """One decision of one operation, as a trace line (schema :data:`RETRY_SCHEMA`).

    Its texts (the breaker key, the operation id, the failure's detail, which a
    classifier may have made from an error message) are masked where the record is
    built (:func:`~toolbreaker.core._run.redact.redact_text`), so every retry listener
    and the retry trace see them masked.

    Attributes:
        dependency: the breaker key.
        operation: the operation's id (unique per process run).
        seed: the operation's jitter seed.
        started_at: when its first attempt began.
        failure: what was observed.
        budget_milli: the retry budget before the decision.
        decision: what was decided.
    """

    dependency: str
    operation: str
    seed: int
    started_at: int
    failure: Failure
    budget_milli: int
    decision: RetryDecision

    def __post_init__(self) -> None:
        object.__setattr__(self, "dependency", redact_text(self.dependency))
        object.__setattr__(self, "operation", redact_text(self.operation))
        detail = redact_text(self.failure.detail)
        if detail != self.failure.detail:
            object.__setattr__(self, "failure", dataclasses.replace(self.failure, detail=detail))

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return {
            "schema": RETRY_SCHEMA,
            "dependency": self.dependency,
            "operation": self.operation,
            "seed": self.seed,
            "started_at": self.started_at,
            "failure": dataclasses.asdict(self.failure),
            "budget_milli": self.budget_milli,
            "decision": dataclasses.asdict(self.decision),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryRecord:
        """Read a record written by :meth:`to_dict`.

        Raises:
            TraceError: another schema or a malformed record.
        """
        if not isinstance(data, Mapping) or data.get("schema") != RETRY_SCHEMA:
            raise TraceError(f"not a {RETRY_SCHEMA} record")
        try:
            return cls(
                dependency=str(data["dependency"]),
                operation=str(data["operation"]),
                seed=int(data["seed"]),
                started_at=int(data["started_at"]),
                failure=Failure(**data["failure"]),
                budget_milli=int(data["budget_milli"]),
                decision=RetryDecision(**data["decision"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"malformed retry record: {exc}") from None


def replay(
    records: Iterable[RetryRecord],
    policy: RetryPolicy,
    *,
    max_retry_after_ms: int | None = None,
) -> list[RetryDecision]:
    """Recompute the decisions of recorded operations from their seeds and failures.

    Each operation starts from its recorded seed; each decision is made on the recorded
    budget. Equal to the recorded decisions when nothing drifted: compare the lists.
    """
    states: dict[tuple[str, str], RetryState] = {}
    out = []
    for record in records:
        key = (record.dependency, record.operation)
        state = states.get(key) or start(record.started_at, record.seed)
        state, _, decision = decide(
            state,
            record.failure,
            policy,
            RetryBudget(record.budget_milli),
            max_retry_after_ms=max_retry_after_ms,
        )
        states[key] = state
        out.append(decision)
    return out
