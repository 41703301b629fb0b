"""Opening rules, shadow mode and the kill switch through the runtime, against a real service."""

from __future__ import annotations

from typing import Any

import pytest

import toolbreaker
from toolbreaker import Breaker, Policy, Registry
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import FakeClock, Fault, ToolService, capture_transitions, request_json


def search_tool(service: ToolService, breaker: Breaker, clock: FakeClock | None = None) -> Any:
    @breaker.guard(tool="search")
    def search(q: str, took_ms: int = 0) -> dict[str, Any]:
        result = request_json("GET", f"{service.url}/search?q={q}", timeout=1)
        if clock is not None:
            clock.advance(took_ms)  # the call "took" this long on the breaker's clock
        return result

    return search


def test_failure_rate_opens_only_after_the_minimum_volume(service):
    """Three 503s in a row do not open a rate breaker that needs four calls; the fourth
    call makes the volume (75% failures) and opens it even though it succeeded, and the next
    call is rejected without reaching the service."""
    policy = Policy(failure_rate_permille=500, minimum_calls=4, window_calls=10)
    breaker = Breaker("search", policy=policy, timeout=1.0, enforce="cooperative")
    search = search_tool(service, breaker)
    service.inject("GET /search", Fault(status=503), Fault(status=503), Fault(status=503))
    for q in "abc":
        result = search(q)
        assert result["ok"] is False
        assert "tool_unavailable" not in result
    assert breaker.state.phase == "closed"
    assert "tool_unavailable" not in search("d")
    assert breaker.state.phase == "open"
    assert search("e")["tool_unavailable"] is True
    assert service.hits["GET /search"] == 4
    assert breaker.stats.opens == {"failure-rate": 1}


def test_slow_successes_open_and_the_transition_names_the_duration(service):
    """A success slower than slow_call_ms is recorded as slow (with its duration); enough of
    them open the breaker."""
    clock = FakeClock()
    policy = Policy(slow_call_ms=200, slow_call_rate_permille=500, minimum_calls=2, window_calls=4)
    breaker = Breaker("search", policy=policy, timeout=1.0, enforce="cooperative", clock=clock)
    search = search_tool(service, breaker, clock)
    with capture_transitions(breaker) as records:
        search("fast", took_ms=10)
        search("slow", took_ms=250)
    assert breaker.state.phase == "open"
    outcomes = [r for r in records if r.event.type == "success"]
    assert [(r.reason, r.event.duration_ms) for r in outcomes] == [
        ("success", 10),
        ("slow-call-rate", 250),
    ]


def test_events_carry_no_duration_without_a_slow_call_rule(service):
    """Without slow_call_ms, success events are what they always were."""
    breaker = Breaker("search", timeout=1.0, enforce="cooperative")
    with capture_transitions(breaker) as records:
        search_tool(service, breaker)("x")
    assert all(r.event.duration_ms is None for r in records)


def test_shadow_mode_admits_every_call_and_counts_what_it_would_reject(service):
    """In shadow mode the breaker opens and records, but every call reaches the service and
    the model reads the service's own errors, never a tool-unavailable result."""
    policy = Policy(failure_threshold=2, mode="shadow")
    breaker = Breaker("search", policy=policy, timeout=1.0, enforce="cooperative")
    search = search_tool(service, breaker)
    service.outage("GET /search")
    results = [search(str(n)) for n in range(5)]
    assert service.hits["GET /search"] == 5
    assert not any(r.get("tool_unavailable") for r in results)
    assert breaker.state.phase == "open"
    assert breaker.stats.rejected == 0
    assert breaker.stats.to_dict()["would_reject"] == 3
    service.recover("GET /search")
    assert search("ok").get("ok") is not False


def test_a_sheet_row_forced_open_rejects_with_the_operators_reason(service):
    """A row forced open in the sheet never reaches the service; the model reads the
    operator's reason and no time to wait for."""
    registry = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative"},
            "search": {"read": {"force": "open", "force_reason": "incident 12: bad results"}},
        }
    )
    search = search_tool(service, registry.get("search", "read"))
    result = search("q")
    assert result["tool_unavailable"] is True
    assert result["reason"] == "isolated"
    assert result["retry_after_seconds"] is None
    assert result["operator_reason"] == "incident 12: bad results"
    assert "incident 12: bad results" in result["instruction"]
    with pytest.raises(CircuitOpen) as info:
        registry.get("search", "read").call(lambda: 1)
    assert info.value.reason == "forced-open"
    assert service.hits.get("GET /search", 0) == 0


def test_a_sheet_row_forced_closed_keeps_calling_an_open_dependency(service):
    """A row forced closed admits calls the breaker would reject, and counts them."""
    registry = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative"},
            "search": {"read": {"force": "closed", "failure_threshold": 1}},
        }
    )
    breaker = registry.get("search", "read")
    search = search_tool(service, breaker)
    service.outage("GET /search")
    for n in range(3):
        assert "tool_unavailable" not in search(str(n))
    assert service.hits["GET /search"] == 3
    assert breaker.stats.would_reject == 2


def test_a_bad_mode_in_the_sheet_names_the_row_and_field():
    """mode and force are validated with the row's fields."""
    with pytest.raises(PolicyError) as info:
        Registry.from_dict({"search": {"read": {"mode": "dry-run", "timeout_ms": 1000}}})
    assert info.value.field == "search.read.mode"


def test_a_fleet_kill_switch_in_the_store_survives_a_restart(service, tmp_path):
    """An operator's isolation is persisted in the shared store with its reason: a breaker
    built later on the same store (a restarted process) rejects and tells the model why,
    until a release."""
    path = tmp_path / "breakers.db"
    with SQLiteStore(path) as first:
        Breaker("search", store=first, timeout=1.0).isolate("incident 7: wrong prices")
    with SQLiteStore(path) as restarted:
        breaker = Breaker("search", store=restarted, timeout=1.0, enforce="cooperative")
        result = search_tool(service, breaker)("q")
        assert result["reason"] == "isolated"
        assert result["operator_reason"] == "incident 7: wrong prices"
        assert service.hits.get("GET /search", 0) == 0
        breaker.release()
        assert "tool_unavailable" not in search_tool(service, breaker)("q")


def test_a_fleet_forced_close_keeps_calls_flowing_for_every_process(service, tmp_path):
    """force_close() is persisted: another process's breaker on the same store admits the
    calls it would reject while open, and counts them."""
    path = tmp_path / "breakers.db"
    policy = Policy(failure_threshold=1)
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        Breaker("search", store=one, policy=policy, timeout=1.0).force_close("rollout")
        breaker = Breaker("search", store=two, policy=policy, timeout=1.0, enforce="cooperative")
        search = search_tool(service, breaker)
        service.outage("GET /search")
        results = [search(str(n)) for n in range(3)]
        assert not any(r.get("tool_unavailable") for r in results)
        assert service.hits["GET /search"] == 3
        assert breaker.stats.would_reject == 2
        assert breaker.state.forced_closed


# -- per-tenant scoping ----------------------------------------------------------------


def tenant_registry(**row: Any) -> Registry:
    return Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative"},
            "search": {"read": {"scope": "tenant", "failure_threshold": 1, **row}},
        }
    )


def test_one_tenants_failures_do_not_open_the_breaker_for_everyone(service):
    """A row scoped by tenant keys one breaker per tenant: acme's outage opens acme's."""
    breaker = tenant_registry().get("search", "read")
    search = search_tool(service, breaker)
    service.inject("GET /search", Fault(status=503))
    with toolbreaker.scope(tenant="acme"):
        assert search("a")["tool_unavailable"] is True  # the failure that opened it
        assert search("b")["tool_unavailable"] is True
    with toolbreaker.scope(tenant="globex"):
        assert "tool_unavailable" not in search("c")
    assert service.hits["GET /search"] == 2
    children = breaker.scopes()
    assert children["acme"].state.phase == "open"
    assert children["acme"].key == "search[tenant=acme]:read"
    assert children["globex"].state.phase == "closed"
    assert breaker.state.phase == "closed"  # calls without a tenant use the row's own


def test_the_scope_limit_never_drops_an_open_breaker(service):
    """At max_scopes the least recently used closed breaker is forgotten; when every live
    one is open, a new tenant shares the overflow breaker, counted, and none is dropped."""
    breaker = tenant_registry(max_scopes=2).get("search", "read")
    search = search_tool(service, breaker)
    service.inject("GET /search", Fault(status=503), Fault(status=503))
    for tenant in ("a", "b"):
        with toolbreaker.scope(tenant=tenant):
            search("q")
    with toolbreaker.scope(tenant="c"):
        assert "tool_unavailable" not in search("q")
    assert sorted(breaker.scopes()) == ["a", "b"]
    assert breaker.stats.scope_overflows == 1
    assert all(b.state.phase == "open" for b in breaker.scopes().values())
    breaker.scopes()["a"].release()
    with toolbreaker.scope(tenant="d"):
        search("q")
    assert sorted(breaker.scopes()) == ["b", "d"]  # a was closed: forgotten, state kept


def test_secret_looking_scope_values_are_digested_in_keys():
    """A scope value that is not a short plain name (an API key) never appears in a key."""
    breaker = Breaker("llm", timeout=1.0, scope="api_key", enforce="cooperative")
    value = "sk-proj AbCdEf/0123456789"
    assert breaker.for_scope(value).key.startswith("llm[api_key=sha256:")
    assert value not in breaker.for_scope(value).key
    assert breaker.for_scope() is breaker


def test_a_bad_scope_in_the_sheet_names_the_field():
    """scope must be a name and max_scopes a positive integer."""
    with pytest.raises(PolicyError) as info:
        tenant_registry(scope="tenant id")
    assert info.value.field == "search.read.scope"
    with pytest.raises(PolicyError) as info:
        tenant_registry(max_scopes=0)
    assert info.value.field == "search.read.max_scopes"


def test_a_run_guard_uses_the_tenants_breaker(service):
    """RunGuard admits and settles through the scoped breaker of the current tenant."""
    from toolbreaker import RunGuard

    breaker = Breaker(
        "search",
        scope="tenant",
        policy=Policy(failure_threshold=1),
        timeout=1.0,
        enforce="cooperative",
    )
    guard = RunGuard("task-1")

    @guard.tool(breaker=breaker)
    def search(q: str) -> dict[str, Any]:
        return request_json("GET", f"{service.url}/search?q={q}", timeout=1)

    service.inject("GET /search", Fault(status=503))
    with toolbreaker.scope(tenant="acme"):
        assert guard.call("search", {"q": "a"})["tool_unavailable"] is True
    assert breaker.scopes()["acme"].state.phase == "open"
    assert breaker.state.phase == "closed"


# -- hiding open tools -----------------------------------------------------------------


def test_what_is_hidden_and_until_when():
    """Open and cooling down: hidden until the probe; isolated or forced open: hidden until
    an operator acts; closed, half-open or in shadow mode: never hidden."""
    clock = FakeClock()
    breaker = Breaker("search", policy=Policy(failure_threshold=1), timeout=1.0, clock=clock)
    assert breaker.hidden_for_ms() == (False, None)
    breaker.allow().record("failure")
    assert breaker.hidden_for_ms() == (True, 20_000)
    clock.advance(20_000)
    breaker.allow()  # the probe: half-open
    assert breaker.hidden_for_ms() == (False, None)
    breaker.isolate("incident 7")
    assert breaker.hidden_for_ms() == (True, None)
    forced = Breaker("search", policy=Policy(force="open"), timeout=1.0)
    assert forced.hidden_for_ms() == (True, None)
    shadow = Breaker("s", policy=Policy(failure_threshold=1, mode="shadow"), timeout=1.0)
    shadow.allow().record("failure")
    assert shadow.hidden_for_ms() == (False, None)


def test_the_hidden_tools_line_names_each_tool_and_when_it_is_back():
    """One line, tools sorted, whole seconds rounded up, no line when nothing is hidden."""
    line = toolbreaker.runtime.hidden_tools_line({"search": 1500, "charge_card": None})
    assert '"charge_card" (until an operator restores it), "search" (for about 2 more' in line
    assert toolbreaker.runtime.hidden_tools_line({}) == ""
