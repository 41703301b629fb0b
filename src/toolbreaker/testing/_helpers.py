"""FakeClock, capture_transitions() and force_state(): see :mod:`toolbreaker.testing`."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from toolbreaker.core._breaker.state import Transition, forced
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._fleet._attach import Attachment, Target

__all__ = ["FakeClock", "capture_transitions", "force_state"]


class FakeClock:
    """A clock for tests: integer milliseconds that only move when told.

    Pass it as ``clock=`` to a :class:`~toolbreaker.Breaker` or
    :class:`~toolbreaker.Registry`.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        """The current time in milliseconds."""
        return self._now

    def advance(self, ms: int = 0, *, seconds: float = 0) -> int:
        """Move forward by ``ms`` plus ``seconds``; returns the new time."""
        step = ms + round(seconds * 1000)
        if step < 0:
            raise ValueError("a monotonic clock never goes back")
        with self._lock:
            self._now += step
            return self._now

    def set(self, ms: int) -> None:
        """Jump to ``ms``, which must not be in the past."""
        with self._lock:
            if ms < self._now:
                raise ValueError("a monotonic clock never goes back")
            self._now = ms


@contextlib.contextmanager
def capture_transitions(*targets: Target) -> Iterator[list[Transition]]:
    """Collect every transition of some breakers while the block runs.

    Targets are breakers, registries (every breaker they hold and every one they make
    during the block) and run guards (their tools' breakers); each record once.

    Example::

        with capture_transitions(breaker) as records:
            ...
        assert [r.reason for r in records] == [...]
    """
    records: list[Transition] = []

    def heard(record: Transition, _breaker: Breaker) -> None:
        records.append(record)

    detach = Attachment(transition=heard).attach(*targets)
    try:
        yield records
    finally:
        detach()


def force_state(breaker: Breaker, phase: str, *, open_for_ms: int | None = None) -> None:
    """Put ``breaker`` in ``phase`` (``closed``, ``open``, ``half_open``) for a test.

    ``open`` lasts ``open_for_ms`` (default: the policy's cooldown) from now; ``half_open``
    starts with no probe in flight. The store must support ``force`` (the memory store
    does).
    """
    wait = breaker.policy.cooldown_ms if open_for_ms is None else open_for_ms
    state = forced(phase, breaker.state.generation + 1, open_until=breaker.clock() + wait)
    force = getattr(breaker.store, "force", None)
    if force is None:
        raise TypeError(f"{type(breaker.store).__name__} cannot force a state")
    force(breaker.key, state)
