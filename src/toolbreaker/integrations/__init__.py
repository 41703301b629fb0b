"""Adapters for agent frameworks: thin translations into breaker and run-guard calls.

Each adapter lives in its own module and imports its framework when that module is
imported, never from ``import toolbreaker``. A missing framework produces an error that
says which extra to install (``pip install 'toolbreaker[langchain]'``).
"""

from toolbreaker._extras import require

__all__ = ["require"]
