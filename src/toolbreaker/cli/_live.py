"""``toolbreaker demo``: a scripted agent against a real, flaky local tool service.

The agent answers six customer turns. Each turn needs catalog data (``search_catalog``,
whose provider is down for the first turns) and an order status (``get_order``, always
healthy). The scripted "model" does what a model does with tool results: it retries a
transient error, and when told a tool is out of service it follows the instruction and
uses the named fallback. ``--retry-only`` runs the same turns with no breaker, so the
difference in remote attempts is visible.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from toolbreaker.core._breaker.receipt import dump_receipt, summarise
from toolbreaker.core._breaker.state import Transition
from toolbreaker.core._breaker.trace import trace_event
from toolbreaker.runtime._fleet._registry import Registry
from toolbreaker.runtime._result import system_prompt_line
from toolbreaker.testing import ToolService, request_json
from toolbreaker.testing._agents import Call, Plan, ask, failed, unavailable, unguarded

__all__ = ["run_live"]

# Compressed time: a real policy would cool down for tens of seconds, not three turns.
SHEET: dict[str, Any] = {
    "defaults": {"timeout_ms": 1000, "enforce": "cooperative"},
    "tools": {"local": ["search_catalog_snapshot"]},
    "catalog": {
        "read": {
            "tool": "search_catalog",
            "fallback": "search_catalog_snapshot",
            "fallback_note": "say in your answer that prices may be out of date",
            "owner": "catalog-team",
            "failure_threshold": 3,
            "cooldown_ms": 1_500,
            "success_threshold": 2,
            "lease_ttl_ms": 5_000,
        }
    },
    "orders": {"read": {"tool": "get_order", "failure_threshold": 3, "cooldown_ms": 1_500}},
}
TURNS = 6
OUTAGE_TURNS = 4  # the provider recovers before turn 5
TURN_MS = 450  # the breakers' clock advances this much a turn (and 1 ms a call)
MODEL_RETRIES = 3  # a model that sees "error, retryable" tries again, up to this many times
QUERY = "usb-c cable"


class _TurnClock:
    """The breakers' clock: the turns', not the wall's.

    A turn is :data:`TURN_MS` later than the one before and each call in it 1 ms later
    than the last, so the breaker opens, cools down and recovers on the same turns, with
    the same receipt hash, on a quiet machine and a loaded one (on the wall's clock a slow
    machine let the cooldown end during the outage, and the story changed).
    """

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms

    def turn(self, number: int) -> None:
        self.ms = max(self.ms, (number - 1) * TURN_MS)

    def call(self) -> None:
        self.ms += 1


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def row(self, turn: object, tool: str, outcome: str) -> None:
        self.line(f"  {turn!s:>4}  {tool:<24} {outcome}")


def run_live(
    out: TextIO,
    *,
    retry_only: bool = False,
    save: Callable[[dict[str, str]], None] | None = None,
    save_name: Path | None = None,
) -> int:
    """Run the live demonstration; returns the exit code.

    ``save`` receives the files to write (``trace.jsonl``, ``policy.toml``,
    ``receipt.json``); ``save_name`` is the folder they go to, for the message.
    """
    p = _Printer(out)
    with ToolService() as service:
        base = service.url

        def search_catalog(query: str) -> dict[str, Any]:
            url = f"{base}/search?q={urllib.parse.quote(query)}"
            return request_json("GET", url, timeout=1.0)

        def search_catalog_snapshot(query: str) -> dict[str, Any]:
            url = f"{base}/search_snapshot?q={urllib.parse.quote(query)}"
            return request_json("GET", url, timeout=1.0)

        def get_order(order_id: str) -> dict[str, Any]:
            return request_json("GET", f"{base}/orders/{order_id}", timeout=1.0)

        service.outage("GET /search", status=503)
        mode = "RETRY ONLY (no breaker)" if retry_only else "with toolbreaker"
        p.line(f"toolbreaker demo: a scripted agent, {mode}, against a flaky tool service")
        p.line(f"  service: {base} (real HTTP on 127.0.0.1); search is down for turns 1-4")
        records: list[Transition] = []
        clock = _TurnClock()
        registry = None if retry_only else _registry(records, p, clock)
        raw = {"search_catalog": search_catalog, "get_order": get_order}
        tools = _tools(registry, raw)
        tools["search_catalog_snapshot"] = search_catalog_snapshot
        p.line()
        p.line(f"  {'turn':>4}  {'tool':<24} outcome")
        shown_instruction = False
        for turn in range(1, TURNS + 1):
            if turn == OUTAGE_TURNS + 1:
                service.recover("GET /search")
                p.line("        -- the search provider recovers --")
            clock.turn(turn)
            instruction = _model_turn(
                turn, tools, p, lambda: service.hits.get("GET /search", 0), clock.call
            )
            if instruction and not shown_instruction:
                shown_instruction = True
                p.line()
                p.line("        the model was told:")
                p.line(f"        {json.dumps(instruction, indent=None)}")
                p.line()
        hits = service.hits
    p.line()
    search_hits = hits.get("GET /search", 0)
    p.line(f"  remote attempts on the failing search provider: {search_hits}")
    if registry is None:
        p.line("  every failure went back to the provider; compare: toolbreaker demo")
        return 0
    catalog = registry.get("catalog", "read")
    stats = catalog.stats
    p.line(
        f"  local rejections (never reached the provider):   {stats.rejected}\n"
        f"  openings: {sum(stats.opens.values())}; final state: {catalog.state.phase}"
    )
    p.line("  compare with a plain retrying agent:              toolbreaker demo --retry-only")
    receipt = _receipt(registry, records)
    # A real service, on the turns' clock: the same transitions at the same instants,
    # so the same hash, on any machine. Said where the hash is printed, with its replay.
    p.line(
        f"  receipt_hash {receipt['receipt_hash']} (the same every run: the breaker runs "
        "on the turns' clock; --save DIR keeps its trace, whose replay gives this hash again)"
    )
    p.line(f"  system prompt line: {system_prompt_line()}")
    if save is not None:
        save(_files(registry, records, receipt))
        _saved(p, save_name or Path())
    registry.close()
    return 0


def _saved(p: _Printer, folder: Path) -> None:
    p.line(f"  saved trace.jsonl, policy.toml and receipt.json in {folder}; replay with")
    p.line(f"  toolbreaker replay {folder / 'trace.jsonl'} --policy {folder / 'policy.toml'}")


def _turn() -> Plan:
    """One customer turn of the scripted model: the catalog, then the order.

    It retries what it is told it may retry and goes to the fallback it is told of.
    """
    result = yield from ask("search_catalog", {"query": QUERY}, retries=MODEL_RETRIES)
    fallback = result.get("fallback") if unavailable(result) else None
    if isinstance(fallback, str):
        yield (fallback, {"query": QUERY})
    yield ("get_order", {"order_id": "A-1001"})


def _model_turn(
    turn: int,
    tools: dict[str, Callable[..., Any]],
    p: _Printer,
    remote: Callable[[], int],
    tick: Callable[[], None],
) -> dict[str, Any] | None:
    """One scripted model turn, a row per call; the first tool-unavailable result it saw."""
    seen: dict[str, Any] | None = None
    plan = _turn()
    call: Call | None = next(plan)
    while call is not None:
        name, args = call
        tick()
        before = remote()
        result = tools[name](**args)
        where = "remote" if remote() > before else "local, nothing sent"
        try:
            call = plan.send(result)
        except StopIteration:
            call = None
        again = call is not None and call[0] == name
        p.row(turn, name, _outcome(name, result, where, again))
        if seen is None and unavailable(result):
            seen = result
    return seen


def _outcome(name: str, result: dict[str, Any], where: str, again: bool) -> str:
    """What a demo row says of one call's result."""
    if unavailable(result):
        seconds = result["retry_after_seconds"]
        return f"OUT OF SERVICE ({where}): told not to retry for {seconds} s"
    if failed(result):
        status = result["error"].split(":", 1)[-1].strip()[:40]
        then = "model retries" if again else "gave up: a model here starts guessing prices"
        return f"error ({where}: {status}), {then}"
    if name == "get_order":
        return f"ok, {result.get('status', result)}"
    if "as_of" in result:
        return (
            f"ok, {len(result['results'])} items as of {result['as_of'][:10]}: "
            "answer flags stale prices"
        )
    return f"ok ({where}), {len(result['results'])} live items"


def _registry(records: list[Transition], p: _Printer, clock: _TurnClock) -> Registry:
    registry = Registry.from_dict(SHEET, clock=clock)
    for breaker in (registry.get("catalog", "read"), registry.get("orders", "read")):
        breaker.add_listener(lambda record, _b: records.append(record))
    policy = registry.get("catalog", "read").policy
    p.line(
        f"  policy: open after {policy.failure_threshold} failures, cool down "
        f"{policy.cooldown_ms / 1000:g} s, close after {policy.success_threshold} good probes "
        f"(compressed time: the breaker's clock advances {TURN_MS / 1000:g} s a turn)"
    )
    return registry


def _tools(
    registry: Registry | None, raw: dict[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]]:
    if registry is None:
        return {name: unguarded(fn) for name, fn in raw.items()}
    return {name: registry.for_tool(name).guard(fn) for name, fn in raw.items()}


def _numbered(records: list[Transition]) -> list[Transition]:
    """``records`` with each call id replaced by its rank of first appearance (``"1"``, ...).

    A call id starts with its process's token (the pid and random digits: ids of two
    processes never meet in a shared store), so a receipt of them would differ in every
    process. Numbered in order, the same run gives the same receipt in any process, and
    the saved trace's replay gives it again.
    """
    rank: dict[str, str] = {}

    def numbered(record: Transition) -> Transition:
        call = record.event.call
        if call is None:
            return record
        event = dataclasses.replace(record.event, call=rank.setdefault(call, str(len(rank) + 1)))
        return dataclasses.replace(record, event=event)

    return [numbered(record) for record in records]


def _receipt(registry: Registry, records: list[Transition]) -> dict[str, Any]:
    """The receipt of the catalog breaker: one policy, its transitions, its final state."""
    catalog = registry.get("catalog", "read")
    mine = [r for r in _numbered(records) if r.dependency == catalog.key]
    return summarise(catalog.policy, {catalog.key: (mine, catalog.state)})


def _files(
    registry: Registry, records: list[Transition], receipt: dict[str, Any]
) -> dict[str, str]:
    policy = registry.get("catalog", "read").policy
    lines = (trace_event(r) for r in _numbered(records) if r.dependency == "catalog:read")
    trace = [line for line in lines if line is not None]
    return {
        "trace.jsonl": "".join(json.dumps(e) + "\n" for e in trace),
        "policy.toml": "".join(
            f"{k} = {json.dumps(v)}\n" for k, v in policy.to_dict().items() if v is not None
        ),
        "receipt.json": dump_receipt(receipt),
    }
