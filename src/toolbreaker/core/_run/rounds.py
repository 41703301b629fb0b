"""Calls that take more than one answer: interim rounds and calls accepted as tasks.

Theory of operation
-------------------
Most answers to a tool call are *final*: the call's outcome, which settles it (its
breaker records it, the run guard counts it, a write's journal entry moves). Two answers
are not:

- an *interim* round: the server needs input first (MCP's ``input_required``, a
  multi-round-trip request): the client answers and sends the same call again. The
  round is no outcome at all: not a success, not a failure, and the call sent again is
  the same call, not a second one nor a repeat of it. One call spans its rounds: its
  permit (a half-open probe's lease, a bulkhead slot) is held until its final answer;
- a *task*: the server accepted the call and runs it in the background (MCP's
  ``task`` result). Nothing is settled yet: a write whose task runs stays ``pending`` in
  the journal (never sent again, by this run or a resumed one), and the task's final
  status settles it (:func:`task_outcome`).

:func:`answer_kind` says which one an answer is; :func:`task_outcome` what a task's
status means for the call. The write's journal move follows from the outcome through the
write protocol (:func:`toolbreaker.core._run.protocol.settled_move`), never from here.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

__all__ = ["AnswerKind", "TaskOutcome", "answer_kind", "task_outcome"]

AnswerKind = Literal["final", "interim", "task"]
TaskOutcome = Literal["running", "success", "failure", "unknown"]

#: A task's statuses that are not final: it is still running (or waits for input).
_RUNNING: Final = frozenset({"working", "input_required"})
_FINAL: Final[Mapping[str, TaskOutcome]] = {"completed": "success", "failed": "failure"}


def answer_kind(result_type: object) -> AnswerKind:
    """What a call's answer is, by its ``resultType`` (absent: a final answer).

    ``input_required`` is an interim round, ``task`` a call accepted as a task; any other
    tag (``complete``, or none) is the call's final answer.
    """
    if result_type == "input_required":
        return "interim"
    if result_type == "task":
        return "task"
    return "final"


def task_outcome(status: object) -> TaskOutcome:
    """What a task's status means for the call it runs.

    - ``working``, ``input_required``: ``running`` (nothing is settled yet);
    - ``completed``: ``success`` (the task's result is the call's result, whose own
      error, if any, is judged like any result's);
    - ``failed``: ``failure`` (the server says the call's execution failed with an
      error: a certain failure);
    - anything else: ``unknown``. ``cancelled`` may come after the work committed (a
      cancellation is cooperative), and a status nobody knows, a task the server lost or
      one that could not be read proves nothing: the outcome is unknown, never replayed.
    """
    if status in _RUNNING:
        return "running"
    found = _FINAL.get(status) if isinstance(status, str) else None
    return "unknown" if found is None else found
