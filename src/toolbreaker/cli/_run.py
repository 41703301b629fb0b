"""``toolbreaker check-run``: replay a recorded agent run through a budget.

A run trace is JSON Lines, one tool call (or model step) per line::

    {"at": 0, "tool": "search", "args": {"q": "cable"}, "outcome": "success", "result": {...}}
    {"at": 900, "tool": "send_email", "risk": "reversible_write",
     "args": {"to": "c-1", "template": "renewal"}, "business_key": ["to", "template"],
     "outcome": "unknown"}
    {"at": 950, "cost": "0.004"}

``at`` is whole milliseconds since the run started (``1500`` or ``1500.0``; a fraction such
as ``0.5`` is refused: it is most often a time in seconds); ``risk`` is the call's class
and defaults to ``read`` (one tool's calls may differ: a shell's ``cat`` reads, its
``sed -i`` writes); ``outcome`` is ``success``, ``failure``, ``unknown`` or ``ignored``;
``result`` (any JSON) is what the call returned; ``cost`` is a decimal string: a tool
call's cost is spent only when the call ran (a refused call spends nothing), a line
without a tool is a model step, printed with the run's cost so far. The command prints
each decision and, if the budget would stop the run, block its writes or stop one of its
tools, where and why, with the operator's stop packet (exit 1); a run the budget lets
run whole ends with its counters (exit 0); an empty run is an error (exit 2).

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
from toolbreaker.core.run._values import as_amount, decimal_text
from toolbreaker.core.run.budget import OUTCOMES, Budget, RiskClass
from toolbreaker.core.run.fingerprint import FingerprintError
from toolbreaker.core.run.redact import redact_text
from toolbreaker.errors import ToolbreakerError, TraceError
from toolbreaker.runtime.run._recorded import RecordedRun, RecordedStep, Replayed

__all__ = ["check_run", "read_recorded_run"]

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
#: What the tool column of a model step's line says.
_MODEL: Final = "(model step)"
#: The word check-run prints before a refusal's condition, by verdict (else BLOCKED).
_WORDS: Final = {"stopped": "STOP", "tool-stopped": "TOOL-STOPPED", "over-budget": "REFUSED"}


def check_run(path: str, budget: Budget, task: str, out: TextIO) -> int:
    """Replay the run at ``path``; exit 0 if the budget lets all of it run, else 1.

    Every line goes through a live :class:`~toolbreaker.RunGuard` with a journal in
    memory and its clock at the line's ``at``, whose tools end as recorded, so each line
    gets the decision the guard makes (``run``, ``journal``, ``reconcile``,
    ``writes-blocked``, ``stopped``, ``tool-stopped``), and the packet is the guard's.
    Reads go on after a blocked write, and other tools after one is stopped, as they do
    live. A model step's line shows its cost and the run's so far.

    Raises:
        TraceError: a bad line (its file and line named), or a run without any step.
    """
    replay = RecordedRun(task, budget)
    lines: dict[int, int] = {}  # the run's step number -> the line it came from
    refused: dict[str, int] = {}  # per stopped tool, its later calls refused
    steps = 0
    for number, data in _read(path):
        try:
            done = replay.replay(_step(data))
        except (ToolbreakerError, KeyError, TypeError, ValueError) as exc:
            raise TraceError(_message(exc), file=path, line=number) from None
        if not steps:
            out.write(f"{'line':>5}  {'at ms':>7}  {'tool':<20} decision\n")
        steps += 1
        if done.decision is None:
            guard = replay.guard
            assert guard is not None
            cost = decimal_text(as_amount(done.step.cost or 0))
            so_far = decimal_text(guard.state.cost)
            out.write(
                f"{number:>5}  {data['at']:>7}  {_MODEL:<20} cost {cost}, run cost {so_far}\n"
            )
            continue
        lines[done.decision.step] = number
        if done.decision.verdict == "tool-stopped" and done.step.tool is not None:
            refused[done.step.tool] = refused.get(done.step.tool, 0) + 1
        # What an operator reads is masked, tool names and stop details included.
        text = f"{number:>5}  {data['at']:>7}  {done.step.tool:<20} {_note(done)}"
        out.write(redact_text(text) + "\n")
    packet = replay.packet()
    if packet is None:
        raise TraceError(
            "the run has no steps: check-run needs one JSON object per line", file=path
        )
    history = list(packet.history)
    stopped = [c for c in history if c["effect"] == "stopped"]
    blocked = [c for c in history if c["effect"] == "writes-blocked"]
    tools = [c for c in history if c["effect"] == "tool-stopped"]
    if not (stopped or blocked or tools):
        guard = replay.guard
        counters = guard.state.counters() if guard is not None else {}
        out.write(f"\nthe run completes within the budget: {json.dumps(counters, default=str)}\n")
        return 0

    def place(condition: Mapping[str, Any]) -> str:
        line = lines.get(condition["step"])
        return path if line is None else f"{path}:{line}"

    out.write("\n")
    for condition in tools:
        name = condition["tool"]
        later = refused.get(name, 0)
        text = (
            f"tool {name} would be stopped at {place(condition)} ({condition['condition']}: "
            f"{condition['detail']}); {later} later call(s) refused"
        )
        out.write(redact_text(text) + "\n")
    if stopped or blocked:
        where = stopped[0] if stopped else blocked[0]
        what = "the run would stop" if stopped else "writes would be blocked"
        out.write(f"{what} at {place(where)}\n")
    out.write(f"{packet.to_json()}\n")
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
    if not isinstance(tool, str) or not tool.strip():
        raise ValueError(f"tool must name the tool that was called, got {shown(tool)}")
    if not isinstance(args, Mapping):
        raise TypeError(f"args must be an object of the call's arguments, got {shown(args)}")
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


def read_recorded_run(path: str) -> Iterator[tuple[int, RecordedStep]]:
    """Stream a recorded run's steps with their line numbers, each validated.

    Raises:
        TraceError: naming the file and the line of what is wrong.
    """
    for number, data in _read(path):
        try:
            step = _step(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(_message(exc), file=path, line=number) from None
        yield number, step


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
        try:
            at = _at(data.get("at"))
        except (TypeError, ValueError) as exc:
            raise TraceError(str(exc), file=path, line=number) from None
        data["at"] = at
        if last is not None and at < last:
            raise TraceError(f"time went backwards: {at} after {last}", file=path, line=number)
        last = at
        yield number, data


def _at(value: object) -> int:
    """A line's ``at``: whole milliseconds since the run started, however it is written."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise TypeError(f"at must be a number of milliseconds, got {shown(value)}")
    if isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value():
            text = format(value, "f") if value.is_finite() else str(value)
            seconds = f" (seconds? {text} s is {decimal_text(value * 1000)} ms)"
            raise ValueError(
                f"at is whole milliseconds since the run started, got {text}"
                + (seconds if value.is_finite() and abs(value) < 10**9 else "")
            )
        value = int(value)
    if not 0 <= value <= MAX_TIME_MS:
        raise ValueError(
            f"at must be a non-negative integer of at most {MAX_TIME_MS}, got {shown(value)}"
        )
    return value


def _message(exc: BaseException) -> str:
    if isinstance(exc, FingerprintError | ToolbreakerError):
        return str(getattr(exc, "message", exc))
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc)
