"""The store protocol: small on purpose, like an HTTP transport."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from toolbreaker.core.policy import Policy
from toolbreaker.core.state import BreakerState, Event, Transition

__all__ = ["AsyncStore", "Store", "View"]


class View:
    """A process-local view of one breaker's state, kept current by its store.

    Shells read ``view.state`` without a lock or a round trip to decide whether the core
    has already declared the next request and success no-ops (see
    :func:`toolbreaker.core.is_quiet`) or the next request a local rejection. ``None``
    means the view knows nothing: ask the store.
    """

    __slots__ = ("key", "state")

    def __init__(self, key: str, state: BreakerState | None = None) -> None:
        self.key = key
        self.state = state


@runtime_checkable
class Store(Protocol):
    """Applies events to persisted breaker states atomically."""

    def view(self, key: str) -> View:
        """The process-local view of ``key``; the same object for the same key."""
        ...

    def apply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Apply ``event`` to the state of ``key`` atomically and return the result.

        Raises:
            StoreUnavailable: the state could not be read or written; nothing was applied.
        """
        ...

    def load(self, key: str, policy: Policy) -> BreakerState:
        """The current state of ``key`` (closed if never seen; fail-closed if corrupt)."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The asyncio twin of :class:`Store`."""

    def view(self, key: str) -> View:
        """The process-local view of ``key``."""
        ...

    async def aapply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Apply ``event`` atomically without blocking the event loop."""
        ...
