"""toolbreaker: circuit breakers around the tools an AI agent calls.

The public surface is re-exported here; everything else is private.
"""

from toolbreaker.core import (
    BreakerState,
    Event,
    Policy,
    Replay,
    Transition,
    apply,
    diff,
    replay,
    step,
)
from toolbreaker.core.retry import RetryBudget, RetryPolicy, RetryRecord
from toolbreaker.core.run.budget import Action, Budget, ClassLimits, RunState, Stop
from toolbreaker.errors import (
    CircuitOpen,
    NotSent,
    PermitError,
    PolicyError,
    ReceiptError,
    RegistryFull,
    StoreUnavailable,
    ToolbreakerError,
    TraceError,
)
from toolbreaker.runtime import (
    ActionRequest,
    Boundary,
    Breaker,
    BreakerStats,
    GuardedTool,
    Permit,
    Registry,
    Rejection,
    RunGuard,
    Step,
    StopPacket,
    TraceRecorder,
    Verdict,
    classify_exception,
    system_prompt_line,
)
from toolbreaker.stores import LocalFallback, MemoryStore, RedisStore, SQLiteStore

__version__ = "0.1.0.dev0"

__all__ = [
    "Action",
    "ActionRequest",
    "Boundary",
    "Breaker",
    "BreakerState",
    "BreakerStats",
    "Budget",
    "CircuitOpen",
    "ClassLimits",
    "Event",
    "GuardedTool",
    "LocalFallback",
    "MemoryStore",
    "NotSent",
    "Permit",
    "PermitError",
    "Policy",
    "PolicyError",
    "ReceiptError",
    "RedisStore",
    "Registry",
    "RegistryFull",
    "Rejection",
    "Replay",
    "RetryBudget",
    "RetryPolicy",
    "RetryRecord",
    "RunGuard",
    "RunState",
    "SQLiteStore",
    "Step",
    "Stop",
    "StopPacket",
    "StoreUnavailable",
    "ToolbreakerError",
    "TraceError",
    "TraceRecorder",
    "Transition",
    "Verdict",
    "__version__",
    "apply",
    "classify_exception",
    "diff",
    "replay",
    "step",
    "system_prompt_line",
]
