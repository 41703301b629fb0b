"""Where breaker state lives: in memory, in SQLite, in Redis.

A store applies one event to one breaker's persisted state atomically, by calling the
core's :func:`~toolbreaker.core.apply` inside its own critical section (a lock, a
transaction, a script). A store never decides a transition by itself.
"""

from toolbreaker.stores._protocol import AsyncStore, Journal, Store, View
from toolbreaker.stores.memory import MemoryStore

__all__ = ["AsyncStore", "Journal", "MemoryStore", "Store", "View"]
