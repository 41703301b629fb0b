"""The pure core: policies, states, the transition function and receipts.

Nothing in this package reads a clock, does I/O (beyond loading files it is asked to
load), takes a lock or keeps a global. Time arrives inside events.
"""

from toolbreaker.core.canonical import canonical_json, sha256_hex
from toolbreaker.core.machine import (
    admission,
    apply,
    due_expiry,
    idle_rejection,
    is_quiet,
    retry_after_ms,
    step,
)
from toolbreaker.core.policy import Policy
from toolbreaker.core.receipt import (
    RECEIPT_SCHEMA,
    Replay,
    diff,
    dump_receipt,
    load_receipt,
    replay,
    summarise,
)
from toolbreaker.core.state import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    BreakerState,
    Event,
    Lease,
    Transition,
)
from toolbreaker.core.trace import parse_event, parse_lines, read_trace

__all__ = [
    "CLOSED",
    "HALF_OPEN",
    "OPEN",
    "RECEIPT_SCHEMA",
    "BreakerState",
    "Event",
    "Lease",
    "Policy",
    "Replay",
    "Transition",
    "admission",
    "apply",
    "canonical_json",
    "diff",
    "due_expiry",
    "dump_receipt",
    "idle_rejection",
    "is_quiet",
    "load_receipt",
    "parse_event",
    "parse_lines",
    "read_trace",
    "replay",
    "retry_after_ms",
    "sha256_hex",
    "step",
    "summarise",
]
