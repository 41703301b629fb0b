"""The streaming replay engine: a trace of any size in, its receipt out.

``toolbreaker replay`` and ``toolbreaker verify`` are this package driven by the command
line. The decisions are the core's: :class:`~toolbreaker.core._breaker.receipt.Replay`
feeds every event of a trace to the breaker machine (its fast path reads plain lines
without the JSON decoder and lets ``plain_step()`` decide them). What is here carries
the rest out in bounded memory and fast:

- :class:`StreamingReplay` keeps each transition, as it happens, as a %-template of its
  printed text and the few fields that vary, spilled per dependency to a temporary file;
  memory holds the ledgers, the unsettled calls, a few MB of pending records and an
  8-byte hash per call id, not the transitions. :class:`SummaryReplay` only counts.
- :func:`write_receipt` is the one receipt serialiser: it writes, and hashes, exactly
  the bytes :func:`~toolbreaker.core._breaker.receipt.dump_receipt` prints for the
  receipt :func:`~toolbreaker.core._breaker.receipt.summarise` would build, in one pass,
  from the same entries (:func:`~toolbreaker.core._breaker.receipt.dependency_entry`).
- :func:`replay_trace` splits a big trace by dependency across processes (same receipt
  bytes, same first error) and :func:`verify` compares a receipt file with the replay.

Arrows point down: this package imports the core only; the CLI imports it.
"""

from toolbreaker._replaying._parallel import INBOX_BYTES, MAX_JOBS, PARALLEL_BYTES, replay_trace
from toolbreaker._replaying._stream import Elsewhere, StreamingReplay, SummaryReplay
from toolbreaker._replaying._text import write_receipt
from toolbreaker._replaying._verify import check_files, verify

__all__ = [
    "INBOX_BYTES",
    "MAX_JOBS",
    "PARALLEL_BYTES",
    "Elsewhere",
    "StreamingReplay",
    "SummaryReplay",
    "check_files",
    "replay_trace",
    "verify",
    "write_receipt",
]
