"""The pure core: two machines that decide everything, and nothing else.

- :mod:`toolbreaker.core._breaker`: may this dependency be called? Policies, states,
  ``apply()``, receipts and traces.
- :mod:`toolbreaker.core._run`: may this run take its next action? Budgets, fingerprints,
  secret masking and the run's ``apply()``.

Nothing in this package reads a clock, does I/O (beyond loading files it is asked to
load), takes a lock or keeps a global. Time arrives inside events. This module
re-exports the breaker machine's names, with the predicates a listener of your own
needs instead of comparing phases: :func:`opened` (did this record open the breaker),
:func:`changed_phase` (is the breaker in another phase after the record) and
:func:`rejects_callers` (are callers refused now, shadow mode and forced states included).
"""

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.core._breaker.machine import apply, step
    from toolbreaker.core._breaker.policy import Policy
    from toolbreaker.core._breaker.predicates import (
        admission,
        due_expiry,
        idle_rejection,
        is_evictable,
        is_quiet,
        rejects_callers,
        retry_after_ms,
    )
    from toolbreaker.core._breaker.receipt import (
        RECEIPT_SCHEMA,
        Replay,
        diff,
        dump_receipt,
        load_receipt,
        replay,
        summarise,
    )
    from toolbreaker.core._breaker.state import (
        CLOSED,
        HALF_OPEN,
        OPEN,
        BreakerState,
        Event,
        Lease,
        Transition,
        changed_phase,
        opened,
    )
    from toolbreaker.core._breaker.trace import parse_event, parse_lines, read_trace
    from toolbreaker.core._canonical import canonical_json, sha256_hex

#: Where each re-exported name lives, imported when first used (PEP 562); the imports
#: above are the same list, for type checkers and editors.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.core._breaker.machine": ("apply", "step"),
    "toolbreaker.core._breaker.policy": ("Policy",),
    "toolbreaker.core._breaker.predicates": (
        "admission",
        "due_expiry",
        "idle_rejection",
        "is_evictable",
        "is_quiet",
        "rejects_callers",
        "retry_after_ms",
    ),
    "toolbreaker.core._breaker.receipt": (
        "RECEIPT_SCHEMA",
        "Replay",
        "diff",
        "dump_receipt",
        "load_receipt",
        "replay",
        "summarise",
    ),
    "toolbreaker.core._breaker.state": (
        "CLOSED",
        "HALF_OPEN",
        "OPEN",
        "BreakerState",
        "Event",
        "Lease",
        "Transition",
        "changed_phase",
        "opened",
    ),
    "toolbreaker.core._breaker.trace": ("parse_event", "parse_lines", "read_trace"),
    "toolbreaker.core._canonical": ("canonical_json", "sha256_hex"),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

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
    "changed_phase",
    "diff",
    "due_expiry",
    "dump_receipt",
    "idle_rejection",
    "is_evictable",
    "is_quiet",
    "load_receipt",
    "opened",
    "parse_event",
    "parse_lines",
    "read_trace",
    "rejects_callers",
    "replay",
    "retry_after_ms",
    "sha256_hex",
    "step",
    "summarise",
]
