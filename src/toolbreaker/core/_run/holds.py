"""What a run holds besides its counters: cost reservations and failures per tool and class.

Plain frozen values kept in :class:`~toolbreaker.core._run.state.RunState`; the decisions
that make and release them are :mod:`toolbreaker.core._run.costs`'. Each round-trips
through JSON exactly (``to_dict`` / ``from_dict``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from toolbreaker.core._run._values import (
    RiskClass,
    as_amount,
    as_count,
    as_name,
    as_risk,
    decimal_text,
)
from toolbreaker.errors import RunStateError

__all__ = ["FAILURE_LIMIT", "USAGE_LIMIT", "FailureCount", "ModelUsage", "Reservation", "ToolStop"]

#: Per (tool, error class) failure counts kept, the most recently failed ones.
FAILURE_LIMIT: Final = 64
#: Models whose usage a run keeps apart, the most recently used ones (the run's ``cost``
#: keeps every model's spend whatever this bound forgets).
USAGE_LIMIT: Final = 32


def _fields(data: object, names: tuple[str, ...], what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping) or set(data) != set(names):
        raise RunStateError(f"{what} must be an object with keys {', '.join(names)}")
    return data


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """Cost held for a call (or a model step) admitted and not settled yet.

    Attributes:
        id: the run's number for it, from 1 (``RunState.reservations_made``).
        amount: the cost held against ``max_cost`` (and the class's, with ``risk``).
        risk: the risk class of the tool call; ``None`` for a model step.
        expires_at: when its lease ends, integer ms on the run's clock: a reservation
            never settled by then (a killed worker) is spent at its amount.
        tool: the tool it holds for; ``None`` for a model step.
    """

    id: int
    amount: Decimal
    risk: RiskClass | None
    expires_at: int
    tool: str | None = None

    def __post_init__(self) -> None:
        if as_count(self.id, "id") < 1:
            raise RunStateError("a reservation's id counts from 1", field="id")
        if not isinstance(self.amount, Decimal):
            try:
                object.__setattr__(self, "amount", as_amount(self.amount))
            except (TypeError, ValueError) as exc:
                raise RunStateError(f"amount {exc}", field="amount") from None
        if self.risk is not None:
            as_risk(self.risk, "risk")
        as_count(self.expires_at, "expires_at")
        if self.tool is not None:
            as_name(self.tool, "tool")

    def to_dict(self) -> dict[str, Any]:
        """The reservation as a JSON-ready dict; the amount as exact text."""
        return {
            "id": self.id,
            "amount": decimal_text(self.amount),
            "risk": self.risk,
            "expires_at": self.expires_at,
            "tool": self.tool,
        }

    @classmethod
    def from_dict(cls, data: object) -> Reservation:
        """Load a reservation written by :meth:`to_dict`.

        Raises:
            RunStateError: the data is not exactly such a dict.
        """
        names = ("id", "amount", "risk", "expires_at", "tool")
        found = _fields(data, names, "a reservation")
        if not isinstance(found["amount"], str):
            raise RunStateError("a reservation's amount must be a decimal string", field="amount")
        return cls(**{name: found[name] for name in names})


@dataclasses.dataclass(frozen=True, slots=True)
class FailureCount:
    """How often one tool failed with one error class in a run, whatever its arguments.

    Attributes:
        tool: the tool name.
        error: the error class, as the classifier names it (``validation``, ``http-422``,
            ``timeout`` ...).
        count: failures so far.
    """

    tool: str
    error: str
    count: int

    def __post_init__(self) -> None:
        as_name(self.tool, "tool")
        as_name(self.error, "error")
        if as_count(self.count, "count") < 1:
            raise RunStateError("a failure count is at least 1", field="count")

    def to_dict(self) -> dict[str, Any]:
        """The count as a JSON-ready dict."""
        return {"tool": self.tool, "error": self.error, "count": self.count}

    @classmethod
    def from_dict(cls, data: object) -> FailureCount:
        """Load a count written by :meth:`to_dict`.

        Raises:
            RunStateError: the data is not exactly such a dict.
        """
        names = ("tool", "error", "count")
        found = _fields(data, names, "a failure count")
        return cls(**{name: found[name] for name in names})


@dataclasses.dataclass(frozen=True, slots=True)
class ToolStop:
    """A tool the run no longer calls, and why (its failures of one class).

    Attributes:
        tool: the tool name.
        error: the error class its failures shared.
        detail: the reason in words, with the numbers.
        at: when it was decided, integer ms on the run's clock.
    """

    tool: str
    error: str
    detail: str
    at: int

    def __post_init__(self) -> None:
        as_name(self.tool, "tool")
        as_name(self.error, "error")
        if not isinstance(self.detail, str):
            raise RunStateError(f"detail must be a string, got {self.detail!r}", field="detail")
        as_count(self.at, "at")

    def to_dict(self) -> dict[str, Any]:
        """The stop as a JSON-ready dict."""
        return {"tool": self.tool, "error": self.error, "detail": self.detail, "at": self.at}

    @classmethod
    def from_dict(cls, data: object) -> ToolStop:
        """Load a tool stop written by :meth:`to_dict`.

        Raises:
            RunStateError: the data is not exactly such a dict.
        """
        names = ("tool", "error", "detail", "at")
        found = _fields(data, names, "a tool stop")
        return cls(**{name: found[name] for name in names})


@dataclasses.dataclass(frozen=True, slots=True)
class ModelUsage:
    """What one model used in a run, as the framework reported it, and what it cost.

    Attributes:
        model: the model's name, as the framework reported it.
        input_tokens: input (prompt) tokens, summed over the run's requests.
        output_tokens: output (completion) tokens, likewise.
        requests: the responses whose usage was reported.
        cost: what the budget's price table made of them; ``None`` when the table has no
            price for the model (its tokens are counted, its cost is unknown).
    """

    model: str
    input_tokens: int
    output_tokens: int
    requests: int
    cost: Decimal | None

    def __post_init__(self) -> None:
        as_name(self.model, "model")
        for name in ("input_tokens", "output_tokens", "requests"):
            as_count(getattr(self, name), name)
        if self.cost is not None and not isinstance(self.cost, Decimal):
            try:
                object.__setattr__(self, "cost", as_amount(self.cost))
            except (TypeError, ValueError) as exc:
                raise RunStateError(f"cost {exc}", field="cost") from None

    def to_dict(self) -> dict[str, Any]:
        """The usage as a JSON-ready dict; the cost as exact text (``None``: unpriced)."""
        return {
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "cost": None if self.cost is None else decimal_text(self.cost),
        }

    @classmethod
    def from_dict(cls, data: object) -> ModelUsage:
        """Load a usage written by :meth:`to_dict`.

        Raises:
            RunStateError: the data is not exactly such a dict.
        """
        names = ("model", "input_tokens", "output_tokens", "requests", "cost")
        found = _fields(data, names, "a model's usage")
        if found["cost"] is not None and not isinstance(found["cost"], str):
            raise RunStateError("a usage's cost must be a decimal string", field="cost")
        return cls(**{name: found[name] for name in names})
