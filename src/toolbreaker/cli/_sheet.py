"""``--policy FILE`` of the review commands: a boundary sheet, or a flat policy file.

``replay``, ``verify``, ``simulate`` and ``tune`` replay a trace under a
:class:`~toolbreaker.core.breaker.sheet.PolicySheet`. A file whose top level holds a
table (``[defaults]``, ``[search.read]``...) is a boundary sheet, read by the one parser
of sheets (:meth:`toolbreaker.Registry.from_dict`, the same errors as ``policy
publish``): each breaker key it has a row for (``search:read``, as the event stream
names it) is replayed under that row's policy, every other under the sheet's defaults.
A file of top-level fields only is a flat policy: a sheet of defaults alone, whose
receipts are what they always were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.sheet import PolicySheet
from toolbreaker.core.config import load_toml

__all__ = ["is_sheet", "load_sheet", "sheet_of"]


def is_sheet(data: Mapping[str, Any]) -> bool:
    """Whether a decoded policy file is a boundary sheet (it has a table at the top)."""
    return any(isinstance(value, dict) for value in data.values())


def sheet_of(data: Mapping[str, Any]) -> PolicySheet:
    """The policies of a decoded boundary sheet or flat policy file."""
    if not is_sheet(data):
        return PolicySheet(Policy.from_dict(data))
    from toolbreaker.runtime import Registry  # only for a sheet: the runtime is slow to import

    registry = Registry.from_dict(data)
    rows = {row.key: row.policy for row in registry.boundaries().values()}
    return PolicySheet(registry.default_policy, rows)


def load_sheet(path: str | None) -> PolicySheet:
    """The policies of the file at ``path`` (the built-in defaults when ``None``).

    Errors are :class:`~toolbreaker.errors.PolicyError` with the file, line and field.
    """
    if path is None:
        return PolicySheet(Policy())
    sheet: PolicySheet = load_toml(path, sheet_of)
    return sheet
