"""Async means async: a run guard's degraded answers never block an event loop.

A dependency that is out is served by its sheet row's degradation (a handoff, a stop, a
queued item, a local substitute). On the async paths of a run guard (``acall``,
``abegin``/``afailed``) that degradation is an awaited effect of its own: its store round
trips, the journal read its packet makes, and a sync substitute run in a worker thread,
and an async substitute is awaited. Real SQLite and Redis stores are watched by
:class:`~loop_helpers.LoopSpy`, which notes each blocking store call made on a thread
running an event loop: nothing is timed, so the checks hold on a loaded machine.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loop_helpers import LoopSpy
from store_kinds import closing, kinds, open_store
from toolbreaker import Breaker, GuardedTool, Registry, RunGuard
from toolbreaker.stores import MemoryStore


# Every kind other processes reach, but the Redis Cluster's six servers: the cluster's
# own tests cover it (tests/stores/test_redis_cluster.py).
@pytest.fixture(params=kinds(shared=True, cluster=False))
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A real shared store: the breakers', the records' and the run journal's."""
    store, _ = open_store(request.param, request, tmp_path)
    with closing(store):
        yield store


def sheet(degrade: list[str]) -> dict[str, Any]:
    return {
        "defaults": {"timeout_ms": 2000, "failure_threshold": 1, "cooldown_ms": 30_000},
        "tools": {"local": ["snapshot"]},
        "tickets": {
            "write": {"tool": "create_ticket", "degrade": degrade},
            "read": {"tool": "search", "degrade": ["degraded"], "fallback": "snapshot"},
        },
    }


async def reset(**_: Any) -> Any:
    raise ConnectionResetError("the provider reset the connection")


async def refuse(**_: Any) -> Any:
    raise ConnectionRefusedError("nothing listens there: the write never left")


def write_guard(store: Any, degrade: list[str]) -> tuple[RunGuard, Breaker]:
    registry = Registry.from_dict(sheet(degrade), store=store)
    breaker = registry.get("tickets", "write")
    guard = RunGuard(f"task-{uuid.uuid4().hex[:8]}", journal=store)
    guard.add_tool(
        GuardedTool(
            "create_ticket", refuse, risk="reversible_write", breaker=breaker, required=True
        )
    )
    return guard, breaker


async def closed(store: Any, answer: Any) -> Any:
    closing = getattr(store, "aclose", None)
    if closing is not None:
        await closing()
    return answer


# -- the degradation's async path (defect B) ------------------------------------------------


@pytest.mark.parametrize("how", ["rejected", "opened"])
@pytest.mark.parametrize(
    ("degrade", "served"),
    [(["handoff"], "handoff"), (["stop"], "stop"), (["queue", "handoff"], "queue")],
)
def test_a_degraded_answer_on_the_event_loop_never_blocks_it(shared, degrade, served, how):
    """``RunGuard.acall`` of a required write whose dependency is out (isolated before
    the call: the begin path; or opened by the call's own failure: the settle path): the
    row's mode is served, its packet built from the run's journal, its records kept, and
    no store round trip of any of it ran on the loop."""
    guard, breaker = write_guard(shared, degrade)
    if how == "rejected":
        breaker.isolate()
    spy = LoopSpy(shared)
    answer = asyncio.run(_call(guard, shared))
    assert answer["degradation"] == served
    if served != "queue":
        assert answer["packet"]["task"] == guard.task  # the run's own packet
    assert spy.off_loop  # the store was used, from worker threads
    assert spy.on_loop == []


async def _call(guard: RunGuard, store: Any) -> Any:
    return await closed(store, await guard.acall("create_ticket", {"title": "t"}))


def test_a_failure_settled_with_afailed_degrades_off_the_loop(shared):
    """The two-step API: ``abegin``, the tool fails, ``afailed`` opens the breaker and the
    handoff is served; the journal read for its packet is not made on the loop."""
    guard, _ = write_guard(shared, ["handoff"])
    spy = LoopSpy(shared)

    async def main() -> Any:
        step = await guard.abegin("create_ticket", {"title": "t"})
        assert step.answer is None
        with pytest.raises(ConnectionRefusedError) as failed:
            await refuse()
        return await closed(shared, await step.afailed(failed.value))

    answer = asyncio.run(main())
    assert answer["degradation"] == "handoff"
    assert spy.on_loop == []


def test_an_async_substitute_serves_the_failure_that_opens_the_breaker():
    """``degraded`` with a coroutine fallback, through ``acall``: the failure that opens
    the breaker is answered by the awaited substitute, as every later call is (before,
    the settle path ran the degradation without the loop: "an async degraded tool needs
    an async caller", and the plain unavailable answer)."""
    store = MemoryStore()
    registry = Registry.from_dict(sheet(["handoff"]), store=store)

    async def snapshot(**_: Any) -> Any:
        await asyncio.sleep(0)
        return {"results": ["cached"]}

    registry.register_local("snapshot", snapshot)
    breaker = registry.get("tickets", "read")
    guard = RunGuard("substitute")
    guard.add_tool(GuardedTool("search", reset, breaker=breaker))

    async def main() -> tuple[Any, Any]:
        return await guard.acall("search", {"q": "a"}), await guard.acall("search", {"q": "a"})

    opened, later = asyncio.run(main())
    for answer in (opened, later):
        assert answer["degradation"] == "degraded"
        assert answer["result"] == {"results": ["cached"]}
    assert breaker.degradation.faults == 0


def test_a_sync_substitute_on_the_async_path_runs_off_the_loop():
    """``degraded`` with a plain function (it may read a file, a local index): on the
    async path it runs in a worker thread, on the failure that opens the breaker too."""
    registry = Registry.from_dict(sheet(["handoff"]), store=MemoryStore())
    on_loop: list[bool] = []

    def snapshot(**_: Any) -> Any:
        on_loop.append(asyncio._get_running_loop() is not None)
        return {"results": ["cached"]}

    registry.register_local("snapshot", snapshot)
    guard = RunGuard("substitute")
    guard.add_tool(GuardedTool("search", reset, breaker=registry.get("tickets", "read")))

    async def main() -> None:
        for _ in range(2):
            assert (await guard.acall("search", {"q": "a"}))["degradation"] == "degraded"

    asyncio.run(main())
    assert on_loop == [False, False]


def test_the_stop_packet_on_the_event_loop_reads_the_journal_off_it(shared):
    """``RunGuard.astop_packet()``: the packet an async hook hands over once the run has
    stopped (what ``stop_packet()`` builds, the same object) reads the shared journal in
    a worker thread."""
    guard, _ = write_guard(shared, ["handoff"])
    guard.stop("an operator stopped it")
    spy = LoopSpy(shared)

    async def main() -> Any:
        return await closed(shared, await guard.astop_packet())

    packet = asyncio.run(main())
    assert packet == guard.stop_packet()
    assert packet.condition == "operator"
    assert spy.called("journal_entries") == 2
    assert spy.on_loop == []
