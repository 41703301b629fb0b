"""The bulkhead's counters in Prometheus: saturated calls and record faults."""

from __future__ import annotations

import pytest

from toolbreaker import Registry
from toolbreaker.errors import CircuitOpen

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from records_helpers import SharedMemory  # noqa: E402
from toolbreaker.instrumentation.prometheus import register  # noqa: E402


def scrape(prom: CollectorRegistry) -> dict[tuple[str, str], float]:
    text = generate_latest(prom).decode()
    return {
        (sample.name, sample.labels.get("dependency", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_saturated_calls_and_record_faults_are_exported():
    store = SharedMemory()
    registry = Registry(store=store, default_timeout=5, default_enforce="cooperative")
    full = registry.get("search", max_concurrent=1)
    down = registry.get("orders", max_concurrent=1)
    prom = CollectorRegistry()
    register(registry, prom)
    held = full.allow()
    assert held.admitted
    with pytest.raises(CircuitOpen):
        full.call(lambda: "over the limit")
    store.down = True
    with pytest.raises(CircuitOpen):
        down.call(lambda: "store down")
    got = scrape(prom)
    assert got[("toolbreaker_saturated_total", "search")] == 1
    assert got[("toolbreaker_saturated_total", "orders")] == 0
    assert got[("toolbreaker_record_faults_total", "orders")] == 1
    assert ("toolbreaker_record_faults_total", "search") not in got


def test_deferred_calls_of_run_guards_are_exported():
    """``_deferred_total{tool}``: calls the per-turn limit deferred, counted from the run
    guards' notices; the totals outlive the runs, and a masked tool name is the label."""
    from toolbreaker import Budget, GuardedTool, RunGuard
    from toolbreaker.instrumentation.prometheus import register_guards

    prom = CollectorRegistry()
    counter = register_guards(prom)
    for task in ("run-1", "run-2"):
        guard = RunGuard(task, budget=Budget(max_calls_per_turn=1))
        guard.add_tool(GuardedTool(name="search", fn=lambda q: q))
        detach = counter.attach(guard)
        guard.mark_turn(1)
        for q in "abc":
            guard.call("search", {"q": q})
        detach()
        guard.call("search", {"q": "after detach"})  # not counted
    text = generate_latest(prom).decode()
    found = {
        (s.name, s.labels.get("tool")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert found[("toolbreaker_deferred_total", "search")] == 4
