"""Hiding open tools: model turns and rejected tool calls saved, with offline scripted models.

Run ``python benchmarks/bench_hide_open_tools.py`` (a few seconds; needs the ``langchain``
extra). A LangChain ``create_agent`` agent with three tools (``search``, its fallback
``search_snapshot``, ``track_order``) answers ``--conversations`` questions while the
``search`` breaker is open. Two scripted models play the agent:

- *obedient*: calls ``search`` when it is offered; after a tool-unavailable result it calls
  the fallback the result names, then answers;
- *stubborn*: calls ``search`` up to three times whatever it reads, then the fallback.

Each runs with the default (the tool is listed, the call is rejected locally with the
tool-unavailable result) and with ``hide_open_tools=True`` (the tool is not listed; one
system-prompt line names it and when it is back; the model goes straight to the fallback).
Printed per model and mode: model calls, tool calls the breaker rejected, tool calls that
ran, and what hiding saved. Nothing reaches a network: the tools return canned data.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from toolbreaker import Policy, Registry
from toolbreaker.integrations.langchain import ToolbreakerMiddleware
from toolbreaker.testing import FakeClock

_ids = itertools.count(1)


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to take tools; counts its calls."""

    schemas: list[dict[str, Any]] = Field(default_factory=list)
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        self.schemas = [convert_to_openai_tool(t) for t in tools]
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{next(_ids)}"}])


Brain = Callable[[set[str], list[ToolMessage]], AIMessage]


def obedient(offered: set[str], results: list[ToolMessage]) -> AIMessage:
    if not results:
        return call("search" if "search" in offered else "search_snapshot", q="usb")
    if results[-1].name == "search":
        return call("search_snapshot", q="usb")
    return AIMessage("From yesterday's snapshot: one usb cable.")


def stubborn(offered: set[str], results: list[ToolMessage]) -> AIMessage:
    searches = sum(m.name == "search" for m in results)
    if "search" in offered and searches < 3:
        return call("search", q="usb")
    if not results or results[-1].name != "search_snapshot":
        return call("search_snapshot", q="usb")
    return AIMessage("From yesterday's snapshot: one usb cable.")


def scripted(brain: Brain) -> ScriptedModel:
    def replies() -> Iterator[AIMessage]:
        while True:
            prompt = model.prompts[-1]
            turn = max(i for i, m in enumerate(prompt) if isinstance(m, HumanMessage))
            offered = {schema["function"]["name"] for schema in model.schemas}
            yield brain(offered, [m for m in prompt[turn:] if isinstance(m, ToolMessage)])

    model = ScriptedModel(messages=replies())
    return model


def measure(brain: Brain, *, hide: bool, conversations: int) -> dict[str, int]:
    ran = {"search": 0, "search_snapshot": 0, "track_order": 0}

    @tool
    def search(q: str) -> dict:
        """Search the live catalog."""
        ran["search"] += 1
        return {"results": []}

    @tool
    def search_snapshot(q: str) -> dict:
        """Search yesterday's catalog snapshot."""
        ran["search_snapshot"] += 1
        return {"results": [{"name": "usb cable"}]}

    @tool
    def track_order(order_id: str) -> dict:
        """Track an order."""
        ran["track_order"] += 1
        return {"status": "shipped"}

    registry = Registry(
        Policy(failure_threshold=1, cooldown_ms=10**9, cooldown_max_ms=10**9),
        clock=FakeClock(),
        default_timeout=2.0,
        default_enforce="cooperative",
        local_tools={"search_snapshot"},
    )
    options = {"search": {"fallback": "search_snapshot"}, "search_snapshot": {}}
    guard = ToolbreakerMiddleware(registry=registry, tools=options, hide_open_tools=hide)
    guard.breaker_of("search").allow().record("failure")  # the search provider is down
    model = scripted(brain)
    agent = create_agent(model, [search, search_snapshot, track_order], middleware=[guard])
    rejected = 0
    for n in range(conversations):
        done = agent.invoke(
            {"messages": [HumanMessage("find a usb cable")]}, context={"task_id": f"t{n}"}
        )
        rejected += sum(
            isinstance(m, ToolMessage) and m.name == "search" and "tool_unavailable" in m.text
            for m in done["messages"]
        )
    return {"model_calls": len(model.prompts), "rejected": rejected, "ran": sum(ran.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100)
    args = parser.parse_args(argv)
    n = args.conversations
    print(f"{n} conversations, search breaker open\n")
    print(
        f"{'model':10s} {'mode':8s} {'model calls':>12s} {'rejected calls':>15s} {'tool runs':>10s}"
    )
    for name, brain in (("obedient", obedient), ("stubborn", stubborn)):
        rows = {hide: measure(brain, hide=hide, conversations=n) for hide in (False, True)}
        for hide, row in rows.items():
            mode = "hide" if hide else "default"
            print(
                f"{name:10s} {mode:8s} {row['model_calls']:12d} {row['rejected']:15d} "
                f"{row['ran']:10d}"
            )
        saved_calls = rows[False]["model_calls"] - rows[True]["model_calls"]
        saved_rejected = rows[False]["rejected"] - rows[True]["rejected"]
        print(
            f"{name:10s} saved    {saved_calls:12d} {saved_rejected:15d}"
            f"   ({saved_calls / n:.1f} model calls per conversation)\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
