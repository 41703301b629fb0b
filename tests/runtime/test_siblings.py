"""Sibling tool calls: a required dependency opens mid-flight, the branches that need it
are cancelled by policy, the independent ones complete, and the outcome lists each
(issue 12). Tools call the real local service."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from toolbreaker import Breaker, Policy, PolicyError, SiblingOutcome, Siblings
from toolbreaker.testing import ToolService, request_json

PATIENCE = 20.0


@pytest.fixture
def service() -> Iterator[ToolService]:
    with ToolService() as running:
        yield running


def inventory_breaker() -> Breaker:
    return Breaker(
        "inventory", policy=Policy(failure_threshold=1), timeout=5, enforce="cooperative"
    )


def check(outcome: SiblingOutcome) -> None:
    """The shape every test expects: reviews completed, the inventory call that failed
    degraded (the model reads tool-unavailable), the branches waiting on inventory
    cancelled by policy with the reason."""
    assert outcome.completed == ("reviews",)
    assert outcome.degraded == ("stock",)
    assert outcome["stock"].reason == "open"
    assert set(outcome.cancelled) == {"reserve", "price"}
    for name in ("reserve", "price"):
        assert outcome[name].reason == "required dependency 'inventory' opened"
    assert not outcome.complete
    result = outcome.to_result()
    assert result["partial"] is True
    assert set(result["results"]) == {"reviews"}
    assert {m["branch"] for m in result["missing"]} == {"stock", "reserve", "price"}
    assert "do not estimate or invent" in result["instruction"]


def test_asyncio_branches_needing_an_opened_dependency_are_cancelled(service):
    service.outage("GET /orders")
    inventory = inventory_breaker()
    started: list[str] = []

    async def main() -> SiblingOutcome:
        async with httpx.AsyncClient(base_url=service.url) as client:

            async def fetch(path: str) -> Any:
                reply = await client.get(path)
                reply.raise_for_status()
                return reply.json()

            @inventory.guard(tool="stock")
            async def stock() -> Any:
                return await fetch("/orders/A-1001")  # 503: opens the breaker

            async def waits_on_inventory(name: str) -> Any:
                started.append(name)
                await asyncio.Event().wait()  # only a cancellation ends it

            async def reviews() -> Any:
                while inventory.state.phase != "open":  # finishes after the opening
                    await asyncio.sleep(0.005)
                return await fetch("/search?q=reviews")

            group = Siblings(required=[inventory])
            group.add("stock", stock, needs=[inventory])
            group.add("reserve", waits_on_inventory, "reserve", needs=[inventory])
            group.add("price", waits_on_inventory, "price", needs=[inventory])
            group.add("reviews", reviews)
            return await asyncio.wait_for(group.arun(), PATIENCE)

    outcome = asyncio.run(main())
    check(outcome)
    assert outcome["reviews"].result["query"] == "reviews"
    assert sorted(started) == ["price", "reserve"]


def test_thread_branches_needing_an_opened_dependency_are_cancelled(service):
    """The same with sync branches in threads: the running ones are abandoned, and one
    that had not started (the pool has 3 workers) never starts."""
    service.outage("GET /orders")
    inventory = inventory_breaker()
    hold = threading.Event()
    started: list[str] = []
    waiting = threading.Barrier(2, timeout=PATIENCE)

    @inventory.guard(tool="stock")
    def stock() -> Any:
        waiting.wait()  # "reserve" is running before the breaker opens
        return request_json("GET", f"{service.url}/orders/A-1001", timeout=5)

    def reserve() -> Any:
        started.append("reserve")
        waiting.wait()
        hold.wait(PATIENCE)  # abandoned: its result is discarded

    def price() -> Any:
        started.append("price")  # queued behind the 3 workers: must never start

    def reviews() -> Any:
        give_up = time.monotonic() + PATIENCE
        while inventory.state.phase != "open":
            assert time.monotonic() < give_up
            time.sleep(0.005)
        return request_json("GET", f"{service.url}/search?q=reviews", timeout=5)

    group = Siblings(required=[inventory])
    group.add("stock", stock, needs=[inventory])
    group.add("reserve", reserve, needs=[inventory])
    group.add("reviews", reviews)
    group.add("price", price, needs=[inventory])
    try:
        outcome = group.run(max_workers=3)
    finally:
        hold.set()
    check(outcome)
    assert started == ["reserve"]


def test_a_required_dependency_already_open_cancels_before_starting():
    inventory = inventory_breaker()
    inventory.isolate("maintenance")
    ran: list[str] = []

    async def needs_it() -> None:
        ran.append("stock")

    async def independent() -> str:
        return "fine"

    group = Siblings(required=[inventory])
    group.add("stock", needs_it, needs=[inventory])
    group.add("other", independent)
    outcome = asyncio.run(group.arun())
    assert outcome.cancelled == ("stock",)
    assert outcome["stock"].reason == "required dependency 'inventory' is open"
    assert outcome.completed == ("other",)
    assert ran == []


def test_a_cancelled_caller_cancels_every_branch():
    """Structured: cancelling the group's caller cancels and awaits every branch."""
    cancelled: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    async def main() -> None:
        group = Siblings()
        group.add("a", forever, "a")
        group.add("b", forever, "b")
        task = asyncio.create_task(group.arun())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sorted(cancelled) == ["a", "b"]


def test_all_complete_is_not_partial():
    async def ok(n: int) -> int:
        return n

    group = Siblings()
    group.add("one", ok, 1)
    group.add("two", ok, 2)
    outcome = asyncio.run(group.arun())
    assert outcome.complete
    assert outcome.to_result() == {"ok": True, "partial": False, "results": {"one": 1, "two": 2}}


def test_failures_are_listed_with_their_reason():
    def boom() -> None:
        raise ValueError("bad")

    group = Siblings()
    group.add("boom", boom)
    group.add("fine", lambda: 1)
    outcome = group.run()
    assert outcome.failed == ("boom",)
    assert outcome["boom"].reason == "ValueError"
    assert outcome.completed == ("fine",)


def test_branch_names_are_unique():
    group = Siblings()
    group.add("a", lambda: 1)
    with pytest.raises(PolicyError):
        group.add("a", lambda: 2)
