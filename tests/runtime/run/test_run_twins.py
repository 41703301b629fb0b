"""The run guard's sync and async twins run one driver: the same run, the same answers."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorded_runs import budgets, live, recorded_runs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=recorded_runs(), budget=budgets, settle=st.booleans(), breakers=st.booleans())
def test_the_sync_and_the_async_guard_decide_alike(records, budget, settle, breakers):
    """begin/succeeded/failed against abegin/asucceeded/afailed (or call against acall),
    sync tools against coroutine tools, with or without dependency breakers (that open,
    cool down and spend a retry budget on the model's re-calls): every answer the model
    reads, every decision, the counters and the packet are the same."""
    sync = live(records, budget, settle=settle, breakers=breakers)
    on_loop = live(records, budget, settle=settle, coroutines=True, breakers=breakers)
    assert on_loop == sync
