"""The OpenAI Agents SDK adapter, run through the real SDK offline.

The model is the SDK's own ``agents.testing.ScriptedModel``; the tools call the real
local HTTP service (``ToolService``), so 503s and 404s cross a socket. Each test asserts
what the tool bodies saw and what the scripted model read back.
"""

from __future__ import annotations

import ast
import asyncio
import json
import urllib.parse
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from agents import Agent, RunConfig
    from agents.result import RunResult
    from agents.testing import ModelCall, ModelStep, ScriptedModel


from toolbreaker import Budget, Policy, Registry, RunGuard, shell_risk_of
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

needs("agents", reason="the openai-agents extra is not installed")
frameworks_imported = imported(
    "agents",
    "agents.result",
    "agents.run_config",
    "agents.testing",
    "agents.tool_context",
    "openai_agents_parts",
    "toolbreaker.integrations.openai_agents",
)

TICKET = {"title": "Refund order A-1001", "body": "The cable arrived broken."}


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK exports traces to OpenAI unless told not to; these tests stay offline."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


@pytest.fixture
def registry() -> Registry:
    """One breaker per dependency; the snapshot search is the catalog's local fallback."""
    registry = Registry(
        Policy(failure_threshold=2),
        default_timeout=2.0,
        default_enforce="cooperative",
        local_tools={"search_snapshot"},
    )
    registry.get(
        "catalog",
        "read",
        tool="search_catalog",
        fallback="search_snapshot",
        fallback_note="say that prices may be out of date",
    )
    registry.get("orders", "read", tool="lookup_order")
    registry.get("tickets", "write", tool="create_ticket", policy=Policy(failure_threshold=3))
    return registry


class Shop:
    """The shop's tools over the real service; counts how often each body was entered."""

    def __init__(self, service: ToolService) -> None:
        from agents import function_tool

        self.entered: Counter[str] = Counter()
        self.keys: list[str] = []
        url = service.url

        @function_tool
        def search_catalog(query: str) -> dict[str, Any]:
            """Search the live catalog."""
            self.entered["search_catalog"] += 1
            q = urllib.parse.quote(query)
            return request_json("GET", f"{url}/search?q={q}", timeout=2)

        @function_tool
        def search_snapshot(query: str) -> dict[str, Any]:
            """Search yesterday's catalog snapshot."""
            self.entered["search_snapshot"] += 1
            q = urllib.parse.quote(query)
            return request_json("GET", f"{url}/search_snapshot?q={q}", timeout=2)

        @function_tool
        def lookup_order(order_id: str) -> dict[str, Any]:
            """Look an order up by id."""
            self.entered["lookup_order"] += 1
            return request_json("GET", f"{url}/orders/{order_id}", timeout=2)

        @function_tool
        def create_ticket(title: str, body: str, idempotency_key: str = "") -> dict[str, Any]:
            """Open a support ticket."""
            self.entered["create_ticket"] += 1
            self.keys.append(idempotency_key)
            headers = {"Idempotency-Key": idempotency_key}
            payload = {"title": title, "body": body}
            return request_json("POST", f"{url}/tickets", body=payload, headers=headers, timeout=2)

        self.tools = [search_catalog, search_snapshot, lookup_order, create_ticket]


def agent_with(shop: Shop, steps: Sequence[Any], name: str = "shop") -> Agent[Any]:
    from agents import Agent
    from agents.testing import ScriptedModel

    return Agent(name=name, model=ScriptedModel(steps), tools=list(shop.tools))


def run(agent: Agent[Any], config: RunConfig | None = None) -> RunResult:
    from agents import Runner

    from toolbreaker.integrations.openai_agents import run_config

    return asyncio.run(Runner.run(agent, "help me", run_config=config or run_config()))


def model_of(agent: Agent[Any]) -> ScriptedModel:
    from agents.testing import ScriptedModel

    assert isinstance(agent.model, ScriptedModel)
    return agent.model


def tool_results(call: ModelCall) -> dict[str, Any]:
    """The tool results the model read in this call, by call id, decoded.

    toolbreaker's results are JSON; the SDK writes a tool's own dict result as its repr.
    """
    found: dict[str, Any] = {}
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            text = item["output"]
            try:
                found[item["call_id"]] = json.loads(text)
            except ValueError:
                try:
                    found[item["call_id"]] = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    found[item["call_id"]] = text
    return found


def follow_fallback(query: str, call_id: str) -> ModelStep:
    """A model that does what a tool-unavailable result says: call the fallback."""
    from agents.testing import ModelStep, function_call

    def respond(call: ModelCall) -> list[Any]:
        last = list(tool_results(call).values())[-1]
        assert last["tool_unavailable"] is True
        return [function_call(last["fallback"], {"query": query}, call_id=call_id)]

    return ModelStep.respond(respond)


def answer_from(call_id: str) -> ModelStep:
    """A model that answers from a tool result."""
    from agents.testing import ModelStep, assistant_message

    def respond(call: ModelCall) -> list[Any]:
        result = tool_results(call)[call_id]
        return [assistant_message(f"found {len(result['results'])} (snapshot: {result['stale']})")]

    return ModelStep.respond(respond)


def search(query: str, call_id: str) -> list[Any]:
    from agents.testing import function_call

    return [function_call("search_catalog", {"query": query}, call_id=call_id)]


# -- 1. a failing dependency: the breaker opens and the model switches to the fallback --------


def test_503s_open_the_breaker_and_the_model_switches_to_the_fallback(service, registry):
    """Two real 503s open the catalog breaker; the third search never runs, the model
    reads the tool-unavailable result naming the fallback, calls it and answers."""
    from toolbreaker.integrations.openai_agents import GUARDRAIL_NAME, protect

    service.outage("GET /search")
    shop = Shop(service)
    steps = [
        search("usb cable", "c1"),
        search("usb-c cable", "c2"),
        search("cable", "c3"),  # a stubborn model tries once more
        follow_fallback("cable", "c4"),
        answer_from("c4"),
    ]
    agent = protect(agent_with(shop, steps), registry=registry, guard=RunGuard("task-1"))

    result = run(agent)

    assert shop.entered == {"search_catalog": 2, "search_snapshot": 1}
    assert service.hits["GET /search"] == 2
    breaker = registry.for_tool("search_catalog")
    assert breaker.state.phase == "open"
    assert (breaker.stats.admitted, breaker.stats.rejected) == (2, 1)
    assert breaker.stats.failures == {"http-503": 2}  # each call settled exactly once
    calls = model_of(agent).calls
    first = tool_results(calls[1])["c1"]
    assert first["ok"] is False
    assert first["retryable"] is True
    assert "503" in first["error"]
    opened = tool_results(calls[2])["c2"]
    assert opened["tool_unavailable"] is True
    rejected = tool_results(calls[3])["c3"]
    assert rejected["tool_unavailable"] is True
    assert rejected["fallback"] == "search_snapshot"
    assert '"search_snapshot"' in rejected["instruction"]
    assert "prices may be out of date" in rejected["instruction"]
    assert result.final_output == "found 3 (snapshot: True)"
    guardrails = [r.guardrail.get_name() for r in result.tool_input_guardrail_results]
    assert guardrails == [GUARDRAIL_NAME] * 4


# -- 2. the model's mistakes do not open the breaker ---------------------------------------


def test_404s_do_not_open_the_breaker(service, registry):
    """Three parallel lookups of unknown orders get real 404s: every call runs, each is
    recorded once and ignored, the breaker stays closed, the model is told not to retry."""
    from agents.testing import assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    lookups = [
        function_call("lookup_order", {"order_id": f"Z-{n}"}, call_id=f"c{n}") for n in (1, 2, 3)
    ]
    steps = [lookups, [assistant_message("no such order")]]
    agent = protect(agent_with(shop, steps), registry=registry, guard=RunGuard("task-2"))

    result = run(agent)

    breaker = registry.for_tool("lookup_order")
    assert shop.entered["lookup_order"] == 3
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"http-404": 3}
    last = tool_results(model_of(agent).calls[1])
    for n in (1, 2, 3):
        assert last[f"c{n}"]["retryable"] is False
        assert "404" in last[f"c{n}"]["error"]
    assert result.final_output == "no such order"


def test_invalid_arguments_do_not_open_the_breaker(service, registry):
    """Arguments that fail the tool's schema are the model's mistake: the body never runs,
    the breaker does not count it, and the model reads what was wrong."""
    from agents.testing import assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    bad = [[function_call("lookup_order", {"order": "A-1001"}, call_id=f"c{n}")] for n in (1, 2, 3)]
    agent = protect(
        agent_with(shop, [*bad, [assistant_message("sorry")]]),
        registry=registry,
        guard=RunGuard("task-2b", budget=Budget(max_repeats=5)),
    )

    run(agent)

    breaker = registry.for_tool("lookup_order")
    assert shop.entered["lookup_order"] == 0
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"unknown-exception:ModelBehaviorError": 3}
    seen = tool_results(model_of(agent).calls[3])
    assert seen["c3"]["retryable"] is False


# -- 3. loops end through the SDK's own stop path, with a stop packet ----------------------


@pytest.mark.parametrize(
    ("queries", "condition", "ran"),
    [(["cable"], "repeated-action", 4), (["cable", "cables"], "loop", 3)],
    ids=["repeats", "alternates"],
)
def test_a_looping_model_is_stopped_by_the_guardrail_tripwire(
    service, registry, queries, condition, ran
):
    """A model that repeats one search (or alternates two) is stopped: the guardrail
    trips, the run raises the SDK's tripwire, and its output_info is the stop packet."""
    from agents import ToolInputGuardrailTripwireTriggered
    from agents.testing import function_call

    from toolbreaker.integrations.openai_agents import GUARDRAIL_NAME, protect

    shop = Shop(service)
    steps = [
        [function_call("search_snapshot", {"query": queries[n % len(queries)]}, call_id=f"c{n}")]
        for n in range(12)
    ]
    guard = RunGuard("task-3")
    agent = protect(agent_with(shop, steps), registry=registry, guard=guard)

    with pytest.raises(ToolInputGuardrailTripwireTriggered) as tripped:
        run(agent)

    packet = tripped.value.output.output_info
    assert tripped.value.guardrail.get_name() == GUARDRAIL_NAME
    assert packet["schema"] == "toolbreaker.stop/v1"
    assert packet["condition"] == condition
    assert packet == guard.stop_packet().to_dict()
    assert guard.stopped is not None
    assert guard.stopped.condition == condition
    assert shop.entered["search_snapshot"] == ran
    assert len(model_of(agent).calls) == ran + 1  # the call that tripped never ran


# -- 4. writes carry one idempotency key, across retries and resumed runs -------------------


def test_a_write_keeps_its_idempotency_key_across_retries_and_resumes(service, registry):
    """create_ticket gets the same key on a retry after a 503 and in a resumed run (a new
    guard, same task id and journal); a third run does not write again. The model never
    sees the key parameter."""
    from agents import FunctionTool
    from agents.testing import assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    journal = MemoryStore()
    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    shop = Shop(service)

    def attempt(call_id: str) -> list[Any]:
        return [function_call("create_ticket", TICKET, call_id=call_id)]

    def resumed_run(steps: list[Any]) -> Agent[Any]:
        guard = RunGuard("task-4", journal=journal)
        guard.ensure_tool("create_ticket", risk="reversible_write")
        agent = protect(agent_with(shop, steps), registry=registry, guard=guard)
        run(agent)
        return agent

    first = resumed_run([attempt("c1"), attempt("c2"), [assistant_message("try later")]])
    resumed_run([attempt("c1"), [assistant_message("created")]])
    third = resumed_run([attempt("c1"), [assistant_message("already there")]])

    assert shop.entered["create_ticket"] == 3
    assert len(shop.keys) == 3
    assert len(set(shop.keys)) == 1
    assert shop.keys[0]
    tickets = service.created("tickets")
    assert len(tickets) == 1
    assert tickets[0]["idempotency_key"] == shop.keys[0]
    retried = tool_results(model_of(first).calls[2])
    assert retried["c1"]["retryable"] is True
    assert retried["c2"]["retryable"] is True
    journaled = tool_results(model_of(third).calls[1])["c1"]
    assert journaled["id"] == tickets[0]["id"]
    offered = {t.name: t for t in model_of(first).calls[0].tools if isinstance(t, FunctionTool)}
    schema = offered["create_ticket"].params_json_schema
    assert "idempotency_key" not in schema["properties"]
    assert "idempotency_key" not in schema["required"]


def test_a_key_the_model_makes_up_never_changes_the_writes_key(service, registry):
    """The idempotency argument is the guard's: a value the model sends for it (here a
    custom ``op_token``, which no fingerprint rule drops by name) is dropped before the
    action is fingerprinted, so a retry that makes up another value is the same write
    with the same key, and the tool receives the guard's key, never the model's."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    service.inject("POST /tickets", Fault(status=503))
    seen: list[str] = []

    @function_tool
    def create_ticket(title: str, body: str, op_token: str = "") -> dict[str, Any]:
        """Open a support ticket."""
        seen.append(op_token)
        headers = {"Idempotency-Key": op_token}
        payload = {"title": title, "body": body}
        return request_json(
            "POST", f"{service.url}/tickets", body=payload, headers=headers, timeout=2
        )

    def attempt(call_id: str, made_up: str) -> list[Any]:
        return [function_call("create_ticket", {**TICKET, "op_token": made_up}, call_id=call_id)]

    guard = RunGuard("task-made-up")
    guard.ensure_tool("create_ticket", risk="reversible_write", idempotency_arg="op_token")
    steps = [attempt("c1", "model-1"), attempt("c2", "model-2"), [assistant_message("done")]]
    agent = Agent(name="shop", model=ScriptedModel(steps), tools=[create_ticket])
    run(protect(agent, registry=registry, guard=guard))
    assert len(seen) == 2
    assert seen[0] == seen[1]
    assert seen[0].startswith("tb1-")
    tickets = service.created("tickets")
    assert [t["idempotency_key"] for t in tickets] == [seen[0]]


# -- 5. one breaker per dependency, whoever calls it ----------------------------------------


def test_two_agents_share_one_breaker_through_the_registry(service, registry):
    """Agent A's failures open the catalog breaker; agent B (breakers only, no guard)
    is refused on its first call: the tool body is not entered again."""
    from agents.testing import assistant_message

    from toolbreaker.integrations.openai_agents import protect

    service.outage("GET /search")
    shop = Shop(service)
    first = protect(
        agent_with(shop, [search("cable", "a1"), search("cables", "a2"), [assistant_message("x")]]),
        registry=registry,
        guard=RunGuard("task-5a"),
    )
    second = protect(
        agent_with(
            shop, [search("cable", "b1"), follow_fallback("cable", "b2"), answer_from("b2")], "b"
        ),
        registry=registry,
    )

    run(first)
    result = run(second)

    assert shop.entered == {"search_catalog": 2, "search_snapshot": 1}
    assert service.hits["GET /search"] == 2
    rejected = tool_results(model_of(second).calls[1])["b1"]
    assert rejected["tool_unavailable"] is True
    assert result.final_output == "found 3 (snapshot: True)"
    assert len([b for b in registry if b.dependency == "catalog"]) == 1


# -- timeouts, propagated errors, wiring ----------------------------------------------------


def slow_agent(entered: Counter[str], steps: Sequence[Any], **timeout: Any) -> Agent[Any]:
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel

    @function_tool(**timeout)
    async def slow_search(query: str) -> str:
        """A search that hangs."""
        entered["slow_search"] += 1
        await asyncio.sleep(5)
        return query

    return Agent(name="slow", model=ScriptedModel(steps), tools=[slow_search])


def test_a_timeout_is_recorded_and_the_breaker_deadline_is_enforced_by_the_sdk():
    """An async tool without a timeout of its own gets the breaker's; the SDK cancels it
    there, the timeout counts as a failure (it bypasses the error formatter), and the
    model reads toolbreaker's result instead of the SDK's timeout string."""
    from agents import FunctionTool
    from agents.testing import assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    registry = Registry(Policy(failure_threshold=1), default_enforce="cooperative")
    breaker = registry.get("slow", tool="slow_search", timeout=0.05)
    entered: Counter[str] = Counter()
    steps = [
        [function_call("slow_search", {"query": "q"}, call_id="c1")],
        [function_call("slow_search", {"query": "r"}, call_id="c2")],
        [assistant_message("it is down")],
    ]
    agent = protect(slow_agent(entered, steps), registry=registry, guard=RunGuard("task-6"))
    protected = agent.tools[0]
    assert isinstance(protected, FunctionTool)
    assert protected.timeout_seconds == pytest.approx(0.05)

    run(agent)

    assert entered["slow_search"] == 1
    assert breaker.stats.failures == {"timeout": 1}
    assert breaker.state.phase == "open"
    seen = tool_results(model_of(agent).calls[2])
    assert seen["c1"]["tool_unavailable"] is True
    assert seen["c2"]["tool_unavailable"] is True


def test_a_timeout_that_raises_is_recorded_before_the_run_fails():
    """timeout_behavior="raise_exception" is kept: the run fails with ToolTimeoutError,
    and the breaker has counted the timeout."""
    from agents import ToolTimeoutError
    from agents.testing import function_call

    from toolbreaker.integrations.openai_agents import protect

    registry = Registry(default_enforce="cooperative")
    breaker = registry.get("slow", tool="slow_search", timeout=1.0)
    entered: Counter[str] = Counter()
    steps = [[function_call("slow_search", {"query": "q"}, call_id="c1")]]
    agent = protect(
        slow_agent(entered, steps, timeout=0.05, timeout_behavior="raise_exception"),
        registry=registry,
    )

    with pytest.raises(ToolTimeoutError):
        run(agent)

    assert breaker.stats.failures == {"timeout": 1}


def test_a_write_that_times_out_is_never_replayed():
    """A write cut off at its deadline may have happened: the model reads an unknown
    outcome, and the same write asked again is answered, not run."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    registry = Registry(default_enforce="cooperative")
    registry.get("tickets", "write", tool="create_ticket", timeout=0.05)
    entered: list[str] = []

    @function_tool
    async def create_ticket(title: str, idempotency_key: str = "") -> str:
        """Open a ticket (the service hangs)."""
        entered.append(idempotency_key)
        await asyncio.sleep(5)
        return "T-1"

    attempt = {"title": "Refund A-1001"}
    steps = [
        [function_call("create_ticket", attempt, call_id="c1")],
        [function_call("create_ticket", attempt, call_id="c2")],
        [assistant_message("an operator will check")],
    ]
    guard = RunGuard("task-7")
    guard.ensure_tool("create_ticket", risk="reversible_write")
    agent = Agent(name="w", model=ScriptedModel(steps), tools=[create_ticket])
    protected = protect(agent, registry=registry, guard=guard)

    run(protected)

    assert len(entered) == 1
    assert entered[0]
    seen = tool_results(model_of(protected).calls[2])
    assert seen["c1"]["outcome_unknown"] is True
    assert seen["c1"]["idempotency_key"] == entered[0]
    assert seen["c2"]["outcome_unknown"] is True
    assert guard.writes_blocked is not None


def test_a_cancelled_run_records_a_cancellation_not_a_failure():
    """Cancelling the run while an untimed tool runs settles its permit as a
    cancellation: the breaker does not count it."""
    from agents import Runner
    from agents.testing import function_call

    from toolbreaker.integrations.openai_agents import protect, run_config

    registry = Registry(Policy(failure_threshold=1), default_enforce="cooperative")
    breaker = registry.get("slow", tool="slow_search")  # no deadline: nothing times out
    entered: Counter[str] = Counter()
    steps = [[function_call("slow_search", {"query": "q"}, call_id="c1")]]
    agent = protect(slow_agent(entered, steps), registry=registry)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(Runner.run(agent, "hi", run_config=run_config()))
        while not entered:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())

    assert breaker.stats.failures == {"cancelled": 1}
    assert breaker.state.phase == "closed"


def test_an_approved_call_is_one_step_even_with_pre_approval_guardrails():
    """With guardrails before and after approval, the step begun before approval is the
    one the approved call settles: one call counted, the write's key filled in once."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.run_config import ToolExecutionConfig
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect, run_config

    ran: list[str] = []

    @function_tool(needs_approval=True)
    async def refund(order_id: str, idempotency_key: str = "") -> str:
        """Refund an order."""
        ran.append(idempotency_key)
        return "refunded"

    guard = RunGuard("task-8")
    guard.ensure_tool("refund", risk="reversible_write")
    steps = [
        [function_call("refund", {"order_id": "A-1001"}, call_id="c1")],
        [assistant_message("done")],
    ]
    agent = protect(Agent(name="r", model=ScriptedModel(steps), tools=[refund]), guard=guard)
    config = run_config(
        RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))
    )

    async def approve_and_resume() -> RunResult:
        paused = await Runner.run(agent, "refund A-1001", run_config=config)
        assert ran == []
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        return await Runner.run(agent, state, run_config=config)

    result = asyncio.run(approve_and_resume())

    assert result.final_output == "done"
    assert len(ran) == 1
    assert ran[0]
    assert guard.state.calls == 1
    entries = guard.journal.journal_entries("task-8")
    assert [(e["status"], e["idempotency_key"]) for e in entries] == [("confirmed", ran[0])]


def test_a_tool_invoked_outside_a_guarded_run_still_asks_first(service, registry):
    """Calling a protected tool's invoker directly (no guardrail ran) still goes through
    the breaker: with the breaker open the body is not entered."""
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    protected = protect(agent_with(shop, []), registry=registry)
    registry.for_tool("search_catalog").isolate()
    tool = next(t for t in protected.tools if t.name == "search_catalog")
    assert isinstance(tool, FunctionTool)
    arguments = json.dumps({"query": "cable"})
    ctx = ToolContext(None, tool_name=tool.name, tool_call_id="x1", tool_arguments=arguments)

    answer = json.loads(asyncio.run(tool.on_invoke_tool(ctx, arguments)))

    assert answer["tool_unavailable"] is True
    assert answer["reason"] == "isolated"
    assert shop.entered == {}


def test_an_exception_the_tool_lets_through_is_recorded(service, registry):
    """failure_error_function=None: the run fails as the tool asked, after the breaker
    counted the 503."""
    from agents import Agent, UserError, function_tool
    from agents.testing import ScriptedModel, function_call

    from toolbreaker.integrations.openai_agents import protect

    service.outage("GET /search")

    @function_tool(failure_error_function=None)
    def search_catalog(query: str) -> dict[str, Any]:
        """Search the live catalog."""
        return request_json("GET", f"{service.url}/search?q={query}", timeout=2)

    steps = [[function_call("search_catalog", {"query": "cable"}, call_id="c1")]]
    agent = Agent(name="strict", model=ScriptedModel(steps), tools=[search_catalog])

    with pytest.raises(UserError, match="503"):
        run(protect(agent, registry=registry))

    assert registry.for_tool("search_catalog").stats.failures == {"http-503": 1}


def test_a_run_without_the_formatter_fails_before_any_tool_runs(service, registry):
    """Failures are recorded by the run's tool_error_formatter: a run without it is
    refused at the first protected call, before the tool body, naming the fix."""
    from agents import RunConfig, UserError

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    agent = protect(agent_with(shop, [search("cable", "c1")]), registry=registry)

    with pytest.raises(UserError, match="run_config") as refused:
        run(agent, RunConfig())

    assert isinstance(refused.value.__cause__, PolicyError)
    assert shop.entered == {}
    assert registry.for_tool("search_catalog").stats.demand == 0


def test_run_config_keeps_the_callers_formatter_for_other_errors(service, registry):
    """A formatter the caller had still words the errors of unprotected tools, while a
    protected tool next to it (breaker only, no guard) records its success."""
    from agents import Agent, RunConfig, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect, run_config

    @function_tool
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("nope")

    shop = Shop(service)
    lookup = next(t for t in shop.tools if t.name == "lookup_order")
    steps = [
        [
            function_call("broken", {}, call_id="c1"),
            function_call("lookup_order", {"order_id": "A-1001"}, call_id="c2"),
        ],
        [assistant_message("done")],
    ]
    agent = Agent(name="mixed", model=ScriptedModel(steps), tools=[broken, lookup])
    protected = protect(agent, breakers={"lookup_order": registry.for_tool("lookup_order")})
    config = run_config(RunConfig(tool_error_formatter=lambda args: f"caller: {args.error}"))

    run(protected, config)

    assert protected.tools[0] is broken  # no breaker and no guard: left alone
    seen = tool_results(model_of(protected).calls[1])
    assert seen["c1"] == "caller: nope"
    assert seen["c2"]["carrier"] == "UPS"
    breaker = registry.for_tool("lookup_order")
    assert (breaker.stats.admitted, breaker.stats.failures) == (1, {})
    assert run_config(config) is config


def test_protect_copies_and_refuses_what_it_cannot_guard(service, registry):
    """protect() leaves the agent alone, refuses to protect twice, refuses a breaker on a
    tool whose own failure handler would hide its failures, and needs something to use."""
    from agents import Agent, WebSearchTool, function_tool

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    hosted = WebSearchTool()
    agent = Agent(name="shop", tools=[*shop.tools, hosted])
    protected = protect(agent, registry=registry)

    assert agent.tools == [*shop.tools, hosted]
    assert all(not t.tool_input_guardrails for t in shop.tools)
    assert protected.tools[-1] is hosted  # hosted tools have no guardrails: left alone
    assert protected.tools[0] is not shop.tools[0]
    with pytest.raises(PolicyError, match="already protected"):
        protect(protected, registry=registry)

    @function_tool(failure_error_function=lambda _ctx, exc: f"oops: {exc}")
    def search_catalog(query: str) -> str:
        """Search."""
        return query

    with pytest.raises(PolicyError, match="failure_error_function"):
        protect(Agent(name="custom", tools=[search_catalog]), registry=registry)
    with pytest.raises(PolicyError, match="needs a registry"):
        protect(agent)


def test_a_registry_without_sheet_rows_protects_every_tool(service):
    """One registry means the same protection in every framework: no tool is left silently
    unprotected because the sheet does not name it (the LangChain middleware does the same)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker import Policy, Registry
    from toolbreaker.integrations.openai_agents import protect, run_config

    registry = Registry(Policy(failure_threshold=1), default_timeout=2.0)

    @function_tool
    def broken() -> str:
        """Always fails."""
        raise ConnectionResetError("peer reset")

    agent = Agent(
        name="bare",
        model=ScriptedModel(
            [[function_call("broken", {}, call_id="c1")], [assistant_message("ok")]]
        ),
        tools=[broken],
    )
    protected = protect(agent, registry=registry)
    run(protected, run_config())
    assert protected.tools[0] is not broken
    assert registry.get("broken").state.phase == "open"
    seen = tool_results(model_of(protected).calls[1])
    assert seen["c1"]["tool_unavailable"] is True


@pytest.mark.parametrize("hide", [False, True])
def test_hide_open_tools_disables_them_and_names_them_in_the_instructions(service, registry, hide):
    """With hide_open_tools, an open breaker's tool is not offered to the model and the
    instructions name it and until when; off by default, the tool stays listed."""
    from agents import Agent
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from toolbreaker.integrations.openai_agents import protect

    catalog = registry.get("catalog", "read")
    for _ in range(2):
        catalog.allow().record("failure")
    seen: list[ModelCall] = []

    def respond(call: ModelCall) -> list[Any]:
        seen.append(call)
        return [assistant_message("ok")]

    shop = Shop(service)
    agent = Agent(
        name="shop",
        instructions="You sell cables.",
        model=ScriptedModel([ModelStep.respond(respond)]),
        tools=list(shop.tools),
    )
    run(protect(agent, registry=registry, hide_open_tools=hide))
    offered = {tool.name for tool in seen[0].tools}
    instructions = seen[0].system_instructions or ""
    assert instructions.startswith("You sell cables.")
    if hide:
        assert "search_catalog" not in offered
        assert {"search_snapshot", "lookup_order"} <= offered
        assert '"search_catalog" (for about 20 more seconds)' in instructions
    else:
        assert "search_catalog" in offered
        assert "hidden" not in instructions


# -- a stopped run asks the model nothing more ------------------------------------------------


def test_the_agents_own_hooks_still_run(service, registry):
    """protect() wraps the agent's hooks; every one of them is still called."""
    from agents import Agent
    from agents.testing import ModelStep, ScriptedModel, assistant_message
    from openai_agents_parts import Recorder

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    hooks = Recorder()
    agent = Agent(
        name="shop",
        model=ScriptedModel(
            [search("usb", "c1"), ModelStep.respond(lambda _: [assistant_message("ok")])]
        ),
        tools=list(shop.tools),
        hooks=hooks,
    )
    result = run(protect(agent, registry=registry, guard=RunGuard("task-hooks")))
    assert result.final_output == "ok"
    assert hooks.seen == [
        "start",
        "llm_start",
        "llm_end",
        "tool_start:search_catalog",
        "tool_end:search_catalog",
        "llm_start",
        "llm_end",
        "end",
    ]


def test_a_stop_between_turns_ends_the_run_before_the_model_is_asked(service, registry):
    """A stop decided while a turn ran (here by an operator) lets that turn's answers in;
    the next model request raises the tripwire with the stop packet, so the model cannot
    end the run with an answer as if nothing had stopped it."""
    from agents import Agent, ToolInputGuardrailTripwireTriggered, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from toolbreaker.integrations.openai_agents import protect

    shop = Shop(service)
    guard = RunGuard("task-stop")

    def stop_then_search(query: str) -> dict[str, Any]:
        guard.stop("maintenance window")
        return {"results": [], "query": query}

    tool = function_tool(stop_then_search, name_override="search_catalog")
    agent = Agent(
        name="shop",
        model=ScriptedModel(
            [search("usb", "c1"), ModelStep.respond(lambda _: [assistant_message("ok")])]
        ),
        tools=[tool],
    )
    protected = protect(agent, registry=registry, guard=guard)
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as tripped:
        run(protected)
    packet = tripped.value.output.output_info
    assert packet["condition"] == "operator"
    assert packet == guard.stop_packet().to_dict()
    assert len(model_of(protected).calls) == 1  # asked once; never after the stop
    assert shop.entered == Counter()


def test_a_tools_risk_may_be_a_function_of_its_arguments():
    """Issue 33: a shell tool described with ``risk=shell_risk_of("command")``: each call is
    counted in its command's class inside the SDK's run, and the tool is protected as one
    whose calls may write (its failures must reach the guard)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    ran: list[str] = []

    @function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "ok"

    guard = RunGuard("fix-issue")
    guard.ensure_tool("bash", risk=shell_risk_of("command"), idempotency_arg=None)
    steps = [
        [function_call("bash", {"command": "cat calc.py"}, call_id="c1")],
        [function_call("bash", {"command": "sed -i 's/-/+/' calc.py"}, call_id="c2")],
        [assistant_message("fixed")],
    ]
    agent = Agent(name="coder", model=ScriptedModel(steps), tools=[bash])
    run(protect(agent, guard=guard))
    assert ran == ["cat calc.py", "sed -i 's/-/+/' calc.py"]
    assert dict(guard.state.class_calls) == {"read": 1, "reversible_write": 1, "irreversible": 0}

    @function_tool(name_override="bash", failure_error_function=lambda _ctx, _exc: "failed")
    def own_answers(command: str) -> str:
        """Run a shell command, answering its own failures."""
        return command  # pragma: no cover - never run: refused when protected

    with pytest.raises(PolicyError, match="failure_error_function"):
        protect(Agent(name="coder", model=ScriptedModel([]), tools=[own_answers]), guard=guard)


def test_a_key_the_model_made_up_never_reaches_the_tool_on_a_read():
    """A tool whose calls may write takes the guard's key; on a call that is a read there
    is no key to give, and one the model sent anyway is dropped, as every adapter does
    (``Step.args_for``): the tool runs with its default, never the model's key."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolbreaker.integrations.openai_agents import protect

    keys: list[str] = []

    @function_tool
    def bash(command: str, idempotency_key: str = "") -> str:
        """Run a shell command."""
        keys.append(idempotency_key)
        return "ok"

    guard = RunGuard("keys-of-reads")
    guard.ensure_tool("bash", risk=shell_risk_of("command"))
    made_up = {"command": "cat calc.py", "idempotency_key": "k-from-the-model"}
    steps = [
        [function_call("bash", made_up, call_id="c1")],
        [function_call("bash", {**made_up, "command": "touch notes.txt"}, call_id="c2")],
        [assistant_message("done")],
    ]
    agent = Agent(name="coder", model=ScriptedModel(steps), tools=[bash])
    run(protect(agent, guard=guard))
    assert keys[0] == ""
    assert keys[1] not in ("", "k-from-the-model")  # the write's key is the guard's
