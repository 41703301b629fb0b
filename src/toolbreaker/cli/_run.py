"""``toolbreaker check-run``: replay a recorded agent run through a budget.

A run trace is JSON Lines, one tool call (or model step) per line::

    {"at": 0, "tool": "search", "args": {"q": "cable"}, "outcome": "success", "result": {...}}
    {"at": 900, "tool": "send_email", "risk": "reversible_write",
     "args": {"to": "c-1", "template": "renewal"}, "business_key": ["to", "template"],
     "outcome": "unknown"}
    {"at": 950, "cost": "0.004"}

``at`` is milliseconds since the run started; ``risk`` defaults to ``read``; ``outcome`` is
``success``, ``failure``, ``unknown`` or ``ignored``; ``result`` (any JSON) is the evidence
the call brought back; ``cost`` is a decimal string. The command prints each decision and,
if the budget would stop the run, where and why, with the operator's stop packet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, TextIO, get_args

from toolbreaker.core.breaker.state import MAX_TIME_MS
from toolbreaker.core.files import iter_lines, loads_json, shown
from toolbreaker.core.run import protocol
from toolbreaker.core.run.budget import WRITES, Action, Budget, RiskClass, RunState
from toolbreaker.core.run.fingerprint import FingerprintError, fingerprint, write_key
from toolbreaker.core.run.machine import RunDecision, RunEvent, apply
from toolbreaker.core.run.redact import redact_text
from toolbreaker.errors import ToolbreakerError, TraceError
from toolbreaker.runtime import StopPacket, evidence_digest

__all__ = ["check_run"]

_FIELDS = frozenset(
    {"at", "tool", "args", "risk", "recovery", "outcome", "result", "cost", "business_key"}
)


def check_run(path: str, budget: Budget, task: str, out: TextIO) -> int:
    """Replay the run at ``path``; exit 0 if it completes, 1 if the budget stops it.

    The records drive :func:`toolbreaker.core.run.machine.apply`, the machine a live
    :class:`~toolbreaker.RunGuard` drives, with a journal kept in memory: every line gets
    the decision the guard would make (``run``, ``journal``, ``reconcile``,
    ``writes-blocked``, ``stopped``). Reads go on after a blocked write, as they do live.
    """
    lines = _read(path)
    run: RunState | None = None
    # write key -> (status, result): the write protocol's moves, kept in memory
    journal: dict[str, tuple[protocol.Status, Any]] = {}
    steps: dict[str, dict[str, Any]] = {}  # write key -> the step the packet shows
    first: tuple[int, Action, str | None, RunDecision] | None = None
    out.write(f"{'line':>5}  {'at ms':>7}  {'tool':<20} decision\n")
    for number, data in lines:
        try:
            at = data["at"]
            run = run or RunState.start(task, at)
            if "tool" not in data:
                run, _ = apply(run, RunEvent("cost", at, cost=data.get("cost", "0")), budget)
                continue
            action, key = _action(data, task)
            status, journaled = journal.get(key, (None, None)) if key else (None, None)
            run, decision = apply(
                run,
                RunEvent(
                    "request",
                    at,
                    action,
                    journal=status,
                    evidence=evidence_digest(journaled) if protocol.made(status) else None,
                ),
                budget,
            )
            if decision.runs:
                outcome = data.get("outcome", "success")
                result = data.get("result")
                evidence = evidence_digest(result) if "result" in data else None
                event = RunEvent(
                    "outcome", at, action, outcome=outcome, evidence=evidence, cost=data.get("cost")
                )
                run, _ = apply(run, event, budget)
                move = protocol.settled_move(outcome)
                if key and move is not None:
                    # As the guard journals it: attempted, then how it ended.
                    written = protocol.after(protocol.after(status, "attempt"), move)
                    journal.pop(key, None)  # the packet lists writes in the order they ended
                    journal[key] = (written, result if protocol.made(written) else None)
                    steps[key] = {"line": number, "tool": action.tool, "idempotency_key": key}
                note = f"allowed ({outcome}" + (
                    f", repeat {decision.repeat})" if decision.repeat else ")"
                )
            elif decision.stop is not None:
                word = "STOP" if decision.verdict == "stopped" else "BLOCKED"
                note = f"{word} {decision.stop.condition}: {decision.stop.detail}"
                if first is None or (
                    decision.verdict == "stopped" and first[3].verdict != "stopped"
                ):
                    first = (number, action, key, decision)
            else:
                note = {"journal": "answered from the journal (not repeated)"}.get(
                    decision.verdict, "reconcile (an earlier attempt's outcome is unknown)"
                )
            # What an operator reads is masked, tool names and stop details included.
            out.write(redact_text(f"{number:>5}  {at:>7}  {action.tool:<20} {note}") + "\n")
        except (ToolbreakerError, KeyError, TypeError, ValueError) as exc:
            raise TraceError(_message(exc), file=path, line=number) from None
    if first is None or run is None:
        counters = run.counters() if run else {}
        out.write(f"\nthe run completes within the budget: {json.dumps(counters, default=str)}\n")
        return 0
    number, action, key, decision = first
    assert decision.stop is not None
    packet = StopPacket(
        task=task,
        condition=decision.stop.condition,
        detail=decision.stop.detail,
        confirmed=tuple(steps[k] for k, (s, _) in journal.items() if protocol.made(s)),
        uncertain=tuple(steps[k] for k, (s, _) in journal.items() if protocol.unresolved(s)),
        attempted={
            "line": number,
            "tool": action.tool,
            "fingerprint": action.fingerprint,
            "idempotency_key": key,
        },
        counters=run.counters(),
        next_safe_action="tune the budget, or fix the plan that led here",
    )
    what = "the run would stop" if decision.verdict == "stopped" else "writes would be blocked"
    out.write(f"\n{what} at {path}:{number}\n{packet.to_json()}\n")
    return 1


def _action(data: Mapping[str, Any], task: str) -> tuple[Action, str | None]:
    tool, args = data["tool"], data.get("args", {})
    if not isinstance(tool, str) or not isinstance(args, Mapping):
        raise TypeError("tool must be a string and args an object")
    risk = data.get("risk", "read")
    if risk not in get_args(RiskClass):
        raise ValueError(f"risk must be one of {', '.join(get_args(RiskClass))}, got {shown(risk)}")
    recovery = data.get("recovery", False)
    if type(recovery) is not bool:
        raise TypeError(f"recovery must be true or false, got {shown(recovery)}")
    action = Action(
        tool=tool,
        fingerprint=fingerprint(tool, args),
        risk=risk,
        recovery=recovery,
    )
    key = write_key(tool, args, data.get("business_key"), task=task) if risk in WRITES else None
    return action, key


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
