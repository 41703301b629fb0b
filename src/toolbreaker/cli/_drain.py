"""``toolbreaker drain``: run queued work once its breaker has closed, exactly once per key.

The tool code cannot come from the command line: ``--tools MODULE:NAME`` names a mapping
of tool name to callable in an importable module (the current directory is on the path),
``--reconcile MODULE:NAME`` a mapping of tool name to read-only status check. ``--list``
shows the queue (arguments masked) without running anything.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from toolbreaker.errors import PolicyError
from toolbreaker.runtime import Registry, drain, queued_items

__all__ = ["add_command", "open_store"]


def add_command(commands: Any) -> None:
    """Register ``drain`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "drain", help="run queued work whose breaker has closed, exactly once per key"
    )
    cmd.add_argument("--store", required=True, help="sqlite:///PATH, redis://... or postgresql://")
    cmd.add_argument("--dependency", help="only this dependency's work")
    cmd.add_argument("--tools", metavar="MODULE:NAME", help="a mapping: tool name -> callable")
    cmd.add_argument(
        "--reconcile", metavar="MODULE:NAME", help="a mapping: tool name -> status check"
    )
    cmd.add_argument("--sheet", help="the boundary sheet (the breakers' policies and deadlines)")
    cmd.add_argument("--lease-ms", type=int, help="how long a claim holds (ms)")
    cmd.add_argument("--list", action="store_true", help="show the queue; run nothing")
    cmd.set_defaults(run_command=_run_drain)


def open_store(url: str) -> Any:
    """The shared store a URL names (``memory://`` is refused: no other process sees it).

    ``?prefix=NAME`` sets a Redis or PostgreSQL store's key prefix.

    Raises:
        PolicyError: a URL no shared store takes (field ``store``).
    """
    parts = urlsplit(url)
    scheme = parts.scheme
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    prefix = options.pop("prefix", None)
    if options:
        raise PolicyError(
            f"--store: unknown option(s) {sorted(options)} (known: prefix)", field="store"
        )
    if scheme == "sqlite":
        from toolbreaker.stores.sqlite import SQLiteStore

        path = url[len("sqlite://") :].split("?", 1)[0]
        if not path:
            raise PolicyError("sqlite:// needs a path, e.g. sqlite:///var/tb/tb.db", field="store")
        return SQLiteStore(path)
    if scheme in ("redis", "rediss", "unix"):
        from toolbreaker.stores.redis import RedisStore

        base = url.split("?", 1)[0]
        return RedisStore(base) if prefix is None else RedisStore(base, prefix=prefix)
    if scheme in ("postgres", "postgresql"):
        from toolbreaker.stores.postgres import PostgresStore

        base = url.split("?", 1)[0]
        return PostgresStore(base) if prefix is None else PostgresStore(base, prefix=prefix)
    raise PolicyError(
        f"--store: {scheme or url!r} is not a shared store (sqlite:///PATH, redis://..., "
        "postgresql://...)",
        field="store",
    )


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
    store = open_store(args.store)
    try:
        return _drain(args, store)
    except NotImplementedError:
        raise PolicyError(
            f"--store: {type(store).__name__} keeps no records (no queue)", field="store"
        ) from None
    finally:
        store.close()


def _drain(args: argparse.Namespace, store: Any) -> int:
    if not hasattr(store, "record_list"):
        raise PolicyError(
            f"--store: {type(store).__name__} keeps no records (no queue)", field="store"
        )
    if args.list:
        for item in queued_items(store, dependency=args.dependency):
            sys.stdout.write(json.dumps(item, sort_keys=True, default=str) + "\n")
        return 0
    registry = Registry.from_toml(args.sheet, store=store) if args.sheet else None
    if not args.tools:
        raise PolicyError("drain needs --tools MODULE:NAME (or --list)", field="tools")
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
