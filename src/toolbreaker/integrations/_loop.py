"""What the adapters' async hooks ask a breaker without blocking the event loop.

An adapter's async hook (a model call, a tool listing, an ``is_enabled`` check) that
looks at a breaker's state may need a round trip to a shared store: it asks through the
run guard's :class:`~toolbreaker.runtime.run._driver.Blocking` effect, which answers
inline for a store of this process and from a worker thread for any other.
"""

from __future__ import annotations

from toolbreaker.runtime.breaker._breaker import Breaker
from toolbreaker.runtime.run._driver import Blocking

__all__ = ["ahidden_for_ms"]


async def ahidden_for_ms(breaker: Breaker) -> tuple[bool, int | None]:
    """:meth:`Breaker.hidden_for_ms` on the event loop: a shared store is asked off it."""
    hidden: tuple[bool, int | None] = await Blocking(
        breaker.hidden_for_ms, (), (breaker.store,)
    ).arun()
    return hidden
