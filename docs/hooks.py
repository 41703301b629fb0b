"""MkDocs hooks: pages whose text has one source elsewhere.

- The site's home page is README.md: ``docs/index.md`` only holds a note; its page is the
  README with its links made relative to ``docs/`` (``docs/guide/x.md`` becomes
  ``guide/x.md``), which ``mkdocs build --strict`` then checks like any other page's.
- The command-line reference (``docs/reference/cli.md``) is the parser's own help, every
  command and subcommand, written where the page says ``COMMANDS_MARKER``: a new option
  is on the site the moment the command has it.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
COMMANDS_MARKER = "<!-- the commands: docs/hooks.py writes each one's help here -->"
#: The help's line width on the page (argparse reads it from COLUMNS).
WIDTH = "88"


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """The README, relinked, as the home page; the commands' help on the CLI page."""
    if page.file.src_uri == "index.md":
        return re.sub(r"\]\(docs/", "](", README.read_text(encoding="utf-8"))
    if COMMANDS_MARKER in markdown:
        return markdown.replace(COMMANDS_MARKER, cli_reference())
    return markdown


def cli_reference() -> str:
    """A section per command: the help of ``toolbreaker``, then of each command.

    A command's subcommands follow it.
    """
    from toolbreaker.cli import _parser

    root = _parser()
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return "\n".join(
            f"## `{parser.prog}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"
            for parser in (root, *_commands(root))
        )
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser``'s subcommands, depth first, in the order the parser lists them."""
    for action in parser._actions:  # argparse keeps its subparsers among its actions
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from _commands(sub)
