"""Reading untrusted files: bounded, strict, and every failure located by file and line.

Every file the package reads on a user's behalf (policies, sheets, traces, states,
receipts, run records) goes through here, so the limits are the same everywhere:

- a whole-file read stops at :data:`MAX_FILE_BYTES` and a line at :data:`MAX_LINE_BYTES`,
  so ``/dev/zero`` or an endless pipe is one error, not all of the machine's memory;
- JSON is strict: duplicate keys, integers longer than :data:`MAX_INT_DIGITS` digits,
  nesting deeper than the caller allows, ``NaN`` and lone surrogates are errors;
- :func:`printable` escapes text before it reaches a terminal.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, Final, NoReturn

if TYPE_CHECKING:
    import json
    from pathlib import Path


__all__ = [
    "DUPLICATE_KEY",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_DIGITS",
    "MAX_LINE_BYTES",
    "Located",
    "iter_line_blocks",
    "iter_lines",
    "loads_json",
    "printable",
    "read_text",
    "shown",
]

#: The most a whole-file read takes (policies, sheets, states, receipts, run records).
MAX_FILE_BYTES: Final = 256 * 1024 * 1024
#: The longest line a streamed file (a trace) may have.
MAX_LINE_BYTES: Final = 1024 * 1024
#: The most digits a JSON integer may have: every integer we read fits in 64 bits.
MAX_INT_DIGITS: Final = 19
#: The deepest JSON nesting accepted by default.
MAX_DEPTH: Final = 64
#: How much :func:`iter_line_blocks` reads at a time.
BLOCK_BYTES: Final = 1024 * 1024

#: ``Located(message, file=..., line=...)``: the error type a reader raises.
Located = Callable[..., Exception]


class _Invalid(ValueError):
    """A JSON document that decodes but breaks one of our rules."""


def _located(error: Located, message: str, file: str, line: int | None = None) -> NoReturn:
    raise error(message, file=file, line=line) from None


def read_text(path: str | Path, error: Located, *, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``, at most ``limit`` bytes; anything else is ``error``."""
    from pathlib import Path  # a file read: pathlib loads with the first

    name = str(path)
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        _located(error, f"cannot read: {exc.strerror or exc}", name)
    if len(data) > limit:
        _located(error, f"file is larger than {limit:,} bytes", name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        _located(error, "not UTF-8 text", name, line)


def _opened(path: str | Path, error: Located) -> BinaryIO:
    """``path`` opened for reading bytes; an OS error is ``error``, located at the file."""
    from pathlib import Path

    try:
        return Path(path).open("rb")
    except OSError as exc:
        _located(error, f"cannot read: {exc.strerror or exc}", str(path))


def iter_lines(
    path: str | Path, error: Located, *, limit: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` of ``path`` as a stream, each line at most ``limit``."""
    name = str(path)
    with _opened(path, error) as handle:
        number = 0
        while True:
            try:
                raw = handle.readline(limit + 1)
            except OSError as exc:
                _located(error, f"cannot read: {exc.strerror or exc}", name, number + 1)
            if not raw:
                return
            number += 1
            if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
                _located(error, f"line is longer than {limit:,} bytes", name, number)
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError:
                _located(error, "not UTF-8 text", name, number)


def iter_line_blocks(
    path: str | Path,
    error: Located,
    *,
    limit: int = MAX_LINE_BYTES,
    block: int = BLOCK_BYTES,
    size: int | None = None,
) -> Iterator[tuple[int, list[str]]]:
    r"""The lines of :func:`iter_lines` in blocks: ``(number of the first line, lines)``.

    The lines come without their ``"\n"``, and a failure (a line over ``limit``, bytes
    that are not UTF-8, a read error) is raised at the same line as :func:`iter_lines`
    raises it, after every line before it was yielded. One read and one decode take a
    block of about ``block`` bytes, instead of a call per line. With ``size``, the first
    ``size`` bytes are read and no more; a file that has fewer is an error.
    """
    name = str(path)
    left = -1 if size is None else size
    with _opened(path, error) as handle:
        number = 0  # lines yielded so far
        carry = b""
        while True:
            try:
                data = handle.read(block if left < 0 else min(block, left))
            except OSError as exc:
                _located(error, f"cannot read: {exc.strerror or exc}", name, number + 1)
            if left > 0:
                if not data:
                    _located(error, "the file shrank while it was read", name, number + 1)
                left -= len(data)
            if not data:
                if carry:
                    yield from _block(carry, number, limit, error, name)
                return
            if carry:
                data = carry + data
            end = data.rfind(b"\n")
            if end < 0:
                carry = data
            else:
                carry = data[end + 1 :]
                complete = data[:end]
                yield from _block(complete, number, limit, error, name)
                number += complete.count(b"\n") + 1
            if len(carry) > limit:
                _located(error, f"line is longer than {limit:,} bytes", name, number + 1)


def _block(
    data: bytes, number: int, limit: int, error: Located, name: str
) -> Iterator[tuple[int, list[str]]]:
    """``data`` (whole lines joined by newlines) as one block, or up to its first bad line."""
    bad, message = -1, ""
    if len(data) > limit:
        lengths = [len(line) for line in data.split(b"\n")]
        if max(lengths) > limit:
            bad = next(i for i, n in enumerate(lengths) if n > limit)
            message = f"line is longer than {limit:,} bytes"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        invalid = data.count(b"\n", 0, exc.start)
        if bad < 0 or invalid < bad:
            bad, message = invalid, "not UTF-8 text"
        start = data.rfind(b"\n", 0, exc.start) + 1
        text = data[: max(start - 1, 0)].decode("utf-8") if bad else ""
    lines = text.split("\n")
    if bad < 0:
        yield number + 1, lines
        return
    if bad:
        yield number + 1, lines[:bad]
    _located(error, message, name, number + bad + 1)


#: The key :func:`loads_json` adds to an object that held duplicate keys (``mark``).
DUPLICATE_KEY: Final = "\x00duplicate-key"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Invalid(f"duplicate key {shown(key)}")
            seen.add(key)
    return out


def _marked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        out[DUPLICATE_KEY] = True
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Invalid(f"integer with more than {MAX_INT_DIGITS} digits")
    return int(text)


def _constant(text: str) -> NoReturn:
    raise _Invalid(f"{text} is not JSON")


# The patterns and decoders below are made on first use, not at import: ``from toolbreaker
# import Registry`` reads no JSON (and so loads no json).
@functools.cache
def _strings() -> re.Pattern[str]:
    return re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


@functools.cache
def _brackets() -> re.Pattern[str]:
    return re.compile(r"[\[\]{}]")


@functools.cache
def _surrogate() -> re.Pattern[str]:
    return re.compile("[\ud800-\udfff]")


def _depth(text: str) -> int:
    deepest = depth = 0
    for match in _brackets().finditer(_strings().sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _check_depth(text: str, max_depth: int) -> int:
    """Raise if ``text`` nests deeper than ``max_depth``; return its count of brackets."""
    brackets = text.count("[") + text.count("{")
    if brackets > max_depth and _depth(text) > max_depth:
        raise _Invalid(f"nested deeper than {max_depth} levels")
    return brackets


def _no_surrogates(value: Any) -> None:
    r"""Refuse lone surrogates (``"\ud800"``): they cannot be written as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _surrogate().search(item):
                raise _Invalid("a string holds a lone surrogate (not valid Unicode text)")
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def loads_json(
    text: str,
    error: Located,
    *,
    file: str | None = None,
    line: int | None = None,
    max_depth: int = MAX_DEPTH,
    parse_float: Callable[[str], Any] | None = None,
    mark_duplicates: bool = False,
) -> Any:
    """Decode strict JSON; a problem becomes ``error`` at ``file`` and ``line``.

    Without ``line`` a syntax error keeps the line the decoder reports. Duplicate keys are
    an error, or with ``mark_duplicates`` the object gets :data:`DUPLICATE_KEY` (so a
    persisted state that holds one fails validation and loads as corrupt).
    """
    import json

    strict, marking, fast, keys = _decoders()
    try:
        brackets = _check_depth(text, max_depth)
        if mark_duplicates:
            decoder = marking
        elif parse_float is None:
            decoder = strict
        else:
            decoder = json.JSONDecoder(
                object_pairs_hook=_pairs,
                parse_int=_int,
                parse_constant=_constant,
                parse_float=parse_float,
            )
        if decoder is strict and brackets <= 1 and "\\" not in text:
            # A flat object without escapes: one C call, duplicates found by counting.
            value = fast.decode(text)
            if isinstance(value, dict) and len(value) != len(keys.findall(text)):
                value = strict.decode(text)
        else:
            value = decoder.decode(text)
        if "\\u" in text:
            _no_surrogates(value)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        raise error(
            f"malformed JSON: {exc.msg} (column {exc.colno})", file=file, line=where
        ) from None
    except _Invalid as exc:
        raise error(str(exc), file=file, line=line) from None
    except RecursionError:
        raise error("nested too deeply", file=file, line=line) from None
    return value


@functools.cache
def _decoders() -> tuple[json.JSONDecoder, json.JSONDecoder, json.JSONDecoder, re.Pattern[str]]:
    """The strict, the marking and the fast decoder, and the pattern that counts keys.

    Every key occurrence in a flat object without escapes is one ``"`` ``:`` pair: more
    matches than keys means a key was repeated.
    """
    import json

    return (
        json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_int, parse_constant=_constant),
        json.JSONDecoder(object_pairs_hook=_marked_pairs, parse_int=_int, parse_constant=_constant),
        json.JSONDecoder(parse_int=_int, parse_constant=_constant),
        re.compile(r'"\s*:'),
    )


_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    r"""``text`` safe for a terminal: control, format (bidi) and unassigned characters escaped.

    ESC, OSC, CR, newlines, U+009B (CSI), U+202E (right-to-left override) and lone
    surrogates all become visible ``\x1b``-style escapes.
    """
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable():
            out.append(char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        else:
            code = ord(char)
            out.append(
                f"\\x{code:02x}"
                if code <= 0xFF
                else f"\\u{code:04x}"
                if code <= 0xFFFF
                else f"\\U{code:08x}"
            )
    return "".join(out)


def shown(value: object, width: int = 60) -> str:
    """A short, printable description of an untrusted value for an error message."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        digits = len(str(value)) if -(10**30) < value < 10**30 else None
        return str(value) if digits is not None else "a very large integer"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        text = repr(value[:width] + ("…" if len(value) > width else ""))
        return printable(text)
    return f"a {type(value).__name__}"
