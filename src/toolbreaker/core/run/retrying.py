"""The model is a retry layer: which of a run's requests re-issue a call that just failed.

A model that calls a tool again with the same action (the same fingerprint) right after
it failed with a retryable error is retrying, whatever it thinks it is doing. The run
guard asks :func:`is_retry` before such a request and, when it is one, spends the
dependency's retry budget (:func:`toolbreaker.core.retry.spend`) exactly as the library's
own retries do; once the budget is spent the model reads that the tool is unavailable for
this run instead of ``retryable: true``.

Pure: a frozen value in, a frozen value out.
"""

from __future__ import annotations

import dataclasses
from typing import Final

__all__ = ["FAILED_LIMIT", "ModelRetries", "is_retry", "observe"]

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
    rest = tuple(f for f in state.failed if f != fingerprint)
    if retryable_failure:
        rest = (*rest, fingerprint)[-FAILED_LIMIT:]
    return state if rest == state.failed else ModelRetries(rest)
