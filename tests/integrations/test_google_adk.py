"""The Google ADK plugin, inside the real ADK Runner with a scripted offline model.

Every test runs a real ``LlmAgent`` in an ``InMemoryRunner`` (in-memory session service)
whose app carries :class:`ToolbreakerPlugin`. The model is a ``BaseLlm`` subclass that
decides its next response from the request ADK builds, so the assertions are on what the
model actually read. Tools call the local ToolService over real sockets, off the loop.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from google.adk.agents import LlmAgent
    from google.adk.events import Event
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin


from adapter_registry import TIMEOUT, make_registry
from toolbreaker import (
    Budget,
    ModelPrice,
    Policy,
    Registry,
    RunGuard,
    shell_risk_of,
    system_prompt_line,
)
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

needs("google.adk", reason="the google-adk extra is not installed")
frameworks_imported = imported(
    "google.adk.agents",
    "google.adk.apps",
    "google.adk.events",
    "google.adk.models.llm_request",
    "google.adk.models.llm_response",
    "google.adk.runners",
    "google.adk.tools.function_tool",
    "google.genai",
    "google_adk_parts",
    "toolbreaker.integrations.google_adk",
)


async def fetch(method: str, url: str, **kwargs: Any) -> dict[str, Any]:
    """The standard-library client, in a worker thread: a tool never blocks ADK's loop."""
    return await asyncio.to_thread(request_json, method, url, timeout=TIMEOUT, **kwargs)


# -- the scripted model ----------------------------------------------------------------------


@dataclass
class Script:
    """The model's brain: records what each request carried, answers with ``policy``."""

    policy: Callable[[Script, list[types.FunctionResponse]], list[types.Part] | str]
    received: list[types.FunctionResponse] = field(default_factory=list)
    schemas: dict[str, Any] = field(default_factory=dict)
    instructions: list[str] = field(default_factory=list)
    models: list[str | None] = field(default_factory=list)
    steps: int = 0

    def respond(self, request: LlmRequest) -> LlmResponse:
        from google.adk.models.llm_response import LlmResponse
        from google.genai import types

        self.steps += 1
        assert self.steps < 30, "the guard should have stopped this run long ago"
        self.models.append(request.model)
        self.instructions.append(str(request.config.system_instruction or ""))
        for tool in request.config.tools or ():
            for declaration in getattr(tool, "function_declarations", None) or ():
                self.schemas[declaration.name] = declaration.parameters_json_schema
        last = request.contents[-1]
        new = [p.function_response for p in last.parts or () if p.function_response]
        self.received.extend(new)
        answer = self.policy(self, new)
        parts = [types.Part(text=answer)] if isinstance(answer, str) else answer
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1000, candidates_token_count=200
        )
        return LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)

    def returns(self, tool: str) -> list[dict[str, Any]]:
        """What the model read from ``tool``, in order."""
        return [dict(r.response or {}) for r in self.received if r.name == tool]


def call(tool: str, **args: Any) -> list[types.Part]:
    from google.genai import types

    return [types.Part(function_call=types.FunctionCall(name=tool, args=args))]


def agent_of(script: Script, tools: list[Any], name: str = "shop") -> LlmAgent:
    from google.adk.agents import LlmAgent
    from google_adk_parts import ScriptedModel

    model = ScriptedModel(model="scripted-model", script=script)
    return LlmAgent(name=name, model=model, instruction="You help shoppers.", tools=tools)


def run(agent: LlmAgent, plugin: ToolbreakerPlugin, prompt: str = "help me") -> list[Event]:
    """One invocation in a fresh in-memory runner; every event it yielded."""
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    async def main() -> list[Event]:
        runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[plugin]))
        try:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text=prompt)])
            return [
                event
                async for event in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                )
            ]
        finally:
            await runner.close()

    return asyncio.run(main())


def policy_error(fn: Callable[[], Any]) -> PolicyError:
    """The PolicyError a plugin raised: ADK's plugin manager re-raises it as RuntimeError."""
    with pytest.raises(RuntimeError, match="Error in plugin 'toolbreaker'") as raised:
        fn()
    cause = raised.value.__cause__
    assert isinstance(cause, PolicyError)
    return cause


def final_text(events: list[Event]) -> str:
    last = events[-1]
    assert last.content is not None
    return "".join(p.text or "" for p in last.content.parts or ())


class Shop:
    """The shop's tools over the real service; counts the tool bodies actually entered."""

    def __init__(self, service: ToolService) -> None:
        from google.adk.tools.function_tool import FunctionTool

        from toolbreaker.integrations.google_adk import tool_metadata

        self.ran: Counter[str] = Counter()
        self.keys: list[str] = []
        base = service.url

        async def search(q: str) -> dict[str, Any]:
            """Search the live catalog."""
            self.ran["search"] += 1
            return await fetch("GET", f"{base}/search?q={urllib.parse.quote(q)}")

        async def search_snapshot(q: str) -> dict[str, Any]:
            """Search yesterday's catalog snapshot."""
            self.ran["search_snapshot"] += 1
            return await fetch("GET", f"{base}/search_snapshot?q={urllib.parse.quote(q)}")

        async def order_status(order_id: str) -> dict[str, Any]:
            """Look an order up."""
            self.ran["order_status"] += 1
            return await fetch("GET", f"{base}/orders/{order_id}")

        async def create_ticket(
            customer: str, title: str, idempotency_key: str = ""
        ) -> dict[str, Any]:
            """Open a support ticket."""
            self.ran["create_ticket"] += 1
            self.keys.append(idempotency_key)
            body = {"title": title, "body": f"for {customer}"}
            headers = {"Idempotency-Key": idempotency_key}
            return await fetch("POST", f"{base}/tickets", body=body, headers=headers)

        ticket = FunctionTool(create_ticket)
        ticket.custom_metadata = tool_metadata(
            risk="reversible_write",
            dependency="tickets",
            operation="write",
            business_key=["customer", "title"],
        )
        self.tools: list[Any] = [search, search_snapshot, order_status, ticket]


# -- 1. the breaker opens on real 503s; the model switches to the fallback -------------------


def stubborn_then_fallback(script: Script, new: list[types.FunctionResponse]) -> Any:
    """Calls search three times whatever happens, then does what the last answer says."""
    queries = ["usb cable", "usb-c cable", "charging cable"]
    searches = len(script.returns("search"))
    if searches < 3:
        return call("search", q=queries[searches])
    answer = dict(new[0].response or {})
    if new[0].name == "search":
        return call(answer["fallback"], q="usb cable")
    return f"From the snapshot of {answer['as_of']}: {answer['results'][0]['name']}"


def test_open_breaker_skips_the_tool_and_the_model_uses_the_fallback(service):
    """Real HTTP 503s open the breaker; the next search never runs; the model reads
    tool_unavailable naming the fallback, calls it, and the run answers."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    service.outage("GET /search")
    registry = make_registry()
    shop = Shop(service)
    script = Script(stubborn_then_fallback)
    plugin = ToolbreakerPlugin(RunGuard("task-fallback"), registry=registry)

    events = run(agent_of(script, shop.tools), plugin, "find me a cable")

    assert shop.ran["search"] == 2  # the third search was answered without entering the tool
    assert service.hits["GET /search"] == 2
    first, opened, rejected = script.returns("search")
    assert first["ok"] is False
    assert first["retryable"] is True
    assert "503" in first["error"]
    assert "tool_unavailable" not in first
    assert opened["tool_unavailable"] is True  # the failure that opened it says so
    assert rejected["tool_unavailable"] is True
    assert rejected["fallback"] == "search_snapshot"
    assert 'Use "search_snapshot" instead' in rejected["instruction"]
    assert shop.ran["search_snapshot"] == 1
    assert final_text(events).startswith("From the snapshot of")
    breaker = registry.for_tool("search")
    assert breaker.state.phase == "open"
    assert breaker.stats.failures == {"http-503": 2}  # each call settled exactly once
    assert system_prompt_line() in script.instructions[0]


# -- 2. a 404 is the caller's mistake, not the dependency's ----------------------------------


def test_not_found_does_not_open_the_breaker(service):
    """Three 404s leave the breaker closed; the model is told a 404 is not worth retrying,
    and the fourth lookup (a real order) runs."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    def policy(script: Script, new: list[types.FunctionResponse]) -> Any:
        plan = ["Z-1", "Z-2", "Z-3", "A-1001"]
        if script.steps <= len(plan):
            return call("order_status", order_id=plan[script.steps - 1])
        return f"A-1001 is {dict(new[0].response or {})['status']}"

    registry = make_registry(threshold=2)
    shop = Shop(service)
    script = Script(policy)
    plugin = ToolbreakerPlugin(RunGuard("task-404"), registry=registry)

    events = run(agent_of(script, shop.tools), plugin, "where is my order?")

    assert final_text(events) == "A-1001 is shipped"
    assert shop.ran["order_status"] == 4
    missing = script.returns("order_status")[:3]
    assert all(m["ok"] is False and m["retryable"] is False for m in missing)
    assert all("HTTP Error 404" in m["error"] for m in missing)
    breaker = registry.for_tool("order_status")
    assert breaker.state.phase == "closed"
    assert breaker.stats.failures == {"http-404": 3}


def test_a_tool_that_raises_is_answered_not_fatal():
    """ADK ends a run when a tool raises and nothing answers the error: the plugin's
    on_tool_error_callback settles the failure and the model reads the guard's result."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    entered: Counter[str] = Counter()

    async def lookup(q: str) -> dict[str, Any]:
        """A read that breaks."""
        entered["lookup"] += 1
        raise ConnectionResetError("peer reset")

    def policy(script: Script, new: list[types.FunctionResponse]) -> Any:
        return call("lookup", q="x") if script.steps == 1 else "gave up"

    script = Script(policy)
    registry = Registry(Policy(failure_threshold=5))
    breaker = registry.get("lookup-api", tool="lookup")
    plugin = ToolbreakerPlugin(RunGuard("task-raise"), registry=registry)

    events = run(agent_of(script, [lookup]), plugin)

    assert final_text(events) == "gave up"
    (answer,) = script.returns("lookup")
    assert answer["ok"] is False
    assert answer["retryable"] is True
    assert "ConnectionResetError" in answer["error"]
    assert sum(breaker.stats.failures.values()) == 1
    assert breaker.stats.failures


# -- 3. a looping model is stopped through ADK's own stop path -------------------------------


def looping_tools(ran: Counter[str]) -> list[Any]:
    async def lookup(q: str) -> dict[str, Any]:
        """A read that always answers the same."""
        ran["lookup"] += 1
        return {"q": q, "hits": 0}

    async def refine(q: str) -> dict[str, Any]:
        """Another read that always answers the same."""
        ran["refine"] += 1
        return {"q": q, "suggestion": q}

    return [lookup, refine]


@pytest.mark.parametrize(
    ("plan", "condition"),
    [(["lookup"], "repeated-action"), (["lookup", "refine"], "loop")],
    ids=["same-action", "alternating"],
)
def test_a_looping_model_is_stopped_with_a_stop_packet(plan, condition):
    """The same call over and over (or two alternating) ends the run: the model is not
    asked again, the final event says why and carries the stop packet."""
    from toolbreaker.integrations.google_adk import STOP_KEY, ToolbreakerPlugin, stop_of

    ran: Counter[str] = Counter()
    script = Script(lambda s, _new: call(plan[(s.steps - 1) % len(plan)], q="renewal"))
    guard = RunGuard("task-loop", budget=Budget(max_repeats=2))

    events = run(agent_of(script, looping_tools(ran)), ToolbreakerPlugin(guard), "renew")

    packet = stop_of(events)
    assert packet is not None
    assert packet["schema"] == "toolbreaker.stop/v1"
    assert packet["condition"] == condition
    assert "looping" in packet["next_safe_action"]
    assert packet == guard.stop_packet().to_dict()
    last = events[-1]
    assert last.is_final_response()
    assert last.custom_metadata is not None
    assert last.custom_metadata[STOP_KEY] == packet
    assert final_text(events).startswith(f"Run stopped by toolbreaker ({condition})")
    calls = sum(len(e.get_function_calls()) for e in events)
    assert sum(ran.values()) == calls - 1  # the stopping call never ran
    assert script.steps == calls  # and the model was not asked after it
    assert stop_of(events[:-1]) is None


# -- 4. writes carry a stable idempotency key ------------------------------------------------


def test_a_write_gets_the_same_idempotency_key_on_retry_and_on_resume(service):
    """The key is derived by the guard (not the model), hidden from the declaration, the
    same on a retry and in a resumed run; a confirmed write is answered from the journal."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    registry = make_registry(threshold=3)
    journal = MemoryStore()
    shop = Shop(service)
    ticket = {"customer": "c-7", "title": "Refund A-1001"}

    def give_up_after_two(script: Script, new: list[types.FunctionResponse]) -> Any:
        if script.steps <= 2:  # the model even invents a key: the guard replaces it
            return call("create_ticket", **ticket, idempotency_key="made-up")
        return "the ticket service is failing, try later"

    first = Script(give_up_after_two)
    plugin = ToolbreakerPlugin(RunGuard("task-7", journal=journal), registry=registry)
    run(agent_of(first, shop.tools), plugin, "open a ticket")
    assert [r["retryable"] for r in first.returns("create_ticket")] == [True, True]
    assert "idempotency_key" not in first.schemas["create_ticket"]["properties"]
    assert set(first.schemas["create_ticket"]["properties"]) == {"customer", "title"}

    def twice(script: Script, new: list[types.FunctionResponse]) -> Any:
        if script.steps <= 2:  # the second call is a duplicate
            return call("create_ticket", **ticket)
        return f"ticket {dict(new[0].response or {})['id']}"

    for _resume in range(2):  # resumed runs: new guards, same task id, same journal
        resumed = Script(twice)
        plugin = ToolbreakerPlugin(RunGuard("task-7", journal=journal), registry=registry)
        assert final_text(run(agent_of(resumed, shop.tools), plugin, "resume")) == "ticket T-1"

    assert len(shop.keys) == 3  # two failed attempts, one success; duplicates never ran
    assert len(set(shop.keys)) == 1
    assert shop.keys[0].startswith("tb1-")
    created = service.created("tickets")
    assert len(created) == 1
    assert created[0]["idempotency_key"] == shop.keys[0]
    assert service.hits["POST /tickets"] == 3


def test_a_write_tool_must_let_the_guard_fill_its_key():
    """A write whose idempotency argument has no default is refused before the model is
    asked, naming the field."""
    from google.adk.tools.function_tool import FunctionTool

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, tool_metadata

    async def send(to: str, idempotency_key: str) -> str:
        """Send something."""
        return to  # pragma: no cover

    tool = FunctionTool(send)
    tool.custom_metadata = tool_metadata(risk="reversible_write")
    script = Script(lambda s, n: "-")
    error = policy_error(lambda: run(agent_of(script, [tool]), ToolbreakerPlugin(RunGuard("t"))))
    assert "give it a default" in str(error)
    assert error.field == "send.idempotency_key"
    assert script.steps == 0


# -- 5. one breaker per dependency, across agents and runs -----------------------------------


def test_two_agents_share_one_breaker_through_the_registry(service):
    """Agent A's failures open the search breaker; agent B (another app, its guard found by
    a factory from the invocation) is rejected without calling the service and falls back."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    service.outage("GET /search")
    registry = make_registry(threshold=2)

    def until_unavailable(script: Script, new: list[types.FunctionResponse]) -> Any:
        if not new:
            return call("search", q="usb cable")
        answer = dict(new[0].response or {})
        if answer.get("tool_unavailable") and new[0].name == "search":
            return call(answer["fallback"], q="usb cable")
        if new[0].name == "search":
            return call("search", q="usb cable")
        return f"{new[0].name}: {len(answer.get('results', []))} results"

    shop_a, shop_b = Shop(service), Shop(service)
    script_a = Script(until_unavailable)
    events = run(
        agent_of(script_a, shop_a.tools, "a"),
        ToolbreakerPlugin(RunGuard("task-a"), registry=registry),
    )
    assert final_text(events).startswith("search_snapshot")

    guards: dict[str, RunGuard] = {}

    def guard_for(context: Any) -> RunGuard:
        return guards.setdefault(context.invocation_id, RunGuard(f"task-b-{context.user_id}"))

    script_b = Script(until_unavailable)
    events = run(
        agent_of(script_b, shop_b.tools, "b"), ToolbreakerPlugin(guard_for, registry=registry)
    )

    assert final_text(events).startswith("search_snapshot")
    assert shop_a.ran["search"] == 2
    assert shop_b.ran["search"] == 0
    assert service.hits["GET /search"] == 2
    assert script_b.returns("search")[0]["reason"] == "open"
    (guard_b,) = guards.values()
    assert guard_b.task == "task-b-u"
    assert guard_b.state.calls == 2


def test_a_required_dependency_going_down_stops_the_run(service):
    """A tool marked required whose breaker opens ends the run (dependency-open), and the
    stop packet says to wait for the dependency and resume."""
    from google.adk.tools.function_tool import FunctionTool

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, stop_of, tool_metadata

    service.outage("GET /search")
    registry = make_registry(threshold=2)
    ran: Counter[str] = Counter()

    async def search(q: str) -> dict[str, Any]:
        """Search the live catalog (the run is useless without it)."""
        ran["search"] += 1
        return await fetch("GET", f"{service.url}/search?q={urllib.parse.quote(q)}")

    tool = FunctionTool(search)
    tool.custom_metadata = tool_metadata(dependency="catalog", required=True)
    script = Script(lambda s, new: call("search", q=f"cable {s.steps}"))
    guard = RunGuard("task-required")

    events = run(agent_of(script, [tool]), ToolbreakerPlugin(guard, registry=registry))

    packet = stop_of(events)
    assert packet is not None
    assert packet["condition"] == "dependency-open"
    assert "wait for the dependency" in packet["next_safe_action"]
    assert ran["search"] == 2
    assert script.steps == 2
    assert registry.get("catalog").tool == "search"  # named after the tool, no sheet row


# -- the breaker's deadline ------------------------------------------------------------------


def test_breaker_timeout_cuts_a_hung_tool_and_counts(service):
    """A hung async tool is cut at the breaker's timeout; two timeouts open the breaker
    and the third call is answered tool_unavailable without entering the tool."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    registry = Registry(Policy(failure_threshold=2), default_enforce="cooperative")
    registry.get("slow-api", tool="slow", timeout=0.05)
    entered: Counter[str] = Counter()

    async def slow() -> str:
        """Never answers."""
        entered["slow"] += 1
        await asyncio.Event().wait()
        return "never"  # pragma: no cover

    def policy(script: Script, new: list[types.FunctionResponse]) -> Any:
        return call("slow") if len(script.returns("slow")) < 3 else "gave up"

    script = Script(policy)
    events = run(agent_of(script, [slow]), ToolbreakerPlugin(RunGuard("t"), registry=registry))

    assert final_text(events) == "gave up"
    first, opened, rejected = script.returns("slow")
    assert first["error"].startswith("TimeoutError")
    assert first["retryable"] is True
    assert opened["tool_unavailable"] is True
    assert rejected["tool_unavailable"] is True
    assert entered["slow"] == 2
    assert registry.for_tool("slow").stats.failures == {"timeout": 2}


# -- a valid ADK tool, a misdescribed one, the model's usage, the extra ----------------------


def test_the_tools_stay_valid_adk_tools(service):
    """The model is offered every tool with its own name, description and schema (only a
    write's idempotency argument is left out), and each tool ADK runs is its own class."""
    from google.adk.tools.function_tool import FunctionTool

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    shop = Shop(service)
    plain = [FunctionTool(t) if not isinstance(t, FunctionTool) else t for t in shop.tools]
    declared = {t.name: t._get_declaration() for t in plain}
    offered: dict[str, Any] = {}

    def policy(script: Script, new: list[types.FunctionResponse]) -> Any:
        return "hi"

    script = Script(policy)

    class Spy(ToolbreakerPlugin):
        async def before_model_callback(self, *, callback_context, llm_request):
            answer = await super().before_model_callback(
                callback_context=callback_context, llm_request=llm_request
            )
            offered.update(llm_request.tools_dict)
            return answer

    run(agent_of(script, plain), Spy(RunGuard("t"), registry=make_registry()))

    assert set(offered) == set(declared) == set(script.schemas)
    for name, tool in offered.items():
        assert type(tool) is FunctionTool
        assert tool.name == name
        assert tool.description == declared[name].description
        schema = dict(declared[name].parameters_json_schema)
        if name == "create_ticket":
            del schema["properties"]["idempotency_key"]
        assert script.schemas[name] == schema


def test_misdescribed_tools_fail_with_the_field_named():
    """A typo in a tool's custom_metadata fails before the first model request."""
    from google.adk.tools.function_tool import FunctionTool

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    async def lookup(q: str) -> str:
        """Look up."""
        return q  # pragma: no cover

    tool = FunctionTool(lookup)
    tool.custom_metadata = {"toolbreaker": {"risky": "read"}}
    agent = agent_of(Script(lambda s, n: "-"), [tool])
    error = policy_error(lambda: run(agent, ToolbreakerPlugin(RunGuard("t"))))
    assert error.field == "lookup.custom_metadata.toolbreaker.risky"


def test_guard_factory_must_return_a_run_guard():
    """A factory that returns something else fails loudly at the first hook."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    plugin = ToolbreakerPlugin(lambda ctx: "oops")  # type: ignore[arg-type,return-value]
    error = policy_error(lambda: run(agent_of(Script(lambda s, n: "-"), []), plugin))
    assert "not a RunGuard" in str(error)


def test_model_usage_reads_the_responses_token_counts():
    """prompt tokens are the input; candidates and thinking tokens the output; a streamed
    chunk or a response without usage gives nothing."""
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    from toolbreaker.integrations.google_adk import ModelUsage, model_usage

    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=120, candidates_token_count=30, thoughts_token_count=12
    )
    response = LlmResponse(usage_metadata=usage, model_version="gemini-x-001")
    assert model_usage(response, "gemini-x") == ModelUsage("gemini-x", 120, 42)
    assert model_usage(response) == ModelUsage("gemini-x-001", 120, 42)
    assert model_usage(LlmResponse(usage_metadata=usage, partial=True), "m") is None
    assert model_usage(LlmResponse(), "m") is None


def test_the_models_usage_counts_against_the_runs_cost():
    """Each model response's usage (1000 prompt and 200 candidate tokens, as the scripted
    model reports) is priced from the budget's price table into the run's cost: the stop
    packet's counters show the model's part, per model, and max_cost stops the run."""
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, stop_of

    ran: Counter[str] = Counter()
    script = Script(lambda s, _new: call("lookup", q=f"renewal {s.steps}"))
    prices = {"scripted-*": ModelPrice("2.50", "10")}  # 0.0025 + 0.002 = 0.0045 a response
    guard = RunGuard("task-cost", budget=Budget(max_cost="0.01", prices=prices))

    events = run(agent_of(script, looping_tools(ran)), ToolbreakerPlugin(guard), "renew")

    packet = stop_of(events)
    assert packet is not None
    assert packet["condition"] == "max-cost"
    assert script.models[0] == "scripted-model"
    counters = packet["counters"]
    assert counters["model_cost"] == "0.0135"  # three responses, the third over the limit
    assert counters["usage"] == [
        {
            "model": "scripted-model",
            "input_tokens": 3000,
            "output_tokens": 600,
            "requests": 3,
            "cost": "0.0135",
        }
    ]
    assert ran["lookup"] == 2  # the call of the response that spent the budget never ran


def test_missing_extra_names_what_to_install(monkeypatch):
    """Without google-adk installed the adapter's import error says which extra to add."""
    monkeypatch.setitem(sys.modules, "google.adk", None)
    monkeypatch.delitem(sys.modules, "toolbreaker.integrations.google_adk")
    with pytest.raises(ImportError, match=r"toolbreaker\[google-adk\]"):
        importlib.import_module("toolbreaker.integrations.google_adk")


def test_a_write_in_flight_when_the_run_is_cancelled_is_recorded_and_never_replayed():
    """The caller cancels the invocation while a write runs: the plugin records the
    cancellation (not a failure), the journal keeps the write as not confirmed, and a
    resumed run asking for it again is refused rather than sending it twice."""
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.function_tool import FunctionTool
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, tool_metadata

    journal = MemoryStore()
    entered = asyncio.Event()
    sent: list[str] = []

    async def pay(order_id: str, idempotency_key: str = "") -> dict[str, Any]:
        """Charge an order."""
        sent.append(idempotency_key)
        entered.set()
        await asyncio.Event().wait()  # the provider never answers
        return {"paid": order_id}  # pragma: no cover

    tool = FunctionTool(pay)
    tool.custom_metadata = tool_metadata(risk="reversible_write", business_key=["order_id"])

    def policy(script: Script, new: list[types.FunctionResponse]) -> Any:
        return call("pay", order_id="A-1") if script.steps == 1 else "done"

    async def cancelled_run(guard: RunGuard) -> list[Event]:
        runner = InMemoryRunner(
            app=App(
                name="shop",
                root_agent=agent_of(Script(policy), [tool]),
                plugins=[ToolbreakerPlugin(guard)],
            )
        )
        seen: list[Event] = []
        try:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="pay")])

            async def consume() -> None:
                async for event in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                ):
                    seen.append(event)

            task = asyncio.create_task(consume())
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await runner.close()
        return seen

    guard = RunGuard("task-cancel", journal=journal)
    asyncio.run(cancelled_run(guard))
    ((entry),) = journal.journal_entries("task-cancel")
    assert entry["status"] == "pending"  # may have been sent: to reconcile, never resent
    outcome = guard.turn_outcome()
    assert outcome is not None
    assert outcome["pay"].status == "cancelled"
    assert outcome["pay"].reason == "CancelledError"  # settled as cancelled, not "running"
    assert len(sent) == 1

    resumed = RunGuard("task-cancel", journal=journal)
    script = Script(policy)
    events = run(agent_of(script, [tool]), ToolbreakerPlugin(resumed))
    assert final_text(events) == "done"
    (answer,) = script.returns("pay")
    assert answer["outcome_unknown"] is True  # refused: its outcome is not known
    assert answer["idempotency_key"] == sent[0]
    assert len(sent) == 1  # never sent again


def test_a_tools_risk_may_be_a_function_of_its_arguments():
    """Issue 33: ``tool_metadata(risk=shell_risk_of("command"))`` describes one shell tool
    whose calls differ: ``cat`` is counted a read, ``sed -i`` a write, inside the real
    runner."""
    from google.adk.tools.function_tool import FunctionTool

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, tool_metadata

    commands = ["cat calc.py", "sed -i 's/-/+/' calc.py"]
    ran: list[str] = []

    async def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "ok"

    tool = FunctionTool(bash)
    tool.custom_metadata = tool_metadata(risk=shell_risk_of("command"), idempotency_arg=None)

    def plan(script: Script, _new: list[types.FunctionResponse]) -> Any:
        if script.steps <= len(commands):
            return call("bash", command=commands[script.steps - 1])
        return "fixed"

    guard = RunGuard("fix-issue")
    run(agent_of(Script(plan), [tool]), ToolbreakerPlugin(guard))
    assert ran == commands
    assert dict(guard.state.class_calls) == {"read": 1, "reversible_write": 1, "irreversible": 0}
