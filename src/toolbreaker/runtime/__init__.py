"""Runtime shells: breakers, the registry, the classifier, the clock and tool results.

Only this layer reads clocks, runs calls and takes locks; every decision still comes
from :mod:`toolbreaker.core`.
"""

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.runtime._breaker._boundary import (
        BREAKER_OPTIONS,
        Boundary,
        BreakerOptions,
        BreakerToolOptions,
        Enforce,
        HealthCheck,
    )
    from toolbreaker.runtime._breaker._breaker import (
        Breaker,
        BreakerStats,
        Listener,
        Permit,
        Rejection,
    )
    from toolbreaker.runtime._breaker._classify import (
        SUCCESS,
        Classifier,
        Verdict,
        classify_exception,
        classify_status,
        parse_duration,
        parse_retry_after,
    )
    from toolbreaker.runtime._breaker._degrade import Degradation
    from toolbreaker.runtime._breaker._scope import current_scope, scope
    from toolbreaker.runtime._clock import Clock, monotonic_ms
    from toolbreaker.runtime._fleet._attach import Attachment, breakers_of
    from toolbreaker.runtime._fleet._drain import (
        DrainReport,
        PruneReport,
        drain,
        prune_done,
        queued_items,
    )
    from toolbreaker.runtime._fleet._health import HealthChecker, HealthStats
    from toolbreaker.runtime._fleet._published import PolicyFollower, PublishedSheet
    from toolbreaker.runtime._fleet._recorder import TraceRecorder
    from toolbreaker.runtime._fleet._registry import Registry, Resolution, publish_policy
    from toolbreaker.runtime._result import (
        SYSTEM_PROMPT_LINE,
        error_result,
        hidden_tools_line,
        server_unavailable_result,
        system_prompt_line,
        unavailable_result,
    )
    from toolbreaker.runtime._run._guard import (
        ActionRequest,
        CostReservation,
        GuardedTool,
        GuardedToolOptions,
        RunGuard,
        StopPacket,
        evidence_digest,
        may_have_committed,
    )
    from toolbreaker.runtime._run._siblings import (
        BranchOutcome,
        CancelledByPolicy,
        SiblingOutcome,
        Siblings,
    )
    from toolbreaker.runtime._step import (
        TOOL_TYPES,
        Step,
        StepObserver,
        StepStart,
        StepWatch,
        ToolType,
        idempotency_key,
    )

#: Where each re-exported name lives, imported when first used (PEP 562); the imports
#: above are the same list, for type checkers and editors.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.runtime._clock": ("Clock", "monotonic_ms"),
    "toolbreaker.runtime._result": (
        "SYSTEM_PROMPT_LINE",
        "error_result",
        "hidden_tools_line",
        "server_unavailable_result",
        "system_prompt_line",
        "unavailable_result",
    ),
    "toolbreaker.runtime._step": (
        "TOOL_TYPES",
        "Step",
        "StepObserver",
        "StepStart",
        "StepWatch",
        "ToolType",
        "idempotency_key",
    ),
    "toolbreaker.runtime._breaker._boundary": (
        "BREAKER_OPTIONS",
        "Boundary",
        "BreakerOptions",
        "BreakerToolOptions",
        "Enforce",
        "HealthCheck",
    ),
    "toolbreaker.runtime._breaker._breaker": (
        "Breaker",
        "BreakerStats",
        "Listener",
        "Permit",
        "Rejection",
    ),
    "toolbreaker.runtime._breaker._classify": (
        "SUCCESS",
        "Classifier",
        "Verdict",
        "classify_exception",
        "classify_status",
        "parse_duration",
        "parse_retry_after",
    ),
    "toolbreaker.runtime._breaker._degrade": ("Degradation",),
    "toolbreaker.runtime._breaker._scope": ("current_scope", "scope"),
    "toolbreaker.runtime._fleet._attach": ("Attachment", "breakers_of"),
    "toolbreaker.runtime._fleet._drain": (
        "DrainReport",
        "PruneReport",
        "drain",
        "prune_done",
        "queued_items",
    ),
    "toolbreaker.runtime._fleet._health": ("HealthChecker", "HealthStats"),
    "toolbreaker.runtime._fleet._published": ("PolicyFollower", "PublishedSheet"),
    "toolbreaker.runtime._fleet._recorder": ("TraceRecorder",),
    "toolbreaker.runtime._fleet._registry": ("Registry", "Resolution", "publish_policy"),
    "toolbreaker.runtime._run._guard": (
        "ActionRequest",
        "CostReservation",
        "GuardedTool",
        "GuardedToolOptions",
        "RunGuard",
        "StopPacket",
        "evidence_digest",
        "may_have_committed",
    ),
    "toolbreaker.runtime._run._siblings": (
        "BranchOutcome",
        "CancelledByPolicy",
        "SiblingOutcome",
        "Siblings",
    ),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__all__ = [
    "BREAKER_OPTIONS",
    "SUCCESS",
    "SYSTEM_PROMPT_LINE",
    "TOOL_TYPES",
    "ActionRequest",
    "Attachment",
    "Boundary",
    "BranchOutcome",
    "Breaker",
    "BreakerOptions",
    "BreakerStats",
    "BreakerToolOptions",
    "CancelledByPolicy",
    "Classifier",
    "Clock",
    "CostReservation",
    "Degradation",
    "DrainReport",
    "Enforce",
    "GuardedTool",
    "GuardedToolOptions",
    "HealthCheck",
    "HealthChecker",
    "HealthStats",
    "Listener",
    "Permit",
    "PolicyFollower",
    "PruneReport",
    "PublishedSheet",
    "Registry",
    "Rejection",
    "Resolution",
    "RunGuard",
    "SiblingOutcome",
    "Siblings",
    "Step",
    "StepObserver",
    "StepStart",
    "StepWatch",
    "StopPacket",
    "ToolType",
    "TraceRecorder",
    "Verdict",
    "breakers_of",
    "classify_exception",
    "classify_status",
    "current_scope",
    "drain",
    "error_result",
    "evidence_digest",
    "hidden_tools_line",
    "idempotency_key",
    "may_have_committed",
    "monotonic_ms",
    "parse_duration",
    "parse_retry_after",
    "prune_done",
    "publish_policy",
    "queued_items",
    "scope",
    "server_unavailable_result",
    "system_prompt_line",
    "unavailable_result",
]
