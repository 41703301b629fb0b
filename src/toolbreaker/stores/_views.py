"""Process-local views of shared breaker state: what the fast path may trust, and when.

A shared store (SQLite, Redis) keeps one :class:`SharedView` per breaker key. Besides
the ``state`` the runtime's fast path reads, a view remembers the last state this process
saw with its version (``known``), which a store uses as its first guess for the next
compare-and-set, so a fresh view costs one round trip per change and none per read.

``state`` is set only while two things hold:

- the store's *feed* (Redis pub/sub, the PostgreSQL listener, the SQLite change poller)
  is known to deliver every later change of the key: the feed confirmed the key in the
  current feed epoch, and the round trip that taught the state started inside that epoch;
- the store is healthy: the last round trip did not fail. A failed round trip empties
  every view, so the next calls ask the store (and are denied while it is down) instead of
  acting on a state the process can no longer keep current.

And a view is a *lease* on the state (:class:`~toolbreaker.stores._protocol.Lease`): no
call is admitted on it from ``view_lease`` seconds after the store last answered the
feed's heartbeat (a ping, a query, a poll), whether or not the feed has noticed anything
since. The feed renews the lease with the instant it *sent* what the store answered, so
the store was alive after it: a store that dies, freezes or is cut off goes unnoticed by
the calls for at most ``view_lease`` seconds, however long the feed takes to notice (a
connection that stays open, a feed thread that does not run); from then on every call
asks the store, and is denied while it is gone. The caller compares the lease with its
own clock reading, so nothing has to run for the bound to hold.

Versions only grow, so news older than what a view holds is dropped, whichever thread
brings it.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Final

from toolbreaker.core._breaker.machine import apply
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.predicates import fast_path_safe
from toolbreaker.core._breaker.state import CORRUPT, OUTCOME_TYPES, BreakerState, Event, Transition
from toolbreaker.core._canonical import canonical_json
from toolbreaker.errors import StoreUnavailable
from toolbreaker.stores._protocol import Lease, View
from toolbreaker.stores._tally import UNKNOWN, Tally

__all__ = [
    "DEFAULT_VIEW_LEASE",
    "SharedView",
    "ViewBook",
    "decode_state",
    "encode_state",
    "on_fork",
    "quiet",
]


#: Seconds a view is trusted after the store last answered its feed's heartbeat.
DEFAULT_VIEW_LEASE: Final = 1.0


class SharedView(View):
    """A view with the bookkeeping of a shared store, on its feed's lease (see the module).

    Attributes:
        known: the newest state this process has seen, trusted or not.
        version: the store's version of ``known``; -1 when nothing is known.
        fed: the feed epoch in which the feed confirmed this key; -1 when not fed.
        wanted: someone asked for the view, so the feed should deliver this key.
        policy: the policy the key was last applied with (to validate fed states).
        lock: taken around a round trip for this key, so that the threads of one
            process take turns instead of racing each other (processes race through the
            store's own atomicity). Never held while a protected call runs.
    """

    __slots__ = ("fed", "known", "lock", "pair", "policy", "version", "wanted")

    def __init__(self, key: str, lease: Lease) -> None:
        super().__init__(key, None, lease)
        self.known: BreakerState | None = None
        self.version = -1
        #: ``state`` with its version, set in one assignment: what a quiet call met.
        self.pair: tuple[BreakerState, int] | None = None
        self.fed = -1
        self.wanted = False
        self.policy: Policy | None = None
        self.lock = threading.Lock()
        self.tally: Tally = Tally(self.version_of)

    def version_of(self, state: BreakerState) -> int:
        """The store's version of ``state``, a state this view handed out; -1 if not known."""
        pair = self.pair
        if pair is not None and pair[0] is state:
            return pair[1]
        return UNKNOWN

    def trust(self, state: BreakerState | None) -> None:
        """Hand ``state`` (of ``version``, already set) to the fast path, or nothing."""
        if state is not None:
            self.pair = (state, self.version)
        self.state = state


class ViewBook:
    """The views of one store, its feed epoch and its health, under one short lock."""

    def __init__(self, backoff: float, view_lease: float = DEFAULT_VIEW_LEASE) -> None:
        self._lock = threading.Lock()
        self._views: dict[str, SharedView] = {}
        self._backoff = backoff
        #: The lease of the store's feed: every view's, unless the feed gives a view its
        #: own (a cluster's master); renewed by the feed, ended when it is lost.
        self.lease = Lease(view_lease)
        self._down_until = 0.0
        self.epoch = 0
        self.suspect = False

    def entry(self, key: str) -> SharedView:
        """The view of ``key``, created on first use."""
        view = self._views.get(key)
        if view is None:
            with self._lock:
                view = self._views.setdefault(key, SharedView(key, self.lease))
        return view

    def find(self, key: str) -> SharedView | None:
        """The view of ``key`` if there is one (a feed never creates views)."""
        return self._views.get(key)

    def views(self) -> list[SharedView]:
        """A snapshot of every view."""
        with self._lock:
            return list(self._views.values())

    def token(self, view: SharedView) -> int | None:
        """The feed epoch to hand back to :meth:`learn`, if the feed covers ``view`` now."""
        epoch = self.epoch
        return epoch if view.fed == epoch else None

    def answer(
        self, view: SharedView, event: Event, policy: Policy
    ) -> tuple[BreakerState, tuple[Transition, ...]] | None:
        """The core's answer from a trusted view, when it changes nothing; else ``None``.

        An event the core says leaves the state as it is needs no round trip while the
        view is trusted: the store would compute the same thing and write nothing. The
        view's tally counts it (a quiet call of the history).
        """
        pair = view.pair
        state = view.state
        if state is None or view.fed != self.epoch or not view.lease.holds():
            return None
        new, records = apply(state, event, policy)
        if new != state:
            return None
        version = pair[1] if pair is not None and pair[0] is state else UNKNOWN
        quiet(view.tally, event, records, version, written=False)
        return new, records

    def learn(self, view: SharedView, state: BreakerState, version: int, token: int | None) -> None:
        """Record what a successful round trip returned (``token`` from before it)."""
        with self._lock:
            self.suspect = False
            self._down_until = 0.0
            if version < view.version:
                if version == 0:
                    # The key is gone (expired, deleted, a restarted server): believe it,
                    # but trust it only once a round trip has confirmed it.
                    view.known, view.version, view.state = state, 0, None
                return  # otherwise the feed already brought something newer
            view.known, view.version = state, version
            trusted = token is not None and token == self.epoch and view.fed == token
            view.trust(state if trusted and fast_path_safe(state) else None)

    def feed(self, view: SharedView, state: BreakerState, version: int) -> None:
        """Record a change the feed delivered."""
        with self._lock:
            if version <= view.version:
                return
            view.known, view.version = state, version
            trusted = view.fed == self.epoch and not self.suspect
            view.trust(state if trusted and fast_path_safe(state) else None)

    def confirm(self, view: SharedView) -> None:
        """The feed now delivers every later change of ``view``'s key."""
        with self._lock:
            view.fed = self.epoch

    def lose_feed(self) -> None:
        """The feed may have missed changes: trust no view until it confirms them again."""
        with self._lock:
            self.epoch += 1
            self.lease.end()
            for view in self._views.values():
                view.state = None

    def lose(self, views: list[SharedView]) -> None:
        """The feed may have missed changes of ``views``: untrust those until reconfirmed.

        A cluster feed that lost one master's connection loses the views of its slots only.
        """
        with self._lock:
            for view in views:
                view.fed = -1
                view.state = None

    def fail(self) -> None:
        """A round trip failed: empty every view and fail fast for a short while."""
        with self._lock:
            self.suspect = True
            self._down_until = time.monotonic() + self._backoff
            for view in self._views.values():
                view.state = None

    def sync(self, view: SharedView, state: BreakerState, version: int) -> None:
        """Confirm ``view`` with a state the feed just read, for a feed that reads.

        The feed read ``state`` after it started watching for changes, so anything newer
        will reach it; what the view already knows is at least as new, or is replaced.
        """
        with self._lock:
            view.fed = self.epoch
            if version < view.version and version == 0:
                # The key was absent when the feed read it: deleted since what this view
                # knows, or read before a write this process has already seen. Believe
                # it, but trust it only once a round trip has said which (a read from
                # before an isolate made the fast path admit calls of an isolated breaker).
                view.known, view.version, view.state = state, 0, None
                return
            if version >= view.version:
                view.known, view.version = state, version
            known = view.known
            trusted = known is not None and not self.suspect and fast_path_safe(known)
            view.trust(known if trusted else None)

    def forked(self) -> None:
        """In a child process right after fork: nothing inherited can be trusted.

        The feed did not survive the fork (threads do not), and a lock may have been held
        by a thread that no longer exists: every lock is replaced, every view emptied.
        """
        self._lock = threading.Lock()
        self.epoch += 1
        self.lease.end()
        for view in self._views.values():
            view.lock = threading.Lock()
            view.lease = self.lease
            view.state = None
            view.pair = None
            view.fed = -1
            view.tally = Tally(view.version_of)  # the parent's counts are the parent's

    def check(self, what: str, key: str | None = None) -> None:
        """Raise at once while the store is known to be down (the backoff after a failure).

        Raises:
            StoreUnavailable: a round trip failed less than ``backoff`` seconds ago.
        """
        if self._down_until and time.monotonic() < self._down_until:
            raise StoreUnavailable(
                f"{what} is unavailable (backing off after a failure)", dependency=key
            )


def quiet(
    tally: Tally, event: Event, records: tuple[Transition, ...], version: int, *, written: bool
) -> None:
    """Tell ``tally`` what applying ``event`` to ``version`` did (``written``: a new state)."""
    if event.type == "request":
        if not written:
            tally.request(event.call, version, event.at, admitted=records[-1].attempted)
    elif event.type in OUTCOME_TYPES:
        tally.outcome(event.call, version, event.at, event.type, event.generation, written=written)


def on_fork(owner: object, method: str) -> None:
    """Call ``owner.<method>()`` in every child forked from now on, while owner lives."""
    ref = weakref.ref(owner)

    def after_in_child() -> None:
        alive = ref()
        if alive is not None:
            getattr(alive, method)()

    os.register_at_fork(after_in_child=after_in_child)


def decode_state(raw: str | bytes | None, policy: Policy) -> BreakerState:
    """Load a stored state's JSON text, failing closed; ``None`` (never stored) is closed."""
    if raw is None:
        return BreakerState()
    if not isinstance(raw, (str, bytes)):
        return CORRUPT
    # Strict JSON only: a duplicate "state" key could say closed and open at once.
    return BreakerState.from_json(raw, policy)


def encode_state(state: BreakerState) -> str:
    """A state's canonical JSON text."""
    return canonical_json(state.to_dict()).decode("utf-8")
