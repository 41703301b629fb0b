"""The core's rule for answers that are not a call's outcome (toolbreaker.core._run.rounds)."""

from __future__ import annotations

import pytest

from toolbreaker.core._run import protocol
from toolbreaker.core._run.rounds import answer_kind, task_outcome


@pytest.mark.parametrize(
    ("result_type", "kind"),
    [
        (None, "final"),
        ("complete", "final"),
        ("input_required", "interim"),
        ("task", "task"),
        ("some-extension", "final"),
    ],
)
def test_answer_kind_by_result_type(result_type: object, kind: str) -> None:
    """Only input_required is an interim round and only task a call accepted as a task;
    an absent tag is a final answer (older servers send none)."""
    assert answer_kind(result_type) == kind


@pytest.mark.parametrize("status", ["working", "input_required"])
def test_a_running_task_settles_nothing(status: str) -> None:
    """A task still working, or waiting for input, has no outcome yet."""
    assert task_outcome(status) == "running"


@pytest.mark.parametrize(
    ("status", "move"),
    [
        ("completed", "proven"),
        ("failed", "not-made"),
        ("cancelled", "maybe-made"),
        ("expired", "maybe-made"),
        (None, "maybe-made"),
        (3, "maybe-made"),
    ],
)
def test_a_final_task_status_settles_its_write_through_the_write_protocol(
    status: object, move: str
) -> None:
    """completed confirms the write, failed is a certain failure, and anything else
    (cancelled, a status nobody knows, no status at all) is an unknown outcome: never
    replayed. The move comes from the write protocol, not from the rounds module."""
    assert protocol.settled_move(task_outcome(status)) == move
