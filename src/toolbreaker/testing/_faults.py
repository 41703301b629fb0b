"""Scripted faults of the tool service: what one request gets instead of a normal answer.

A :class:`Fault` is plain frozen data, validated where it is built; the service
(:mod:`toolbreaker.testing._service`) consumes them per route, one per request.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.testing._scenario import MALFORMED, Malformed

__all__ = ["MALFORMED_SHAPE", "MALFORMED_TRUNCATED", "NO_FAULT", "Fault"]

#: ``Fault.malformed`` value: a 2xx answer whose JSON parses but has the wrong shape.
MALFORMED_SHAPE: Final = MALFORMED[0]
#: ``Fault.malformed`` value: a 2xx answer whose JSON is cut off and does not parse.
MALFORMED_TRUNCATED: Final = MALFORMED[1]


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    """One scripted misbehaviour, consumed by one request.

    A request carrying a fault goes through these steps in order: wait ``delay``; carry
    out the request (and so commit a POST's write) if the fault commits; wait
    ``commit_then_delay``; then close the connection (``reset``), answer ``status``,
    answer a ``malformed`` body, or answer normally. ``Fault()`` misbehaves in no way and
    only takes a turn in the queue. Waits end early when the service stops; the request
    is then dropped without an answer.

    Attributes:
        status: answer with this error status (400-599) and a JSON error body.
        retry_after: seconds for a ``Retry-After`` header; needs ``status``. Fractions are
            sent as written (``0.25``), which real servers never do but fast tests want;
            a string is sent verbatim, to try an HTTP-date or a garbage value.
        delay: seconds to stall before handling the request at all.
        commit_then_delay: seconds to stall after the request has been carried out (a
            POST's write is committed) and before answering, so that a client timeout
            hides a success.
        malformed: answer 2xx with a body of the wrong shape (``"shape"``:
            ``{"unexpected": true}``) or with cut-off JSON (``"truncated"``).
        commit: whether the request is carried out, which matters for POSTs. ``None``
            means yes, unless the fault answers with ``status`` or ``reset``; ``True``
            with either of those gives a write that succeeded behind an error.
        reset: close the connection without answering (a TCP reset).
        headers: extra response headers for a ``status`` answer (rate-limit hints such as
            ``retry-after-ms`` or ``x-ratelimit-reset-requests``).
        body: the JSON error body of a ``status`` answer instead of the default one
            (an OpenAI ``insufficient_quota`` error, a Google ``retryDelay`` ...).
    """

    status: int | None = None
    retry_after: float | str | None = None
    delay: float = 0.0
    commit_then_delay: float = 0.0
    malformed: Malformed | None = None
    commit: bool | None = None
    reset: bool = False
    headers: Mapping[str, str] | None = None
    body: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.status is not None and (
            isinstance(self.status, bool)
            or not isinstance(self.status, int)
            or not 400 <= self.status <= 599
        ):
            raise ValueError(f"Fault.status must be an HTTP error status 400-599: {self.status!r}")
        _check_seconds("delay", self.delay)
        _check_seconds("commit_then_delay", self.commit_then_delay)
        if self.retry_after is not None:
            if self.status is None:
                raise ValueError("Fault.retry_after needs a status to travel with")
            if isinstance(self.retry_after, str):
                if not self.retry_after or any(c in self.retry_after for c in "\r\n"):
                    raise ValueError("Fault.retry_after as text must be one non-empty line")
            else:
                _check_seconds("retry_after", self.retry_after)
        if self.malformed is not None and self.malformed not in MALFORMED:
            raise ValueError(
                f"Fault.malformed must be one of {', '.join(MALFORMED)}: {self.malformed!r}"
            )
        answers = [self.status is not None, self.malformed is not None, self.reset]
        if sum(answers) > 1:
            raise ValueError("Fault takes at most one of status, malformed and reset")
        if (self.headers is not None or self.body is not None) and self.status is None:
            raise ValueError("Fault.headers and Fault.body need a status to travel with")
        for name, value in (self.headers or {}).items():
            if any(c in f"{name}{value}" for c in "\r\n"):
                raise ValueError("Fault.headers must be single-line names and values")
        if self.commit is False and self.commit_then_delay:
            raise ValueError("Fault.commit_then_delay commits by definition; drop commit=False")

    @property
    def commits(self) -> bool:
        """Whether the request is carried out (a POST's write committed) under this fault."""
        if self.commit is not None:
            return self.commit
        return self.status is None and not self.reset

    @property
    def intercepts(self) -> bool:
        """Whether the fault replaces the normal answer (status, malformed body or reset)."""
        return self.status is not None or self.malformed is not None or self.reset


def _check_seconds(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"Fault.{name} must be a finite number of seconds >= 0: {value!r}")


#: What a request gets when no fault is scripted for it.
NO_FAULT: Final = Fault()
