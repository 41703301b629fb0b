"""The one logger of toolbreaker, and the way a hook's failure is reported: masked.

A listener, classifier, predicate, verifier, reconcile or authority check that raises is
reported here, never raised into the tool call. Its message and traceback are masked
(:func:`~toolbreaker.core.run.redact.redact_text`) before they reach a log handler: an
exception text may carry a bearer token or an API key.
"""

from __future__ import annotations

import logging
import traceback

from toolbreaker.core.run.redact import redact_text

__all__ = ["hook_failed", "log"]

#: The ``toolbreaker`` logger.
log = logging.getLogger("toolbreaker")


def hook_failed(what: str, exc: BaseException | None = None) -> None:
    """Log that ``what`` failed (with ``exc``'s masked traceback); the outcome stands."""
    if exc is None:
        log.error(redact_text(f"toolbreaker: {what}"))
        return
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error(redact_text(f"toolbreaker: {what}\n{detail}").rstrip())
