"""The model is a retry layer: which of a run's requests re-issue a call that just failed.

A model that calls a tool again with the same action (the same fingerprint) right after
it failed with a retryable error is retrying, whatever it thinks it is doing. A shell asks
:func:`is_retry` before such a request and, when it is one, spends the dependency's retry
budget (:func:`toolbreaker.core._retry.spend`) exactly as the library's own retries do;
once the budget is spent the model reads that the tool is unavailable for this run
instead of ``retryable: true``. After the attempt, :func:`observe` records how it ended.

One rule for both shells that keep such a ledger, a run guard (per run) and a breaker
(its ``begin`` steps and decorated tools): the same identity of an action
(:func:`action_of`, the semantic fingerprint: keys reordered, case and spacing changed,
``1`` for ``1.0`` are one action), the same test of a failure worth retrying
(:func:`failed_retryably`), the same bound and eviction (:data:`FAILED_LIMIT`, oldest
first).

Pure: a frozen value in, a frozen value out.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.errors import FingerprintError

if TYPE_CHECKING:
    from toolbreaker.core._run.fingerprint import FingerprintRules

__all__ = ["FAILED_LIMIT", "ModelRetries", "action_of", "failed_retryably", "is_retry", "observe"]

#: How many failed actions a run remembers (the oldest is forgotten first).
FAILED_LIMIT: Final = 64


@dataclasses.dataclass(frozen=True, slots=True)
class ModelRetries:
    """The actions of a run whose last attempt failed with a retryable error.

    Attributes:
        failed: their fingerprints, oldest first, at most :data:`FAILED_LIMIT`.
    """

    failed: tuple[str, ...] = ()


def is_retry(state: ModelRetries, fingerprint: str) -> bool:
    """Whether a request for ``fingerprint`` re-issues an action that just failed."""
    return fingerprint in state.failed


def observe(state: ModelRetries, fingerprint: str, *, retryable_failure: bool) -> ModelRetries:
    """Record how an action's attempt ended: a retryable failure, or anything else."""
    if not retryable_failure and fingerprint not in state.failed:
        return state  # nothing to forget, nothing to remember (most calls: no scan, no copy)
    rest = tuple(f for f in state.failed if f != fingerprint)
    if retryable_failure:
        rest = (*rest, fingerprint)[-FAILED_LIMIT:]
    return state if rest == state.failed else ModelRetries(rest)


def action_of(
    tool: str, args: Mapping[str, Any], rules: FingerprintRules | None = None
) -> str | None:
    """The identity of an action in the ledger: its semantic fingerprint.

    ``None`` when the arguments cannot be fingerprinted (a set, bytes, NaN ...): such a
    call is never taken for a retry.
    """
    try:
        return _fingerprint()(tool, args, rules)
    except FingerprintError:
        return None


@functools.cache
def _fingerprint() -> Callable[[str, Mapping[str, Any], FingerprintRules | None], str]:
    """:func:`~toolbreaker.core._run.fingerprint.fingerprint`, imported on first use.

    It loads (json, decimal, unicodedata ...) with the first action asked about, not with
    every breaker: a breaker's ``call`` never asks. Cached, so each later action pays a
    call, not an import.
    """
    from toolbreaker.core._run.fingerprint import fingerprint

    return fingerprint


def failed_retryably(answer: object) -> bool:
    """Whether the answer the model read after an attempt invites it to try again.

    An error result that says ``retryable: true`` (the boolean, nothing merely truthy),
    or a ``retry-budget`` answer: re-issuing that call is a retry too, refused while
    the budget is spent.
    """
    if answer is None:
        return False  # most reads' answers (and a Mapping check of None costs an ABC's)
    return isinstance(answer, Mapping) and (
        answer.get("retryable") is True or answer.get("reason") == "retry-budget"
    )
