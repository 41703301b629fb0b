"""One budget for one run, wherever it runs (issue 23): guards of one task in several OS
processes and threads share the run's counters and reservations through a real SQLite
file, Redis, Redis Cluster and PostgreSQL, by compare-and-set; a store that is down
admits nothing; what was recorded while it was down is written later, never lost."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from test_multiprocess import make_store, sleep_until, warm

from toolbreaker import Budget, ClassLimits, ModelPrice, RunGuard
from toolbreaker.cli import main
from toolbreaker.errors import PolicyError, StoreUnavailable
from toolbreaker.runtime._run._shared import RUNS_SPACE
from toolbreaker.stores import MemoryStore, SQLiteStore

PROCESSES = 4
THREADS = 4
CALLS = 40  # per thread: 640 attempts in all against room for 100

#: Class limits that never bind: only max_cost decides.
OPEN = {"read": ClassLimits(max_calls=None), "reversible_write": ClassLimits(max_calls=None)}


def budget(**fields: Any) -> Budget:
    return Budget(
        **{"max_cost": "1", "max_tool_calls": 100_000, "max_repeats": 100_000, "classes": OPEN}
        | fields
    )


def shared_guard(store: Any, task: str, ran: list[str]) -> tuple[RunGuard, Any]:
    guard = RunGuard(task, budget=budget(), journal=store, shared=True)

    @guard.tool("search", cost="0.01")
    def search(q: str) -> dict[str, str]:
        ran.append(q)
        return {"hits": q}

    return guard, search


def open_kind(kind: str, target: str) -> Any:
    """The store; a test server's Redis keeps no append-only file: its journal is volatile."""
    # Patient round trips: a loaded machine's slow answer is no outage.
    options: dict[str, Any] = {"timeout": 10.0}
    if kind.startswith("redis"):
        options = {"volatile_journal": True, "socket_timeout": 10.0}
    return make_store(kind, target, **options)


def spend(kind: str, target: str, task: str, start_ns: int) -> tuple[int, int]:
    """In a worker process: threads call a $0.01 tool of one shared run; (ran, refused)."""
    store = open_kind(kind, target)
    ran: list[str] = []
    refused = [0]
    # Each call asks for something new: the same questions from four processes of one
    # run are a loop (the run's cycle rule stops it), not the budget this test measures.
    me = uuid.uuid4().hex[:8]
    lock = threading.Lock()
    try:
        guard, search = shared_guard(store, task, ran)

        def work(n: int) -> None:
            sleep_until(start_ns)
            for i in range(CALLS):
                answer = search(q=f"{me}-{n}-{i}")
                for _ in range(50):  # the store was busy (fail closed): ask again
                    if answer.get("condition") != "budget-unavailable":
                        break
                    answer = search(q=f"{me}-{n}-{i}")
                if "hits" not in answer:
                    with lock:
                        refused[0] += 1

        threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        guard.stop_packet()  # writes what a busy store left in the outbox
        assert guard.shared is not None
        assert guard.shared.pending == 0
        return len(ran), refused[0]
    finally:
        store.close()


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as workers:
        workers.map(warm, [0.5] * PROCESSES, chunksize=1)
        yield workers
        workers.close()
        workers.join()


def test_processes_of_one_run_spend_one_budget(pool, kind, target):
    """4 processes x 4 threads call a $0.01 tool of one run under $1: exactly 100 calls
    run in all, every other is refused before it runs, and the store's record says $1."""
    task = f"task-{uuid.uuid4().hex[:8]}"
    start = time.monotonic_ns() + 500_000_000
    results = pool.starmap(spend, [(kind, target, task, start)] * PROCESSES, chunksize=1)
    ran = sum(r for r, _ in results)
    refused = sum(f for _, f in results)
    assert ran == 100
    assert ran + refused == PROCESSES * THREADS * CALLS
    store = open_kind(kind, target)
    try:
        packet = RunGuard(task, journal=store, shared=True).stop_packet()
    finally:
        store.close()
    assert packet.counters["cost"] == "1"
    assert packet.counters["calls"] == 100
    assert packet.counters["reserved"] == "0"


def test_guards_that_join_a_run_take_its_budget_and_an_extension_reaches_them(tmp_path):
    """The budget is the run's: a guard built with another takes the one in the store,
    and an operator's extension through one guard reaches every other."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        first, search = shared_guard(one, "t", [])
        other = RunGuard("t", budget=budget(max_cost="50"), journal=two, shared=True)
        for n in range(100):
            search(q=str(n))
        assert "hits" not in search(q="one more")
        assert first.stopped is not None
        assert first.stopped.condition == "max-cost"
        packet = other.stop_packet()  # the store's view: stopped, its budget $1
        assert packet.condition == "max-cost"
        assert other.budget.max_cost == Decimal("1")
        other.extend(by="ops", why="the user approved $0.50 more", max_cost="1.5")
        assert first.stop_packet().condition == "running"
        assert first.budget.max_cost == Decimal("1.5")
        ran = [search(q=f"more-{n}") for n in range(60)]
        assert sum("hits" in r for r in ran) == 50


@pytest.fixture
def durable_redis(redis_binary: str, tmp_path) -> Iterator[Any]:
    """A server of the test's own that keeps what it holds through a stop and a start."""
    from stores.conftest import RedisServer

    server = RedisServer(redis_binary, tmp_path, "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    yield server
    server.stop()


def test_a_store_that_is_down_admits_nothing_and_loses_no_outcome(durable_redis):
    """Fail closed: while Redis is stopped no call is admitted (budget-unavailable), and
    a call that was running when it stopped is settled in the store once it is back."""
    from toolbreaker.stores import RedisStore

    private_redis = durable_redis
    store = RedisStore(private_redis.url, socket_timeout=2.0)
    try:
        guard = RunGuard("t", budget=budget(), journal=store, shared=True)
        release = threading.Event()
        started = threading.Event()

        @guard.tool("slow", cost="0.25")
        def slow() -> dict[str, str]:
            started.set()
            release.wait(60)
            return {"hits": "done"}

        @guard.tool("search", cost="0.01")
        def search(q: str) -> dict[str, str]:
            return {"hits": q}

        assert "hits" in search(q="a")
        worker = threading.Thread(target=slow)
        worker.start()
        assert started.wait(60)
        private_redis.stop()
        answer = search(q="b")
        assert answer["condition"] == "budget-unavailable"
        assert "hits" not in answer
        release.set()
        worker.join(60)  # its outcome cannot be written: it waits in the outbox
        assert guard.shared is not None
        assert guard.shared.pending == 1
        assert guard.shared.faults >= 2
        private_redis.start()
        assert "hits" in search(q="c")
        assert guard.shared.pending == 0
        counters = guard.stop_packet().counters
        assert counters["cost"] == "0.27"  # a, slow and c; b never ran
        assert counters["reserved"] == "0"
    finally:
        store.close()


def test_the_model_usage_of_every_process_counts_in_one_budget(tmp_path):
    prices = {"m": ModelPrice("1", "1")}
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        a = RunGuard("t", budget=budget(max_cost="0.01", prices=prices), journal=one, shared=True)
        b = RunGuard("t", budget=budget(max_cost="0.01", prices=prices), journal=two, shared=True)
        a.add_usage("m", input_tokens=3_000, output_tokens=2_000)
        b.add_usage("m", input_tokens=3_000, output_tokens=2_000)
        usage = a.stop_packet().counters["usage"]
        assert usage == [
            {
                "model": "m",
                "input_tokens": 6000,
                "output_tokens": 4000,
                "requests": 2,
                "cost": "0.01",
            }
        ]


def test_an_async_run_never_waits_on_the_store_on_the_loop(tmp_path):
    """Facts fed on the event loop (a usage, a cost) are written from a worker thread,
    and a call's admission through ``acall`` too."""
    from loop_helpers import LoopSpy

    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        spy = LoopSpy(store)
        guard = RunGuard("t", budget=budget(), journal=store, shared=True)

        @guard.tool("search", cost="0.01")
        async def search(q: str) -> dict[str, str]:
            return {"hits": q}

        async def main() -> Any:
            guard.add_cost("0.02")
            guard.add_usage("m", input_tokens=1, output_tokens=1)
            answer = await guard.acall("search", {"q": "x"})
            while guard.shared is not None and guard.shared.pending:
                await asyncio.sleep(0.01)
            return answer

        assert "hits" in asyncio.run(main())
        assert spy.on_loop == []
        assert spy.called("record_put") + spy.called("record_append") >= 2
        assert guard.stop_packet().counters["cost"] == "0.03"


def test_a_shared_run_needs_a_store_with_records_and_a_corrupt_record_admits_nothing(tmp_path):
    class JournalOnly:
        def journal_put(self, *a: Any, **k: Any) -> bool:
            return True

        def journal_get(self, *a: Any) -> None:
            return None

        def journal_entries(self, *a: Any) -> list[Any]:
            return []

    with pytest.raises(PolicyError, match="records"):
        RunGuard("t", journal=JournalOnly(), shared=True)  # type: ignore[arg-type]
    store = MemoryStore()
    store.record_put("toolbreaker.runs", "t", {"schema": "something else"})
    guard, search = shared_guard(store, "t", [])
    answer = search(q="x")
    assert answer["condition"] == "budget-unavailable"
    with pytest.raises(StoreUnavailable):
        guard.extend(by="ops", why="more", max_cost="2")


@pytest.mark.parametrize("task", ["refund\x1b[31m", "a\nb", "t" * 513])
def test_a_task_id_that_is_no_record_key_is_refused_where_the_guard_is_built(task):
    """A shared run lives in a record keyed by its task: a task id no store can key (not
    printable, too long) is a PolicyError naming ``task`` when the guard is built, never a
    ValueError out of its first call; nothing is written."""
    store = MemoryStore()
    with pytest.raises(PolicyError) as info:
        RunGuard(task, journal=store, shared=True)
    assert info.value.field == "task"
    assert "\x1b" not in str(info.value)
    assert "\n" not in str(info.value)
    assert store.record_list(RUNS_SPACE) == []


def test_the_cli_refuses_a_task_id_that_is_no_record_key(tmp_path, capsys):
    """``run show`` of a task id with a terminal escape: one escaped error line, exit 2."""
    url = f"sqlite://{tmp_path / 'runs.db'}"
    with SQLiteStore(tmp_path / "runs.db") as store:
        shared_guard(store, "refund", [])[1](q="x")
    for action in (["show"], ["extend", "--by", "ops", "--why", "w", "--max-cost", "2"]):
        assert main(["run", action[0], "refund\x1b[31m", "--store", url, *action[1:]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith("error: ")
        assert "\x1b" not in err
        assert "\\x1b" in err


def test_the_cli_shows_and_extends_a_shared_run(tmp_path, capsys):
    path = tmp_path / "runs.db"
    url = f"sqlite://{path}"
    with SQLiteStore(path) as store:
        guard, search = shared_guard(store, "task-9", [])
        for n in range(101):
            search(q=str(n))
    assert main(["run", "show", "task-9", "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["condition"] == "max-cost"
    assert shown["counters"]["cost"] == "1"
    # Without --json: the state read against the run's budget, for an operator to decide.
    assert main(["run", "show", "task-9", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"run 'task-9': stopped (max-cost): {shown['detail']}"
    assert lines[1].split() == ["cost", "1", "of", "1", "(0", "reserved)"]
    calls = shown["counters"]["calls"]
    assert lines[2].split()[:4] == ["calls", str(calls), "of", str(budget().max_tool_calls)]
    assert lines[-1].split(maxsplit=1) == ["next", shown["next_safe_action"]]
    code = main(
        [
            "run",
            "extend",
            "task-9",
            "--store",
            url,
            "--max-cost",
            "2",
            "--by",
            "ops",
            "--why",
            "approved",
        ]
    )
    assert code == 0
    extended = capsys.readouterr().out.splitlines()
    assert extended[0].startswith("run 'task-9': running")
    assert extended[1].split()[:4] == ["cost", "1", "of", "2"]  # the raised limit
    with SQLiteStore(path) as store:
        guard, search = shared_guard(store, "task-9", [])
        assert "hits" in search(q="again")
        assert guard.budget.max_cost == Decimal("2")
    # No false all-clear: a task the store has no run of, a store that is not there.
    assert main(["run", "show", "nope", "--store", url]) == 2
    assert "no shared run" in capsys.readouterr().err
    assert main(["run", "show", "task-9", "--store", f"sqlite://{tmp_path}/missing.db"]) == 2


class Counting:
    """A real store whose record reads and writes are counted (refused writes apart)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads = 0
        self.writes = 0
        self.refused = 0

    def record_get(self, space: str, key: str) -> Any:
        self.reads += 1
        return self.store.record_get(space, key)

    def record_put(self, space: str, key: str, value: Any, *, version: Any = None) -> Any:
        written = self.store.record_put(space, key, value, version=version)
        self.writes += 1
        self.refused += written is None
        return written

    # Spelled out: isinstance() against a protocol reads attributes statically on 3.12+,
    # so a __getattr__ that hands them on would not make this a store with records.
    def record_delete(self, space: str, key: str, *, version: Any = None) -> bool:
        return bool(self.store.record_delete(space, key, version=version))

    def record_list(self, space: str) -> Any:
        return self.store.record_list(space)

    def journal_put(self, *args: Any, **kwargs: Any) -> Any:
        return self.store.journal_put(*args, **kwargs)

    def journal_get(self, *args: Any) -> Any:
        return self.store.journal_get(*args)

    def journal_entries(self, *args: Any) -> Any:
        return self.store.journal_entries(*args)

    def journal_durable(self) -> bool:
        return bool(self.store.journal_durable())


def test_a_guard_alone_on_its_run_writes_without_reading_again(tmp_path):
    """The guard writes at the version it wrote last: with no other writer between, an
    admission and an outcome are one compare-and-set each, no read, nothing decoded."""
    with SQLiteStore(tmp_path / "runs.db") as store:
        counting = Counting(store)
        guard, search = shared_guard(counting, "t", [])
        search(q="first")  # reads once: the run's record is made
        reads, writes = counting.reads, counting.writes
        for n in range(10):
            assert "hits" in search(q=str(n))
        assert counting.reads == reads
        assert counting.writes == writes + 20
        assert counting.refused == 0
        assert guard.stop_packet().counters["calls"] == 11


def test_a_write_another_guard_came_before_is_refused_then_read_and_applied(tmp_path):
    """Two guards of one run take turns: each one's write at its stale version is refused
    by the compare-and-set, it reads the other's, and applies its event to that; the
    budget counts every call of both, once, and refuses the 101st."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        a, b = Counting(one), Counting(two)
        (_, search_a), (_, search_b) = shared_guard(a, "t", []), shared_guard(b, "t", [])
        answers = [(search_a if n % 2 else search_b)(q=str(n)) for n in range(101)]
        assert sum("hits" in x for x in answers) == 100
        assert answers[-1]["condition"] == "max-cost"
        assert a.refused > 0
        assert b.refused > 0
        packet = RunGuard("t", journal=one, shared=True).stop_packet()
        assert packet.counters["calls"] == 100
        assert packet.counters["cost"] == "1"
