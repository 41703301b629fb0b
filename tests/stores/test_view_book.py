"""The view book's rules for what a process may trust without asking its store.

A feed that reads a key confirms the view with what it read (``sync``); a read made before
a write this process already saw can reach the book after that write. The view must not
then trust the older state: a call on an isolated breaker was admitted on the fast path.
"""

from __future__ import annotations

from toolbreaker import Policy
from toolbreaker.core import BreakerState, Event, apply
from toolbreaker.stores._views import ViewBook

FRESH = BreakerState()  # what a key that is absent decodes to: closed, nothing counted


def _isolated(key: str) -> BreakerState:
    state, _ = apply(FRESH, Event("isolate", 1, key, call="operator:x", reason="x"), Policy())
    return state


def test_a_feeds_read_of_an_absent_key_never_overrides_a_newer_write_as_trusted():
    """The feed read the key before it existed (version 0); this process then isolated the
    breaker (version 1) and learned it; the feed's read arrives last. The view may believe
    the key is gone, but it trusts nothing until a round trip says which is true."""
    book = ViewBook(backoff=0.1)
    view = book.entry("k")
    token = book.token(view)
    isolated = _isolated("k")
    book.learn(view, isolated, 1, token)
    book.sync(view, FRESH, 0)
    assert view.state is None or view.state.phase == isolated.phase


def test_a_feeds_read_that_is_as_new_is_trusted():
    """What the feed read is at least as new as the view's: the fast path may take it."""
    book = ViewBook(backoff=0.1)
    view = book.entry("k")
    book.sync(view, FRESH, 3)
    assert view.state is FRESH
    assert view.version == 3
