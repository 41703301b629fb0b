"""The pure core: two machines that decide everything, and nothing else.

The breaker machine decides whether a dependency may be called (policies, states,
``apply()``, receipts and traces); the run machine whether a run may take its next action
(budgets, fingerprints, secret masking and the run's ``apply()``). Their modules are
private (``core/_breaker/``, ``core/_run/``).

Nothing in this package reads a clock, does I/O (beyond loading files it is asked to
load), takes a lock or keeps a global. Time arrives inside events. This module exports
what a user replays or drives by hand: a :class:`BreakerState`, the :class:`Event` it is
fed and :func:`apply`; :func:`replay` and :func:`diff` of whole traces, read with
:func:`read_trace`; and the predicates a listener of your own asks instead of comparing
phases: :func:`opened` (did this record open the breaker), :func:`changed_phase` (is the
breaker in another phase after the record) and :func:`rejects_callers` (are callers
refused now, shadow mode and forced states included). The policy and the transition
record are :class:`toolbreaker.Policy` and :class:`toolbreaker.Transition`.
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
