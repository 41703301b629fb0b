"""Prometheus collector against the real prometheus_client."""

from __future__ import annotations

import pytest

from toolbreaker import Policy, Registry, scope
from toolbreaker.testing import FakeClock

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from toolbreaker.instrumentation.prometheus import register  # noqa: E402


class Unavailable(Exception):
    status_code = 503


def samples(prom: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(prom).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_counters_and_state_of_every_breaker():
    """Demand, admissions, rejections, failures by class, openings and the state set."""
    clock = FakeClock()
    breakers = Registry(
        Policy(failure_threshold=2), clock=clock, default_timeout=1.0, default_enforce="cooperative"
    )
    search = breakers.get("search", "read", tool="search_catalog")
    breakers.get("orders", "read").call(lambda: "ok")

    def fail() -> None:
        raise Unavailable

    for _ in range(2):
        with pytest.raises(Unavailable):
            search.call(fail)
    with pytest.raises(Exception, match="rejected"):
        search.call(fail)
    clock.advance(5_000)

    prom = CollectorRegistry()
    register(breakers, prom)
    got = samples(prom)
    labels = (("dependency", "search"), ("operation", "read"), ("tool", "search_catalog"))
    assert got[("toolbreaker_requests_total", labels)] == 3
    assert got[("toolbreaker_admitted_total", labels)] == 2
    assert got[("toolbreaker_rejected_total", labels)] == 1
    assert got[("toolbreaker_failures_total", (("class", "http-503"), *labels))] == 2
    assert (
        got[("toolbreaker_opens_total", (*labels[:2], ("reason", "qualifying-failure"), labels[2]))]
        == 1
    )
    assert got[("toolbreaker_state", (*labels[:2], ("state", "open"), labels[2]))] == 1
    assert got[("toolbreaker_state", (*labels[:2], ("state", "closed"), labels[2]))] == 0
    orders = (("dependency", "orders"), ("operation", "read"), ("tool", "orders"))
    assert got[("toolbreaker_state", (*orders[:2], ("state", "closed"), orders[2]))] == 1


def test_breakers_created_later_appear_at_the_next_scrape():
    """The collector reads the registry at scrape time."""
    breakers = Registry(default_timeout=1.0)
    prom = CollectorRegistry()
    register(breakers, prom, namespace="agent")
    assert not any(name == "agent_requests_total" for name, _ in samples(prom))
    breakers.get("late")
    assert any(name == "agent_requests_total" for name, _ in samples(prom))


def test_retry_decisions_and_the_budget_are_exported():
    """Retry decisions by reason (budget exhaustion is its own) and the budget left."""
    clock = FakeClock()
    breakers = Registry(Policy(failure_threshold=5), clock=clock, default_enforce="cooperative")
    search = breakers.get(
        "search", "read", timeout=1.0, retry={"max_attempts": 3, "budget": 1, "base_ms": 1}
    )

    def fail() -> None:
        raise Unavailable

    with pytest.raises(Unavailable):
        search.call(fail)
    prom = CollectorRegistry()
    register(breakers, prom)
    got = samples(prom)
    labels = {"dependency": "search", "operation": "read", "tool": "search"}

    def key(name: str, **extra: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted({**labels, **extra}.items()))

    assert got[key("toolbreaker_retry_decisions_total", reason="retry")] == 1
    assert got[key("toolbreaker_retry_decisions_total", reason="budget-exhausted")] == 1
    assert got[key("toolbreaker_retry_budget")] == 0


def test_shadow_breakers_export_what_they_would_have_rejected():
    """A breaker in shadow mode exports _would_reject_total; others do not have the series."""
    breakers = Registry(
        Policy(failure_threshold=1, mode="shadow"),
        clock=FakeClock(),
        default_timeout=1.0,
        default_enforce="cooperative",
    )
    search = breakers.get("search")
    search.allow().record("failure")
    for _ in range(3):
        search.call(lambda: "ok")
    enforced = Registry(Policy(), default_timeout=1.0, default_enforce="cooperative")
    enforced.get("orders").call(lambda: "ok")
    prom = CollectorRegistry()
    register(breakers, prom)
    register(enforced, prom)
    got = samples(prom)
    labels = (("dependency", "search"), ("operation", "default"), ("tool", "search"))
    assert got[("toolbreaker_would_reject_total", labels)] == 3
    assert got[("toolbreaker_rejected_total", labels)] == 0
    assert not any(
        name == "toolbreaker_would_reject_total" and "orders" in str(found) for name, found in got
    )


def test_degraded_answers_are_counted_by_mode():
    """``_degraded_total{mode}`` counts what the degradation matrix served."""
    breakers = Registry(default_timeout=1.0)
    tickets = breakers.get("tickets", "write", degrade=["handoff"])
    tickets.isolate()
    tickets.begin("create_ticket", {"title": "t"})
    prom = CollectorRegistry()
    register(breakers, prom)
    labels = (("dependency", "tickets"), ("mode", "handoff"), ("operation", "write"))
    assert samples(prom)[("toolbreaker_degraded_total", (*labels, ("tool", "tickets")))] == 1


def _scoped(**row: object) -> Registry:
    return Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative", "failure_threshold": 1},
            "llm": {"chat": {"scope": "tenant", **row}},
        }
    )


LLM = (("dependency", "llm"), ("operation", "chat"), ("tool", "llm"))


def _llm(name: str, **extra: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({**dict(LLM), **extra}.items()))


def test_a_scoped_rows_calls_are_counted_in_the_rows_series():
    """Issue 22: 1,001 calls from 1,001 tenants (one more than the row keeps breakers
    for) are the row's demand: ``dependency="llm"`` counts them all, and no series is
    labelled with a tenant (the labels stay the sheet's rows)."""
    breakers = _scoped()
    prom = CollectorRegistry()
    register(breakers, prom)
    llm = breakers.get("llm", "chat")
    for n in range(1001):
        with scope(tenant=f"t{n}"):
            assert llm.call(lambda: "ok") == "ok"
    got = samples(prom)
    assert got[_llm("toolbreaker_requests_total")] == 1001
    assert got[_llm("toolbreaker_admitted_total")] == 1001
    assert got[_llm("toolbreaker_rejected_total")] == 0
    assert {dict(labels)["dependency"] for _, labels in got} == {"llm"}
    assert got[_llm("toolbreaker_state", state="closed")] == 1
    assert got[_llm("toolbreaker_state", state="open")] == 0


def test_a_tenants_outage_shows_in_its_rows_series():
    """A tenant's breaker that opens shows on the row: its failure, its opening, the
    local rejection, the row's state set (open, beside the closed breakers of the other
    tenants) and how many of the row's breakers are in each state."""
    breakers = _scoped()
    prom = CollectorRegistry()
    register(breakers, prom)
    llm = breakers.get("llm", "chat")
    with scope(tenant="globex"):
        llm.call(lambda: "ok")
    with scope(tenant="acme"):
        with pytest.raises(Unavailable):
            llm.call(_raise)
        with pytest.raises(Exception, match="rejected"):
            llm.call(_raise)
    got = samples(prom)
    assert got[_llm("toolbreaker_requests_total")] == 3
    assert got[_llm("toolbreaker_rejected_total")] == 1
    assert got[_llm("toolbreaker_failures_total", **{"class": "http-503"})] == 1
    assert got[_llm("toolbreaker_opens_total", reason="qualifying-failure")] == 1
    assert got[_llm("toolbreaker_state", state="open")] == 1
    assert got[_llm("toolbreaker_state", state="closed")] == 1
    assert got[_llm("toolbreaker_scoped_breakers", state="open")] == 1
    # the row's own (calls without a tenant) and globex's
    assert got[_llm("toolbreaker_scoped_breakers", state="closed")] == 2
    assert got[_llm("toolbreaker_time_in_state_seconds_total", state="open")] >= 0


def test_a_scoped_rows_counters_never_go_back_when_its_breakers_are_forgotten():
    """The row keeps two tenants' breakers; the calls of the eight it forgot stay in
    its counters, so a scrape after each call reads a total that only grows."""
    breakers = _scoped(max_scopes=2)
    prom = CollectorRegistry()
    register(breakers, prom)
    llm = breakers.get("llm", "chat")
    totals = []
    for n in range(10):
        with scope(tenant=f"t{n}"):
            llm.call(lambda: "ok")
        totals.append(samples(prom)[_llm("toolbreaker_requests_total")])
    assert totals == list(range(1, 11))
    assert len(llm.scopes()) == 2


def test_calls_on_a_scoped_rows_overflow_breaker_are_the_rows_too():
    """With its one tenant breaker open (never forgotten), the row sends another tenant's
    calls to its shared overflow breaker: they count on the row, and the overflow breaker
    is one of the row's breakers by state."""
    breakers = _scoped(max_scopes=1)
    prom = CollectorRegistry()
    register(breakers, prom)
    llm = breakers.get("llm", "chat")
    with scope(tenant="acme"), pytest.raises(Unavailable):
        llm.call(_raise)
    with scope(tenant="globex"):
        assert llm.call(lambda: "ok") == "ok"
    got = samples(prom)
    assert llm.stats.scope_overflows == 1
    assert got[_llm("toolbreaker_requests_total")] == 2
    assert got[_llm("toolbreaker_admitted_total")] == 2
    assert got[_llm("toolbreaker_scoped_breakers", state="open")] == 1
    assert got[_llm("toolbreaker_scoped_breakers", state="closed")] == 2  # the row's, overflow


def _raise() -> None:
    raise Unavailable


def test_a_run_guards_tools_breakers_are_exported_as_tools_are_added():
    """Registered for a run guard, the collector exports its tools' breakers, those of
    tools added after it was registered included."""
    from toolbreaker import Breaker, RunGuard

    guard = RunGuard("task-1")
    prom = CollectorRegistry()
    register(guard, prom)
    guard.tool("lookup", breaker=Breaker("orders", timeout=1.0, enforce="cooperative"))(
        lambda order: {"order": order}
    )
    guard.call("lookup", {"order": "A-1"})
    labels = (("dependency", "orders"), ("operation", "default"), ("tool", "orders"))
    assert samples(prom)[("toolbreaker_requests_total", labels)] == 1


def test_unclassified_exceptions_are_a_series_by_type():
    """An exception the classifier does not know is counted by its type in
    _unclassified_total, beside the failures (it never counts toward opening)."""

    class MyAPIError(Exception):
        pass

    def fail() -> None:
        raise MyAPIError("no")

    breakers = Registry(default_timeout=1.0, default_enforce="cooperative")
    search = breakers.get("search", "read", tool="search_catalog")
    for _ in range(10):
        with pytest.raises(MyAPIError):
            search.call(fail)
    prom = CollectorRegistry()
    register(breakers, prom)
    got = samples(prom)
    labels = (("dependency", "search"), ("exception", "MyAPIError"))
    labels += (("operation", "read"), ("tool", "search_catalog"))
    assert got[("toolbreaker_unclassified_total", labels)] == 10
    assert search.state.phase == "closed"
