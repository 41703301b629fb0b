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
    from toolbreaker.core._breaker.machine import apply
    from toolbreaker.core._breaker.predicates import rejects_callers
    from toolbreaker.core._breaker.receipt import Replay, diff, replay
    from toolbreaker.core._breaker.state import BreakerState, Event, changed_phase, opened
    from toolbreaker.core._breaker.trace import read_trace

#: Where each re-exported name lives, imported when first used (PEP 562); the imports
#: above are the same list, for type checkers and editors.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.core._breaker.machine": ("apply",),
    "toolbreaker.core._breaker.predicates": ("rejects_callers",),
    "toolbreaker.core._breaker.receipt": ("Replay", "diff", "replay"),
    "toolbreaker.core._breaker.state": ("BreakerState", "Event", "changed_phase", "opened"),
    "toolbreaker.core._breaker.trace": ("read_trace",),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__all__ = [
    "BreakerState",
    "Event",
    "Replay",
    "apply",
    "changed_phase",
    "diff",
    "opened",
    "read_trace",
    "rejects_callers",
    "replay",
]
