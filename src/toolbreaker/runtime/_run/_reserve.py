"""A model step's cost reservation, as a run guard hands it out.

``guard.reserve(estimate)`` holds a model step's cost (its maximum tokens times the
price: :func:`~toolbreaker.core._run.costs.token_cost`) against the run's ``max_cost``
before the request is sent; the handle's :meth:`CostReservation.settle` commits the
actual cost once the response reports it, and releases the rest. A reservation the
budget cannot cover is refused: ``admitted`` is false and ``answer`` says why, in the
words a model reads (:func:`~toolbreaker.runtime._result.over_budget_result`). The
decisions are the run machine's (:mod:`toolbreaker.core._run.costs`).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from toolbreaker.core._run.costs import amount_of

__all__ = ["CostReservation"]


class CostReservation:
    """Cost held for one model step; settle it once the step's actual cost is known.

    Attributes:
        amount: the cost held (or refused).
        id: the run's number for the reservation; 0 when refused.
        answer: for a refused reservation, what the model (or the caller) reads; the
            request must not be sent. ``None`` when admitted.
    """

    __slots__ = ("_done", "_settle", "amount", "answer", "id")

    def __init__(
        self,
        amount: Decimal,
        hold: int,
        settle: Callable[[int, Decimal, Decimal | None], None],
        answer: dict[str, Any] | None = None,
    ) -> None:
        self.amount = amount
        self.id = hold
        self.answer = answer
        self._settle = settle
        self._done = not hold

    @property
    def admitted(self) -> bool:
        """Whether the cost is held: the step may be made."""
        return self.id != 0

    def settle(self, actual: Decimal | str | int | None = None) -> None:
        """Commit the step's ``actual`` cost (``None``: the amount held) and release the rest.

        A higher actual cost is counted in full. Settling twice, or a refused
        reservation, changes nothing.

        Raises:
            RunStateError: ``actual`` is no amount (a float, a negative number ...).
        """
        value = None if actual is None else amount_of(actual)
        if self._done:
            return
        self._done = True
        self._settle(self.id, self.amount, value)

    def claim(self) -> int:
        """Take the reservation to settle it another way (a model's usage); its id.

        0 when it is refused or settled already: the caller then settles nothing.
        """
        if self._done:
            return 0
        self._done = True
        return self.id

    def release(self) -> None:
        """The step was not made: nothing is spent, the amount held is released."""
        self.settle(0)

    def __repr__(self) -> str:
        state = "refused" if not self.admitted else "settled" if self._done else "held"
        return f"CostReservation(amount={self.amount}, id={self.id}, {state})"
