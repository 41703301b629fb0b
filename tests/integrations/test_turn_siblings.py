"""Sibling tool calls inside the framework adapters (issue 12), with their offline models.

One model response issues three calls at once, and the framework runs them in parallel:
``order_status`` needs the *required* dependency ``helpdesk`` and opens its breaker on a
real 503; a second helpdesk call (``list_tickets``, or the write ``open_ticket``) is in
flight on the real local service when that happens; ``search`` needs only the catalog.
The call in flight is cancelled by policy (the task running it is cancelled), ``search``
completes with its real result, and the caller gets the turn as a bounded partial
outcome listing all three. The run still stops before the model issues more calls.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from toolbreaker import Policy, Registry, RunGuard, SiblingOutcome
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService

PATIENCE = 20.0
#: The breakers' deadline: far longer than the test needs, so only the policy cancels.
DEADLINE = 15.0
CANCELLED = "required dependency 'helpdesk' opened"


def make_registry() -> Registry:
    registry = Registry(
        Policy(failure_threshold=1), default_timeout=DEADLINE, default_enforce="cooperative"
    )
    registry.get("helpdesk", tool="order_status")
    registry.get("catalog", tool="search")
    return registry


async def until(condition: Callable[[], bool]) -> None:
    """Bounded polling: never a timed assertion."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.005)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


class Tools:
    """The three tool bodies, against the real service; records what they lived through."""

    def __init__(self, service: ToolService, registry: Registry, *, calm: bool = False) -> None:
        self.service = service
        self.calm = calm
        self.helpdesk = registry.get("helpdesk")
        self.cancelled: list[str] = []
        self.finished: list[str] = []

    async def _request(self, name: str, method: str, path: str, **kwargs: Any) -> Any:
        try:
            async with httpx.AsyncClient(base_url=self.service.url, timeout=30) as client:
                reply = await client.request(method, path, **kwargs)
                reply.raise_for_status()
                self.finished.append(name)
                return reply.json()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise

    async def order_status(self, order_id: str, sibling: str) -> Any:
        # Fails (503) only once the sibling's request is in flight at the service.
        await until(lambda: self.service.hits.get(sibling, 0) >= 1)
        return await self._request("order_status", "GET", f"/orders/{order_id}")

    async def list_tickets(self) -> Any:
        return await self._request("list_tickets", "GET", "/tickets")

    async def open_ticket(self, title: str, idempotency_key: str = "") -> Any:
        body = {"title": title, "body": "from the agent"}
        headers = {"Idempotency-Key": idempotency_key}
        return await self._request("open_ticket", "POST", "/tickets", json=body, headers=headers)

    # The same bodies for frameworks that run sync tools in threads.

    def _sync_request(self, name: str, method: str, path: str) -> Any:
        reply = httpx.request(method, self.service.url + path, timeout=30)
        reply.raise_for_status()
        self.finished.append(name)
        return reply.json()

    def sync_order_status(self, order_id: str, sibling: str) -> Any:
        wait_until(lambda: self.service.hits.get(sibling, 0) >= 1)
        return self._sync_request("order_status", "GET", f"/orders/{order_id}")

    def sync_list_tickets(self) -> Any:
        return self._sync_request("list_tickets", "GET", "/tickets")

    def sync_search(self, q: str) -> Any:
        wait_until(lambda: self.helpdesk.state.phase == "open")
        return self._sync_request("search", "GET", f"/search?q={urllib.parse.quote(q)}")

    async def search(self, q: str) -> Any:
        if not self.calm:
            # Finishes after the opening: an independent call is not cancelled by it.
            await until(lambda: self.helpdesk.state.phase == "open")
        return await self._request("search", "GET", f"/search?q={urllib.parse.quote(q)}")


def arrange(service: ToolService, *, write: bool) -> str:
    """The service's faults; returns the route of the helpdesk call left in flight."""
    service.outage("GET /orders")
    route = "POST /tickets" if write else "GET /tickets"
    service.inject(route, Fault(delay=30))  # in flight until the service stops
    return route


def three_calls(service: ToolService, sibling: str) -> list[tuple[str, dict[str, Any]]]:
    """The service's faults arranged, and the turn's three calls: ``order_status`` (its
    failure opens the required ``helpdesk``), ``sibling`` (needs ``helpdesk``; in flight
    when it opens: ``list_tickets``, or the write ``open_ticket``) and ``search``."""
    write = sibling == "open_ticket"
    route = arrange(service, write=write)
    args: dict[str, Any] = {"title": "Refund A-1001"} if write else {}
    return [
        ("order_status", {"order_id": "A-1001", "sibling": route}),
        (sibling, args),
        ("search", {"q": "usb cable"}),
    ]


def check_unknown_write(
    turn: SiblingOutcome | None, journal: Any, task: str, uncertain: Any
) -> str:
    """The write cancelled in flight: an unknown outcome, journaled and in the stop packet's
    uncertain work; returns its idempotency key."""
    check_turn(turn, "open_ticket")
    assert turn is not None
    assert "unknown" in turn["open_ticket"].reason
    answer = turn["open_ticket"].result
    check_cancelled_answer(answer, "open_ticket")
    assert answer["outcome_unknown"] is True
    key: str = answer["idempotency_key"]
    assert journal.journal_get(task, key)["status"] == "unknown"
    assert [u["idempotency_key"] for u in uncertain] == [key]
    return key


def check_never_replayed(service: ToolService) -> None:
    """The write reached the service once (the call cancelled in flight), never again."""
    assert service.hits["POST /tickets"] == 1
    assert service.created("tickets") == []


def check_turn(turn: SiblingOutcome | None, sibling: str) -> None:
    """The outcome the caller gets lists all three calls, each with how it ended."""
    assert turn is not None
    # In the order the calls began (threads may begin in any order).
    assert sorted(b.name for b in turn.branches) == sorted(["order_status", sibling, "search"])
    assert turn.completed == ("search",)
    assert turn["search"].result["query"] == "usb cable"
    assert turn["search"].result["results"]  # the real result
    assert turn.degraded == ("order_status",)  # its failure opened the breaker
    assert turn.cancelled == (sibling,)
    assert turn[sibling].reason.startswith(CANCELLED)
    result = turn.to_result()
    assert result["partial"] is True
    assert set(result["results"]) == {"search"}
    assert {m["branch"] for m in result["missing"]} == {"order_status", sibling}


def check_cancelled_answer(answer: dict[str, Any], tool: str) -> None:
    assert answer["ok"] is False
    assert answer["cancelled"] is True
    assert answer["tool"] == tool
    assert answer["dependency"] == "helpdesk"
    assert answer["reason"] == "required-dependency-opened"
    assert "cancelled by policy" in answer["instruction"]
    assert "do not estimate or invent its data" in answer["instruction"]


def no_other_task() -> bool:
    return all(t is asyncio.current_task() or t.done() for t in asyncio.all_tasks())


# -- Pydantic AI ------------------------------------------------------------------------------


def _pydantic_run(
    service: ToolService,
    registry: Registry,
    guard: RunGuard,
    first_turn: list[tuple[str, dict[str, Any]]],
    *,
    calm: bool = False,
) -> tuple[Any, Tools, list[list[Any]]]:
    """Run a Pydantic AI agent whose first response issues ``first_turn`` at once."""
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    tools = Tools(service, registry, calm=calm)
    read: list[list[Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        read.append([(p.tool_name, p.content) for p in returns])
        if len(read) == 1:
            return ModelResponse(parts=[ToolCallPart(t, a) for t, a in first_turn])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))
    helpdesk = tool_metadata(dependency="helpdesk", required=True)
    agent.tool_plain(metadata=helpdesk)(tools.order_status)
    agent.tool_plain(metadata=tool_metadata(dependency="helpdesk"))(tools.list_tickets)
    agent.tool_plain(
        metadata=tool_metadata(
            risk="reversible_write", dependency="helpdesk", business_key=["title"]
        )
    )(tools.open_ticket)
    agent.tool_plain(metadata=tool_metadata(dependency="catalog"))(tools.search)
    capability = ToolbreakerCapability(guard, registry=registry)

    async def main() -> Any:
        try:
            outcome: Any = await agent.run("go", capabilities=[capability])
        except RunCancelled as exc:
            outcome = exc
        assert no_other_task()  # structured: nothing outlives the turn
        return outcome

    return asyncio.run(main()), tools, read


def test_pydantic_ai_cancels_only_the_sibling_that_needs_the_opened_dependency(service):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import ModelRequest, ToolReturnPart

    from toolbreaker.integrations.pydantic_ai import run_stop

    registry = make_registry()
    guard = RunGuard("pydantic-siblings")
    turn = three_calls(service, "list_tickets")
    outcome, tools, read = _pydantic_run(service, registry, guard, turn)

    assert isinstance(outcome, RunCancelled)  # the stop still ends the run ...
    assert len(read) == 1  # ... before the model is asked for more calls
    stop = run_stop(outcome, guard)
    assert stop is not None
    assert stop.packet.condition == "dependency-open"
    check_turn(stop.turn, "list_tickets")
    assert tools.cancelled == ["list_tickets"]  # the task running it was cancelled
    assert sorted(tools.finished) == ["search"]
    # The history the caller resumes from holds all three answers, the policy's included.
    returns = {
        p.tool_name: p
        for m in stop.messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert set(returns) == {"order_status", "list_tickets", "search"}
    check_cancelled_answer(json.loads(str(returns["list_tickets"].content)), "list_tickets")
    assert returns["search"].content["results"]


def test_pydantic_ai_a_write_cancelled_in_flight_is_unknown_and_never_replayed(service):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import RunCancelled

    from toolbreaker.integrations.pydantic_ai import run_stop

    registry = make_registry()
    journal = MemoryStore()
    guard = RunGuard("pydantic-write", journal=journal)
    turn = three_calls(service, "open_ticket")
    outcome, tools, _ = _pydantic_run(service, registry, guard, turn)

    assert isinstance(outcome, RunCancelled)
    stop = run_stop(outcome, guard)
    assert stop is not None
    check_unknown_write(stop.turn, journal, "pydantic-write", stop.packet.uncertain)
    assert tools.cancelled == ["open_ticket"]

    # A resumed run asking for the same write is answered from the journal: never replayed.
    resumed = RunGuard("pydantic-write", journal=journal)
    again, tools, read = _pydantic_run(
        service, registry, resumed, [("open_ticket", {"title": "Refund A-1001"})]
    )
    assert not isinstance(again, RunCancelled)
    ((name, content),) = read[1]
    assert name == "open_ticket"
    assert json.loads(str(content))["outcome_unknown"] is True
    assert tools.cancelled == tools.finished == []
    check_never_replayed(service)


def test_pydantic_ai_a_turn_where_nothing_opens_is_unchanged(service):
    pytest.importorskip("pydantic_ai")
    registry = make_registry()
    guard = RunGuard("pydantic-calm")
    service.inject("GET /tickets", Fault(delay=0.2))
    turn = [("list_tickets", {}), ("search", {"q": "usb cable"})]
    outcome, tools, read = _pydantic_run(service, registry, guard, turn, calm=True)
    assert outcome.output == "done"
    assert sorted(tools.finished) == ["list_tickets", "search"]
    assert [name for name, _ in read[1]] == ["list_tickets", "search"]
    outcome = guard.turn_outcome()
    assert outcome is not None
    assert outcome.complete
    assert outcome.to_result()["partial"] is False
    assert guard.stopped is None


# -- LangChain / LangGraph ToolNode --------------------------------------------------------------


def _langchain_agent(
    tools: Tools, registry: Registry, first_turn: list[tuple[str, Any]], middleware: Any = None
) -> Any:
    """``create_agent`` with the middleware; its fake model issues ``first_turn`` at once."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

    calls = [{"name": t, "args": a, "id": f"call-{n}"} for n, (t, a) in enumerate(first_turn)]
    model = Model(messages=iter([AIMessage("", tool_calls=calls), AIMessage("done")]))
    options: dict[str, Any] = {
        "order_status": {"dependency": "helpdesk", "required": True},
        "list_tickets": {"dependency": "helpdesk"},
        "open_ticket": {
            "dependency": "helpdesk",
            "risk": "reversible_write",
            "business_key": ["title"],
        },
        "search": {"dependency": "catalog"},
    }
    if middleware is None:
        middleware = ToolbreakerMiddleware(registry=registry, tools=options)
    made = [
        StructuredTool.from_function(
            func=getattr(tools, f"sync_{name}", None),
            coroutine=getattr(tools, name),
            name=name,
            description=name,
        )
        for name in options
    ]
    return create_agent(model, made, middleware=[middleware]), middleware


def check_langchain(out: dict[str, Any], sibling: str) -> dict[str, Any]:
    from langchain_core.messages import ToolMessage

    from toolbreaker.integrations._langchain_messages import TURN_KEY
    from toolbreaker.integrations.langchain import STOP_KEY

    replies = {m.name: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert set(replies) == {"order_status", sibling, "search"}
    assert replies[sibling].status == "error"
    check_cancelled_answer(json.loads(replies[sibling].content), sibling)
    assert json.loads(replies["search"].content)["results"]  # the real result
    assert out[STOP_KEY]["condition"] == "dependency-open"  # the run stopped ...
    assert out["messages"][-1].additional_kwargs[STOP_KEY]["condition"] == "dependency-open"
    turn = out[TURN_KEY]  # ... with the turn as a bounded partial outcome
    assert set(turn["results"]) == {"search"}
    assert {(m["branch"], m["status"]) for m in turn["missing"]} == {
        ("order_status", "degraded"),
        (sibling, "cancelled"),
    }
    return turn


def test_langchain_async_cancels_only_the_sibling_that_needs_the_opened_dependency(service):
    pytest.importorskip("langchain")
    registry = make_registry()
    tools = Tools(service, registry)
    first_turn = three_calls(service, "list_tickets")
    agent, middleware = _langchain_agent(tools, registry, first_turn)

    async def main() -> Any:
        out = await agent.ainvoke(
            {"messages": [("user", "go")]}, context={"task_id": "langchain-async"}
        )
        assert no_other_task()  # structured: nothing outlives the turn
        return out

    out = asyncio.run(main())
    check_langchain(out, "list_tickets")
    assert tools.cancelled == ["list_tickets"]  # the task running it was cancelled
    assert tools.finished == ["search"]
    outcome = middleware.guard_for("langchain-async").turn_outcome()
    check_turn(outcome, "list_tickets")
    assert [m for m in out["messages"] if m.type == "ai"][-1].content.startswith("Run stopped")


def test_langchain_a_write_cancelled_in_flight_is_unknown_and_never_replayed(service):
    pytest.importorskip("langchain")
    registry = make_registry()
    tools = Tools(service, registry)
    first_turn = three_calls(service, "open_ticket")
    agent, middleware = _langchain_agent(tools, registry, first_turn)
    out = asyncio.run(
        agent.ainvoke({"messages": [("user", "go")]}, context={"task_id": "langchain-write"})
    )
    check_langchain(out, "open_ticket")
    assert tools.cancelled == ["open_ticket"]
    guard = middleware.guard_for("langchain-write")
    answer = guard.turn_outcome()["open_ticket"].result
    assert answer["outcome_unknown"] is True
    key = answer["idempotency_key"]
    assert middleware.journal.journal_get("langchain-write", key)["status"] == "unknown"

    # A new run of the task asks for the write again: answered, never replayed.
    middleware.forget("langchain-write")
    again, _ = _langchain_agent(
        tools, registry, [("open_ticket", {"title": "Refund A-1001"})], middleware
    )
    out = asyncio.run(
        again.ainvoke({"messages": [("user", "go")]}, context={"task_id": "langchain-write"})
    )
    (reply,) = [m for m in out["messages"] if m.type == "tool"]
    assert json.loads(reply.content)["outcome_unknown"] is True
    check_never_replayed(service)


def test_langchain_sync_abandons_the_sibling_that_needs_the_opened_dependency(service):
    """ToolNode runs sync tools in threads: the call in flight is abandoned (a thread
    cannot be interrupted), its result discarded; the independent one completes."""
    pytest.importorskip("langchain")
    registry = make_registry()
    tools = Tools(service, registry)
    first_turn = three_calls(service, "list_tickets")
    agent, middleware = _langchain_agent(tools, registry, first_turn)
    out = agent.invoke({"messages": [("user", "go")]}, context={"task_id": "langchain-sync"})
    check_langchain(out, "list_tickets")
    assert "list_tickets" not in tools.finished  # abandoned: its result never arrived
    check_turn(middleware.guard_for("langchain-sync").turn_outcome(), "list_tickets")


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


def _outputs(call: Any) -> dict[str, Any]:
    """The function-call outputs the scripted model was sent, by call id."""
    import ast

    found: dict[str, Any] = {}
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            text = item["output"]
            try:
                found[item["call_id"]] = json.loads(text)
            except ValueError:
                found[item["call_id"]] = ast.literal_eval(text)
    return found


def test_openai_agents_cancels_only_the_sibling_that_needs_the_opened_dependency(service):
    pytest.importorskip("agents")
    from agents import ToolInputGuardrailTripwireTriggered

    registry = make_registry()
    guard = RunGuard("agents-siblings")
    stopped, tools, read = _agents_run(
        service, registry, guard, three_calls(service, "list_tickets")
    )

    # The run stops before the model is asked again, with the stop packet.
    assert isinstance(stopped, ToolInputGuardrailTripwireTriggered)
    assert stopped.output.output_info["condition"] == "dependency-open"
    assert read == []  # the model was not asked for more calls
    outcome = guard.turn_outcome()  # the turn's bounded partial outcome, all three calls
    check_turn(outcome, "list_tickets")
    check_cancelled_answer(outcome["list_tickets"].result, "list_tickets")
    assert outcome["order_status"].result["tool_unavailable"] is True
    assert outcome["search"].result["results"]  # the real result
    assert tools.cancelled == ["list_tickets"]  # the task running it was cancelled
    assert tools.finished == ["search"]
    assert guard.stopped is not None
    assert guard.stopped.condition == "dependency-open"


def _agents_run(
    service: ToolService,
    registry: Registry,
    guard: RunGuard,
    first_turn: list[tuple[str, dict[str, Any]]],
) -> tuple[Any, Tools, list[dict[str, Any]]]:
    """Run an OpenAI Agents SDK agent whose first response issues ``first_turn`` at once."""
    from agents import (
        Agent,
        Runner,
        ToolInputGuardrailTripwireTriggered,
        function_tool,
        set_tracing_disabled,
    )
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
    from agents.testing import function_call as fcall

    from toolbreaker.integrations.openai_agents import protect, run_config

    set_tracing_disabled(True)
    tools = Tools(service, registry)

    @function_tool
    async def order_status(order_id: str, sibling: str) -> Any:
        """Look an order up."""
        return await tools.order_status(order_id, sibling)

    @function_tool
    async def list_tickets() -> Any:
        """List the support tickets."""
        return await tools.list_tickets()

    @function_tool
    async def open_ticket(title: str, idempotency_key: str = "") -> Any:
        """Open a support ticket."""
        return await tools.open_ticket(title, idempotency_key)

    @function_tool
    async def search(q: str) -> Any:
        """Search the catalog."""
        return await tools.search(q)

    read: list[dict[str, Any]] = []

    def last_turn(call: ModelCall) -> list[Any]:
        read.append(_outputs(call))
        return [assistant_message("done")]

    steps = [
        [fcall(t, a, call_id=f"c-{t}") for t, a in first_turn],
        ModelStep.respond(last_turn),
    ]
    guard.ensure_tool("order_status", required=True)
    guard.ensure_tool("open_ticket", risk="reversible_write", business_key=("title",))
    helpdesk = registry.get("helpdesk")
    breakers = {
        "order_status": helpdesk,
        "list_tickets": helpdesk,
        "open_ticket": helpdesk,
        "search": registry.get("catalog"),
    }
    agent = protect(
        Agent(
            name="desk",
            model=ScriptedModel(steps),
            tools=[order_status, list_tickets, open_ticket, search],
        ),
        guard=guard,
        breakers=breakers,
    )

    async def main() -> Any:
        try:
            return await Runner.run(agent, "go", run_config=run_config())
        except ToolInputGuardrailTripwireTriggered as stopped:
            return stopped  # the run stopped before the model was asked again
        finally:
            assert no_other_task()  # structured: nothing outlives the turn

    return asyncio.run(main()), tools, read


def test_openai_agents_a_write_cancelled_in_flight_is_unknown_and_never_replayed(service):
    pytest.importorskip("agents")
    registry = make_registry()
    journal = MemoryStore()
    guard = RunGuard("agents-write", journal=journal)
    turn = three_calls(service, "open_ticket")
    stopped, tools, read = _agents_run(service, registry, guard, turn)

    assert stopped.output.output_info["condition"] == "dependency-open"
    assert read == []  # the run stopped before the model was asked again
    assert tools.cancelled == ["open_ticket"]  # the task running it was cancelled
    assert tools.finished == ["search"]
    assert guard.stopped is not None
    key = check_unknown_write(
        guard.turn_outcome(), journal, "agents-write", guard.stop_packet().uncertain
    )

    # A resumed run asking for the same write is reconciled (a read-only status check
    # against the real service), answered, and never replayed.
    checked: list[str] = []

    def reconcile(key: str, args: Any) -> Any:
        checked.append(key)
        reply = httpx.get(service.url + "/tickets", params={"idempotency_key": key}, timeout=30)
        reply.raise_for_status()
        return reply.json()["tickets"]

    resumed = RunGuard("agents-write", journal=journal)
    resumed.ensure_tool(
        "open_ticket", risk="reversible_write", business_key=("title",), reconcile=reconcile
    )
    again, tools, read = _agents_run(
        service, registry, resumed, [("open_ticket", {"title": "Refund A-1001"})]
    )
    assert again.final_output == "done"
    (outputs,) = read
    assert outputs["c-open_ticket"]["outcome_unknown"] is True
    assert outputs["c-open_ticket"]["idempotency_key"] == key
    assert outputs["c-open_ticket"]["reconciled"] is None  # checked: not found
    assert "status check did not find the write" in outputs["c-open_ticket"]["instruction"]
    assert checked == [key]
    assert journal.journal_get("agents-write", key)["status"] == "reconciled-absent"
    assert tools.cancelled == tools.finished == []
    check_never_replayed(service)


# -- LlamaIndex agent workflow ---------------------------------------------------------------------

#: The workflows package walks an agent's attributes (pydantic's deprecated ones too).
_LLAMA_WARNINGS = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")


def _llama_run(
    service: ToolService,
    registry: Registry,
    guard: RunGuard,
    first_turn: list[tuple[str, dict[str, Any]]],
    *,
    calm: bool = False,
) -> tuple[Any, Tools, list[list[Any]], list[Any]]:
    """A protected FunctionAgent whose first response issues ``first_turn`` at once; the
    workflow's call_tool step runs them in parallel. Returns its result, the tools, what
    the model read at each request and the run's memory."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    from toolbreaker.integrations.llama_index import protect

    tools = Tools(service, registry, calm=calm)
    read: list[list[Any]] = []

    def model(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        read.append([m for m in messages if m.role == MessageRole.TOOL])
        if len(read) == 1:
            blocks = [
                ToolCallBlock(tool_call_id=f"call-{n}", tool_name=t, tool_kwargs=a)
                for n, (t, a) in enumerate(first_turn)
            ]
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    helpdesk, catalog = registry.get("helpdesk"), registry.get("catalog")
    guard.ensure_tool("order_status", breaker=helpdesk, required=True)
    guard.ensure_tool("list_tickets", breaker=helpdesk)
    guard.ensure_tool(
        "open_ticket", breaker=helpdesk, risk="reversible_write", business_key=("title",)
    )
    guard.ensure_tool("search", breaker=catalog)
    made = [
        FunctionTool.from_defaults(getattr(tools, name))
        for name in ("order_status", "list_tickets", "open_ticket", "search")
    ]
    agent = FunctionAgent(tools=made, llm=MockFunctionCallingLLM(response_generator=model))
    guarded = protect(agent, guard=guard, registry=registry)

    async def main() -> tuple[Any, list[Any]]:
        handler = guarded.run(user_msg="go")
        result = await handler
        memory = await handler.ctx.store.get("memory")
        assert no_other_task()  # structured: nothing outlives the turn
        return result, await memory.aget()

    result, history = asyncio.run(main())
    return result, tools, read, history


@_LLAMA_WARNINGS
def test_llama_index_cancels_only_the_sibling_that_needs_the_opened_dependency(service):
    pytest.importorskip("llama_index.core")
    from toolbreaker.integrations.llama_index import STOP_KEY, TURN_KEY, run_stop

    registry = make_registry()
    guard = RunGuard("llama-siblings")
    turn = three_calls(service, "list_tickets")
    result, tools, read, history = _llama_run(service, registry, guard, turn)

    assert len(read) == 1  # the stop ends the run before the model is asked again
    stop = run_stop(result, guard)
    assert stop is not None
    assert stop.packet.condition == "dependency-open"
    assert result.response.additional_kwargs[STOP_KEY]["condition"] == "dependency-open"
    assert set(result.response.additional_kwargs[TURN_KEY]["results"]) == {"search"}
    check_turn(stop.turn, "list_tickets")
    assert tools.cancelled == ["list_tickets"]  # the task running it was cancelled
    assert tools.finished == ["search"]
    # The run's memory (what a resumed conversation starts from) holds all three answers.
    answers = {m.additional_kwargs["tool_call_id"]: m.content for m in history if m.role == "tool"}
    assert set(answers) == {"call-0", "call-1", "call-2"}
    check_cancelled_answer(json.loads(answers["call-1"]), "list_tickets")


@_LLAMA_WARNINGS
def test_llama_index_a_write_cancelled_in_flight_is_unknown_and_never_replayed(service):
    pytest.importorskip("llama_index.core")
    from toolbreaker.integrations.llama_index import run_stop

    registry = make_registry()
    journal = MemoryStore()
    guard = RunGuard("llama-write", journal=journal)
    turn = three_calls(service, "open_ticket")
    result, tools, _, _ = _llama_run(service, registry, guard, turn)

    stop = run_stop(result, guard)
    assert stop is not None
    check_unknown_write(stop.turn, journal, "llama-write", stop.packet.uncertain)
    assert tools.cancelled == ["open_ticket"]

    # A resumed run asking for the same write is answered from the journal: never replayed.
    resumed = RunGuard("llama-write", journal=journal)
    again, tools, read, _ = _llama_run(
        service, registry, resumed, [("open_ticket", {"title": "Refund A-1001"})]
    )
    assert run_stop(again, resumed) is None
    (reply,) = read[1]
    assert json.loads(reply.content)["outcome_unknown"] is True
    assert tools.cancelled == tools.finished == []
    check_never_replayed(service)


@_LLAMA_WARNINGS
def test_llama_index_a_turn_where_nothing_opens_is_unchanged(service):
    pytest.importorskip("llama_index.core")
    registry = make_registry()
    guard = RunGuard("llama-calm")
    service.inject("GET /tickets", Fault(delay=0.2))
    turn = [("list_tickets", {}), ("search", {"q": "usb cable"})]
    result, tools, _, _ = _llama_run(service, registry, guard, turn, calm=True)
    assert result.response.content == "done"
    assert sorted(tools.finished) == ["list_tickets", "search"]


# -- Pydantic AI: a response that also ends the run ----------------------------------------------
#
# The stop is normally applied before the next model request; a response that also carries
# the run's final result (an output tool call) never reaches one. The run must still end as
# a stopped run (``RunCancelled``, which ``run_stop`` pairs with the stop packet and the
# turn's outcome): the output is never presented as a normal completion, and an output
# function (which may act) never runs on a stopped run.


def _pydantic_final_run(
    service: ToolService,
    registry: Registry,
    guard: RunGuard,
    *,
    end_strategy: str = "graceful",
    output_function: bool = False,
) -> tuple[Any, Tools, list[str]]:
    from pydantic import BaseModel
    from pydantic_ai import Agent, ToolOutput
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, tool_metadata

    route = arrange(service, write=False)
    tools = Tools(service, registry)
    acted: list[str] = []
    asked: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        output = info.output_tools[0].name
        return ModelResponse(
            parts=[
                ToolCallPart("order_status", {"order_id": "A-1001", "sibling": route}),
                ToolCallPart("list_tickets", {}),
                ToolCallPart("search", {"q": "usb cable"}),
                ToolCallPart(output, {"summary": "all good"}),
            ]
        )

    class Answer(BaseModel):
        summary: str

    def send(summary: str) -> dict[str, str]:
        """Send the answer to the customer (an output function that acts)."""
        acted.append(summary)
        return {"summary": summary}

    output: Any = ToolOutput(send if output_function else Answer)
    agent: Agent[Any, Any] = Agent(
        FunctionModel(model), output_type=output, end_strategy=end_strategy
    )
    agent.tool_plain(metadata=tool_metadata(dependency="helpdesk", required=True))(
        tools.order_status
    )
    agent.tool_plain(metadata=tool_metadata(dependency="helpdesk"))(tools.list_tickets)
    agent.tool_plain(metadata=tool_metadata(dependency="catalog"))(tools.search)
    capability = ToolbreakerCapability(guard, registry=registry)

    async def main() -> Any:
        try:
            outcome: Any = await agent.run("go", capabilities=[capability])
        except RunCancelled as exc:
            outcome = exc
        assert no_other_task()
        return outcome

    outcome = asyncio.run(main())
    assert asked == [1]  # one model response: the model was never asked again
    return outcome, tools, acted


@pytest.mark.parametrize("end_strategy", ["graceful", "exhaustive"])
def test_pydantic_ai_a_response_that_ends_the_run_still_ends_as_a_stopped_run(
    service, end_strategy
):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import ModelRequest, ToolReturnPart

    from toolbreaker.integrations.pydantic_ai import run_stop

    registry = make_registry()
    guard = RunGuard(f"pydantic-final-{end_strategy}")
    outcome, tools, _ = _pydantic_final_run(service, registry, guard, end_strategy=end_strategy)

    assert isinstance(outcome, RunCancelled), f"a stopped run completed: {outcome!r}"
    stop = run_stop(outcome, guard)
    assert stop is not None
    assert stop.packet.condition == "dependency-open"
    check_turn(stop.turn, "list_tickets")
    assert tools.cancelled == ["list_tickets"]
    assert tools.finished == ["search"]
    # The history to resume from holds the turn's answers. Under "graceful" the output
    # was never processed (no return answers it: the framework repairs that call on
    # resume); under "exhaustive" it may have run alongside the siblings, and is discarded.
    returned = {
        p.tool_name
        for m in stop.messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    maybe = {"final_result"} if end_strategy == "exhaustive" else set()
    assert returned - maybe == {"order_status", "list_tickets", "search"}


def test_pydantic_ai_an_output_function_never_acts_on_a_stopped_run(service):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import RunCancelled

    from toolbreaker.integrations.pydantic_ai import run_stop

    registry = make_registry()
    guard = RunGuard("pydantic-final-act")
    outcome, _, acted = _pydantic_final_run(service, registry, guard, output_function=True)

    assert isinstance(outcome, RunCancelled)
    assert run_stop(outcome, guard) is not None
    assert acted == []  # graceful: the function tools ran first, the stop came before it


# -- Google ADK ----------------------------------------------------------------------------------


def _adk_run(
    service: ToolService,
    registry: Registry,
    guard: RunGuard,
    first_turn: list[tuple[str, dict[str, Any]]],
    *,
    calm: bool = False,
) -> tuple[list[Any], Tools, list[list[Any]]]:
    """Run a Google ADK agent whose first model response issues ``first_turn`` at once.

    ADK runs the response's function calls concurrently (one task each, gathered); the
    plugin runs each tool through the run guard's turn. Returns the run's events, the
    tools, and the function responses the model read on each later request.
    """
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.function_tool import FunctionTool
    from google.genai import types

    from toolbreaker.integrations.google_adk import ToolbreakerPlugin, tool_metadata

    tools = Tools(service, registry, calm=calm)
    read: list[list[Any]] = []

    class Model(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            last = llm_request.contents[-1]
            answers = [p.function_response for p in last.parts or () if p.function_response]
            if not answers:
                parts = [
                    types.Part(function_call=types.FunctionCall(name=t, args=a))
                    for t, a in first_turn
                ]
            else:
                read.append([(r.name, dict(r.response or {})) for r in answers])
                parts = [types.Part(text="done")]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    async def order_status(order_id: str, sibling: str) -> Any:
        """Look an order up."""
        return await tools.order_status(order_id, sibling)

    async def list_tickets() -> Any:
        """List the support tickets."""
        return await tools.list_tickets()

    async def open_ticket(title: str, idempotency_key: str = "") -> Any:
        """Open a support ticket."""
        return await tools.open_ticket(title, idempotency_key)

    async def search(q: str) -> Any:
        """Search the catalog."""
        return await tools.search(q)

    described = {
        order_status: tool_metadata(dependency="helpdesk", required=True),
        list_tickets: tool_metadata(dependency="helpdesk"),
        open_ticket: tool_metadata(
            risk="reversible_write", dependency="helpdesk", business_key=["title"]
        ),
        search: tool_metadata(dependency="catalog"),
    }
    adk_tools = []
    for fn, metadata in described.items():
        tool = FunctionTool(fn)
        tool.custom_metadata = metadata
        adk_tools.append(tool)
    agent = LlmAgent(name="desk", model=Model(model="scripted"), tools=adk_tools)
    plugin = ToolbreakerPlugin(guard, registry=registry)

    async def main() -> list[Any]:
        runner = InMemoryRunner(app=App(name="desk", root_agent=agent, plugins=[plugin]))
        try:
            session = await runner.session_service.create_session(app_name="desk", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="go")])
            return [
                e
                async for e in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                )
            ]
        finally:
            await runner.close()
            assert no_other_task()  # structured: nothing outlives the turn

    return asyncio.run(main()), tools, read


def _adk_answers(events: list[Any]) -> dict[str, dict[str, Any]]:
    """The function responses the turn produced, by tool name (what the session keeps)."""
    return {r.name: dict(r.response or {}) for e in events for r in e.get_function_responses()}


def test_google_adk_cancels_only_the_sibling_that_needs_the_opened_dependency(service):
    pytest.importorskip("google.adk")
    from toolbreaker.integrations.google_adk import TURN_KEY, stop_of

    registry = make_registry()
    guard = RunGuard("adk-siblings")
    events, tools, read = _adk_run(service, registry, guard, three_calls(service, "list_tickets"))

    packet = stop_of(events)  # the stop still ends the run ...
    assert packet is not None
    assert packet["condition"] == "dependency-open"
    assert read == []  # ... before the model is asked for more calls
    check_turn(guard.turn_outcome(), "list_tickets")
    assert tools.cancelled == ["list_tickets"]  # the task running it was cancelled
    assert tools.finished == ["search"]
    # The session keeps all three answers, the policy's included, and the final event
    # carries the turn's bounded partial outcome.
    answers = _adk_answers(events)
    assert set(answers) == {"order_status", "list_tickets", "search"}
    check_cancelled_answer(answers["list_tickets"], "list_tickets")
    assert answers["order_status"]["tool_unavailable"] is True
    assert answers["search"]["results"]
    assert events[-1].custom_metadata[TURN_KEY]["partial"] is True


def test_google_adk_a_write_cancelled_in_flight_is_unknown_and_never_replayed(service):
    pytest.importorskip("google.adk")
    from toolbreaker.integrations.google_adk import stop_of

    registry = make_registry()
    journal = MemoryStore()
    guard = RunGuard("adk-write", journal=journal)
    events, tools, _ = _adk_run(service, registry, guard, three_calls(service, "open_ticket"))

    packet = stop_of(events)
    assert packet is not None
    check_unknown_write(guard.turn_outcome(), journal, "adk-write", packet["uncertain"])
    assert tools.cancelled == ["open_ticket"]

    # A resumed run asking for the same write is answered from the journal: never replayed.
    resumed = RunGuard("adk-write", journal=journal)
    again, tools, read = _adk_run(
        service, registry, resumed, [("open_ticket", {"title": "Refund A-1001"})]
    )
    assert stop_of(again) is None
    ((name, answer),) = read[0]
    assert name == "open_ticket"
    assert answer["outcome_unknown"] is True
    assert tools.cancelled == tools.finished == []
    check_never_replayed(service)


def test_google_adk_a_turn_where_nothing_opens_is_unchanged(service):
    pytest.importorskip("google.adk")
    registry = make_registry()
    guard = RunGuard("adk-calm")
    service.inject("GET /tickets", Fault(delay=0.2))
    turn = [("list_tickets", {}), ("search", {"q": "usb cable"})]
    events, tools, read = _adk_run(service, registry, guard, turn, calm=True)
    assert events[-1].content.parts[0].text == "done"
    assert sorted(tools.finished) == ["list_tickets", "search"]
    assert [name for name, _ in read[0]] == ["list_tickets", "search"]
    outcome = guard.turn_outcome()
    assert outcome is not None
    assert outcome.complete
    assert guard.stopped is None
