"""OpenTelemetry listener against the real SDK, with in-memory exporters."""

from __future__ import annotations

import pytest

from toolbreaker import Policy, Registry, scope

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from toolbreaker.instrumentation.opentelemetry import instrument


class Unavailable(Exception):
    status_code = 503


def fail() -> None:
    raise Unavailable


def test_transitions_become_span_events_and_a_counter():
    """The opening transition is an event on the current span and counted by reason."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    breakers = Registry(
        Policy(failure_threshold=1), default_timeout=1.0, default_enforce="cooperative"
    )
    search = breakers.get("search", "read")
    undo = instrument(
        breakers, meter_provider=MeterProvider(metric_readers=[reader]), state_changes_only=True
    )
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("tool call"), pytest.raises(Unavailable):
        search.call(fail)
    undo()
    (span,) = exporter.get_finished_spans()
    (event,) = span.events
    assert event.name == "toolbreaker.transition"
    assert event.attributes["toolbreaker.reason"] == "qualifying-failure"
    assert event.attributes["toolbreaker.to"] == "open"
    assert event.attributes["toolbreaker.policy_version"] == search.policy.version
    points = [
        point
        for metric in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        if metric.name == "toolbreaker.transitions"
        for point in metric.data.data_points
    ]
    assert [(p.attributes["toolbreaker.reason"], p.value) for p in points] == [
        ("qualifying-failure", 1)
    ]
    tracer_provider.shutdown()


def test_breakers_made_after_instrument_are_traced_too():
    """instrument(registry) before any breaker exists: the breakers the registry makes
    later, and a tenant's scoped breaker, are traced and counted from their first call."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    breakers = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative", "failure_threshold": 1},
            "orders": {"read": {"scope": "tenant"}},
        }
    )
    undo = instrument(
        breakers, meter_provider=MeterProvider(metric_readers=[reader]), state_changes_only=True
    )
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("tool call"), pytest.raises(Unavailable):
        breakers.get("search", "read").call(fail)
    with (
        tracer.start_as_current_span("tool call"),
        scope(tenant="acme"),
        pytest.raises(Unavailable),
    ):
        breakers.get("orders", "read").call(fail)
    undo()
    events = [event for span in exporter.get_finished_spans() for event in span.events]
    assert [e.attributes["toolbreaker.dependency"] for e in events] == [
        "search",
        "orders[tenant=acme]",
    ]
    counted = {
        point.attributes["toolbreaker.dependency"]: point.value
        for metric in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        if metric.name == "toolbreaker.transitions"
        for point in metric.data.data_points
    }
    assert counted == {"search": 1, "orders[tenant=acme]": 1}
    tracer_provider.shutdown()
