"""The MCP proxy and the 2026-07-28 revision's results, against a real stdio server.

The server (``mcp_rounds_server.py``, a subprocess the real ``mcp`` client starts over
stdio) has a tool that asks for input once (an ``input_required`` round, answered by the
client's elicitation callback) and a tool that runs as a task (the tasks extension's
``task`` result, polled with ``tasks/get``). What is checked: an input-required round is
no outcome and the call sent again is the same call; a task's call stays open (a write
pending in the journal) until the task's final status settles it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult, InputRequiredResult, TextContent

from toolbreaker import Budget, Policy, Registry, RunGuard
from toolbreaker.core._breaker.state import CLOSED, HALF_OPEN
from toolbreaker.integrations._mcp_tasks import TasksExtension
from toolbreaker.integrations.mcp import ANSWER_META_KEY, GuardedClient
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock, force_state

SERVER = Path(__file__).with_name("mcp_rounds_server.py")
PARAMS = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
EXPORT = {"export": "reversible_write"}


async def say_yes(_ctx: Any, _params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"yes": True})


def text(result: Any) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


async def entered(client: Client, tool: str) -> int:
    return int(text(await client.call_tool("entered_count", {"tool": tool})))


def test_rounds_the_sdk_drives_are_one_call():
    """mcp.Client answers the input-required round itself: the proxy sees one call, the
    guard counts one call, the breaker one success, and the server was entered twice."""

    async def main() -> tuple[Any, ...]:
        async with Client(PARAMS, elicitation_callback=say_yes) as client:
            guard = RunGuard("refunds")
            proxy = GuardedClient(client, server="shop", guard=guard, timeout=10)
            result = await proxy.call_tool("confirm_refund", {"order": "A-1"})
            rounds = await entered(client, "confirm_refund")
            return result, guard.state.calls, rounds, proxy.breaker_for("confirm_refund")

    result, calls, rounds, breaker = anyio.run(main)
    assert text(result) == "refunded A-1"
    assert (calls, rounds) == (1, 2)
    assert breaker.state.phase == CLOSED


def test_a_round_the_caller_drives_is_no_outcome_and_the_call_sent_again_is_the_same_call():
    """A caller driving the rounds (a ClientSession with allow_input_required) gets the
    interim result; sending the call again with the answers continues the same call: one
    call for the guard (no repeat, even with max_repeats=0), and the half-open breaker's
    probe lease is held across the rounds: another call waits its turn (rejected), and the
    final answer closes the breaker, though the user took longer than the call's deadline
    to answer (the final round is judged by its own time: not a late result)."""
    clock = FakeClock()
    policy = Policy(
        failure_threshold=1, cooldown_ms=30_000, success_threshold=1, lease_ttl_ms=120_000
    )
    registry = Registry(policy, clock=clock)

    async def main() -> dict[str, Any]:
        async with Client(PARAMS, elicitation_callback=say_yes) as client:
            guard = RunGuard("refunds", budget=Budget(max_repeats=0))
            proxy = GuardedClient(
                client.session, server="shop", registry=registry, guard=guard, timeout=10
            )
            breaker = proxy.breaker_for("confirm_refund")
            force_state(breaker, "half_open")
            args = {"order": "A-2"}
            first = await proxy.call_tool("confirm_refund", args, allow_input_required=True)
            seen: dict[str, Any] = {
                "first": first,
                "open_rounds": proxy.open_rounds,
                "phase_between": breaker.state.phase,
                "calls_between": guard.state.calls,
            }
            other = await proxy.call_tool("confirm_refund", {"order": "B-9"})
            seen["other"] = other
            assert isinstance(first, InputRequiredResult)
            clock.advance(seconds=60)  # the user thinks for a minute (the deadline is 10 s)
            answers = {"confirm": ElicitResult(action="accept", content={"yes": True})}
            final = await proxy.call_tool(
                "confirm_refund",
                args,
                input_responses=answers,
                request_state=first.request_state,
                allow_input_required=True,
            )
            seen.update(
                final=final,
                calls=guard.state.calls,
                stopped=guard.stopped,
                phase=breaker.state.phase,
                open_after=proxy.open_rounds,
                rounds=await entered(client, "confirm_refund"),
            )
            return seen

    seen = anyio.run(main)
    assert isinstance(seen["first"], InputRequiredResult)
    assert seen["open_rounds"] == 1
    assert seen["phase_between"] == HALF_OPEN  # the interim round settled nothing
    assert seen["calls_between"] == 1
    assert seen["other"].is_error is True  # the probe is out: the other call waits
    assert seen["other"].meta[ANSWER_META_KEY] == "tool_unavailable"
    assert text(seen["final"]) == "refunded A-2"
    assert seen["calls"] == 2  # A-2 once over its two rounds, and the rejected B-9
    assert seen["stopped"] is None
    assert seen["phase"] == CLOSED
    assert seen["open_after"] == 0
    assert seen["rounds"] == 2


def test_a_write_run_as_a_task_is_confirmed_when_its_task_completes():
    """The server accepts the write as a task; the proxy polls tasks/get and the task's
    completed status confirms the write: a resumed run answers it from the journal."""
    journal = MemoryStore()

    async def run() -> tuple[Any, int]:
        async with Client(PARAMS, extensions=[TasksExtension()]) as client:
            guard = RunGuard("export-task", journal=journal)
            proxy = GuardedClient(client, server="warehouse", guard=guard, timeout=10, risk=EXPORT)
            result = await proxy.call_tool("export", {"table": "orders"})
            return result, await entered(client, "export")

    first, sent = anyio.run(run)
    again, sent_again = anyio.run(run)
    assert text(first) == "exported orders as task-1"
    assert first.is_error is False
    assert sent == 1
    assert again.meta[ANSWER_META_KEY] == "journal"
    assert sent_again == 0  # a fresh server process: the resumed run sent nothing


def test_a_failed_task_is_a_certain_failure_and_a_cancelled_one_an_unknown_outcome():
    """failed: the write certainly did not happen (the next write still runs);
    cancelled: it may have, so the outcome is unknown, writes are blocked and the stop
    packet lists it. Neither counts against the server's health."""

    async def main() -> tuple[Any, ...]:
        async with Client(PARAMS, extensions=[TasksExtension()]) as client:
            guard = RunGuard("export-task")
            proxy = GuardedClient(client, server="warehouse", guard=guard, timeout=10, risk=EXPORT)
            failed = await proxy.call_tool("export", {"table": "a", "outcome": "failed"})
            cancelled = await proxy.call_tool("export", {"table": "b", "outcome": "cancelled"})
            blocked = await proxy.call_tool("export", {"table": "c"})
            packet = guard.stop_packet()
            sent = await entered(client, "export")
            return failed, cancelled, blocked, packet, sent, proxy.breaker_for("export")

    failed, cancelled, blocked, packet, sent, breaker = anyio.run(main)
    assert failed.is_error is True
    assert failed.meta[ANSWER_META_KEY] == "error"
    assert "the export crashed" in text(failed)
    assert cancelled.meta[ANSWER_META_KEY] == "outcome_unknown"
    assert blocked.meta[ANSWER_META_KEY] == "writes_blocked"
    assert sent == 2  # the blocked write never reached the server
    assert [entry["status"] for entry in packet.uncertain] == ["unknown"]
    assert breaker.state.phase == CLOSED


def test_a_write_whose_task_is_still_running_is_pending_and_never_sent_again():
    """While the task runs the write is pending in the journal; a resumed run (the same
    task id and journal) does not send it again: it is reconciled, not replayed."""
    journal = MemoryStore()

    async def main() -> tuple[Any, ...]:
        async with Client(PARAMS, extensions=[TasksExtension()]) as client:
            proxy = GuardedClient(
                client,
                server="warehouse",
                guard=RunGuard("export-task", journal=journal),
                timeout=10,
                risk=EXPORT,
            )
            args = {"table": "orders", "after": 1_000_000}
            async with anyio.create_task_group() as tg:
                tg.start_soon(proxy.call_tool, "export", args)
                for _ in range(500):  # until the server accepted it (bounded, no clock)
                    if await entered(client, "export"):
                        break
                # The run "crashes" while its task runs; the resumed run asks again.
                resumed_guard = RunGuard("export-task", journal=journal)
                resumed = GuardedClient(
                    client, server="warehouse", guard=resumed_guard, timeout=10, risk=EXPORT
                )
                again = await resumed.call_tool("export", args)
                tg.cancel_scope.cancel()
            return again, resumed_guard.stop_packet(), await entered(client, "export")

    again, packet, sent = anyio.run(main)
    assert again.meta[ANSWER_META_KEY] == "outcome_unknown"
    assert sent == 1
    assert [entry["status"] for entry in packet.uncertain] == ["pending"]


def test_closing_a_round_nobody_answers_gives_the_probe_back():
    """A caller that will not send the call again closes its round: the half-open
    breaker's probe lease is given back without an outcome (still half-open), so the next
    call is admitted as the probe."""
    registry = Registry(Policy(failure_threshold=1, cooldown_ms=30_000, success_threshold=1))

    async def main() -> tuple[Any, ...]:
        async with Client(PARAMS, elicitation_callback=say_yes) as client:
            guard = RunGuard("refunds")
            proxy = GuardedClient(
                client.session, server="shop", registry=registry, guard=guard, timeout=10
            )
            breaker = proxy.breaker_for("confirm_refund")
            force_state(breaker, "half_open")
            first = await proxy.call_tool(
                "confirm_refund", {"order": "A-3"}, allow_input_required=True
            )
            closed = await proxy.aclose_rounds()
            phase = breaker.state.phase
            after = await proxy.call_tool(
                "confirm_refund", {"order": "A-4"}, allow_input_required=True
            )
            open_rounds = proxy.open_rounds
            await proxy.aclose_rounds()
            return first, closed, phase, after, open_rounds

    first, closed, phase, after, open_rounds = anyio.run(main)
    assert isinstance(first, InputRequiredResult)
    assert closed == 1
    assert phase == HALF_OPEN
    assert isinstance(after, InputRequiredResult)  # admitted as the probe: the server asked
    assert open_rounds == 1
