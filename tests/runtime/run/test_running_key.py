"""``toolbreaker.idempotency_key()``: inside every tool a run guard runs, the key of the
write running in that context, in the tool's own thread or task; ``None`` for a read and
outside a tool. One function: each adapter's ``idempotency_key`` is this one."""

from __future__ import annotations

import asyncio
import importlib
import threading

import pytest

from toolbreaker import Breaker, Policy, RunGuard
from toolbreaker import idempotency_key as running_key


def ticket_guard(seen: list[tuple[str, str | None, str]]) -> RunGuard:
    """A guard with a write (behind a breaker's deadline: a worker thread) and a read."""
    guard = RunGuard("task-key", budget=None)
    breaker = Breaker("tickets", policy=Policy(), timeout=5.0)

    @guard.tool(risk="reversible_write", breaker=breaker)
    def create_ticket(title: str, idempotency_key: str) -> dict[str, str]:
        assert running_key() == idempotency_key  # the argument and the function agree
        seen.append(("write", running_key(), threading.current_thread().name))
        return {"id": f"T-{title}"}

    @guard.tool()
    def search(q: str) -> dict[str, str]:
        seen.append(("read", running_key(), threading.current_thread().name))
        return {"hits": q}

    @guard.tool(risk="reversible_write")
    async def refund(order: str, idempotency_key: str) -> dict[str, str]:
        await asyncio.sleep(0)  # the other call runs meanwhile
        assert running_key() == idempotency_key
        seen.append(("async", running_key(), "loop"))
        return {"refunded": order}

    return guard


def test_a_write_reads_its_own_key_and_a_read_none():
    seen: list[tuple[str, str | None, str]] = []
    guard = ticket_guard(seen)
    assert guard.call("create_ticket", {"title": "a"}) == {"id": "T-a"}
    assert guard.call("search", {"q": "usb"}) == {"hits": "usb"}
    (_, key, thread), (_, read_key, _) = seen
    assert key is not None
    assert len(key) >= 16
    assert thread != threading.main_thread().name  # the breaker's deadline ran it apart
    assert read_key is None
    assert running_key() is None  # outside any tool


def test_the_same_write_asked_again_reads_the_same_key_and_another_write_another():
    seen: list[tuple[str, str | None, str]] = []
    guard = ticket_guard(seen)
    guard.call("create_ticket", {"title": "a"})
    guard.call("create_ticket", {"title": "b"})
    first, second = seen[0][1], seen[1][1]
    assert first != second
    assert first == guard.begin("create_ticket", {"title": "a"}).idempotency_key


def test_an_async_tool_reads_its_key_on_the_loop_and_concurrent_tools_keep_their_own():
    seen: list[tuple[str, str | None, str]] = []
    guard = ticket_guard(seen)

    async def main() -> None:
        await asyncio.gather(
            guard.acall("refund", {"order": "A-1"}), guard.acall("refund", {"order": "A-2"})
        )

    asyncio.run(main())
    keys = [key for _, key, _ in seen]
    assert len(set(keys)) == 2
    assert None not in keys
    assert running_key() is None


@pytest.mark.parametrize("module", ["langchain", "llama_index", "crewai"])
def test_the_one_function_has_one_public_home(module):
    """A tool of any adapter reads its key with ``toolbreaker.idempotency_key``; the
    adapters no longer re-export it under their own names."""
    found = pytest.importorskip(f"toolbreaker.integrations.{module}")
    assert "idempotency_key" not in found.__all__
    assert importlib.import_module("toolbreaker").idempotency_key is running_key
