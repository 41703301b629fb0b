"""``policy publish`` and ``policy show``: boundary sheets the fleet follows, in the store."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from toolbreaker.core.files import printable
from toolbreaker.errors import PolicyError

__all__ = ["add_commands", "open_store"]

_STORE_HELP = "sqlite:///PATH, redis://HOST:PORT/DB or postgresql://..."


def open_store(url: str) -> Any | None:
    """The breaker store a ``--store`` URL names; ``None`` for ``memory://``.

    ``sqlite:///PATH``, ``redis://``/``rediss://``/``unix://`` and ``postgres://``/
    ``postgresql://``. A ``memory://`` store is one process's memory, which no other
    process can reach.

    Raises:
        PolicyError: a URL naming no store (field ``store``).
    """
    from toolbreaker.instrumentation.stream import masked_url

    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return None
    if scheme == "sqlite":
        from toolbreaker.stores.sqlite import SQLiteStore

        path = url[len("sqlite://") :].split("?", 1)[0]
        if not path:
            raise PolicyError(
                "sqlite:// needs a path, e.g. sqlite:///var/tb/state.db", field="store"
            )
        return SQLiteStore(path)
    if scheme in ("redis", "rediss", "unix"):
        from toolbreaker.stores.redis import RedisStore

        return RedisStore(url.split("?", 1)[0])
    if scheme in ("postgres", "postgresql"):
        from toolbreaker.stores.postgres import PostgresStore

        return PostgresStore(url)
    raise PolicyError(
        f"unknown store URL {masked_url(url)!r} (use {_STORE_HELP})",
        field="store",
    )


def add_commands(commands: Any) -> None:
    """Register ``policy publish`` and ``policy show`` on the top-level subparsers."""
    policy = commands.add_parser(
        "policy", help="publish a boundary sheet to a shared store, or show the current one"
    )
    sub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    cmd = sub.add_parser(
        "publish", help="validate a sheet as Registry.from_toml does and publish it"
    )
    cmd.add_argument("sheet", help="the boundary sheet (TOML)")
    cmd.add_argument("--store", required=True, help=_STORE_HELP)
    cmd.add_argument("--note", help="why (shown by policy show)")
    cmd.add_argument("--name", default="default", help="the sheet's name (default: default)")
    cmd.set_defaults(run_command=_run_publish)

    cmd = sub.add_parser("show", help="the published sheet: revision, digest, when, note")
    cmd.add_argument("--store", required=True, help=_STORE_HELP)
    cmd.add_argument("--name", default="default", help="the sheet's name (default: default)")
    cmd.add_argument("--json", action="store_true", help="print it as JSON")
    cmd.add_argument("--text", action="store_true", help="print the sheet's text as well")
    cmd.set_defaults(run_command=_run_show)


def _shared(url: str) -> Any:
    store = open_store(url)
    if store is None:
        raise PolicyError(
            f"memory:// is one process's memory: publish to a shared store ({_STORE_HELP})",
            field="store",
        )
    return store


def _run_publish(args: argparse.Namespace) -> int:
    from toolbreaker.runtime.fleet._registry import publish_policy

    store = _shared(args.store)
    try:
        sheet = publish_policy(store, args.sheet, name=args.name, note=args.note)
    finally:
        store.close()
    print(
        f"published {printable(args.name)} revision {sheet.revision} "
        f"sha256 {sheet.sha256} ({printable(args.sheet)})"
    )
    return 0


def _run_show(args: argparse.Namespace) -> int:
    from toolbreaker.runtime.fleet._published import read_published

    store = _shared(args.store)
    try:
        sheet = read_published(store, args.name)
    finally:
        store.close()
    if sheet is None:
        raise PolicyError(f"no sheet is published under {args.name!r}", field="store")
    if args.json:
        doc = sheet.to_dict()
        if args.text:
            doc["text"] = sheet.text
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return 0
    lines = [
        f"sheet      {printable(sheet.name)}",
        f"revision   {sheet.revision}",
        f"sha256     {sheet.sha256}",
        f"published  {printable(sheet.published_at)} by {printable(sheet.published_by)}",
        f"note       {printable(sheet.note) if sheet.note is not None else '-'}",
    ]
    print("\n".join(lines))
    if args.text:
        print()
        print("\n".join(printable(line) for line in sheet.text.splitlines()))
    return 0
