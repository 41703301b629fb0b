"""A decorator's options are checked when it is built, never at each call.

``@breaker.guard(timeout=-1)`` or ``timeout="4s"`` used to be accepted, and then every
call handed the model a ``PolicyError`` as a tool error. Now the decorator refuses them
at once, with the typed configuration error naming the option; so do ``RunGuard.tool``'s
options, and a guard whose calls could never have a deadline.
"""

from __future__ import annotations

import asyncio

import pytest

from toolbreaker import Breaker, RunGuard
from toolbreaker.errors import PolicyError


def lookup(q: str) -> dict[str, str]:
    return {"q": q}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"timeout": -1}, "timeout"),
        ({"timeout": "4s"}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"timeout": None}, "timeout"),
        ({"tool": ""}, "tool"),
        ({"tool": 3}, "tool"),
    ],
)
def test_bad_guard_options_fail_when_the_decorator_is_built(options, field):
    breaker = Breaker("search", timeout=2.0, enforce="cooperative")
    with pytest.raises(PolicyError) as info:
        breaker.guard(**options)(lookup)
    assert info.value.field == field


def test_a_guard_without_any_deadline_fails_when_built():
    """A breaker with no timeout, guarded without one: every call would be refused (no
    deadline) and the model would read it as a tool error; refused at decoration."""
    breaker = Breaker("search", enforce="cooperative")
    with pytest.raises(PolicyError, match="deadline") as info:
        breaker.guard(lookup)
    assert info.value.field == "timeout"
    assert breaker.guard(timeout=1.0)(lookup)("x") == {"q": "x"}


def test_good_options_still_work_both_ways():
    breaker = Breaker("search", timeout=2.0, enforce="cooperative")
    assert breaker.guard(lookup)("x") == {"q": "x"}
    assert breaker.guard(timeout=0.5, tool="find")(lookup)("y") == {"q": "y"}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"risk": "wirte"}, "lookup.risk"),
        ({"required": "yes"}, "lookup.required"),
        ({"business_key": "q"}, "lookup.business_key"),
        ({"verify": "yes"}, "lookup.verify"),
        ({"cost": "a lot"}, "lookup.cost"),
        ({"cost": 0.5}, "lookup.cost"),
        ({"breaker": "search"}, "lookup.breaker"),
    ],
)
def test_run_guard_tool_options_fail_when_the_decorator_is_built(options, field):
    guard = RunGuard("t")
    with pytest.raises(PolicyError) as info:
        guard.tool("lookup", **options)(lookup)
    assert info.value.field == field


@pytest.mark.parametrize("timeout", [-1, "4s", float("inf")])
def test_call_acall_and_begin_refuse_a_bad_timeout_before_anything_runs(timeout):
    """The per-call timeout of call(), acall(), begin() and abegin() is checked before the
    call: typed, and the function never runs."""
    breaker = Breaker("search", timeout=2.0, enforce="cooperative")
    ran: list[str] = []
    with pytest.raises(PolicyError):
        breaker.call(lambda: ran.append("x"), timeout=timeout)
    with pytest.raises(PolicyError):
        breaker.begin("search", timeout=timeout)

    async def lookup_async() -> None:
        ran.append("async")

    async def on_the_loop() -> None:
        with pytest.raises(PolicyError):
            await breaker.acall(lookup_async, timeout=timeout)
        with pytest.raises(PolicyError):
            await breaker.abegin("search", timeout=timeout)

    asyncio.run(on_the_loop())
    assert ran == []
    assert breaker.stats.demand == 0
