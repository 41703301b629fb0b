"""A memory store seen as shared, for the runtime tests of records (bulkheads, budgets)."""

from __future__ import annotations

from typing import Any

from toolbreaker.errors import StoreUnavailable
from toolbreaker.stores import MemoryStore


class SharedMemory:
    """A memory store seen as shared: how the lease path runs without a server.

    It delegates everything to a :class:`MemoryStore` but is not one, so the bulkhead
    takes its slots as leases (the SQLite and Redis tests run the same path for real).
    """

    def __init__(self, inner: MemoryStore | None = None, *, down: bool = False) -> None:
        self.inner = inner or MemoryStore()
        self.down = down

    def view(self, key: str) -> Any:
        return self.inner.view(key)

    def apply(self, *args: Any) -> Any:
        return self.inner.apply(*args)

    def load(self, *args: Any) -> Any:
        return self.inner.load(*args)

    def _records(self) -> MemoryStore:
        if self.down:
            raise StoreUnavailable("records unreachable")
        return self.inner

    def record_get(self, *args: Any, **kwargs: Any) -> Any:
        return self._records().record_get(*args, **kwargs)

    def record_put(self, *args: Any, **kwargs: Any) -> Any:
        return self._records().record_put(*args, **kwargs)

    def record_delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._records().record_delete(*args, **kwargs)

    def record_list(self, *args: Any, **kwargs: Any) -> Any:
        return self._records().record_list(*args, **kwargs)
