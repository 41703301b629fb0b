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
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, Final

from toolbreaker.runtime._fleet._registry import Registry
from toolbreaker.runtime._run._guard import RunGuard
from toolbreaker.testing._exercise import ExerciseContext
from toolbreaker.testing._service import request_json

__all__ = [
    "MalformedAnswer",
    "model_plan",
    "model_script",
    "next_call",
    "scripted_agent",
    "service_tools",
    "ticket_options",
    "unguarded",
    "unprotected_agent",
]

Tool = Callable[..., Any]

QUERIES: Final = tuple(f"usb-c cable {n}" for n in range(1, 13))
TITLES: Final = ("Broken cable", "broken  cable", "BROKEN CABLE", " Broken Cable ")
CUSTOMER: Final = "c-1842"
MODEL_RETRIES: Final = 4  # a model told "retryable" tries again, up to this many times
INSIST: Final = 4  # calls a model that insists makes after "unavailable"
ALTERNATIONS: Final = 16


class MalformedAnswer(Exception):
    """A 2xx answer of the wrong shape, raised by a tool as the bad gateway it is (502)."""

    status_code = 502


def service_tools(ctx: ExerciseContext) -> dict[str, Tool]:
    """The bundled service's tools as plain functions over HTTP, through ``ctx.base_url``.

    A read whose answer lacks what it must hold (or does not parse) raises
    :class:`MalformedAnswer`: a malformed success is a failure of the dependency.
    """
    base, timeout = ctx.base_url, ctx.timeout

    def get(path: str, needs: str) -> dict[str, Any]:
        try:
            answer = request_json("GET", base + path, timeout=timeout)
        except ValueError as exc:
            raise MalformedAnswer(f"unreadable answer from {path}: {exc}") from exc
        if needs not in answer:
            raise MalformedAnswer(f"answer from {path} has no {needs!r}")
        return answer

    def search_catalog(query: str) -> dict[str, Any]:
        return get(f"/search?q={urllib.parse.quote(query)}", "results")

    def refine_search(query: str) -> dict[str, Any]:
        return get(f"/search?q={urllib.parse.quote(query + ' refined')}", "results")

    def search_catalog_snapshot(query: str) -> dict[str, Any]:
        return get(f"/search_snapshot?q={urllib.parse.quote(query)}", "results")

    def get_order(order_id: str) -> dict[str, Any]:
        return get(f"/orders/{urllib.parse.quote(order_id)}", "status")

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


def failed(result: Any) -> bool:
    """Whether a tool's result (or what toolbreaker told the model) is a failure."""
    return not isinstance(result, Mapping) or result.get("ok") is False


def _stopped(result: Any) -> bool:
    return isinstance(result, Mapping) and bool(result.get("run_stopped"))


def unavailable(result: Any) -> bool:
    """Whether the model was told the tool is out of service (a breaker is open)."""
    return isinstance(result, Mapping) and bool(result.get("tool_unavailable"))


#: One step of the scripted model: the tool it calls and the arguments.
Call = tuple[str, dict[str, Any]]
#: The scripted model: yields its calls, is sent each call's result, returns when done.
Plan = Generator[Call, Any, None]


def ask(
    name: str, args: dict[str, Any], *, retries: int = MODEL_RETRIES
) -> Generator[Call, Any, Any]:
    """One tool call as a model makes it; the last result.

    Sent again (``retries`` times at most) while the result is a failure that does not
    say it is final.
    """
    result = yield (name, args)
    for _ in range(retries):
        if not failed(result) or unavailable(result) or _stopped(result):
            break
        if isinstance(result, Mapping) and result.get("retryable") is False:
            break
        result = yield (name, args)
    return result


def model_plan(behaviour: str) -> Plan:
    """The scripted model as a generator of ``(tool, arguments)``, sent each result.

    A result is the tool's JSON result, or what toolbreaker told the model instead.

    Being a generator, the same model drives plain functions (:func:`model_script`) and
    a framework's fake chat model (replay the results of a turn, take the next call).
    """
    if behaviour == "alternate":
        for n in range(ALTERNATIONS):
            result = yield (("search_catalog", "refine_search")[n % 2], {"query": "usb-c cable"})
            if _stopped(result):
                return
        return
    if behaviour == "reword":
        for title in TITLES:
            result = yield ("create_ticket", {"customer": CUSTOMER, "title": title})
            if not failed(result) or _stopped(result) or unavailable(result):
                return
        return
    for query in QUERIES:
        result = yield from ask("search_catalog", {"query": query})
        if _stopped(result):
            return
        if unavailable(result):
            for _ in range(INSIST if behaviour == "insist" else 0):
                result = yield ("search_catalog", {"query": query})
                if _stopped(result):
                    return
            fallback = result.get("fallback")
            if isinstance(fallback, str):
                yield (fallback, {"query": query})
            break
        if failed(result):
            break  # a model gives up on the catalog here
    result = yield from ask("get_order", {"order_id": "A-1001"})
    if _stopped(result):
        return
    yield from ask("create_ticket", {"customer": CUSTOMER, "title": TITLES[0]})


def model_script(tools: Mapping[str, Tool], behaviour: str) -> list[str]:
    """Run the scripted model with plain ``tools``; the calls it made, in order."""
    plan, did = model_plan(behaviour), []
    try:
        name, args = next(plan)
        while True:
            did.append(name)
            tool = tools.get(name)
            result = tool(**args) if tool else {"ok": False, "error": f"no tool {name!r}"}
            name, args = plan.send(result)
    except StopIteration:
        return did


def next_call(behaviour: str, results: Iterable[Any]) -> Call | None:
    """The scripted model's next call once it has read ``results``; ``None`` when done.

    ``results`` are the results of the calls it made so far, in order (a tool's JSON, or
    what toolbreaker told the model instead). A framework's fake chat model reads them from
    the conversation at each request and answers with this call, stateless as a real
    model is::

        call = next_call(ctx.scenario.behaviour, results_in(messages))
        return final_answer("Done.") if call is None else tool_call(*call)
    """
    plan = model_plan(behaviour)
    try:
        call = next(plan)
        for result in results:
            call = plan.send(result)
    except StopIteration:
        return None
    return call


def ticket_options(ctx: ExerciseContext) -> dict[str, Any]:
    """How the reference agents guard the bundled service's ticket write, as tool options.

    A reversible write whose business action is the customer and the title, verified by
    the ticket id it returns, reconciled by a read-only lookup of its idempotency key and
    recorded with that id: a timeout after its commit is settled, never repeated. Give
    them to ``guard.tool("create_ticket", ...)``, ``guard.ensure_tool`` or an adapter's
    per-tool options.
    """
    find_ticket = service_tools(ctx)["find_ticket"]
    return {
        "risk": "reversible_write",
        "business_key": ["customer", "title"],
        "verify": lambda r: isinstance(r, Mapping) and str(r.get("id", "")).startswith("T-"),
        "reconcile": lambda key, _args: find_ticket(key),
        "external_id": lambda r: r["id"],
    }


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
    catalog = registry.get("catalog", "read")
    orders = registry.get("orders", "read")
    tickets = registry.get("tickets", "write")
    guard = ctx.run_guard()
    for name in ("search_catalog", "refine_search"):
        guard.tool(name, breaker=catalog)(raw[name])
    guard.tool("search_catalog_snapshot")(raw["search_catalog_snapshot"])
    guard.tool("get_order", breaker=orders)(raw["get_order"])
    guard.tool("create_ticket", breaker=tickets, **ticket_options(ctx))(raw["create_ticket"])
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


def unguarded(fn: Tool) -> Tool:
    """``fn`` as a tool without toolbreaker: every error goes back to the model as retryable.

    What a framework's plain error handler does; the other side of a comparison (the
    reference :func:`unprotected_agent`, ``toolbreaker demo --retry-only``).
    """

    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the model sees the error text
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "retryable": True}

    return tool


def unprotected_agent(ctx: ExerciseContext) -> None:
    """The same scripted model with no toolbreaker at all: its report must fail."""
    raw = service_tools(ctx)
    model_script({name: unguarded(fn) for name, fn in raw.items()}, ctx.scenario.behaviour)
