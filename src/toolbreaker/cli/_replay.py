"""Streaming replay: a trace of any size in, its receipt out, in bounded memory.

The receipt's canonical order groups transitions by dependency, but a trace interleaves
dependencies, so each transition is formatted once, as it happens, in both the canonical
form (what ``receipt_hash`` covers) and the printed form, and spilled to two temporary
files in per-dependency chunks. Writing the receipt then reads the chunks back in
dependency order twice: once to hash, once to print. Memory holds the ledgers (one per
dependency), the unsettled calls, the chunk index, and an 8-byte digest per call id (to
refuse a duplicate id), not the transitions.

The output is byte-identical to :func:`~toolbreaker.core.breaker.receipt.dump_receipt` of
the in-memory receipt; a test compares the two on generated traces.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from array import array
from collections.abc import Iterable, Mapping
from typing import IO, Any, Final, TextIO

from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.receipt import RECEIPT_SCHEMA, Ledger, Replay
from toolbreaker.core.breaker.state import OPEN, BreakerState, Transition
from toolbreaker.core.files import MAX_LINE_BYTES, printable
from toolbreaker.errors import ReceiptError

__all__ = ["StreamingReplay", "verify"]

_string = json.encoder.encode_basestring  # json.dumps(text, ensure_ascii=False), in C
_FLUSH_BYTES: Final = 4 * 1024 * 1024
# The printed receipt nests a transition four levels deep (two spaces each).
_T: Final = " " * 8


class _CallIds:
    """A set of 64-bit digests of (dependency, call id) in one flat array.

    Open addressing with linear probing: 8 bytes a slot at most half full, instead of
    a Python string and set entry per call. Two ids share a digest with a probability
    of about n**2 / 2**65 (under 1e-7 for two million calls): such a pair would be
    reported as a duplicate id.
    """

    def __init__(self) -> None:
        self._slots = array("Q", bytes(8 * 1024))
        self._mask = len(self._slots) - 1
        self._used = 0

    def add(self, dependency: str, call: str) -> bool:
        """Remember the id; ``True`` if it was there already."""
        digest = hashlib.blake2b(
            f"{len(dependency)}:{dependency}{call}".encode("utf-8", "surrogatepass"),
            digest_size=8,
        ).digest()
        key = int.from_bytes(digest, "little") or 1
        slots, mask = self._slots, self._mask
        index = key & mask
        while True:
            found = slots[index]
            if found == key:
                return True
            if not found:
                break
            index = (index + 1) & mask
        slots[index] = key
        self._used += 1
        if 2 * self._used > len(slots):
            self._grow()
        return False

    def _grow(self) -> None:
        old = self._slots
        self._slots = slots = array("Q", bytes(16 * len(old)))
        self._mask = mask = len(slots) - 1
        for key in old:
            if key:
                index = key & mask
                while slots[index]:
                    index = (index + 1) & mask
                slots[index] = key


class _Spill:
    """Per-dependency chunks of text in one temporary file."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None  # created at the first flush
        self._buffers: dict[str, list[bytes]] = {}
        self._buffered = 0
        self.chunks: dict[str, list[tuple[int, int]]] = {}

    def add(self, dependency: str, data: bytes) -> None:
        buffer = self._buffers.get(dependency)
        if buffer is None:
            buffer = self._buffers[dependency] = []
        buffer.append(data)
        self._buffered += len(data) or 1
        if self._buffered >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._buffered:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        for dependency, buffer in self._buffers.items():
            if buffer:
                data = b"".join(buffer)
                offset = self._file.seek(0, 2)
                self._file.write(data)
                self.chunks.setdefault(dependency, []).append((offset, len(data)))
                buffer.clear()
        self._buffered = 0

    def read(self, dependency: str) -> Iterable[bytes]:
        self.flush()
        for offset, length in self.chunks.get(dependency, ()):
            assert self._file is not None
            self._file.seek(offset)
            yield self._file.read(length)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class _Counts:
    __slots__ = ("opens", "rejected", "remote", "transitions", "would_reject")

    def __init__(self) -> None:
        self.remote = self.rejected = self.opens = self.transitions = self.would_reject = 0


class StreamingReplay(Replay):
    """A :class:`Replay` that spills transitions instead of keeping them."""

    def __init__(self, policy: Policy, initial: Mapping[str, BreakerState] | None = None) -> None:
        super().__init__(policy, initial)
        self._ids = _CallIds()
        self._canonical = _Spill()
        self._printed = _Spill()
        self._counts: dict[str, _Counts] = {}

    def _seen(self, ledger: Ledger, dependency: str, call: str) -> bool:
        return self._ids.add(dependency, call)

    def _keep(self, ledger: Ledger, dependency: str, records: tuple[Transition, ...]) -> None:
        counts = self._counts.get(dependency)
        if counts is None:
            counts = self._counts[dependency] = _Counts()
        for record in records:
            counts.remote += record.attempted
            counts.rejected += record.rejected
            counts.opens += record.to_phase == OPEN and record.from_phase != OPEN
            counts.would_reject += record.would_reject
            first = not counts.transitions
            counts.transitions += 1
            compact, pretty = _formats(record)
            self._canonical.add(dependency, compact if first else b"," + compact)
            self._printed.add(dependency, (b"\n" if first else b",\n") + pretty)

    def summary(self) -> dict[str, Any]:
        """Per dependency: the counts and final state, without the transitions."""
        deps = {}
        for name, ledger in sorted(self.ledgers().items()):
            counts = self._counts.get(name) or _Counts()
            deps[name] = {
                "transitions": counts.transitions,
                "remote_attempts": counts.remote,
                "local_rejections": counts.rejected,
                "opens": counts.opens,
                "final_state": ledger.state.phase,
                "recovered_from_corruption": ledger.state.recovered_from_corruption,
            }
        return {
            "schema": RECEIPT_SCHEMA,
            "policy_version": self.policy.version,
            "dependencies": deps,
        }

    def close(self) -> None:
        """Remove the temporary files."""
        self._canonical.close()
        self._printed.close()

    def __enter__(self) -> StreamingReplay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def write(self, out: TextIO) -> str:
        """Write the receipt to ``out`` exactly as ``dump_receipt`` would; return its hash."""
        names = sorted(self.ledgers())
        heads = {name: self._head(name) for name in names}
        digest = hashlib.sha256()
        policy = _compact(self.policy.to_dict())
        digest.update(b'{"dependencies":{')
        for index, name in enumerate(names):
            if index:
                digest.update(b",")
            digest.update(_compact(name) + b":" + _compact(heads[name])[:-1])
            digest.update(b',"transitions":[')
            for chunk in self._canonical.read(name):
                digest.update(chunk)
            tail = self._tail(name)
            digest.update(b"]" + (b"," + _compact(tail)[1:] if tail else b"}"))
        digest.update(b'},"policy":' + policy)
        digest.update(b',"policy_version":' + _compact(self.policy.version))
        digest.update(b',"schema":' + _compact(RECEIPT_SCHEMA) + b"}")
        receipt_hash = digest.hexdigest()
        self._print(out, names, heads, receipt_hash)
        return receipt_hash

    def _head(self, name: str) -> dict[str, Any]:
        """A dependency's receipt fields that sort before ``transitions``."""
        counts = self._counts.get(name) or _Counts()
        final = self.ledgers()[name].state
        return {
            "final_state": final.to_dict(),
            "local_rejections": counts.rejected,
            "opens": counts.opens,
            "recovered_from_corruption": final.recovered_from_corruption,
            "remote_attempts": counts.remote,
        }

    def _tail(self, name: str) -> dict[str, Any]:
        """The fields that sort after ``transitions`` (as ``summarise`` writes them)."""
        counts = self._counts.get(name) or _Counts()
        if self.policy.admits_all or counts.would_reject:
            return {"would_reject": counts.would_reject}
        return {}

    def _print(
        self, out: TextIO, names: list[str], heads: dict[str, dict[str, Any]], receipt_hash: str
    ) -> None:
        if not names:
            out.write('{\n  "dependencies": {},')
        else:
            out.write('{\n  "dependencies": {')
            for index, name in enumerate(names):
                head = _pretty(heads[name], "    ")[: -len("\n    }")]
                out.write(("\n" if not index else ",\n") + f"    {_string(name)}: {head},")
                tail = "".join(
                    f",\n      {_string(key)}: {_pretty(value, '      ')}"
                    for key, value in sorted(self._tail(name).items())
                )
                if not self._counts.get(name, _Counts()).transitions:
                    out.write(f'\n      "transitions": []{tail}\n    }}')
                    continue
                out.write('\n      "transitions": [')
                for chunk in self._printed.read(name):
                    out.write(chunk.decode("utf-8"))
                out.write(f"\n      ]{tail}\n    }}")
            out.write("\n  },")
        out.write(f'\n  "policy": {_pretty(self.policy.to_dict(), "  ")},')
        out.write(f'\n  "policy_version": {_string(self.policy.version)},')
        out.write(f'\n  "receipt_hash": {_string(receipt_hash)},')
        out.write(f'\n  "schema": {_string(RECEIPT_SCHEMA)}\n}}\n')


def _compact(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _pretty(value: Any, indent: str) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return text.replace("\n", "\n" + indent)


# The parts of a record's text that depend only on its kind, phases and reason.
_Parts = tuple[str, str, str, str, str, str]
_PARTS: dict[tuple[str, str, str, str, bool, bool], _Parts] = {}
_E: Final = _T + "    "  # an event's fields
_F: Final = _T + "  "  # a record's fields


def _parts(record: Transition) -> _Parts:
    key = (
        record.event.type,
        record.from_phase,
        record.to_phase,
        record.reason,
        record.attempted,
        record.rejected,
    )
    parts = _PARTS.get(key)
    if parts is None:
        typ, frm, to, reason = (_string(x) for x in key[:4])
        attempted = "true" if record.attempted else "false"
        rejected = "true" if record.rejected else "false"
        parts = _PARTS[key] = (
            f'{{"attempted":{attempted},"event":{{"at":',
            f',"type":{typ}}},"from":{frm},"generation":',
            f',"reason":{reason},"rejected":{rejected},"to":{to}}}',
            f'{_T}{{\n{_F}"attempted": {attempted},\n{_F}"event": {{\n{_E}"at": ',
            f',\n{_E}"type": {typ}\n{_F}}},\n{_F}"from": {frm},\n{_F}"generation": ',
            f',\n{_F}"reason": {reason},\n{_F}"rejected": {rejected},\n{_F}"to": {to}\n{_T}}}',
        )
    return parts


def _formats(record: Transition) -> tuple[bytes, bytes]:
    """The canonical and the printed (indented) text of one transition record."""
    event = record.event
    if event.duration_ms is not None or event.reason is not None or record.would_reject:
        # The rarer fields of the newer modes: the generic (slower) form, same bytes.
        data = record.to_dict()
        return _compact(data), (_T + _pretty(data, _T)).encode("utf-8")
    c_head, c_mid, c_tail, p_head, p_mid, p_tail = _parts(record)
    compact_extra = pretty_extra = ""
    if event.call is not None:
        call = _string(event.call)
        compact_extra = f',"call":{call}'
        pretty_extra = f',\n{_E}"call": {call}'
    if event.retry_after_ms is not None:
        compact_extra += f',"retry_after_ms":{event.retry_after_ms}'
        pretty_extra += f',\n{_E}"retry_after_ms": {event.retry_after_ms}'
    at, generation = str(event.at), str(record.generation)
    until = "null" if record.open_until is None else str(record.open_until)
    compact = f'{c_head}{at}{compact_extra}{c_mid}{generation},"open_until":{until}{c_tail}'
    pretty = f'{p_head}{at}{pretty_extra}{p_mid}{generation},\n{_F}"open_until": {until}{p_tail}'
    return compact.encode("utf-8"), pretty.encode("utf-8")


_DEPENDENCY_LINE: Final = re.compile(r'^    ("(?:[^"\\]|\\.)*"): \{$')


def verify(receipt: str, driver: StreamingReplay, trace: str, out: TextIO) -> int:
    """Compare the receipt file with the replay, line by line; one line of verdict.

    Exit 0 when the file is byte for byte the receipt ``replay`` prints, 1 at the first
    line that differs (named with its dependency and transition).
    """
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as expected:
        receipt_hash = driver.write(expected)
        expected.seek(0)
        try:
            handle = open(receipt, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ReceiptError(f"cannot read: {exc.strerror or exc}", file=receipt) from None
        with handle:
            dependency, transition, number = None, 0, 0
            while True:
                want = expected.readline().encode("utf-8")
                try:
                    got = handle.readline(MAX_LINE_BYTES + 1)
                except OSError as exc:
                    raise ReceiptError(
                        f"cannot read: {exc.strerror or exc}", file=receipt
                    ) from None
                number += 1
                if want != got:
                    break
                if not want:
                    out.write(
                        f"verified: {printable(receipt)} is exactly the receipt of "
                        f"{printable(trace)} under policy {driver.policy.version} "
                        f"(receipt_hash {receipt_hash})\n"
                    )
                    return 0
                line = want.decode("utf-8")
                found = _DEPENDENCY_LINE.match(line.rstrip("\n"))
                if found:
                    dependency, transition = json.loads(found.group(1)), 0
                elif line == _T + "{\n":
                    transition += 1
    where = ""
    if dependency is not None:
        where = f" in dependency {_string(dependency)}"
        if transition or want.startswith(_T.encode() + b"{"):
            where += f" transition #{transition + want.startswith(_T.encode() + b'{')}"
    if not got or (not got.endswith(b"\n") and want.startswith(got)):
        detail = f"the file ends early; the replay has {_shown_line(want)}"
    elif not want:
        detail = f"the replay ends here; the file goes on with {_shown_line(got)}"
    else:
        detail = f"the replay has {_shown_line(want)}, the file {_shown_line(got)}"
    out.write(
        f"{printable(receipt)}:{number}: differs from the replay of {printable(trace)}"
        f"{printable(where)}: {detail}\n"
    )
    return 1


def _shown_line(data: bytes, width: int = 80) -> str:
    text = data.decode("utf-8", "replace").strip()
    text = text[:width] + ("…" if len(text) > width else "")
    return printable(repr(text))
