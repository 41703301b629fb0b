"""An OpenAI Agents SDK agent behind toolbreaker, fully offline.

The model is the SDK's scripted test model (``agents.testing.ScriptedModel``); the tools
call a real local HTTP service whose live search is down (every request answers 503).
Watch the catalog breaker open, the model switch to the snapshot search it is pointed
to, and then a model stuck in a loop stopped with a stop packet.

Run it: ``python examples/openai_agents_agent.py`` (needs ``toolbreaker[openai-agents]``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

from agents import (
    Agent,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import toolbreaker
from toolbreaker import Policy, Registry, RunGuard, Transition
from toolbreaker.core import changed_phase
from toolbreaker.integrations.openai_agents import protect, run_config
from toolbreaker.testing import ToolService, request_json


def last_result(call: ModelCall) -> str | None:
    """The newest tool result in the model's input: what it reads before its next move."""
    outputs = [
        item["output"]
        for item in call.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return outputs[-1] if outputs else None


def turn(decide: Callable[[Any], list[Any]]) -> ModelStep:
    """One scripted model turn: print the tool result it read, then act on it."""

    def respond(call: ModelCall) -> list[Any]:
        text = last_result(call)
        seen: Any = None
        if text is not None:
            try:
                seen = json.loads(text)
            except ValueError:
                seen = text
            print(f"  model reads: {text[:100]}{'...' if len(text) > 100 else ''}")
            if isinstance(seen, dict) and "instruction" in seen:
                print(f"    instruction: {seen['instruction']}")
        action = decide(seen)
        for item in action:
            if getattr(item, "type", "") == "function_call":
                print(f"  model calls: {item.name}({item.arguments})")
            else:
                print(f"  model says:  {item.content[0].text}")
        return action

    return ModelStep.respond(respond)


def search(query: str, call_id: str) -> list[Any]:
    return [function_call("search_catalog", {"query": query}, call_id=call_id)]


def use_fallback(seen: Any) -> list[Any]:
    # A model following the system-prompt line: tool unavailable -> the named fallback.
    return [function_call(seen["fallback"], {"query": "cable"}, call_id="c4")]


def main() -> None:
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise
    with ToolService() as service:
        service.outage("GET /search")

        @function_tool
        def search_catalog(query: str) -> dict[str, Any]:
            """Search the live catalog (prices are current)."""
            q = urllib.parse.quote(query)
            return request_json("GET", f"{service.url}/search?q={q}", timeout=2)

        @function_tool
        def search_snapshot(query: str) -> dict[str, Any]:
            """Search yesterday's catalog snapshot."""
            q = urllib.parse.quote(query)
            return request_json("GET", f"{service.url}/search_snapshot?q={q}", timeout=2)

        registry = Registry(
            Policy(failure_threshold=2),
            default_timeout=2.0,
            default_enforce="cooperative",
            local_tools={"search_snapshot"},
        )
        catalog = registry.get(
            "catalog",
            "read",
            tool="search_catalog",
            fallback="search_snapshot",
            fallback_note="say that prices may be out of date",
        )

        def show(record: Transition, _breaker: Any) -> None:
            if changed_phase(record):
                print(f"  breaker {record.dependency}: {record.from_phase} -> {record.to_phase}")

        catalog.add_listener(show)
        instructions = f"You help shoppers. {toolbreaker.system_prompt_line()}"

        print("1. The live search is down; the model is told to use the snapshot instead")
        model = ScriptedModel(
            [
                turn(lambda _: search("usb cable", "c1")),
                turn(lambda _: search("usb-c cable", "c2")),
                turn(lambda _: search("cable", "c3")),
                turn(use_fallback),
                turn(lambda seen: [assistant_message("Cables from yesterday's prices: ...")]),
            ]
        )
        agent = Agent(
            name="shop",
            instructions=instructions,
            model=model,
            tools=[search_catalog, search_snapshot],
        )
        guarded = protect(agent, registry=registry, guard=RunGuard("order-help-1"))
        result = asyncio.run(Runner.run(guarded, "find me a cable", run_config=run_config()))
        print(f"  final answer: {result.final_output}")
        print(f"  live search requests sent: {service.hits['GET /search']} (the third was refused)")

        print("\n2. A model that repeats itself is stopped by the run guard")
        ids = itertools.count(1)

        def same_search_again(_seen: Any) -> list[Any]:
            return [function_call("search_snapshot", {"query": "cable"}, call_id=f"r{next(ids)}")]

        looping = ScriptedModel([turn(same_search_again) for _ in range(10)])
        guard = RunGuard("order-help-2")
        agent = Agent(
            name="shop", instructions=instructions, model=looping, tools=[search_snapshot]
        )
        try:
            asyncio.run(
                Runner.run(
                    protect(agent, registry=registry, guard=guard),
                    "find me a cable",
                    run_config=run_config(),
                )
            )
        except ToolInputGuardrailTripwireTriggered as stopped:
            packet = stopped.output.output_info
            print(f"  run stopped: {packet['condition']}: {packet['detail']}")
            print("  stop packet:")
            print("  " + json.dumps(packet, indent=2, sort_keys=True).replace("\n", "\n  "))


if __name__ == "__main__":
    main()
