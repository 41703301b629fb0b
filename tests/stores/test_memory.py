"""The in-memory reference store passes the conformance suite; the local fallback wrapper."""

from __future__ import annotations

import pytest
from conformance import POLICY, RecordsContract, StoreContract, load_raw_json

from toolbreaker import Breaker, Policy
from toolbreaker.core import BreakerState, Event
from toolbreaker.errors import StoreUnavailable
from toolbreaker.stores import LocalFallback, MemoryStore
from toolbreaker.stores._protocol import View


class TestMemoryStore(StoreContract, RecordsContract):
    shared = False

    @pytest.fixture
    def store(self):
        return MemoryStore()

    @pytest.fixture
    def twin(self, store):
        return store

    def write_raw(self, store, key, raw, policy):
        store.force(key, load_raw_json(raw, policy))


class KnownView(View):
    """A view like a shared store's: empty for the fast path, remembering the last state."""

    __slots__ = ("known",)

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.known: BreakerState | None = None


class Flaky:
    """A store that can be switched off, like a server going away."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.views: dict[str, KnownView] = {}
        self.down = False

    def view(self, key):
        return self.views.setdefault(key, KnownView(key))

    def apply(self, key, event, policy):
        if self.down:
            raise StoreUnavailable("down", dependency=key)
        state, records = self.inner.apply(key, event, policy)
        self.view(key).known = state
        return state, records

    def load(self, key, policy):
        if self.down:
            raise StoreUnavailable("down", dependency=key)
        return self.inner.load(key, policy)


def test_fallback_serves_only_the_named_keys_while_the_primary_is_down():
    """Read-only keys fall back to a local breaker; every other key stays denied."""
    primary = Flaky()
    store = LocalFallback(primary, keys={"search:read"})
    primary.down = True
    _, records = store.apply("search:read", Event("request", 0, "search:read", call="a"), POLICY)
    assert records[-1].reason == "call-admitted"
    with pytest.raises(StoreUnavailable):
        store.apply("billing:write", Event("request", 0, "billing:write", call="b"), POLICY)
    assert store.load("search:read", POLICY) == BreakerState()
    with pytest.raises(StoreUnavailable):
        store.load("billing:write", POLICY)


def test_fallback_breaker_still_opens_locally():
    """The local fallback is a real breaker: failures during the outage open it."""
    primary = Flaky()
    primary.down = True
    store = LocalFallback(primary, keys=lambda key: key.endswith(":read"))
    breaker = Breaker(
        "search", operation="read", policy=Policy(failure_threshold=2), store=store, timeout=1
    )
    for _ in range(2):
        permit = breaker.allow()
        assert permit.admitted
        permit.record("failure")
    rejection = breaker.allow()
    assert not rejection.admitted
    assert rejection.reason == "cooldown"


def test_writes_never_fall_back():
    """A key that is not named is denied as store-unavailable by the breaker."""
    primary = Flaky()
    primary.down = True
    store = LocalFallback(primary, keys={"search:read"})
    breaker = Breaker("billing", operation="write", store=store, timeout=1)
    rejection = breaker.allow()
    assert not rejection.admitted
    assert rejection.reason == "store-unavailable"


def test_fallback_starts_from_the_last_known_state_and_returns_to_the_primary():
    """The fallback continues from what the primary last said; a recovered primary wins."""
    primary = Flaky()
    store = LocalFallback(primary, keys={"search:read"}, retry_interval=0)
    key = "search:read"
    policy = Policy(failure_threshold=1, cooldown_ms=1000)
    store.apply(key, Event("request", 0, key, call="a"), policy)
    store.apply(key, Event("failure", 1, key, call="a", generation=0), policy)
    primary.down = True
    _, records = store.apply(key, Event("request", 2, key, call="b"), policy)
    assert records[-1].reason == "cooldown"
    primary.down = False
    state, records = store.apply(key, Event("request", 5000, key, call="c"), policy)
    assert records[-1].reason == "probe-admitted"
    assert primary.load(key, policy) == state


def test_the_fast_path_rule_is_the_cores():
    """Stores ask the core which states a view may hold: a recovered corrupt state not."""
    from toolbreaker.core._breaker.predicates import fast_path_safe
    from toolbreaker.core._breaker.state import CORRUPT

    assert not fast_path_safe(CORRUPT)
    assert fast_path_safe(BreakerState())
    assert fast_path_safe(BreakerState(phase="open", open_until=5))
    assert fast_path_safe(BreakerState(phase="open", isolated=True))
