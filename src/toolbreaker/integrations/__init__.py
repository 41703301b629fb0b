"""Adapters for agent frameworks: thin translations into breaker and run-guard calls.

Each adapter lives in its own module and imports its framework when that module is
imported, never from ``import toolbreaker``. A missing framework produces an error that
says which extra to install (``pip install 'toolbreaker[langchain]'``).
"""

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
