"""``toolbreaker drain``: run queued work once its breaker has closed, exactly once per key.

The tool code cannot come from the command line: ``--tools MODULE:NAME`` names a mapping
of tool name to callable in an importable module (the current directory is on the path),
``--reconcile MODULE:NAME`` a mapping of tool name to read-only status check. ``--list``
shows the queue (arguments masked) without running anything. ``--prune-done OLDER_THAN``
deletes done work that finished longer ago than that (``7d``, ``12h``, ``30m``, ``90s`` or
plain seconds), one line per item, with ``--dry-run`` to see first. ``--lease-ms`` is for a
drain that runs work: with ``--list`` or ``--prune-done`` it is refused, not ignored.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from toolbreaker.cli._options import MAX_DURATION_MS, duration, whole
from toolbreaker.core._files import printable, shown
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._fleet._drain import PruneReport, drain, prune_done, queued_items
from toolbreaker.runtime._fleet._registry import Registry

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Register ``drain`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "drain", help="run queued work whose breaker has closed, exactly once per key"
    )
    cmd.add_argument(
        "--store", required=True, help="sqlite:///PATH, redis://... or postgresql://... (existing)"
    )
    cmd.add_argument("--dependency", help="only this dependency's work")
    cmd.add_argument("--tools", metavar="MODULE:NAME", help="a mapping: tool name -> callable")
    cmd.add_argument(
        "--reconcile", metavar="MODULE:NAME", help="a mapping: tool name -> status check"
    )
    cmd.add_argument("--sheet", help="the boundary sheet (the breakers' policies and deadlines)")
    cmd.add_argument(
        "--lease-ms",
        type=whole(1, MAX_DURATION_MS, unit="ms"),
        help="how long a claim holds (ms; default: the tool's deadline plus a margin)",
    )
    action = cmd.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="show the queue; run nothing")
    action.add_argument(
        "--prune-done",
        metavar="OLDER_THAN",
        type=duration(bare_seconds=True),
        help="delete done work finished longer ago (7d, 12h, 30m, 90s, or seconds); run "
        "nothing. A pruned key can be queued again",
    )
    cmd.add_argument("--dry-run", action="store_true", help="with --prune-done: delete nothing")
    cmd.set_defaults(run_command=_run_drain)


def _mapping(spec: str, option: str) -> Mapping[str, Callable[..., Any]]:
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise PolicyError(f"{option} must be MODULE:NAME, got {spec!r}", field=option)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(f"{option} {spec!r} cannot be loaded: {exc}", field=option) from None
    if not isinstance(found, Mapping) or not all(
        isinstance(k, str) and callable(v) for k, v in found.items()
    ):
        raise PolicyError(f"{option} {spec!r} is not a mapping of names to callables", field=option)
    return found


def _run_drain(args: argparse.Namespace) -> int:
    from toolbreaker.cli._stores import open_store

    _check_usage(args)
    store = open_store(args.store)  # never created: an empty new store would drain nothing
    try:
        return _drain(args, store)
    except NotImplementedError:
        raise PolicyError(
            f"--store: {type(store).__name__} keeps no records (no queue)", field="store"
        ) from None
    finally:
        store.close()


def _check_usage(args: argparse.Namespace) -> None:
    """The arguments' own errors, before any store is opened (a bad sheet, say)."""
    if args.dry_run and args.prune_done is None:
        raise PolicyError("--dry-run goes with --prune-done", field="dry-run")
    if args.lease_ms is not None and (args.list or args.prune_done is not None):
        raise PolicyError(
            f"--lease-ms goes with a drain that runs work, not with "
            f"{'--list' if args.list else '--prune-done'} (which runs nothing)",
            field="lease-ms",
        )
    if args.list:
        return
    if args.prune_done is not None:
        if args.tools or args.reconcile or args.sheet:
            raise PolicyError("--prune-done runs nothing: no --tools, --reconcile or --sheet")
        return
    if args.sheet:
        Registry.from_toml(args.sheet).close()  # validated as drain will load it
    if not args.tools:
        raise PolicyError("drain needs --tools MODULE:NAME (or --list)", field="tools")


def _drain(args: argparse.Namespace, store: Any) -> int:
    if not hasattr(store, "record_list"):
        raise PolicyError(
            f"--store: {type(store).__name__} keeps no records (no queue)", field="store"
        )
    if args.list:
        for item in queued_items(store, dependency=args.dependency):
            sys.stdout.write(json.dumps(item, sort_keys=True, default=str) + "\n")
        return 0
    if args.prune_done is not None:
        pruned = prune_done(
            store,
            older_than=float(args.prune_done),
            dependency=args.dependency,
            dry_run=args.dry_run,
        )
        _print_pruned(pruned, args.prune_done.text)
        return 0
    registry = Registry.from_toml(args.sheet, store=store) if args.sheet else None
    tools = _mapping(args.tools, "--tools")
    reconcile = _mapping(args.reconcile, "--reconcile") if args.reconcile else None
    report = drain(
        store,
        tools,
        reconcile=reconcile,
        dependency=args.dependency,
        registry=registry,
        lease_ms=args.lease_ms,
    )
    sys.stdout.write(json.dumps(report.to_dict(), sort_keys=True) + "\n")
    return 0


def _print_pruned(report: PruneReport, bound: str) -> None:
    """One line per item (untrusted text escaped), then one summary line."""
    verb = "would prune" if report.dry_run else "pruned"
    for item in report.pruned:
        finished = item.get("finished_at")
        when = (
            datetime.datetime.fromtimestamp(finished / 1000, tz=datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            if isinstance(finished, int)
            else "?"
        )
        row = shown(f"{item.get('dependency')}.{item.get('operation')}", width=80)
        how = "reconciled" if item.get("reconciled") else "done"
        sys.stdout.write(
            f"{verb} {printable(str(item.get('id')))} {row} tool {shown(item.get('tool'))} "
            f"key {shown(item.get('idempotency_key'))} {how} {when}\n"
        )
    count = len(report.pruned)
    sys.stdout.write(
        f"{verb} {count} done item{'' if count == 1 else 's'} finished more than "
        f"{printable(bound)} ago ({report.kept} newer kept; pending, in-flight, failed and "
        "unknown items are never pruned)\n"
    )
