"""``toolbreaker check-run``: replay a recorded agent run through a budget.

A run trace is JSON Lines, one tool call (or model step) per line::

    {"at": 0, "tool": "search", "args": {"q": "cable"}, "outcome": "success", "result": {...}}
    {"at": 900, "tool": "send_email", "risk": "reversible_write",
     "args": {"to": "c-1", "template": "renewal"}, "business_key": ["to", "template"],
     "outcome": "unknown"}
    {"at": 950, "cost": "0.004"}

``at`` is milliseconds since the run started; ``risk`` defaults to ``read``; ``outcome`` is
``success``, ``failure``, ``unknown`` or ``ignored``; ``result`` (any JSON) is what the call
returned; ``cost`` is a decimal string: a tool call's cost is spent only when the call
ran (a refused call spends nothing), a line without a tool is a model step. The command
prints each decision and, if the budget would stop the run or block its writes, where
and why, with the operator's stop packet.

The replay is a live :class:`~toolbreaker.RunGuard` fed the recorded steps
(:mod:`toolbreaker.runtime.run._recorded`): this module parses and prints, and decides
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final, TextIO, get_args

from toolbreaker.core.breaker.state import MAX_TIME_MS
from toolbreaker.core.files import iter_lines, loads_json, shown
from toolbreaker.core.run.budget import OUTCOMES, Budget, RiskClass
from toolbreaker.core.run.fingerprint import FingerprintError
from toolbreaker.core.run.redact import redact_text
from toolbreaker.errors import ToolbreakerError, TraceError
from toolbreaker.runtime.run._recorded import RecordedRun, RecordedStep, Replayed

__all__ = ["check_run"]

_FIELDS = frozenset(
    {"at", "tool", "args", "risk", "recovery", "outcome", "result", "cost", "business_key"}
)
#: What check-run prints for answers other than a run or a stop.
_ANSWERED: Final = {
    "journal": "answered from the journal (not repeated)",
    "reconcile": "reconcile (an earlier attempt's outcome is unknown)",
    "queued": "answered as queued (a drainer makes it)",
    "handed-off": "answered as handed off (a person owns it)",
    "deferred": "deferred to the next turn",
}
#: The word check-run prints before a refusal's condition, by verdict (else BLOCKED).
_WORDS: Final = {"stopped": "STOP", "tool-stopped": "TOOL-STOPPED", "over-budget": "REFUSED"}


def check_run(path: str, budget: Budget, task: str, out: TextIO) -> int:
    """Replay the run at ``path``; exit 0 if it completes, 1 if it stops or blocks writes.

    Every line goes through a live :class:`~toolbreaker.RunGuard` with a journal in
    memory and its clock at the line's ``at``, whose tools end as recorded, so each line
    gets the decision the guard makes (``run``, ``journal``, ``reconcile``,
    ``writes-blocked``, ``stopped``), and the packet is the guard's. Reads go on after a
    blocked write, as they do live.
    """
    replay = RecordedRun(task, budget)
    lines: dict[int, int] = {}  # the run's step number -> the line it came from
    out.write(f"{'line':>5}  {'at ms':>7}  {'tool':<20} decision\n")
    for number, data in _read(path):
        try:
            done = replay.replay(_step(data))
        except (ToolbreakerError, KeyError, TypeError, ValueError) as exc:
            raise TraceError(_message(exc), file=path, line=number) from None
        if done.decision is None:
            continue  # a model step
        lines[done.decision.step] = number
        # What an operator reads is masked, tool names and stop details included.
        text = f"{number:>5}  {data['at']:>7}  {done.step.tool:<20} {_note(done)}"
        out.write(redact_text(text) + "\n")
    packet = replay.packet()
    history = [] if packet is None else list(packet.history)
    stopped = [c for c in history if c["effect"] == "stopped"]
    blocked = [c for c in history if c["effect"] == "writes-blocked"]
    if packet is None or not (stopped or blocked):
        guard = replay.guard
        counters = guard.state.counters() if guard is not None else {}
        out.write(f"\nthe run completes within the budget: {json.dumps(counters, default=str)}\n")
        return 0
    where = stopped[0] if stopped else blocked[0]
    what = "the run would stop" if stopped else "writes would be blocked"
    line = lines.get(where["step"])
    place = path if line is None else f"{path}:{line}"
    out.write(f"\n{what} at {place}\n{packet.to_json()}\n")
    return 1


def _note(done: Replayed) -> str:
    decision = done.decision
    assert decision is not None
    step = done.step
    if decision.runs:
        repeat = f", repeat {decision.repeat}" if decision.repeat else ""
        return f"allowed ({step.outcome}{repeat})"
    if decision.stop is not None:
        word = _WORDS.get(decision.verdict, "BLOCKED")
        note = f"{word} {decision.stop.condition}: {decision.stop.detail}"
    else:
        note = _ANSWERED.get(decision.verdict, decision.verdict)
    if step.cost is not None:
        note += " (its cost is not spent: the call did not run)"
    return note


def _step(data: Mapping[str, Any]) -> RecordedStep:
    """A line as a recorded step; the error names the field that is wrong."""
    at = data["at"]
    if "tool" not in data:
        return RecordedStep(at=at, cost=data.get("cost", "0"))
    tool, args = data["tool"], data.get("args", {})
    if not isinstance(tool, str) or not isinstance(args, Mapping):
        raise TypeError("tool must be a string and args an object")
    risk: RiskClass = data.get("risk", "read")
    if risk not in get_args(RiskClass):
        raise ValueError(f"risk must be one of {', '.join(get_args(RiskClass))}, got {shown(risk)}")
    recovery = data.get("recovery", False)
    if type(recovery) is not bool:
        raise TypeError(f"recovery must be true or false, got {shown(recovery)}")
    outcome = data.get("outcome", "success")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {shown(outcome)}")
    fields = data.get("business_key")
    if fields is not None and (
        not isinstance(fields, list) or not all(isinstance(k, str) for k in fields)
    ):
        raise TypeError(f"business_key must be a list of strings, got {shown(fields)}")
    return RecordedStep(
        at=at,
        tool=tool,
        args=args,
        risk=risk,
        recovery=recovery,
        business_key=tuple(fields) if fields else None,
        outcome=outcome,
        result=data.get("result"),
        cost=data.get("cost"),
    )


def _read(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream the run's steps, each validated; a bad line stops the stream with its error."""
    last = None
    for number, raw in iter_lines(path, TraceError):
        if not raw.strip():
            continue
        data = loads_json(raw, TraceError, file=path, line=number, parse_float=Decimal)
        if not isinstance(data, dict):
            raise TraceError("a run step must be a JSON object", file=path, line=number)
        unknown = set(data) - _FIELDS
        if unknown:
            raise TraceError(
                f"unknown field(s) {', '.join(shown(k) for k in sorted(unknown))}",
                file=path,
                line=number,
            )
        at = data.get("at")
        if type(at) is not int or not 0 <= at <= MAX_TIME_MS:
            raise TraceError(
                f"at must be a non-negative integer of at most {MAX_TIME_MS}, got {shown(at)}",
                file=path,
                line=number,
            )
        if last is not None and at < last:
            raise TraceError(f"time went backwards: {at} after {last}", file=path, line=number)
        last = at
        yield number, data


def _message(exc: BaseException) -> str:
    if isinstance(exc, FingerprintError | ToolbreakerError):
        return str(getattr(exc, "message", exc))
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc)
