"""The Grafana dashboard in docs/ queries only what the collector exports, with bounded labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toolbreaker import Policy, Registry
from toolbreaker.testing import FakeClock

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from toolbreaker.instrumentation.prometheus import register  # noqa: E402

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "toolbreaker.json"
# Labels a panel may group by: the breaker (dependency and operation) and the bounded
# enumerations the core and classifier define; never tool names, call ids or tenants.
BOUNDED = {"dependency", "operation", "state", "reason", "class"}


class Unavailable(Exception):
    status_code = 503


def exported_series() -> set[str]:
    clock = FakeClock()
    breakers = Registry(
        Policy(failure_threshold=1), clock=clock, default_timeout=1.0, default_enforce="cooperative"
    )
    search = breakers.get("search", "read")

    def fail() -> None:
        raise Unavailable

    with pytest.raises(Unavailable):
        search.call(fail)
    search.guard(lambda: "ok")()
    tenants = Registry.from_dict(
        {"defaults": {"timeout_ms": 1000}, "llm": {"chat": {"scope": "tenant"}}}
    )
    prom = CollectorRegistry()
    register(breakers, prom)
    tenants.get("llm", "chat")
    register(tenants, prom)  # a scoped row has series of its own
    text = generate_latest(prom).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = [t["expr"] for panel in doc["panels"] for t in panel["targets"]]
    found += [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return found


def test_every_query_names_a_metric_the_collector_exports():
    """Each identifier in a query that is not a function, label or variable is a series
    the collector exports (with the _total suffix prometheus_client adds to counters)."""
    series = exported_series()
    assert queries()
    for query in queries():
        bare = re.sub(r"\{[^}]*\}|\[[^]]*\]|\([^()]*\)(?=\s*\()", " ", query)
        names = set(re.findall(r"\b(toolbreaker_[a-z_]+)\b", bare))
        assert names, query
        assert names <= series, (query, names - series)


def test_labels_are_bounded():
    """Panels group by the breaker and bounded enumerations only; variables are the
    dependency and operation."""
    for query in queries():
        for group in re.findall(r"\bby \(([^)]*)\)", query):
            labels = {label.strip() for label in group.split(",")}
            assert labels <= BOUNDED, query
        assert "tool" not in re.findall(r"[a-z_]+(?==~|=)", query), query
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert variables == {"datasource", "dependency", "operation"}
