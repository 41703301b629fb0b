"""Record what live breakers saw as a trace that ``toolbreaker replay`` reproduces.

Production traffic then becomes the review artifact: replay the recorded trace under the
current and a proposed policy and ``toolbreaker diff`` the receipts before deploying.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from toolbreaker.core._breaker.state import Transition
from toolbreaker.core._breaker.trace import trace_event
from toolbreaker.core._retry import RetryRecord
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._fleet._attach import Attachment, Target
from toolbreaker.runtime._log import hook_failed, log

__all__ = ["TraceRecorder"]


class TraceRecorder:
    """A listener that appends every breaker event to a JSON Lines trace.

    Example::

        with TraceRecorder("trace.jsonl") as recorder:
            recorder.attach(registry)       # every breaker it holds, now and later
            ...  # run the agent

    Attached to a registry, the recorder records every breaker the registry holds and
    every one it makes later (the breakers adapters make on a tool's first call), each
    from its first call; attached to a run guard, its tools' breakers and its notices;
    a breaker made outside a registry can be attached on its own (see
    :class:`~toolbreaker.runtime.Attachment`).

    Recording routes every request of an attached breaker through the core (a listener
    sees every record), so it costs the fast paths: attach it where the trace is worth it.

    Concurrent callers read the clock before the store orders their events, so a record
    can carry a time a few microseconds older than the one before it; the recorder writes
    times that never decrease per dependency (a trace must not go back in time), which
    moves such an event by at most that race window.

    A write that fails (a full disk, a closed stream) never reaches the call: it is
    counted in :attr:`write_errors` and logged once per run of failures, and the call's
    outcome stands. A trace with a failed write may miss lines (or end in a cut one,
    which ``replay`` reports with its line number): check :attr:`write_errors`.

    Args:
        target: the breaker trace (a path, appended to, or a text stream).
        retries: where retry decisions go (``toolbreaker.retry/v1`` JSON Lines).
        notices: where answers that are not transitions go, as JSON Lines: degradation
            choices (``toolbreaker.degrade/v1``), ``saturated``, ``hung`` and ``deferred``
            answers (``toolbreaker.limit/v1``). Attached run guards report their deferrals here.
            The breaker trace stays exactly as without it, and so do receipts.

    Attributes:
        recorded: lines written (trace, retries and notices).
        write_errors: lines that could not be written.
        attachment: what the recorder is attached to (``attachment.breakers()``).
    """

    def __init__(
        self,
        target: str | Path | TextIO,
        *,
        retries: str | Path | TextIO | None = None,
        notices: str | Path | TextIO | None = None,
    ) -> None:
        if isinstance(target, (str, Path)):
            self._out: TextIO = Path(target).open("a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._out, self._owned = target, False
        self._name = str(target) if isinstance(target, (str, Path)) else repr(target)
        # Retry decisions go to their own JSON Lines file (toolbreaker.retry/v1 records,
        # seeds included): the breaker trace format stays as it is.
        self._retries: TextIO | None = None
        self._retries_owned = isinstance(retries, (str, Path))
        if isinstance(retries, (str, Path)):
            self._retries = Path(retries).open("a", encoding="utf-8")  # noqa: SIM115
        elif retries is not None:
            self._retries = retries
        self._notices: TextIO | None = None
        self._notices_owned = isinstance(notices, (str, Path))
        if isinstance(notices, (str, Path)):
            self._notices = Path(notices).open("a", encoding="utf-8")  # noqa: SIM115
        elif notices is not None:
            self._notices = notices
        self._lock = threading.Lock()
        self._last: dict[str, int] = {}
        self.recorded = 0
        self.write_errors = 0
        self._failing = False
        self._attached = False
        self.attachment = Attachment(
            transition=self,
            retry=self.retry if self._retries is not None else None,
            notice=self.notice if self._notices is not None else None,
        )

    def attach(self, *targets: Target) -> Callable[[], None]:
        """Record every breaker the targets hold, now and later; returns ``detach``.

        Targets are registries, run guards (their tools' breakers, and their deferrals
        when there is a notices file) and breakers. One breaker reached two ways is
        recorded once. ``detach()`` stops recording what these targets reached.

        Raises:
            PolicyError: no target, or one that is none of these.
        """
        detach = self.attachment.attach(*targets)
        self._attached = True
        return detach

    def __call__(self, record: Transition, breaker: Breaker) -> None:
        """Write the trace line of one record (listener signature)."""
        line = trace_event(record)
        if line is None:
            return
        with self._lock:
            at = max(line["at"], self._last.get(record.dependency, 0))
            self._last[record.dependency] = at
            self._write(self._out, json.dumps({**line, "at": at}, sort_keys=True))

    def retry(self, record: RetryRecord) -> None:
        """Write one retry decision to the retry trace (retry listener signature)."""
        out = self._retries
        if out is None:
            return
        with self._lock:
            self._write(out, json.dumps(record.to_dict(), sort_keys=True))

    def notice(self, record: Mapping[str, Any]) -> None:
        """Write one notice to the notices file (degradation listener signature)."""
        out = self._notices
        if out is None:
            return
        with self._lock:
            self._write(out, json.dumps(record, sort_keys=True, default=str))

    def _write(self, out: TextIO, text: str) -> None:
        # Under self._lock. A recorder is history: its fault is counted, never raised.
        try:
            out.write(text + "\n")
            out.flush()
        except (OSError, ValueError) as exc:  # a full disk, a closed file
            self.write_errors += 1
            first, self._failing = not self._failing, True
            if first:
                hook_failed(
                    f"trace recorder {self._name}: a write failed ({exc}); lines are "
                    "missing from the trace until writes succeed again, outcomes stand"
                )
            return
        self.recorded += 1
        self._failing = False

    def close(self) -> None:
        """Detach from every target and close the files this recorder opened."""
        self.attachment.close()
        if not self._attached:
            log.warning(
                "toolbreaker: trace recorder %s closed without being attached to anything: "
                "it recorded nothing",
                self._name,
            )
        for out, owned in (
            (self._out, self._owned),
            (self._retries, self._retries_owned),
            (self._notices, self._notices_owned),
        ):
            if owned and out is not None:
                try:
                    out.close()
                except OSError as exc:  # the last buffered lines could not be written
                    self.write_errors += 1
                    hook_failed(f"trace recorder {self._name}: closing failed ({exc})")

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
