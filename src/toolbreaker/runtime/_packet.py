"""The stop packet: what a person gets instead of "something went wrong".

Built by :class:`~toolbreaker.RunGuard` when a run stops (``toolbreaker check-run`` prints
the same packet), and by the degradation matrix (``handoff`` and ``stop``) when a
dependency is out. Secrets are masked when it is built. ``history`` was added to
``toolbreaker.stop/v1`` as a new key: readers that ignore unknown keys read it as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolbreaker.core._run.redact import redact
from toolbreaker.errors import TurnReport

__all__ = ["StopPacket"]


@dataclasses.dataclass(frozen=True, slots=True)
class StopPacket:
    """What an operator gets instead of "something went wrong". Secrets masked when built.

    Attributes:
        task: the task id.
        condition: the exact condition that stopped the run.
        detail: the condition in words, with the numbers.
        confirmed: completed steps with their idempotency keys and external ids.
        uncertain: writes whose outcome is not settled, each with its journal status:
            unknown, in flight, not found by the status check, queued or maybe queued
            (with the queue id), or handed to a person (with the reconciliation id).
        attempted: the attempted action (tool, fingerprint, idempotency key).
        counters: the budget counters when the run stopped.
        next_safe_action: what to do now.
        history: every condition that stopped the run or blocked its writes, in the order
            it fired, each with its step (the run's request number), the tool, the effect
            (``stopped`` or ``writes-blocked``) and the stop's words and numbers: a run
            whose writes were blocked before it stopped shows both.
    """

    task: str
    condition: str
    detail: str
    confirmed: tuple[Mapping[str, Any], ...]
    uncertain: tuple[Mapping[str, Any], ...]
    attempted: Mapping[str, Any] | None
    counters: Mapping[str, Any]
    next_safe_action: str
    history: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # Masked where it is built: every way of reading a packet (its fields, str(),
        # repr(), to_dict(), an adapter's message) shows the same masked text.
        for name in ("task", "condition", "detail", "next_safe_action"):
            object.__setattr__(self, name, redact(str(getattr(self, name))))
        object.__setattr__(self, "confirmed", tuple(redact(dict(x)) for x in self.confirmed))
        object.__setattr__(self, "uncertain", tuple(redact(dict(x)) for x in self.uncertain))
        attempted = self.attempted
        object.__setattr__(self, "attempted", redact(dict(attempted)) if attempted else None)
        object.__setattr__(self, "counters", redact(dict(self.counters)))
        object.__setattr__(self, "history", tuple(redact(dict(x)) for x in self.history))

    def final_text(self, turn: TurnReport | None = None) -> str:
        """The words every adapter ends a stopped run with (its final message's text).

        ``turn``: the last model turn's calls (``RunGuard.turn_outcome()``); when it has
        any, the text says which completed, and the turn's instruction follows.
        """
        text = (
            f"Run stopped by toolbreaker ({self.condition}): {self.detail}. "
            f"Next safe action: {self.next_safe_action}."
        )
        if turn is not None and turn.branches:
            text += f" Last turn's calls completed: {', '.join(turn.completed) or 'none'}."
            instruction = turn.to_result().get("instruction")
            if instruction:
                text += f" {instruction}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The packet as a JSON-ready dict (secrets were masked when it was built)."""
        return {
            "schema": "toolbreaker.stop/v1",
            "task": self.task,
            "condition": self.condition,
            "detail": self.detail,
            "confirmed": [dict(x) for x in self.confirmed],
            "uncertain": [dict(x) for x in self.uncertain],
            "attempted": dict(self.attempted) if self.attempted else None,
            "counters": dict(self.counters),
            "next_safe_action": self.next_safe_action,
            "history": [dict(x) for x in self.history],
        }

    def to_json(self) -> str:
        """The packet as indented JSON."""
        import json  # a packet shown as JSON: json loads with the first

        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)
