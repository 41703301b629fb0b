"""Streaming replay: the trace driver that spills its transitions instead of keeping them.

:class:`StreamingReplay` is the core's trace driver
(:class:`~toolbreaker.core._breaker.receipt.Replay`) with two hooks changed: each record
it is handed is kept as a %-template of its printed text and the few fields that vary
(:mod:`~toolbreaker._replaying._text`), spilled per dependency to a temporary file
(:class:`~toolbreaker._replaying._spill.Spill`), and each call id is remembered in 8
bytes. :meth:`StreamingReplay.write` writes the receipt from those chunks with the one
receipt serialiser, :func:`~toolbreaker._replaying._text.write_receipt`.
:class:`SummaryReplay` only counts.

A replay split across processes (:mod:`~toolbreaker._replaying._parallel`) talks to the
driver through :meth:`~StreamingReplay.share`, :meth:`~StreamingReplay.send_transitions`
and :meth:`~StreamingReplay.adopt`: a process that replayed some dependencies says
their final states and counts and sends their transitions' text; the process that
writes the receipt adopts them and reads that text where its :class:`Elsewhere` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from toolbreaker._replaying._spill import CallIds, Spill
from toolbreaker._replaying._text import (
    CANONICAL_OF,
    PRINTED,
    literal,
    plain_template,
    string,
    write_receipt,
)
from toolbreaker.core._breaker.machine import record_flags
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import (
    RECEIPT_SCHEMA,
    Counts,
    Ledger,
    Replay,
    dependency_entry,
    receipt_body,
)
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import BreakerState, Transition, opened, opening

__all__ = ["Elsewhere", "StreamingReplay", "SummaryReplay"]


class Elsewhere(Protocol):
    """Where the transitions of dependencies another process replayed come from."""

    def chunks_of(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        """A dependency's transitions as (printed, canonical) text, chunk by chunk."""
        ...  # pragma: no cover - a protocol

    def close(self) -> None:
        """Stop what sends them (called once the receipt is written, or on failure)."""
        ...  # pragma: no cover - a protocol


class StreamingReplay(Replay):
    """A :class:`~toolbreaker.core._breaker.receipt.Replay` that spills transitions.

    Use it as a context manager (or call :meth:`close`): the spill is a temporary file.
    """

    def __init__(
        self, policy: Policy | PolicySheet, initial: Mapping[str, BreakerState] | None = None
    ) -> None:
        super().__init__(policy, initial)
        self._ids = CallIds()
        self._spill = Spill()
        self._counts = self._spill.counts
        # Dependencies another process replayed, and where their transitions come from.
        self._elsewhere: dict[str, Elsewhere] = {}
        self._others: list[Elsewhere] = []

    def _seen(self, ledger: Ledger, dependency: str, call: str) -> bool:
        return self._ids.add(ledger, dependency, call)

    def _seen_check(self) -> Callable[[Ledger, str, str], bool]:
        return self._ids.add

    def _keep(self, ledger: Ledger, dependency: str, records: tuple[Transition, ...]) -> None:
        spill = self._spill
        for record in records:
            if opened(record):
                spill.counts.setdefault(dependency, Counts()).opens += 1
            # A literal template: it takes (and prints nothing of) four empty fields.
            printed, canonical = literal(record)
            spill.add(dependency, (printed, 0, 0, 0, 0), canonical)

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
        key = (kind, before.phase, after.phase, reason)
        template = PRINTED.get(key)
        if template is None:
            template = plain_template(key)
        spill = self._spill
        if opening(before, after):
            spill.counts.setdefault(dependency, Counts()).opens += 1
        until = after.open_until
        record = (
            template,
            at,
            string(call),
            after.generation,
            "null" if until is None else until,
        )
        if " " in call:
            spill.add(dependency, record, CANONICAL_OF[template])
            return
        items = spill.pending.get(dependency)
        if items is None:
            items = spill.start(dependency)
        items.extend(record)
        spill.buffered += 1
        if spill.buffered >= spill.limit:
            spill.flush()

    def summary(self) -> dict[str, Any]:
        """Per dependency: the counts and final state, without the transitions."""
        self._spill.flush()
        deps = {}
        for name, ledger in sorted(self.ledgers().items()):
            counts = self._counts.get(name) or Counts()
            deps[name] = {
                "transitions": counts.transitions,
                "remote_attempts": counts.remote,
                "local_rejections": counts.rejected,
                "opens": counts.opens,
                "final_state": ledger.state.phase,
                "recovered_from_corruption": ledger.state.recovered_from_corruption,
            }
            if ledger.policy is not self.policy and ledger.policy.version != self.policy.version:
                deps[name]["policy_version"] = ledger.policy.version
        return {
            "schema": RECEIPT_SCHEMA,
            "policy_version": self.policy.version,
            "dependencies": deps,
        }

    def write(self, out: Any) -> str:
        """Write the receipt to ``out`` exactly as ``dump_receipt`` would; return its hash.

        One pass: each chunk of transitions is printed and hashed (as canonical text) at
        once (see :func:`~toolbreaker._replaying._text.write_receipt`).
        """
        self._spill.flush()
        entries = {}
        for name, ledger in self.ledgers().items():
            counts = self._counts.get(name) or Counts()
            entries[name] = dependency_entry(
                counts.transitions, counts, ledger.state, ledger.policy, self.policy
            )
        return write_receipt(out, receipt_body(self.policy, entries), self._chunks_of)

    def close(self) -> None:
        """Remove the temporary files; stop the processes that replayed a share, if any."""
        self._spill.close()
        for other in self._others:
            other.close()

    def __enter__(self) -> StreamingReplay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- a replay split across processes ------------------------------------------------

    def share(self) -> tuple[dict[str, BreakerState], dict[str, Counts]]:
        """What a replay of a share of the dependencies tells the process that asked.

        The final state and the counts of each dependency it replayed.
        """
        self._spill.flush()
        states = {name: ledger.state for name, ledger in self.ledgers().items()}
        return states, self._counts

    def send_transitions(self, send: Callable[[bytes], object]) -> None:
        """Send each dependency's transitions, in order, as :meth:`write` reads them.

        Per dependency that has any: its chunks, printed then canonical text, then ``b""``.
        """
        for name in sorted(self.ledgers()):
            if self._counts.get(name, Counts()).transitions:
                for printed, canonical in self._spill.chunks_of(name):
                    send(printed)
                    send(canonical)
                send(b"")

    def adopt(
        self,
        states: Mapping[str, BreakerState],
        counts: Mapping[str, Counts],
        elsewhere: Elsewhere,
    ) -> None:
        """Take dependencies another process replayed; ``elsewhere`` has their transitions.

        ``elsewhere`` is closed with this replay.
        """
        self._counts.update(counts)
        for name, state in states.items():
            self._ledgers[name] = self._ledger(name, state)
            self._elsewhere[name] = elsewhere
        if all(other is not elsewhere for other in self._others):
            self._others.append(elsewhere)

    def _chunks_of(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        """A dependency's transitions as (printed, canonical) text, from wherever they are."""
        source = self._elsewhere.get(name)
        if source is None:
            return self._spill.chunks_of(name)
        return source.chunks_of(name)


class SummaryReplay(StreamingReplay):
    """A streaming replay that counts transitions instead of keeping them: ``--summary``.

    The counts are those :meth:`StreamingReplay.summary` gives, without spilling a record
    or formatting one; it writes no temporary file.
    """

    def __init__(
        self, policy: Policy | PolicySheet, initial: Mapping[str, BreakerState] | None = None
    ) -> None:
        super().__init__(policy, initial)
        # The core's (attempted, rejected) per reason, of requests and of outcomes: the
        # fast path counts a record without a call per event.
        self._requests: dict[str, tuple[bool, bool]] = {}
        self._outcomes: dict[str, tuple[bool, bool]] = {}

    def _keep(self, ledger: Ledger, dependency: str, records: tuple[Transition, ...]) -> None:
        counts = self._counts.get(dependency)
        if counts is None:
            counts = self._counts[dependency] = Counts()
        for record in records:
            counts.add(record)

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
        counts = self._counts.get(dependency)
        if counts is None:
            counts = self._counts[dependency] = Counts()
        known = self._requests if kind == "request" else self._outcomes
        flags = known.get(reason)
        if flags is None:
            flags = known[reason] = record_flags(kind, reason)
        counts.transitions += 1
        counts.remote += flags[0]
        counts.rejected += flags[1]
        if opening(before, after):
            counts.opens += 1
