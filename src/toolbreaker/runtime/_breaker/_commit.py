"""Whether a failed call may have taken effect anyway: the rule every shell shares.

The run guard never replays a write whose outcome this says is unknown, and a breaker's
retries never replay such an attempt unless the row is idempotent.
"""

from __future__ import annotations

from typing import Final, TypeVar

from toolbreaker.core._breaker.predicates import unclassified_type
from toolbreaker.errors import CircuitOpen, NotSent, ToolReportedError
from toolbreaker.runtime._breaker._classify import Verdict

__all__ = ["found_in_chain", "may_have_committed"]

_E = TypeVar("_E", bound=BaseException)

#: Network failures that happen before a byte of the request can have left.
_NOT_CONNECTED: Final = (
    "network:ECONNREFUSED",
    "network:EHOSTUNREACH",
    "network:ENETUNREACH",
    "network:ENETDOWN",
    "network:EAI_AGAIN",
    "network:EAI_NONAME",
    "network:EAI_NODATA",
    "network:ENOTFOUND",
    "network:ConnectError",
    "network:ConnectionRefusedError",
)


def may_have_committed(exc: BaseException, verdict: Verdict) -> bool:
    """Whether a write that failed with ``exc`` may have taken effect anyway.

    Such a write is *unknown*: never replayed, reconciled instead. Unknown are: any
    timeout (the request may have been processed), a connection reset or broken after
    sending, a 5xx other than 503 (500, 502 and the gateway timeout 504 may come after the
    write committed), an undecodable response (``json.JSONDecodeError``), an ambiguous
    verdict (a late result, a classifier that raised), and any exception the classifier
    does not know. Certain failures, that may be retried: :class:`~toolbreaker.errors.NotSent`
    anywhere in the exception's chain, an error the tool reported as its answer
    (:class:`~toolbreaker.errors.ToolReportedError` without a status), a plain
    ``ValueError`` or ``TypeError`` (an argument check before anything left), a
    validation error, a refused or unresolvable connection, a 4xx, 429 and 503 (the
    server refused the request).
    """
    if _in_chain(exc, NotSent) or isinstance(exc, CircuitOpen):
        return False  # a local rejection (a saturated bulkhead) sent nothing
    if isinstance(exc, ToolReportedError) and verdict.status is None:
        return False  # the tool answered with an error: a definite answer, not silence
    import json  # a failure's cause: json loads with the first one asked about

    if _in_chain(exc, json.JSONDecodeError):
        return True
    if verdict.kind == "ambiguous":
        return True
    detail = verdict.detail
    if detail.startswith(("timeout", "late-result")):
        return True
    if detail.startswith("network"):
        return detail not in _NOT_CONNECTED
    status = verdict.status
    if status is not None:
        return status >= 500 and status != 503
    if detail == "validation" or type(exc) in (ValueError, TypeError):
        return False
    if unclassified_type(detail) is not None:
        return not isinstance(exc, (ValueError, TypeError)) or isinstance(exc, UnicodeError)
    return False


def found_in_chain(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of ``kind`` along ``exc``'s causes and contexts (32 at most).

    Each link is its explicit cause, else its context; a cycle ends the walk.
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < 32:
        if isinstance(link, kind):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def _in_chain(exc: BaseException, kind: type[BaseException]) -> bool:
    return found_in_chain(exc, kind) is not None
