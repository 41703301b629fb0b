"""LangChain agents and hand-built LangGraph graphs, guarded by ToolbreakerMiddleware.

Every test runs the real framework offline: ``create_agent`` (or a ``StateGraph`` with a
``ToolNode``) driven by LangChain's own ``GenericFakeChatModel``, taught to accept tools
and to answer from what it was last told. The tools call the local ToolService over real
HTTP, so a 503 or a 404 is a real response.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from frameworks import imported, needs

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_parts import ScriptedModel
    from langgraph.graph import MessagesState

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware


from toolbreaker import Policy, Registry, shell_risk_of, system_prompt_line
from toolbreaker.errors import PolicyError
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock, Fault, ToolService, request_json

needs("langchain", reason="the langchain extra is not installed")
frameworks_imported = imported(
    "langchain.agents",
    "langchain_core.messages",
    "langchain_core.tools",
    "langchain_parts",
    "langgraph.checkpoint.memory",
    "langgraph.graph",
    "langgraph.prebuilt",
    "langgraph.types",
    "toolbreaker.integrations.langchain",
)

# -- an offline model that takes tools ------------------------------------------------------


_ids = itertools.count(1)


def scripted(policy: Callable[[list[ToolMessage]], AIMessage]) -> ScriptedModel:
    """A model whose next reply is ``policy(tool results of this turn so far)``."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_parts import ScriptedModel

    def replies() -> Iterator[AIMessage]:
        while True:
            prompt = model.prompts[-1]
            turn = max(i for i, m in enumerate(prompt) if isinstance(m, HumanMessage))
            yield policy([m for m in prompt[turn:] if isinstance(m, ToolMessage)])

    model = ScriptedModel(messages=replies())
    return model


def call(name: str, **args: Any) -> AIMessage:
    from langchain_core.messages import AIMessage

    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{next(_ids)}"}])


def payload(message: ToolMessage) -> Any:
    try:
        return json.loads(message.content)
    except ValueError:
        return message.content


def ask(text: str) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    return {"messages": [HumanMessage(text)]}


# -- tools over the real local service ---------------------------------------------------------


class Shop:
    """Tools calling the ToolService; counts how often each tool body was entered."""

    def __init__(self, service: ToolService) -> None:
        self.url = service.url
        self.entered: collections.Counter[str] = collections.Counter()
        self.keys: list[str | None] = []

    def get(self, path: str) -> dict[str, Any]:
        return request_json("GET", self.url + path, timeout=2.0)

    def tools(self) -> list[BaseTool]:
        from langchain_core.tools import tool

        from toolbreaker import idempotency_key

        shop = self

        @tool
        def search(q: str) -> dict:
            """Search the live catalog."""
            shop.entered["search"] += 1
            return shop.get(f"/search?q={urllib.parse.quote(q)}")

        @tool
        def refine(q: str) -> dict:
            """Refine a catalog search."""
            shop.entered["refine"] += 1
            return shop.get(f"/search?q={urllib.parse.quote(q)}")

        @tool
        def search_snapshot(q: str) -> dict:
            """Search yesterday's catalog snapshot."""
            shop.entered["search_snapshot"] += 1
            return shop.get(f"/search_snapshot?q={urllib.parse.quote(q)}")

        @tool
        def track_order(order_id: str) -> dict:
            """Track an order."""
            shop.entered["track_order"] += 1
            return shop.get(f"/orders/{order_id}")

        @tool
        def create_ticket(customer: str, title: str) -> dict:
            """Open a support ticket."""
            shop.entered["create_ticket"] += 1
            key = idempotency_key()
            shop.keys.append(key)
            return request_json(
                "POST",
                f"{shop.url}/tickets",
                body={"title": title, "body": f"for {customer}"},
                headers={"Idempotency-Key": key or ""},
                timeout=2.0,
            )

        @tool
        def send_email(to: str, template: str, idempotency_key: str = "") -> dict:
            """Send an e-mail."""
            shop.entered["send_email"] += 1
            shop.keys.append(idempotency_key)
            return request_json(
                "POST",
                f"{shop.url}/emails",
                body={"to": to, "template": template},
                headers={"Idempotency-Key": idempotency_key},
                timeout=2.0,
            )

        return [search, refine, search_snapshot, track_order, create_ticket, send_email]


@pytest.fixture
def shop(service: ToolService) -> Shop:
    return Shop(service)


@pytest.fixture
def registry() -> Registry:
    """Three qualifying failures open a breaker; the clock never moves on its own."""
    return Registry(
        Policy(failure_threshold=3),
        clock=FakeClock(),
        default_timeout=2.0,
        default_enforce="cooperative",
    )


CATALOG = {
    "search": {
        "dependency": "catalog",
        "fallback": "search_snapshot",
        "fallback_note": "say that prices may be out of date",
    },
    "search_snapshot": {"dependency": "catalog-snapshot"},
}

TICKETS = {
    "create_ticket": {
        "dependency": "tickets",
        "operation": "write",
        "risk": "reversible_write",
        "business_key": ["customer", "title"],
        "verify": lambda r: str(r.get("id", "")).startswith("T-"),
        "external_id": lambda r: r["id"],
    },
    "send_email": {"dependency": "emails", "operation": "write", "risk": "reversible_write"},
}


def shopper(queries: list[str]) -> Callable[[list[ToolMessage]], AIMessage]:
    """Searches until told the tool is unavailable, then uses the fallback it names."""
    from langchain_core.messages import AIMessage

    def policy(results: list[ToolMessage]) -> AIMessage:
        last = payload(results[-1]) if results else None
        if isinstance(last, dict) and last.get("tool_unavailable"):
            return call(last["fallback"], q="usb cable")
        if results and results[-1].name == "search_snapshot":
            return AIMessage(f"Found {len(last['results'])} cables; prices may be out of date.")
        return call("search", q=queries[len(results)])

    return policy


def seen_by_model(model: ScriptedModel) -> list[ToolMessage]:
    """The tool messages in the last prompt the model received."""
    from langchain_core.messages import ToolMessage

    return [m for m in model.prompts[-1] if isinstance(m, ToolMessage)]


# -- 1. a real 503 opens the breaker; the model moves to the fallback ---------------------------


def test_open_breaker_skips_the_tool_and_names_the_fallback(service, shop, registry):
    """Three 503s from the live service open the catalog breaker; the next search does not
    run at all, and the model reads a tool-unavailable result naming the fallback, calls it
    and answers."""
    from langchain.agents import create_agent

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    service.outage("GET /search")
    guard = ToolbreakerMiddleware(registry=registry, tools=CATALOG)
    queries = ["usb cable", "usb-c cable", "cable usb c"]

    model = scripted(shopper(queries))
    agent = create_agent(
        model, shop.tools(), middleware=[guard], system_prompt=system_prompt_line()
    )
    out = agent.invoke(ask("find me a usb cable"), context={"task_id": "order-1"})

    assert shop.entered["search"] == 3
    assert service.hits["GET /search"] == 3
    assert registry.get("catalog").state.phase == "open"
    first, second, opened, fallback = seen_by_model(model)
    for transient in (first, second):  # the breaker was still closed: the model may retry
        assert payload(transient)["retryable"] is True
    assert opened.status == "error"
    assert payload(opened)["tool_unavailable"] is True
    assert payload(opened)["fallback"] == "search_snapshot"
    assert "try again" not in opened.content.lower()
    assert payload(fallback)["stale"] is True
    assert "may be out of date" in out["messages"][-1].content

    # The next run: the first search is answered locally, without entering the tool.
    model = scripted(shopper(queries))
    agent = create_agent(model, shop.tools(), middleware=[guard])
    out = agent.invoke(ask("and a hdmi cable?"), context={"task_id": "order-2"})
    assert shop.entered["search"] == 3
    assert service.hits["GET /search"] == 3
    rejected = seen_by_model(model)[-2]
    assert rejected.name == "search"
    assert rejected.status == "error"
    assert payload(rejected)["reason"] == "open"
    assert 'Use "search_snapshot" instead' in payload(rejected)["instruction"]
    assert shop.entered["search_snapshot"] == 2
    assert out["messages"][-1].content.startswith("Found")


# -- 2. a 404 or a bad argument is the caller's mistake, not the dependency's ------------------


def test_not_found_and_bad_arguments_leave_the_breaker_closed(service, shop, registry):
    """Four real 404s and a call with invalid arguments never open the breaker (three
    qualifying failures would): the tool keeps running and the model is told it is not
    worth retrying."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(
        registry=registry, tools={"track_order": {"dependency": "orders"}}
    )
    plan = [
        call("track_order", id=1001),  # invalid: LangChain rejects the arguments
        *(call("track_order", order_id=f"Z-{n}") for n in range(4)),
        call("track_order", order_id="A-1001"),
        AIMessage("Order A-1001 ships with UPS."),
    ]
    model = scripted(lambda results: plan[len(results)])
    agent = create_agent(model, shop.tools(), middleware=[guard])
    out = agent.invoke(ask("where is my order?"), context={"task_id": "order-3"})

    assert registry.get("orders").state.phase == "closed"
    assert shop.entered["track_order"] == 5  # the invalid call never reached the body
    assert service.hits["GET /orders"] == 5
    invalid, *missing, found = seen_by_model(model)
    assert payload(invalid)["retryable"] is False
    assert "order_id" in payload(invalid)["error"]
    for message in missing:
        assert message.status == "error"
        assert payload(message)["retryable"] is False
        assert "404" in payload(message)["error"]
        assert "tool_unavailable" not in payload(message)
    assert payload(found)["carrier"] == "UPS"
    assert out["messages"][-1].content == "Order A-1001 ships with UPS."


# -- 3. a model that repeats itself is stopped through jump_to: end --------------------------------


def test_repeated_action_ends_the_run_with_a_stop_packet(shop, registry):
    """A model that asks the same question forever is stopped by the run guard; before_model
    ends the run without another model call, and the stop packet is in the final state,
    in the last message and on the middleware."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import STOP_KEY, ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(registry=registry)
    model = scripted(lambda _results: call("search", q="usb cable"))
    agent = create_agent(model, shop.tools(), middleware=[guard])
    out = agent.invoke(ask("find a usb cable"), context={"task_id": "loop-1"})

    packet = out[STOP_KEY]
    assert packet["condition"] == "repeated-action"
    assert packet["task"] == "loop-1"
    assert "looping" in packet["next_safe_action"]
    last = out["messages"][-1]
    assert isinstance(last, AIMessage)
    assert last.additional_kwargs[STOP_KEY] == packet
    assert last.content.startswith("Run stopped by toolbreaker (repeated-action)")
    # The first result is new evidence; identical results after it are repeats, and the
    # third repeat is refused: four searches ran, the fifth did not.
    assert shop.entered["search"] == 4
    stopped = payload(out["messages"][-2])
    assert stopped["run_stopped"] is True
    assert len(model.prompts) == 5  # never asked again after the refusal
    assert guard.stop_packet("loop-1").condition == "repeated-action"

    # The task stays stopped: another invoke ends before the model is called.
    agent.invoke(ask("try again"), context={"task_id": "loop-1"})
    assert len(model.prompts) == 5
    guard.forget("loop-1")  # an operator decided; the task may run again
    assert guard.stop_packet("loop-1").condition == "running"


def test_the_run_guards_the_middleware_makes_reach_what_watches_its_registry(shop, registry):
    """Issue 34, item 11: the middleware makes a run guard per task. An event stream
    attached to the registry (as the docs attach it) used to publish the breakers and never
    a stop, so the dashboard said "Run guard stops: no stops" while runs stopped. The
    guards are attached the way the registry's breakers are: now and later, each once."""
    from langchain.agents import create_agent

    from toolbreaker.cli._board import Board
    from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher, iter_entries
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    stream = MemoryStream()
    StreamPublisher(stream).attach(registry)  # before the middleware made any guard
    middleware = ToolbreakerMiddleware(registry=registry)
    model = scripted(lambda _results: call("search", q="usb cable"))
    agent = create_agent(model, shop.tools(), middleware=[middleware])
    agent.invoke(ask("find a usb cable"), context={"task_id": "loop-1"})
    assert middleware.stop_packet("loop-1").condition == "repeated-action"
    stops = [e for _, e in iter_entries(stream) if e.get("kind") == "stop"]
    assert [(s["task"], s["packet"]["condition"]) for s in stops] == [("loop-1", "repeated-action")]
    board = Board()
    board.feed(entry for _, entry in iter_entries(stream))
    shown = board.snapshot(0)["stops"]
    assert [(s["task"], s["packet"]["condition"]) for s in shown] == [("loop-1", "repeated-action")]
    # A publisher attached after the guard was made hears it too (the later stop).
    later = MemoryStream()
    StreamPublisher(later).attach(registry)
    middleware.guard_for("loop-1").stop("an operator stop")  # already stopped: no new stop
    middleware.guard_for("loop-2").stop("an operator stop")
    assert [e["task"] for _, e in iter_entries(later) if e.get("kind") == "stop"] == ["loop-2"]


# -- 4. writes carry one idempotency key: on a retry and on a resumed run -------------------------


def test_write_key_is_stable_across_retry_and_resume(service, shop, registry):
    """A ticket write fails twice with 503 and the run gives up; a new process resumes the
    task with the same journal: the write carries the same key all three times, succeeds
    once, and a repeated request is answered from the journal without running the tool."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    journal = MemoryStore()
    service.inject("POST /tickets", Fault(status=503), Fault(status=503))
    ticket = {"customer": "c-1842", "title": "Broken cable"}

    def first_run(results: list[ToolMessage]) -> AIMessage:
        if len(results) < 2:
            return call("create_ticket", **ticket)
        return AIMessage("The ticket system is down; I will try again later.")

    guard = ToolbreakerMiddleware(registry=registry, tools=TICKETS, journal=journal)
    model = scripted(first_run)
    agent = create_agent(model, shop.tools(), middleware=[guard])
    agent.invoke(ask("open a ticket"), context={"task_id": "ticket-7"})
    assert [payload(m)["retryable"] for m in seen_by_model(model)] == [True, True]
    assert service.created("tickets") == []

    # A new process: a new registry and middleware, the same journal and task id.
    plan = [call("create_ticket", **ticket), call("create_ticket", **ticket), AIMessage("T-1")]
    resumed = ToolbreakerMiddleware(
        registry=Registry(default_enforce="cooperative"), tools=TICKETS, journal=journal
    )
    model = scripted(lambda results: plan[len(results)])
    agent = create_agent(model, shop.tools(), middleware=[resumed])
    agent.invoke(ask("open a ticket"), context={"task_id": "ticket-7"})

    key = shop.keys[0]
    assert key is not None
    assert key.startswith("tb1-")
    assert shop.keys == [key, key, key]  # two failed attempts, one success; no fourth run
    created = service.created("tickets")
    assert len(created) == 1
    assert created[0]["idempotency_key"] == key
    done, again = seen_by_model(model)
    assert payload(done)["id"] == payload(again)["id"] == "T-1"
    assert service.hits["POST /tickets"] == 3
    # The key never appears in the schema the model was given.
    schema = next(s for s in model.schemas if s["function"]["name"] == "create_ticket")
    assert "idempotency_key" not in schema["function"]["parameters"]["properties"]


def test_write_key_replaces_a_key_the_model_made_up(service, shop, registry):
    """A tool that takes the key as a parameter gets it through request.override(); a key
    the model invents is discarded."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(registry=registry, tools=TICKETS)
    plan = [
        call("send_email", to="ops@example.com", template="report", idempotency_key="made-up"),
        AIMessage("sent"),
    ]
    model = scripted(lambda results: plan[len(results)])
    agent = create_agent(model, shop.tools(), middleware=[guard])
    agent.invoke(ask("send the report"), context={"task_id": "mail-1"})

    (key,) = shop.keys
    assert key is not None
    assert key.startswith("tb1-")
    assert service.created("emails")[0]["idempotency_key"] == key
    entry = guard.stop_packet("mail-1").confirmed[0]
    assert entry["idempotency_key"] == key


# -- 5. one breaker per dependency, whoever calls it ---------------------------------------------


def agent_node(model: ScriptedModel, tools: list[BaseTool]) -> Callable[[MessagesState], dict]:
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    return agent


def build_graph(guard: ToolbreakerMiddleware, model: ScriptedModel, tools: list[BaseTool]) -> Any:
    """A hand-built ReAct graph: agent -> tools -> (router) -> agent | stopped -> END."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node(model, tools))
    builder.add_node("tools", guard.tool_node(tools))
    builder.add_node("stopped", guard.stop_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_conditional_edges(
        "tools", guard.route("agent", stop="stopped"), ["agent", "stopped"]
    )
    builder.add_edge("stopped", END)
    return builder.compile()


def test_agents_sharing_a_registry_share_the_breaker(service, shop, registry):
    """A create_agent agent opens the catalog breaker; a hand-built LangGraph with its own
    middleware but the same registry finds it open: its search never runs."""
    from langchain.agents import create_agent

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    service.outage("GET /search")
    first = ToolbreakerMiddleware(registry=registry, tools=CATALOG)
    model = scripted(shopper(["a", "b", "c"]))
    create_agent(model, shop.tools(), middleware=[first]).invoke(
        ask("usb cable"), context={"task_id": "a-1"}
    )
    assert shop.entered["search"] == 3

    second = ToolbreakerMiddleware(registry=registry, tools=CATALOG)
    assert second.breaker_of("search") is first.breaker_of("search")
    model = scripted(shopper(["a"]))
    graph = build_graph(second, model, shop.tools())
    out = graph.invoke(ask("usb cable"), config={"configurable": {"thread_id": "b-1"}})

    assert shop.entered["search"] == 3  # the graph's search was refused locally
    assert service.hits["GET /search"] == 3
    rejected, fallback = seen_by_model(model)
    assert payload(rejected)["tool_unavailable"] is True
    assert payload(fallback)["stale"] is True
    assert out["messages"][-1].content.startswith("Found")
    assert len(registry) == 2  # catalog and catalog-snapshot, nothing else


# -- LangGraph: the router stops a looping plan -------------------------------------------------


def test_langgraph_router_stops_an_alternating_plan(shop, registry):
    """search, refine, search, refine ... in a hand-built graph: the run guard calls it a
    loop, the router sends the run to the stop node, and the packet is in the last message."""
    from toolbreaker.integrations.langchain import STOP_KEY, ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(registry=registry)
    model = scripted(lambda results: call(("search", "refine")[len(results) % 2], q="usb"))
    graph = build_graph(guard, model, shop.tools())
    out = graph.invoke(ask("find a usb cable"), config={"configurable": {"thread_id": "g-1"}})

    last = out["messages"][-1]
    packet = last.additional_kwargs[STOP_KEY]
    assert packet["condition"] == "loop"
    assert guard.stop_packet("g-1").condition == "loop"
    assert payload(out["messages"][-2])["run_stopped"] is True
    assert len(model.prompts) == shop.entered["search"] + shop.entered["refine"] + 1


# -- async: awrap_tool_call and abefore_model --------------------------------------------------


def test_async_run_switches_to_the_fallback_and_stops_a_loop(service, shop, registry):
    """The same guarantees through ainvoke: an open breaker skips the tool and names the
    fallback, and a repeating model is stopped by abefore_model."""
    from langchain.agents import create_agent

    from toolbreaker.integrations.langchain import STOP_KEY, ToolbreakerMiddleware

    service.outage("GET /search")
    guard = ToolbreakerMiddleware(registry=registry, tools=CATALOG)

    async def main() -> tuple[dict, dict, ScriptedModel]:
        model = scripted(shopper(["a", "b", "c"]))
        agent = create_agent(model, shop.tools(), middleware=[guard])
        opened = await agent.ainvoke(ask("usb cable"), context={"task_id": "async-1"})
        looping = scripted(lambda _results: call("search_snapshot", q="usb"))
        agent = create_agent(looping, shop.tools(), middleware=[guard])
        stopped = await agent.ainvoke(ask("usb cable"), context={"task_id": "async-2"})
        return opened, stopped, model

    opened, stopped, model = asyncio.run(main())
    assert shop.entered["search"] == 3
    assert payload(seen_by_model(model)[2])["fallback"] == "search_snapshot"
    assert opened["messages"][-1].content.startswith("Found")
    assert stopped[STOP_KEY]["condition"] == "repeated-action"


def test_async_tool_is_cancelled_at_the_breaker_timeout(registry):
    """An async tool that outlives its breaker's timeout is cancelled; the timeout counts
    as a failure of the dependency and the model is told it may retry."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    @tool
    async def slow_quote(sku: str) -> dict:
        """Get a price quote."""
        await asyncio.sleep(5)
        return {"sku": sku}

    guard = ToolbreakerMiddleware(
        registry=registry, tools={"slow_quote": {"dependency": "quotes", "timeout": 0.02}}
    )
    plan = [call("slow_quote", sku="SKU-1"), AIMessage("no quote")]
    model = scripted(lambda results: plan[len(results)])
    agent = create_agent(model, [slow_quote], middleware=[guard])
    asyncio.run(agent.ainvoke(ask("quote"), context={"task_id": "slow-1"}))

    (timed_out,) = seen_by_model(model)
    assert payload(timed_out)["retryable"] is True
    assert "TimeoutError" in payload(timed_out)["error"]
    assert guard.breaker_of("slow_quote").stats.failures == {"timeout": 1}


# -- configuration and edge cases ----------------------------------------------------------------


def test_unknown_tool_names_get_no_breaker(shop, registry):
    """A tool name the model invents is answered with an error and counted by the run guard,
    but it does not create a breaker in the registry."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(registry=registry)
    plan = [call("teleport", to="mars"), AIMessage("I cannot do that.")]
    model = scripted(lambda results: plan[len(results)])
    create_agent(model, shop.tools(), middleware=[guard]).invoke(
        ask("go"), context={"task_id": "x-1"}
    )
    (answer,) = seen_by_model(model)
    assert answer.status == "error"
    assert "teleport" in payload(answer)["error"]
    assert len(registry) == 0
    assert guard.guard_for("x-1").state.counters()["calls"] == 1


def test_a_run_without_a_task_id_is_refused(shop, registry):
    """Without a task id (context, thread_id, task_id= or guard=) the run guard cannot be
    chosen, and the agent fails loudly instead of guessing."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(registry=registry)
    model = scripted(lambda _results: AIMessage("hi"))
    with pytest.raises(PolicyError, match="task_id"):
        create_agent(model, shop.tools(), middleware=[guard]).invoke(ask("hi"))


def test_task_id_callable_and_fixed_guard(shop, registry):
    """task_id= maps the runtime to a task; guard= uses one run guard for every call."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker import RunGuard
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    by_user = ToolbreakerMiddleware(registry=registry, task_id=lambda rt: f"user-{rt.context.user}")

    class Context:
        user = "ada"

    model = scripted(lambda results: call("search", q="a") if not results else AIMessage("ok"))
    create_agent(model, shop.tools(), middleware=[by_user]).invoke(ask("x"), context=Context())
    assert by_user.guard_for("user-ada").state.counters()["calls"] == 1

    fixed = RunGuard("fixed-task")
    single = ToolbreakerMiddleware(registry=registry, guard=fixed)
    model = scripted(lambda results: call("search", q="b") if not results else AIMessage("ok"))
    create_agent(model, shop.tools(), middleware=[single]).invoke(ask("x"))
    assert fixed.state.counters()["calls"] == 1
    assert single.stop_packet("anything").task == "fixed-task"


def test_guard_factory_ready_breaker_and_plain_text_results(registry):
    """guard_factory builds each task's run guard; a ready breaker is used as given; plain
    text results count as evidence like JSON ones; only max_runs run guards are kept."""
    from langchain.agents import create_agent
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    from toolbreaker import Breaker, Budget, RunGuard
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    @tool
    def weather(city: str) -> str:
        """Today's weather."""
        return f"sunny in {city}"

    built: list[str] = []

    def factory(task: str) -> RunGuard:
        built.append(task)
        return RunGuard(task, budget=Budget(max_repeats=0))

    ready = Breaker("weather-api", enforce="cooperative")
    guard = ToolbreakerMiddleware(
        registry=registry, guard_factory=factory, tools={"weather": {"breaker": ready}}, max_runs=1
    )
    assert guard.breaker_of("weather") is ready
    model = scripted(lambda results: call("weather", city="Oslo"))
    agent = create_agent(model, [weather], middleware=[guard])
    out = agent.invoke(ask("weather?"), context={"task_id": "w-1"})

    first, second, refused = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert first.content == second.content == "sunny in Oslo"
    assert payload(refused)["condition"] == "repeated-action"
    assert built == ["w-1"]
    guard.guard_for("w-2")  # a second task evicts the first (max_runs=1)
    assert guard.stop_packet("w-1").condition == "running"
    assert built == ["w-1", "w-2", "w-1"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tools": {"search": {"fallbak": "x"}}}, "tools.search.fallbak"),
        ({"tools": {"search": {"breaker": object(), "timeout": 1.0}}}, "tools.search.breaker"),
        ({"guard": object(), "guard_factory": lambda t: t}, "guard_factory"),
        ({"max_runs": 0}, "max_runs"),
    ],
)
def test_configuration_errors_name_the_field(kwargs, field):
    """Misconfiguration fails at construction with the offending field."""
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    with pytest.raises(PolicyError) as info:
        ToolbreakerMiddleware(**kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    "system_prompt",
    [None, "You sell cables.", system_prompt_line()],
    ids=["no-prompt", "own-prompt", "line-already-there"],
)
def test_system_prompt_line_is_added_once(shop, registry, system_prompt):
    """The middleware tells the model the tool-unavailable protocol, exactly once, keeping
    the agent's own system prompt; instructions=False leaves the prompt alone."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, SystemMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    line = system_prompt_line()
    for instructions, expected in ((True, 1), (False, 0)):
        guard = ToolbreakerMiddleware(registry=registry, instructions=instructions)
        model = scripted(lambda _results: AIMessage("hello"))
        agent = create_agent(model, shop.tools(), middleware=[guard], system_prompt=system_prompt)
        agent.invoke(ask("hi"), context={"task_id": "p-1"})
        system = [m.text for m in model.prompts[0] if isinstance(m, SystemMessage)]
        text = "\n".join(system)
        assert text.count(line) == (1 if system_prompt == line else expected)
        if system_prompt and system_prompt != line:
            assert text.startswith(system_prompt)


def test_an_interrupt_inside_a_tool_pauses_and_resumes_under_the_guard(registry):
    """A human-in-the-loop interrupt raised inside a write tool passes through the
    middleware; on resume the call is guarded again and confirmed once, with one key."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    from toolbreaker import idempotency_key
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    keys: list[str | None] = []

    @tool
    def refund(order: str) -> dict:
        """Refund an order after approval."""
        approved = interrupt({"approve": order})
        keys.append(idempotency_key())
        return {"refunded": order, "approved": approved}

    guard = ToolbreakerMiddleware(registry=registry, tools={"refund": {"risk": "reversible_write"}})
    plan = [call("refund", order="A-1001"), AIMessage("Refunded.")]
    model = scripted(lambda results: plan[len(results)])
    agent = create_agent(model, [refund], middleware=[guard], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "refund-1"}}

    paused = agent.invoke(ask("refund A-1001"), config=config)
    assert paused["__interrupt__"][0].value == {"approve": "A-1001"}
    assert keys == []
    done = agent.invoke(Command(resume=True), config=config)

    assert done["messages"][-1].content == "Refunded."
    (confirmed,) = guard.stop_packet("refund-1").confirmed
    assert keys == [confirmed["idempotency_key"]]
    assert registry.get("refund").state.phase == "closed"


def test_tool_options_take_every_breaker_option_from_boundary():
    """ToolOptions names every breaker option Boundary declares: the two cannot drift."""
    from toolbreaker.integrations.langchain import ToolOptions
    from toolbreaker.runtime._breaker._boundary import BREAKER_OPTIONS

    settable = BREAKER_OPTIONS - {"tool", "classifier", "result_is_failure"}
    assert settable <= set(ToolOptions.__annotations__)


# -- the model is a retry layer ------------------------------------------------------------------


def test_the_models_re_calls_spend_the_retry_budget(service, shop, registry):
    """A model that re-issues the same failed search is retrying: with a budget of one
    retry, its second call spends it, and then it reads that the tool is unavailable for
    this run (not "retryable") and stops; a third call would never reach the service."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    service.outage("GET /search")
    tools = {
        "search": {
            "dependency": "catalog-retry",
            "policy": Policy(failure_threshold=10),
            "retry": {"max_attempts": 1, "budget": 1},
        }
    }
    guard = ToolbreakerMiddleware(registry=registry, tools=tools)

    def stubborn(results: list[ToolMessage]) -> AIMessage:
        last = payload(results[-1]) if results else None
        if isinstance(last, dict) and last.get("tool_unavailable"):
            return AIMessage("The catalog is unavailable right now.")
        return call("search", q="usb cable")

    model = scripted(stubborn)
    agent = create_agent(model, shop.tools(), middleware=[guard])
    out = agent.invoke(ask("find me a usb cable"), context={"task_id": "retry-1"})

    assert service.hits["GET /search"] == 2
    first, second = seen_by_model(model)
    assert payload(first)["retryable"] is True
    assert payload(second)["reason"] == "retry-budget"
    assert payload(second)["retryable"] is False
    assert registry.get("catalog-retry").stats.retries == {"model-retry": 1}
    assert out["messages"][-1].content == "The catalog is unavailable right now."


@pytest.mark.parametrize("hide", [False, True])
def test_hide_open_tools_removes_them_from_the_model_and_says_until_when(shop, registry, hide):
    """With hide_open_tools, a tool whose breaker is open (cooling down) is not in the
    model's tool list and one system-prompt line names it and when it is back; a model
    that calls what it sees then makes no rejected call. Off by default."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, SystemMessage, ToolMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    guard = ToolbreakerMiddleware(registry=registry, tools=CATALOG, hide_open_tools=hide)
    breaker = guard.breaker_of("search")
    for _ in range(3):
        breaker.allow().record("failure")
    assert breaker.state.phase == "open"

    def reply(results: list[ToolMessage]) -> AIMessage:
        offered = {schema["function"]["name"] for schema in model.schemas}
        return call("search", q="usb") if "search" in offered and not results else AIMessage("ok")

    model = scripted(reply)
    agent = create_agent(model, shop.tools(), middleware=[guard])
    done = agent.invoke(ask("find a usb cable"), context={"task_id": f"hide-{hide}"})
    offered = {schema["function"]["name"] for schema in model.schemas}
    system = "\n".join(m.text for m in model.prompts[0] if isinstance(m, SystemMessage))
    rejected = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    if hide:
        assert "search" not in offered
        assert "search_snapshot" in offered
        assert '"search" (for about 20 more seconds)' in system
        assert rejected == []
    else:
        assert "search" in offered
        assert "hidden" not in system
        assert payload(rejected[0])["tool_unavailable"] is True
    assert shop.entered["search"] == 0


def test_a_publisher_on_the_run_guard_sees_the_breakers_the_middleware_makes_later(
    service, shop, registry
):
    """The event stream attached to the run guard before the agent runs: the middleware
    makes the tool's breaker on its first call and gives it to the guard, and the stream
    holds that breaker's transitions from that call, with the guard's stop after."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker import Budget, RunGuard
    from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher, iter_entries
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    fixed = RunGuard("order-7", budget=Budget(max_tool_calls=1), clock=registry.clock)
    stream = MemoryStream()
    StreamPublisher(stream).attach(fixed)
    middleware = ToolbreakerMiddleware(registry=registry, guard=fixed)
    assert len(registry) == 0
    orders = ["A-1", "A-2"]
    model = scripted(
        lambda results: (
            call("track_order", order_id=orders[len(results)])
            if len(results) < len(orders)
            else AIMessage("done")
        )
    )
    create_agent(model, shop.tools(), middleware=[middleware]).invoke(ask("where is A-1?"))
    entries = [entry for _, entry in iter_entries(stream)]
    transitions = [(e["key"], e["record"]["reason"]) for e in entries if e["kind"] == "transition"]
    assert transitions[0] == ("track_order", "call-admitted")  # its very first call
    assert {key for key, _ in transitions} == {"track_order"}
    assert [e["packet"]["condition"] for e in entries if e["kind"] == "stop"] == ["max-tool-calls"]


def test_a_tools_risk_may_be_a_function_of_its_arguments(registry):
    """Issue 33: ``tools={"bash": {"risk": shell_risk_of("command")}}``: each call of one
    shell tool is counted in its command's class inside the agent loop."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from toolbreaker import RunGuard
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    ran: list[str] = []

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "ok"

    commands = iter(["cat calc.py", "sed -i 's/-/+/' calc.py"])

    def plan(_results: list[ToolMessage]) -> AIMessage:
        command = next(commands, None)
        return AIMessage("fixed") if command is None else call("bash", command=command)

    guards: dict[str, RunGuard] = {}
    middleware = ToolbreakerMiddleware(
        registry=registry,
        guard_factory=lambda task: guards.setdefault(task, RunGuard(task)),
        tools={"bash": {"risk": shell_risk_of("command"), "idempotency_arg": None}},
    )
    agent = create_agent(scripted(plan), [bash], middleware=[middleware])
    agent.invoke(ask("fix calc.py"), context={"task_id": "fix-1"})
    assert ran == ["cat calc.py", "sed -i 's/-/+/' calc.py"]
    counted = dict(guards["fix-1"].state.class_calls)
    assert counted == {"read": 1, "reversible_write": 1, "irreversible": 0}


# -- the boundary sheet applies to the tools it names --------------------------------------------

INVENTORY_SHEET = """\
[defaults]
timeout_ms = 4000
enforce = "cooperative"

[inventory.read]
owner = "stock-team"
failure_threshold = 2
cooldown_ms = 60000
timeout_ms = 1500

[orders.read]
owner = "fulfilment"

[orders.write]
owner = "fulfilment"
"""


def test_a_tool_mapped_to_a_dependency_takes_the_sheets_row(service, tmp_path):
    """tools={"check_stock": {"dependency": "inventory"}} with an [inventory.read] row: the
    tool's breaker is that row (its threshold of 2, deadline and owner), never
    inventory:default on the defaults. Inside a real agent, two 503s open it and the third
    call is answered locally."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    sheet = tmp_path / "breakers.toml"
    sheet.write_text(INVENTORY_SHEET, encoding="utf-8")
    registry = Registry.from_toml(sheet)
    middleware = ToolbreakerMiddleware(
        registry=registry, tools={"check_stock": {"dependency": "inventory"}}
    )
    breaker = middleware.breaker_of("check_stock")
    assert breaker.key == "inventory:read"
    assert (breaker.owner, breaker.timeout, breaker.policy.failure_threshold) == (
        "stock-team",
        1.5,
        2,
    )
    assert breaker.stats.on_defaults is False

    service.outage("GET /search")
    entered = collections.Counter[str]()

    @tool
    def check_stock(sku: str) -> dict:
        """How many of an item are in stock."""
        entered["check_stock"] += 1
        return request_json("GET", f"{service.url}/search?q={sku}", timeout=2.0)

    model = scripted(
        lambda results: (
            call("check_stock", sku=f"usb-{len(results)}")
            if len(results) < 3
            else AIMessage("out of luck")
        )
    )
    agent = create_agent(model, [check_stock], middleware=[middleware])
    agent.invoke(ask("is the usb cable in stock?"), context={"task_id": "stock-1"})
    assert entered["check_stock"] == 2
    third = seen_by_model(model)[-1]
    assert payload(third)["tool_unavailable"] is True
    assert registry.get("inventory", "read").state.phase == "open"
    assert [b.key for b in registry] == ["inventory:read"]


@pytest.mark.parametrize(
    ("tools", "field"),
    [
        ({"track": {"dependency": "orders"}}, "tools.track.operation"),
        ({"track": {"dependency": "ordres", "operation": "read"}}, "tools.track.dependency"),
        ({"track": {"dependency": "orders", "operation": "refund"}}, "tools.track.operation"),
    ],
)
def test_a_tool_mapping_the_sheet_cannot_apply_fails_when_the_middleware_is_built(
    tmp_path, tools, field
):
    """A dependency with two rows and no operation, a typo of a row's name, an operation the
    sheet has no row for: each is refused at construction, with the rows named."""
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    sheet = tmp_path / "breakers.toml"
    sheet.write_text(INVENTORY_SHEET, encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        ToolbreakerMiddleware(registry=Registry.from_toml(sheet), tools=tools)
    assert info.value.field == field
    assert "orders.read" in str(info.value)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"risk": "wirte"}, "tools.search.risk"),
        ({"required": "yes"}, "tools.search.required"),
        ({"recovery": 1}, "tools.search.recovery"),
        ({"dependency": 3}, "tools.search.dependency"),
        ({"operation": ""}, "tools.search.operation"),
        ({"verify": "not a function"}, "tools.search.verify"),
        ({"business_key": "customer"}, "tools.search.business_key"),
        ({"idempotency_arg": ""}, "tools.search.idempotency_arg"),
        ({"breaker": "search"}, "tools.search.breaker"),
        ({"timeout": "4s"}, "tools.search.timeout"),
        ({"timeout": -1}, "tools.search.timeout"),
        ({"cost": "a lot"}, "tools.search.cost"),
    ],
)
def test_every_tool_option_is_checked_when_the_middleware_is_built(options, field):
    """A tool option of the wrong type or value fails at construction, naming it: not at the
    first call (where it would reach the model as a tool error)."""
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    with pytest.raises(PolicyError) as info:
        ToolbreakerMiddleware(tools={"search": options})
    assert info.value.field == field
