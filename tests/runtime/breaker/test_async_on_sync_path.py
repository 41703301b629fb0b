"""A coroutine on a sync path is a mistake said at once, never an unprotected async tool.

``breaker.call(async_fn)`` used to return the unawaited coroutine and count a success: the
tool never ran, the caller got a coroutine, and a half-open breaker closed on no evidence.
Now every sync path (``call``, the ``guard`` decorator's sync wrapper, ``step.succeeded``
of ``begin``, ``RunGuard.call``) refuses a coroutine function, or a call that returned an
awaitable, with :class:`~toolbreaker.errors.AsyncCallError` (a ``TypeError``) naming the async
twin; the coroutine is closed (no "never awaited" warning) and nothing counts as a success.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from toolbreaker import Breaker, Policy, RunGuard
from toolbreaker.errors import AsyncCallError
from toolbreaker.testing import FakeClock, capture_transitions, force_state


async def fetch(q: str = "x") -> dict[str, str]:
    """An async tool."""
    await asyncio.sleep(0)
    return {"q": q}


def later(q: str) -> Any:
    """A sync function that returns a coroutine (what a wrapper of an async tool may do)."""
    return fetch(q)


class Pending:
    """An awaitable that is no coroutine (a future-like object)."""

    def __await__(self) -> Generator[Any, None, str]:
        yield
        return "later"


MADE: list[Breaker] = []


def breaker(enforce: str) -> Breaker:
    made = Breaker(
        "async-tools",
        policy=Policy(failure_threshold=1, success_threshold=1),
        clock=FakeClock(),
        timeout=2.0,
        enforce=enforce,  # type: ignore[arg-type]
    )
    MADE.append(made)
    return made


@pytest.fixture(autouse=True)
def _no_unawaited_coroutine_is_left_behind() -> Generator[None, None, None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        while MADE:
            MADE.pop().close()  # their idle worker threads go
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


CALLS = {
    "coroutine function": lambda b: b.call(fetch, "usb"),
    "function returning a coroutine": lambda b: b.call(lambda: later("usb")),
    "awaitable object": lambda b: b.call(Pending),
}


@pytest.mark.parametrize("enforce", ["thread", "cooperative"])
@pytest.mark.parametrize("how", list(CALLS))
def test_call_with_a_coroutine_is_a_type_error_naming_acall(enforce, how):
    """On the quiet fast path: a TypeError naming acall, and no success counted."""
    guarded = breaker(enforce)
    with pytest.raises(AsyncCallError, match=r"acall") as info:
        CALLS[how](guarded)
    assert isinstance(info.value, TypeError)
    assert guarded.state.phase == "closed"
    assert "ok" not in guarded.stats.failures
    assert guarded.stats.unclassified == {}


@pytest.mark.parametrize("enforce", ["thread", "cooperative"])
def test_a_half_open_probe_never_closes_on_a_coroutine(enforce):
    """The probe of a half-open breaker is settled, but not as a success: the breaker stays
    half-open (a real call may probe next), and the record says it was not counted."""
    guarded = breaker(enforce)
    force_state(guarded, "half_open")
    with capture_transitions(guarded) as records, pytest.raises(AsyncCallError):
        guarded.call(fetch)
    assert guarded.state.phase == "half_open"
    assert [r.event.type for r in records] == ["request", "ignored"]
    assert guarded.call(lambda: "ok") == "ok"  # the probe slot was given back
    assert guarded.state.phase == "closed"


def test_the_sync_guard_of_a_function_returning_a_coroutine_raises_it():
    """A sync function (a lambda) that returns a coroutine, decorated by guard(): the error
    is raised to the program, never handed to the model as a tool result."""
    guarded = breaker("cooperative")
    tool = guarded.guard(later)
    with pytest.raises(AsyncCallError, match="async"):
        tool("usb")


def test_the_guard_of_an_async_function_is_async_and_works():
    """The async guard: a coroutine function gets an async wrapper, awaited through acall."""
    guarded = breaker("cooperative")
    tool = guarded.guard(fetch)
    assert asyncio.run(tool("usb")) == {"q": "usb"}


def test_step_succeeded_with_a_coroutine_names_asucceeded():
    """begin() then succeeded(coroutine): refused naming the async path, the coroutine
    closed, the permit settled as not counted (a half-open breaker stays half-open)."""
    guarded = breaker("cooperative")
    force_state(guarded, "half_open")
    step = guarded.begin("search", {"q": "x"})
    with pytest.raises(AsyncCallError, match="asucceeded"):
        step.succeeded(fetch("x"))
    assert guarded.state.phase == "half_open"
    assert step.settled


def test_run_guard_call_of_a_coroutine_tool_names_acall():
    """RunGuard.call of a tool whose function is a coroutine function: refused before
    anything is counted, naming guard.acall; the tool decorator of an async function is
    itself async."""
    guard = RunGuard("task-1")
    tool = guard.tool("lookup", breaker=breaker("cooperative"))(fetch)
    with pytest.raises(AsyncCallError, match=r"acall"):
        guard.call("lookup", {"q": "x"})
    assert guard.state.counters()["calls"] == 0
    assert asyncio.run(tool(q="usb")) == {"q": "usb"}
    assert guard.state.counters()["calls"] == 1


def test_run_guard_call_of_a_sync_tool_returning_a_coroutine_raises():
    """A sync tool function that returns a coroutine: refused, never a result for the model,
    and its call never counts as a success (a write would be journaled as not sent)."""
    guard = RunGuard("task-2")
    guard.tool("lookup", breaker=breaker("cooperative"))(later)
    with pytest.raises(AsyncCallError):
        guard.call("lookup", {"q": "x"})
