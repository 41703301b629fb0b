"""The words a stopped run ends with: one text, built by the stop packet, for every adapter."""

from __future__ import annotations

from pathlib import Path

from toolbreaker import SiblingOutcome
from toolbreaker.errors import RunStopped
from toolbreaker.runtime import StopPacket
from toolbreaker.runtime._run._siblings import BranchOutcome

SRC = Path(__file__).resolve().parents[2] / "src" / "toolbreaker"


def packet(detail: str = "the run repeated search 3 times") -> StopPacket:
    return StopPacket(
        task="t",
        condition="repeated-action",
        detail=detail,
        confirmed=(),
        uncertain=(),
        attempted=None,
        counters={},
        next_safe_action="summarise what was found",
    )


def test_the_text_names_the_condition_its_numbers_and_the_next_safe_action():
    assert packet().final_text() == (
        "Run stopped by toolbreaker (repeated-action): the run repeated search 3 times. "
        "Next safe action: summarise what was found."
    )


def test_a_turn_with_calls_says_which_completed_and_gives_its_instruction():
    """The last turn's calls: the ones that completed are named, and the turn's own
    instruction (what the model must know of the ones that did not) follows."""
    turn = SiblingOutcome(
        (
            BranchOutcome("stock", "completed", result={"n": 1}),
            BranchOutcome("reviews", "cancelled", "required dependency 'x' opened"),
        )
    )
    text = packet().final_text(turn)
    instruction = turn.to_result()["instruction"]
    assert instruction
    assert text.endswith(f"Last turn's calls completed: stock. {instruction}")
    assert packet().final_text(SiblingOutcome(())) == packet().final_text()


def test_secrets_are_masked_in_the_text_as_in_the_packet():
    text = packet("token sk-live-0123456789abcdef0123 refused").final_text()
    assert "sk-live-0123456789abcdef0123" not in text


def test_run_stopped_carries_the_packet_and_says_the_same_words():
    stopped = RunStopped(packet())
    assert str(stopped) == packet().final_text()
    assert stopped.packet == packet()
    assert stopped.turn is None


def test_no_adapter_words_a_stopped_run_itself():
    """One home: every adapter ends a stopped run with StopPacket.final_text."""
    words = "Run stopped by toolbreaker ("
    saying = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if words in path.read_text(encoding="utf-8")
    )
    assert saying == ["runtime/_packet.py"]
