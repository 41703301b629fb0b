"""A breaker's counters, for dashboards and tuning."""

from __future__ import annotations

from typing import Any, Final

from toolbreaker.core._breaker.state import PHASES
from toolbreaker.runtime._breaker._deadline import Workers

__all__ = ["MAX_UNCLASSIFIED_TYPES", "BreakerStats"]

#: The most exception types one breaker counts as unclassified by name (a label each).
MAX_UNCLASSIFIED_TYPES: Final = 64


class BreakerStats:
    """Counters of one breaker, for dashboards and tuning.

    Attributes:
        demand: requests, admitted or not.
        admitted: requests that reached the dependency.
        rejected: requests rejected locally.
        failures: qualifying and other failed outcomes by class (``http-503``, ``timeout``).
        opens: openings by the reason of the transition that opened the breaker.
        reopens_from_half_open: openings that came from a failed or expired probe.
        half_opens: times the breaker went half-open.
        late_results: results that arrived after their deadline (never successes).
        listener_errors: listener calls that raised (logged; the outcome stood).
        hook_errors: classifier or result predicate calls that raised (fail closed).
        saturated: calls denied at once because the bulkhead (``max_concurrent``) was full
            (also counted in ``rejected``); they are never queued.
        hung: sync calls denied at once because calls still running past their deadline
            held as many worker threads as may hang (``max_workers``; also counted in
            ``rejected``); in ``to_dict`` only once non-zero.
        pinned_workers: worker threads held right now by calls still running past their
            deadline (a gauge).
        time_in_state_ms: time spent in each phase, up to the last transition.
        retries: retry decisions by reason: ``retry`` (made), ``budget-exhausted``,
            ``max-attempts``, ``deadline`` ...; ``model-retry`` and
            ``model-retry-refused`` count the model's own re-calls of a failed call.
        would_reject: requests admitted only because the policy is in shadow mode or
            forced closed (enforcement would have rejected them); in ``to_dict`` only
            once non-zero.
        scope_overflows: calls of a scoped row that went to its shared overflow breaker
            because ``max_scopes`` breakers were live and none could be forgotten; in
            ``to_dict`` only once non-zero.
        degraded: answers served by the degradation matrix, per mode (``stale``,
            ``queue`` ...); in ``to_dict`` only once one was served.
        record_faults: faults of the shared store's records behind the bulkhead
            (``max_concurrent``) or the shared retry budget: a slot that could not be
            taken was denied, a retry that could not be paid for was not made; in
            ``to_dict`` only once non-zero.
        unclassified: outcomes the classifier did not know, by exception type (class
            ``unknown-exception:<Type>``, also in ``failures``): they never count toward
            opening; the first of each type is logged. At most
            :data:`MAX_UNCLASSIFIED_TYPES` types, the others under ``other``; in
            ``to_dict`` only once non-empty. Per process, as every counter here.
        on_defaults: not a counter: the breaker runs on the registry's defaults (the
            boundary sheet has no row for it; see :meth:`~toolbreaker.Registry.resolve`);
            in ``to_dict`` only when true.
    """

    __slots__ = (
        "_workers",
        "admitted",
        "degraded",
        "failures",
        "half_opens",
        "hook_errors",
        "hung",
        "late_results",
        "listener_errors",
        "on_defaults",
        "opens",
        "record_faults",
        "rejected",
        "reopens_from_half_open",
        "retries",
        "saturated",
        "scope_overflows",
        "time_in_state_ms",
        "unclassified",
        "would_reject",
    )

    def __init__(self) -> None:
        self.admitted = 0
        self.rejected = 0
        self.failures: dict[str, int] = {}
        self.opens: dict[str, int] = {}
        self.reopens_from_half_open = 0
        self.half_opens = 0
        self.late_results = 0
        self.listener_errors = 0
        self.hook_errors = 0
        self.saturated = 0
        self.hung = 0
        self.would_reject = 0
        self.scope_overflows = 0
        self.record_faults = 0
        self.time_in_state_ms: dict[str, int] = dict.fromkeys(PHASES, 0)
        self.retries: dict[str, int] = {}
        self.degraded: dict[str, int] = {}
        self.unclassified: dict[str, int] = {}
        self.on_defaults = False
        self._workers: Workers | None = None

    def add(self, other: BreakerStats) -> None:
        """Add ``other``'s counters to these, as a scoped row sums its breakers'.

        Every counter, each by key where it has keys; not the workers ``other`` has
        pinned (a gauge of its own threads), nor ``on_defaults`` (not a counter).
        """
        for name in BreakerStats.__slots__:
            if name.startswith("_") or name == "on_defaults":
                continue
            mine, theirs = getattr(self, name), getattr(other, name)
            if isinstance(mine, dict):
                for key, count in theirs.items():
                    mine[key] = mine.get(key, 0) + count
            else:
                setattr(self, name, mine + theirs)

    def follow_workers(self, workers: Workers) -> None:
        """Read ``pinned_workers`` from ``workers`` (the breaker's pool, once started)."""
        self._workers = workers

    def count_record_fault(self) -> None:
        """Count one fault of the shared store's records (the ledger's, the bulkhead's)."""
        self.record_faults += 1

    def count_unclassified(self, name: str) -> bool:
        """Count one outcome of type ``name`` the classifier did not know.

        Returns whether it is the first of its type here (worth a log line).
        """
        found = self.unclassified
        if name not in found and len(found) >= MAX_UNCLASSIFIED_TYPES:
            name = "other"
        first = name not in found
        found[name] = found.get(name, 0) + 1
        return first

    @property
    def pinned_workers(self) -> int:
        """Worker threads held by calls still running past their deadline."""
        return 0 if self._workers is None else self._workers.pinned

    @property
    def demand(self) -> int:
        """Requests, admitted or rejected."""
        return self.admitted + self.rejected

    @property
    def half_open_reopen_ratio(self) -> float:
        """Share of half-open episodes that reopened: above ~0.7 the cooldown is too short."""
        return self.reopens_from_half_open / self.half_opens if self.half_opens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The counters as a JSON-ready dict."""
        out: dict[str, Any] = {
            "demand": self.demand,
            "admitted": self.admitted,
            "rejected": self.rejected,
            "failures": dict(self.failures),
            "opens": dict(self.opens),
            "half_opens": self.half_opens,
            "reopens_from_half_open": self.reopens_from_half_open,
            "half_open_reopen_ratio": self.half_open_reopen_ratio,
            "late_results": self.late_results,
            "listener_errors": self.listener_errors,
            "hook_errors": self.hook_errors,
            "saturated": self.saturated,
            "pinned_workers": self.pinned_workers,
            "time_in_state_ms": dict(self.time_in_state_ms),
            "retries": dict(self.retries),
        }
        if self.would_reject:
            out["would_reject"] = self.would_reject
        if self.scope_overflows:
            out["scope_overflows"] = self.scope_overflows
        if self.degraded:
            out["degraded"] = dict(self.degraded)
        if self.record_faults:
            out["record_faults"] = self.record_faults
        if self.hung:
            out["hung"] = self.hung
        if self.unclassified:
            out["unclassified"] = dict(self.unclassified)
        if self.on_defaults:
            out["on_defaults"] = True
        return out
