"""One candidate of ``toolbreaker tune``: a streaming replay that counts what tune shows.

:class:`TuneReplay` is the replay engine's driver fed the trace file by the core's own
fast path (:meth:`~toolbreaker.core._breaker.receipt.Replay.feed_trace`: plain lines
skip the JSON decoder and ``plain_step()`` decides them without building a record), so a
candidate costs about one ``replay --summary``. What it keeps per dependency: remote
attempts, whether a recorded outcome failed, the rejections, its first and last instants
and the records that changed its phase. The opens, time open, half-open episodes and
reopens are :func:`~toolbreaker._tuning._signals.calibrate`'s, fed those records
between a marker of each dependency's first instant and one of its last: of everything
calibrate computes, those four depend on nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from toolbreaker._replaying import StreamingReplay
from toolbreaker._tuning._signals import Signals, calibrate
from toolbreaker.core._breaker.machine import record_flags
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import (
    FAILED_OUTCOMES,
    BreakerState,
    Event,
    Transition,
    changed_phase,
    phase_changed,
)

__all__ = ["TuneReplay"]


class TuneReplay(StreamingReplay):
    """A replay of one candidate that counts, per dependency, what a tune row shows.

    Attributes:
        remote: remote attempts per dependency.
        failing: dependencies with a recorded ``failure`` or ``ambiguous`` outcome.
        rejected: local rejections.
        rejected_succeeded: rejected calls whose recorded outcome is a success.
    """

    def __init__(self, policy: Policy | PolicySheet) -> None:
        super().__init__(policy)
        self.remote: dict[str, int] = {}
        self.failing: set[str] = set()
        self.rejected = 0
        self.rejected_succeeded = 0
        # Per dependency: [first instant, last instant], the phase it began in, and the
        # records that changed its phase as (at, from, to).
        self._spans: dict[str, list[int]] = {}
        self._began: dict[str, str] = {}
        self._changes: dict[str, list[tuple[int, str, str]]] = {}
        self._flags: dict[tuple[str, str], tuple[bool, bool]] = {}

    def _count(  # noqa: PLR0917 - the fields of one record
        self,
        dependency: str,
        kind: str,
        at: int,
        reason: str,
        attempted: bool,
        rejected: bool,
        before: str,
        after: str,
        changed: bool,
    ) -> None:
        span = self._spans.get(dependency)
        if span is None:
            span = self._spans[dependency] = [at, at]
            self._began[dependency] = before
            self._changes[dependency] = []
        span[1] = at
        if attempted:
            self.remote[dependency] = self.remote.get(dependency, 0) + 1
        elif rejected:
            self.rejected += 1
        elif kind in FAILED_OUTCOMES:
            self.failing.add(dependency)
        if reason == "not-admitted" and kind == "success":
            self.rejected_succeeded += 1
        if changed:
            self._changes[dependency].append((at, before, after))

    def _keep(self, ledger: object, dependency: str, records: tuple[Transition, ...]) -> None:
        for record in records:
            self._count(
                dependency,
                record.event.type,
                record.event.at,
                record.reason,
                record.attempted,
                record.rejected,
                record.from_phase,
                record.to_phase,
                changed_phase(record),
            )

    def _keep_plain(  # noqa: PLR0917 - called once per event by feed_trace
        self,
        dependency: str,
        kind: str,
        at: int,
        call: str,
        generation: int | None,
        before: BreakerState,
        after: BreakerState,
        reason: str,
    ) -> None:
        flags = self._flags.get((kind, reason))
        if flags is None:
            flags = self._flags[kind, reason] = record_flags(kind, reason)
        changed = phase_changed(before, after)
        self._count(dependency, kind, at, reason, *flags, before.phase, after.phase, changed)

    def signals(self) -> Mapping[str, Signals]:
        """Per dependency, :func:`calibrate`'s signals (opens, time open, half-opens, reopens)."""
        return calibrate(self._records())

    def _records(self) -> Iterator[Transition]:
        for dependency, (first, last) in self._spans.items():
            phase = self._began[dependency]
            yield _marker(dependency, first, phase, phase)
            for at, before, after in self._changes[dependency]:
                yield _marker(dependency, at, before, after)
                phase = after
            yield _marker(dependency, last, phase, phase)


def _marker(dependency: str, at: int, before: str, after: str) -> Transition:
    """A record calibrate reads only the time and the phases of."""
    return Transition(
        dependency=dependency,
        event=Event("ignored", at, dependency),
        from_phase=before,
        to_phase=after,
        attempted=False,
        rejected=False,
        reason="",
        generation=0,
        open_until=None,
    )
