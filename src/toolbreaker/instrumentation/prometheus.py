"""Prometheus metrics for every breaker of a registry (the ``prometheus`` extra).

Usage::

    from prometheus_client import start_http_server
    from toolbreaker.instrumentation.prometheus import register

    register(registry)          # every breaker it holds, scoped ones too
    deferred = register_guards()
    deferred.attach(guard)      # each RunGuard, while its run lasts
    start_http_server(9108)

The collector reads each breaker's counters and state when Prometheus scrapes, so guarded
calls pay nothing for it; it reads the breakers the registry holds at that moment (those
made since the last scrape too). A scoped row's calls are counted by its tenants'
breakers: they are folded into the row's series (:meth:`~toolbreaker.Breaker.family_stats`),
so the labels stay the sheet's rows however many tenants call, and a tenant's outage
shows on its row. Demand and admitted attempts are separate series on purpose: an open
breaker suppresses calls, so total failures alone would make it look healthier.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from toolbreaker import RunGuard
from toolbreaker._extras import require
from toolbreaker.errors import StoreUnavailable
from toolbreaker.instrumentation._kit import PHASES, Target, breakers_of, redact_text

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "register",
    "register_guards",
]

_LABELS = ("dependency", "operation", "tool")
#: The most tool labels a :class:`DeferredCollector` keeps; later ones count as ``other``.
MAX_TOOL_LABELS: Final = 1000


class BreakerCollector:
    """A Prometheus collector for every breaker of a :class:`~toolbreaker.Registry`.

    ``registry`` may also be a run guard (its tools' breakers), a breaker or breakers;
    the breakers are read at each scrape (``breakers_of``), so
    breakers made later are exported too. A scoped row is one series per metric: its
    counters are the sum over its tenants' breakers, the ones it has forgotten included
    (:meth:`~toolbreaker.Breaker.family_stats`), so they never go back.

    Series (``namespace`` prefix, ``toolbreaker`` by default; labels ``dependency``,
    ``operation``, ``tool``):

    - ``_requests_total``, ``_admitted_total``, ``_rejected_total``: demand, calls that
      reached the dependency, local rejections;
    - ``_would_reject_total``: requests admitted only because the row is in shadow mode or
      forced closed (only for such breakers, or once non-zero);
    - ``_failures_total{class}``: failed outcomes by class (``http-503``, ``timeout`` ...);
    - ``_unclassified_total{exception}``: outcomes the classifier did not know, by
      exception type (``MyAPIError``): they never count toward opening, so a breaker that
      stays closed while this grows needs a classifier that knows the type;
    - ``_opens_total{reason}``: openings by the reason of the opening transition;
    - ``_state{state}``: 1 for the breaker's current phase, 0 for the others (a state set;
      absent while the store cannot be read); for a scoped row, 1 for each phase one of
      its breakers is in (``open`` beside ``closed`` while some tenants' breakers are open);
    - ``_scoped_breakers{state}``: for a scoped row, how many of its live breakers are in
      each phase (one per tenant kept, the shared overflow one, the row's own);
    - ``_time_in_state_seconds_total{state}``, ``_late_results_total``,
      ``_half_open_reopen_ratio``;
    - ``_degraded_total{mode}``: answers served by the degradation matrix (``stale``,
      ``queue`` ...), once a breaker has served one.
    """

    def __init__(self, registry: Target, *, namespace: str = "toolbreaker") -> None:
        self._prom = require("prometheus_client.core", "prometheus")
        breakers_of(registry)  # refuses a target that holds no breakers, at once
        self.registry = registry
        self.namespace = namespace

    def describe(self) -> list[Metric]:
        """Nothing up front: the series depend on the breakers that exist at scrape time."""
        return []

    def collect(self) -> Iterator[Metric]:  # noqa: PLR0915 - every series declared in one place
        """Yield one family per series, with a sample per breaker."""
        core = self._prom
        name = self.namespace
        counter = core.CounterMetricFamily
        gauge = core.GaugeMetricFamily
        requests = counter(
            f"{name}_requests", "Requests to the breaker, admitted or not.", labels=_LABELS
        )
        admitted = counter(
            f"{name}_admitted", "Requests that reached the dependency.", labels=_LABELS
        )
        rejected = counter(f"{name}_rejected", "Requests rejected locally.", labels=_LABELS)
        would = counter(
            f"{name}_would_reject",
            "Requests admitted only by shadow mode or a forced close.",
            labels=_LABELS,
        )
        saturated = counter(
            f"{name}_saturated",
            "Requests answered at once because the bulkhead or the worker pool was full.",
            labels=_LABELS,
        )
        faults = counter(
            f"{name}_record_faults",
            "Store faults behind a bulkhead or a shared retry budget (the call was denied "
            "or not retried).",
            labels=_LABELS,
        )
        late = counter(
            f"{name}_late_results", "Results that arrived after their deadline.", labels=_LABELS
        )
        failures = counter(
            f"{name}_failures", "Failed outcomes by class.", labels=(*_LABELS, "class")
        )
        unclassified = counter(
            f"{name}_unclassified",
            "Exceptions the classifier did not know, by type (never counted toward opening).",
            labels=(*_LABELS, "exception"),
        )
        opens = counter(f"{name}_opens", "Openings by reason.", labels=(*_LABELS, "reason"))
        retries = counter(
            f"{name}_retry_decisions",
            "Retry decisions by reason (retry, budget-exhausted, max-attempts, model-retry ...).",
            labels=(*_LABELS, "reason"),
        )
        budget = gauge(
            f"{name}_retry_budget",
            "Retries left in the retry budget (a shared one as this process last saw it).",
            labels=_LABELS,
        )
        spent = counter(
            f"{name}_time_in_state_seconds", "Time spent in each state.", labels=(*_LABELS, "state")
        )
        state = gauge(
            f"{name}_state", "1 for the current state of the breaker.", labels=(*_LABELS, "state")
        )
        degraded = counter(
            f"{name}_degraded",
            "Answers served by the degradation matrix, by mode.",
            labels=(*_LABELS, "mode"),
        )
        ratio = gauge(
            f"{name}_half_open_reopen_ratio",
            "Share of half-open episodes that reopened.",
            labels=_LABELS,
        )
        scoped = gauge(
            f"{name}_scoped_breakers",
            "Live breakers of a scoped row in each state.",
            labels=(*_LABELS, "state"),
        )
        for breaker in breakers_of(self.registry, scopes=False):
            shown = breaker.shown  # the names masked where the breaker was built
            labels = [shown.dependency, shown.operation, shown.tool]
            members = breaker.family()
            stats = breaker.family_stats()
            requests.add_metric(labels, stats.demand)
            admitted.add_metric(labels, stats.admitted)
            rejected.add_metric(labels, stats.rejected)
            if stats.would_reject or breaker.policy.admits_all:
                would.add_metric(labels, stats.would_reject)
            late.add_metric(labels, stats.late_results)
            saturated.add_metric(labels, stats.saturated)
            if stats.record_faults:
                faults.add_metric(labels, stats.record_faults)
            ratio.add_metric(labels, stats.half_open_reopen_ratio)
            _each(failures, labels, stats.failures)
            _each(unclassified, labels, {redact_text(k): n for k, n in stats.unclassified.items()})
            _each(opens, labels, stats.opens)
            _each(retries, labels, stats.retries)
            _each(degraded, labels, stats.degraded)
            # The scarcest budget of the row's breakers: the tenant closest to no retries.
            left = [b.milli for b in (m.retry_budget for m in members) if b is not None]
            if left:
                budget.add_metric(labels, min(left) / 1000)
            for phase, ms in sorted(stats.time_in_state_ms.items()):
                spent.add_metric([*labels, phase], ms / 1000)
            phases = [p for p in map(_phase, members) if p is not None]
            if phases:
                for phase in PHASES:
                    state.add_metric([*labels, phase], 1.0 if phase in phases else 0.0)
            if breaker.boundary.scope is not None:
                for phase in PHASES:
                    scoped.add_metric([*labels, phase], phases.count(phase))
        yield from (
            requests,
            admitted,
            rejected,
            would,
            saturated,
            faults,
            late,
            failures,
            unclassified,
            opens,
            retries,
            degraded,
            budget,
            spent,
            state,
            scoped,
            ratio,
        )


def _phase(breaker: Any) -> str | None:
    try:
        phase: str = breaker.state.phase
    except StoreUnavailable:
        return None
    return phase


def register(
    registry: Target,
    prometheus_registry: CollectorRegistry | None = None,
    *,
    namespace: str = "toolbreaker",
) -> BreakerCollector:
    """Register a :class:`BreakerCollector` of ``registry`` and return it.

    ``registry`` is a toolbreaker registry (or a run guard, a breaker, breakers); its
    breakers are read at every scrape. It goes on the default Prometheus registry unless
    another is given.
    """
    collector = BreakerCollector(registry, namespace=namespace)
    target = prometheus_registry or require("prometheus_client", "prometheus").REGISTRY
    target.register(collector)
    return collector


class DeferredCollector:
    """Calls the per-turn limit deferred, from the run guards' notices.

    Series: ``<namespace>_deferred_total{tool}`` (tool names masked; past
    :data:`MAX_TOOL_LABELS` distinct names, ``other``). Run guards come and go with their
    runs: :meth:`attach` each one; the totals outlive them. Saturated calls are counted
    per breaker by :class:`BreakerCollector` (``_saturated_total``).
    """

    def __init__(self, *, namespace: str = "toolbreaker") -> None:
        self._prom = require("prometheus_client.core", "prometheus")
        self.namespace = namespace
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def attach(self, guard: RunGuard) -> Callable[[], None]:
        """Count ``guard``'s deferred calls from now on; returns a detacher."""
        return guard.notices.add_listener(self)

    def __call__(self, record: Mapping[str, Any]) -> None:
        """Count one notice (run guard notice listener signature)."""
        if record.get("schema") != "toolbreaker.limit/v1" or record.get("kind") != "deferred":
            return
        tool = redact_text(str(record.get("tool", "")))
        with self._lock:
            if tool not in self._counts and len(self._counts) >= MAX_TOOL_LABELS:
                tool = "other"
            self._counts[tool] = self._counts.get(tool, 0) + 1

    def describe(self) -> list[Metric]:
        """Nothing up front: the series depend on the tools deferred so far."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield the deferred-calls family, a sample per tool."""
        deferred = self._prom.CounterMetricFamily(
            f"{self.namespace}_deferred",
            "Tool calls deferred to a later model turn by max_calls_per_turn.",
            labels=("tool",),
        )
        with self._lock:
            counts = sorted(self._counts.items())
        for tool, count in counts:
            deferred.add_metric([tool], count)
        yield deferred


def register_guards(
    prometheus_registry: CollectorRegistry | None = None, *, namespace: str = "toolbreaker"
) -> DeferredCollector:
    """Register a :class:`DeferredCollector` (attach run guards to it) and return it.

    It goes on the default Prometheus registry unless another is given.
    """
    collector = DeferredCollector(namespace=namespace)
    target = prometheus_registry or require("prometheus_client", "prometheus").REGISTRY
    target.register(collector)
    return collector


def _each(family: Any, labels: list[str], counts: Mapping[str, int]) -> None:
    """A sample of ``family`` per key of ``counts``, the key as its last label."""
    for key, count in sorted(counts.items()):
        family.add_metric([*labels, key], count)
