"""Async means async: sibling groups and model turns look at the store off the loop.

A call that needs a required dependency is watched while it runs: the group looks at the
required breaker's state before the call starts, polls it while it runs (another process
may open it) and hears this process's openings. On a shared store such a look may be a
round trip; on an event loop it runs in a worker thread. Real SQLite stores are watched by
:class:`~loop_helpers.LoopSpy`, which notes each blocking store call made on a thread
running an event loop; nothing is timed.

A SQLite store polling for other processes' changes only once an hour never confirms a
key, so its views are never trusted and every read of a breaker's state is a round trip:
what any shared store does until its feed confirms a key, and after a fault.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loop_helpers import LoopSpy
from toolbreaker import Breaker, GuardedTool, Policy, RunGuard, Siblings
from toolbreaker.runtime._run._siblings import CancelledByPolicy
from toolbreaker.stores import MemoryStore, SQLiteStore

PATIENCE = 20.0


async def await_for(condition: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < give_up, what
        await asyncio.sleep(0.005)


@pytest.fixture
def unconfirmed(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A shared store whose views are never trusted (see the module docstring)."""
    with SQLiteStore(tmp_path / "fleet.db", poll_interval=3600) as store:
        yield store


async def reset(**_: Any) -> Any:
    raise ConnectionResetError("the provider reset the connection")


def required_guard(store: Any) -> tuple[RunGuard, Breaker]:
    breaker = Breaker("inventory", store=store, timeout=5, policy=Policy(failure_threshold=1))
    guard = RunGuard("turn", journal=MemoryStore())
    guard.add_tool(GuardedTool("stock", reset, breaker=breaker, required=True))
    guard.add_tool(GuardedTool("reserve", reset, risk="reversible_write", breaker=breaker))
    return guard, breaker


def test_a_turns_call_looks_at_its_required_breaker_off_the_loop(unconfirmed):
    """``arun_step`` of a call that needs a required dependency: the look before it starts
    and the poll while it runs (another process may open the breaker) each read the
    breaker's state from the store: in a worker thread, never on the loop."""
    guard, _ = required_guard(unconfirmed)
    spy = LoopSpy(unconfirmed)

    async def main() -> Any:
        guard.mark_turn(1)
        step = await guard.abegin("stock", {})
        before = spy.called("load")

        async def tool() -> str:
            # Runs until the group looked at the store before it and polled it since.
            await await_for(lambda: spy.called("load") >= before + 2, "the group polled")
            return "in stock"

        ran = await guard.arun_step(step, tool)
        assert await step.asucceeded(ran) == "in stock"
        return ran

    assert asyncio.run(main()) == "in stock"
    assert spy.on_loop == []


def test_a_turn_hears_an_opening_on_the_loop_and_looks_off_it(unconfirmed):
    """The failure that opens the required breaker is settled on the loop (``afailed``):
    the turn's listener hears it there, and the look at the breaker's state that decides
    whether to cancel the write in flight is made off the loop; the write is cancelled."""
    guard, _ = required_guard(unconfirmed)
    spy = LoopSpy(unconfirmed)

    async def main() -> Any:
        guard.mark_turn(1)
        stock = await guard.abegin("stock", {})
        write = await guard.abegin("reserve", {"sku": "A-1"})
        started = asyncio.Event()

        async def hang() -> None:
            started.set()
            await asyncio.Event().wait()

        writing = asyncio.create_task(guard.arun_step(write, hang))
        await started.wait()
        with pytest.raises(ConnectionResetError) as failed:
            await reset()
        assert (await stock.afailed(failed.value))["tool_unavailable"] is True
        return await writing

    answer = asyncio.run(main())
    assert isinstance(answer, CancelledByPolicy)
    assert answer.answer["outcome_unknown"] is True
    assert spy.on_loop == []


def test_a_sibling_group_looks_at_its_required_breakers_off_the_loop(unconfirmed):
    """``Siblings.arun``: the look at the start and the poll while branches run each read
    the required breaker's state from the store, in a worker thread; a branch's failure
    that opens it (heard on the loop) cancels the branch that needs it, also decided off
    the loop."""
    inventory = Breaker(
        "inventory", store=unconfirmed, timeout=5, policy=Policy(failure_threshold=1)
    )
    spy = LoopSpy(unconfirmed)

    async def main() -> Any:
        polled = threading.Event()
        before = spy.called("load")

        async def stock() -> Any:
            # Fails once the group has looked at the store twice (the start, a poll).
            await await_for(lambda: spy.called("load") >= before + 2, "the group polled")
            polled.set()
            return await inventory.acall(reset)

        async def reserve() -> None:
            await asyncio.Event().wait()  # only a cancellation ends it

        group = Siblings(required=[inventory])
        group.add("stock", stock, needs=[inventory])
        group.add("reserve", reserve, needs=[inventory])
        outcome = await asyncio.wait_for(group.arun(), PATIENCE)
        assert polled.is_set()
        return outcome

    outcome = asyncio.run(main())
    assert outcome.cancelled == ("reserve",)
    assert outcome["stock"].status == "failed"
    assert spy.on_loop == []
