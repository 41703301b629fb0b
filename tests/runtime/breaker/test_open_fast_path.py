"""An open breaker rejects from the core's idle window, and only while the window holds.

``call``, ``acall`` and ``allow`` keep the window the core computed
(:func:`toolbreaker.core._breaker.predicates.idle_window`) and reject from it with a few
comparisons; each test here moves one thing the window depends on (the time, the state,
the policy, a listener) and checks that every path answers as the core would.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from toolbreaker import Breaker, Policy
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime import Rejection
from toolbreaker.testing import FakeClock, capture_transitions

COOLDOWN_MS = 1_000


def opened(clock: FakeClock, **options) -> Breaker:
    breaker = Breaker(
        "search",
        clock=clock,
        policy=Policy(failure_threshold=1, cooldown_ms=COOLDOWN_MS),
        timeout=2.0,
        enforce="cooperative",
        **options,
    )
    permit = breaker.allow()
    permit.record("failure")
    return breaker


def rejection(breaker: Breaker) -> CircuitOpen:
    with pytest.raises(CircuitOpen) as raised:
        breaker.call(lambda: "ran")
    return raised.value


def test_the_wait_counts_down_inside_one_window_and_the_probe_goes_through_at_its_end():
    """Rejections from the kept window still say how long is left at each moment, and
    the first call once the cooldown is over is admitted as the probe."""
    clock = FakeClock()
    breaker = opened(clock)
    waits = []
    for _ in range(3):
        waits.append(rejection(breaker).retry_after_ms)
        allowed = breaker.allow()
        assert isinstance(allowed, Rejection)
        assert allowed.retry_after_ms == waits[-1]
        clock.advance(300)
    assert waits == [1_000, 700, 400]
    clock.advance(COOLDOWN_MS)
    assert breaker.call(lambda: "ran") == "ran"
    assert breaker.stats.rejected == 6


def test_async_calls_reject_from_the_same_window():
    """``acall`` keeps and reads the same window as ``call``."""
    clock = FakeClock()
    breaker = opened(clock)

    async def run():
        return "ran"

    async def main() -> list[int | None]:
        waits = []
        for _ in range(2):
            with pytest.raises(CircuitOpen) as raised:
                await breaker.acall(run)
            waits.append(raised.value.retry_after_ms)
            clock.advance(500)
        return waits

    assert asyncio.run(main()) == [1_000, 500]
    assert asyncio.run(breaker.acall(run)) == "ran"


def test_a_listener_added_while_a_window_is_kept_hears_every_rejection():
    """A window kept before a listener came is dropped: each rejection after is a record
    the listener sees, on every path."""
    clock = FakeClock()
    breaker = opened(clock)
    rejection(breaker)  # the window is kept now
    with capture_transitions(breaker) as records:
        rejection(breaker)
        assert isinstance(breaker.allow(), Rejection)
        with pytest.raises(CircuitOpen):
            asyncio.run(breaker.acall(asyncio.sleep, 0))
    assert [r.reason for r in records] == ["cooldown"] * 3


def test_a_new_policy_ends_the_window():
    """A published row that forces the breaker open is heard at the next call, not at the
    end of the cooldown the kept window was computed for."""
    clock = FakeClock()
    breaker = opened(clock)
    assert rejection(breaker).reason == "cooldown"
    forced = dataclasses.replace(breaker.policy, force="open")
    breaker.adopt(dataclasses.replace(breaker.boundary, policy=forced))
    refused = rejection(breaker)
    assert refused.reason == "forced-open"
    assert refused.retry_after_ms is None


def test_an_operator_state_is_a_window_of_its_own_with_its_note():
    """An isolation rejects with the operator's note and no wait, from its own window;
    a release admits the next call at once."""
    clock = FakeClock()
    breaker = opened(clock)
    rejection(breaker)
    breaker.isolate("vendor outage, ticket 42")
    refused = rejection(breaker)
    assert (refused.reason, refused.retry_after_ms) == ("isolated", None)
    assert "ticket 42" in str(refused.result)
    assert rejection(breaker).reason == "isolated"
    breaker.release()
    assert breaker.call(lambda: "ran") == "ran"


def test_hidden_for_ms_and_its_async_twin_read_the_same_idle_window():
    """What the adapters' *hide open tools* mode asks, sync or on the loop: hidden with
    the wait while cooling down, hidden with no wait while isolated, shown once closed."""
    clock = FakeClock()
    breaker = opened(clock)
    clock.advance(250)
    assert breaker.hidden_for_ms() == asyncio.run(breaker.ahidden_for_ms()) == (True, 750)
    breaker.isolate("maintenance")
    assert breaker.hidden_for_ms() == asyncio.run(breaker.ahidden_for_ms()) == (True, None)
    breaker.release()
    assert breaker.hidden_for_ms() == asyncio.run(breaker.ahidden_for_ms()) == (False, None)


def test_the_fast_paths_capture_nothing():
    """``call`` and ``acall`` hold no closure: one would turn every name it captures
    (``self``, ``fn``, ``args``) into a cell for the whole function, the quiet and open
    fast paths included (a fifth more instructions a call, measured with callgrind)."""
    for method in (Breaker.call, Breaker.acall, Breaker.allow, Breaker.admit):
        assert method.__code__.co_cellvars == (), method.__name__
