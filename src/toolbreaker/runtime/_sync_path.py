"""A coroutine on a sync path: found cheaply, refused loudly, closed quietly.

A sync call (``breaker.call``, a ``guard``-ed sync function, ``step.succeeded``,
``RunGuard.call``) that gets an awaitable back ran nothing: the tool is a coroutine no
one will await. Both shells ask :func:`is_awaitable` of what a sync call returned and
raise :func:`not_awaited`'s :class:`~toolbreaker.errors.AsyncCallError`, after settling the call
as :data:`NOT_AWAITED` (ignored: never a success, never a failure of the dependency).
"""

from __future__ import annotations

import inspect
import types
from typing import Final

from toolbreaker.errors import AsyncCallError

__all__ = ["NOT_AWAITED_DETAIL", "PLAIN_TYPES", "is_awaitable", "not_awaited"]

#: The detail of the verdict a call settles with when it returned an awaitable.
NOT_AWAITED_DETAIL: Final = "not-awaited"

#: Types seen returned by sync calls that are not awaitable: the common case costs one
#: set lookup (the quiet fast path tests ``type(result) not in PLAIN_TYPES`` inline).
PLAIN_TYPES: Final[set[type]] = {type(None), dict, str, list, int, float, bool, bytes, tuple}

#: Past this many types, new ones are checked every time rather than remembered.
_MAX_PLAIN: Final = 4096


def is_awaitable(value: object) -> bool:
    """Whether ``value`` is something to await (a coroutine, a future, an ``__await__``)."""
    kind = type(value)
    if kind in PLAIN_TYPES:
        return False
    if hasattr(kind, "__await__"):
        return True
    if kind is types.GeneratorType:  # a generator-based coroutine is one of these too
        return inspect.isawaitable(value)
    if len(PLAIN_TYPES) < _MAX_PLAIN:
        PLAIN_TYPES.add(kind)
    return False


def not_awaited(value: object, where: str, instead: str) -> AsyncCallError:
    """The error for the awaitable ``value`` a sync path got; a coroutine is closed.

    Args:
        value: what the sync call returned.
        where: the sync path (``breaker.call()``, ``step.succeeded()`` ...).
        instead: what to write instead (``await breaker.acall(fn, ...)`` ...).
    """
    name = getattr(value, "__qualname__", None) or type(value).__name__
    close = getattr(value, "close", None)
    if isinstance(value, (types.CoroutineType, types.GeneratorType)) and callable(close):
        close()  # never awaited, and never warned about: the error says it
    return AsyncCallError(
        f"{where} got an awaitable ({name}) where a result belongs: an async tool on a "
        f"sync path never runs, and nothing was counted for it. Use {instead}"
    )
