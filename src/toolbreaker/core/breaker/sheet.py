"""The policies of a boundary sheet, by breaker key: what a replay looks each breaker up in.

A trace names each breaker by its key (``search:read``, or ``search`` for a dependency's
``default`` operation, as the event stream exports them). A :class:`PolicySheet` gives
the policy of each key a sheet row describes, and the sheet's defaults for every other
one; a flat policy file is a sheet of defaults alone. The one parser of a boundary
sheet is the registry's; this is only the lookup it yields, pure data, so the replay
engine and the core stay free of the runtime.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping

from toolbreaker.core.breaker.keys import row_of
from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.canonical import canonical_json

__all__ = ["MCP_TABLE", "PolicySheet"]

#: The sheet's table of the MCP gateway (its servers, run and budget): ``toolbreaker mcp``
#: reads and checks it; it names no dependency, so the registry leaves it alone.
MCP_TABLE = "mcp"


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
