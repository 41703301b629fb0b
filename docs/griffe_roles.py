"""Griffe extension: the docstrings' Sphinx roles become links of the API reference.

The docstrings are Google style with Sphinx cross-reference roles (``:class:`Policy```,
``:meth:`~toolbreaker.Registry.get```), which read well in ``help()`` and an editor.
mkdocstrings renders Markdown, where a role would show as its raw text; this turns each
into an optional autorefs reference: a link when the target is on the site, else the
name as code, never a warning (a role may name a private helper the site leaves out).
"""

from __future__ import annotations

import html
import re
from functools import partial
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(class|func|meth|data|mod|attr|exc|obj|const):`(~?)([^`]+)`")
CALLABLE = frozenset({"func", "meth"})


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **_: Any) -> None:
        """Rewrite the roles of ``pkg`` and of every object inside it."""
        for obj in _objects(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = ROLE.sub(partial(_reference, obj), obj.docstring.value)


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Object):
            found += _objects(member)
    return found


def _reference(obj: griffe.Object, match: re.Match[str]) -> str:
    role, short, name = match.groups()
    shown = name.rsplit(".", 1)[-1] if short else name
    if role in CALLABLE:
        shown += "()"
    head, _, rest = name.partition(".")
    try:
        path = obj.resolve(head) + (f".{rest}" if rest else "")
    except Exception:  # noqa: BLE001 - griffe's resolution errors vary; the name stays
        path = name
    return (
        f'<autoref identifier="{html.escape(path)}" optional>'
        f"<code>{html.escape(shown)}</code></autoref>"
    )
