"""The CrewAI adapter, inside a real Crew with a scripted offline LLM.

Every test kicks off a real ``Crew``: a ``BaseLLM`` subclass plays the model, answering in
CrewAI's own ReAct format from the observations it was sent, so the assertions are on what
the model actually read. Tools call the local ToolService over real sockets. CrewAI's
telemetry, tracing and first-run prompt are off (tests/conftest.py sets its switches).
"""

from __future__ import annotations

import ast
import asyncio
import gc
import json
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from crewai import Crew
    from crewai.tools import BaseTool

if sys.version_info >= (3, 14):  # pragma: no cover - crewai 1.6 declares <3.14
    pytest.skip("crewai 1.6 supports Python 3.10 to 3.13", allow_module_level=True)

from adapter_registry import TIMEOUT, make_registry
from frameworks import needs
from toolbreaker import Budget, ModelPrice, RunGuard
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

needs("crewai", reason="the crewai extra is not installed")

# CrewAI's own deprecations (newer Pythons deprecate calls it makes) are not ours to fail on.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
    # CrewAI 1.6 leaves the SQLite connections of its task-output storage open; Python 3.13
    # warns when they are collected (the fixture below collects them here)
    pytest.mark.filterwarnings("ignore:unclosed database:ResourceWarning"),
]


@pytest.fixture(autouse=True)
def crewai_imported() -> None:
    """CrewAI imported before a test uses it, quietly: its own import warns (ImportWarning,
    deprecations). The tests import it, not the module: the suite's collection does not."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import crewai  # noqa: F401


@pytest.fixture(autouse=True)
def collect_crewai_connections() -> Iterator[None]:
    """Collect what CrewAI left open now, not in a later module's test."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


# -- the scripted model ----------------------------------------------------------------------


def act(tool: str, **args: Any) -> str:
    return f"Thought: I should use {tool}\nAction: {tool}\nAction Input: {json.dumps(args)}"


def answer(text: str) -> str:
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


@dataclass
class Script:
    """What the model does next, from the observations it has read so far."""

    policy: Callable[[Script], str]
    observations: list[str] = field(default_factory=list)
    steps: int = 0
    threads: set[int] = field(default_factory=set)

    def last(self) -> Any:
        """The last observation: the guard's JSON, or a tool's dict as CrewAI words it."""
        text = self.observations[-1]
        try:
            return json.loads(text)
        except ValueError:
            return ast.literal_eval(text)  # CrewAI hands the model str(result)


def crew_of(script: Script, tools: list[BaseTool], **agent_options: Any) -> Crew:
    from crewai import Agent, Crew, Task
    from crewai_parts import ScriptedLLM

    agent = Agent(
        role="support",
        goal="help the customer",
        backstory="a careful agent",
        llm=ScriptedLLM(script),
        tools=tools,
        verbose=False,
        **agent_options,
    )
    task = Task(description="help", expected_output="an answer", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False)


# -- real HTTP tools -------------------------------------------------------------------------


def search_tools(service: ToolService, ran: Counter[str]) -> list[BaseTool]:
    from crewai_parts import SearchTool

    snapshot = SearchTool(name="search_snapshot", url=service.url, ran=ran)
    snapshot.description = "Search yesterday's catalog snapshot."
    return [SearchTool(url=service.url, ran=ran), snapshot]


# -- 1. the breaker opens on real 503s; the model reads the fallback -------------------------


def stubborn_then_fallback(script: Script) -> str:
    """Searches three times (different words), then does what the last answer says."""
    queries = ["usb cable", "usb-c cable", "charging cable"]
    if script.steps <= 3:
        return act("search", q=queries[script.steps - 1])
    last = script.last()
    if script.steps == 4:
        return act(last["fallback"], q="usb cable")
    return answer(f"from the snapshot of {last['as_of']}: {last['results'][0]['name']}")


def test_open_breaker_skips_the_tool_and_the_model_uses_the_fallback(service):
    """Real 503s open the breaker; the third search never runs; the model reads
    tool_unavailable naming the fallback, calls it, and the crew answers."""
    from toolbreaker.integrations.crewai import protect

    service.outage("GET /search")
    registry = make_registry()
    ran: Counter[str] = Counter()
    script = Script(stubborn_then_fallback)
    tools = search_tools(service, ran)
    described = [(t.name, t.description, t.args_schema) for t in tools]
    crew = crew_of(script, tools)

    with protect(crew, guard=RunGuard("task-fallback"), registry=registry):
        result = crew.kickoff()

    assert ran["search"] == 2
    assert service.hits["GET /search"] == 2
    first, opened, rejected = (json.loads(o) for o in script.observations[:3])
    assert first["retryable"] is True
    assert "tool_unavailable" not in first
    assert opened["tool_unavailable"] is True  # the failure that opened it says so
    assert rejected["tool_unavailable"] is True
    assert rejected["fallback"] == "search_snapshot"
    assert 'Use "search_snapshot" instead' in rejected["instruction"]
    assert ran["search_snapshot"] == 1
    assert result.raw.startswith("from the snapshot of")
    assert registry.for_tool("search").state.phase == "open"
    # still valid CrewAI tools: nothing the model or CrewAI reads about them changed
    assert [(t.name, t.description, t.args_schema) for t in tools] == described


# -- 2. a 404 is the caller's mistake --------------------------------------------------------


def test_not_found_does_not_open_the_breaker(service):
    """Three 404s leave the breaker closed; the model reads that retrying is pointless."""
    from crewai_parts import OrderTool

    from toolbreaker.integrations.crewai import protect

    def policy(script: Script) -> str:
        plan = ["Z-1", "Z-2", "Z-3", "A-1001"]
        if script.steps <= len(plan):
            return act("order_status", order_id=plan[script.steps - 1])
        return answer(f"A-1001 is {script.last()['status']}")

    registry = make_registry(threshold=2)
    ran: Counter[str] = Counter()
    script = Script(policy)
    crew = crew_of(script, [OrderTool(url=service.url, ran=ran)])

    with protect(crew, guard=RunGuard("task-404"), registry=registry):
        result = crew.kickoff()

    assert result.raw == "A-1001 is shipped"
    missing = [json.loads(o) for o in script.observations[:3]]
    assert all(m["ok"] is False and m["retryable"] is False for m in missing)
    assert all("HTTP Error 404" in m["error"] for m in missing)
    breaker = registry.for_tool("order_status")
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"http-404": 3}
    assert service.hits["GET /orders"] == 4


# -- 3. a looping model is stopped, with a stop packet and its model cost --------------------


def looping_crew(script: Script, ran: Counter[str]) -> Crew:
    from crewai_parts import Lookup

    refine = Lookup(name="refine", ran=ran)
    # CrewAI's cache would answer the loop's calls itself: the guard must see them.
    return crew_of(script, [Lookup(ran=ran), refine], cache=False, max_retry_limit=0)


PRICES = {"scripted-*": ModelPrice("1", "10")}  # per million tokens


def test_a_looping_model_is_stopped_with_a_stop_packet_that_counts_the_model():
    """Two reads alternating without new evidence stop the run: the model is not asked
    again, kickoff() raises CrewAI's own error and run_stop() gives the packet, whose
    counters price every model response the crew made."""
    from toolbreaker.integrations.crewai import protect, run_stop

    ran: Counter[str] = Counter()
    plan = ["lookup", "refine"]
    script = Script(lambda s: act(plan[(s.steps - 1) % 2], q="renewal"))
    crew = looping_crew(script, ran)
    guard = RunGuard("task-loop", budget=Budget(max_repeats=2, prices=PRICES))

    with protect(crew, guard=guard), pytest.raises(ValueError, match="blocked") as raised:
        crew.kickoff()

    stop = run_stop(raised.value, guard)
    assert stop is not None
    assert stop.packet.condition == "loop"
    packet = json.loads(stop.packet.to_json())
    assert "looping" in packet["next_safe_action"]
    # the stopping call was never run, and the model was not asked again after it
    assert sum(ran.values()) == script.steps - 1
    assert len(script.observations) == script.steps - 1
    usage = packet["counters"]["usage"]
    assert usage == [
        {
            "model": "scripted-1",
            "input_tokens": 1_000 * script.steps,
            "output_tokens": 100 * script.steps,
            "requests": script.steps,
            "cost": f"{script.steps * 2 / 1000:g}",  # 0.001 in + 0.001 out per response
        }
    ]
    assert packet["counters"]["model_cost"] == usage[0]["cost"]


def test_a_run_the_guard_did_not_stop_has_no_stop_packet():
    from toolbreaker.integrations.crewai import protect, run_stop

    ran: Counter[str] = Counter()
    guard = RunGuard("task-free")
    assert run_stop(ValueError("boom"), guard) is None
    script = Script(lambda s: act("lookup", q="x") if s.steps == 1 else answer("done"))
    crew = looping_crew(script, ran)
    with protect(crew, guard=guard):
        assert crew.kickoff().raw == "done"
    assert guard.stopped is None


def test_each_model_response_is_a_turn_of_its_own():
    """CrewAI issues one tool call per response: with max_calls_per_turn=1 three calls in
    three responses all run (the turn is marked per model request)."""
    from toolbreaker.integrations.crewai import protect

    ran: Counter[str] = Counter()
    plan = ["a", "b", "c"]
    script = Script(lambda s: act("lookup", q=plan[s.steps - 1]) if s.steps <= 3 else answer("ok"))
    guard = RunGuard("task-turns", budget=Budget(max_calls_per_turn=1))
    crew = looping_crew(script, ran)
    with protect(crew, guard=guard):
        assert crew.kickoff().raw == "ok"
    assert ran["lookup"] == 3
    assert all("deferred" not in o for o in script.observations)


# -- 4. writes carry a stable idempotency key ------------------------------------------------


def test_a_write_gets_the_same_idempotency_key_on_retry_and_on_resume(service):
    """The key is the guard's (the model's made-up ones are dropped), the same on a retry
    and in resumed runs; a confirmed write is answered from the journal, never re-sent."""
    from crewai_parts import TicketTool

    from toolbreaker.integrations.crewai import protect

    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    registry = make_registry(threshold=3)
    journal = MemoryStore()
    keys: list[str] = []
    ticket = {"customer": "c-7", "title": "Refund A-1001"}

    def guarded(task: str) -> RunGuard:
        guard = RunGuard(task, journal=journal)
        guard.ensure_tool(
            "create_ticket",
            risk="reversible_write",
            business_key=("customer", "title"),
            breaker=registry.get("tickets", "write", tool="create_ticket"),
        )
        return guard

    def give_up_after_two(script: Script) -> str:
        if script.steps <= 2:  # the model invents a key: the guard replaces it
            return act("create_ticket", **ticket, idempotency_key=f"made-up-{script.steps}")
        return answer("the ticket service is failing, try later")

    first = Script(give_up_after_two)
    crew = crew_of(first, [TicketTool(url=service.url, keys=keys)])
    with protect(crew, guard=guarded("task-7"), registry=registry):
        crew.kickoff()
    assert [json.loads(o)["retryable"] for o in first.observations] == [True, True]

    def once(script: Script) -> str:
        if script.steps == 1:
            return act("create_ticket", **ticket)
        return answer(f"ticket {script.last()['id']}")

    for _resume in range(2):  # resumed runs: new guards, same task id, same journal
        resumed = Script(once)
        crew = crew_of(resumed, [TicketTool(url=service.url, keys=keys)])
        with protect(crew, guard=guarded("task-7"), registry=registry):
            assert crew.kickoff().raw == "ticket T-1"

    assert len(keys) == 3  # two failed attempts, one success; the last resume never ran
    assert len(set(keys)) == 1
    assert keys[0].startswith("tb1-")
    assert len(service.created("tickets")) == 1
    assert service.hits["POST /tickets"] == 3


def test_a_write_made_with_the_tool_decorator_gets_the_key_the_model_left_out(service):
    """CrewAI's ``@tool`` makes every parameter of its function required, the key argument
    too: the guard's key fills it before CrewAI checks the arguments, so a model that
    (rightly) leaves the key out opens the ticket once, under the guard's key."""
    from crewai.tools import tool as crewai_tool

    from toolbreaker.integrations.crewai import protect

    registry = make_registry()
    keys: list[str] = []

    @crewai_tool("create_ticket")
    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        keys.append(idempotency_key)
        body = {"title": title, "body": f"for {customer}"}
        headers = {"Idempotency-Key": idempotency_key}
        return request_json(
            "POST", f"{service.url}/tickets", body=body, headers=headers, timeout=TIMEOUT
        )

    guard = RunGuard("task-decorated", journal=MemoryStore())
    guard.ensure_tool(
        "create_ticket",
        risk="reversible_write",
        business_key=("customer", "title"),
        breaker=registry.get("tickets", "write", tool="create_ticket"),
    )
    script = Script(
        lambda s: (
            act("create_ticket", customer="c-7", title="Refund A-1001")
            if s.steps == 1
            else answer(f"ticket {s.last()['id']}")
        )
    )
    crew = crew_of(script, [create_ticket])
    with protect(crew, guard=guard, registry=registry):
        assert crew.kickoff().raw == "ticket T-1"

    assert len(keys) == 1
    assert keys[0].startswith("tb1-")
    (ticket,) = service.created("tickets")
    assert ticket["idempotency_key"] == keys[0]


def test_the_model_may_retry_the_same_call_after_a_retryable_failure(service):
    """A failure the model is told is retryable is no result CrewAI remembers: the same
    call again reaches the tool (CrewAI's repeated-input check refuses only the repeat of
    a call that ran), and the model reads the answer."""
    from toolbreaker.integrations.crewai import protect

    service.inject("GET /search", Fault(status=503))
    registry = make_registry(threshold=3)
    ran: Counter[str] = Counter()

    def retry_once(script: Script) -> str:
        if script.steps <= 2:
            return act("search", q="usb cable")
        return answer(f"{len(script.last()['results'])} results")

    script = Script(retry_once)
    crew = crew_of(script, search_tools(service, ran))
    with protect(crew, guard=RunGuard("task-retry"), registry=registry):
        assert crew.kickoff().raw == "3 results"

    first = json.loads(script.observations[0])
    assert first["retryable"] is True
    assert ran["search"] == 2
    assert service.hits["GET /search"] == 2


# -- 5. two crews share one breaker ----------------------------------------------------------


def until_unavailable(script: Script) -> str:
    if script.steps == 1:
        return act("search", q="usb cable")
    last = script.last()
    if isinstance(last, dict) and last.get("tool_unavailable"):
        return act(last["fallback"], q="usb cable")
    if isinstance(last, dict) and "results" in last:
        return answer(f"{len(last['results'])} results from the snapshot")
    return act("search", q="usb-c cable")


def test_two_agents_share_one_breaker_through_the_registry(service):
    """Agent A's failures open the search breaker; agent B, in another crew with its own
    run guard, is refused without calling the service and falls back."""
    from toolbreaker.integrations.crewai import protect

    service.outage("GET /search")
    registry = make_registry(threshold=2)
    ran_a: Counter[str] = Counter()
    ran_b: Counter[str] = Counter()

    crew_a = crew_of(Script(until_unavailable), search_tools(service, ran_a))
    script_b = Script(until_unavailable)
    crew_b = crew_of(script_b, search_tools(service, ran_b))
    with (
        protect(crew_a, guard=RunGuard("task-a"), registry=registry),
        protect(crew_b, guard=RunGuard("task-b"), registry=registry),
    ):
        assert crew_a.kickoff().raw.endswith("from the snapshot")
        assert crew_b.kickoff().raw.endswith("from the snapshot")

    assert ran_a["search"] == 2
    assert ran_b["search"] == 0
    assert service.hits["GET /search"] == 2
    assert json.loads(script_b.observations[0])["reason"] == "open"


# -- 6. kickoff_async, protection's edges ----------------------------------------------------


def test_kickoff_async_runs_the_hooks_off_the_event_loop():
    """CrewAI 1.6 runs kickoff_async in a worker thread: the guard's work never runs on
    the loop, and arun_stop reads the packet from the loop."""
    from toolbreaker.integrations.crewai import arun_stop, protect

    ran: Counter[str] = Counter()
    script = Script(lambda s: act(["lookup", "refine"][(s.steps - 1) % 2], q="renewal"))
    crew = looping_crew(script, ran)
    guard = RunGuard("task-async", budget=Budget(max_repeats=2))

    async def main() -> Any:
        loop_thread = threading.get_ident()
        with protect(crew, guard=guard):
            try:
                await crew.kickoff_async()
            except ValueError as exc:
                return loop_thread, await arun_stop(exc, guard)
        return loop_thread, None

    loop_thread, stop = asyncio.run(main())
    assert stop is not None
    assert stop.packet.condition == "loop"
    assert loop_thread not in script.threads


def test_a_crew_is_protected_once_and_unprotected_crews_are_left_alone():
    from crewai.hooks import get_before_tool_call_hooks

    from toolbreaker.integrations.crewai import protect

    ran: Counter[str] = Counter()
    script = Script(lambda s: act("lookup", q="x") if s.steps == 1 else answer("plain"))
    crew = looping_crew(script, ran)
    guard = RunGuard("task-once")
    with protect(crew, guard=guard):
        with pytest.raises(PolicyError):
            protect(crew, guard=guard)
        other = looping_crew(Script(script.policy), ran)
        assert other.kickoff().raw == "plain"  # not protected: the guard never saw it
    assert ran["lookup"] == 1
    assert guard.stop_packet().counters["calls"] == 0
    assert not get_before_tool_call_hooks()  # closed: the hooks left CrewAI
