"""Cost reservations and failures per tool and error class: pure decisions on a run.

Theory of operation
-------------------
A cost added after a call (``add_cost``) is counted only once the call ran, so calls
admitted at once all spend before any of it counts: 1,000 concurrent calls under a $1
budget at $0.01 each can all run. A call (or a model step) that *declares* its cost is
admitted against what is committed **and** what is held::

    short = cover(run, budget, amount, risk=risk, what=tool, now=now)  # None: it fits
    run, hold = reserve(run, amount, budget, risk=risk, tool=tool, now=now)  # hold it
    run = settle(run, hold.id, actual)   # commit the actual cost, release the rest

:func:`cover` refuses a reservation that would take committed plus held cost over
``max_cost``, or over its class's ``max_cost`` (a model step has no class). The refusal
does not stop the run: a cheaper call may still fit, and held cost comes back when calls
settle for less. Settling commits the actual cost (lower, or higher: then the excess is
counted too) or, when none was reported, the amount held. A reservation whose call never
settles (a killed worker) expires by its lease (``Budget.reservation_lease_ms``): its
cost is unknown, so it is committed at the amount held (an ambiguous outcome is
unknown, never free); a settle that comes after that commits only what the actual cost
exceeds it by. Calls that declare no cost keep the counting after the fact.

Failures per tool and error class
---------------------------------
A model stuck on a failing tool rewrites its arguments after every failure, so no two
calls share a fingerprint (the repeat and loop limits never see it), and a validation
error never trips the dependency's breaker. :func:`failed` counts a tool's failures by
error class (the classifier's names: ``validation``, ``http-422``, ``timeout`` ...)
whatever the arguments; the ``Budget.max_tool_failures``-th failure of one tool with one
class stops calling that tool for the run (:func:`tool_stopped`), and the run goes on.

A model's own usage
-------------------
Every adapter reports each model response's usage (input and output tokens, with the
model's name). :func:`price_of` finds the model in the budget's price table (the user's:
toolbreaker ships none) and :func:`used` commits what the tokens cost, keeping each
model's tokens and cost apart (``RunState.usage``) so a stop packet shows the models'
part of the spend beside the tools'. A usage that settles a model step's reservation
commits its priced cost instead of the amount held. Without a price table the tokens are
counted and cost nothing; with one, a model it does not price leaves the cost unknown,
and an unknown cost under a ``max_cost`` stops the run (``max-cost``): the budget cannot
hold what it cannot count.

Everything here is pure: ``now`` is passed in, states are frozen values. The run machine
(:mod:`toolbreaker.core._run.machine`) applies these; shells never call them directly.
"""

from __future__ import annotations

import dataclasses
import decimal
import fnmatch
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._run._values import (
    ZERO,
    RiskClass,
    as_amount,
    decimal_text,
    exact_sum,
    with_risk,
)
from toolbreaker.core._run.holds import (
    FAILURE_LIMIT,
    USAGE_LIMIT,
    FailureCount,
    ModelUsage,
    Reservation,
    ToolStop,
)
from toolbreaker.core._run.state import RunState, Stop, changed
from toolbreaker.errors import RunStateError

if TYPE_CHECKING:
    from toolbreaker.core._run.budget import Budget, ModelPrice

__all__ = [
    "DEFAULT_RESERVATION_LEASE_MS",
    "Covered",
    "amount_of",
    "cover",
    "expire",
    "failed",
    "holding",
    "price_of",
    "reserve",
    "settle",
    "settling",
    "token_cost",
    "tool_stopped",
    "usage_cost",
    "used",
]

#: Where the usage of models a run no longer keeps apart (beyond ``USAGE_LIMIT``) is summed.
OTHER_MODELS: Final = "(other models)"

#: The lease of a reservation when the budget names none: longer than any call's deadline
#: should be, so only a call that will never settle outlives it.
DEFAULT_RESERVATION_LEASE_MS: Final = 300_000

_EXACT: Final = decimal.Context(prec=60, traps=[decimal.Inexact, decimal.InvalidOperation])


def amount_of(value: object, field: str = "cost") -> Decimal:
    """``value`` as a cost amount (a decimal string, an int or a Decimal; never a float).

    Raises:
        RunStateError: naming ``field``, when it is no valid amount.
    """
    try:
        return as_amount(value)
    except (TypeError, ValueError) as exc:
        raise RunStateError(f"{field} {exc}", field=field) from None


def token_cost(tokens: int, price_per_million: Decimal | str | int) -> Decimal:
    """A model step's estimate: ``tokens`` (its maximum output, say) at a price per million.

    Exact: ``token_cost(4096, "15")`` is ``Decimal("0.06144")``.

    Raises:
        RunStateError: ``tokens`` is not a non-negative integer, or the price no amount.
    """
    if type(tokens) is not int or tokens < 0:
        raise RunStateError(
            f"tokens must be a non-negative integer, got {tokens!r}", field="tokens"
        )
    price = amount_of(price_per_million, "price_per_million")
    return amount_of(_EXACT.divide(_EXACT.multiply(price, tokens), 1_000_000))


@dataclasses.dataclass(frozen=True, slots=True)
class Covered:
    """Why a reservation does not fit: the refusal and what is left.

    Attributes:
        stop: the ``over-budget`` condition with its numbers.
        left: what the binding limit leaves for calls (never negative).
    """

    stop: Stop
    left: Decimal


def _left(limit: Decimal, committed: Decimal, held: Decimal) -> Decimal:
    return max(ZERO, _EXACT.subtract(limit, _EXACT.add(committed, held)))


def cover(
    run: RunState,
    budget: Budget,
    amount: Decimal,
    *,
    risk: RiskClass | None,
    what: str,
    now: int,
    fingerprint: str | None = None,
) -> Covered | None:
    """``None`` when a reservation of ``amount`` fits the run's cost limits, else why not.

    Committed plus held cost plus ``amount`` may reach ``max_cost`` but not exceed it;
    likewise the class's ``max_cost`` for a tool call of ``risk``. ``what`` names the
    call in the words (``search`` or ``a model step``).
    """
    checks: list[tuple[Decimal, Decimal, Decimal, str]] = []
    if budget.max_cost is not None:
        checks.append((budget.max_cost, run.cost, run.reserved(), "max_cost"))
    if risk is not None:
        limit = budget.classes[risk].max_cost
        if limit is not None:
            checks.append(
                (limit, run.class_cost[risk], run.reserved(risk), f"classes.{risk}.max_cost")
            )
    for limit, committed, held, name in checks:
        left = _left(limit, committed, held)
        if amount > left:
            detail = (
                f"the budget for this run cannot cover another call of {what} "
                f"({decimal_text(amount)}); {decimal_text(left)} left of {name}="
                f"{decimal_text(limit)} ({decimal_text(committed)} spent, "
                f"{decimal_text(held)} reserved)"
            )
            return Covered(Stop("over-budget", detail, now, risk, fingerprint), left)
    return None


def holding(
    run: RunState,
    amount: Decimal,
    budget: Budget,
    *,
    risk: RiskClass | None,
    tool: str | None,
    now: int,
) -> tuple[dict[str, Any], Reservation]:
    """The fields of ``run`` holding ``amount`` for ``tool``, and the reservation.

    For the run machine, which sets them in the same state change that begins the call.
    """
    lease = budget.reservation_lease_ms or DEFAULT_RESERVATION_LEASE_MS
    hold = Reservation(run.reservations_made + 1, amount, risk, now + lease, tool)
    return {"reservations": (*run.reservations, hold), "reservations_made": hold.id}, hold


def reserve(
    run: RunState,
    amount: Decimal,
    budget: Budget,
    *,
    risk: RiskClass | None,
    tool: str | None,
    now: int,
) -> tuple[RunState, Reservation]:
    """Hold ``amount`` for a call of ``tool`` (``None``: a model step) admitted at ``now``."""
    fields, hold = holding(run, amount, budget, risk=risk, tool=tool, now=now)
    return changed(run, **fields), hold


def _commit(run: RunState, amount: Decimal, risk: RiskClass | None) -> dict[str, Any]:
    if not amount:
        return {}
    total = exact_sum(run.cost, amount, "cost")
    if risk is None:
        return {"cost": total}
    spent = exact_sum(run.class_cost[risk], amount, "class_cost")
    return {"cost": total, "class_cost": with_risk(run.class_cost, risk, spent)}


def settling(
    run: RunState,
    hold: int,
    actual: Decimal | None,
    *,
    estimate: Decimal | None = None,
    risk: RiskClass | None = None,
) -> dict[str, Any]:
    """The fields of ``run`` with reservation ``hold`` settled (see :func:`settle`)."""
    for i, found in enumerate(run.reservations):
        if found.id == hold:
            rest = (*run.reservations[:i], *run.reservations[i + 1 :])
            spent = found.amount if actual is None else actual
            return {"reservations": rest, **_commit(run, spent, found.risk)}
    if actual is not None and estimate is not None and actual > estimate:
        return _commit(run, _EXACT.subtract(actual, estimate), risk)
    return {}


def settle(
    run: RunState,
    hold: int,
    actual: Decimal | None,
    *,
    estimate: Decimal | None = None,
    risk: RiskClass | None = None,
) -> RunState:
    """Settle reservation ``hold``: commit ``actual`` (``None``: the amount held), release it.

    A reservation no longer held (its lease expired, and it was committed at its amount)
    commits what ``actual`` exceeds ``estimate`` by, against ``risk``; settling one twice
    does the same, so a duplicate settle never counts twice.
    """
    fields = settling(run, hold, actual, estimate=estimate, risk=risk)
    return changed(run, **fields) if fields else run


def expire(run: RunState, now: int) -> RunState:
    """``run`` with every reservation whose lease ended by ``now`` committed at its amount."""
    for hold in run.reservations:
        if hold.expires_at <= now:
            break
    else:
        return run  # none ended (the common case: no generator for it)
    kept = tuple(h for h in run.reservations if h.expires_at > now)
    ended = [h for h in run.reservations if h.expires_at <= now]
    run = changed(run, reservations=kept, expired=run.expired + len(ended))
    for hold in ended:
        run = changed(run, **_commit(run, hold.amount, hold.risk))
    return run


def tool_stopped(run: RunState, tool: str) -> ToolStop | None:
    """Why the run no longer calls ``tool``, or ``None``."""
    for found in run.tools_stopped:
        if found.tool == tool:
            return found
    return None


def failed(run: RunState, tool: str, error: str, now: int, budget: Budget) -> RunState:
    """Count a failure of ``tool`` with error class ``error``; stop the tool at the limit.

    Without ``Budget.max_tool_failures`` nothing is counted (the state stays as before).
    """
    limit = budget.max_tool_failures
    if limit is None:
        return run
    count = 1
    kept: list[FailureCount] = []
    for found in run.failures:
        if found.tool == tool and found.error == error:
            count = found.count + 1
        else:
            kept.append(found)
    kept.append(FailureCount(tool, error, count))
    run = changed(run, failures=tuple(kept[-FAILURE_LIMIT:]))
    if count < limit or tool_stopped(run, tool) is not None:
        return run
    failures = "1 failure" if count == 1 else f"{count} failures"
    detail = (
        f"{tool} ended in {failures} of class {error} in this run, whatever its arguments "
        f"(max_tool_failures={limit}): it is not called again in this run"
    )
    return changed(run, tools_stopped=(*run.tools_stopped, ToolStop(tool, error, detail, now)))


def price_of(budget: Budget, model: str) -> ModelPrice | None:
    """The budget's price for ``model``: its exact name, else the longest ``*`` pattern."""
    prices = budget.prices
    found = prices.get(model)
    if found is not None:
        return found
    best: str | None = None
    for pattern in prices:
        longer = best is None or len(pattern) > len(best)
        if longer and "*" in pattern and fnmatch.fnmatchcase(model, pattern):
            best = pattern
    return None if best is None else prices[best]


def usage_cost(price: ModelPrice, input_tokens: int, output_tokens: int) -> Decimal:
    """What ``input_tokens`` and ``output_tokens`` cost at ``price``, exactly."""
    return amount_of(
        _EXACT.add(
            token_cost(input_tokens, price.input_per_million),
            token_cost(output_tokens, price.output_per_million),
        )
    )


def used(
    run: RunState,
    budget: Budget,
    model: str,
    tokens: tuple[int, int],
    now: int,
    *,
    reservation: int = 0,
    estimate: Decimal | None = None,
) -> tuple[RunState, Stop | None]:
    """Count a response's ``tokens`` (input, output); the stop an unpriced model makes.

    The priced cost is committed (settling ``reservation`` with it when the step held
    one); the model's tokens and cost are kept apart in ``RunState.usage``. A model the
    price table does not price (when there is a table) costs nothing known: a run with a
    ``max_cost`` gets a ``max-cost`` stop naming it, which the caller records.
    """
    input_tokens, output_tokens = tokens
    for name, count in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if type(count) is not int or count < 0:
            raise RunStateError(f"{name} must be a non-negative integer, got {count!r}", field=name)
    price = price_of(budget, model) if budget.prices else None
    cost = None if price is None else usage_cost(price, input_tokens, output_tokens)
    if reservation:
        run = settle(run, reservation, cost, estimate=estimate)
    elif cost:
        run = changed(run, **_commit(run, cost, None))
    run = changed(
        run, usage=_kept(run.usage, ModelUsage(model, input_tokens, output_tokens, 1, cost))
    )
    if price is None and budget.prices and budget.max_cost is not None:
        detail = (
            f"model {model} has no price in the budget's prices: what its "
            f"{input_tokens + output_tokens} tokens cost is unknown, so max_cost="
            f"{decimal_text(budget.max_cost)} cannot hold (add its price to the budget's prices)"
        )
        return run, Stop("max-cost", detail, now)
    return run, None


def _kept(usage: tuple[ModelUsage, ...], response: ModelUsage) -> tuple[ModelUsage, ...]:
    """``usage`` with ``response`` added to its model's, the most recent model last."""
    model = response.model
    before = next((u for u in usage if u.model == model), None)
    rest = [u for u in usage if u.model != model]
    rest.append(response if before is None else _summed(model, before, response))
    while len(rest) > USAGE_LIMIT:  # the oldest two summed, so no token is forgotten
        first, second, *others = rest
        rest = [_summed(OTHER_MODELS, first, second), *others]
    return tuple(rest)


def _summed(model: str, a: ModelUsage, b: ModelUsage) -> ModelUsage:
    return ModelUsage(
        model,
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.requests + b.requests,
        _sum_cost(a.cost, b.cost),
    )


def _sum_cost(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    if a is None and b is None:
        return None
    return exact_sum(a or ZERO, b or ZERO, "cost")
