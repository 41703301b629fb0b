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

import functools
import sys
from typing import TYPE_CHECKING, Any

from toolbreaker.core._run.redact import redact_text

if TYPE_CHECKING:
    import logging

__all__ = ["hook_failed", "log"]


class _Masked:
    """Masks a record of the ``toolbreaker`` logger in place, once; never drops one.

    A filter of the logger (anything with a ``filter`` method is one): not a subclass of
    ``logging.Filter``, so that defining it does not import :mod:`logging`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask ``record``'s message, traceback and stack; keep it."""
        if getattr(record, "toolbreaker_masked", False):
            return True
        record.msg = redact_text(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            import traceback

            record.exc_text = redact_text(
                "".join(traceback.format_exception(*record.exc_info)).rstrip()
            )
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        record.toolbreaker_masked = True
        return True


@functools.cache
def _logger() -> logging.Logger:
    """The ``toolbreaker`` logger with its masking filter, made on first use."""
    import logging

    logger = logging.getLogger("toolbreaker")
    if not any(isinstance(kept, _Masked) for kept in logger.filters):
        logger.addFilter(_Masked())
    return logger


class _Log:
    """The ``toolbreaker`` logger, imported (:mod:`logging` and all) with its first record.

    Each method is the logger's own, called from where it was called (``stacklevel``), so
    a record names the module and line that logged it, as the logger itself would.
    """

    __slots__ = ()

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        """``logging.Logger.debug``."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        _logger().debug(msg, *args, **kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        """``logging.Logger.info``."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        _logger().info(msg, *args, **kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        """``logging.Logger.warning``."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        _logger().warning(msg, *args, **kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        """``logging.Logger.error``."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        _logger().error(msg, *args, **kwargs)

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        """``logging.Logger.exception``."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        _logger().exception(msg, *args, **kwargs)


#: The ``toolbreaker`` logger; its records are masked as they are made. :mod:`logging`
#: loads with the first record (a program that never logs never loads it), or now when
#: the program already imported it, so records others write to ``toolbreaker`` are
#: masked from the start too.
log = _Log()
if "logging" in sys.modules:
    _logger()


def hook_failed(what: str, exc: BaseException | None = None) -> None:
    """Log that ``what`` failed (with ``exc``'s traceback); the outcome stands."""
    if exc is None:
        log.error("toolbreaker: %s", what)
        return
    import traceback

    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error("toolbreaker: %s\n%s", what, detail.rstrip())
