"""``guard.call`` of a plain read takes a quiet path: counted in place, the same run.

A read with no breaker, no risk function and no declared cost is fingerprinted and
handed to the run cell (:class:`~toolbreaker.core._run.cell.RunCell`), which counts it in
place when no limit can stop it (``RunGuard._quiet``). Whatever the cell says, the
answers, the state, the stop packet and the clock's readings are those of the general
flow (``RunGuard._calling``), which these tests drive beside it.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from toolbreaker import Budget, RunGuard
from toolbreaker import idempotency_key as running_key
from toolbreaker.core._run import cell as cell_module
from toolbreaker.runtime._flow import drive


class Flaky(Exception):
    """What the flaky read raises."""


def _guard(budget: Budget) -> RunGuard:
    ticks = itertools.count(1000)  # every reading of the clock is a new time
    guard = RunGuard("quiet", budget=budget, clock=lambda: next(ticks))

    @guard.tool()
    def search(q: str) -> Any:
        if q.startswith("retry"):
            return {"error": "busy", "retryable": True}  # the model may try again
        return {"hits": [q.upper()], "request_id": q}

    @guard.tool()
    def flaky(n: int) -> Any:
        if n % 3 == 0:
            raise Flaky(f"call {n} failed")
        return {"n": n}

    @guard.tool(recovery=True)
    def status() -> dict[str, str]:
        return {"status": "ok"}

    return guard


def _calls() -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for i in range(60):
        calls.append(("search", {"q": f"q{i % 23}"}))  # some come back: repeats, loops
        if i % 5 == 0:
            calls.append(("flaky", {"n": i}))
        if i % 7 == 0:
            calls.append(("search", {"q": f"retry-{i % 2}"}))
        if i % 11 == 0:
            calls.append(("status", {}))
    return calls


def _run(budget: Budget, *, general: bool, look: bool) -> dict[str, Any]:
    guard = _guard(budget)
    answers = []
    states = []
    for tool, args in _calls():
        if general:
            answers.append(drive(guard._calling(tool, dict(args))))
        else:
            answers.append(guard.call(tool, args))
        if look:
            states.append(guard.state.to_dict())
    return {
        "answers": answers,
        "states": states,
        "state": guard.state.to_dict(),
        "packet": dataclasses.asdict(guard.stop_packet()),
        "clock": guard.clock(),  # as many readings on both paths
    }


def test_the_quiet_path_runs_as_the_general_flow():
    """Reads that come back (repeats, a loop), failures, answers inviting a retry, a
    recovery read after the stop, and budgets that stop the run at a call count, a
    repeat, a deadline and a turn limit: the same run on both paths, the state read
    after every call or only at the end."""
    budgets = [
        Budget(max_tool_calls=10_000, max_repeats=10_000, loop_cycles=8),
        Budget(),
        Budget(max_tool_calls=40, max_repeats=1),
        Budget(deadline_ms=90, max_repeats=10),
        Budget(max_calls_per_turn=7, max_repeats=10),
    ]
    for budget in budgets:
        general = _run(budget, general=True, look=True)
        for look in (False, True):
            quiet = _run(budget, general=False, look=look)
            assert quiet["answers"] == general["answers"]
            assert quiet["state"] == general["state"]
            assert quiet["packet"] == general["packet"]
            assert quiet["clock"] == general["clock"]
            if look:
                assert quiet["states"] == general["states"]


def test_quiet_reads_are_counted_without_the_run_machine(monkeypatch):
    """Past its first call (which reads the journal for an earlier run's writes), a run
    of distinct reads no limit can stop never asks the run machine."""
    asked: list[str] = []
    apply = cell_module.apply

    def counting(run: Any, event: Any, budget: Budget) -> Any:
        asked.append(event.type)
        return apply(run, event, budget)

    monkeypatch.setattr(cell_module, "apply", counting)
    guard = _guard(Budget(max_tool_calls=1_000))
    guard.call("search", {"q": "first"})
    asked.clear()
    for i in range(300):
        assert guard.call("search", {"q": f"distinct {i}"}) == {
            "hits": [f"DISTINCT {i}"],
            "request_id": f"distinct {i}",
        }
    assert asked == []
    assert guard.state.calls == 301
    assert guard.stop_packet().counters["calls"] == 301


def test_a_read_run_inside_a_write_reads_no_key():
    """A read called from inside a write's tool runs with no key of its own: the write's
    key is not the read's, on the quiet path as on the first (direct) call."""
    guard = RunGuard("nested")
    seen: list[tuple[str, str | None]] = []

    @guard.tool()
    def lookup(q: str) -> str:
        seen.append(("read", running_key()))
        return q

    @guard.tool(risk="reversible_write")
    def send(to: str, idempotency_key: str) -> dict[str, str]:
        seen.append(("write", running_key()))
        for n in range(3):
            guard.call("lookup", {"q": f"{to}-{n}"})
        seen.append(("write again", running_key()))
        return {"id": to}

    assert guard.call("send", {"to": "ann"}) == {"id": "ann"}
    (_, key), *reads, (_, again) = seen
    assert key is not None
    assert again == key
    assert reads == [("read", None)] * 3
    assert running_key() is None
