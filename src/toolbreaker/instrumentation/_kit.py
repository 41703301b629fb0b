"""The internal interface the exporters are written against.

Everything an exporter of :mod:`toolbreaker.instrumentation` uses from the layers below
that is not public is imported here, and the exporters import it from here alone
(besides the public modules, :mod:`toolbreaker.errors`, :mod:`toolbreaker._extras` and
their own package), as the adapters do through ``integrations/_kit.py``:
``tests/test_quality.py`` holds them to it, and docs/guide/development.md describes it.
Each name is imported when first used (PEP 562), so the event stream's reader loads no
SQLite store until it opens one.
"""

from __future__ import annotations

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.core._breaker.history import STREAM_SCHEMA, transition_entry
    from toolbreaker.core._breaker.state import OUTCOME_TYPES, PHASES
    from toolbreaker.core._canonical import canonical_json
    from toolbreaker.core._run.redact import redact_text
    from toolbreaker.runtime._fleet._attach import Target, breakers_of
    from toolbreaker.runtime._log import hook_failed
    from toolbreaker.runtime._result import DEFAULT_INSTRUCTIONS
    from toolbreaker.runtime._step import StepStart
    from toolbreaker.stores._sqlite import connect_existing

#: Where each name lives, imported when an exporter first uses it (PEP 562). The imports
#: above are the same list, for type checkers.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.core._breaker.history": ("STREAM_SCHEMA", "transition_entry"),
    "toolbreaker.core._breaker.state": ("OUTCOME_TYPES", "PHASES"),
    "toolbreaker.core._canonical": ("canonical_json",),
    "toolbreaker.core._run.redact": ("redact_text",),
    "toolbreaker.runtime._fleet._attach": ("Target", "breakers_of"),
    "toolbreaker.runtime._log": ("hook_failed",),
    "toolbreaker.runtime._result": ("DEFAULT_INSTRUCTIONS",),
    "toolbreaker.runtime._step": ("StepStart",),
    "toolbreaker.stores._sqlite": ("connect_existing",),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "OUTCOME_TYPES",
    "PHASES",
    "STREAM_SCHEMA",
    "StepStart",
    "Target",
    "breakers_of",
    "canonical_json",
    "connect_existing",
    "hook_failed",
    "redact_text",
    "transition_entry",
]
