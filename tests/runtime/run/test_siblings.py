"""Sibling tool calls: a required dependency opens mid-flight, the branches that need it
are cancelled by policy, the independent ones complete, and the outcome lists each
(issue 12). Tools call the real local service."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from toolbreaker import Breaker, GuardedTool, Policy, RunGuard, SiblingOutcome, Siblings
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._result import cancelled_result, unknown_result
from toolbreaker.runtime._run._siblings import CancelledByPolicy
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

PATIENCE = 20.0


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


# -- one model turn's calls through a RunGuard (what the framework adapters use) ------------


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


async def auntil(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.005)


def turn_guard(inventory: Breaker, reviews: Breaker, journal: MemoryStore) -> RunGuard:
    """``stock`` needs the required inventory; so do the write ``reserve`` and ``price``;
    ``reviews`` is independent. The functions are run by the test (the framework's part)."""
    guard = RunGuard("turn", journal=journal)
    unused = lambda **_: None  # noqa: E731 - the test runs the tools itself
    guard.add_tool(GuardedTool("stock", unused, breaker=inventory, required=True))
    guard.add_tool(GuardedTool("reserve", unused, risk="reversible_write", breaker=inventory))
    guard.add_tool(GuardedTool("price", unused, breaker=inventory))
    guard.add_tool(GuardedTool("reviews", unused, breaker=reviews))
    return guard


def check_turn(guard: RunGuard, journal: MemoryStore, reserve: Any, price: Any) -> None:
    """reviews completed, stock degraded (it opened the breaker), the write in flight and
    the call not yet started cancelled by policy; the run stopped."""
    assert isinstance(reserve, CancelledByPolicy)
    assert reserve.answer["cancelled"] is True
    assert reserve.answer["outcome_unknown"] is True  # it may have committed
    key = reserve.answer["idempotency_key"]
    assert journal.journal_get("turn", key)["status"] == "unknown"
    assert isinstance(price, CancelledByPolicy)
    assert "outcome_unknown" not in price.answer
    turn = guard.turn_outcome()
    assert turn is not None
    assert turn.completed == ("reviews",)
    assert turn.degraded == ("stock",)
    assert set(turn.cancelled) == {"reserve", "price"}
    assert turn["price"].reason == "required dependency 'inventory' opened"
    assert turn["reserve"].reason.startswith("required dependency 'inventory' opened; ")
    assert guard.stopped is not None
    assert guard.stopped.condition == "dependency-open"


def test_run_guard_turn_cancels_the_calls_that_need_an_opened_required_dependency(service):
    """asyncio: the task running the write in flight is cancelled (and awaited), a call
    admitted but not started never starts, the independent call completes."""
    service.outage("GET /orders")
    inventory, reviews = inventory_breaker(), Breaker("reviews", timeout=5, enforce="cooperative")
    journal = MemoryStore()
    guard = turn_guard(inventory, reviews, journal)
    started: list[str] = []
    cancelled: list[str] = []

    async def main() -> tuple[Any, Any]:
        async with httpx.AsyncClient(base_url=service.url) as client:

            async def hang() -> Any:
                started.append("reserve")
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.append("reserve")
                    raise

            async def fetch(path: str) -> Any:
                reply = await client.get(path)
                reply.raise_for_status()
                return reply.json()

            guard.mark_turn(1)
            steps = {
                name: await guard.abegin(name, {"sku": "A-1001"})
                for name in ("stock", "reserve", "price", "reviews")
            }
            writing = asyncio.create_task(guard.arun_step(steps["reserve"], hang))
            await auntil(lambda: started == ["reserve"])
            with pytest.raises(httpx.HTTPStatusError) as failed:
                await guard.arun_step(steps["stock"], lambda: fetch("/orders/A-1001"))
            assert (await steps["stock"].afailed(failed.value))["tool_unavailable"]
            price = await guard.arun_step(steps["price"], lambda: fetch("/orders/A-1002"))
            found = await guard.arun_step(steps["reviews"], lambda: fetch("/search?q=cable"))
            assert (await steps["reviews"].asucceeded(found))["results"]
            reserve = await writing
            assert all(t is asyncio.current_task() or t.done() for t in asyncio.all_tasks())
            return reserve, price

    reserve, price = asyncio.run(main())
    check_turn(guard, journal, reserve, price)
    assert cancelled == ["reserve"]
    assert service.hits["GET /orders"] == 1  # price never started
    assert inventory._admission.listeners == []  # nothing of the turn outlives it


def test_run_guard_turn_abandons_a_thread_that_needs_an_opened_required_dependency(service):
    """Threads: the write in flight is abandoned at once (its result is discarded when it
    comes), a call not started never starts, the independent call completes."""
    service.outage("GET /orders")
    service.inject("POST /tickets", Fault(delay=30))  # in flight until the service stops
    inventory, reviews = inventory_breaker(), Breaker("reviews", timeout=5, enforce="cooperative")
    journal = MemoryStore()
    guard = turn_guard(inventory, reviews, journal)
    guard.mark_turn(1)
    names = ("stock", "reserve", "price", "reviews")
    steps = {name: guard.begin(name, {"sku": "A-1001"}) for name in names}

    def get(path: str) -> Any:
        return request_json("GET", service.url + path, timeout=5)

    def post() -> Any:
        body = {"title": "reserve A-1001", "body": "hold one"}
        return request_json("POST", f"{service.url}/tickets", body=body, timeout=40)

    results: dict[str, Any] = {}
    writer = threading.Thread(
        target=lambda: results.setdefault("reserve", guard.run_step(steps["reserve"], post))
    )
    writer.start()
    until(lambda: service.hits.get("POST /tickets", 0) == 1)
    with pytest.raises(urllib.error.HTTPError) as failed:  # the 503 that opens the breaker
        guard.run_step(steps["stock"], lambda: get("/orders/A-1001"))
    assert steps["stock"].failed(failed.value)["tool_unavailable"]
    writer.join(PATIENCE)
    assert not writer.is_alive()
    assert service.in_flight == 1  # abandoned: the write is still at the service
    price = guard.run_step(steps["price"], lambda: get("/orders/A-1002"))
    found = guard.run_step(steps["reviews"], lambda: get("/search?q=a"))
    assert steps["reviews"].succeeded(found)["results"]
    check_turn(guard, journal, results["reserve"], price)


def test_an_opening_seen_only_in_the_store_cancels_by_poll(tmp_path):
    """Another process opens the required breaker (a second store on the same SQLite
    file): no listener here hears it, the turn's poll of the view sees it."""
    from toolbreaker.stores import SQLiteStore

    path = tmp_path / "breakers.db"
    with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        here = Breaker("inventory", policy=Policy(failure_threshold=1), store=mine, timeout=5)
        there = Breaker("inventory", policy=Policy(failure_threshold=1), store=theirs, timeout=5)
        guard = RunGuard("poll")
        guard.add_tool(GuardedTool("stock", lambda **_: None, breaker=here, required=True))
        guard.mark_turn(1)
        step = guard.begin("stock", {})

        async def main() -> Any:
            async def hang() -> None:
                await asyncio.Event().wait()

            running = asyncio.create_task(guard.arun_step(step, hang))
            await asyncio.sleep(0)
            with pytest.raises(ConnectionError):
                there.call(_refused)  # the other process's failure opens it
            return await running

        answer = asyncio.run(main())
    assert isinstance(answer, CancelledByPolicy)
    assert answer.answer["dependency"] == "inventory"
    assert guard.turn_outcome().cancelled == ("stock",)


def _refused() -> None:
    raise ConnectionError("refused")


def test_a_turn_where_nothing_opens_runs_as_before(service):
    inventory, reviews = inventory_breaker(), Breaker("reviews", timeout=5, enforce="cooperative")
    guard = turn_guard(inventory, reviews, MemoryStore())
    guard.mark_turn(1)
    stock = guard.begin("stock", {"sku": "A-1001"})
    url = f"{service.url}/orders/A-1001"
    result = guard.run_step(stock, lambda: request_json("GET", url, timeout=5))
    assert stock.succeeded(result) is result
    turn = guard.turn_outcome()
    assert turn is not None
    assert turn.complete
    assert guard.stopped is None
    assert inventory._admission.listeners == []


def test_cancelled_result_is_pinned():
    """The exact shape the model reads for a call cancelled by policy."""
    assert cancelled_result("price", "inventory") == {
        "ok": False,
        "tool": "price",
        "cancelled": True,
        "reason": "required-dependency-opened",
        "dependency": "inventory",
        "retryable": False,
        "instruction": "\"price\" was cancelled by policy: required dependency 'inventory' "
        "opened while it ran, so its result is missing. Do not call it again in this run; "
        "do not estimate or invent its data.",
    }
    unknown = unknown_result("reserve", "tb1-k", why="cancelled by policy while it ran")
    write = cancelled_result("reserve", "inventory", unknown=unknown)
    assert write == {
        **unknown,
        "cancelled": True,
        "reason": "required-dependency-opened",
        "dependency": "inventory",
        "instruction": "\"reserve\" was cancelled by policy: required dependency 'inventory' "
        "opened while it ran, so its result is missing. Do not call it again in this run; "
        "do not estimate or invent its data. " + unknown["instruction"],
    }
    assert write["outcome_unknown"] is True


def test_a_cancelled_hook_cancels_and_awaits_its_call():
    """Structured: when the framework cancels the hook running a call that needs a
    required dependency, the task running the tool is cancelled and awaited with it."""
    inventory = inventory_breaker()
    guard = RunGuard("structured")
    guard.add_tool(GuardedTool("stock", lambda **_: None, breaker=inventory, required=True))
    cancelled: list[str] = []

    async def main() -> None:
        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append("stock")
                raise

        guard.mark_turn(1)
        step = await guard.abegin("stock", {})
        hook = asyncio.create_task(guard.arun_step(step, forever))
        await auntil(lambda: len(asyncio.all_tasks()) == 3)  # main, the hook, the tool
        hook.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hook
        assert all(t is asyncio.current_task() or t.done() for t in asyncio.all_tasks())

    asyncio.run(main())
    assert cancelled == ["stock"]
    assert inventory._admission.listeners == []


# -- breakers that admit every caller: a forced close, shadow mode (issue 21, item 2) --------


def forced_inventory() -> Breaker:
    """The inventory breaker, forced closed by an operator: it keeps deciding and
    recording (a failure moves its phase to open) but admits every request."""
    inventory = inventory_breaker()
    inventory.force_close("incident 7: keep serving while we look")
    return inventory


def shadow_inventory() -> Breaker:
    """The inventory breaker in shadow mode: it decides and records, admits everything."""
    return Breaker(
        "inventory",
        policy=Policy(failure_threshold=1, mode="shadow"),
        timeout=5,
        enforce="cooperative",
    )


def _admitting_group_outcome(service: ToolService, inventory: Breaker) -> SiblingOutcome:
    """``stock`` fails on a real 503 (the phase moves to open); ``reserve``, in flight
    meanwhile, then calls inventory itself; ``reviews`` is independent."""
    service.outage("GET /orders")

    async def main() -> SiblingOutcome:
        opened = asyncio.Event()
        async with httpx.AsyncClient(base_url=service.url) as client:

            async def fetch(path: str) -> Any:
                reply = await client.get(path)
                reply.raise_for_status()
                return reply.json()

            @inventory.guard(tool="stock")
            async def stock_call() -> Any:
                return await fetch("/orders/A-1001")

            async def stock() -> Any:
                answer = await stock_call()
                opened.set()
                return answer

            @inventory.guard(tool="reserve")
            async def search() -> Any:
                return await fetch("/search?q=reserve")

            async def reserve() -> Any:
                await opened.wait()
                return await search()

            async def reviews() -> Any:
                return await fetch("/search?q=reviews")

            group = Siblings(required=[inventory])
            group.add("stock", stock, needs=[inventory])
            group.add("reserve", reserve, needs=[inventory])
            group.add("reviews", reviews)
            return await asyncio.wait_for(group.arun(), PATIENCE)

    return asyncio.run(main())


def test_a_forced_close_cancels_no_branch_when_its_phase_opens(service):
    """After ``force_close()`` a failure moves the phase to open while the breaker keeps
    admitting: the branch in flight that needs it is not cancelled, and its call goes
    through (the operator said: keep serving)."""
    inventory = forced_inventory()
    outcome = _admitting_group_outcome(service, inventory)
    assert inventory.state.phase == "open"  # the core still decides and records
    assert outcome.cancelled == ()
    assert outcome.completed == ("reserve", "reviews")
    assert outcome["reserve"].result["query"] == "reserve"
    assert outcome.failed == ("stock",)  # an error result, not "tool unavailable"
    assert outcome["stock"].result.get("tool_unavailable") is None


def test_a_forced_close_abandons_no_thread_when_its_phase_opens(service):
    """The same with sync branches in threads: the branch that needs the forced-closed
    breaker is not abandoned when its phase opens, and completes."""
    service.outage("GET /orders")
    inventory = forced_inventory()
    opened = threading.Event()

    @inventory.guard(tool="stock")
    def stock_call() -> Any:
        return request_json("GET", f"{service.url}/orders/A-1001", timeout=5)

    def stock() -> Any:
        answer = stock_call()
        opened.set()
        return answer

    @inventory.guard(tool="reserve")
    def reserve() -> Any:
        assert opened.wait(PATIENCE)
        return request_json("GET", f"{service.url}/search?q=reserve", timeout=5)

    group = Siblings(required=[inventory])
    group.add("stock", stock, needs=[inventory])
    group.add("reserve", reserve, needs=[inventory])
    outcome = group.run()
    assert inventory.state.phase == "open"
    assert outcome.cancelled == ()
    assert outcome.completed == ("reserve",)
    assert outcome["reserve"].result["query"] == "reserve"


def test_shadow_mode_cancels_no_branch_when_its_phase_opens(service):
    """Shadow mode admits every request: an opening it records cancels nothing."""
    inventory = shadow_inventory()
    outcome = _admitting_group_outcome(service, inventory)
    assert inventory.state.phase == "open"
    assert outcome.cancelled == ()
    assert outcome.completed == ("reserve", "reviews")


def test_a_forced_close_already_open_at_the_start_cancels_nothing():
    """A forced-closed breaker whose phase is open when the group starts still admits:
    the branches that need it start (threads too)."""
    inventory = forced_inventory()
    with pytest.raises(ConnectionError):
        inventory.call(_refused)
    assert inventory.state.phase == "open"

    async def needs_it() -> str:
        return inventory.call(lambda: "in stock")

    group = Siblings(required=[inventory])
    group.add("stock", needs_it, needs=[inventory])
    assert asyncio.run(group.arun()).completed == ("stock",)
    threads = Siblings(required=[inventory])
    threads.add("stock", lambda: inventory.call(lambda: "in stock"), needs=[inventory])
    assert threads.run().completed == ("stock",)


def test_an_isolated_breaker_in_shadow_mode_cancels_before_starting():
    """Isolation rejects every request, in shadow mode too: a branch that needs an
    isolated required breaker is cancelled before it starts (not run to be refused)."""
    inventory = shadow_inventory()
    inventory.isolate("maintenance")
    ran: list[str] = []

    async def needs_it() -> None:
        ran.append("stock")

    group = Siblings(required=[inventory])
    group.add("stock", needs_it, needs=[inventory])
    outcome = asyncio.run(group.arun())
    assert outcome.cancelled == ("stock",)
    assert outcome["stock"].reason == "required dependency 'inventory' is open"
    assert ran == []


def test_a_forced_open_policy_cancels_before_starting():
    """The kill switch (``force = "open"``) rejects every request although the phase is
    closed: the branches that need it are cancelled before they start."""
    inventory = Breaker("inventory", policy=Policy(force="open"), timeout=5, enforce="cooperative")
    assert inventory.state.phase == "closed"
    ran: list[str] = []
    group = Siblings(required=[inventory])
    group.add("stock", lambda: ran.append("stock"), needs=[inventory])
    outcome = group.run()
    assert outcome.cancelled == ("stock",)
    assert ran == []


def test_run_guard_turn_keeps_the_calls_of_a_forced_closed_required_dependency(service):
    """A RunGuard turn: the required inventory breaker is forced closed; ``stock`` fails
    on a real 503 and moves its phase to open. The write in flight is not cancelled (it
    completes and is confirmed), a call admitted meanwhile starts and completes, and the
    run goes on."""
    service.outage("GET /orders")
    inventory = forced_inventory()
    reviews = Breaker("reviews", timeout=5, enforce="cooperative")
    journal = MemoryStore()
    guard = turn_guard(inventory, reviews, journal)

    async def main() -> tuple[Any, Any]:
        failed_over = asyncio.Event()
        async with httpx.AsyncClient(base_url=service.url) as client:

            async def fetch(path: str) -> Any:
                reply = await client.get(path)
                reply.raise_for_status()
                return reply.json()

            async def write() -> Any:
                await failed_over.wait()
                return await fetch("/search?q=reserved")

            guard.mark_turn(1)
            steps = {
                name: await guard.abegin(name, {"sku": "A-1001"})
                for name in ("stock", "reserve", "price")
            }
            assert all(step.answer is None for step in steps.values())
            writing = asyncio.create_task(guard.arun_step(steps["reserve"], write))
            await asyncio.sleep(0)
            with pytest.raises(httpx.HTTPStatusError) as failed:
                await guard.arun_step(steps["stock"], lambda: fetch("/orders/A-1001"))
            answer = await steps["stock"].afailed(failed.value)
            assert answer.get("tool_unavailable") is None
            assert inventory.state.phase == "open"
            failed_over.set()
            reserve = await writing
            assert not isinstance(reserve, CancelledByPolicy)
            assert (await steps["reserve"].asucceeded(reserve))["query"] == "reserved"
            price = await guard.arun_step(steps["price"], lambda: fetch("/search?q=price"))
            assert not isinstance(price, CancelledByPolicy)
            assert (await steps["price"].asucceeded(price))["query"] == "price"
            return reserve, price

    asyncio.run(main())
    turn = guard.turn_outcome()
    assert turn is not None
    assert turn.cancelled == ()
    assert turn.completed == ("reserve", "price")
    assert turn.failed == ("stock",)
    assert guard.stopped is None
    key = next(e["idempotency_key"] for e in journal.journal_entries("turn"))
    assert journal.journal_get("turn", key)["status"] == "confirmed"


def test_a_half_open_breaker_probed_by_its_health_checker_cancels_before_starting():
    """Under ``probes = "health-check"`` a half-open breaker refuses every user's call
    (only the checker probes): the branches that need it are cancelled, as while open."""
    from toolbreaker.runtime._breaker._boundary import HealthCheck
    from toolbreaker.testing import force_state

    inventory = Breaker(
        "inventory",
        policy=Policy(failure_threshold=1, probes="health-check"),
        timeout=5,
        enforce="cooperative",
        health_check=HealthCheck(check=lambda: True),
    )
    force_state(inventory, "half_open")
    ran: list[str] = []
    group = Siblings(required=[inventory])
    group.add("stock", lambda: ran.append("stock"), needs=[inventory])
    outcome = group.run()
    assert outcome.cancelled == ("stock",)
    assert outcome["stock"].reason == "required dependency 'inventory' is open"
    assert ran == []
