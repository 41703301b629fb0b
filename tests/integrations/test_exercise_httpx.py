"""toolbreaker exercise against an agent whose tools send through the httpx transport.

The tools are httpx calls through ``BreakerTransport`` (a breaker per dependency, keyed
by route), run by a run guard for budgets, loops and safe writes; the scripted model
(``model_plan``) drives them. Every shipped scenario's promises hold.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import httpx
import pytest

from exercise_checks import IDS, SHIPPED, holds_every_promise
from toolbreaker import Budget
from toolbreaker.errors import CircuitOpen
from toolbreaker.integrations.httpx import BreakerTransport
from toolbreaker.testing import ExerciseContext
from toolbreaker.testing._agents import MalformedAnswer, model_script

DEPENDENCIES = {
    "search": ("catalog", "read"),
    "search_snapshot": ("catalog-snapshot", "read"),
    "orders": ("orders", "read"),
}


def by_route(request: httpx.Request) -> tuple[str, str]:
    first = request.url.path.strip("/").split("/", 1)[0]
    if first == "tickets":
        return ("tickets", "write" if request.method == "POST" else "read")
    return DEPENDENCIES.get(first, (first, "read"))


def httpx_agent(ctx: ExerciseContext) -> Any:
    """Tools over httpx with the breaker transport, under the exercise's run guard."""
    transport = BreakerTransport(registry=ctx.registry, key=by_route)
    client = httpx.Client(base_url=ctx.base_url, transport=transport, timeout=ctx.timeout)
    # A 200 of the wrong shape is a success to a transport (it judges the status line):
    # the run guard stops a tool after its third failure of one kind instead.
    guard = ctx.run_guard(budget=Budget(max_tool_failures=3))

    def get(path: str, needs: str) -> dict[str, Any]:
        try:
            response = client.get(path)
        except CircuitOpen as exc:
            return exc.result
        response.raise_for_status()
        try:
            answer = response.json()
        except ValueError as exc:
            raise MalformedAnswer(f"unreadable answer from {path}") from exc
        if needs not in answer:
            raise MalformedAnswer(f"answer from {path} has no {needs!r}")
        return answer

    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        body = {"title": title, "body": f"for {customer}"}
        try:
            response = client.post(
                "/tickets", json=body, headers={"Idempotency-Key": idempotency_key}
            )
        except CircuitOpen as exc:
            return exc.result
        response.raise_for_status()
        return response.json()

    def find_ticket(key: str) -> dict[str, Any] | None:
        found = client.get(f"/tickets?idempotency_key={urllib.parse.quote(key)}").json()
        return (found.get("tickets") or [None])[0]

    q = urllib.parse.quote
    guard.tool("search_catalog")(lambda query: get(f"/search?q={q(query)}", "results"))
    guard.tool("refine_search")(lambda query: get(f"/search?q={q(query + ' r')}", "results"))
    guard.tool("search_catalog_snapshot")(
        lambda query: get(f"/search_snapshot?q={q(query)}", "results")
    )
    guard.tool("get_order")(lambda order_id: get(f"/orders/{q(order_id)}", "status"))
    guard.tool(
        "create_ticket",
        risk="reversible_write",
        business_key=["customer", "title"],
        verify=lambda r: isinstance(r, dict) and str(r.get("id", "")).startswith("T-"),
        reconcile=lambda key, _args: find_ticket(key),
    )(create_ticket)

    def through(name: str) -> Any:
        return lambda **args: guard.call(name, args)

    names = ("search_catalog", "refine_search", "search_catalog_snapshot", "get_order")
    model_script({n: through(n) for n in (*names, "create_ticket")}, ctx.scenario.behaviour)
    client.close()
    return guard


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_an_agent_over_the_httpx_transport_holds_every_promise(path):
    """BreakerTransport under a run guard: every shipped scenario's promises hold,
    measured at the service, and every fault was really met."""
    holds_every_promise(path, httpx_agent)
