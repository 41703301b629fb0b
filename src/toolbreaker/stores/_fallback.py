"""A local fallback for read-only breakers while the shared store is unavailable.

By default an unavailable store denies every call (``store-unavailable``): a breaker that
cannot read or write its state does not treat its dependency as healthy. For operations
that are safe to run on local judgement (reads, searches), :class:`LocalFallback` lets the
named keys fall back to a private in-memory breaker, which starts from the last state the
shared store reported and still counts failures, opens and probes on its own. Every other
key keeps raising :class:`~toolbreaker.errors.StoreUnavailable`: writes never fall back.
The shared store is tried again every ``retry_interval`` seconds and wins as soon as it
answers.

The journal and records never fall back: they are the primary's, and an unavailable
primary raises. That includes the log a record keeps
(:class:`~toolbreaker.stores._protocol.RecordLog`: a shared run's events): a fallback is
a ``RecordLog`` exactly when its primary is, and its ``record_append`` and
``record_read_log`` are the primary's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import BreakerState, Event, Transition
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.stores._protocol import (
    Journal,
    Lease,
    RecordLog,
    Records,
    Store,
    View,
    aapply,
)

__all__ = ["LocalFallback"]


class _FallbackView(View):
    """The primary's view, or the local breaker's while the key is served locally."""

    __slots__ = ("_local", "_primary", "_serving")

    def __init__(self, key: str, primary: View, local: View, serving: set[str]) -> None:
        self.key = key
        self._primary = primary
        self._local = local
        self._serving = serving

    @property
    def state(self) -> BreakerState | None:
        """The state the fast path may act on."""
        return self._local.state if self.key in self._serving else self._primary.state

    @state.setter
    def state(self, value: BreakerState | None) -> None:
        raise AttributeError("a fallback view is kept by its stores")

    @property
    def lease(self) -> Lease:
        """The lease of the view the state comes from."""
        return self._local.lease if self.key in self._serving else self._primary.lease

    @lease.setter
    def lease(self, value: Lease) -> None:
        raise AttributeError("a fallback view is kept by its stores")

    @property
    def tally(self) -> Any:
        """The primary's tally of quiet calls; none while the key is served locally."""
        return None if self.key in self._serving else getattr(self._primary, "tally", None)

    @tally.setter
    def tally(self, value: Any) -> None:
        raise AttributeError("a fallback view is kept by its stores")


class LocalFallback:
    """Wrap a shared store so that named read-only keys survive its outages locally.

    Args:
        primary: the shared store (SQLite, Redis).
        keys: the breaker keys that may fall back (``{"search:read"}``), or a predicate
            (``lambda key: key.endswith(":read")``).
        retry_interval: seconds between attempts to use the primary again for a key that
            is being served locally.
    """

    def __init__(
        self,
        primary: Store,
        *,
        keys: Collection[str] | Callable[[str], bool],
        retry_interval: float = 0.5,
    ) -> None:
        if isinstance(retry_interval, bool) or not isinstance(retry_interval, (int, float)):
            raise PolicyError("retry_interval must be a number", field="retry_interval")
        if retry_interval < 0:
            raise PolicyError("retry_interval must be >= 0", field="retry_interval")
        self.primary = primary
        self._matches: Callable[[str], bool] = (
            keys if callable(keys) else frozenset(keys).__contains__
        )
        self._retry_interval = float(retry_interval)
        self._local = MemoryStore()
        self._serving: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._views: dict[str, _FallbackView] = {}
        self._lock = threading.Lock()
        if isinstance(primary, RecordLog):
            # The primary's log, passed straight through (records never fall back); a
            # primary without one leaves these absent, so the fallback is no RecordLog.
            self.record_append = primary.record_append
            self.record_read_log = primary.record_read_log

    def view(self, key: str) -> View:
        """The primary's view of ``key``, or the local one while the key falls back."""
        view = self._views.get(key)
        if view is None:
            with self._lock:
                view = self._views.get(key)
                if view is None:
                    view = _FallbackView(
                        key, self.primary.view(key), self._local.view(key), self._serving
                    )
                    self._views[key] = view
        return view

    def apply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """Apply on the primary; a named key falls back locally while it is unavailable.

        Raises:
            StoreUnavailable: the primary is unavailable and ``key`` may not fall back.
        """
        if self._waiting(key):
            return self._local.apply(key, event, policy)
        try:
            result = self.primary.apply(key, event, policy)
        except StoreUnavailable as exc:
            return self._fail_over(key, event, policy, exc)
        self._recovered(key)
        return result

    async def aapply(
        self, key: str, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """The asyncio twin of :meth:`apply`."""
        if self._waiting(key):
            return self._local.apply(key, event, policy)
        try:
            result = await aapply(self.primary, key, event, policy)
        except StoreUnavailable as exc:
            return self._fail_over(key, event, policy, exc)
        self._recovered(key)
        return result

    def _fail_over(
        self, key: str, event: Event, policy: Policy, exc: StoreUnavailable
    ) -> tuple[BreakerState, tuple[Transition, ...]]:
        """The primary failed: a named key goes on locally; any other stays denied."""
        if not self._matches(key):
            raise exc
        self._fall_back(key)
        return self._local.apply(key, event, policy)

    def load(self, key: str, policy: Policy) -> BreakerState:
        """The primary's state of ``key``, or the local one while it falls back.

        Raises:
            StoreUnavailable: the primary is unavailable and ``key`` may not fall back.
        """
        if self._waiting(key):
            return self._local.load(key, policy)
        try:
            return self.primary.load(key, policy)
        except StoreUnavailable:
            if not self._matches(key):
                raise
            self._fall_back(key)
            return self._local.load(key, policy)

    # -- the journal never falls back ---------------------------------------------------

    def journal_put(
        self, task: str, key: str, entry: Mapping[str, Any], *, only_new: bool = False
    ) -> bool:
        """The primary's ``journal_put``."""
        return self._journal().journal_put(task, key, entry, only_new=only_new)

    def journal_get(self, task: str, key: str) -> dict[str, Any] | None:
        """The primary's ``journal_get``."""
        return self._journal().journal_get(task, key)

    def journal_entries(self, task: str) -> list[dict[str, Any]]:
        """The primary's ``journal_entries``."""
        return self._journal().journal_entries(task)

    def journal_durable(self) -> bool:
        """The primary's ``journal_durable()``; false when it cannot say."""
        durable = getattr(self._journal(), "journal_durable", None)
        return bool(durable()) if callable(durable) else False

    # -- records never fall back either ----------------------------------------------------

    def record_get(self, space: str, key: str) -> tuple[dict[str, Any], int] | None:
        """The primary's ``record_get``."""
        return self._records().record_get(space, key)

    def record_put(
        self, space: str, key: str, value: Mapping[str, Any], *, version: int | None = None
    ) -> int | None:
        """The primary's ``record_put``."""
        return self._records().record_put(space, key, value, version=version)

    def record_delete(self, space: str, key: str, *, version: int | None = None) -> bool:
        """The primary's ``record_delete``."""
        return self._records().record_delete(space, key, version=version)

    def record_list(self, space: str) -> list[tuple[str, dict[str, Any], int]]:
        """The primary's ``record_list``."""
        return self._records().record_list(space)

    # -- internals ----------------------------------------------------------------------

    def _journal(self) -> Journal:
        if not isinstance(self.primary, Journal):
            raise TypeError(f"{self.primary!r} keeps no journal")
        return self.primary

    def _records(self) -> Records:
        if not isinstance(self.primary, Records):
            raise TypeError(f"{self.primary!r} keeps no records")
        return self.primary

    def _waiting(self, key: str) -> bool:
        """Whether ``key`` is served locally and the primary is not due for a retry."""
        return key in self._serving and time.monotonic() < self._retry_at.get(key, 0.0)

    def _fall_back(self, key: str) -> None:
        with self._lock:
            self._retry_at[key] = time.monotonic() + self._retry_interval
            if key in self._serving:
                return
            view = self.primary.view(key)
            # Continue from the last state the primary reported (a shared store's view
            # keeps it as ``known`` after it stopped trusting it).
            seed = getattr(view, "known", None) or view.state or BreakerState()
            self._local.force(key, seed)
            self._serving.add(key)

    def _recovered(self, key: str) -> None:
        if key in self._serving:
            with self._lock:
                self._serving.discard(key)
                self._retry_at.pop(key, None)
