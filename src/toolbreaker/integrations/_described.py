"""How an adapter finds a tool's breaker and description: one reading for every adapter.

:func:`tool_breaker` is the one way an adapter turns a tool's name, and the dependency
and operation its options name, into a breaker: through the registry's
:meth:`~toolbreaker.Registry.resolve` (the sheet's row; a refusal naming the rows when
the sheet describes the name another way), its errors named by the adapter's own field
(``tools.check_stock.operation``). :func:`guard_options` checks a tool's run-guard options
when the adapter is built, not at the tool's first call.

Pydantic AI's ``ToolDefinition.metadata`` and Google ADK's ``BaseTool.custom_metadata``
let a tool carry a mapping. The mapping under :data:`TOOL_METADATA_KEY` is built with
:func:`tool_metadata`; :func:`described` turns it (or the registry's sheet, or nothing)
into the run guard's description of the tool, and :func:`without_key_argument` hides a
write's idempotency argument from the schema the model sees. No framework is imported
here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import toolbreaker.integrations._kit as kit
from toolbreaker.errors import PolicyError, RowNotFound
from toolbreaker.integrations._kit import (
    BREAKER_OPTIONS,
    Breaker,
    Registry,
    Risk,
    check_risk,
    check_seconds,
    shown,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        GuardedTool,
        RunGuard,
    )


__all__ = [
    "METADATA_FIELDS",
    "TOOL_METADATA_KEY",
    "check_adapter",
    "described",
    "guard_options",
    "tool_breaker",
    "tool_metadata",
    "without_key_argument",
]

#: The key of a tool's metadata mapping that describes the tool to the run guard.
TOOL_METADATA_KEY: Final = "toolbreaker"

#: The fields :func:`tool_metadata` writes; any other is a typo.
METADATA_FIELDS: Final = frozenset(
    {
        "risk",
        "dependency",
        "operation",
        "required",
        "recovery",
        "business_key",
        "idempotency_arg",
    }
)


def tool_metadata(
    *,
    risk: Risk = "read",
    dependency: str | None = None,
    operation: str = "default",
    required: bool = False,
    recovery: bool = False,
    business_key: Sequence[str] | None = None,
    idempotency_arg: str | None = "idempotency_key",
) -> dict[str, Any]:
    """Tool metadata that tells the adapter how to guard a tool.

    Pass it as the tool's metadata: ``metadata=`` to Pydantic AI's ``@agent.tool_plain`` /
    ``Tool(...)``, ``custom_metadata=`` to a Google ADK tool.

    Args:
        risk: ``read``, ``reversible_write`` or ``irreversible`` (irreversible tools need an
            authority check: register them on the guard with ``authorize=`` instead), or
            a function of a call's arguments that answers one (``shell_risk_of("command")``).
        dependency: the remote dependency whose breaker (from the adapter's registry)
            the tool goes through.
        operation: the dependency's operation class (``read``, ``write`` ...).
        required: the run cannot go on without this tool: its breaker opening stops it.
        recovery: a read-only status check that may still run after the run stopped.
        business_key: argument fields naming the business action, from which a write's
            idempotency key is derived.
        idempotency_arg: the keyword argument that receives a write's idempotency key;
            the tool must accept it with a default (``idempotency_key: str = ""``).

    Returns:
        ``{"toolbreaker": {...}}``, to merge into any other metadata the tool carries.

    Raises:
        PolicyError: a wrong type or value, named ``metadata.<field>``, where the tool is
            declared (not at the run's first call of it).
    """
    for name, value in (("dependency", dependency), ("operation", operation)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise PolicyError(
                f"{name} must be a name, got {shown(value)}", field=f"metadata.{name}"
            )
    given = {
        "risk": risk,
        "required": required,
        "recovery": recovery,
        "business_key": business_key,
        "idempotency_arg": idempotency_arg,
    }
    guard_options("tool", given, "metadata")
    return {
        TOOL_METADATA_KEY: {
            "risk": risk,
            "dependency": dependency,
            "operation": operation,
            "required": required,
            "recovery": recovery,
            "business_key": list(business_key) if business_key else None,
            "idempotency_arg": idempotency_arg,
        }
    }


def described(
    guard: RunGuard,
    name: str,
    metadata: Mapping[str, Any] | None,
    registry: Registry | None,
    *,
    where: str = "metadata",
) -> GuardedTool:
    """The guard's description of tool ``name``, registering it from metadata or the sheet.

    In this order: the guard's own declaration (``guard.add_tool`` / ``ensure_tool``
    first wins), the tool's metadata under :data:`TOOL_METADATA_KEY` (its ``dependency``
    is a breaker of ``registry``), the registry's row for the tool
    (``registry.for_tool(name)``); any other tool is a read without a breaker.

    Args:
        guard: the run's guard.
        name: the tool's name.
        metadata: the tool's metadata mapping (``None``: it has none).
        registry: where breakers come from.
        where: how errors name the metadata (``metadata``, ``custom_metadata``).

    Raises:
        PolicyError: the metadata is not a mapping, has an unknown field, names a
            dependency without a registry, or contradicts the boundary sheet.
    """
    raw = (metadata or {}).get(TOOL_METADATA_KEY)
    if raw is None:
        raw = {}
    where = f"{name}.{where}.{TOOL_METADATA_KEY}"
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where} must be a mapping (use tool_metadata())", field=where)
    unknown = sorted(set(raw) - METADATA_FIELDS)
    if unknown:
        raise PolicyError(
            f"unknown field(s) {unknown} in {where} (known: {sorted(METADATA_FIELDS)})",
            field=f"{where}.{unknown[0]}",
        )
    # The run guard's options among the metadata (GuardedToolOptions; a business key
    # listed in JSON becomes a tuple there).
    options: dict[str, Any] = {
        k: raw[k] for k in METADATA_FIELDS & kit.GUARDED_TOOL_OPTIONS if k in raw
    }
    dependency = raw.get("dependency")
    if dependency is not None:
        if registry is None:
            raise PolicyError(
                f"{where} names dependency {dependency!r} but the adapter has no registry",
                field=f"{where}.dependency",
            )
        options["breaker"] = tool_breaker(
            registry, name, dependency=dependency, operation=raw.get("operation"), where=where
        )
    elif registry is not None:
        # A tool the registry does not know has no breaker: only the run's budgets apply.
        with contextlib.suppress(KeyError):
            options["breaker"] = registry.for_tool(name)
    try:
        return guard.ensure_tool(name, **options)
    except PolicyError as exc:
        raise _located(exc, where, name) from None


def tool_breaker(
    registry: Registry,
    tool: str,
    *,
    dependency: str | None = None,
    operation: str | None = None,
    options: Mapping[str, Any] | None = None,
    where: str,
) -> Breaker:
    """The breaker of tool ``tool``: the one rule every adapter follows.

    With a ``dependency`` (and perhaps an ``operation``), the registry's resolution of
    it (:meth:`~toolbreaker.Registry.resolve`): its sheet row (a dependency named without
    an operation takes its one row), else a breaker of its own on the defaults, named
    ``tool`` for the model. Without either, the sheet row whose ``tool`` is ``tool``,
    else a live breaker of that tool, else the dependency named like the tool, resolved
    the same way (a name close to a row's is refused, naming it). ``options`` (breaker
    options) apply when the breaker is made, over its row.

    Args:
        registry: where breakers come from.
        tool: the tool's name.
        dependency: the dependency the adapter's options name, if any.
        operation: the operation they name (``None`` or ``default``: none).
        options: breaker options (``BreakerOptions``).
        where: how errors name the tool's options (``tools.check_stock``).

    Raises:
        RowNotFound: the sheet describes the name another way; its field is
            ``<where>.dependency`` or ``<where>.operation``.
        PolicyError: an invalid option, named ``<where>.<option>``.
    """
    creation: dict[str, Any] = dict(options or {})
    try:
        if dependency is None and operation is None:
            for (row_dependency, row_operation), row in registry.boundaries().items():
                if (row.tool or row_dependency) == tool:
                    return registry.get(row_dependency, row_operation, **creation)
            if not creation:
                with contextlib.suppress(KeyError):
                    return registry.for_tool(tool)
        found = registry.resolve(tool if dependency is None else dependency, operation)
        if not found.row:
            creation.setdefault("tool", tool)  # the sheet's name wins where it has a row
        return registry.get(found.dependency, found.operation, **creation)
    except PolicyError as exc:
        raise _located(exc, where) from None


def check_adapter(
    *,
    registry: object = None,
    guard: object = None,
    flags: Mapping[str, object] | None = None,
    hooks: Mapping[str, object] | None = None,
    functions: Mapping[str, object] | None = None,
    seconds: Mapping[str, object] | None = None,
    names: Mapping[str, object] | None = None,
    breakers: object = None,
    risks: object = None,
    fallbacks: object = None,
) -> None:
    """The options every adapter takes, checked the same way when the adapter is built.

    Args:
        registry: ``None`` or a :class:`~toolbreaker.Registry`.
        guard: ``None`` or a :class:`~toolbreaker.RunGuard`.
        flags: options that are ``True`` or ``False``, by name.
        hooks: options that are ``None`` or callable, by name.
        functions: options that must be callable, by name.
        seconds: deadlines (``None``: none given) that must be positive seconds, by name.
        names: options that must be a non-empty string (a risk class where the option's
            name ends in ``risk``), by name.
        breakers: ``None`` or a mapping of tool names to breakers (field ``breakers``).
        risks: ``None`` or a mapping of tool names to risk classes (field ``risk``).
        fallbacks: ``None`` or a mapping of tool names to tool names (field
            ``fallbacks``).

    Raises:
        PolicyError: naming the option (``registry``, ``hide_open_tools``,
            ``breakers.search``, ``risk.delete_all`` ...).
    """
    if registry is not None and not isinstance(registry, Registry):
        raise PolicyError(
            f"registry must be a Registry (Registry.from_toml(path) ...), got {shown(registry)}",
            field="registry",
        )
    if guard is not None and not isinstance(guard, kit.RunGuard):
        raise PolicyError(f"guard must be a RunGuard, got {shown(guard)}", field="guard")
    for name, flag in (flags or {}).items():
        if type(flag) is not bool:
            raise PolicyError(f"{name} must be True or False, got {shown(flag)}", field=name)
    for name, hook in (hooks or {}).items():
        if hook is not None and not callable(hook):
            raise PolicyError(f"{name} must be callable, got {shown(hook)}", field=name)
    for name, function in (functions or {}).items():
        if not callable(function):
            raise PolicyError(f"{name} must be a function, got {shown(function)}", field=name)
    for name, value in (seconds or {}).items():
        if value is not None:
            check_seconds(value, name)
    for name, value in (names or {}).items():
        _check_name(value, name, risk=name.endswith("risk"))
    for field, mapping in (("breakers", breakers), ("risk", risks), ("fallbacks", fallbacks)):
        if mapping is None:
            continue
        if not isinstance(mapping, Mapping):
            raise PolicyError(f"{field} must map tool names, got {shown(mapping)}", field=field)
        for tool, value in mapping.items():
            if field == "breakers" and not isinstance(value, Breaker):
                raise PolicyError(
                    f"breakers[{tool!r}] must be a Breaker, got {shown(value)}",
                    field=f"breakers.{tool}",
                )
            if field != "breakers":
                _check_name(value, f"{field}.{tool}", risk=field == "risk")


def _check_name(value: object, field: str, *, risk: bool) -> None:
    if risk:
        check_risk(value, field)
        return
    if not isinstance(value, str) or not value.strip():
        raise PolicyError(f"{field} must be a name, got {shown(value)}", field=field)


def guard_options(tool: str, options: Mapping[str, Any], where: str) -> None:
    """Check a tool's run-guard options (:class:`~toolbreaker.GuardedTool` fields) now.

    What an adapter does when it is built, so that a wrong type or value fails there,
    naming ``<where>.<option>``, and never reaches the model as a tool error on the
    tool's first call.

    Raises:
        PolicyError: an unknown option, or a wrong type or value.
    """
    try:
        kit.guarded_tool(tool, kit.not_callable, options)
    except PolicyError as exc:
        raise _located(exc, where, tool) from None


def _located(exc: PolicyError, where: str, tool: str | None = None) -> PolicyError:
    """``exc``, its field named from ``where`` when it is one of the tool's options.

    A refusal of the registry names ``dependency`` or ``operation``; a breaker option
    names itself (``timeout``, ``retry.budget``); a run-guard option names
    ``<tool>.<option>``. Other fields (a sheet row's) stay as they are.
    """
    field = exc.field or ""
    if tool is not None and field.startswith(f"{tool}."):
        field = field[len(tool) + 1 :]
    option = field.partition(".")[0]
    if option not in BREAKER_OPTIONS | kit.GUARDED_TOOL_OPTIONS | {"dependency", "operation"}:
        return exc
    message = f"{where}: {exc.message}"
    if isinstance(exc, RowNotFound):
        return RowNotFound(
            message,
            dependency=exc.dependency,
            operation=exc.operation,
            rows=exc.rows,
            resembles=exc.resembles,
            field=f"{where}.{field}",
        )
    return PolicyError(message, field=f"{where}.{field}")


def without_key_argument(tool: str, schema: Mapping[str, Any], spec: GuardedTool) -> dict[str, Any]:
    """The tool's JSON schema without the idempotency argument the guard fills in.

    Raises:
        PolicyError: the tool has no such argument, or requires the model to send it.
    """
    arg = spec.idempotency_arg
    properties = schema.get("properties") or {}
    where = f"{tool}.{arg}"
    if arg not in properties:
        raise PolicyError(
            f"write tool {tool!r} does not accept its idempotency argument {arg!r}: "
            f"add `{arg}: str = ''` to it, or describe it with idempotency_arg=None",
            field=where,
        )
    if arg in (schema.get("required") or ()):
        raise PolicyError(
            f"write tool {tool!r} requires {arg!r} from the model: give it a default "
            f"(`{arg}: str = ''`) so the run guard can fill it in",
            field=where,
        )
    return {**schema, "properties": {k: v for k, v in properties.items() if k != arg}}
