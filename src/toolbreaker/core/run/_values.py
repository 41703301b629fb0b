"""The values a run's state and budget are made of: risk classes, exact amounts, names.

Shared by :mod:`~toolbreaker.core.run.budget`, :mod:`~toolbreaker.core.run.state` and
:mod:`~toolbreaker.core.run.limits`. Amounts are :class:`~decimal.Decimal`, never floats,
added exactly without consulting the thread's decimal context; they lie in ``[0, 10**18)``
with at most 18 decimal places.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any, Final, Literal, TypeAlias, TypeVar, get_args

from toolbreaker.errors import PolicyError, RunStateError

__all__ = [
    "DIGEST_LENGTH",
    "MAX_NAME",
    "RISK_CLASSES",
    "WRITES",
    "ZERO",
    "Risk",
    "RiskClass",
    "RiskMap",
    "RiskOf",
    "as_amount",
    "as_count",
    "as_name",
    "as_risk",
    "call_risk",
    "check_risk",
    "decimal_text",
    "exact_sum",
    "policy_amount",
    "policy_int",
    "times",
    "with_risk",
]

#: How much damage a tool call can do: a read, a write that can be undone, or not.
RiskClass = Literal["read", "reversible_write", "irreversible"]

#: A tool's risk as a function of one call's arguments: each call's class (a shell tool's
#: ``cat`` reads, its ``sed -i`` writes; :func:`toolbreaker.shell_risk_of`).
RiskOf: TypeAlias = Callable[[Mapping[str, Any]], RiskClass]
#: What a tool's ``risk=`` may be: one class for every call, or a function of the call.
Risk: TypeAlias = RiskClass | RiskOf

#: The risk classes, in the order they are listed everywhere.
RISK_CLASSES: Final[tuple[RiskClass, ...]] = get_args(RiskClass)
#: The risk classes that change something outside.
WRITES: Final = frozenset({"reversible_write", "irreversible"})
#: The longest tool name or fingerprint a run keeps.
MAX_NAME: Final = 256
#: Hex digits of a result digest as a run keeps it.
DIGEST_LENGTH: Final = 16
ZERO: Final = Decimal(0)
_AMOUNT_BOUND: Final = Decimal("1e18")
_AMOUNT_PLACES: Final = 18

_V = TypeVar("_V")


class RiskMap(Mapping[RiskClass, _V]):
    """An immutable, hashable mapping with exactly one value per risk class."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[RiskClass, _V]) -> None:
        self._values = tuple(values[risk] for risk in RISK_CLASSES)

    def __getitem__(self, key: RiskClass) -> _V:
        try:
            return self._values[RISK_CLASSES.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[RiskClass]:
        return iter(RISK_CLASSES)

    def __len__(self) -> int:
        return len(RISK_CLASSES)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RiskMap):
            return self._values == other._values
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return repr(dict(self))


def _fraction_digits(value: Decimal) -> int:
    """Decimal places of ``value`` once trailing zeros are dropped; reads no context."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite values only
    zeros = 0
    for digit in reversed(digits):
        if digit:
            break
        zeros += 1
    if zeros == len(digits):
        return 0
    return max(0, -(exponent + zeros))


def as_amount(value: object) -> Decimal:
    """``value`` as a bounded, non-negative Decimal; the error says what is wrong."""
    if isinstance(value, float):
        raise TypeError(
            f"must be a decimal string or an integer, not the float {value!r} "
            f'(write "{value!r}" in quotes to avoid binary rounding)'
        )
    if isinstance(value, bool) or not isinstance(value, (Decimal, int, str)):
        raise TypeError(f"must be a decimal string or an integer, got {value!r}")
    try:
        # Decimal(str) is exact; the context only decides whether junk raises or is NaN.
        amount = value if isinstance(value, Decimal) else Decimal(value)
    except (decimal.InvalidOperation, ValueError):
        raise ValueError(f"must be a decimal number, got {value!r}") from None
    if not amount.is_finite():
        raise ValueError(f"must be a finite number, got {value!r}")
    if amount < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    if amount >= _AMOUNT_BOUND:
        raise ValueError(f"must be below 10**18, got {value!r}")
    if _fraction_digits(amount) > _AMOUNT_PLACES:
        raise ValueError(f"must have at most {_AMOUNT_PLACES} decimal places, got {value!r}")
    return amount


def exact_sum(left: Decimal, right: Decimal, field: str) -> Decimal:
    """The exact sum of two amounts, independent of the thread's decimal context."""
    exact = decimal.Context(prec=40, traps=[decimal.Inexact, decimal.InvalidOperation])
    total = exact.add(left, right)
    if total >= _AMOUNT_BOUND:
        raise RunStateError(f"{field} would reach 10**18", field=field)
    return total


def decimal_text(value: Decimal) -> str:
    """Fixed-point text without trailing zeros: equal values give equal text."""
    if not value:
        return "0"
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def policy_int(value: object, field: str, minimum: int) -> None:
    """Check a budget's integer field: an ``int`` of at least ``minimum``."""
    if type(value) is not int:
        raise PolicyError(f"{field} must be an integer, got {value!r}", field=field)
    if value < minimum:
        raise PolicyError(f"{field} must be at least {minimum}, got {value}", field=field)


def policy_amount(value: object, field: str) -> Decimal | None:
    """A budget's positive amount field as a Decimal (``None`` stays ``None``)."""
    if value is None:
        return None
    try:
        found = as_amount(value)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{field} {exc}", field=field) from None
    if not found:
        raise PolicyError(f"{field} must be positive, got {value!r}", field=field)
    return found


def as_count(value: object, field: str) -> int:
    """A state's counter: a non-negative ``int``."""
    if type(value) is not int or value < 0:
        raise RunStateError(f"{field} must be a non-negative integer, got {value!r}", field=field)
    return value


def as_name(value: object, field: str) -> str:
    """A tool name or fingerprint: a non-empty string of at most :data:`MAX_NAME`."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise RunStateError(
            f"{field} must be a non-empty string of at most {MAX_NAME} characters, got {value!r}",
            field=field,
        )
    return value


def as_risk(value: object, field: str) -> RiskClass:
    """One of :data:`RISK_CLASSES`."""
    if value not in RISK_CLASSES:
        raise RunStateError(
            f"{field} must be one of {', '.join(RISK_CLASSES)}, got {value!r}", field=field
        )
    return value


def check_risk(risk: object, where: str) -> None:
    """Check a tool's ``risk=``: one of :data:`RISK_CLASSES`, or a function of the call.

    Raises:
        PolicyError: anything else, naming ``where`` (``bash.risk``).
    """
    if callable(risk) or risk in RISK_CLASSES:
        return
    raise PolicyError(
        f"{where} must be one of {', '.join(RISK_CLASSES)}, or a function of the call's "
        f"arguments that answers one, got {risk!r}",
        field=where,
    )


def call_risk(risk: Risk, args: Mapping[str, Any], where: str) -> RiskClass:
    """The class of one call: ``risk`` itself, or what the function answers for ``args``.

    Raises:
        PolicyError: the function answered no class (its own exceptions propagate).
    """
    if not callable(risk):
        return risk
    found = risk(args)
    if found not in RISK_CLASSES:
        raise PolicyError(
            f"{where}: the risk function answered {found!r}, not one of {', '.join(RISK_CLASSES)}",
            field=where,
        )
    return found


def times(n: int) -> str:
    """``1 time``, ``2 times`` ..."""
    return "1 time" if n == 1 else f"{n} times"


def with_risk(mapping: Mapping[RiskClass, _V], risk: RiskClass, value: _V) -> RiskMap[_V]:
    """``mapping`` with ``risk`` set to ``value``."""
    return RiskMap({**mapping, risk: value})
