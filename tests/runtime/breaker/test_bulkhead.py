"""Bulkheads: at most ``max_concurrent`` calls of a dependency in flight (issue 12).

The limits are checked against the real fault-injecting service, which counts the
requests it is handling at once (``ToolService.peak_in_flight``). Calls that hold a slot
wait on an event the test sets only once every other caller has been answered, so the
counts are exact and nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import httpx
import pytest

from records_helpers import SharedMemory
from store_kinds import kinds, open_store, reopen
from toolbreaker import Breaker, GuardedTool, Policy, Registry, RunGuard
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.runtime._breaker._bulkhead import MARGIN_MS, Bulkhead, Slot, shares_records
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock, Fault, request_json

PATIENCE = 20.0


def wait_for(condition: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < give_up, what
        time.sleep(0.005)


async def await_for(condition: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < give_up, what
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("shared", [False, True], ids=["process", "leases"])
def test_64_threads_never_exceed_the_limit(service, shared):
    """64 threads call a dependency limited to 8: the service never sees more than 8 at
    once, 8 calls run and the other 56 are answered at once with ``saturated``."""
    store = SharedMemory() if shared else MemoryStore()
    breaker = Breaker("search", timeout=25, max_concurrent=8, max_workers=80, store=store)
    release = threading.Event()
    service.inject("GET /search", *[Fault(delay=0.05)] * 64)

    def search() -> dict[str, Any]:
        found = request_json("GET", f"{service.url}/search?q=cable", timeout=30)
        assert release.wait(PATIENCE)
        return found

    outcomes: list[Any] = []
    lock = threading.Lock()

    def agent() -> None:
        try:
            outcome: Any = breaker.call(search)
        except CircuitOpen as exc:
            outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=agent) for _ in range(64)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(outcomes) == 56, "56 callers answered while 8 hold their slots")
    release.set()
    for thread in threads:
        thread.join(PATIENCE)
    assert 1 <= service.peak_in_flight <= 8
    assert service.hits["GET /search"] == 8
    rejected = [o for o in outcomes if isinstance(o, CircuitOpen)]
    assert len(rejected) == 56
    assert {o.reason for o in rejected} == {"saturated"}
    result = rejected[0].result_for("search")
    assert result["reason"] == "saturated"
    assert result["retry_after_seconds"] == 25
    assert "Resubmit it after 25 seconds" in result["instruction"]
    stats = breaker.stats.to_dict()
    assert (stats["admitted"], stats["rejected"], stats["saturated"]) == (8, 56, 56)
    bulkhead = breaker._runner.bulkhead
    assert bulkhead is not None
    assert bulkhead.in_use == 0
    if shared:
        assert store.inner.record_list(bulkhead.space) == []  # every lease given back
    # The slots are free again: the next call runs.
    assert breaker.call(lambda: "ok") == "ok"
    breaker.close()


@pytest.mark.parametrize("shared", [False, True], ids=["process", "leases"])
def test_1000_tasks_never_exceed_the_limit(service, shared):
    """1,000 asyncio tasks call a dependency limited to 8 through ``acall``: never more
    than 8 requests at the service, 992 answered at once with ``saturated``."""
    store = SharedMemory() if shared else MemoryStore()
    breaker = Breaker("search", timeout=25, max_concurrent=8, store=store)

    async def main() -> list[Any]:
        release = asyncio.Event()
        service.inject("GET /search", *[Fault(delay=0.05)] * 8)
        outcomes: list[Any] = []
        async with httpx.AsyncClient(base_url=service.url) as client:

            async def search() -> Any:
                reply = await client.get("/search", params={"q": "cable"})
                await release.wait()
                return reply.json()

            async def agent() -> None:
                try:
                    outcome: Any = await breaker.acall(search)
                except CircuitOpen as exc:
                    outcome = exc
                outcomes.append(outcome)

            tasks = [asyncio.create_task(agent()) for _ in range(1000)]
            await await_for(lambda: len(outcomes) == 992, "992 tasks answered")
            release.set()
            await asyncio.gather(*tasks)
        return outcomes

    outcomes = asyncio.run(main())
    assert 1 <= service.peak_in_flight <= 8
    assert service.hits["GET /search"] == 8
    assert sum(isinstance(o, CircuitOpen) and o.reason == "saturated" for o in outcomes) == 992
    assert sum(isinstance(o, dict) and o["query"] == "cable" for o in outcomes) == 8
    stats = breaker.stats.to_dict()
    assert (stats["admitted"], stats["saturated"]) == (8, 992)
    assert breaker._runner.bulkhead is not None
    assert breaker._runner.bulkhead.in_use == 0


def test_a_step_holds_its_slot_until_settled():
    """``begin`` takes a slot with the permit; settling the step gives it back."""
    breaker = Breaker("search", timeout=5, max_concurrent=1, enforce="cooperative")
    first = breaker.begin("search", {"q": "a"})
    assert first.answer is None
    second = breaker.begin("search", {"q": "b"})
    assert second.answer["reason"] == "saturated"
    first.succeeded({"ok": True})
    third = breaker.begin("search", {"q": "c"})
    assert third.answer is None
    third.failed(ValueError("bad query"))
    assert breaker._runner.bulkhead is not None
    assert breaker._runner.bulkhead.in_use == 0


def test_a_slot_never_given_back_returns_after_its_deadline_and_the_margin():
    """A permit that is never settled keeps its slot only until its deadline plus the
    margin: the next caller after that takes it back."""
    clock = FakeClock()
    breaker = Breaker("search", timeout=1, max_concurrent=1, clock=clock, enforce="cooperative")
    lost = breaker.allow()
    assert lost.admitted
    assert not breaker.allow().admitted
    clock.advance(1_000 + MARGIN_MS - 1)
    assert not breaker.allow().admitted
    clock.advance(1)
    assert breaker.allow().admitted


def test_a_rejection_gives_the_slot_back():
    """A call the breaker rejects (open) does not keep a slot."""
    clock = FakeClock()
    breaker = Breaker("search", timeout=1, max_concurrent=1, clock=clock, enforce="cooperative")
    breaker.isolate("maintenance")
    assert breaker.allow().reason == "isolated"
    assert breaker._runner.bulkhead is not None
    assert breaker._runner.bulkhead.in_use == 0


def test_a_store_fault_while_taking_a_slot_denies_the_call():
    """The slots' store is down: the call is denied (fail closed) and counted."""
    store = SharedMemory(down=True)
    breaker = Breaker("search", timeout=5, max_concurrent=4, store=store, enforce="cooperative")
    with pytest.raises(CircuitOpen) as info:
        breaker.call(lambda: "never")
    assert info.value.reason == "store-unavailable"
    stats = breaker.stats.to_dict()
    assert stats["record_faults"] == 1
    assert stats["admitted"] == 0
    assert breaker._runner.bulkhead is not None
    assert breaker._runner.bulkhead.in_use == 0


def test_async_store_fault_denies_too():
    store = SharedMemory(down=True)
    breaker = Breaker("search", timeout=5, max_concurrent=4, store=store)

    async def work() -> str:
        return "never"

    with pytest.raises(CircuitOpen) as info:
        asyncio.run(breaker.acall(work))
    assert info.value.reason == "store-unavailable"
    assert breaker.stats.record_faults == 1


def test_processes_sharing_a_store_share_the_slots():
    """Two breakers over one shared store (two processes, in effect): 3 slots in all."""
    store = SharedMemory()
    one = Breaker("search", timeout=5, max_concurrent=3, store=store, enforce="cooperative")
    two = Breaker("search", timeout=5, max_concurrent=3, store=store, enforce="cooperative")
    held = [one.allow(), two.allow(), one.allow()]
    assert all(p.admitted for p in held)
    assert two.allow().reason == "saturated"
    held[0].record("success")
    assert two.allow().admitted


def test_a_lease_of_a_dead_holder_expires():
    """A slot lease whose holder vanished is taken over once its time ran out."""
    clock = FakeClock()
    store = SharedMemory()
    dead = Bulkhead("search", 1, store, clock)
    assert isinstance(dead.acquire(1_000), Slot)
    alive = Bulkhead("search", 1, store, clock)
    assert alive.acquire(1_000) == "saturated"
    clock.advance(1_000 + MARGIN_MS)
    assert isinstance(alive.acquire(1_000), Slot)


def test_only_shared_stores_use_leases():
    assert not shares_records(MemoryStore())
    assert shares_records(SharedMemory())


def test_the_sheet_declares_max_concurrent(tmp_path):
    """``max_concurrent`` is a row setting; a bad value names the row and the field."""
    sheet = tmp_path / "boundaries.toml"
    sheet.write_text("[search.read]\ntimeout_ms = 5000\nmax_concurrent = 8\n")
    registry = Registry.from_toml(sheet)
    breaker = registry.get("search", "read")
    assert breaker.boundary.max_concurrent == 8
    assert breaker._runner.bulkhead is not None
    sheet.write_text("[search.read]\ntimeout_ms = 5000\nmax_concurrent = 0\n")
    with pytest.raises(PolicyError, match="max_concurrent"):
        Registry.from_toml(sheet)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "8", 10_001])
def test_max_concurrent_is_validated(bad):
    with pytest.raises(PolicyError, match="max_concurrent"):
        Breaker("search", timeout=1, max_concurrent=bad)


def test_a_run_guard_step_holds_a_slot_and_saturation_never_stops_the_run():
    """Through a run guard: the second concurrent call of a required tool limited to 1 is
    answered ``saturated`` (resubmit), the run goes on, and settling frees the slot."""
    breaker = Breaker("search", timeout=5, max_concurrent=1, enforce="cooperative")
    guard = RunGuard("bulkhead-run")
    guard.add_tool(GuardedTool("search", fn=lambda q: q, breaker=breaker, required=True))
    first = guard.begin("search", {"q": "a"})
    assert first.answer is None
    second = guard.begin("search", {"q": "b"})
    assert second.answer["reason"] == "saturated"
    assert guard.stopped is None
    first.succeeded({"ok": True})
    third = guard.begin("search", {"q": "c"})
    assert third.answer is None
    asyncio.run(third.afailed(ValueError("bad query")))
    assert breaker._runner.bulkhead is not None
    assert breaker._runner.bulkhead.in_use == 0


def test_the_quiet_fast_path_counts_its_calls_too():
    """Once the breaker is quiet, call() and acall() skip the store but still hold a slot:
    a call made while another runs is saturated, and every slot comes back."""
    breaker = Breaker("search", timeout=5, max_concurrent=1, enforce="cooperative")
    assert breaker.call(lambda: "warm") == "warm"
    assert breaker.state is breaker._admission.quiet  # the fast path from here on

    def nested() -> str:
        with pytest.raises(CircuitOpen) as info:
            breaker.call(lambda: "inner")
        return info.value.reason

    assert breaker.call(nested) == "saturated"

    async def anested() -> str:
        async def inner() -> str:
            return "inner"

        with pytest.raises(CircuitOpen) as info:
            await breaker.acall(inner)
        return info.value.reason

    assert asyncio.run(breaker.acall(anested)) == "saturated"
    assert breaker._runner.bulkhead is not None
    assert breaker._runner.bulkhead.in_use == 0
    assert breaker.stats.saturated == 2


def test_a_lost_permit_and_the_fast_path_share_the_count():
    """A permit never settled holds a slot until its time runs out, fast path or not."""
    clock = FakeClock()
    breaker = Breaker("search", timeout=1, max_concurrent=1, clock=clock, enforce="cooperative")
    assert breaker.call(lambda: "warm") == "warm"
    lost = breaker.allow()
    assert lost.admitted
    with pytest.raises(CircuitOpen):
        breaker.call(lambda: "over")
    clock.advance(1_000 + MARGIN_MS)
    assert breaker.call(lambda: "back") == "back"


def test_a_published_row_keeps_a_shared_bulkhead_on_the_slow_path():
    """A live policy change (adopt) that turns retries off must not put a breaker with a
    bulkhead shared across processes on the quiet fast path, which takes no slot."""
    from toolbreaker import Boundary

    store = SharedMemory()
    retrying = {"max_attempts": 2, "deadline_ms": 5_000}
    one = Breaker(
        "search", timeout=5, max_concurrent=1, store=store, enforce="cooperative", retry=retrying
    )
    other = Breaker("search", timeout=5, max_concurrent=1, store=store, enforce="cooperative")
    one.adopt(Boundary("search", policy=Policy(), timeout=5, enforce="cooperative"))
    for _ in range(3):  # quiet calls: the state the fast path would serve from
        assert one.call(lambda: "ok") == "ok"
    held = other.allow()
    assert held.admitted
    with pytest.raises(CircuitOpen) as info:
        one.call(lambda: "ran without a slot")
    assert info.value.reason == "saturated"
    held.record("success")
    assert one.call(lambda: "ok") == "ok"


# A deadline by which a waiting worker thread surely starts its call, so that the call
# is running (and hung: its worker pinned) when the deadline passes.
STARTS_WITHIN = 0.3


class Dependency:
    """An in-process dependency that counts the calls it is handling at once; every call
    hangs until :attr:`release` is set (so a caller's deadline passes while it runs)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.calls = 0

    def __call__(self) -> str:
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            assert self.release.wait(PATIENCE)
            return "late"
        finally:
            with self.lock:
                self.in_flight -= 1


def worker_threads(breaker: Breaker) -> int:
    return sum(t.name.startswith(f"toolbreaker-{breaker.key}-") for t in threading.enumerate())


@pytest.mark.parametrize("shared", [False, True], ids=["process", "leases"])
def test_a_hung_call_keeps_its_slot_until_it_really_ends(shared):
    """``max_concurrent=4`` and calls that hang past their deadline (default ``thread``
    mode): each caller is answered at its deadline, but its call still runs, so it keeps
    its slot. The dependency never sees more than 4 calls at once; later callers are
    answered ``saturated`` at once, by the bulkhead (limit 4), and never take a worker.
    Once the hung calls return, their slots come back."""
    store = SharedMemory() if shared else MemoryStore()
    breaker = Breaker(
        "search",
        timeout=STARTS_WITHIN,
        max_concurrent=4,
        store=store,
        policy=Policy(failure_threshold=100),  # the timeouts must not open it
    )
    heard: list[dict[str, Any]] = []
    breaker.degradation.add_listener(heard.append)
    dependency = Dependency()
    try:
        for _ in range(4):
            with pytest.raises(TimeoutError):
                breaker.call(dependency)
        assert breaker.stats.pinned_workers == 4  # all four still running
        refused = []
        for _ in range(8):
            with pytest.raises(CircuitOpen) as info:
                breaker.call(dependency)
            refused.append(info.value.reason)
        assert refused == ["saturated"] * 8
        assert (dependency.calls, dependency.peak) == (4, 4)
        assert [(n["kind"], n["by"], n["limit"]) for n in heard] == [
            ("saturated", "bulkhead", 4)
        ] * 8
        assert worker_threads(breaker) == 4  # a refused caller took no worker
    finally:
        dependency.release.set()
    wait_for(lambda: breaker.stats.late_results == 4, "the hung calls returned")
    wait_for(lambda: breaker._runner.bulkhead.in_use == 0, "their slots came back")
    if shared:
        assert store.inner.record_list(breaker._runner.bulkhead.space) == []
    assert breaker.call(lambda: "fresh") == "fresh"
    breaker.close()


def test_a_hung_run_guard_call_keeps_its_slot_until_it_really_ends():
    """Through a run guard (``Breaker.run`` for an admitted step, what the adapters use):
    the step is settled at its deadline, but the hung call keeps its slot until it
    returns, so the next call is answered ``saturated`` instead of reaching the
    dependency a second time."""
    dependency = Dependency()
    breaker = Breaker("search", timeout=STARTS_WITHIN, max_concurrent=1)
    guard = RunGuard("hung-run")
    guard.add_tool(GuardedTool("search", fn=lambda q: dependency(), breaker=breaker))
    try:
        first = guard.call("search", {"q": "a"})
        assert first["ok"] is False  # the timeout, as the model reads it
        second = guard.call("search", {"q": "b"})
        assert second["reason"] == "saturated"
        assert dependency.peak == 1
    finally:
        dependency.release.set()
    wait_for(lambda: breaker._runner.bulkhead.in_use == 0, "the hung call returned")
    assert guard.call("search", {"q": "c"}) == "late"
    breaker.close()


@pytest.mark.parametrize("kind", kinds(caller_clock=True))
def test_a_hung_calls_lease_is_renewed_until_the_call_ends(kind, tmp_path, request):
    """Two breakers share a store (two processes, in effect: with SQLite, two store
    objects on one file), one slot in all. A call of the first hangs past its deadline;
    long after its lease would have run out, both still count it (the lease is renewed
    while the call runs) and answer ``saturated``. Once the call returns, the slot is
    free for the other process."""
    clock = FakeClock()
    if kind == "memory":
        store_one = store_two = SharedMemory()
        records: Any = store_one.inner
    else:
        store_one, url = open_store(kind, request, tmp_path)
        store_two = records = reopen(url)
    one = Breaker("search", timeout=STARTS_WITHIN, max_concurrent=1, store=store_one,
                  clock=clock, policy=Policy(failure_threshold=100))  # fmt: skip
    two = Breaker("search", timeout=5, max_concurrent=1, store=store_two, clock=clock,
                  enforce="cooperative")  # fmt: skip
    assert one._runner.bulkhead is not None
    space = one._runner.bulkhead.space
    dependency = Dependency()

    def renewed() -> bool:
        [(_, lease, _)] = records.record_list(space)
        return bool(lease["until"] > clock())

    try:
        with pytest.raises(TimeoutError):
            one.call(dependency)
        clock.advance(60_000)  # far past the deadline plus the margin
        wait_for(renewed, "the hung call's lease was renewed")
        assert two.allow().reason == "saturated"
        with pytest.raises(CircuitOpen) as info:
            one.call(dependency)
        assert info.value.reason == "saturated"
        assert dependency.calls == 1
    finally:
        dependency.release.set()
    wait_for(lambda: records.record_list(space) == [], "the slot came back")
    assert two.allow().admitted
    one.close()
    if kind != "memory":
        store_one.close()
        store_two.close()


# Python 3.12+ warns that forking a multi-threaded process may deadlock; the child here
# only counts its bulkhead's slots, writes to a pipe and exits.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_does_not_count_its_parents_hung_calls():
    """A hung call holds its slot in the parent; a forked child (a pre-forking server's
    worker) starts with every slot free: the parent's calls do not run there."""
    dependency = Dependency()
    breaker = Breaker("search", timeout=STARTS_WITHIN, max_concurrent=1,
                      policy=Policy(failure_threshold=100))  # fmt: skip
    assert breaker._runner.bulkhead is not None
    try:
        with pytest.raises(TimeoutError):
            breaker.call(dependency)
        assert breaker._runner.bulkhead.in_use == 1
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                os.write(write, str(breaker._runner.bulkhead.in_use).encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        child = os.read(read, 100).decode()
        os.close(read)
        os.close(write)
        assert child == "0"
        assert breaker._runner.bulkhead.in_use == 1
    finally:
        dependency.release.set()
    wait_for(lambda: breaker._runner.bulkhead.in_use == 0, "the hung call returned")
    breaker.close()
