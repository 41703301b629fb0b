"""What a stop says: the arguments a loop went round on, and writes blocked only when they are.

A loop of one tool with different arguments read ``cycle [check_stock, check_stock]``, as
if the model had called the same thing twice; a read-only run stopped for a loop told the
model ``"writes_blocked": true`` while its packet said no write was ever blocked.
"""

from __future__ import annotations

import re
from typing import Any

from toolbreaker import RunGuard
from toolbreaker.core._run.budget import Budget
from toolbreaker.testing import FakeClock


def looping_guard() -> tuple[RunGuard, Any]:
    guard = RunGuard("t-stock", clock=FakeClock())

    @guard.tool()
    def check_stock(sku: str) -> dict[str, Any]:
        return {"sku": sku, "in_stock": False}

    return guard, check_stock


def test_a_read_only_loop_stop_does_not_say_writes_are_blocked():
    """The model alternates check_stock between two SKUs; the guard stops the run. What the
    model reads names the two calls apart, says the run stopped, and does not say writes
    are blocked: none is (the packet says so too)."""
    guard, check_stock = looping_guard()
    answers = [check_stock(sku=sku) for sku in ("A-1", "B-2", "A-1", "B-2")]
    stop = answers[-1]
    assert stop["run_stopped"] is True
    assert stop["writes_blocked"] is False
    packet = guard.stop_packet().to_dict()
    assert packet["counters"]["writes_blocked"] is None
    found = re.fullmatch(
        r"cycle \[check_stock \(arguments ([0-9a-f]{8})\), check_stock \(arguments "
        r"([0-9a-f]{8})\)\] repeated 2 times without new evidence",
        stop["detail"],
    )
    assert found is not None, stop["detail"]
    assert found[1] != found[2]
    fingerprints = [entry["fingerprint"] for entry in packet["history"]]
    assert packet["attempted"]["fingerprint"].startswith(found[2])
    assert fingerprints
    assert "A-1" not in stop["detail"]
    assert "B-2" not in stop["detail"]


def test_a_run_stopped_with_its_writes_blocked_says_both():
    """Writes blocked first (an unknown outcome), then the run stops: both are true."""
    guard = RunGuard("t-both", clock=FakeClock(), budget=Budget(max_tool_calls=2))

    @guard.tool(risk="reversible_write", business_key=["to"])
    def send(to: str, idempotency_key: str) -> dict[str, Any]:
        raise TimeoutError("no reply")

    @guard.tool()
    def lookup(q: str) -> dict[str, Any]:
        return {"q": q}

    send(to="a")
    assert send(to="b")["writes_blocked"] is True
    lookup(q="x")
    stopped = lookup(q="y")
    assert stopped["run_stopped"] is True
    assert stopped["writes_blocked"] is True
