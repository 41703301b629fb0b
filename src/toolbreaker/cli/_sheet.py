"""``--policy FILE`` of the review commands: a boundary sheet, or a flat policy file.

``replay``, ``verify``, ``simulate`` and ``tune`` replay a trace under a
:class:`~toolbreaker.core._breaker.sheet.PolicySheet`. A file whose top level holds a
table (``[defaults]``, ``[search.read]``...) is a boundary sheet, read by the one parser
of sheets (:func:`toolbreaker.runtime._sheet.parse_sheet`, the same errors as ``policy
publish``): each breaker key it has a row for (``search:read``, as the event stream
names it) is replayed under that row's policy, every other under the sheet's defaults.
A file of top-level fields only is a flat policy: a sheet of defaults alone, whose
receipts are what they always were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from toolbreaker._tuning._signals import covered_by
from toolbreaker.core._breaker.keys import breaker_key
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.sheet import MCP_TABLE, PolicySheet
from toolbreaker.core._config import load_toml
from toolbreaker.errors import PolicyError

if TYPE_CHECKING:
    from toolbreaker.runtime._sheet import Sheet

__all__ = [
    "is_sheet",
    "load_sheet",
    "load_sheet_data",
    "sheet_coverage",
    "sheet_of",
    "sheet_toml",
    "sheet_value",
    "split_field",
    "with_values",
]


def is_sheet(data: Mapping[str, Any]) -> bool:
    """Whether a decoded policy file is a boundary sheet (it has a table at the top)."""
    return any(isinstance(value, dict) for value in data.values())


def sheet_of(data: Mapping[str, Any]) -> PolicySheet:
    """The policies of a decoded boundary sheet or flat policy file."""
    if not is_sheet(data):
        return PolicySheet(Policy.from_dict(data))
    sheet = _parsed(data)
    rows = {breaker_key(*key): row["policy"] for key, row in sheet.rows.items()}
    return PolicySheet(sheet.policy, rows)


def sheet_coverage(data: Mapping[str, Any]) -> dict[str, str]:
    """Per row's breaker key, what the sheet gives the model instead of the tool.

    A row's ``fallback`` and ``degrade`` chain (:func:`~toolbreaker.core._breaker.
    calibration.covered_by`); rows with neither, and a flat policy file, give nothing.
    """
    if not is_sheet(data):
        return {}
    out: dict[str, str] = {}
    for key, row in _parsed(data).rows.items():
        has = covered_by(row.get("fallback"), row["degrade"])
        if has is not None:
            out[breaker_key(*key)] = has
    return out


def _parsed(data: Mapping[str, Any]) -> Sheet:
    """A decoded boundary sheet, validated by the one parser of sheets.

    Its old spellings are warned, as ``Registry.from_dict`` warns them.
    """
    # Only for a sheet: the runtime is slow to import.
    from toolbreaker.runtime._sheet import parse_sheet, warn_old_spellings

    sheet = parse_sheet(data)
    warn_old_spellings(sheet.notes)
    return sheet


def load_sheet(path: str | None) -> PolicySheet:
    """The policies of the file at ``path`` (the built-in defaults when ``None``).

    Errors are :class:`~toolbreaker.errors.PolicyError` with the file, line and field.
    """
    if path is None:
        return PolicySheet(Policy())
    sheet: PolicySheet = load_toml(path, sheet_of)
    return sheet


def load_sheet_data(path: str | None) -> tuple[dict[str, Any], PolicySheet]:
    """The decoded file at ``path`` (``{}`` when ``None``) and its policies."""
    if path is None:
        return {}, PolicySheet(Policy())
    found: tuple[dict[str, Any], PolicySheet] = load_toml(path, lambda data: (data, sheet_of(data)))
    return found


def split_field(name: str) -> tuple[str, str | None, str]:
    """``FIELD`` or ``DEPENDENCY.OPERATION.FIELD`` as (dependency, operation, field).

    A bare field is the defaults' (``("defaults", None, field)``).
    """
    parts = name.rsplit(".", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2 and parts[0] == "defaults":
        return "defaults", None, parts[1]
    return "defaults", None, name


def with_values(data: Mapping[str, Any], changes: Mapping[str, object]) -> dict[str, Any]:
    """A copy of a decoded sheet (or flat policy) with ``changes`` (see :func:`split_field`).

    A bare field of a sheet goes in ``[defaults]``, which every row without its own value
    inherits; of a flat file, at the top. A row's field goes in that row, which must be
    in the sheet.
    """
    copy: dict[str, Any] = {
        key: ({k: dict(v) if isinstance(v, dict) else v for k, v in value.items()})
        if isinstance(value, dict)
        else value
        for key, value in data.items()
    }
    sheet = is_sheet(data)
    for name, value in changes.items():
        dependency, operation, field = split_field(name)
        if operation is None:
            target = copy.setdefault("defaults", {}) if sheet else copy
        else:
            row = copy.get(dependency, {}).get(operation) if sheet else None
            if not isinstance(row, dict):
                raise PolicyError(
                    f"the policy has no row [{dependency}.{operation}] to vary", field="vary"
                )
            target = row
        target[field] = value
    return copy


def sheet_value(sheet: PolicySheet, name: str) -> object:
    """The value of a varied field in a candidate (``name`` as :func:`split_field` reads)."""
    dependency, operation, field = split_field(name)
    policy = sheet.defaults
    if operation is not None:
        policy = sheet.rows.get(breaker_key(dependency, operation), policy)
    return getattr(policy, field, None)


_BARE_KEY: Final = re.compile(r"^[A-Za-z0-9_-]+$")


def sheet_toml(data: Mapping[str, Any]) -> str:
    """A decoded sheet (or flat policy) as TOML text that loads back to the same table."""
    flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
    lines = _items(flat)
    for name, table in data.items():
        if not isinstance(table, dict):
            continue
        if name in ("defaults", "tools"):
            lines += ["", f"[{_key(name)}]", *_items(table)]
            continue
        if name == MCP_TABLE:  # the MCP gateway's: nested tables, any depth
            lines += _nested(name, table)
            continue
        for operation, row in table.items():
            lines += ["", f"[{_key(name)}.{_key(operation)}]", *_items(row)]
    return "\n".join(lines).lstrip("\n") + "\n"


def _nested(header: str, table: Mapping[str, Any]) -> list[str]:
    """``[header]`` with its values, then each sub-table as a table of its own."""
    flat = {k: v for k, v in table.items() if not isinstance(v, dict)}
    lines = ["", f"[{header}]", *_items(flat)]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += _nested(f"{header}.{_key(key)}", value)
    return lines


def _items(table: Mapping[str, Any]) -> list[str]:
    return [f"{_key(k)} = {_value(v)}" for k, v in table.items() if v is not None]


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # JSON's escapes are TOML's, but for DEL, which TOML wants escaped too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: object) -> str:
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise PolicyError(f"cannot write {type(value).__name__} as TOML")  # pragma: no cover
