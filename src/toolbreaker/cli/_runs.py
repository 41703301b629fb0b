"""``toolbreaker run show|extend TASK --store URL``: an operator's view of a shared run.

A run shared by its guards (``RunGuard(..., shared=True)``) keeps its counters, stops and
budget in the store. ``show`` prints what an operator decides on: whether the run stopped
and why, what it spent and called against its limits, its uncertain writes and the next
safe action (``--json``: the stop packet, ``toolbreaker.stop/v1``); ``extend`` raises its budget
and resumes it exactly as ``guard.extend`` does (it *is* a guard's ``extend``, run by a
guard of the task that joins the run): recorded first in the journal with who and why,
then the run's record raised by compare-and-set, so every process of the run sees it.
A store without that run is one error line, exit 2: never a fresh run reported as healthy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from toolbreaker.cli._options import MAX_COUNT, MAX_DURATION_MS, whole
from toolbreaker.cli._stores import SHARED_STORES, open_store
from toolbreaker.core._files import printable, shown
from toolbreaker.core._run._values import RISK_CLASSES, decimal_text
from toolbreaker.core._run.budget import Budget
from toolbreaker.core._run.state import RUNNING
from toolbreaker.errors import PolicyError

__all__ = ["add_command", "summary"]


def add_command(commands: Any) -> None:
    """Register ``run`` (``show``, ``extend``) on the top-level subparsers."""
    cmd = commands.add_parser("run", help="show or extend a run shared through a store")
    actions = cmd.add_subparsers(dest="run_action", required=True, metavar="ACTION")
    for name, text in (
        ("show", "print the run's state against its budget (--json: its stop packet)"),
        ("extend", "raise a stopped run's budget and resume it (recorded with who and why)"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("task", help="the run's task id")
        action.add_argument("--store", required=True, help=f"{SHARED_STORES} (existing)")
        action.add_argument(
            "--json", action="store_true", help="print the stop packet (toolbreaker.stop/v1)"
        )
        if name == "extend":
            action.add_argument("--by", required=True, help="who raises it")
            action.add_argument("--why", required=True, help="why (kept in the journal)")
            action.add_argument("--max-cost", help="the new cost limit (a decimal)")
            calls = whole(1, MAX_COUNT)
            action.add_argument("--max-tool-calls", type=calls, help="the new call limit")
            action.add_argument(
                "--deadline-ms",
                type=whole(1, MAX_DURATION_MS, unit="ms"),
                help="the new deadline (ms)",
            )
            action.add_argument("--max-recovery-calls", type=calls, help="recovery reads")
        action.set_defaults(run_command=_run)


def _run(args: argparse.Namespace) -> int:
    from toolbreaker.runtime._run._guard import RunGuard
    from toolbreaker.runtime._run._shared import read_shared

    store = open_store(args.store)
    try:
        if read_shared(store, args.task) is None:
            raise PolicyError(
                f"no shared run {shown(args.task)} in {args.store} (a run is shared by "
                "RunGuard(..., shared=True))",
                field="task",
            )
        guard = RunGuard(args.task, journal=store, shared=True)
        if args.run_action == "extend":
            packet = guard.extend(
                by=args.by,
                why=args.why,
                max_cost=args.max_cost,
                max_tool_calls=args.max_tool_calls,
                deadline_ms=args.deadline_ms,
                max_recovery_calls=args.max_recovery_calls,
            )
        else:
            packet = guard.stop_packet()
        if args.json:
            json.dump(json.loads(packet.to_json()), sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(summary(packet.to_dict(), guard.budget))
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return 0


def summary(packet: Mapping[str, Any], budget: Budget) -> str:
    """The lines ``run show`` prints: a stop packet read against the run's budget.

    ``packet`` is ``StopPacket.to_dict()``; every text from the store is made printable.
    """
    counters = packet["counters"]
    calls = counters["class_calls"]

    def of(value: object, limit: object) -> str:
        return f"{value} of {'no limit' if limit is None else limit}"

    classes = ", ".join(
        f"{risk} {of(calls[risk], budget.classes[risk].max_calls)}" for risk in RISK_CLASSES
    )
    max_cost = None if budget.max_cost is None else decimal_text(budget.max_cost)
    reserved = counters.get("reserved", "0")
    condition = packet["condition"]
    state = RUNNING if condition == RUNNING else f"stopped ({condition})"
    lines = [
        f"run {shown(packet['task'], 200)}: {state}: {packet['detail']}",
        f"  cost       {of(counters['cost'], max_cost)} ({reserved} reserved)",
        f"  calls      {of(counters['calls'], budget.max_tool_calls)} ({classes})",
        f"  confirmed  {len(packet['confirmed'])} step(s)",
    ]
    uncertain = packet["uncertain"]
    lines.append(f"  uncertain  {len(uncertain)} write(s)" + (":" if uncertain else ""))
    lines += [
        f"    {entry.get('tool')}: {entry.get('status')}, key {entry.get('idempotency_key')}"
        for entry in uncertain
    ]
    lines.append(f"  next       {packet['next_safe_action']}")
    return "".join(printable(line) + "\n" for line in lines)
