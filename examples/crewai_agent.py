"""A CrewAI crew behind toolbreaker, offline: no API key, a scripted BaseLLM.

The catalog search is down (real HTTP 503s from the local tool service): the breaker
opens, the next search never leaves the process, and the model switches to the snapshot
fallback it was told about, then opens a ticket (a write with the guard's idempotency
key). A second crew, with its own run guard and the same registry, is refused search at
once. A third loops on one lookup and is stopped by the run guard: CrewAI's own path ends
the run and the stop packet shows what the model's tokens cost.

Run: python examples/crewai_agent.py
"""

from __future__ import annotations

import ast
import json
import os
import urllib.parse
import warnings
from pathlib import Path
from typing import Any

# CrewAI's telemetry, tracing and first-run prompt, off: this example runs offline.
os.environ.update(
    CREWAI_DISABLE_TELEMETRY="true",
    OTEL_SDK_DISABLED="true",
    CREWAI_TESTING="true",
    CREWAI_TRACING_ENABLED="false",
)
with warnings.catch_warnings():  # crewai's import warns about its own modules
    warnings.simplefilter("ignore")
    from crewai import Agent, Crew, Task
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import BaseTool
    from pydantic import BaseModel

from toolbreaker import Budget, ModelPrice, Registry, RunGuard
from toolbreaker.integrations.crewai import protect, run_stop
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import ToolService, request_json

SHEET = Path(__file__).with_name("breakers.toml")
PRICES = {"scripted-*": ModelPrice("0.15", "0.60")}  # per million tokens, the user's table


def act(tool: str, **args: Any) -> str:
    print(f"  model -> {tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
    return f"Thought: I should use {tool}\nAction: {tool}\nAction Input: {json.dumps(args)}"


def final(text: str) -> str:
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


def observed(messages: list[dict[str, Any]]) -> Any:
    """The observation CrewAI appended to the model's last message, printed as read."""
    last = messages[-1]
    if last["role"] != "assistant" or "\nObservation:" not in last["content"]:
        return None
    text = last["content"].split("\nObservation:", 1)[1].strip().splitlines()[0]
    print(f"  model <- {text[:150]}")
    try:
        return json.loads(text)  # the guard's answers are JSON
    except ValueError:
        return ast.literal_eval(text)  # a tool's dict, as CrewAI words it


class ShoppingModel(BaseLLM):
    """Retries the search until told it is unavailable, then follows the advice."""

    def __init__(self) -> None:
        super().__init__(model="scripted-shopper")
        self.searches = 0

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self._track_token_usage_internal({"prompt_tokens": 900, "completion_tokens": 60})
        seen = observed(messages)
        if seen is None or (seen.get("retryable") and "tool_unavailable" not in seen):
            self.searches += 1
            return act("search_catalog", q=f"usb cable ({self.searches})")
        if seen.get("tool_unavailable"):
            return act(seen["fallback"], q="usb cable")
        if "results" in seen:
            return act("create_ticket", title="catalog search is down", body="seen by the agent")
        return final("Found cables in yesterday's snapshot; prices may be out of date.")

    def supports_function_calling(self) -> bool:
        return False


class LoopingModel(ShoppingModel):
    """Asks for the same two orders again and again, as a confused model does."""

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self._track_token_usage_internal({"prompt_tokens": 900, "completion_tokens": 60})
        observed(messages)
        self.searches += 1
        return act("get_order", order_id=("A-1001", "A-1002")[self.searches % 2])


class Query(BaseModel):
    q: str


class OrderId(BaseModel):
    order_id: str


class NewTicket(BaseModel):
    title: str
    body: str
    idempotency_key: str = ""  # filled in by the run guard; the model's value is dropped


class Search(BaseTool):
    name: str = "search_catalog"
    description: str = "Search the live catalog."
    args_schema: type[BaseModel] = Query
    url: str

    def _run(self, q: str) -> Any:
        path = "search" if self.name == "search_catalog" else "search_snapshot"
        return request_json("GET", f"{self.url}/{path}?q={urllib.parse.quote(q)}", timeout=4.0)


class GetOrder(BaseTool):
    name: str = "get_order"
    description: str = "Look an order up."
    args_schema: type[BaseModel] = OrderId
    url: str

    def _run(self, order_id: str) -> Any:
        return request_json("GET", f"{self.url}/orders/{order_id}", timeout=4.0)


class CreateTicket(BaseTool):
    name: str = "create_ticket"
    description: str = "Open a ticket for the operations team."
    args_schema: type[BaseModel] = NewTicket
    url: str

    def _run(self, title: str, body: str, idempotency_key: str = "") -> Any:
        print(f"  create_ticket runs with Idempotency-Key {idempotency_key}")
        payload = {"title": title, "body": body}
        headers = {"Idempotency-Key": idempotency_key}
        url = f"{self.url}/tickets"
        return request_json("POST", url, body=payload, headers=headers, timeout=4.0)


def crew_of(llm: BaseLLM, url: str) -> Crew:
    snapshot = Search(name="search_catalog_snapshot", url=url)
    snapshot.description = "Search yesterday's snapshot of the catalog."
    tools = [Search(url=url), snapshot, GetOrder(url=url), CreateTicket(url=url)]
    agent = Agent(
        role="shop assistant",
        goal="help the customer",
        backstory="careful with other people's money",
        llm=llm,
        tools=tools,
        cache=False,
        max_retry_limit=0,
    )
    task = Task(description="help", expected_output="an answer", agent=agent)
    return Crew(agents=[agent], tasks=[task])


def guard_for(task: str, journal: MemoryStore, registry: Registry, **budget: Any) -> RunGuard:
    guard = RunGuard(task, budget=Budget(prices=PRICES, **budget), journal=journal)
    guard.ensure_tool(
        "create_ticket",
        risk="reversible_write",
        breaker=registry.get("tickets", "write"),
        business_key=("title",),
    )
    return guard


def main() -> None:
    with ToolService() as service:
        registry = Registry.from_toml(SHEET)  # process-wide: every crew shares these breakers
        journal = MemoryStore()
        service.outage("GET /search")

        for n, user in enumerate(["alice", "bob"], start=1):
            print(f"crew {n} ({user}): the catalog search answers 503")
            crew = crew_of(ShoppingModel(), service.url)
            guard = guard_for(f"help-{user}", journal, registry)
            with protect(crew, guard=guard, registry=registry):
                result = crew.kickoff()
            print(f"  answer: {result.raw}")
            print(f"  searches that reached the service so far: {service.hits['GET /search']}\n")

        print("crew 3: a model that repeats itself")
        crew = crew_of(LoopingModel(), service.url)
        guard = guard_for("help-carol", journal, registry, max_repeats=2)
        with protect(crew, guard=guard, registry=registry):
            try:
                crew.kickoff()
            except ValueError as exc:
                stop = run_stop(exc, guard)
                if stop is None:
                    raise
                print(f"  run stopped by the guard; CrewAI said: {exc}")
                print("  stop packet:")
                print("\n".join("    " + line for line in stop.packet.to_json().splitlines()))


if __name__ == "__main__":
    main()
