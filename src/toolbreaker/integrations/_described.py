"""Tools described by their own metadata: one reading for every adapter that has it.

Pydantic AI's ``ToolDefinition.metadata`` and Google ADK's ``BaseTool.custom_metadata``
let a tool carry a mapping.

The mapping under :data:`TOOL_METADATA_KEY` is built with :func:`tool_metadata`;
:func:`described` turns it (or the registry's sheet, or nothing) into the run guard's
description of the tool, and :func:`without_key_argument` hides a write's idempotency
argument from the schema the model sees. No framework is imported here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from toolbreaker.core.run._values import Risk
from toolbreaker.errors import PolicyError
from toolbreaker.runtime.breaker._boundary import BreakerOptions
from toolbreaker.runtime.fleet._registry import Registry
from toolbreaker.runtime.run._guard import GuardedTool, RunGuard
from toolbreaker.runtime.run._tools import GUARDED_TOOL_OPTIONS

__all__ = [
    "METADATA_FIELDS",
    "TOOL_METADATA_KEY",
    "check_against_sheet",
    "described",
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
    """
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
        k: raw[k] for k in METADATA_FIELDS & GUARDED_TOOL_OPTIONS if k in raw
    }
    dependency = raw.get("dependency")
    if dependency is not None:
        if registry is None:
            raise PolicyError(
                f"{where} names dependency {dependency!r} but the adapter has no registry",
                field=f"{where}.dependency",
            )
        operation = raw.get("operation") or "default"
        check_against_sheet(name, dependency, operation, registry, where)
        in_sheet = (dependency, operation) in registry.boundaries()
        extra: BreakerOptions = {} if in_sheet else {"tool": name}  # the sheet's name wins
        options["breaker"] = registry.get(dependency, operation, **extra)
    elif registry is not None:
        # A tool the registry does not know has no breaker: only the run's budgets apply.
        with contextlib.suppress(KeyError):
            options["breaker"] = registry.for_tool(name)
    return guard.ensure_tool(name, **options)


def check_against_sheet(
    tool: str, dependency: str, operation: str, registry: Registry, where: str
) -> None:
    """Metadata that contradicts the boundary sheet is an error, never a second breaker.

    A tool whose metadata names a row the sheet lacks, while the sheet describes that
    dependency (or that tool) under another operation class, would silently get a separate
    breaker with defaults and shadow the reviewed row.

    Raises:
        PolicyError: naming ``where``'s ``operation`` field.
    """
    rows = registry.boundaries()
    if (dependency, operation) in rows:
        return
    mine = [f"[{d}.{o}]" for (d, o), row in rows.items() if (row.tool or d) == tool]
    same = [f"[{d}.{o}]" for (d, o) in rows if d == dependency]
    if mine or same:
        raise PolicyError(
            f"{where} names dependency {dependency!r} with operation {operation!r}, but the "
            f"boundary sheet describes {', '.join(mine or same)}: set operation= to that row's "
            "operation class",
            field=f"{where}.operation",
        )


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
