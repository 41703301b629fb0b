"""Scope values (tenant, API key, agent) for breakers whose sheet row is scoped.

A row with ``scope = "tenant"`` keys one breaker per tenant, so one tenant's revoked key
does not open the breaker for everyone. The value comes from the context the tool call
runs in::

    with toolbreaker.scope(tenant="acme"):
        agent.invoke(...)            # every scoped breaker keys by tenant "acme"

Context variables follow the call into worker threads (``enforce = "thread"``) and
asyncio tasks, so adapters need to do nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Final

from toolbreaker.errors import PolicyError

__all__ = ["current_scope", "scope"]

_EMPTY: Final[Mapping[str, str]] = {}
_SCOPE: Final = contextvars.ContextVar[Mapping[str, str]]("toolbreaker_scope", default=_EMPTY)


@contextlib.contextmanager
def scope(**values: str) -> Iterator[None]:
    """Set scope values (``tenant="acme"``, ``agent="triage"``) for the calls in the block.

    Raises:
        PolicyError: a value is not a non-empty string.
    """
    for name, value in values.items():
        if not isinstance(value, str) or not value:
            raise PolicyError(f"scope value {name} must be a non-empty string", field=name)
    token = _SCOPE.set({**_SCOPE.get(), **values})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def current_scope(name: str) -> str | None:
    """The value of scope ``name`` in the current context, if set."""
    return _SCOPE.get().get(name)
