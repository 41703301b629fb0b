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
``sed -i`` writes); ``outcome`` is ``success``, ``failure``, ``unknown`` or ``ignored``,
with the failure's ``error`` class; ``result`` (any JSON) is what the call returned, and
``result_error`` what failure it reports; ``cost`` is a decimal string: a tool call's cost
is spent only when the call ran (a refused call spends nothing), a line without a tool is
a model step (with its ``model`` and tokens), printed with the run's cost so far. Every
field is described in :mod:`toolbreaker.runtime._run._recorded_step`, which reads the
lines. The command prints each decision and, if the budget would stop the run, block its
writes or stop one of its tools, where and why, with the operator's stop packet (exit 1);
a run the budget lets run whole ends with its counters (exit 0); an empty run is an error
(exit 2).

The replay is a live :class:`~toolbreaker.RunGuard` fed the recorded steps
(:mod:`toolbreaker.runtime._run._recorded`): this module parses and prints, and decides
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, TextIO

from toolbreaker.core._run._values import as_amount, decimal_text
from toolbreaker.core._run.budget import Budget
from toolbreaker.core._run.fingerprint import FingerprintError
from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import ToolbreakerError, TraceError
from toolbreaker.runtime._run._recorded import RecordedRun, Replayed
from toolbreaker.runtime._run._recorded_step import read_recorded_run

__all__ = ["check_run", "read_recorded_run"]

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
    model_stop: int | None = None  # the line of a model step that stopped the run
    steps = 0
    for number, step in read_recorded_run(path):
        try:
            done = replay.replay(step)
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
            out.write(f"{number:>5}  {step.at:>7}  {_MODEL:<20} cost {cost}, run cost {so_far}\n")
            if model_stop is None and (guard.state.stopped or guard.state.writes_blocked):
                model_stop = number  # its usage stopped the run (or blocked its writes)
            continue
        lines[done.decision.step] = number
        if done.decision.verdict == "tool-stopped" and done.step.tool is not None:
            refused[done.step.tool] = refused.get(done.step.tool, 0) + 1
        # What an operator reads is masked, tool names and stop details included.
        text = f"{number:>5}  {step.at:>7}  {done.step.tool:<20} {_note(done)}"
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
        line = model_stop if condition["tool"] is None else lines.get(condition["step"])
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


def _message(exc: BaseException) -> str:
    if isinstance(exc, FingerprintError | ToolbreakerError):
        return str(getattr(exc, "message", exc))
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc)
