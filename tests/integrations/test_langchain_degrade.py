"""The degradation matrix through LangChain: the offline model reads the stale answer.

A real ``create_agent`` run, its model LangChain's own fake chat model (offline), its
tool calling the local ToolService over HTTP; the sheet row of the catalog search says
``degrade = ["stale", "omit"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frameworks import imported, needs

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, ToolMessage


from test_langchain import Shop, ask, call, payload, scripted, seen_by_model

from toolbreaker import Policy, Registry, system_prompt_line
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock

needs("langchain", reason="the langchain extra is not installed")
frameworks_imported = imported(
    "langchain.agents", "langchain_core.messages", "toolbreaker.integrations.langchain"
)

STALE_CATALOG = {
    "search": {
        "dependency": "catalog",
        "operation": "read",
        "degrade": ["stale", "omit"],
        "max_stale": 600,
        "stale_every": 0,
    }
}


def reader(results: list[ToolMessage]) -> AIMessage:
    """Searches once, then answers from what it read, saying so when it is stale."""
    from langchain_core.messages import AIMessage

    if not results:
        return call("search", q="usb cable")
    last: Any = payload(results[-1])
    if isinstance(last, dict) and last.get("stale"):
        return AIMessage(f"{len(last['result']['results'])} cables (stale data, {last['as_of']})")
    if isinstance(last, dict) and "results" in last:
        return AIMessage(f"{len(last['results'])} cables")
    return AIMessage("The catalog is unavailable.")


def test_the_model_reads_the_last_good_answer_labelled_stale(service):
    """A live search is kept; during the outage the model gets it back, labelled stale."""
    from langchain.agents import create_agent

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    registry = Registry(
        Policy(failure_threshold=1),
        store=MemoryStore(),
        clock=FakeClock(),
        default_timeout=2.0,
        default_enforce="cooperative",
    )
    guard = ToolbreakerMiddleware(registry=registry, tools=STALE_CATALOG)
    shop = Shop(service)

    model = scripted(reader)
    agent = create_agent(
        model, shop.tools(), middleware=[guard], system_prompt=system_prompt_line()
    )
    live = agent.invoke(ask("usb cables?"), context={"task_id": "t-1"})
    assert live["messages"][-1].content.endswith(" cables")
    [live_result] = seen_by_model(model)

    service.outage("GET /search")
    model = scripted(reader)
    agent = create_agent(model, shop.tools(), middleware=[guard])
    out = agent.invoke(ask("usb cables again?"), context={"task_id": "t-2"})
    [stale] = seen_by_model(model)
    answer = payload(stale)
    assert answer["degradation"] == "stale"
    assert answer["result"] == payload(live_result)
    assert "STALE" in answer["instruction"]
    assert "stale data" in out["messages"][-1].content
    assert registry.get("catalog", "read").stats.degraded == {"stale": 1}


def test_the_model_reads_the_local_substitutes_answer_labelled_degraded(service):
    """``degrade = "degraded"``: the row's fallback runs locally; the model reads its answer."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    registry = Registry(
        Policy(failure_threshold=1),
        store=MemoryStore(),
        clock=FakeClock(),
        default_timeout=2.0,
        default_enforce="cooperative",
        local_tools=("search_snapshot",),
    )
    shop = Shop(service)
    registry.register_local("search_snapshot", lambda q: shop.get(f"/search_snapshot?q={q}"))
    tools = {
        "search": {
            "dependency": "catalog",
            "fallback": "search_snapshot",
            "fallback_note": "say that prices may be out of date",
            "degrade": ["degraded", "omit"],
        }
    }
    guard = ToolbreakerMiddleware(registry=registry, tools=tools)
    service.outage("GET /search")

    def answer_from(results: list[ToolMessage]) -> AIMessage:
        if not results:
            return call("search", q="usb")
        last = payload(results[-1])
        return AIMessage(f"{len(last['result']['results'])} cables, via {last['served_by']}")

    model = scripted(answer_from)
    agent = create_agent(model, shop.tools(), middleware=[guard])
    out = agent.invoke(ask("usb cables?"), context={"task_id": "t-3"})
    [seen] = seen_by_model(model)
    answer = payload(seen)
    assert answer["degradation"] == "degraded"
    assert answer["result"]["stale"] is True  # the snapshot's own label
    assert "prices may be out of date" in answer["instruction"]
    assert out["messages"][-1].content.endswith("via search_snapshot")
    assert shop.entered["search_snapshot"] == 0  # run by the breaker, not by the model
