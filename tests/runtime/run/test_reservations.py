"""Budgets that hold under concurrency (issue 23): a declared cost is reserved before the
call runs and settled after, so calls begun at once cannot spend past ``max_cost``; and a
tool that keeps failing with one error class is stopped whatever its arguments."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal
from typing import Any

from toolbreaker import Breaker, Budget, ClassLimits, RunGuard, token_cost
from toolbreaker.core import rejects_callers
from toolbreaker.testing import Fault, ToolService, request_json

#: Class limits that never bind: only ``max_cost`` decides.
OPEN = {"read": ClassLimits(max_calls=None), "reversible_write": ClassLimits(max_calls=None)}


def budget(**fields: Any) -> Budget:
    return Budget(
        **{"max_cost": "1", "max_tool_calls": 100_000, "classes": OPEN, **fields},
    )


def test_asyncio_tasks_begun_at_once_spend_no_more_than_the_budget():
    """300 tasks call a $0.01 tool under a $1 budget, every call in flight before any
    settles: 100 run, 200 are refused before they run, with the money left; spent is
    exactly $1."""

    async def main() -> tuple[list[Any], RunGuard, int]:
        guard = RunGuard("t", budget=budget())
        release = asyncio.Event()
        entered = 0

        @guard.tool(cost="0.01")
        async def search(q: int) -> dict[str, Any]:
            nonlocal entered
            entered += 1
            await release.wait()
            return {"hits": [q]}

        del search
        tasks = [asyncio.create_task(guard.acall("search", {"q": n})) for n in range(300)]
        while entered + guard.state.over_budget < 300:
            await asyncio.sleep(0)
        assert guard.state.reserved() == Decimal("1")
        release.set()
        return list(await asyncio.gather(*tasks)), guard, entered

    answers, guard, entered = asyncio.run(main())
    refused = [a for a in answers if isinstance(a, dict) and a.get("over_budget")]
    assert (entered, len(refused)) == (100, 200)
    assert guard.state.cost == Decimal("1")
    assert guard.state.reserved() == 0
    assert guard.stopped is None
    assert refused[0]["budget_left"] == "0"
    assert 'cannot cover another call of "search"; 0 left' in refused[0]["instruction"]


def test_threads_sharing_one_guard_spend_no_more_than_the_budget():
    """32 threads, 10 calls each, at $0.01 under $0.5: 50 run, whatever the interleaving;
    the others are refused (over budget while calls are in flight, then the run stops
    once $0.5 is committed)."""
    guard = RunGuard("t", budget=budget(max_cost="0.5"))
    ran = []
    lock = threading.Lock()

    def lookup(q: str) -> dict[str, str]:
        with lock:
            ran.append(q)
        return {"q": q}

    guard.tool(cost="0.01")(lookup)
    barrier = threading.Barrier(32)

    refused = []

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(10):
            answer = guard.call("lookup", {"q": f"{w}-{i}"})
            if isinstance(answer, dict) and answer.get("ok") is False:
                with lock:
                    refused.append(answer)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ran) == 50
    assert guard.state.cost == Decimal("0.5")
    assert len(refused) == 320 - 50
    assert guard.stopped is not None
    assert guard.stopped.condition == "max-cost"


def test_an_actual_cost_lower_than_reserved_releases_the_rest():
    """``actual_cost`` reads what the call spent from its result; the rest is released:
    five calls that reserve $0.05 and spend $0.01 fit under $0.09, the sixth does not."""
    guard = RunGuard("t", budget=budget(max_cost="0.09"))

    @guard.tool(cost="0.05", actual_cost=lambda result: result["spent"])
    def lookup(q: str) -> dict[str, str]:
        return {"q": q, "spent": "0.01"}

    answers = [lookup(q=str(n)) for n in range(6)]
    assert [a.get("over_budget", False) for a in answers] == [False] * 5 + [True]
    assert guard.state.cost == Decimal("0.05")


def test_a_cost_estimator_sees_the_arguments():
    """A callable ``cost`` is an estimator of the call's arguments."""
    guard = RunGuard("t", budget=budget(max_cost="0.1"))

    @guard.tool(cost=lambda args: Decimal("0.01") * args["pages"])
    def fetch(pages: int) -> dict[str, int]:
        return {"pages": pages}

    assert fetch(pages=8) == {"pages": 8}
    answer = fetch(pages=3)
    assert answer["over_budget"] is True
    assert answer["budget_left"] == "0.02"


def test_an_estimator_that_fails_refuses_the_call():
    """A cost that cannot be estimated is never admitted: the tool does not run."""
    guard = RunGuard("t", budget=budget())
    ran = []

    @guard.tool(cost=lambda args: 1 / 0)
    def fetch(q: str) -> str:
        ran.append(q)
        return q

    answer = fetch(q="x")
    assert answer["ok"] is False
    assert ran == []


def test_a_call_refused_by_its_breaker_spends_nothing_and_a_failed_one_its_reservation(
    service: ToolService,
):
    """A call its dependency breaker refuses never ran: its hold is released. A call
    that ran and failed spends what it reserved (it may have been charged)."""
    breaker = Breaker("search", operation="read", timeout=2.0, enforce="cooperative")
    guard = RunGuard("t", budget=budget())
    guard.tool("search", cost="0.1", breaker=breaker)(
        lambda q: request_json("GET", f"{service.url}/search?q={q}", timeout=2.0)
    )
    service.inject("GET /search", Fault(status=503))
    failed = guard.call("search", {"q": "a"})
    assert failed["ok"] is False
    assert service.hits["GET /search"] == 1
    assert guard.state.cost == Decimal("0.1")
    breaker.isolate()
    refused = guard.call("search", {"q": "b"})
    assert refused["ok"] is False
    assert guard.state.cost == Decimal("0.1")
    assert guard.state.reserved() == 0


def test_a_model_step_reserves_before_the_request_and_settles_after():
    """``guard.reserve`` holds a model step's most (max tokens x price); settling commits
    the actual and releases the rest; a step the budget cannot cover is refused."""
    guard = RunGuard("t", budget=budget(max_cost="0.1"))
    held = guard.reserve(token_cost(4096, "15"))  # 0.06144
    assert held.admitted
    refused = guard.reserve(token_cost(4096, "15"))
    assert not refused.admitted
    assert refused.answer is not None
    assert "another model step" in refused.answer["instruction"]
    held.settle("0.012")
    held.settle("0.5")  # a second settle changes nothing
    assert guard.state.cost == Decimal("0.012")
    again = guard.reserve(token_cost(4096, "15"))
    assert again.admitted
    again.release()
    assert (guard.state.cost, guard.state.reserved()) == (Decimal("0.012"), 0)


def test_the_stop_packet_shows_reserved_beside_committed():
    """While calls are in flight the packet's counters show what is held and spent."""
    guard = RunGuard("t", budget=budget(max_cost="0.05"))

    @guard.tool(cost="0.02")
    def lookup(q: str) -> str:
        return q

    lookup(q="done")
    step = guard.begin("lookup", {"q": "running"})
    assert step.answer is None
    counters = guard.stop_packet().counters
    assert (counters["cost"], counters["reserved"], counters["reservations_held"]) == (
        "0.02",
        "0.02",
        1,
    )
    step.succeeded("running")
    assert guard.stop_packet().counters["reserved"] == "0"


# -- a stop for argument rewriting ------------------------------------------------------


def test_a_tool_failing_with_one_class_is_stopped_whatever_its_arguments(
    service: ToolService,
):
    """A model that rewrites its arguments after every 422 never repeats a fingerprint
    and never trips the breaker (422 is ignored); the third validation failure of the
    tool stops calling it for the run, the model reads why, and other tools go on."""
    breaker = Breaker("orders", operation="read", timeout=2.0, enforce="cooperative")
    guard = RunGuard("t", budget=Budget(max_tool_failures=3))

    def order(order_id: str) -> Any:
        return request_json("GET", f"{service.url}/orders/{order_id}", timeout=2.0)

    guard.tool("order", breaker=breaker)(order)
    guard.tool("status")(lambda: {"ok": True})
    service.outage("GET /orders", status=422)
    answers = [guard.call("order", {"order_id": f"A-{n}"}) for n in range(5)]
    assert [a.get("tool_stopped", False) for a in answers] == [False] * 3 + [True] * 2
    assert service.hits.get("GET /orders") == 3
    assert not rejects_callers(breaker.state, breaker.policy)  # a 422 never trips it
    assert "it kept failing with the same kind of error" in answers[3]["instruction"]
    assert "class http-422" in answers[3]["detail"]
    assert guard.stopped is None
    assert guard.call("status") == {"ok": True}
    packet = guard.stop_packet()
    assert [h["effect"] for h in packet.history] == ["tool-stopped"]
