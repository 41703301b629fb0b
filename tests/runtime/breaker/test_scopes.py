"""A scoped row's breakers, a part of ``Breaker``: made on first use, bounded, summed.

Built alone with a maker of plain breakers: the part keeps one per scope value, forgets
the oldest closed one to make room, sends calls to one overflow breaker when none can go,
and sums every counter it ever held.
"""

from __future__ import annotations

from toolbreaker import Breaker, Policy
from toolbreaker.runtime._breaker._scopes import Scopes
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.testing import FakeClock


def scopes(max_scopes: int = 2) -> tuple[Scopes, list[str], BreakerStats]:
    made: list[str] = []
    store = MemoryStore()
    clock = FakeClock()
    stats = BreakerStats()

    def make(label: str) -> Breaker:
        made.append(label)
        return Breaker(
            f"llm[{label}]",
            store=store,
            clock=clock,
            timeout=1.0,
            enforce="cooperative",
            policy=Policy(failure_threshold=1),
        )

    return Scopes("llm:default", "tenant", max_scopes, make, stats), made, stats


def test_one_breaker_per_value_made_once():
    """The same value gets the same breaker; a value that is not a plain name is digested."""
    part, made, _ = scopes()
    acme = part.get("acme")
    assert part.get("acme") is acme
    part.get("sk-live 1234")
    assert made[0] == "tenant=acme"
    assert made[1].startswith("tenant=sha256:")
    assert list(part.live()) == ["acme", "sk-live 1234"]


def test_the_oldest_closed_one_is_forgotten_and_its_counters_kept():
    """At the bound the least recently used closed breaker goes; its counts stay summed."""
    part, _, _ = scopes(max_scopes=2)
    acme = part.get("acme")
    acme.call(lambda: "ok")
    part.get("globex")
    part.get("initech")
    assert list(part.live()) == ["globex", "initech"]
    assert part.forgotten.admitted == 1
    total = BreakerStats()
    part.sum_into(total, BreakerStats())
    assert total.admitted == 1


def test_when_every_one_is_open_calls_share_the_overflow_breaker():
    """None may be dropped (all open): the call goes to one overflow breaker, counted."""
    part, made, stats = scopes(max_scopes=1)
    acme = part.get("acme")
    permit = acme.allow()
    assert permit.admitted
    permit.record("failure")  # type: ignore[union-attr]
    overflow = part.get("globex")
    assert part.get("initech") is overflow
    assert part.overflow is overflow
    assert made[-1] == "tenant=*"
    assert stats.scope_overflows == 2
    assert part.members() == (acme, overflow)
