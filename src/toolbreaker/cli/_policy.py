"""``policy publish`` and ``policy show``: boundary sheets the fleet follows, in the store."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from toolbreaker.cli._stores import SHARED_STORES as _STORE_HELP
from toolbreaker.cli._stores import open_store
from toolbreaker.core._files import printable
from toolbreaker.errors import PolicyError

__all__ = ["add_commands"]


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
    cmd.add_argument(
        "--over-corrupt",
        metavar="REASON",
        help="replace a published record that does not decode; the reason is recorded",
    )
    cmd.add_argument("--name", default="default", help="the sheet's name (default: default)")
    cmd.set_defaults(run_command=_run_publish)

    cmd = sub.add_parser("show", help="the published sheet: revision, digest, when, note")
    cmd.add_argument("--store", required=True, help=_STORE_HELP)
    cmd.add_argument("--name", default="default", help="the sheet's name (default: default)")
    cmd.add_argument("--json", action="store_true", help="print it as JSON")
    cmd.add_argument("--text", action="store_true", help="print the sheet's text as well")
    cmd.set_defaults(run_command=_run_show)


def _run_publish(args: argparse.Namespace) -> int:
    from toolbreaker.runtime._fleet._registry import publish_policy

    store = open_store(args.store, create=True)  # publishing may make the fleet's store
    try:
        sheet = publish_policy(
            store, args.sheet, name=args.name, note=args.note, over_corrupt=args.over_corrupt
        )
    finally:
        store.close()
    print(
        f"published {printable(args.name)} revision {sheet.revision} "
        f"sha256 {sheet.sha256} ({printable(args.sheet)})"
    )
    return 0


def _run_show(args: argparse.Namespace) -> int:
    from toolbreaker.runtime._fleet._published import read_published

    store = open_store(args.store)
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
    if sheet.over_corrupt is not None:
        lines.append(f"replaced   a record that did not decode: {printable(sheet.over_corrupt)}")
    print("\n".join(lines))
    if args.text:
        print()
        print("\n".join(printable(line) for line in sheet.text.splitlines()))
    return 0
