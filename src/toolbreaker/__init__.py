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
from toolbreaker.errors import CircuitOpen, PolicyError, ReceiptError, ToolbreakerError, TraceError

__version__ = "0.1.0.dev0"

__all__ = [
    "BreakerState",
    "CircuitOpen",
    "Event",
    "Policy",
    "PolicyError",
    "ReceiptError",
    "Replay",
    "ToolbreakerError",
    "TraceError",
    "Transition",
    "__version__",
    "apply",
    "diff",
    "replay",
    "step",
]
