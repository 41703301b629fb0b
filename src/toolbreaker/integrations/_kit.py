"""The internal interface the adapters are written against.

Everything an adapter of :mod:`toolbreaker.integrations` uses from the layers below that
is not public is imported here, and the adapters import it from here alone (besides the
public modules, :mod:`toolbreaker.errors` and their own package):
``tests/test_quality.py`` holds them to it. A name added here is a decision about what
an adapter may depend on; docs/guide/development.md describes the interface.

Each name is imported when it is first used, as :mod:`toolbreaker`'s are: an adapter
that imports a name at its top loads that name's module, and one that uses a name only
on a path of its own (``import toolbreaker.integrations._kit as kit``, then
``kit.RunGuard`` in a function) loads it when that path first runs.
"""

from __future__ import annotations

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.core._breaker.predicates import may_start_rejecting
    from toolbreaker.core._breaker.sheet import MCP_TABLE
    from toolbreaker.core._breaker.state import Transition
    from toolbreaker.core._breaker.transport import (
        CallEnd,
        CheckEnd,
        needs_liveness_check,
        transport_outcome,
    )
    from toolbreaker.core._config import load_toml
    from toolbreaker.core._files import printable, shown
    from toolbreaker.core._run._state_parts import Stop
    from toolbreaker.core._run._values import Risk, check_risk
    from toolbreaker.core._run.budget import RISK_CLASSES, Budget, RiskClass
    from toolbreaker.core._run.redact import redact_text
    from toolbreaker.core._run.rounds import answer_kind, task_outcome
    from toolbreaker.runtime._breaker._admission import Permit, Rejection
    from toolbreaker.runtime._breaker._boundary import (
        BREAKER_OPTIONS,
        BREAKER_TOOL_OPTIONS,
        BreakerOptions,
        BreakerToolOptions,
    )
    from toolbreaker.runtime._breaker._breaker import Breaker
    from toolbreaker.runtime._breaker._classify import Verdict
    from toolbreaker.runtime._fleet._registry import Registry
    from toolbreaker.runtime._log import hook_failed
    from toolbreaker.runtime._packet import StopPacket
    from toolbreaker.runtime._result import (
        SYSTEM_PROMPT_LINE,
        deployments_unavailable_result,
        hidden_tools_line,
        server_unavailable_result,
        system_prompt_line,
    )
    from toolbreaker.runtime._run._guard import RunGuard
    from toolbreaker.runtime._run._siblings import CancelledByPolicy, SiblingOutcome
    from toolbreaker.runtime._run._tools import (
        GUARDED_TOOL_OPTIONS,
        ActionRequest,
        GuardedTool,
        GuardToolOptions,
        guarded_tool,
        key_argument,
        may_write,
        not_callable,
    )
    from toolbreaker.runtime._sheet import TABLES, check_seconds, flag, known, table, with_deadline
    from toolbreaker.runtime._step import Step, ToolType, idempotency_key
    from toolbreaker.stores._memory import MemoryStore
    from toolbreaker.stores._protocol import Journal, Records, Store

#: Where each name lives, imported when an adapter first uses it (PEP 562): loading one
#: adapter loads what that adapter uses, not every layer below (a breaker-only adapter
#: loads no run guard). The imports above are the same list, for type checkers.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.core._breaker.predicates": ("may_start_rejecting",),
    "toolbreaker.core._breaker.sheet": ("MCP_TABLE",),
    "toolbreaker.core._breaker.state": ("Transition",),
    "toolbreaker.core._breaker.transport": (
        "CallEnd",
        "CheckEnd",
        "needs_liveness_check",
        "transport_outcome",
    ),
    "toolbreaker.core._config": ("load_toml",),
    "toolbreaker.core._files": ("printable", "shown"),
    "toolbreaker.core._run._state_parts": ("Stop",),
    "toolbreaker.core._run._values": ("Risk", "check_risk"),
    "toolbreaker.core._run.budget": ("RISK_CLASSES", "Budget", "RiskClass"),
    "toolbreaker.core._run.redact": ("redact_text",),
    "toolbreaker.core._run.rounds": ("answer_kind", "task_outcome"),
    "toolbreaker.runtime._breaker._admission": ("Permit", "Rejection"),
    "toolbreaker.runtime._breaker._boundary": (
        "BREAKER_OPTIONS",
        "BREAKER_TOOL_OPTIONS",
        "BreakerOptions",
        "BreakerToolOptions",
    ),
    "toolbreaker.runtime._breaker._breaker": ("Breaker",),
    "toolbreaker.runtime._breaker._classify": ("Verdict",),
    "toolbreaker.runtime._fleet._registry": ("Registry",),
    "toolbreaker.runtime._log": ("hook_failed",),
    "toolbreaker.runtime._packet": ("StopPacket",),
    "toolbreaker.runtime._result": (
        "SYSTEM_PROMPT_LINE",
        "deployments_unavailable_result",
        "hidden_tools_line",
        "server_unavailable_result",
        "system_prompt_line",
    ),
    "toolbreaker.runtime._run._guard": ("RunGuard",),
    "toolbreaker.runtime._run._siblings": ("CancelledByPolicy", "SiblingOutcome"),
    "toolbreaker.runtime._run._tools": (
        "GUARDED_TOOL_OPTIONS",
        "ActionRequest",
        "GuardedTool",
        "GuardToolOptions",
        "guarded_tool",
        "key_argument",
        "may_write",
        "not_callable",
    ),
    "toolbreaker.runtime._sheet": (
        "TABLES",
        "check_seconds",
        "flag",
        "known",
        "table",
        "with_deadline",
    ),
    "toolbreaker.runtime._step": ("Step", "ToolType", "idempotency_key"),
    "toolbreaker.stores._memory": ("MemoryStore",),
    "toolbreaker.stores._protocol": ("Journal", "Records", "Store"),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__all__ = [
    "BREAKER_OPTIONS",
    "BREAKER_TOOL_OPTIONS",
    "GUARDED_TOOL_OPTIONS",
    "MCP_TABLE",
    "RISK_CLASSES",
    "SYSTEM_PROMPT_LINE",
    "TABLES",
    "ActionRequest",
    "Breaker",
    "BreakerOptions",
    "BreakerToolOptions",
    "Budget",
    "CallEnd",
    "CancelledByPolicy",
    "CheckEnd",
    "GuardToolOptions",
    "GuardedTool",
    "Journal",
    "MemoryStore",
    "Permit",
    "Records",
    "Registry",
    "Rejection",
    "Risk",
    "RiskClass",
    "RunGuard",
    "SiblingOutcome",
    "Step",
    "Stop",
    "StopPacket",
    "Store",
    "ToolType",
    "Transition",
    "Verdict",
    "answer_kind",
    "check_risk",
    "check_seconds",
    "deployments_unavailable_result",
    "flag",
    "guarded_tool",
    "hidden_tools_line",
    "hook_failed",
    "idempotency_key",
    "key_argument",
    "known",
    "load_toml",
    "may_start_rejecting",
    "may_write",
    "needs_liveness_check",
    "not_callable",
    "printable",
    "redact_text",
    "server_unavailable_result",
    "shown",
    "system_prompt_line",
    "table",
    "task_outcome",
    "transport_outcome",
    "with_deadline",
]
