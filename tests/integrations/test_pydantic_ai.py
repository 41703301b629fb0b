"""The Pydantic AI capability, against the real framework with a scripted FunctionModel.

Every test runs a real ``Agent`` offline: ``FunctionModel`` plays the model and decides
its next step from the messages it receives, so the assertions are on what the model
actually read. Tools call the local ToolService over real sockets.
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
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel


from pydantic import BaseModel

from adapter_registry import TIMEOUT, make_registry
from toolbreaker import Budget, Policy, Registry, RunGuard, shell_risk_of, system_prompt_line
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

needs(
    "pydantic_ai",
    reason="the pydantic-ai extra is not installed (it installs nothing before Python 3.11)",
)
frameworks_imported = imported(
    "pydantic_ai",
    "pydantic_ai.exceptions",
    "pydantic_ai.messages",
    "pydantic_ai.models.function",
    "toolbreaker.integrations.pydantic_ai",
)


def run(agent: Agent[Any, str], prompt: str, **kwargs: Any) -> Any:
    """``agent.run()`` on a loop of its own: ``run_sync`` would leave an unclosed loop behind."""
    return asyncio.run(agent.run(prompt, **kwargs))


# -- the scripted model ----------------------------------------------------------------------


def call(tool: str, **args: Any) -> ModelResponse:
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    return ModelResponse(parts=[ToolCallPart(tool, args)])


def say(text: str) -> ModelResponse:
    from pydantic_ai.messages import ModelResponse, TextPart

    return ModelResponse(parts=[TextPart(text)])


@dataclass
class Script:
    """A FunctionModel brain that records everything the model was sent."""

    policy: Callable[[Script, list[ToolReturnPart]], ModelResponse]
    received: list[ToolReturnPart] = field(default_factory=list)
    instructions: list[str | None] = field(default_factory=list)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        from pydantic_ai.messages import ToolReturnPart

        self.steps += 1
        assert self.steps < 30, "the guard should have stopped this run long ago"
        self.instructions.append(info.instructions)
        self.schemas.update({t.name: t.parameters_json_schema for t in info.function_tools})
        last = messages[-1]
        new = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        self.received.extend(new)
        return self.policy(self, new)

    def model(self) -> FunctionModel:
        from pydantic_ai.models.function import FunctionModel

        return FunctionModel(self)

    def returns(self, tool: str) -> list[ToolReturnPart]:
        return [r for r in self.received if r.tool_name == tool]


def payload(part: ToolReturnPart) -> dict[str, Any]:
    """A tool return as the model reads it: JSON text for guard answers, a dict otherwise."""
    content = part.content
    return json.loads(content) if isinstance(content, str) else content


def build_agent(script: Script, service: ToolService, ran: Counter[str], **kwargs: Any) -> Agent:
    """An agent with real HTTP tools; ``ran`` counts the tool bodies actually entered."""
    from pydantic_ai import Agent

    agent: Agent[Any, str] = Agent(script.model(), **kwargs)
    base = service.url

    @agent.tool_plain
    def search(q: str) -> dict[str, Any]:
        """Search the live catalog."""
        ran["search"] += 1
        return request_json("GET", f"{base}/search?q={urllib.parse.quote(q)}", timeout=TIMEOUT)

    @agent.tool_plain
    def search_snapshot(q: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        ran["search_snapshot"] += 1
        url = f"{base}/search_snapshot?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=TIMEOUT)

    @agent.tool_plain
    def order_status(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        ran["order_status"] += 1
        return request_json("GET", f"{base}/orders/{order_id}", timeout=TIMEOUT)

    return agent


# -- 1. the breaker opens on real 503s; the model switches to the fallback -------------------


def stubborn_then_fallback(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
    """Calls search three times whatever happens, then does what the last answer says."""
    queries = ["usb cable", "usb-c cable", "charging cable"]
    searches = len(script.returns("search"))
    if searches < 3:
        return call("search", q=queries[searches])
    if new and new[0].tool_name == "search":
        return call(payload(new[0])["fallback"], q="usb cable")
    snapshot = payload(new[0])
    return say(f"From the snapshot of {snapshot['as_of']}: {snapshot['results'][0]['name']}")


def test_open_breaker_skips_the_tool_and_the_model_uses_the_fallback(service):
    """Real HTTP 503s open the breaker; the next search never runs; the model reads
    tool_unavailable naming the fallback, calls it, and the run answers."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    service.outage("GET /search")
    registry = make_registry()
    ran: Counter[str] = Counter()
    script = Script(stubborn_then_fallback)
    agent = build_agent(script, service, ran)
    guard = RunGuard("task-fallback")

    result = run(
        agent, "find me a cable", capabilities=[ToolbreakerCapability(guard, registry=registry)]
    )

    assert ran["search"] == 2  # the third search was answered without entering the tool
    assert service.hits["GET /search"] == 2
    first, opened, rejected = script.returns("search")
    assert payload(first)["retryable"] is True
    assert "tool_unavailable" not in payload(first)
    assert payload(opened)["tool_unavailable"] is True  # the failure that opened it says so
    answer = payload(rejected)
    assert rejected.outcome == "failed"  # ToolFailed: terminal, no retry prompt
    assert answer["tool_unavailable"] is True
    assert answer["fallback"] == "search_snapshot"
    assert 'Use "search_snapshot" instead' in answer["instruction"]
    assert ran["search_snapshot"] == 1
    assert result.output.startswith("From the snapshot of")
    assert registry.for_tool("search").state.phase == "open"
    assert system_prompt_line() in (script.instructions[0] or "")


# -- 2. a 404 is the caller's mistake, not the dependency's ----------------------------------


def test_not_found_and_invalid_arguments_do_not_open_the_breaker(service):
    """Three 404s (and one call the framework rejects for a missing argument) leave the
    breaker closed; the model is told a 404 is not worth retrying."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    def policy(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        plan = [{}, {"order_id": "Z-1"}, {"order_id": "Z-2"}, {"order_id": "Z-3"}]
        if script.steps <= len(plan):
            return call("order_status", **plan[script.steps - 1])
        if script.steps == len(plan) + 1:
            return call("order_status", order_id="A-1001")
        return say(f"A-1001 is {payload(new[0])['status']}")

    registry = make_registry(threshold=2)
    ran: Counter[str] = Counter()
    script = Script(policy)
    agent = build_agent(script, service, ran)

    result = run(
        agent,
        "where is my order?",
        capabilities=[ToolbreakerCapability(RunGuard("task-404"), registry=registry)],
    )

    assert result.output == "A-1001 is shipped"
    assert ran["order_status"] == 4  # the argument-less call never reached the tool
    assert service.hits["GET /orders"] == 4
    missing = [payload(r) for r in script.returns("order_status")][1:4]
    assert all(m["ok"] is False and m["retryable"] is False for m in missing)
    assert all("HTTP Error 404" in m["error"] for m in missing)
    breaker = registry.for_tool("order_status")
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"http-404": 3}


# -- 3. a looping model is stopped through the run's cancellation ----------------------------


def looping_agent(script: Script, ran: Counter[str]) -> Agent:
    from pydantic_ai import Agent

    agent: Agent[Any, str] = Agent(script.model())

    @agent.tool_plain
    def lookup(q: str) -> dict[str, Any]:
        """A read that always answers the same."""
        ran["lookup"] += 1
        return {"q": q, "hits": 0}

    @agent.tool_plain
    def refine(q: str) -> dict[str, Any]:
        """Another read that always answers the same."""
        ran["refine"] += 1
        return {"q": q, "suggestion": q}

    return agent


@pytest.mark.parametrize(
    ("plan", "condition"),
    [(["lookup"], "repeated-action"), (["lookup", "refine"], "loop")],
    ids=["same-action", "alternating"],
)
def test_a_looping_model_is_stopped_with_a_stop_packet(plan, condition):
    """The same call over and over (or two alternating) without new evidence ends the run
    with RunCancelled; run_stop() gives the stop packet and the resumable history."""
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import ModelRequest, ToolCallPart, ToolReturnPart

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, run_stop

    ran: Counter[str] = Counter()
    script = Script(lambda s, _new: call(plan[(s.steps - 1) % len(plan)], q="renewal"))
    agent = looping_agent(script, ran)
    guard = RunGuard("task-loop", budget=Budget(max_repeats=2))

    with pytest.raises(RunCancelled) as raised:
        run(agent, "renew", capabilities=[ToolbreakerCapability(guard)])

    stop = run_stop(raised.value, guard)
    assert stop is not None
    assert stop.packet.condition == condition
    packet = json.loads(stop.packet.to_json())
    assert packet["schema"] == "toolbreaker.stop/v1"
    assert "looping" in packet["next_safe_action"]
    calls = sum(isinstance(p, ToolCallPart) for m in stop.messages for p in m.parts)
    assert sum(ran.values()) == calls - 1  # the stopping call was never run
    finished = [
        p
        for m in stop.messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert len(finished) == sum(ran.values())  # the history keeps every completed call


def test_a_cancellation_that_is_not_the_guards_has_no_stop_packet():
    """A CancellationToken fired by the application is not a guard stop: run_stop is None."""
    from pydantic_ai import CancellationToken
    from pydantic_ai.exceptions import RunCancelled

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, run_stop

    token = CancellationToken()
    ran: Counter[str] = Counter()

    def policy(_script: Script, _new: list[ToolReturnPart]) -> ModelResponse:
        token.cancel()
        return call("lookup", q="x")

    agent = looping_agent(Script(policy), ran)
    guard = RunGuard("task-token")
    with pytest.raises(RunCancelled) as raised:
        run(agent, "x", capabilities=[ToolbreakerCapability(guard)], cancellation_token=token)
    assert run_stop(raised.value, guard) is None
    assert guard.stopped is None


# -- 4. writes carry a stable idempotency key ------------------------------------------------


def ticket_agent(script: Script, service: ToolService, keys: list[str]) -> Agent:
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import tool_metadata

    agent: Agent[Any, str] = Agent(script.model())

    @agent.tool_plain(
        metadata=tool_metadata(
            risk="reversible_write",
            dependency="tickets",
            operation="write",
            business_key=["customer", "title"],
        )
    )
    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        keys.append(idempotency_key)
        body = {"title": title, "body": f"for {customer}"}
        headers = {"Idempotency-Key": idempotency_key}
        return request_json(
            "POST", f"{service.url}/tickets", body=body, headers=headers, timeout=TIMEOUT
        )

    return agent


def test_a_write_gets_the_same_idempotency_key_on_retry_and_on_resume(service):
    """The key is derived by the guard (not the model), hidden from the schema, the same
    on a retry and in a resumed run; a confirmed write is answered from the journal."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    registry = make_registry(threshold=3)
    journal = MemoryStore()
    keys: list[str] = []
    ticket = {"customer": "c-7", "title": "Refund A-1001"}

    def give_up_after_two(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if script.steps <= 2:  # the model even invents a key: the guard replaces it
            return call("create_ticket", **ticket, idempotency_key="made-up")
        return say("the ticket service is failing, try later")

    first = Script(give_up_after_two)
    capability = ToolbreakerCapability(RunGuard("task-7", journal=journal), registry=registry)
    run(ticket_agent(first, service, keys), "open a ticket", capabilities=[capability])
    assert [payload(r)["retryable"] for r in first.returns("create_ticket")] == [True, True]
    assert "idempotency_key" not in first.schemas["create_ticket"]["properties"]

    def twice(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if script.steps <= 2:  # the second call is a duplicate
            return call("create_ticket", **ticket)
        return say(f"ticket {payload(new[0])['id']}")

    for _resume in range(2):  # resumed runs: new guards, same task id, same journal
        resumed = Script(twice)
        capability = ToolbreakerCapability(RunGuard("task-7", journal=journal), registry=registry)
        result = run(ticket_agent(resumed, service, keys), "resume", capabilities=[capability])
        assert result.output == "ticket T-1"

    assert len(keys) == 3  # two failed attempts, one success; duplicates never ran
    assert len(set(keys)) == 1
    assert keys[0].startswith("tb1-")
    created = service.created("tickets")
    assert len(created) == 1
    assert service.hits["POST /tickets"] == 3


def test_a_write_tool_must_let_the_guard_fill_its_key(service):
    """A write tool whose idempotency argument has no default is refused before any call."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    agent: Agent[Any, str] = Agent(Script(lambda s, n: say("-")).model())

    @agent.tool_plain(metadata=tool_metadata(risk="reversible_write"))
    def send(to: str, idempotency_key: str) -> str:
        """Send something."""
        return to

    with pytest.raises(PolicyError, match="give it a default") as raised:
        run(agent, "x", capabilities=[ToolbreakerCapability(RunGuard("t"))])
    assert raised.value.field == "send.idempotency_key"


def test_a_write_whose_outcome_is_unknown_is_never_replayed(service):
    """A write registered on the guard itself (with a verifier) answers malformed: the
    model is told the outcome is unknown, and its retry is answered without running."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    service.inject("POST /tickets", Fault(malformed="shape"))
    registry = make_registry(threshold=3)
    guard = RunGuard("task-unknown")
    guard.ensure_tool(
        "create_ticket",
        risk="reversible_write",
        breaker=registry.get("tickets", "write"),
        verify=lambda r: str(r.get("id", "")).startswith("T-"),
    )
    keys: list[str] = []

    def insist(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if script.steps <= 2:
            return call("create_ticket", customer="c-9", title="Broken cable")
        return say("an operator will check the ticket")

    script = Script(insist)
    agent = ticket_agent(script, service, keys)
    run(agent, "open a ticket", capabilities=[ToolbreakerCapability(guard, registry=registry)])

    unknown, again = (payload(r) for r in script.returns("create_ticket"))
    assert unknown["outcome_unknown"] is True
    assert unknown["idempotency_key"] == keys[0]
    assert "Do not repeat this action" in unknown["instruction"]
    assert again["outcome_unknown"] is True  # answered from the journal
    assert len(keys) == 1
    assert service.hits["POST /tickets"] == 1
    assert guard.stop_packet().condition == "uncertain-side-effect"


class Item(BaseModel):
    sku: str
    qty: int


def test_typed_arguments_reach_the_tool_typed_and_the_guard_as_json():
    """A write taking a model and a datetime gets them validated, plus a key derived from
    their JSON form (business key ``item.sku``)."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    seen: list[tuple[Any, ...]] = []

    def policy(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if script.steps == 1:
            item = {"sku": "SKU-1", "qty": 2}
            return call("reserve", item=item, when="2024-05-01T10:00:00Z")
        return say(str(new[0].content))

    script = Script(policy)
    agent: Agent[Any, str] = Agent(script.model())

    @agent.tool_plain(metadata=tool_metadata(risk="reversible_write", business_key=["item.sku"]))
    def reserve(item: Item, when: datetime, idempotency_key: str = "") -> str:
        """Reserve stock."""
        seen.append((item, when, idempotency_key))
        return "reserved"

    result = run(agent, "x", capabilities=[ToolbreakerCapability(RunGuard("task-typed"))])
    assert result.output == "reserved"
    ((item, when, key),) = seen
    assert isinstance(item, Item)
    assert isinstance(when, datetime)
    assert key.startswith("tb1-")


# -- 5. one breaker per dependency, across agents and runs -----------------------------------


@dataclass
class Deps:
    guard: RunGuard


def test_two_agents_share_one_breaker_through_the_registry(service):
    """Agent A's failures open the search breaker; agent B (guard found in its deps, one
    capability on the agent) is rejected without calling the service and falls back."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    service.outage("GET /search")
    registry = make_registry(threshold=2)
    ran_a: Counter[str] = Counter()
    ran_b: Counter[str] = Counter()

    def until_unavailable(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if not new:
            return call("search", q="usb cable")
        answer = payload(new[0])
        if answer.get("tool_unavailable"):
            if new[0].tool_name == "search":
                return call(answer["fallback"], q="usb cable")
        elif new[0].tool_name == "search":
            return call("search", q="usb cable")
        return say(f"{new[0].tool_name}: {len(answer.get('results', []))} results")

    script_a = Script(until_unavailable)
    agent_a = build_agent(script_a, service, ran_a)
    capability = ToolbreakerCapability(RunGuard("task-a"), registry=registry)
    assert run(agent_a, "a", capabilities=[capability]).output.startswith("search_snapshot")

    script_b = Script(until_unavailable)
    agent_b = build_agent(
        script_b,
        service,
        ran_b,
        deps_type=Deps,
        capabilities=[ToolbreakerCapability(lambda ctx: ctx.deps.guard, registry=registry)],
    )
    result = run(agent_b, "b", deps=Deps(RunGuard("task-b")))

    assert result.output.startswith("search_snapshot")
    assert ran_a["search"] == 2
    assert ran_b["search"] == 0
    assert service.hits["GET /search"] == 2
    assert payload(script_b.returns("search")[0])["reason"] == "open"


def test_a_required_dependency_going_down_stops_the_run(service):
    """A tool marked required whose breaker opens ends the run (dependency-open), and the
    stop packet says to wait for the dependency and resume."""
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import RunCancelled

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, run_stop, tool_metadata

    service.outage("GET /search")
    registry = make_registry(threshold=2)
    ran: Counter[str] = Counter()
    script = Script(lambda s, new: call("search", q=f"cable {s.steps}"))
    agent: Agent[Any, str] = Agent(script.model())

    @agent.tool_plain(metadata=tool_metadata(dependency="catalog", required=True))
    def search(q: str) -> dict[str, Any]:
        """Search the live catalog (the run is useless without it)."""
        ran["search"] += 1
        url = f"{service.url}/search?q={urllib.parse.quote(q)}"
        return request_json("GET", url, timeout=TIMEOUT)

    guard = RunGuard("task-required")
    with pytest.raises(RunCancelled) as raised:
        run(agent, "x", capabilities=[ToolbreakerCapability(guard, registry=registry)])

    stop = run_stop(raised.value, guard)
    assert stop is not None
    assert stop.packet.condition == "dependency-open"
    assert "wait for the dependency" in stop.packet.next_safe_action
    assert ran["search"] == 2
    assert registry.get("catalog").tool == "search"  # named after the tool, no sheet row


# -- the framework's deadline is the breaker's -----------------------------------------------


def test_breaker_timeout_becomes_the_tool_deadline_and_counts(service):
    """A hung tool is cut at the breaker's timeout by the framework; two timeouts open the
    breaker and the model hears tool_unavailable, not the framework's retry prompt."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    registry = Registry(Policy(failure_threshold=2), default_enforce="cooperative")
    registry.get("slow-api", tool="slow", timeout=0.05)
    entered: Counter[str] = Counter()

    def policy(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if len(script.returns("slow")) < 3:
            return call("slow")
        return say("gave up")

    script = Script(policy)
    agent: Agent[Any, str] = Agent(script.model())

    @agent.tool_plain
    async def slow() -> str:
        """Never answers."""
        entered["slow"] += 1
        await asyncio.Event().wait()
        return "never"  # pragma: no cover

    capability = ToolbreakerCapability(RunGuard("task-slow"), registry=registry)
    assert run(agent, "x", capabilities=[capability]).output == "gave up"
    first, opened, rejected = script.returns("slow")
    # toolbreaker's result, never the framework's retry prompt
    assert payload(first)["error"].startswith("TimeoutError: Timed out after 0.05")
    assert payload(first)["retryable"] is True
    assert payload(opened)["tool_unavailable"] is True
    assert payload(rejected)["tool_unavailable"] is True
    assert entered["slow"] == 2
    assert registry.for_tool("slow").stats.failures == {"timeout": 2}


# -- configuration errors and the optional extra ---------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "options", "field"),
    [
        ({"toolbreaker": {"risky": "read"}}, None, "lookup.metadata.toolbreaker.risky"),
        ({"toolbreaker": "read"}, None, "lookup.metadata.toolbreaker"),
        (None, {"dependency": "catalog"}, "lookup.metadata.toolbreaker.dependency"),
        (None, {"risk": "reversible_write"}, "lookup.idempotency_key"),
    ],
    ids=["typo", "not-a-mapping", "dependency-without-registry", "write-without-key"],
)
def test_misdescribed_tools_fail_with_the_field_named(metadata, options, field):
    """A wrong tool description (as written, or made by ``tool_metadata(**options)``) fails
    before the first call, naming the field."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    if options is not None:
        metadata = tool_metadata(**options)
    agent: Agent[Any, str] = Agent(Script(lambda s, n: say("-")).model())

    @agent.tool_plain(metadata=metadata)
    def lookup(q: str) -> str:
        """Look up."""
        return q

    with pytest.raises(PolicyError) as raised:
        run(agent, "x", capabilities=[ToolbreakerCapability(RunGuard("t"))])
    assert raised.value.field == field


def test_the_system_prompt_line_can_be_left_out():
    """instructions=False leaves the agent's instructions alone."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    script = Script(lambda s, n: say("-"))
    capability = ToolbreakerCapability(RunGuard("t"), instructions=False)
    run(Agent(script.model()), "x", capabilities=[capability])
    assert system_prompt_line() not in (script.instructions[0] or "")
    assert ToolbreakerCapability.get_serialization_name() is None  # holds live objects


def test_guard_factory_must_return_a_run_guard():
    """A factory that returns something else fails loudly at the start of the run."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    agent: Agent[Any, str] = Agent(Script(lambda s, n: say("-")).model())
    capability = ToolbreakerCapability(lambda ctx: ctx.deps)  # type: ignore[arg-type,return-value]
    with pytest.raises(PolicyError, match="not a RunGuard"):
        run(agent, "x", deps="oops", capabilities=[capability])


def test_missing_extra_names_what_to_install(monkeypatch):
    """Without pydantic-ai installed the adapter's import error says which extra to add."""
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    monkeypatch.delitem(sys.modules, "toolbreaker.integrations.pydantic_ai")
    with pytest.raises(ImportError, match=r"toolbreaker\[pydantic-ai\]"):
        importlib.import_module("toolbreaker.integrations.pydantic_ai")


# -- the model is a retry layer ----------------------------------------------------------------


def test_the_models_re_calls_spend_the_retry_budget(service):
    """The model re-issuing the same failed search is retrying: with a budget of one retry
    its second call spends it and it then reads that the tool is unavailable for this
    run; a third call is answered without entering the tool."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    service.outage("GET /search")
    registry = Registry(
        Policy(failure_threshold=10),
        default_timeout=TIMEOUT,
        default_enforce="cooperative",
        local_tools={"search_snapshot"},
    )
    registry.get("search", tool="search", retry={"max_attempts": 1, "budget": 1})
    registry.get("orders", tool="order_status")

    def stubborn(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if len(script.returns("search")) < 3:
            return call("search", q="usb cable")
        return say("The catalog is unavailable.")

    ran: Counter[str] = Counter()
    script = Script(stubborn)
    agent = build_agent(script, service, ran)
    result = run(
        agent,
        "find me a cable",
        capabilities=[ToolbreakerCapability(RunGuard("task-retry"), registry=registry)],
    )

    assert ran["search"] == 2
    assert service.hits["GET /search"] == 2
    first, spent, refused = script.returns("search")
    assert payload(first)["retryable"] is True
    assert payload(spent)["reason"] == "retry-budget"
    assert payload(refused)["reason"] == "retry-budget"
    assert payload(refused)["tool_unavailable"] is True
    assert registry.for_tool("search").stats.retries == {
        "model-retry": 1,
        "model-retry-refused": 1,
    }
    assert result.output == "The catalog is unavailable."


def test_repeated_timeouts_never_reach_the_model_as_a_framework_error():
    """Two timeouts under a lenient breaker: the model reads toolbreaker's results, never
    UnexpectedModelBehavior ("exceeded max retries count") from the framework."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    registry = Registry(Policy(failure_threshold=10), default_enforce="cooperative")
    registry.get("hang-api", tool="hang", timeout=0.02)

    def policy(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        if len(script.returns("hang")) < 3:
            return call("hang")
        return say("done")

    script = Script(policy)
    agent: Agent[Any, str] = Agent(script.model())

    @agent.tool_plain
    async def hang() -> str:
        """Never answers."""
        await asyncio.Event().wait()
        return "never"  # pragma: no cover

    capability = ToolbreakerCapability(RunGuard("task-hang"), registry=registry)
    assert run(agent, "x", capabilities=[capability]).output == "done"
    answers = [payload(r) for r in script.returns("hang")]
    assert len(answers) == 3
    assert all(a["error"].startswith("TimeoutError") for a in answers)


def test_metadata_naming_a_dependency_takes_the_sheets_row_or_is_refused():
    """tool_metadata(dependency="tickets") without an operation: the sheet's one tickets row,
    [tickets.write], configures the tool (never a tickets breaker on the defaults beside
    it); with operation="read", a row the sheet lacks, the run is refused naming the row."""
    from pathlib import Path

    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    sheet = Path(__file__).resolve().parents[2] / "examples" / "breakers.toml"

    def agent_with(metadata: dict[str, Any]) -> Agent[Any, str]:
        script = Script(lambda _script, _new: say("hi"))
        agent: Agent[Any, str] = Agent(script.model())

        @agent.tool_plain(metadata=metadata)
        def create_ticket(title: str, idempotency_key: str = "") -> str:
            """Open a ticket."""
            return "T-1"  # pragma: no cover

        return agent

    registry = Registry.from_toml(sheet)
    guard = RunGuard("t")
    agent = agent_with(tool_metadata(risk="reversible_write", dependency="tickets"))
    assert run(agent, "x", capabilities=[ToolbreakerCapability(guard, registry=registry)]).output
    (breaker,) = guard.breakers()
    assert breaker.key == "tickets:write"
    assert breaker.timeout == 10.0  # the row's, not the defaults' 4 s
    assert [b.key for b in registry] == ["tickets:write"]

    registry = Registry.from_toml(sheet)
    metadata = tool_metadata(risk="reversible_write", dependency="tickets", operation="read")
    agent = agent_with(metadata)
    capability = ToolbreakerCapability(RunGuard("t"), registry=registry)
    with pytest.raises(PolicyError, match=r"tickets\.write") as info:
        run(agent, "x", capabilities=[capability])
    assert info.value.field == "create_ticket.metadata.toolbreaker.operation"


@pytest.mark.parametrize("hide", [False, True])
def test_hide_open_tools_leaves_them_out_of_the_request_and_names_them(service, hide):
    """With hide_open_tools, the model is not offered a tool whose breaker is open, and the
    instructions name it and until when; a model calling what it is offered then makes no
    rejected call. Off by default, the tool is offered (and rejected locally)."""
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    registry = make_registry()
    breaker = registry.get("search")
    for _ in range(2):
        breaker.allow().record("failure")
    offered: list[set[str]] = []

    def policy(script: Script, new: list[ToolReturnPart]) -> ModelResponse:
        offered.append(set(script.schemas))
        if "search" in script.schemas and not script.received:
            return call("search", q="usb")
        return say("done")

    script = Script(policy)
    ran: Counter[str] = Counter()
    agent = build_agent(script, service, ran)
    guard = RunGuard("hide")
    capability = ToolbreakerCapability(guard, registry=registry, hide_open_tools=hide)
    run(agent, "find a usb cable", capabilities=[capability])
    assert ran["search"] == 0
    if hide:
        assert "search" not in offered[0]
        assert '"search" (for about 20 more seconds)' in (script.instructions[0] or "")
        assert script.returns("search") == []
    else:
        assert "search" in offered[0]
        assert payload(script.returns("search")[0])["tool_unavailable"] is True


def test_a_tools_risk_may_be_a_function_of_its_arguments():
    """Issue 33: ``tool_metadata(risk=shell_risk_of("command"))`` describes one shell tool
    whose calls differ: ``cat`` is counted a read, ``sed -i`` a write, inside the real
    agent loop."""
    from pydantic_ai import Agent

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    def plan(script: Script, _new: list[ToolReturnPart]) -> ModelResponse:
        commands = ["cat calc.py", "sed -i 's/-/+/' calc.py"]
        if script.steps <= len(commands):
            return call("bash", command=commands[script.steps - 1])
        return say("fixed")

    agent: Agent[Any, str] = Agent(Script(plan).model())
    ran: list[str] = []

    @agent.tool_plain(metadata=tool_metadata(risk=shell_risk_of("command"), idempotency_arg=None))
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "ok"

    guard = RunGuard("fix-issue")
    run(agent, "fix calc.py", capabilities=[ToolbreakerCapability(guard)])
    assert ran == ["cat calc.py", "sed -i 's/-/+/' calc.py"]
    assert dict(guard.state.class_calls) == {"read": 1, "reversible_write": 1, "irreversible": 0}
