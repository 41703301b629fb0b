"""The one exception tree of toolbreaker.

Every exception the library raises on purpose derives from :class:`ToolbreakerError`,
so ``except ToolbreakerError`` catches them all and nothing else::

    ToolbreakerError
    ├── PolicyError          invalid policy or configuration (field, line)
    ├── TraceError           an event or trace that cannot be replayed (line)
    ├── ReceiptError         a file that is not a toolbreaker receipt
    ├── CircuitOpen          a call rejected locally by an open breaker (retry_after, result)
    ├── StoreUnavailable     breaker state could not be read or written (fail closed)
    ├── RegistryFull         more breakers than the registry's cardinality limit
    └── PermitError          a permit settled twice

Errors carry machine-readable fields so callers never parse messages.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CircuitOpen",
    "PermitError",
    "PolicyError",
    "ReceiptError",
    "RegistryFull",
    "StoreUnavailable",
    "ToolbreakerError",
    "TraceError",
]


class ToolbreakerError(Exception):
    """Base class of every error toolbreaker raises on purpose."""


class _Located(ToolbreakerError):
    """An error about user input that can point at a file and a line."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def located(self, file: str | None = None) -> str:
        """Return ``file:line: message`` with whatever location is known."""
        where = self.file or file
        parts = [p for p in (where, str(self.line) if self.line else None) if p]
        return ": ".join([":".join(parts), self.message]) if parts else self.message

    def __str__(self) -> str:
        return self.located()


class PolicyError(_Located):
    """A policy or configuration value is invalid.

    Attributes:
        field: the name of the offending field, when one is to blame.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message, file=file, line=line)
        self.field = field


class TraceError(_Located):
    """An event, or a line of a trace, cannot be replayed."""


class ReceiptError(_Located):
    """A file handed to ``diff`` is not a ``toolbreaker.receipt/v1`` document."""


class CircuitOpen(ToolbreakerError):
    """A call was rejected locally: the breaker did not let it reach the dependency.

    Attributes:
        dependency: the breaker's key.
        reason: the core's reason (``cooldown``, ``probe-limit``, ``isolated``) or
            ``store-unavailable``.
        retry_after: whole seconds until a call may be admitted again (at least 1).
        result: the LLM-facing tool-unavailable result, as a JSON-ready dict.
    """

    def __init__(
        self, dependency: str, reason: str, retry_after: int, result: dict[str, Any]
    ) -> None:
        # The message is built lazily: rejections are a hot path while a breaker is open.
        super().__init__(dependency, reason, retry_after)
        self.dependency = dependency
        self.reason = reason
        self.retry_after = retry_after
        self.result = result

    def __str__(self) -> str:
        return (
            f"breaker {self.dependency!r} rejected the call locally ({self.reason}); "
            f"retry after {self.retry_after} s"
        )


class StoreUnavailable(ToolbreakerError):
    """The store could not read or write breaker state; the call is denied, not waved on.

    Attributes:
        dependency: the breaker key whose state was unreachable, when known.
    """

    def __init__(self, message: str, *, dependency: str | None = None) -> None:
        super().__init__(message)
        self.dependency = dependency


class RegistryFull(ToolbreakerError):
    """A registry was asked for more distinct breakers than its cardinality limit."""

    def __init__(self, limit: int, key: str) -> None:
        super().__init__(
            f"registry holds its limit of {limit} breakers; refusing a new one for {key!r} "
            "(is a request id or a user id part of the dependency key?)"
        )
        self.limit = limit
        self.key = key


class PermitError(ToolbreakerError):
    """A permit was settled more than once."""
