"""toolbreaker exercise against a real CrewAI crew, in every shipped scenario.

A ``BaseLLM`` subclass plays the model: at each request it replays every observation of
the task so far into the scripted model's plan (``model_plan``) and answers with its next
call in CrewAI's own ReAct format. The tools are CrewAI ``@tool`` functions calling the
fault proxy over real HTTP, guarded by ``protect()`` with the exercise's registry and run
guard. Its report holds in every scenario; the same crew without ``protect()`` fails.
CrewAI's environment (telemetry, tracing, its open SQLite files) is the one its own
adapter tests set up, imported from them.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from crewai import Crew
    from crewai.tools import BaseTool

# CrewAI's adapter tests' module skips without crewai; its autouse fixtures import CrewAI
# quietly (the tests do, never the suite's collection) and collect its open SQLite files.
from test_crewai import (  # noqa: F401 - crewai_imported, collect_crewai_connections: autouse
    collect_crewai_connections,
    crewai_imported,
)
from test_crewai import pytestmark as crewai_marks

pytestmark = crewai_marks

from exercise_checks import (  # noqa: E402
    IDS,
    SHIPPED,
    UNGUARDED,
    fails_without_toolbreaker,
    holds_every_promise,
)
from toolbreaker import idempotency_key  # noqa: E402
from toolbreaker.testing import ExerciseContext, service_tools  # noqa: E402
from toolbreaker.testing._agents import ticket_options  # noqa: E402

MAX_STEPS = 60  # far above any scenario's calls: CrewAI forces an answer at max_iter


def crewai_tools(ctx: ExerciseContext) -> list[BaseTool]:
    from crewai.tools import tool

    raw = service_tools(ctx)

    @tool("search_catalog")
    def search_catalog(query: str) -> dict[str, Any]:
        """Search the live catalog."""
        return raw["search_catalog"](query)

    @tool("refine_search")
    def refine_search(query: str) -> dict[str, Any]:
        """Refine a catalog search."""
        return raw["refine_search"](query)

    @tool("search_catalog_snapshot")
    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        """Search yesterday's catalog snapshot."""
        return raw["search_catalog_snapshot"](query)

    @tool("get_order")
    def get_order(order_id: str) -> dict[str, Any]:
        """Track an order."""
        return raw["get_order"](order_id)

    @tool("create_ticket")
    def create_ticket(customer: str, title: str) -> dict[str, Any]:
        """Open a support ticket."""
        return raw["create_ticket"](customer, title, idempotency_key() or "")

    return [search_catalog, refine_search, search_catalog_snapshot, get_order, create_ticket]


def crew_of(ctx: ExerciseContext, tools: list[BaseTool]) -> Crew:
    from crewai import Agent, Crew, Task
    from crewai_parts import Following

    agent = Agent(
        role="support",
        goal="help the customer",
        backstory="a careful support agent",
        llm=Following(ctx.scenario.behaviour),
        tools=tools,
        max_iter=MAX_STEPS,
        verbose=False,
    )
    task = Task(description=ctx.scenario.prompt, expected_output="an answer", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False)


def crewai_agent(ctx: ExerciseContext) -> Any:
    """The user's crew under protect(), with the exercise's registry and run guard."""
    from toolbreaker.integrations.crewai import protect

    registry = ctx.registry
    registry.get("catalog-snapshot", tool="search_catalog_snapshot")
    catalog = registry.get("catalog", tool="search_catalog", fallback="search_catalog_snapshot")
    registry.get("orders", tool="get_order")
    guard = ctx.run_guard()
    guard.ensure_tool("refine_search", breaker=catalog)  # one provider, whichever tool
    tickets = registry.get("tickets", "write")
    guard.ensure_tool("create_ticket", breaker=tickets, **ticket_options(ctx))
    crew = crew_of(ctx, crewai_tools(ctx))
    # A run the guard stopped ends with CrewAI's ValueError; the packet says why.
    with protect(crew, guard=guard, registry=registry), contextlib.suppress(ValueError):
        crew.kickoff()
    return guard


def bare_crewai_agent(ctx: ExerciseContext) -> None:
    """The same crew without toolbreaker: a tool's error goes to CrewAI's own handler,
    which runs the tool again (up to three times in all) and tells the model the error."""
    crew_of(ctx, crewai_tools(ctx)).kickoff()


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_protected_crew_holds_every_promise(path):
    """protect(crew): every shipped scenario's three promises hold, measured at the
    service, and every fault was really met."""
    holds_every_promise(path, crewai_agent)


@pytest.mark.parametrize("name", UNGUARDED)
def test_the_same_crew_without_toolbreaker_fails(name):
    """Without protect() the report fails: no packet, and the provider hit too often or a
    ticket opened twice."""
    fails_without_toolbreaker(name, bare_crewai_agent)
