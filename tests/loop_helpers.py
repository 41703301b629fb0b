"""Telling whether an async path blocks its event loop on a store, without a clock.

:class:`LoopSpy` watches a real store object: every blocking method (a round trip to
SQLite, Redis or PostgreSQL) called on a thread that is running an event loop is noted.
"Async means async": an async path must await a store's round trip or run it in a worker
thread, so a spied store's :attr:`LoopSpy.on_loop` stays empty. Nothing here is timed,
so a loaded machine cannot make the check pass or fail.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any

#: The store methods that may wait on I/O (the async ones, ``aapply``, are awaited).
BLOCKING = (
    "apply",
    "load",
    "journal_put",
    "journal_get",
    "journal_entries",
    "journal_durable",
    "record_get",
    "record_put",
    "record_append",
    "record_read_log",
    "record_delete",
    "record_list",
)


class LoopSpy:
    """Note every blocking call of ``stores`` made on a thread running an event loop.

    Attributes:
        on_loop: ``(method, store type)`` of each call made on an event loop's thread.
        off_loop: the same for calls made elsewhere (worker threads, sync code).
    """

    def __init__(self, *stores: Any) -> None:
        self.on_loop: list[tuple[str, str]] = []
        self.off_loop: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        for store in stores:
            for name in BLOCKING:
                method = getattr(store, name, None)
                if callable(method):
                    setattr(store, name, self._watched(name, type(store).__name__, method))

    def _watched(self, name: str, kind: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def watched(*args: Any, **kwargs: Any) -> Any:
            # A running loop in this thread: the call blocks that loop while it waits.
            on_loop = asyncio._get_running_loop() is not None
            with self._lock:
                (self.on_loop if on_loop else self.off_loop).append((name, kind))
            return method(*args, **kwargs)

        return watched

    def called(self, name: str) -> int:
        """How many calls of ``name`` were made, on the loop or off it."""
        with self._lock:
            return sum(1 for called, _ in (*self.on_loop, *self.off_loop) if called == name)
