"""Optional extras: import one, or say which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from toolbreaker.errors import MissingExtra

__all__ = ["require"]


def require(module: str, extra: str, *, what: str = "this part of toolbreaker") -> ModuleType:
    """Import ``module``, or raise :class:`~toolbreaker.errors.MissingExtra` naming ``extra``.

    ``what`` names the part that needs it, for the message (``"RedisStore"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(module, extra, what=what) from exc
