"""Watching the breakers a holder has, now and later: the one way observers find breakers.

A holder (a :class:`~toolbreaker.Registry`, a :class:`~toolbreaker.RunGuard`) makes or
receives breakers over its life: a registry makes each on first use, an adapter's on the
tool's first call. An observer that walked the holder's breakers once, when it attached,
would miss every later one. Instead the holder keeps a :class:`BreakerWatch` and tells it
of each breaker *before* that breaker can be called; ``watch()`` hears the breakers there
are and every later one. The holder calls both under its own lock, so a watcher hears each
breaker exactly once, and none between being told of the current ones and the next.

A watcher only watches: one that raises is counted in the breaker's
``stats.listener_errors`` and logged (masked), and the holder goes on (lesson: a fault
in anything around a call never changes its outcome, nor whether the breaker is made).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._log import hook_failed

__all__ = ["BreakerWatch", "Watcher"]

#: Told of one breaker; what it attaches to the breaker hears it from its first call.
Watcher = Callable[[Breaker], None]


class _Entry:
    # One registration: removed by identity, so watching one function twice needs two
    # removals and a remover called twice removes nothing more.
    __slots__ = ("fn",)

    def __init__(self, fn: Watcher) -> None:
        self.fn = fn


class BreakerWatch:
    """The watchers of one holder's breakers (the holder serialises every call)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[_Entry] = []

    def watch(self, fn: Watcher, current: Iterable[Breaker]) -> Callable[[], None]:
        """Tell ``fn`` of each breaker of ``current`` and, from now on, of every new one.

        Returns a remover (calling it again does nothing).
        """
        entry = _Entry(fn)
        self._entries.append(entry)
        for breaker in current:
            _tell(fn, breaker)

        def remove() -> None:
            self._entries = [e for e in self._entries if e is not entry]

        return remove

    def tell(self, breaker: Breaker) -> None:
        """Tell every watcher of a breaker the holder now has (before its first call)."""
        for entry in tuple(self._entries):
            _tell(entry.fn, breaker)

    def __bool__(self) -> bool:
        return bool(self._entries)


def _tell(fn: Watcher, breaker: Breaker) -> None:
    try:
        fn(breaker)
    except Exception as exc:  # noqa: BLE001 - a watcher never stops a breaker being made
        breaker.stats.listener_errors += 1
        hook_failed(f"breaker watcher {fn!r} failed on {breaker.key}; the breaker stands", exc)
