"""Breaker keys: the one format of a breaker's name in the store, receipts and sheets.

A row's key is its dependency, with its operation class after a colon unless that is
``default`` (``search:read``, ``billing``). A scoped row's breakers are named by the
row's dependency with the scope in brackets (``llm[tenant=acme]:read``); a policy sheet
finds their row by taking the brackets out. Pure functions of strings.

A breaker's names are configuration, yet a name built from a URL can carry a password
(``https://ops:s3cr3t@crm.internal``). Every output a person reads (logs, the event
stream, Prometheus labels, OpenTelemetry spans, events and metrics) shows them as
:func:`shown_names` masks them, once, where the breaker is built
(``https://ops:[REDACTED]@crm.internal``); the store keeps the real key, so two names
that differ only in a secret stay two breakers.
"""

from __future__ import annotations

import dataclasses

from toolbreaker.core._run.redact import redact_text

__all__ = ["Shown", "breaker_key", "row_of", "scoped_dependency", "shown_names"]


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


@dataclasses.dataclass(frozen=True, slots=True)
class Shown:
    """A breaker's names as every output a person reads shows them: secrets masked.

    Attributes:
        key: the breaker's key.
        dependency: its dependency.
        operation: its operation class.
        tool: the tool name its results are worded for.
        fallback: the fallback tool it names, if any.
    """

    key: str
    dependency: str
    operation: str
    tool: str
    fallback: str | None


def shown_names(dependency: str, operation: str, tool: str, fallback: str | None) -> Shown:
    """The names of a breaker as outputs show them, each masked by ``redact_text``."""
    return Shown(
        key=redact_text(breaker_key(dependency, operation)),
        dependency=redact_text(dependency),
        operation=redact_text(operation),
        tool=redact_text(tool),
        fallback=None if fallback is None else redact_text(fallback),
    )
