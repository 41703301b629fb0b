"""Record what live breakers saw as a trace that ``toolbreaker replay`` reproduces.

Production traffic then becomes the review artifact: replay the recorded trace under the
current and a proposed policy and ``toolbreaker diff`` the receipts before deploying.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from toolbreaker.core.breaker.state import Transition
from toolbreaker.core.breaker.trace import trace_event
from toolbreaker.core.retry import RetryRecord
from toolbreaker.runtime.breaker._breaker import Breaker
from toolbreaker.runtime.run._guard import RunGuard

__all__ = ["TraceRecorder"]


class TraceRecorder:
    """A listener that appends every breaker event to a JSON Lines trace.

    Example::

        with TraceRecorder("trace.jsonl") as recorder:
            recorder.attach(registry)
            ...  # run the agent

    Recording routes every request of an attached breaker through the core (a listener
    sees every record), so it costs the fast paths: attach it where the trace is worth it.

    Concurrent callers read the clock before the store orders their events, so a record
    can carry a time a few microseconds older than the one before it; the recorder writes
    times that never decrease per dependency (a trace must not go back in time), which
    moves such an event by at most that race window.

    Args:
        target: the breaker trace (a path, appended to, or a text stream).
        retries: where retry decisions go (``toolbreaker.retry/v1`` JSON Lines).
        notices: where answers that are not transitions go, as JSON Lines: degradation
            choices (``toolbreaker.degrade/v1``), ``saturated``, ``hung`` and ``deferred``
            answers (``toolbreaker.limit/v1``). Attached run guards report their deferrals here.
            The breaker trace stays exactly as without it, and so do receipts.
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
        self._removers: list[Callable[[], None]] = []
        self._last: dict[str, int] = {}

    def attach(self, *targets: Breaker | RunGuard | Iterable[Breaker]) -> Callable[[], None]:
        """Record the given breakers (or a registry's breakers as they are now).

        A run guard is recorded only when there is a notices file (its deferrals).
        """
        breakers: list[Breaker] = []
        guards: list[RunGuard] = []
        for target in targets:
            if isinstance(target, RunGuard):
                guards.append(target)
            else:
                breakers.extend([target] if isinstance(target, Breaker) else target)
        removers = [breaker.add_listener(self) for breaker in breakers]
        if self._retries is not None:
            removers += [breaker.add_retry_listener(self.retry) for breaker in breakers]
        if self._notices is not None:
            removers += [breaker.degradation.add_listener(self.notice) for breaker in breakers]
            removers += [guard.notices.add_listener(self.notice) for guard in guards]
        self._removers.extend(removers)

        def detach() -> None:
            for remove in removers:
                remove()

        return detach

    def __call__(self, record: Transition, breaker: Breaker) -> None:
        """Write the trace line of one record (listener signature)."""
        line = trace_event(record)
        if line is None:
            return
        with self._lock:
            at = max(line["at"], self._last.get(record.dependency, 0))
            self._last[record.dependency] = at
            self._out.write(json.dumps({**line, "at": at}, sort_keys=True) + "\n")
            self._out.flush()

    def retry(self, record: RetryRecord) -> None:
        """Write one retry decision to the retry trace (retry listener signature)."""
        out = self._retries
        if out is None:
            return
        with self._lock:
            out.write(json.dumps(record.to_dict(), sort_keys=True) + "\n")
            out.flush()

    def notice(self, record: dict[str, Any]) -> None:
        """Write one notice to the notices file (degradation listener signature)."""
        out = self._notices
        if out is None:
            return
        with self._lock:
            out.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            out.flush()

    def close(self) -> None:
        """Detach from every breaker and close the file if this recorder opened it."""
        for remove in self._removers:
            remove()
        self._removers.clear()
        if self._owned:
            self._out.close()
        if self._retries_owned and self._retries is not None:
            self._retries.close()
        if self._notices_owned and self._notices is not None:
            self._notices.close()

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
