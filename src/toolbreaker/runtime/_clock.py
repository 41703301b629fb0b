"""The one module that reads the clock."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "monotonic_ms", "wall_ms", "wall_seconds"]

#: A clock returns integer milliseconds on a monotonic scale.
Clock = Callable[[], int]


def monotonic_ms() -> int:
    """Milliseconds on the process's monotonic clock."""
    return time.monotonic_ns() // 1_000_000


def wall_seconds() -> float:
    """Seconds since the epoch: only for HTTP dates such as ``Retry-After``."""
    return time.time()


def wall_ms() -> int:
    """Milliseconds since the epoch: the time a kept answer or a queued item is stamped with."""
    return time.time_ns() // 1_000_000
