"""``toolbreaker demo``: a scripted agent against a real, flaky local tool service.

The agent answers six customer turns. Each turn needs catalog data (``search_catalog``,
whose provider is down for the first turns) and an order status (``get_order``, always
healthy). The scripted "model" does what a model does with tool results: it retries a
transient error, and when told a tool is out of service it follows the instruction and
uses the named fallback. ``--retry-only`` runs the same turns with no breaker, so the
difference in remote attempts is visible.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from toolbreaker.core.breaker.receipt import dump_receipt, summarise
from toolbreaker.core.breaker.state import Transition
from toolbreaker.core.breaker.trace import trace_event
from toolbreaker.runtime._clock import monotonic_ms
from toolbreaker.runtime._result import system_prompt_line
from toolbreaker.runtime.fleet._registry import Registry
from toolbreaker.testing import ToolService, request_json

__all__ = ["run_live"]

# Compressed time: a real policy would cool down for tens of seconds.
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
TURN_GAP_S = 0.45
MODEL_RETRIES = 3  # a model that sees "error, retryable" tries again, up to this many times


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
        registry = None if retry_only else _registry(records, p)
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
            instruction = _model_turn(turn, tools, p, lambda: service.hits.get("GET /search", 0))
            if instruction and not shown_instruction:
                shown_instruction = True
                p.line()
                p.line("        the model was told:")
                p.line(f"        {json.dumps(instruction, indent=None)}")
                p.line()
            time.sleep(TURN_GAP_S)
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
    # Live: real sleeps and a real service, so the trace's instants and the hash change
    # every run. Said where the hash is printed, with the way to reproduce it.
    p.line(
        f"  receipt_hash {receipt['receipt_hash']} (this run's: a live run's hash changes "
        "every run, as its timings do; --save DIR keeps its trace, whose replay gives this "
        "hash again; demo --fixture's is the same every run)"
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


def _model_turn(
    turn: int, tools: dict[str, Callable[..., Any]], p: _Printer, remote: Callable[[], int]
) -> dict[str, Any] | None:
    """One scripted model turn; returns the first tool-unavailable result it saw."""
    seen: dict[str, Any] | None = None
    for _attempt in range(1 + MODEL_RETRIES):
        before = remote()
        result = tools["search_catalog"]("usb-c cable")
        where = "remote" if remote() > before else "local, nothing sent"
        if result.get("tool_unavailable"):
            p.row(
                turn,
                "search_catalog",
                f"OUT OF SERVICE ({where}): told not to retry for "
                f"{result['retry_after_seconds']} s",
            )
            seen = result
            fallback = result.get("fallback")
            if fallback:
                snap = tools[fallback]("usb-c cable")
                p.row(
                    turn,
                    fallback,
                    f"ok, {len(snap['results'])} items as of "
                    f"{snap['as_of'][:10]}: answer flags stale prices",
                )
            break
        if result.get("ok") is False:
            status = result["error"].split(":", 1)[-1].strip()[:30]
            p.row(turn, "search_catalog", f"error ({where}: {status}), model retries")
            if not result.get("retryable", True):
                break
            continue
        p.row(turn, "search_catalog", f"ok ({where}), {len(result['results'])} live items")
        break
    else:
        p.row(turn, "search_catalog", "gave up: a model here starts guessing prices")
    order = tools["get_order"]("A-1001")
    p.row(turn, "get_order", f"ok, {order.get('status', order)}")
    return seen


def _registry(records: list[Transition], p: _Printer) -> Registry:
    start = monotonic_ms()
    registry = Registry.from_dict(SHEET, clock=lambda: monotonic_ms() - start)
    for breaker in (registry.get("catalog", "read"), registry.get("orders", "read")):
        breaker.add_listener(lambda record, _b: records.append(record))
    policy = registry.get("catalog", "read").policy
    p.line(
        f"  policy: open after {policy.failure_threshold} failures, cool down "
        f"{policy.cooldown_ms / 1000:g} s, close after {policy.success_threshold} good probes "
        "(compressed time)"
    )
    return registry


def _tools(
    registry: Registry | None, raw: dict[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]]:
    if registry is None:
        return {name: _naive(fn) for name, fn in raw.items()}
    return {name: registry.for_tool(name).guard(fn) for name, fn in raw.items()}


def _naive(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A tool wrapper without a breaker: every error goes back to the model as retryable."""

    def tool(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the model sees the error text
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "retryable": True}

    return tool


def _receipt(registry: Registry, records: list[Transition]) -> dict[str, Any]:
    """The receipt of the catalog breaker: one policy, its transitions, its final state."""
    catalog = registry.get("catalog", "read")
    mine = [r for r in records if r.dependency == catalog.key]
    return summarise(catalog.policy, {catalog.key: (mine, catalog.state)})


def _files(
    registry: Registry, records: list[Transition], receipt: dict[str, Any]
) -> dict[str, str]:
    policy = registry.get("catalog", "read").policy
    lines = (trace_event(r) for r in records if r.dependency == "catalog:read")
    trace = [line for line in lines if line is not None]
    return {
        "trace.jsonl": "".join(json.dumps(e) + "\n" for e in trace),
        "policy.toml": "".join(
            f"{k} = {json.dumps(v)}\n" for k, v in policy.to_dict().items() if v is not None
        ),
        "receipt.json": dump_receipt(receipt),
    }
