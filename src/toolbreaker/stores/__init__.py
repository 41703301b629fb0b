"""Where breaker state lives: in memory, in SQLite, in Redis, in PostgreSQL.

A store applies one event to one breaker's persisted state atomically, by calling the
core's :func:`~toolbreaker.core.apply` inside its own critical section (a lock, a
transaction, a compare-and-set script). A store never decides a transition by itself.

- :class:`MemoryStore`: one process; the reference every store is tested against.
- :class:`SQLiteStore`: the processes of one host, in one file (standard library only).
- :class:`RedisStore`: processes on many hosts (the ``redis`` extra).
- :class:`PostgresStore`: processes on many hosts, in PostgreSQL (the ``postgres`` extra).
- :class:`LocalFallback`: lets named read-only breakers fall back to local judgement
  while a shared store is unavailable; everything else is denied (fail closed).
"""

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.stores._fallback import LocalFallback
    from toolbreaker.stores._memory import MemoryStore
    from toolbreaker.stores._postgres import PostgresStore
    from toolbreaker.stores._protocol import AsyncStore, Store
    from toolbreaker.stores._redis._store import RedisStore
    from toolbreaker.stores._sqlite import SQLiteStore

#: Where each re-exported name lives, imported when first used (PEP 562); the imports
#: above are the same list, for type checkers and editors.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.stores._fallback": ("LocalFallback",),
    "toolbreaker.stores._memory": ("MemoryStore",),
    "toolbreaker.stores._postgres": ("PostgresStore",),
    "toolbreaker.stores._protocol": ("AsyncStore", "Store"),
    "toolbreaker.stores._redis._store": ("RedisStore",),
    "toolbreaker.stores._sqlite": ("SQLiteStore",),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__all__ = [
    "AsyncStore",
    "LocalFallback",
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
]
