"""Breaker keys: the one format of a breaker's name in the store, receipts and sheets.

A row's key is its dependency, with its operation class after a colon unless that is
``default`` (``search:read``, ``billing``). A scoped row's breakers are named by the
row's dependency with the scope in brackets (``llm[tenant=acme]:read``); a policy sheet
finds their row by taking the brackets out. Pure functions of strings.
"""

from __future__ import annotations

__all__ = ["breaker_key", "row_of", "scoped_dependency"]


def breaker_key(dependency: str, operation: str) -> str:
    """The key of ``dependency``'s breaker for ``operation`` (``default`` is left out)."""
    return dependency if operation == "default" else f"{dependency}:{operation}"


def scoped_dependency(dependency: str, label: str) -> str:
    """The dependency of one scope's breaker: ``dependency[label]`` (``tenant=acme``)."""
    return f"{dependency}[{label}]"


def row_of(key: str) -> str:
    """The key of the row a breaker belongs to: ``key`` without its scope, if it has one."""
    start, end = key.find("["), key.rfind("]")
    return key[:start] + key[end + 1 :] if 0 < start < end else key
