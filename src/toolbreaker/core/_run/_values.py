"""The values a run's state and budget are made of: risk classes, exact amounts, names.

Shared by :mod:`~toolbreaker.core._run.budget`, :mod:`~toolbreaker.core._run.state` and
:mod:`~toolbreaker.core._run.limits`. Amounts are :class:`~decimal.Decimal`, never floats,
added exactly without consulting the thread's decimal context; they lie in ``[0, 10**18)``
with at most 18 decimal places.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, Literal, TypeAlias, TypeVar, get_args, overload

from toolbreaker.errors import PolicyError, RunStateError

__all__ = [
    "DIGEST_LENGTH",
    "MAX_NAME",
    "RISK_CLASSES",
    "WRITES",
    "ZERO",
    "Recent",
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
#: ``cat`` reads, its ``sed -i`` writes; ``shell_risk_of``).
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
#: Where each risk class sits in :data:`RISK_CLASSES` (a :class:`RiskMap`'s values).
_PLACE: Final[Mapping[str, int]] = {risk: i for i, risk in enumerate(RISK_CLASSES)}


class RiskMap(Mapping[RiskClass, _V]):
    """An immutable, hashable mapping with exactly one value per risk class."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[RiskClass, _V]) -> None:
        self._values = tuple(values[risk] for risk in RISK_CLASSES)

    def __getitem__(self, key: RiskClass) -> _V:
        return self._values[_PLACE[key]]

    def replaced(self, risk: RiskClass, value: _V) -> RiskMap[_V]:
        """This mapping with ``risk`` set to ``value`` (one tuple, no dict: a run's step)."""
        values = list(self._values)
        values[_PLACE[risk]] = value
        new: RiskMap[_V] = RiskMap.__new__(RiskMap)
        new._values = tuple(values)
        return new

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
    if type(value) is Decimal and value.is_finite():  # a call's cost, checked again
        exponent = value.as_tuple().exponent
        if 0 <= value < _AMOUNT_BOUND and exponent >= -_AMOUNT_PLACES:  # type: ignore[operator]
            return value  # at most 18 places whatever its trailing zeros: no count needed
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


#: Adds two amounts exactly: below 10**18 with at most 18 places, a sum fits 40 digits.
#: One context for every sum (a context per sum cost more than the sum): an operation
#: raises on its own condition, never on flags an earlier one left.
_SUM: Final = decimal.Context(prec=40, traps=[decimal.Inexact, decimal.InvalidOperation])


def exact_sum(left: Decimal, right: Decimal, field: str) -> Decimal:
    """The exact sum of two amounts, independent of the thread's decimal context."""
    total = _SUM.add(left, right)
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
    if type(mapping) is RiskMap:
        return mapping.replaced(risk, value)
    return RiskMap({**mapping, risk: value})


class Recent(Sequence[_V]):
    """The latest values a run keeps, oldest first, each found by its key without a scan.

    What a run remembers of the actions it began (its tallies, each by its fingerprint)
    and of the results it observed (its digests, each its own key). Immutable: the next
    version (:meth:`latest`, :meth:`replaced`) is one copy of a dict, made in C, so a
    step of a run costs the same at its 10th call as at its 10,000th (a tuple had to be
    scanned in Python for the key, every step). Equal to the tuple of its values, and
    shown as that tuple.

    Args:
        items: the ``(key, value)`` pairs, oldest first; a key given twice keeps its
            last value (in its first place): the caller that must refuse that compares
            the lengths.
    """

    __slots__ = ("_by", "_tuple")

    def __init__(self, items: Iterable[tuple[str, _V]] = ()) -> None:
        self._by: dict[str, _V] = dict(items)
        self._tuple: tuple[_V, ...] | None = None

    @classmethod
    def _owning(cls, by: dict[str, _V]) -> Recent[_V]:
        new: Recent[_V] = cls.__new__(cls)
        new._by = by
        new._tuple = None
        return new

    @classmethod
    def of_dict(cls, by: dict[str, _V]) -> Recent[_V]:
        """The values of ``by``, oldest first, kept by their keys; ``by`` is taken, not copied.

        For a run cell that built the dict itself (:meth:`as_dict`) and hands it over: it
        must never change it again.
        """
        return cls._owning(by)

    def as_dict(self) -> dict[str, _V]:
        """A new dict of the values by their keys, oldest first (one copy, made in C)."""
        return self._by.copy()

    def get(self, key: str) -> _V | None:
        """The value kept under ``key``, or ``None``."""
        return self._by.get(key)

    def holds(self, key: str) -> bool:
        """Whether a value is kept under ``key``."""
        return key in self._by

    def newest(self) -> str | None:
        """The key of the newest value, or ``None`` when there is none."""
        return next(reversed(self._by), None)

    def latest(self, key: str, value: _V, limit: int) -> Recent[_V]:
        """This with ``value`` under ``key`` as the newest; beyond ``limit`` the oldest goes."""
        by = self._by.copy()
        by.pop(key, None)
        by[key] = value
        if len(by) > limit:
            del by[next(iter(by))]
        return Recent._owning(by)

    def replaced(self, key: str, value: _V) -> Recent[_V]:
        """This with the value under ``key`` (which it holds) replaced in its place."""
        by = self._by.copy()
        by[key] = value
        return Recent._owning(by)

    def _items(self) -> tuple[_V, ...]:
        values = self._tuple
        if values is None:
            values = self._tuple = tuple(self._by.values())
        return values

    def __len__(self) -> int:
        return len(self._by)

    def __iter__(self) -> Iterator[_V]:
        return iter(self._by.values())

    @overload
    def __getitem__(self, index: int) -> _V: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[_V, ...]: ...

    def __getitem__(self, index: int | slice) -> _V | tuple[_V, ...]:
        return self._items()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Recent):
            return self._items() == other._items()
        if isinstance(other, tuple):
            return self._items() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items())

    def __repr__(self) -> str:
        return repr(self._items())
