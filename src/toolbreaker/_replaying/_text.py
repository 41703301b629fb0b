"""The one receipt serialiser: the printed and the canonical text of a receipt.

A receipt prints as :func:`~toolbreaker.core._breaker.receipt.dump_receipt` of the
receipt dict (sorted keys, two-space indent) and is hashed as its canonical JSON
(:func:`~toolbreaker.core._canonical.canonical_json` without ``receipt_hash``). A trace of
any size has too many transitions to hold that dict, so :func:`write_receipt` writes the
same bytes from the receipt's body (:func:`~toolbreaker.core._breaker.receipt.receipt_body`
of :func:`~toolbreaker.core._breaker.receipt.dependency_entry` entries, the very
functions ``summarise`` builds the dict with) and each dependency's transitions as
chunks of text made ahead of time. It prints and hashes in one pass: ``receipt_hash`` is
printed after everything it covers but ``schema``, which is known from the start.

A transition's text is made here too: by :func:`formats` for a record, and, on the fast
path of a replay, as a %-template of its printed text per kind of record
(:func:`plain_template`) filled with the few fields that vary (time, call id,
generation, deadline). The canonical text of a chunk is its printed text without
newlines and spaces unless a string in it holds a space; such a record keeps a
canonical template of its own (:data:`CANONICAL_OF`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, NamedTuple, TextIO, cast

from toolbreaker.core._breaker.machine import record_flags
from toolbreaker.core._breaker.state import Transition

__all__ = [
    "CANONICAL_OF",
    "EVENT_INDENT",
    "FIELD_INDENT",
    "LAYOUT",
    "NEXT",
    "RECORD_INDENT",
    "SKIP",
    "Chunks",
    "compact",
    "flags",
    "formats",
    "literal",
    "plain_template",
    "pretty",
    "sink",
    "string",
    "write_receipt",
]

#: ``json.dumps(text, ensure_ascii=False)`` of a string, in C.
string: Final = json.encoder.encode_basestring
#: The printed receipt nests a transition four levels deep (two spaces each).
RECORD_INDENT: Final = " " * 8
#: A record's fields.
FIELD_INDENT: Final = RECORD_INDENT + "  "
#: An event's fields.
EVENT_INDENT: Final = RECORD_INDENT + "    "
#: Before each record in the printed text (the first one's is dropped).
NEXT: Final = ",\n"
#: A %-template part that consumes a field and prints nothing of it.
SKIP: Final = "%.0s" * 4
#: Bytes that only layout puts in the printed text of a record when no string in it holds
#: a space: deleting them gives the canonical text (which has no layout at all).
LAYOUT: Final = b"\n "

#: A dependency's transitions as (printed, canonical) text, chunk by chunk, in order.
Chunks = Callable[[str], Iterator[tuple[bytes, bytes]]]


def compact(value: Any) -> bytes:
    """The canonical JSON of ``value``."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def pretty(value: Any, indent: str) -> str:
    """``value`` as ``dump_receipt`` prints it at the depth of ``indent``."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return text.replace("\n", "\n" + indent)


def sink(out: TextIO) -> Callable[[bytes], object]:
    """Write UTF-8 bytes to ``out``: to its binary buffer when it has one that takes them."""
    buffer = getattr(out, "buffer", None)
    encoding = str(getattr(out, "encoding", "")).lower().replace("_", "-")
    if buffer is not None and encoding in ("utf-8", "utf8") and os.linesep == "\n":
        out.flush()
        return cast("Callable[[bytes], object]", buffer.write)

    def write(data: bytes) -> object:
        return out.write(data.decode("utf-8"))

    return write


def write_receipt(out: TextIO, body: Mapping[str, Any], chunks: Chunks) -> str:
    """Write the receipt of ``body`` to ``out`` exactly as ``dump_receipt`` would.

    ``body`` is a receipt without its hash; in each dependency's entry, ``transitions``
    is the number of transitions, whose text ``chunks(name)`` gives. Returns the hash.
    """
    emit = sink(out)
    digest = hashlib.sha256()
    hashed = digest.update
    deps: Mapping[str, Mapping[str, Any]] = body["dependencies"]
    rest = {key: value for key, value in body.items() if key != "dependencies"}
    if min(rest) < "dependencies":  # pragma: no cover - the receipt schema has none
        raise ValueError("the dependencies must come first in a streamed receipt")
    hashed(b'{"dependencies":{')
    emit(b'{\n  "dependencies": {' + (b"" if deps else b"},"))
    for index, name in enumerate(sorted(deps)):
        entry = deps[name]
        # The fields around the transitions, each side in one piece (as json.dumps has them).
        head = {field: value for field, value in entry.items() if field < "transitions"}
        tail = {field: value for field, value in entry.items() if field > "transitions"}
        key = compact(name)
        sep = b"," if index else b""
        hashed(sep + key + b":" + (compact(head)[:-1] + b"," if head else b"{"))
        hashed(b'"transitions":[')
        printed_head = pretty(head, "    ")[: -len("\n    }")] + "," if head else "{"
        emit(sep + f"\n    {key.decode()}: {printed_head}".encode())
        emit(b'\n      "transitions": [')
        if entry["transitions"]:
            for printed, canonical in chunks(name):
                emit(printed)
                hashed(canonical)
            emit(b"\n      ]")
        else:
            emit(b"]")
        hashed(b"]" + (b"," + compact(tail)[1:] if tail else b"}"))
        printed_tail = "".join(
            f",\n      {string(field)}: {pretty(value, '      ')}"
            for field, value in sorted(tail.items())
        )
        emit(printed_tail.encode() + b"\n    }")
    if deps:
        emit(b"\n  },")
    hashed(b"}," + compact(rest)[1:])
    receipt_hash = digest.hexdigest()
    shown = {**rest, "receipt_hash": receipt_hash}
    fields = (f"\n  {string(key)}: {pretty(shown[key], '  ')}" for key in sorted(shown))
    emit((",".join(fields) + "\n}\n").encode())
    return receipt_hash


class _Parts(NamedTuple):
    """The parts of a record's text that depend only on its kind, phases and reason."""

    c_head: str
    c_mid: str
    c_tail: str
    p_head: str
    p_mid: str
    p_tail: str


_PARTS: dict[tuple[str, str, str, str, bool, bool], _Parts] = {}


def _parts(key: tuple[str, str, str, str, bool, bool]) -> _Parts:
    """The parts for (type, from, to, reason, attempted, rejected)."""
    parts = _PARTS.get(key)
    if parts is None:
        typ, frm_, to_, why = (string(x) for x in key[:4])
        yes = "true" if key[4] else "false"
        no = "true" if key[5] else "false"
        e, f, t = EVENT_INDENT, FIELD_INDENT, RECORD_INDENT
        parts = _PARTS[key] = _Parts(
            f'{{"attempted":{yes},"event":{{"at":',
            f',"type":{typ}}},"from":{frm_},"generation":',
            f',"reason":{why},"rejected":{no},"to":{to_}}}',
            f'{t}{{\n{f}"attempted": {yes},\n{f}"event": {{\n{e}"at": ',
            f',\n{e}"type": {typ}\n{f}}},\n{f}"from": {frm_},\n{f}"generation": ',
            f',\n{f}"reason": {why},\n{f}"rejected": {no},\n{f}"to": {to_}\n{t}}}',
        )
    return parts


#: Per (type, from, to, reason) of a record the fast path decided (never ``would_reject``):
#: its printed text as a %-template of (at, call as JSON, generation, open_until as JSON).
PRINTED: dict[tuple[str, str, str, str], str] = {}
#: Per such template, its canonical template.
CANONICAL_OF: dict[str, str] = {}
#: Per such template, the (attempted, rejected, would_reject) of its records.
FLAGS: dict[str, tuple[int, int, int]] = {}


def plain_template(key: tuple[str, str, str, str]) -> str:
    """The printed %-template of the records of (type, from, to, reason) (made once)."""
    template = PRINTED.get(key)
    if template is not None:
        return template
    kind, frm, to, reason = key
    attempted, rejected = record_flags(kind, reason)
    parts = _parts((kind, frm, to, reason, attempted, rejected))
    c_head, c_mid, c_tail, p_head, p_mid, p_tail = (part.replace("%", "%%") for part in parts)
    e, f = EVENT_INDENT, FIELD_INDENT
    printed = f'{NEXT}{p_head}%s,\n{e}"call": %s{p_mid}%s,\n{f}"open_until": %s{p_tail}'
    CANONICAL_OF[printed] = f',{c_head}%s,"call":%s{c_mid}%s,"open_until":%s{c_tail}'
    FLAGS[printed] = (int(attempted), int(rejected), 0)
    PRINTED[key] = printed
    return printed


def flags(template: str) -> tuple[int, int, int]:
    """How many records of a template were attempted, rejected, would be rejected."""
    found = FLAGS.get(template)
    if found is not None:
        return found
    # A literal record's template: its text says (it is the core's record, printed).
    return (
        template.count('"attempted": true'),
        template.count('"rejected": true'),
        template.count('"would_reject": true'),
    )


def formats(record: Transition) -> tuple[str, str]:
    """The canonical and the printed (indented) text of one transition record."""
    event = record.event
    if event.duration_ms is not None or event.reason is not None or record.would_reject:
        # The rarer fields of the newer modes: the generic (slower) form, same bytes.
        data = record.to_dict()
        return compact(data).decode("utf-8"), RECORD_INDENT + pretty(data, RECORD_INDENT)
    parts = _parts(
        (
            event.type,
            record.from_phase,
            record.to_phase,
            record.reason,
            record.attempted,
            record.rejected,
        )
    )
    compact_extra = pretty_extra = ""
    if event.call is not None:
        call = string(event.call)
        compact_extra = f',"call":{call}'
        pretty_extra = f',\n{EVENT_INDENT}"call": {call}'
    if event.retry_after_ms is not None:
        compact_extra += f',"retry_after_ms":{event.retry_after_ms}'
        pretty_extra += f',\n{EVENT_INDENT}"retry_after_ms": {event.retry_after_ms}'
    at, generation = str(event.at), str(record.generation)
    until = "null" if record.open_until is None else str(record.open_until)
    canonical = (
        f"{parts.c_head}{at}{compact_extra}{parts.c_mid}{generation},"
        f'"open_until":{until}{parts.c_tail}'
    )
    printed = (
        f"{parts.p_head}{at}{pretty_extra}{parts.p_mid}{generation},"
        f'\n{FIELD_INDENT}"open_until": {until}{parts.p_tail}'
    )
    return canonical, printed


def literal(record: Transition) -> tuple[str, str]:
    """A record's printed and canonical text as templates of four fields it ignores."""
    canonical, printed = formats(record)
    return (
        SKIP + (NEXT + printed).replace("%", "%%"),
        SKIP + ("," + canonical).replace("%", "%%"),
    )
