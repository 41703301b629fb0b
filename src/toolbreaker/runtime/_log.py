"""The one logger of toolbreaker, masked as each record is made; how a hook's failure is told.

Every record of the ``toolbreaker`` logger is masked once, by a filter on the logger, before
any handler sees it: its message with its arguments, its traceback and its stack
(:func:`~toolbreaker.core._run.redact.redact_text`). So no line can forget: a breaker named
after a URL with a password, an exception text with a bearer token or an API key, a tool's
name read from a framework, all show masked, whichever module logged them.

A listener, classifier, predicate, verifier, reconcile or authority check that raises is
reported here (:func:`hook_failed`), never raised into the tool call.
"""

from __future__ import annotations

import logging
import traceback

from toolbreaker.core._run.redact import redact_text

__all__ = ["hook_failed", "log"]


class _Masked(logging.Filter):
    """Masks a record of the ``toolbreaker`` logger in place, once; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "toolbreaker_masked", False):
            return True
        record.msg = redact_text(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(
                "".join(traceback.format_exception(*record.exc_info)).rstrip()
            )
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        record.toolbreaker_masked = True
        return True


#: The ``toolbreaker`` logger; its records are masked as they are made.
log = logging.getLogger("toolbreaker")
if not any(isinstance(kept, _Masked) for kept in log.filters):
    log.addFilter(_Masked())


def hook_failed(what: str, exc: BaseException | None = None) -> None:
    """Log that ``what`` failed (with ``exc``'s traceback); the outcome stands."""
    if exc is None:
        log.error("toolbreaker: %s", what)
        return
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error("toolbreaker: %s\n%s", what, detail.rstrip())
