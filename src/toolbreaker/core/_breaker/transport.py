"""A server's transport breaker: which ends of a call show that the server itself is gone.

Theory of operation
-------------------
A server that serves several tools (an MCP server) has a breaker per tool, which judges
the tool's results, and one *transport* breaker for the server, shared by all of its
tools, which opens only when the server itself is gone, so that a dead server is learned
once for all of them. A false open of the transport breaker refuses every tool of a
healthy server for a whole cooldown, so it hears only evidence about the server:

- an **answer** of any kind (a result, an error result, a protocol error, a result its
  own schema refuses) proves the server reachable: ``success``;
- a **closed** connection (the process died, the stream broke) proves it gone:
  ``failure``;
- a **timeout** proves only that one call was slow: one tool's slowness is that tool's
  business (its own breaker counts it). The shell asks the server whether it answers at
  all, a *liveness check* (MCP's ``ping``) with its own short deadline, and the check's
  end decides: answered is ``success``; no answer in time, or a closed connection, is
  ``failure`` (the server answers nothing); a check that ended some other way proves
  nothing (``ignored``). A timeout without a check is ``ignored``;
- anything **else** (the caller cancelled, a local error before anything was sent) says
  nothing about the server: ``ignored``.

:func:`needs_liveness_check` says when the shell must check; :func:`transport_outcome`
turns the call's end and the check's end into the outcome the breaker records.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

__all__ = [
    "CallEnd",
    "CheckEnd",
    "TransportOutcome",
    "needs_liveness_check",
    "transport_outcome",
]

#: How a call to a server ended, as its transport saw it.
CallEnd = Literal["answered", "closed", "timeout", "other"]
#: How a liveness check (a ping) after a timed-out call ended.
CheckEnd = Literal["answered", "closed", "timeout", "other"]
#: What the server's transport breaker records.
TransportOutcome = Literal["success", "failure", "ignored"]

_BY_CALL: Final[Mapping[str, TransportOutcome]] = {
    "answered": "success",
    "closed": "failure",
    "other": "ignored",
}
_BY_CHECK: Final[Mapping[str, TransportOutcome]] = {
    "answered": "success",
    "closed": "failure",
    "timeout": "failure",
    "other": "ignored",
}


def needs_liveness_check(call: CallEnd) -> bool:
    """Whether a call that ended so needs a liveness check before the server is judged.

    Only a timeout does: an answer and a closed connection speak for themselves.
    """
    return call == "timeout"


def transport_outcome(call: CallEnd, check: CheckEnd | None = None) -> TransportOutcome:
    """What the server's transport breaker records for a call that ended as ``call``.

    Args:
        call: how the call ended.
        check: how the liveness check after a timed-out call ended (``None``: no check
            was made); read only when ``call`` is ``"timeout"``.

    Returns:
        ``success`` for any answer, ``failure`` for a closed connection or a timed-out
        call whose check got no answer, ``ignored`` otherwise (a timeout alone included:
        one call's deadline is no proof that the server is gone).
    """
    if call == "timeout":
        return "ignored" if check is None else _BY_CHECK[check]
    return _BY_CALL[call]
