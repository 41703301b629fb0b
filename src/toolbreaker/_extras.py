"""Optional extras: import one, or say which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this toolbreaker adapter needs {module!r}: pip install 'toolbreaker[{extra}]'"
        ) from exc
