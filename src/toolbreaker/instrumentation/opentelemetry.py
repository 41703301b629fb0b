"""OpenTelemetry: transitions as span events and a metric (the ``opentelemetry`` extra).

Usage::

    from toolbreaker.instrumentation.opentelemetry import instrument

    instrument(registry)        # every breaker it holds, now and later

A registry is followed: the breakers it makes after ``instrument`` (every adapter's, on a
tool's first call; a tenant's scoped breaker) are traced from their first call. A run
guard (its tools' breakers) and breakers made outside a registry can be instrumented too.
Every transition the core produces for an instrumented breaker becomes an event on the
span that is current when it happens (the tool call's span, if the framework makes one),
and increments ``toolbreaker.transitions`` with the dependency, operation, reason and the
phases it moved between. Attaching a listener routes every request of that breaker
through the core (see :meth:`toolbreaker.Breaker.add_listener`): instrument breakers whose
transitions you want traced, and use the Prometheus collector for plain counters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolbreaker._extras import require
from toolbreaker.core.breaker.state import Transition, changed_phase
from toolbreaker.runtime.breaker._breaker import Breaker
from toolbreaker.runtime.fleet._attach import Attachment, Target

__all__ = ["instrument"]


def instrument(
    breakers: Target,
    *more: Target,
    meter_provider: Any = None,
    state_changes_only: bool = False,
) -> Callable[[], None]:
    """Trace and count the transitions of every breaker the targets hold, now and later.

    Returns a function that undoes it (from the breakers there were and stops following
    the targets).

    Args:
        breakers: a registry (every breaker it holds, now and later), a run guard (its
            tools' breakers, now and later), a breaker or breakers.
        more: more targets of the same kinds (one breaker reached twice is traced once).
        meter_provider: an OpenTelemetry ``MeterProvider``; the global one by default.
        state_changes_only: record only transitions that change the phase.

    Raises:
        PolicyError: a target is none of these.
    """
    trace = require("opentelemetry.trace", "opentelemetry")
    metrics = require("opentelemetry.metrics", "opentelemetry")
    meter = (
        meter_provider.get_meter("toolbreaker")
        if meter_provider is not None
        else metrics.get_meter("toolbreaker")
    )
    counter = meter.create_counter(
        "toolbreaker.transitions", unit="1", description="Transitions of toolbreaker breakers."
    )

    def listener(record: Transition, breaker: Breaker) -> None:
        if state_changes_only and not changed_phase(record):
            return
        attributes = {
            "toolbreaker.dependency": breaker.dependency,
            "toolbreaker.operation": breaker.operation,
            "toolbreaker.tool": breaker.tool,
            "toolbreaker.reason": record.reason,
            "toolbreaker.from": record.from_phase,
            "toolbreaker.to": record.to_phase,
        }
        counter.add(1, attributes)
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(
                "toolbreaker.transition",
                {
                    **attributes,
                    "toolbreaker.attempted": record.attempted,
                    "toolbreaker.rejected": record.rejected,
                    "toolbreaker.generation": record.generation,
                    "toolbreaker.policy_version": record.policy_version or breaker.policy.version,
                },
            )

    return Attachment(transition=listener).attach(breakers, *more)
