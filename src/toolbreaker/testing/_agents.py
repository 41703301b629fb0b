"""Reference agents for ``toolbreaker exercise``: the demo's scripted model, guarded or not.

Both agents run the same scripted "model" against the bundled tool service's routes
(through the fault proxy): it searches the catalog, tracks an order and opens a ticket,
retrying what it is told is retryable, and following the scenario's ``behaviour``
(alternating two tools, rewording a ticket's title, insisting on a tool it was told is
unavailable). :func:`scripted_agent` guards its tools with a registry and a run guard;
:func:`unprotected_agent` does not, so its report fails: that is what it is for.

Run them as a user runs their own agent::

    toolbreaker exercise --shipped --agent toolbreaker.testing:scripted_agent
    toolbreaker exercise --shipped --agent toolbreaker.testing:unprotected_agent  # exit 1
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

from toolbreaker.runtime.fleet._registry import Registry
from toolbreaker.runtime.run._guard import RunGuard
from toolbreaker.testing._exercise import ExerciseContext
from toolbreaker.testing._service import request_json

__all__ = ["model_script", "scripted_agent", "service_tools", "unprotected_agent"]

Tool = Callable[..., Any]

QUERIES: Final = tuple(f"usb-c cable {n}" for n in range(1, 13))
TITLES: Final = ("Broken cable", "broken  cable", "BROKEN CABLE", " Broken Cable ")
CUSTOMER: Final = "c-1842"
MODEL_RETRIES: Final = 4  # a model told "retryable" tries again, up to this many times
INSIST: Final = 4  # calls a model that insists makes after "unavailable"
ALTERNATIONS: Final = 16


def service_tools(ctx: ExerciseContext) -> dict[str, Tool]:
    """The bundled service's tools as plain functions over HTTP, through ``ctx.base_url``."""
    base, timeout = ctx.base_url, ctx.timeout

    def get(path: str) -> dict[str, Any]:
        try:
            return request_json("GET", base + path, timeout=timeout)
        except ValueError:  # cut-off JSON: the tool answers something of the wrong shape
            return {"unreadable": True}

    def search_catalog(query: str) -> dict[str, Any]:
        return get(f"/search?q={urllib.parse.quote(query)}")

    def refine_search(query: str) -> dict[str, Any]:
        return get(f"/search?q={urllib.parse.quote(query + ' refined')}")

    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        return get(f"/search_snapshot?q={urllib.parse.quote(query)}")

    def get_order(order_id: str) -> dict[str, Any]:
        return get(f"/orders/{urllib.parse.quote(order_id)}")

    def create_ticket(customer: str, title: str, idempotency_key: str = "") -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = {"title": title, "body": f"for {customer}"}
        return request_json("POST", base + "/tickets", body=body, headers=headers, timeout=timeout)

    def find_ticket(key: str) -> dict[str, Any] | None:
        found = request_json(
            "GET", f"{base}/tickets?idempotency_key={urllib.parse.quote(key)}", timeout=timeout
        )
        tickets = found.get("tickets") or []
        return tickets[0] if tickets else None

    return {
        "search_catalog": search_catalog,
        "refine_search": refine_search,
        "search_catalog_snapshot": search_catalog_snapshot,
        "get_order": get_order,
        "create_ticket": create_ticket,
        "find_ticket": find_ticket,
    }


def _failed(result: Any) -> bool:
    return not isinstance(result, Mapping) or result.get("ok") is False or "unexpected" in result


def _stopped(result: Any) -> bool:
    return isinstance(result, Mapping) and bool(result.get("run_stopped"))


def _unavailable(result: Any) -> bool:
    return isinstance(result, Mapping) and bool(result.get("tool_unavailable"))


def _ask(tool: Tool, **args: Any) -> Any:
    """One tool call as a model makes it: again while the result says it may retry."""
    result = tool(**args)
    for _ in range(MODEL_RETRIES):
        if not _failed(result) or _unavailable(result) or _stopped(result):
            break
        if isinstance(result, Mapping) and result.get("retryable") is False:
            break
        result = tool(**args)
    return result


def model_script(tools: Mapping[str, Tool], behaviour: str) -> list[str]:
    """The scripted model: runs ``behaviour`` with ``tools``; returns what it did, in words."""
    did: list[str] = []
    if behaviour == "alternate":
        for n in range(ALTERNATIONS):
            name = ("search_catalog", "refine_search")[n % 2]
            result = tools[name](query="usb-c cable")
            did.append(name)
            if _stopped(result):
                did.append("stopped")
                return did
        return did
    if behaviour == "reword":
        for title in TITLES:
            result = tools["create_ticket"](customer=CUSTOMER, title=title)
            did.append(f"create_ticket({title!r})")
            if not _failed(result) or _stopped(result) or _unavailable(result):
                break
        return did
    for query in QUERIES:
        result = _ask(tools["search_catalog"], query=query)
        did.append("search_catalog")
        if _stopped(result):
            return did
        if _unavailable(result):
            if behaviour == "insist":
                for _ in range(INSIST):
                    tools["search_catalog"](query=query)
                    did.append("search_catalog (insisting)")
            fallback = result.get("fallback")
            if fallback in tools:
                tools[fallback](query=query)
                did.append(str(fallback))
            break
        if _failed(result):
            break  # a model gives up on the catalog here
    for name, args in (
        ("get_order", {"order_id": "A-1001"}),
        ("create_ticket", {"customer": CUSTOMER, "title": TITLES[0]}),
    ):
        result = _ask(tools[name], **args)
        did.append(name)
        if _stopped(result):
            break
    return did


def _sheet(ctx: ExerciseContext) -> dict[str, Any]:
    deadline_ms = round(ctx.timeout * 2000)
    return {
        "defaults": {"timeout_ms": deadline_ms, "enforce": "cooperative", "cooldown_ms": 60_000},
        "tools": {"local": ["search_catalog_snapshot"]},
        "catalog": {
            "read": {
                "fallback": "search_catalog_snapshot",
                "fallback_note": "say in your answer that prices may be out of date",
            }
        },
    }


def _malformed_read(result: Any) -> bool:
    return isinstance(result, Mapping) and ("unexpected" in result or "unreadable" in result)


def scripted_agent(ctx: ExerciseContext) -> RunGuard:
    """The scripted model with every tool guarded: breakers per dependency, a run guard.

    Both catalog tools go through one ``catalog`` breaker (one dependency, whichever
    tool the model picks); the ticket write has a business key, verification and a
    read-only reconcile check, so a timeout after its commit is settled, not repeated.
    """
    raw = service_tools(ctx)
    registry = Registry.from_dict(_sheet(ctx))
    ctx.watch(registry)
    registry.register_local("search_catalog_snapshot", raw["search_catalog_snapshot"])
    catalog = registry.get("catalog", "read", result_is_failure=_malformed_read)
    orders = registry.get("orders", "read")
    tickets = registry.get("tickets", "write")
    guard = ctx.run_guard()
    for name in ("search_catalog", "refine_search"):
        guard.tool(name, breaker=catalog)(raw[name])
    guard.tool("search_catalog_snapshot")(raw["search_catalog_snapshot"])
    guard.tool("get_order", breaker=orders)(raw["get_order"])
    find_ticket = raw["find_ticket"]
    guard.tool(
        "create_ticket",
        risk="reversible_write",
        breaker=tickets,
        business_key=["customer", "title"],
        verify=lambda r: isinstance(r, Mapping) and str(r.get("id", "")).startswith("T-"),
        reconcile=lambda key, _args: find_ticket(key),
        external_id=lambda r: r["id"],
    )(raw["create_ticket"])
    names = ("search_catalog", "refine_search", "search_catalog_snapshot", "get_order")
    tools = {name: _through(guard, name) for name in (*names, "create_ticket")}
    model_script(tools, ctx.scenario.behaviour)
    registry.close()
    return guard


def _through(guard: RunGuard, name: str) -> Tool:
    """The model's view of a guarded tool: keyword arguments in, the guard's result out."""

    def tool(**args: Any) -> Any:
        return guard.call(name, args)

    return tool


def _naive(fn: Tool) -> Tool:
    """A tool wrapper without a breaker: every error goes back to the model as retryable."""

    def tool(**args: Any) -> Any:
        try:
            return fn(**args)
        except Exception as exc:  # noqa: BLE001 - the model sees the error text
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "retryable": True}

    return tool


def unprotected_agent(ctx: ExerciseContext) -> None:
    """The same scripted model with no toolbreaker at all: its report must fail."""
    raw = service_tools(ctx)
    model_script({name: _naive(fn) for name, fn in raw.items()}, ctx.scenario.behaviour)
