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
from toolbreaker.errors import (
    CircuitOpen,
    PermitError,
    PolicyError,
    ReceiptError,
    RegistryFull,
    StoreUnavailable,
    ToolbreakerError,
    TraceError,
)
from toolbreaker.runtime import (
    Boundary,
    Breaker,
    BreakerStats,
    Permit,
    Registry,
    Rejection,
    Verdict,
    classify_exception,
    system_prompt_line,
)
from toolbreaker.stores import MemoryStore

__version__ = "0.1.0.dev0"

__all__ = [
    "Boundary",
    "Breaker",
    "BreakerState",
    "BreakerStats",
    "CircuitOpen",
    "Event",
    "MemoryStore",
    "Permit",
    "PermitError",
    "Policy",
    "PolicyError",
    "ReceiptError",
    "Registry",
    "RegistryFull",
    "Rejection",
    "Replay",
    "StoreUnavailable",
    "ToolbreakerError",
    "TraceError",
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
