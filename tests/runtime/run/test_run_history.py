"""Stop packets keep history: every condition in the order it fired, each with its step."""

from __future__ import annotations

import json
from typing import Any

from toolbreaker import RunGuard
from toolbreaker.core._run.budget import Budget
from toolbreaker.testing import FakeClock


def history(packet: Any) -> list[tuple[str, str, int, str | None]]:
    return [(c["condition"], c["effect"], c["step"], c["tool"]) for c in packet["history"]]


def test_a_stop_after_blocked_writes_keeps_the_block_in_the_packet():
    """Issue 21, defect 8: a write's outcome is unknown, so writes are blocked; its status
    check finds it (the block lifts); the model repeats the write it was told not to
    repeat and the run stops on repeated-action. The packet still shows the block that
    came first, with its step, then the stop (before: only repeated-action)."""
    clock = FakeClock()
    guard = RunGuard("t-8", clock=clock)
    found: dict[str, Any] = {}

    def reconcile(key: str, _args: Any) -> Any:
        return found.get(key)

    @guard.tool(risk="reversible_write", business_key=["to"], reconcile=reconcile)
    def send(to: str, idempotency_key: str) -> dict[str, Any]:
        found[idempotency_key] = {"id": "m-1"}  # it committed; the reply is lost
        raise TimeoutError("no reply")

    first = send(to="c-1")
    assert first["outcome_unknown"] is True
    assert guard.writes_blocked is None  # the status check found it: the block lifted
    for _ in range(3):
        clock.advance(10)
        answer = send(to="c-1")
    assert answer["run_stopped"] is True
    packet = guard.stop_packet().to_dict()
    assert packet["condition"] == "repeated-action"
    assert history(packet) == [
        ("uncertain-side-effect", "writes-blocked", 1, "send"),
        ("repeated-action", "stopped", 3, "send"),
    ]
    assert packet["history"][0]["at"] == 0
    assert packet["history"][1]["at"] == 20
    json.dumps(packet)


def test_a_packet_shows_the_block_while_the_run_still_goes_on():
    """Writes blocked at step 1, a write refused at step 2, reads go on: the packet's
    history holds the one block, at the step it fired."""
    guard = RunGuard("t-b", clock=FakeClock())

    @guard.tool(risk="reversible_write", business_key=["to"])
    def send(to: str, idempotency_key: str) -> dict[str, Any]:
        raise TimeoutError("no reply")

    @guard.tool()
    def lookup(q: str) -> dict[str, Any]:
        return {"q": q}

    send(to="a")
    assert send(to="b")["writes_blocked"] is True
    assert lookup(q="x") == {"q": "x"}
    packet = guard.stop_packet().to_dict()
    assert packet["condition"] == "uncertain-side-effect"
    assert history(packet) == [("uncertain-side-effect", "writes-blocked", 1, "send")]


def test_the_packets_history_is_masked():
    """A secret in a condition's detail never reaches the packet raw."""
    guard = RunGuard("t-m", budget=Budget(max_tool_calls=1), clock=FakeClock())
    token = "sk-proj-" + "A1b2C3d4" * 5
    guard.tool(f"lookup_{token}")(lambda: {"ok": 1})
    guard.call(f"lookup_{token}")
    guard.call(f"lookup_{token}")
    text = guard.stop_packet().to_json()
    assert "max-tool-calls" in text
    assert token not in text
