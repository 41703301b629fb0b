"""Runtime shells: breakers, the registry, the classifier, the clock and tool results.

Only this layer reads clocks, runs calls and takes locks; every decision still comes
from :mod:`toolbreaker.core`.
"""

from toolbreaker.runtime._breaker import Breaker, BreakerStats, Enforce, Listener, Permit, Rejection
from toolbreaker.runtime._classify import (
    SUCCESS,
    Classifier,
    Verdict,
    classify_exception,
    classify_status,
    parse_retry_after,
)
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.runtime._guard import ActionRequest, GuardedTool, GuardStep, RunGuard, StopPacket
from toolbreaker.runtime._recorder import TraceRecorder
from toolbreaker.runtime._registry import Boundary, Registry
from toolbreaker.runtime._result import (
    SYSTEM_PROMPT_LINE,
    error_result,
    system_prompt_line,
    unavailable_result,
)

__all__ = [
    "SUCCESS",
    "SYSTEM_PROMPT_LINE",
    "ActionRequest",
    "Boundary",
    "Breaker",
    "BreakerStats",
    "Classifier",
    "Clock",
    "Enforce",
    "GuardStep",
    "GuardedTool",
    "Listener",
    "Permit",
    "Registry",
    "Rejection",
    "RunGuard",
    "StopPacket",
    "TraceRecorder",
    "Verdict",
    "classify_exception",
    "classify_status",
    "error_result",
    "monotonic_ms",
    "parse_retry_after",
    "system_prompt_line",
    "unavailable_result",
]
