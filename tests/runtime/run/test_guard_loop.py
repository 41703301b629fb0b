"""Async means async: a run guard's own checks never run on the event loop.

A tool's ``authorize``, ``verify`` and ``reconcile`` checks and the run's stop listeners
are plain functions that may do I/O (an authority service, the provider's status API,
an alert). On the async paths of a run guard they run in a worker thread, even when
every store of the run lives in this process: each records whether a loop was running
in its thread, so nothing here is timed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from toolbreaker import Breaker, GuardedTool, Policy, RunGuard
from toolbreaker.stores import MemoryStore


def on_a_loop() -> bool:
    return asyncio._get_running_loop() is not None


def test_a_writes_checks_and_the_stop_listener_run_off_the_loop():
    """``acall`` of an irreversible write: its authority check, then (its connection
    reset: it may have committed) its reconcile check, then the stop listener told that
    writes are blocked, each in a worker thread; so is ``verify`` on a success."""
    seen: dict[str, list[bool]] = {}

    def noted(name: str, answer: Any) -> Any:
        seen.setdefault(name, []).append(on_a_loop())
        return answer

    breaker = Breaker("payments", timeout=5, policy=Policy(failure_threshold=100))
    guard = RunGuard("loop", journal=MemoryStore())  # one unknown write blocks writes
    guard.add_stop_listener(lambda packet, _: noted("listener", None))
    calls = 0

    async def pay(amount: int, idempotency_key: str) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionResetError("reset after the request was sent")
        return {"id": "P-1"}

    guard.add_tool(
        GuardedTool(
            "pay",
            pay,
            risk="irreversible",
            breaker=breaker,
            authorize=lambda request: noted("authorize", True),
            reconcile=lambda key, args: noted("reconcile", None),
            verify=lambda result: noted("verify", True),
        )
    )

    async def main() -> tuple[Any, Any]:
        unknown = await guard.acall("pay", {"amount": 5})
        guard.resolve(unknown["idempotency_key"], committed=False)
        return unknown, await guard.acall("pay", {"amount": 6})

    unknown, paid = asyncio.run(main())
    assert unknown["outcome_unknown"] is True
    assert paid == {"id": "P-1"}
    assert seen == {
        "authorize": [False, False],
        "reconcile": [False],
        "listener": [False],
        "verify": [False],
    }
