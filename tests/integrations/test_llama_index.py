"""The LlamaIndex adapter, inside the real agent workflow with LlamaIndex's own mock LLM.

Every test runs a real ``FunctionAgent`` (or ``ReActAgent``, ``AgentWorkflow``) offline:
``MockFunctionCallingLLM`` plays the model, its response generator deciding the next step
from the messages it receives, so the assertions are on what the model actually read.
Tools call the local ToolService over real sockets.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

from adapter_registry import TIMEOUT, make_registry
from exercise_checks import result_of
from toolbreaker import Budget, ModelPrice, Policy, Registry, RunGuard, system_prompt_line
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

needs("llama_index.core", reason="the llama-index extra is not installed")
frameworks_imported = imported(
    "llama_index.core.agent.workflow",
    "llama_index.core.base.llms.types",
    "llama_index.core.llms",
    "llama_index.core.tools",
    "llama_index.core.workflow",
    "llama_index_parts",
    "toolbreaker.integrations.llama_index",
)

#: The workflows package finds an agent's steps by walking all its attributes, pydantic's
#: deprecated ones included: their warnings are LlamaIndex's, not ours.
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")


# -- the scripted model ----------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """One tool result as the model read it."""

    tool: str
    content: Any


@dataclass
class Script:
    """A response generator for MockFunctionCallingLLM that records what the model read."""

    policy: Callable[[Script, list[Read]], ChatMessage]
    received: list[Read] = field(default_factory=list)
    issued: dict[str, str] = field(default_factory=dict)
    offered: list[dict[str, Any]] = field(default_factory=list)
    system: list[str] = field(default_factory=list)
    steps: int = 0

    def __call__(self, messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        from llama_index.core.base.llms.types import MessageRole

        self.steps += 1
        assert self.steps < 30, "the guard should have stopped this run long ago"
        tools = kwargs.get("tools") or []
        self.offered.append({t.metadata.name: t.metadata for t in tools})
        self.system.extend(m.content or "" for m in messages if m.role == MessageRole.SYSTEM)
        new: list[Read] = []
        for message in reversed(messages):
            if message.role != MessageRole.TOOL:
                break
            name = self.issued[message.additional_kwargs["tool_call_id"]]
            new.insert(0, Read(name, result_of(message.content or "")))
        self.received.extend(new)
        return self.policy(self, new)

    def llm(self) -> MockFunctionCallingLLM:
        from llama_index.core.llms import MockFunctionCallingLLM

        return MockFunctionCallingLLM(response_generator=self)

    def call(self, *calls: tuple[str, dict[str, Any]]) -> ChatMessage:
        from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

        blocks = []
        for tool, args in calls:
            call_id = f"call-{len(self.issued)}"
            self.issued[call_id] = tool
            blocks.append(ToolCallBlock(tool_call_id=call_id, tool_name=tool, tool_kwargs=args))
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    def returns(self, tool: str) -> list[Any]:
        return [r.content for r in self.received if r.tool == tool]


def say(text: str) -> ChatMessage:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def run(workflow: Any, prompt: str) -> Any:
    """The workflow run, awaited on a loop of its own."""

    async def main() -> Any:
        return await workflow.run(user_msg=prompt)

    return asyncio.run(main())


def http_tools(service: ToolService, ran: Counter[str]) -> list[FunctionTool]:
    """Real HTTP tools (sync: the workflow runs them in its executor)."""
    from llama_index.core.tools import FunctionTool

    base = service.url

    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        ran["search"] += 1
        return request_json("GET", f"{base}/search?q={urllib.parse.quote(q)}", timeout=TIMEOUT)

    def search_snapshot(q: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        ran["search_snapshot"] += 1
        url = f"{base}/search_snapshot?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=TIMEOUT)

    def order_status(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        ran["order_status"] += 1
        return request_json("GET", f"{base}/orders/{order_id}", timeout=TIMEOUT)

    return [FunctionTool.from_defaults(fn) for fn in (search, search_snapshot, order_status)]


# -- 1. the breaker opens on real 503s; the model switches to the fallback -------------------


def stubborn_then_fallback(script: Script, new: list[Read]) -> ChatMessage:
    """Calls search three times whatever happens, then does what the last answer says."""
    queries = ["usb cable", "usb-c cable", "charging cable"]
    searches = len(script.returns("search"))
    if searches < 3:
        return script.call(("search", {"q": queries[searches]}))
    if new and new[0].tool == "search":
        return script.call((new[0].content["fallback"], {"q": "usb cable"}))
    snapshot = new[0].content
    return say(f"From the snapshot of {snapshot['as_of']}: {snapshot['results'][0]['name']}")


def test_open_breaker_skips_the_tool_and_the_model_uses_the_fallback(service):
    """Real HTTP 503s open the breaker; the next search never runs; the model reads
    tool_unavailable naming the fallback, calls it, and the run answers."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    service.outage("GET /search")
    registry = make_registry()
    ran: Counter[str] = Counter()
    script = Script(stubborn_then_fallback)
    agent = FunctionAgent(tools=http_tools(service, ran), llm=script.llm())

    result = run(protect(agent, guard=RunGuard("task-fallback"), registry=registry), "cable")

    assert ran["search"] == 2  # the third search was answered without entering the tool
    assert service.hits["GET /search"] == 2
    first, opened, rejected = script.returns("search")
    assert first["retryable"] is True
    assert "tool_unavailable" not in first
    assert opened["tool_unavailable"] is True  # the failure that opened it says so
    assert rejected["tool_unavailable"] is True
    assert rejected["fallback"] == "search_snapshot"
    assert 'Use "search_snapshot" instead' in rejected["instruction"]
    assert ran["search_snapshot"] == 1
    assert str(result.response.content).startswith("From the snapshot of")
    assert registry.for_tool("search").state.phase == "open"
    assert system_prompt_line() in script.system[0]


def test_the_system_prompt_line_joins_the_agents_own_or_can_be_left_out():
    """The agent's system prompt is kept, the line appended once; instructions=False
    leaves the prompt alone."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    for instructions, expected in [
        (True, f"Be brief.\n\n{system_prompt_line()}"),
        (False, "Be brief."),
    ]:
        script = Script(lambda s, new: say("ok"))
        agent = FunctionAgent(
            tools=looping_tools(Counter()), llm=script.llm(), system_prompt="Be brief."
        )
        guarded = protect(agent, guard=RunGuard("t"), instructions=instructions)
        run(guarded, "x")
        assert script.system == [expected]
        assert agent.system_prompt == "Be brief."


# -- 2. a 404 is the caller's mistake, not the dependency's ----------------------------------


def test_not_found_does_not_open_the_breaker(service):
    """Three 404s leave the breaker closed; the model is told a 404 is not worth retrying."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    def policy(script: Script, new: list[Read]) -> ChatMessage:
        if script.steps <= 3:
            return script.call(("order_status", {"order_id": f"Z-{script.steps}"}))
        if script.steps == 4:
            return script.call(("order_status", {"order_id": "A-1001"}))
        return say(f"A-1001 is {new[0].content['status']}")

    registry = make_registry(threshold=2)
    ran: Counter[str] = Counter()
    script = Script(policy)
    agent = FunctionAgent(tools=http_tools(service, ran), llm=script.llm())

    result = run(protect(agent, guard=RunGuard("task-404"), registry=registry), "my order?")

    assert result.response.content == "A-1001 is shipped"
    assert ran["order_status"] == 4
    missing = script.returns("order_status")[:3]
    assert all(m["ok"] is False and m["retryable"] is False for m in missing)
    assert all("HTTP Error 404" in m["error"] for m in missing)
    breaker = registry.for_tool("order_status")
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"http-404": 3}


# -- 3. a looping model is stopped through the workflow's own ending --------------------------


def looping_tools(ran: Counter[str]) -> list[FunctionTool]:
    from llama_index.core.tools import FunctionTool

    async def lookup(q: str) -> dict[str, Any]:
        """A read that always answers the same."""
        ran["lookup"] += 1
        return {"q": q, "hits": 0}

    async def refine(q: str) -> dict[str, Any]:
        """Another read that always answers the same."""
        ran["refine"] += 1
        return {"q": q, "suggestion": q}

    return [FunctionTool.from_defaults(lookup), FunctionTool.from_defaults(refine)]


@pytest.mark.parametrize(
    ("plan", "condition"),
    [(["lookup"], "repeated-action"), (["lookup", "refine"], "loop")],
    ids=["same-action", "alternating"],
)
def test_a_looping_model_is_stopped_with_a_stop_packet(plan, condition):
    """The same call over and over (or two alternating) without new evidence ends the run:
    the workflow finishes with an AgentOutput whose message carries the stop packet, and
    the model is not asked again once the run stopped."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import STOP_KEY, protect, run_stop

    ran: Counter[str] = Counter()
    script = Script(lambda s, _new: s.call((plan[(s.steps - 1) % len(plan)], {"q": "renewal"})))
    guard = RunGuard("task-loop", budget=Budget(max_repeats=2))
    agent = FunctionAgent(tools=looping_tools(ran), llm=script.llm())

    result = run(protect(agent, guard=guard), "renew")

    stop = run_stop(result, guard)
    assert stop is not None
    assert stop.packet.condition == condition
    assert len(result.tool_calls) == script.steps  # the run's calls, each with its answer
    packet = result.response.additional_kwargs[STOP_KEY]
    assert packet == stop.packet.to_dict()
    assert packet["schema"] == "toolbreaker.stop/v1"
    assert "looping" in packet["next_safe_action"]
    assert condition in str(result.response.content)
    assert sum(ran.values()) == script.steps - 1  # the stopping call was never run
    assert len(script.received) == script.steps - 1  # and the model was not asked again


def test_a_run_that_ends_on_its_own_has_no_stop_packet():
    """A run the guard never stopped: run_stop() is None and the output is the model's."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import STOP_KEY, protect, run_stop

    script = Script(lambda s, new: s.call(("lookup", {"q": "x"})) if s.steps == 1 else say("ok"))
    guard = RunGuard("task-calm")
    agent = FunctionAgent(tools=looping_tools(Counter()), llm=script.llm())
    result = run(protect(agent, guard=guard), "x")
    assert result.response.content == "ok"
    assert run_stop(result, guard) is None
    assert STOP_KEY not in result.response.additional_kwargs


# -- 4. writes carry a stable idempotency key ------------------------------------------------


def ticket_tool(service: ToolService, keys: list[str]) -> FunctionTool:
    from llama_index.core.tools import FunctionTool

    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        keys.append(idempotency_key)
        body = {"title": title, "body": f"for {customer}"}
        headers = {"Idempotency-Key": idempotency_key}
        return request_json(
            "POST", f"{service.url}/tickets", body=body, headers=headers, timeout=TIMEOUT
        )

    return FunctionTool.from_defaults(create_ticket)


def ticket_guard(journal: MemoryStore, registry: Registry) -> RunGuard:
    guard = RunGuard("task-7", journal=journal)
    guard.ensure_tool(
        "create_ticket",
        risk="reversible_write",
        breaker=registry.get("tickets", "write"),
        business_key=("customer", "title"),
    )
    return guard


def test_a_write_gets_the_same_idempotency_key_on_retry_and_on_resume(service):
    """The key is derived by the guard (a key the model makes up is replaced), the same on
    a retry and in a resumed run; a confirmed write is answered from the journal."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    registry = make_registry(threshold=3)
    journal = MemoryStore()
    keys: list[str] = []
    ticket = {"customer": "c-7", "title": "Refund A-1001"}

    def give_up_after_two(script: Script, new: list[Read]) -> ChatMessage:
        if script.steps <= 2:
            return script.call(("create_ticket", {**ticket, "idempotency_key": "made-up"}))
        return say("the ticket service is failing, try later")

    first = Script(give_up_after_two)
    tool = ticket_tool(service, keys)
    agent = FunctionAgent(tools=[tool], llm=first.llm())
    run(protect(agent, guard=ticket_guard(journal, registry), registry=registry), "ticket")
    assert [r["retryable"] for r in first.returns("create_ticket")] == [True, True]

    def twice(script: Script, new: list[Read]) -> ChatMessage:
        if script.steps <= 2:  # the second call is a duplicate
            return script.call(("create_ticket", ticket))
        return say(f"ticket {new[0].content['id']}")

    for _resume in range(2):  # resumed runs: new guards, same task id, same journal
        resumed = Script(twice)
        agent = FunctionAgent(tools=[tool], llm=resumed.llm())
        guarded = protect(agent, guard=ticket_guard(journal, registry), registry=registry)
        assert run(guarded, "resume").response.content == "ticket T-1"

    assert len(keys) == 3  # two failed attempts, one success; duplicates never ran
    assert len(set(keys)) == 1
    assert keys[0].startswith("tb1-")
    assert len(service.created("tickets")) == 1
    assert service.hits["POST /tickets"] == 3


def test_a_write_without_the_key_argument_reads_it_from_the_context(service):
    """A write whose schema has no key argument gets the guard's key from idempotency_key()
    (also in a sync tool, which the workflow runs in a worker thread)."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker import idempotency_key
    from toolbreaker.integrations.llama_index import protect

    seen: list[str | None] = []

    def send_refund(order_id: str) -> str:
        """Refund an order."""
        seen.append(idempotency_key())
        return "refunded"

    script = Script(
        lambda s, new: s.call(("send_refund", {"order_id": "A-1"})) if s.steps == 1 else say("ok")
    )
    guard = RunGuard("task-refund")
    guard.ensure_tool("send_refund", risk="reversible_write", business_key=("order_id",))
    agent = FunctionAgent(tools=[send_refund], llm=script.llm())
    assert run(protect(agent, guard=guard), "refund").response.content == "ok"
    ((key,),) = [seen]
    assert key is not None
    assert key.startswith("tb1-")
    assert idempotency_key() is None


# -- 5. one breaker per dependency, across agents and runs -----------------------------------


def until_unavailable(script: Script, new: list[Read]) -> ChatMessage:
    if not new:
        return script.call(("search", {"q": "usb cable"}))
    answer = new[0].content
    if answer.get("tool_unavailable") and new[0].tool == "search":
        return script.call((answer["fallback"], {"q": "usb cable"}))
    if new[0].tool == "search":
        return script.call(("search", {"q": "usb cable"}))
    return say(f"{new[0].tool}: {len(answer.get('results', []))} results")


def test_two_agents_share_one_breaker_through_the_registry(service):
    """Agent A's failures open the search breaker; agent B (another run, another guard) is
    rejected without calling the service and falls back."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    service.outage("GET /search")
    registry = make_registry(threshold=2)
    ran_a: Counter[str] = Counter()
    ran_b: Counter[str] = Counter()

    script_a = Script(until_unavailable)
    agent_a = FunctionAgent(name="a", tools=http_tools(service, ran_a), llm=script_a.llm())
    result = run(protect(agent_a, guard=RunGuard("task-a"), registry=registry), "a")
    assert str(result.response.content).startswith("search_snapshot")

    script_b = Script(until_unavailable)
    agent_b = FunctionAgent(name="b", tools=http_tools(service, ran_b), llm=script_b.llm())
    result = run(protect(agent_b, guard=RunGuard("task-b"), registry=registry), "b")

    assert str(result.response.content).startswith("search_snapshot")
    assert ran_a["search"] == 2
    assert ran_b["search"] == 0
    assert service.hits["GET /search"] == 2
    assert script_b.returns("search")[0]["reason"] == "open"


def test_a_required_dependency_going_down_stops_the_run(service):
    """A tool declared required whose breaker opens ends the run (dependency-open), and the
    stop packet says to wait for the dependency and resume."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect, run_stop

    service.outage("GET /search")
    registry = make_registry(threshold=2)
    ran: Counter[str] = Counter()
    script = Script(lambda s, new: s.call(("search", {"q": f"cable {s.steps}"})))
    guard = RunGuard("task-required")
    guard.ensure_tool("search", required=True)
    agent = FunctionAgent(tools=http_tools(service, ran), llm=script.llm())

    result = run(protect(agent, guard=guard, registry=registry), "x")

    stop = run_stop(result, guard)
    assert stop is not None
    assert stop.packet.condition == "dependency-open"
    assert "wait for the dependency" in stop.packet.next_safe_action
    assert ran["search"] == 2
    assert script.steps == 2  # not asked again once the dependency was down


# -- the other agents of llama_index.core.agent.workflow ------------------------------------


@pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning")
def test_a_react_agent_is_guarded_and_stopped_the_same_way():
    """A ReActAgent (text actions, MockLLM-style prompt parsing) loops on one lookup: the
    calls go through the guard and the run ends with the stop packet."""
    from llama_index.core.agent.workflow import ReActAgent
    from llama_index.core.llms import MockFunctionCallingLLM

    from toolbreaker.integrations.llama_index import protect, run_stop

    ran: Counter[str] = Counter()
    steps: list[int] = []

    def react(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        steps.append(1)
        assert len(steps) < 30
        return say('Thought: I need to look.\nAction: lookup\nAction Input: {"q": "renewal"}')

    llm = MockFunctionCallingLLM(response_generator=react)
    guard = RunGuard("task-react", budget=Budget(max_repeats=2))
    agent = ReActAgent(tools=looping_tools(ran), llm=llm)

    result = run(protect(agent, guard=guard), "renew")

    stop = run_stop(result, guard)
    assert stop is not None
    assert stop.packet.condition == "repeated-action"
    assert ran["lookup"] == len(steps) - 1


def test_an_agent_workflow_protects_every_agent():
    """protect(AgentWorkflow) guards each agent's tools and ends the workflow on a stop."""
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent

    from toolbreaker.integrations.llama_index import ProtectedTool, protect, run_stop

    ran: Counter[str] = Counter()
    script = Script(lambda s, _new: s.call(("lookup", {"q": "renewal"})))
    guard = RunGuard("task-multi", budget=Budget(max_repeats=2))
    agent = FunctionAgent(
        name="support", description="helps", tools=looping_tools(ran), llm=script.llm()
    )
    workflow = AgentWorkflow(agents=[agent], root_agent="support")

    guarded = protect(workflow, guard=guard)
    result = run(guarded, "renew")

    assert isinstance(guarded.agents["support"].tools[0], ProtectedTool)
    assert not isinstance(workflow.agents["support"].tools[0], ProtectedTool)
    stop = run_stop(result, guard)
    assert stop is not None
    assert stop.packet.condition == "repeated-action"


# -- the protected tool is still the same FunctionTool to LlamaIndex --------------------------


def test_the_protected_tool_keeps_its_metadata_and_calls_sync_and_async():
    """Name, description and fn_schema are the wrapped tool's own; call() and acall() both
    go through the guard (a refused call never enters the tool)."""
    from llama_index.core.tools import FunctionTool

    from toolbreaker.integrations.llama_index import protect_tool

    entered: list[str] = []

    def lookup(q: str) -> str:
        """Look something up."""
        entered.append(q)
        return f"found {q}"

    tool = FunctionTool.from_defaults(lookup)
    registry = Registry(Policy(failure_threshold=1))
    guard = RunGuard("task-tool")
    protected = protect_tool(tool, guard=guard, registry=registry)

    assert isinstance(protected, FunctionTool)
    assert protected.metadata is tool.metadata
    assert protected.metadata.get_parameters_dict() == tool.metadata.get_parameters_dict()
    assert protected.call(q="a").content == "found a"
    assert asyncio.run(protected.acall(q="b")).raw_output == "found b"
    assert protected(q="c").content == "found c"
    registry.for_tool("lookup").isolate("maintenance")
    refused = protected.call(q="d")
    assert refused.is_error is True
    assert json.loads(refused.content)["tool_unavailable"] is True
    assert entered == ["a", "b", "c"]
    with pytest.raises(PolicyError, match="already protected"):
        protect_tool(protected, guard=guard)


def test_a_failing_tool_reaches_the_model_as_the_guards_result():
    """An exception in the tool is settled as a failure: the model reads the guard's JSON
    result (ok false, retryable), never LlamaIndex's bare exception text."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    async def flaky(q: str) -> str:
        """Always fails."""
        raise ConnectionResetError("the provider reset the connection")

    script = Script(lambda s, new: s.call(("flaky", {"q": "x"})) if s.steps == 1 else say("no"))
    agent = FunctionAgent(tools=[flaky], llm=script.llm())
    run(protect(agent, guard=RunGuard("task-flaky"), registry=Registry()), "x")
    (answer,) = script.returns("flaky")
    assert answer["ok"] is False
    assert answer["retryable"] is True
    assert "ConnectionResetError" in answer["error"]


def test_a_tool_that_takes_the_workflow_context_still_gets_it():
    """The workflow passes its Context to a tool that asks for it; the protected tool hands
    it on and the guard fingerprints only the model's arguments."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.workflow import Context

    from toolbreaker.integrations.llama_index import protect

    seen: list[Any] = []

    async def remember(ctx: Context, note: str) -> str:
        """Keep a note in the run's state."""
        await ctx.store.set("note", note)
        seen.append(type(ctx).__name__)
        return "kept"

    # LlamaIndex finds the Context parameter by its annotation object; this module's
    # ``from __future__ import annotations`` made it a string.
    remember.__annotations__.update(ctx=Context, note=str)

    script = Script(
        lambda s, new: s.call(("remember", {"note": "hi"})) if s.steps == 1 else say("ok")
    )
    guard = RunGuard("task-ctx")
    agent = FunctionAgent(tools=[remember], llm=script.llm())
    assert run(protect(agent, guard=guard), "x").response.content == "ok"
    assert script.returns("remember") == ["kept"]
    assert seen == ["Context"]
    assert script.returns("remember") == ["kept"]
    assert guard.state.calls == 1


def test_the_breakers_timeout_cuts_a_hung_tool_and_counts():
    """A hung tool is cut at the breaker's timeout; two timeouts open the breaker and the
    model reads tool_unavailable."""
    from llama_index.core.agent.workflow import FunctionAgent

    from toolbreaker.integrations.llama_index import protect

    registry = Registry(Policy(failure_threshold=2), default_enforce="cooperative")
    registry.get("slow-api", tool="slow", timeout=0.05)
    entered: list[int] = []

    async def slow() -> str:
        """Never answers."""
        entered.append(1)
        await asyncio.Event().wait()
        return "never"  # pragma: no cover

    def policy(script: Script, new: list[Read]) -> ChatMessage:
        return script.call(("slow", {})) if len(script.returns("slow")) < 3 else say("gave up")

    script = Script(policy)
    agent = FunctionAgent(tools=[slow], llm=script.llm())
    result = run(protect(agent, guard=RunGuard("task-slow"), registry=registry), "x")
    assert result.response.content == "gave up"
    first, opened, rejected = script.returns("slow")
    assert first["error"].startswith("TimeoutError")
    assert first["retryable"] is True
    assert opened["tool_unavailable"] is True
    assert rejected["tool_unavailable"] is True
    assert len(entered) == 2
    assert registry.for_tool("slow").stats.failures == {"timeout": 2}


def test_an_error_output_of_the_tools_callback_is_a_failure_that_does_not_count():
    """A tool whose callback answers with an error ToolOutput (LlamaIndex's way of
    reporting without raising) settles as a failure the classifier ignores: the model
    reads the guard's result and the breaker counts nothing."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool, ToolOutput

    from toolbreaker.integrations.llama_index import protect

    def lookup(q: str) -> str:
        """Look up."""
        return q

    def refuse(result: Any) -> ToolOutput:
        return ToolOutput(
            content="no such entry",
            tool_name="lookup",
            raw_input={},
            raw_output=result,
            is_error=True,
        )

    tool = FunctionTool.from_defaults(lookup, callback=refuse)
    registry = Registry(Policy(failure_threshold=1))
    script = Script(lambda s, new: s.call(("lookup", {"q": "x"})) if s.steps == 1 else say("no"))
    agent = FunctionAgent(tools=[tool], llm=script.llm())
    run(protect(agent, guard=RunGuard("task-callback"), registry=registry), "x")
    (answer,) = script.returns("lookup")
    assert answer["ok"] is False
    assert "no such entry" in answer["error"]
    breaker = registry.for_tool("lookup")
    assert breaker.state.phase == "closed"  # one counted failure would have opened it
    assert breaker.stats.failures == {"unknown-exception:ToolError": 1}  # seen, ignored


def test_protect_refuses_what_is_no_agent():
    """protect() names what it takes."""
    from llama_index.core.llms import MockLLM

    from toolbreaker.integrations.llama_index import protect

    with pytest.raises(PolicyError, match="agent or AgentWorkflow"):
        protect(MockLLM(), guard=RunGuard("t"))  # type: ignore[type-var]


def test_missing_extra_names_what_to_install(monkeypatch):
    """Without llama-index-core the adapter's import error says which extra to add."""
    monkeypatch.setitem(sys.modules, "llama_index.core", None)
    monkeypatch.delitem(sys.modules, "toolbreaker.integrations.llama_index")
    with pytest.raises(ImportError, match=r"toolbreaker\[llama-index\]"):
        importlib.import_module("toolbreaker.integrations.llama_index")


# -- the model's usage is priced into the run -------------------------------------------------

PRICES = {"gpt-4o*": ModelPrice("2.50", "10")}


def test_each_model_response_is_priced_into_the_stop_packet():
    """Every request of a looping model (2,000 tokens in and 1,000 out each, at 2.50 and 10
    per million: 0.015) is in the stop packet's counters: model cost and the model's usage."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index_parts import MeteredLLM

    from toolbreaker.integrations.llama_index import protect, run_stop

    script = Script(lambda s, _new: s.call(("lookup", {"q": "renewal"})))
    guard = RunGuard("task-usage", budget=Budget(max_repeats=2, max_cost="1", prices=PRICES))
    agent = FunctionAgent(tools=looping_tools(Counter()), llm=MeteredLLM(response_generator=script))

    stop = run_stop(run(protect(agent, guard=guard), "renew"), guard)

    assert stop is not None
    assert stop.packet.condition == "repeated-action"
    counters = stop.packet.to_dict()["counters"]
    requests = script.steps  # the model was not asked once the run stopped
    cost = str(Decimal("0.015") * requests)
    assert counters["model_cost"] == cost
    assert counters["usage"] == [
        {
            "model": "gpt-4o-mini-2024-07-18",
            "input_tokens": 2_000 * requests,
            "output_tokens": 1_000 * requests,
            "requests": requests,
            "cost": cost,
        }
    ]


def test_the_models_usage_spends_the_runs_cost_limit():
    """With max_cost 0.02, the second request's usage spends it: the run stops (max-cost)
    and the model is not asked a third time."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index_parts import MeteredLLM

    from toolbreaker.integrations.llama_index import protect, run_stop

    script = Script(lambda s, _new: s.call(("lookup", {"q": f"renewal {s.steps}"})))
    guard = RunGuard("task-cost", budget=Budget(max_cost="0.02", prices=PRICES))
    agent = FunctionAgent(tools=looping_tools(Counter()), llm=MeteredLLM(response_generator=script))

    stop = run_stop(run(protect(agent, guard=guard), "renew"), guard)

    assert stop is not None
    assert stop.packet.condition == "max-cost"
    assert script.steps == 2
    assert stop.packet.to_dict()["counters"]["model_cost"] == "0.03"


def test_a_final_answer_from_an_unpriced_model_ends_as_a_stopped_run():
    """Under a max_cost, a model the price table does not price stops the run when its
    usage is counted, here with its final answer: the run ends with the stop packet, never
    as a completion (the answer stays in the run's memory)."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index_parts import MeteredLLM

    from toolbreaker.integrations.llama_index import protect, run_stop

    script = Script(lambda s, _new: say("ok"))
    guard = RunGuard("task-unpriced", budget=Budget(max_cost="1", prices=PRICES))
    llm = MeteredLLM(response_generator=script, reported_model="claude-x")
    agent = FunctionAgent(tools=looping_tools(Counter()), llm=llm)

    result = run(protect(agent, guard=guard), "x")

    stop = run_stop(result, guard)
    assert stop is not None
    assert "claude-x" in stop.packet.detail
    assert script.steps == 1
    assert result.response.content != "ok"


@pytest.mark.parametrize(
    ("fields", "found"),
    [
        ({"additional_kwargs": {"prompt_tokens": 3}}, ("m", 3, 0)),
        (
            {
                "raw": SimpleNamespace(
                    model="claude-x", usage=SimpleNamespace(input_tokens=5, output_tokens=7)
                )
            },
            ("claude-x", 5, 7),
        ),
        ({"raw": {"content": "x"}}, None),
        ({"raw": {"usage": {"input_tokens": 1}}}, ("m", 1, 0)),
    ],
    ids=["openai-kwargs", "anthropic-object", "no-usage", "model-of-the-llm"],
)
def test_llm_usage_reads_what_the_integrations_report(fields, found):
    """Token counts from additional_kwargs or the raw response's usage (a mapping or an
    SDK object); the raw response's model name wins over the LLM's."""
    from llama_index.core.base.llms.types import ChatResponse

    from toolbreaker.integrations.llama_index import llm_usage

    response = ChatResponse(message=say("x"), **fields)
    assert llm_usage(response, "m") == found
