"""Configuration files: strict field checks and TOML errors located by file and line.

Shared by both cores (breaker policies, run budgets) and by the registry's boundary sheet.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._files import printable, read_text, shown
from toolbreaker.errors import PolicyError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "MAX_CONFIG_BYTES",
    "build_toml",
    "known_fields",
    "load_toml",
    "loads_toml",
    "seconds",
    "where_in_source",
]

#: The largest policy, budget or boundary sheet file read.
MAX_CONFIG_BYTES: Final = 1024 * 1024


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


def seconds(value: object, field: str, most: float) -> float:
    """``value`` as a positive, finite number of seconds of at most ``most``.

    The one rule of a duration written in seconds, whoever reads it (a breaker's deadline,
    an exercise scenario's timeout and delays); each caller gives its own bound.

    Raises:
        PolicyError: naming ``field``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= most
    ):
        raise PolicyError(
            f"{field} must be a positive number of seconds of at most {most:g}, got {shown(value)}",
            field=field,
        )
    return float(value)


def load_toml(path: str | Path, build: Any) -> Any:
    """Parse a TOML file and hand its table to ``build``, locating errors in the file.

    A :class:`PolicyError` raised by ``build`` gets the file name and the line of the
    key it names; a TOML syntax error keeps the line tomllib reports.
    """
    name = str(path)
    text = read_text(path, PolicyError, limit=MAX_CONFIG_BYTES)
    return build_toml(text, name, build)


#: The file ``build_toml`` is building, and its text, for :func:`where_in_source`.
_SOURCE: Final[contextvars.ContextVar[tuple[str, str] | None]] = contextvars.ContextVar(
    "toolbreaker_config_source", default=None
)


def where_in_source(field: str) -> str | None:
    """``file:line`` of a dotted ``field`` in the file :func:`build_toml` is building.

    What locates a warning about a field the way an error is located; ``None`` when no
    file is being built (a table handed to ``from_dict`` in code).
    """
    source = _SOURCE.get()
    if source is None:
        return None
    name, text = source
    line = _line_of_key(text, field)
    return name if line is None else f"{name}:{line}"


def build_toml(text: str, name: str, build: Any) -> Any:
    """:func:`load_toml` for text already read: ``name`` is the file errors point at."""
    data = loads_toml(text, file=name)
    token = _SOURCE.set((name, text))
    try:
        return build(data)
    except PolicyError as exc:
        exc.file = exc.file or name
        if exc.line is None and exc.field:
            exc.line = _line_of_key(text, exc.field)
        # Table names come from the file: never echo a control character raw.
        exc.message = printable(exc.message)
        exc.args = (exc.message,)
        raise
    finally:
        _SOURCE.reset(token)


def loads_toml(text: str, *, file: str | None = None) -> dict[str, Any]:
    """Parse TOML; any failure is a :class:`PolicyError`.

    Syntax errors keep the line the parser reports; nesting too deep and integers of
    thousands of digits are errors too, never a ``RecursionError`` or ``ValueError``.
    """
    # The parser is loaded by the first sheet read: a breaker made in code never needs it.
    if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
        import tomllib
    else:  # pragma: no cover - version dependent
        import tomli as tomllib
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(match.group(1)) if match else None
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise PolicyError(f"invalid TOML: {printable(message)}", file=file, line=line) from None
    except RecursionError:
        raise PolicyError("invalid TOML: nested too deeply", file=file) from None
    except ValueError:  # int() refusing thousands of digits
        raise PolicyError("invalid TOML: a number too large to read", file=file) from None
    return data


_PART: Final = r"(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """A table header, an assignment and a dotted key's parts.

    Compiled for the first error located in a file, not at import.
    """
    return (
        re.compile(rf"^\s*\[\s*({_PART}(?:\s*\.\s*{_PART})*)\s*\]\s*(#.*)?$"),
        re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=(.*)$"),
        re.compile(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)"),
    )


def _dotted(key: str) -> str:
    return ".".join("".join(match.groups("")) for match in _patterns()[2].finditer(key))


def _line_of_key(text: str, field: str) -> int | None:
    """The line of a dotted field (``table.sub.key``).

    It follows ``[table]`` headers, dotted keys (``read.fallback = ...``) and inline
    tables (``read = { fallback = ... }``); a field the file does not spell out (a
    missing one) gets the line of the deepest table that holds it.
    """
    table = ""
    best: tuple[int, int | None] = (0, None)

    def holds(path: str, number: int) -> None:
        nonlocal best
        if (field == path or field.startswith(path + ".")) and len(path) > best[0]:
            best = (len(path), number)

    header, assignment, _ = _patterns()
    for number, line in enumerate(text.splitlines(), start=1):
        found = header.match(line)
        if found:
            table = _dotted(found.group(1))
            holds(table, number)
            continue
        found = assignment.match(line)
        if not found:
            continue
        key = _dotted(found.group(1))
        path = f"{table}.{key}" if table else key
        if path == field:
            return number
        rest = found.group(2)
        if rest.lstrip().startswith("{") and field.startswith(path + "."):
            inner = field[len(path) + 1 :].split(".", 1)[0]
            quoted = re.escape(inner)
            if re.search(rf"[{{,]\s*(?:{quoted}|\"{quoted}\"|'{quoted}')\s*[=.]", rest):
                return number
        holds(path, number)
    return best[1]
