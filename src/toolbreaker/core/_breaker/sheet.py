"""A boundary sheet's rules as pure data: which row a name resolves to, and each key's policy.

:func:`resolve` is the one rule that says which row of a sheet a breaker asked for by
dependency and operation takes (or that it runs on the sheet's defaults, or is refused):
the registry, and through it every adapter, asks it.

A trace names each breaker by its key (``search:read``, or ``search`` for a dependency's
``default`` operation, as the event stream exports them). A :class:`PolicySheet` gives
the policy of each key a sheet row describes, and the sheet's defaults for every other
one; a flat policy file is a sheet of defaults alone. The one parser of a boundary
sheet is :mod:`toolbreaker.runtime._sheet`; this is only the lookup it yields, pure data,
so the replay engine and the core stay free of the runtime.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Mapping
from typing import Final

from toolbreaker.core._breaker.keys import row_of
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._canonical import canonical_json
from toolbreaker.core._files import printable
from toolbreaker.errors import RowNotFound

__all__ = ["MCP_TABLE", "RESEMBLANCE", "PolicySheet", "Resolution", "resolve"]

#: The sheet's table of the MCP gateway (its servers, run and budget): ``toolbreaker mcp``
#: reads and checks it; it names no dependency, so the registry leaves it alone.
MCP_TABLE = "mcp"

#: How alike (:class:`difflib.SequenceMatcher`'s ratio) a name the sheet lacks must be to
#: one of its dependencies or tools to be taken for a slip of it: one or two letters in a
#: name of eight (``inventroy``, ``Inventory``), never merely a shared word.
RESEMBLANCE: Final = 0.8

#: The operation that names no operation class: the dependency as a whole.
DEFAULT_OPERATION: Final = "default"


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    """Where the breaker of a dependency (and operation) takes its configuration.

    Attributes:
        dependency: the breaker's dependency.
        operation: its operation class: the row's, when the sheet has one.
        row: ``True`` for a sheet row, ``False`` for the sheet's defaults.
    """

    dependency: str
    operation: str
    row: bool


def resolve(
    rows: Mapping[tuple[str, str], str | None],
    dependency: str,
    operation: str | None = None,
    *,
    exact: bool = False,
    strict: bool = False,
    unlisted: Collection[str] = (),
) -> Resolution:
    """The row a breaker asked for as ``(dependency, operation)`` takes, or a refusal.

    In order:

    1. the sheet has the row ``(dependency, operation)``: that row (no operation, or
       ``default``, means the ``default`` row);
    2. the sheet names the dependency under other operations: asked for with no operation
       (or ``default``), its one row if it has one; anything else is refused, listing its
       rows (a write never takes a read's row by a slip). With ``exact`` (an adapter that
       keys breakers by tool, as MCP does) the key runs on the defaults instead;
    3. a ``strict`` sheet refuses any other name;
    4. a name the sheet lacks but closely resembles one of its dependencies or tools
       (:data:`RESEMBLANCE`), or that is a row's tool name, is refused naming that row,
       unless the sheet lists it as ``unlisted`` (left out on purpose);
    5. anything else runs on the sheet's defaults, as a breaker of its own.

    Args:
        rows: the sheet's rows, ``(dependency, operation)`` -> the row's tool name
            (``None``: the dependency's name).
        dependency: the dependency asked for.
        operation: the operation asked for; ``None`` when none was named.
        exact: take a key the sheet has no row for as given (step 2).
        strict: refuse every key the sheet has no row for.
        unlisted: dependencies the sheet leaves out on purpose (step 4).

    Raises:
        RowNotFound: steps 2 to 4, with the rows and the resembled row.
    """
    wanted = operation or DEFAULT_OPERATION
    if (dependency, wanted) in rows:
        return Resolution(dependency, wanted, row=True)
    own = sorted(o for d, o in rows if d == dependency)
    if own and not exact:
        if wanted == DEFAULT_OPERATION and len(own) == 1:
            return Resolution(dependency, own[0], row=True)
        raise _not_one_of(dependency, operation, own)
    if strict:
        raise RowNotFound(
            printable(
                f"the boundary sheet has no [{dependency}.{wanted}] and the registry is strict"
            ),
            dependency=dependency,
            operation=operation,
            rows=tuple(f"{dependency}.{o}" for o in own),
            field="dependency",
        )
    if not own and dependency not in unlisted:
        near = _resembled(rows, dependency)
        if near is not None:
            raise _resembling(dependency, operation, *near)
    return Resolution(dependency, wanted, row=False)


def _not_one_of(dependency: str, operation: str | None, own: list[str]) -> RowNotFound:
    named = ", ".join(f"[{dependency}.{o}]" for o in own)
    if (operation or DEFAULT_OPERATION) == DEFAULT_OPERATION:
        text = (
            f"the boundary sheet describes {dependency!r} as {named}: name the operation "
            f"({', '.join(repr(o) for o in own)}) its breaker is for"
        )
    else:
        text = (
            f"the boundary sheet has no [{dependency}.{operation}]; it describes {dependency!r} "
            f"as {named}: name one of those operations, or add a [{dependency}.{operation}] row"
        )
    return RowNotFound(
        printable(text),
        dependency=dependency,
        operation=operation,
        rows=tuple(f"{dependency}.{o}" for o in own),
        field="operation",
    )


def _resembled(
    rows: Mapping[tuple[str, str], str | None], name: str
) -> tuple[str, str, bool] | None:
    """The row whose dependency or tool ``name`` closely resembles, and which it was.

    ``(row, resembled name, whether a tool's)``; a row's tool named exactly counts too.
    """
    names: dict[str, tuple[str, bool]] = {}
    for (dependency, operation), tool in sorted(rows.items()):
        row = f"{dependency}.{operation}"
        names.setdefault(dependency, (row, False))
        if tool is not None and tool != dependency:
            names.setdefault(tool, (row, True))
    if not names:
        return None  # a sheet without rows (a registry's own): nothing to resemble
    import difflib  # what resembles what, asked only of a name a sheet lacks

    found = difflib.get_close_matches(name, list(names), n=1, cutoff=RESEMBLANCE)
    if not found:
        return None
    row, is_tool = names[found[0]]
    return row, found[0], is_tool


def _resembling(
    dependency: str, operation: str | None, row: str, near: str, is_tool: bool
) -> RowNotFound:
    if is_tool and near == dependency:
        text = (
            f"{dependency!r} is the tool of [{row}], not a dependency: ask for "
            f"{row.partition('.')[0]!r} (or the registry's for_tool({dependency!r}))"
        )
    else:
        what = f"the tool {near!r} of [{row}]" if is_tool else f"[{row}]"
        text = (
            f"the boundary sheet has no {dependency!r}, and it looks like {what}: fix the "
            f"name, or list {dependency!r} in [defaults] unlisted to run it on the sheet's "
            "defaults on purpose"
        )
    return RowNotFound(
        printable(text),
        dependency=dependency,
        operation=operation,
        resembles=row,
        field="dependency",
    )


@dataclasses.dataclass(frozen=True, slots=True)
class PolicySheet:
    """The policy of each breaker key a sheet has a row for, and ``defaults`` for the rest.

    Attributes:
        defaults: the policy of every breaker the sheet has no row for.
        rows: per breaker key (``dependency`` or ``dependency:operation``), its row's policy.
    """

    defaults: Policy = dataclasses.field(default_factory=Policy)
    rows: Mapping[str, Policy] = dataclasses.field(default_factory=dict)

    def of(self, key: str) -> Policy:
        """The policy of the breaker ``key``.

        A scoped breaker (``llm[tenant=acme]:read``: its row's dependency with the scope
        in brackets) takes its row's policy.
        """
        rows = self.rows
        if not rows:
            return self.defaults
        found = rows.get(key)
        if found is not None:
            return found
        return rows.get(row_of(key), self.defaults)

    @property
    def version(self) -> str:
        """The defaults' version when there are no rows, else a short hash of them all."""
        if not self.rows:
            return self.defaults.version
        data = {
            "defaults": self.defaults.version,
            "rows": {key: policy.version for key, policy in self.rows.items()},
        }
        return hashlib.sha256(canonical_json(data)).hexdigest()[:12]
