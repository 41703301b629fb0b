"""``toolbreaker check-run``: replay a recorded agent run through a budget.

A run trace is JSON Lines, one tool call (or model step) per line::

    {"at": 0, "tool": "search", "args": {"q": "cable"}, "outcome": "success", "result": {...}}
    {"at": 900, "tool": "send_email", "risk": "reversible_write",
     "args": {"to": "c-1", "template": "renewal"}, "business_key": ["to", "template"],
     "outcome": "unknown"}
    {"at": 950, "cost": "0.004"}

``at`` is milliseconds since the run started; ``risk`` defaults to ``read``; ``outcome`` is
``success``, ``failure``, ``unknown`` or ``ignored``, with the failure's ``error`` class;
``result`` (any JSON) is what the call returned, and ``result_error`` what failure it
reports; ``cost`` is a decimal string: a tool call's cost is spent only when the call
ran (a refused call spends nothing), a line without a tool is a model step (with its
``model`` and tokens). Every field is described in
:mod:`toolbreaker.runtime.run._recorded_step`, which reads the lines. The command
prints each decision and, if the budget would stop the run or block its writes, where
and why, with the operator's stop packet.

The replay is a live :class:`~toolbreaker.RunGuard` fed the recorded steps
(:mod:`toolbreaker.runtime.run._recorded`): this module parses and prints, and decides
nothing.
"""

from __future__ import annotations

import json
from typing import Final, TextIO

from toolbreaker.core.run.budget import Budget
from toolbreaker.core.run.fingerprint import FingerprintError
from toolbreaker.core.run.redact import redact_text
from toolbreaker.errors import ToolbreakerError, TraceError
from toolbreaker.runtime.run._recorded import RecordedRun, Replayed
from toolbreaker.runtime.run._recorded_step import read_recorded_run

__all__ = ["check_run"]

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
    for number, step in read_recorded_run(path):
        try:
            done = replay.replay(step)
        except (ToolbreakerError, KeyError, TypeError, ValueError) as exc:
            raise TraceError(_message(exc), file=path, line=number) from None
        if done.decision is None:
            continue  # a model step
        lines[done.decision.step] = number
        # What an operator reads is masked, tool names and stop details included.
        text = f"{number:>5}  {step.at:>7}  {done.step.tool:<20} {_note(done)}"
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


def _message(exc: BaseException) -> str:
    if isinstance(exc, FingerprintError | ToolbreakerError):
        return str(getattr(exc, "message", exc))
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc)
