"""The tools a run guard knows, and whose their idempotency argument is.

A :class:`GuardedTool` is a tool as the guard knows it; its fields are the one list of a
tool's options, which :class:`GuardedToolOptions` types as keyword arguments
(``RunGuard.tool(...)``, ``RunGuard.ensure_tool(...)``, an adapter's tool options); an
:class:`ActionRequest` is what an irreversible tool's authority check is asked; a write's
idempotency argument is the guard's to fill in, never the model's (:func:`key_argument`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, TypedDict

from toolbreaker.core._files import shown
from toolbreaker.core._run._values import Risk, check_risk
from toolbreaker.core._run.budget import WRITES, RiskClass
from toolbreaker.core._run.costs import amount_of
from toolbreaker.core._run.fingerprint import FingerprintRules, evidence
from toolbreaker.errors import PolicyError, RunStateError
from toolbreaker.runtime._breaker._breaker import Breaker

__all__ = [
    "GUARDED_TOOL_OPTIONS",
    "ActionRequest",
    "Amount",
    "Authorizer",
    "CostEstimate",
    "GuardToolOptions",
    "GuardedTool",
    "GuardedToolOptions",
    "evidence_digest",
    "guarded_tool",
    "key_argument",
    "may_write",
    "not_callable",
    "with_key",
    "without_key",
]

Authorizer = Callable[["ActionRequest"], bool]
#: An amount of money: a decimal string, an integer or a :class:`~decimal.Decimal`.
Amount = Decimal | str | int
#: What a tool's call is expected to cost: a fixed amount, or an estimator of its arguments.
CostEstimate = Amount | Callable[[Mapping[str, Any]], Amount]


@dataclasses.dataclass(frozen=True, slots=True)
class ActionRequest:
    """What an authority check (or an approval hook) is asked to approve.

    Attributes:
        task: the run's task id.
        tool: the tool name.
        args: the arguments, secrets masked.
        fingerprint: the semantic fingerprint of the action.
        idempotency_key: the key the write will carry.
        risk: the call's risk class (the tool's, or what its risk function answered).
    """

    task: str
    tool: str
    args: Mapping[str, Any]
    fingerprint: str
    idempotency_key: str | None
    risk: RiskClass


@dataclasses.dataclass(frozen=True, slots=True)
class GuardedTool:
    """A tool as the run guard knows it.

    Every field is checked when the tool is described (a wrong type or value is a
    :class:`~toolbreaker.errors.PolicyError` naming ``<name>.<field>``), never at its first call.

    Attributes:
        name: the tool name the model calls.
        fn: the implementation, called with the arguments as keywords.
        risk: ``read``, ``reversible_write`` or ``irreversible``; or a function of a call's
            arguments that answers one, so each call has its own class (a generic shell
            tool: ``risk=shell_risk_of("command")``). A call of such a tool that writes is
            journaled, keyed and verified as any write, but keyed per call when the tool
            has no ``business_key`` (the same command after a change is made again, and
            counted as a repeat when nothing changed in between); one that is
            irreversible needs ``authorize`` or is denied; the tool can be no recovery
            read and its breaker may not serve stale answers.
        breaker: the dependency breaker the call goes through (and its deadline).
        business_key: argument fields (dotted paths) naming the business action, from
            which a write's idempotency key is derived; default: the whole canonical
            action.
        idempotency_arg: the keyword argument that receives the idempotency key.
        verify: a write's result check; a falsy answer or an exception makes the
            outcome unknown.
        reconcile: a read-only status check, called with the idempotency key and the
            arguments; returns the committed record or ``None``.
        external_id: extracts the external id (ticket number ...) from a result.
        authorize: the authority check every irreversible call must pass.
        required: the run cannot go on without this tool: its breaker opening stops it.
        recovery: a read-only status check that may still run after the run stopped.
        cost: what one call is expected to cost, reserved against the budget before it
            runs (a fixed amount, or a function of the arguments); a call the budget
            cannot cover is refused before it runs. ``None``: the call's cost counts
            only when reported (``RunGuard.add_cost``).
        actual_cost: what a call that returned actually cost, from its result (``None``
            or an answer of ``None``: the reserved ``cost`` is spent). A failed call
            spends its reserved cost; a call that never ran spends nothing.
    """

    name: str
    fn: Callable[..., Any]
    risk: Risk = "read"
    breaker: Breaker | None = None
    business_key: tuple[str, ...] | None = None
    idempotency_arg: str | None = "idempotency_key"
    verify: Callable[[Any], bool] | None = None
    reconcile: Callable[[str, Mapping[str, Any]], Any] | None = None
    external_id: Callable[[Any], str | None] | None = None
    authorize: Authorizer | None = None
    required: bool = False
    recovery: bool = False
    cost: CostEstimate | None = None
    actual_cost: Callable[[Any], Amount | None] | None = None

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name.strip():
            raise PolicyError(f"a tool name must be a non-empty string, got {shown(name)}")
        if not callable(self.fn):
            raise PolicyError(f"tool {name!r} must be callable", field=f"{name}.fn")
        check_risk(self.risk, f"{name}.risk")
        if self.breaker is not None and not isinstance(self.breaker, Breaker):
            raise PolicyError(
                f"the breaker of tool {name!r} must be a Breaker, got {shown(self.breaker)}",
                field=f"{name}.breaker",
            )
        for flag in ("required", "recovery"):
            if type(getattr(self, flag)) is not bool:
                raise PolicyError(
                    f"{flag} of tool {name!r} must be true or false, "
                    f"got {shown(getattr(self, flag))}",
                    field=f"{name}.{flag}",
                )
        key = self.business_key
        if key is not None and (
            not isinstance(key, tuple) or not key or not all(isinstance(p, str) and p for p in key)
        ):
            raise PolicyError(
                f"business_key of tool {name!r} must be a list of field paths, got {shown(key)}",
                field=f"{name}.business_key",
            )
        arg = self.idempotency_arg
        if arg is not None and (not isinstance(arg, str) or not arg.strip()):
            raise PolicyError(
                f"idempotency_arg of tool {name!r} must be an argument name, got {shown(arg)}",
                field=f"{name}.idempotency_arg",
            )
        for hook in ("verify", "reconcile", "external_id", "authorize", "actual_cost"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise PolicyError(
                    f"{hook} of tool {name!r} must be callable, got {shown(value)}",
                    field=f"{name}.{hook}",
                )
        if self.risk == "irreversible" and self.authorize is None:
            raise PolicyError(
                f"irreversible tool {name!r} needs an authorize callback",
                field=f"{name}.authorize",
            )
        if self.recovery and (callable(self.risk) or self.risk != "read"):
            raise PolicyError(
                f"recovery tool {name!r} must be a read (a tool whose risk is a function of "
                "its arguments may write)",
                field=f"{name}.recovery",
            )
        cost = self.cost
        if cost is not None and not callable(cost):
            try:
                amount_of(cost, f"{name}.cost")
            except RunStateError as exc:
                raise PolicyError(exc.message, field=f"{name}.cost") from None


class GuardToolOptions(TypedDict, total=False):
    """The run guard's options an adapter's tool may set, as keyword arguments.

    Every field of :class:`GuardedTool` but its name, its function and its breaker (an
    adapter finds or makes the breaker); see :class:`GuardedTool` for what each means.
    ``business_key`` may be any sequence of field paths.
    """

    risk: Risk
    business_key: Sequence[str] | None
    idempotency_arg: str | None
    verify: Callable[[Any], bool] | None
    reconcile: Callable[[str, Mapping[str, Any]], Any] | None
    external_id: Callable[[Any], str | None] | None
    authorize: Authorizer | None
    required: bool
    recovery: bool
    cost: CostEstimate | None
    actual_cost: Callable[[Any], Amount | None] | None


class GuardedToolOptions(GuardToolOptions, total=False):
    """Every option of a :class:`GuardedTool` (:data:`GUARDED_TOOL_OPTIONS`), typed.

    ``RunGuard.tool(name, **options)`` and ``RunGuard.ensure_tool(name, **options)``
    take them; a name left out keeps :class:`GuardedTool`'s default.
    """

    breaker: Breaker | None


#: The options of a tool: every field of :class:`GuardedTool` but its name and function.
GUARDED_TOOL_OPTIONS: Final = frozenset(f.name for f in dataclasses.fields(GuardedTool)) - {
    "name",
    "fn",
}


def guarded_tool(name: str, fn: Callable[..., Any], options: Mapping[str, Any]) -> GuardedTool:
    """The :class:`GuardedTool` ``name`` with ``options`` (:class:`GuardedToolOptions`).

    An empty ``business_key`` is none; any other sequence becomes a tuple.

    Raises:
        PolicyError: an option that is no :class:`GuardedTool` field, named in the error.
    """
    unknown = sorted(set(options) - GUARDED_TOOL_OPTIONS)
    if unknown:
        raise PolicyError(
            f"unknown tool option {unknown[0]!r} for tool {name!r} "
            f"(known: {', '.join(sorted(GUARDED_TOOL_OPTIONS))})",
            field=f"{name}.{unknown[0]}",
        )
    fields = dict(options)
    if "business_key" in fields:
        given = fields["business_key"]
        if not isinstance(given, str) and isinstance(given, Sequence):
            fields["business_key"] = tuple(given) if given else None
    return GuardedTool(name, fn, **fields)


def evidence_digest(result: Any, rules: FingerprintRules | None = None) -> str:
    """What a result proves, as a digest (the core's ``fingerprint.evidence``).

    Results that differ only in volatile fields (a fresh ``request_id`` or ``timestamp``)
    are the same evidence, so an identical search repeated is caught as a repeat.
    """
    return evidence(result, rules)


def not_callable(**_kwargs: Any) -> Any:
    """The ``fn`` of a tool its framework runs (:meth:`RunGuard.ensure_tool`)."""
    raise PolicyError("this tool is run by its framework, not by RunGuard.call()")


# -- the idempotency argument: the guard's to fill in, never the model's ------------------


def may_write(tool: GuardedTool) -> bool:
    """Whether a call of ``tool`` may be a write: its class is one, or each call has its own."""
    return callable(tool.risk) or tool.risk in WRITES


def key_argument(tool: GuardedTool) -> str | None:
    """The argument that carries a write's idempotency key, or ``None``.

    A read has none, nor a write described with ``idempotency_arg=None``; a tool whose
    risk is a function of its arguments has one (its writes carry the key). Its value is
    the run guard's: adapters hide it from the schema the model sees and hand the tool the
    guard's key (:func:`with_key`); a value the model sends anyway is dropped
    (:func:`without_key`).
    """
    return tool.idempotency_arg if may_write(tool) and tool.idempotency_arg else None


def without_key(tool: GuardedTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` without a value the model gave for the key argument.

    Dropped before the action is fingerprinted: a made-up key would make the same write
    look like another one, with another idempotency key (a duplicate at the provider).
    """
    arg = key_argument(tool)
    if arg is None or arg not in args:
        return dict(args)
    return {k: v for k, v in args.items() if k != arg}


def with_key(tool: GuardedTool, args: Mapping[str, Any], key: str | None) -> dict[str, Any]:
    """``args`` carrying the guard's idempotency ``key`` in the key argument, if it has one."""
    arg = key_argument(tool)
    return {**args, arg: key} if arg is not None and key is not None else dict(args)
