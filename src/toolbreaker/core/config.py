"""Configuration files: strict field checks and TOML errors located by file and line.

Shared by both cores (breaker policies, run budgets) and by the registry's boundary sheet.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolbreaker.errors import PolicyError

if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
    import tomllib
else:  # pragma: no cover - version dependent
    import tomli as tomllib

__all__ = ["known_fields", "load_toml"]


def known_fields(data: object, cls: Any, what: str) -> dict[str, Any]:
    """``data`` as a dict of ``cls``'s dataclass fields; anything else is a PolicyError."""
    if not isinstance(data, Mapping):
        raise PolicyError(f"a {what} must be a table of fields, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise PolicyError(
                f"unknown {what} field {key!r} (known: {', '.join(sorted(known))})",
                field=str(key),
            )
    return dict(data)


def load_toml(path: str | Path, build: Any) -> Any:
    """Parse a TOML file and hand its table to ``build``, locating errors in the file.

    A :class:`PolicyError` raised by ``build`` gets the file name and the line of the
    key it names; a TOML syntax error keeps the line tomllib reports.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except UnicodeDecodeError:
        raise PolicyError("not UTF-8 text", file=name) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(match.group(1)) if match else None
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise PolicyError(f"invalid TOML: {message}", file=name, line=line) from None
    try:
        return build(data)
    except PolicyError as exc:
        exc.file = exc.file or name
        if exc.line is None and exc.field:
            exc.line = _line_of_key(text, exc.field)
        raise


def _line_of_key(text: str, field: str) -> int | None:
    """The line of a dotted field (``table.sub.key``), following ``[table]`` headers."""
    header = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
    assignment = re.compile(r"^\s*(\"[^\"]+\"|[A-Za-z0-9_-]+)\s*=")
    table = ""
    fallback = None
    for number, line in enumerate(text.splitlines(), start=1):
        found = header.match(line)
        if found:
            table = ".".join(part.strip().strip('"') for part in found.group(1).split("."))
            if table == field:
                fallback = fallback or number
            continue
        found = assignment.match(line)
        if found:
            key = found.group(1).strip('"')
            if (f"{table}.{key}" if table else key) == field:
                return number
    return fallback
