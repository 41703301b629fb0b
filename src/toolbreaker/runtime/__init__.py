"""Runtime shells: breakers, the registry, the classifier, the clock and tool results.

Only this layer reads clocks, runs calls and takes locks; every decision still comes
from :mod:`toolbreaker.core`. Its modules are private; this module exports what an
adapter of your own is written against: the :class:`Step` a tool call is, the
:class:`Permit` or :class:`Rejection` a breaker answers, the :class:`StopPacket` of a
stopped run, the results a model reads, and :class:`Attachment` for watching every
breaker of a registry. Breakers, registries and run guards are imported from
:mod:`toolbreaker`.
"""

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.runtime._breaker._admission import Permit, Rejection
    from toolbreaker.runtime._breaker._classify import classify_status
    from toolbreaker.runtime._fleet._attach import Attachment
    from toolbreaker.runtime._packet import StopPacket
    from toolbreaker.runtime._result import hidden_tools_line, unavailable_result
    from toolbreaker.runtime._step import Step, ToolType

#: Where each re-exported name lives, imported when first used (PEP 562); the imports
#: above are the same list, for type checkers and editors.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.runtime._breaker._admission": ("Permit", "Rejection"),
    "toolbreaker.runtime._breaker._classify": ("classify_status",),
    "toolbreaker.runtime._fleet._attach": ("Attachment",),
    "toolbreaker.runtime._packet": ("StopPacket",),
    "toolbreaker.runtime._result": ("hidden_tools_line", "unavailable_result"),
    "toolbreaker.runtime._step": ("Step", "ToolType"),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__all__ = [
    "Attachment",
    "Permit",
    "Rejection",
    "Step",
    "StopPacket",
    "ToolType",
    "classify_status",
    "hidden_tools_line",
    "unavailable_result",
]
