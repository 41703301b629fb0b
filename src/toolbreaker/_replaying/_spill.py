"""Where a streaming replay keeps what it must not hold in memory.

:class:`Spill` keeps each dependency's transitions as %-templates of their text and the
few fields that vary, in chunks, in a temporary file, and gives them back in dependency
order as printed and canonical text. :class:`CallIds` remembers every call id in 8
bytes (to refuse a duplicate id) instead of a string and a set entry.
"""

from __future__ import annotations

import marshal
import tempfile
from array import array
from collections import Counter
from collections.abc import Iterator
from typing import IO, Final, cast

from toolbreaker._replaying._text import CANONICAL_OF, LAYOUT, flags
from toolbreaker.core._breaker.receipt import Counts

__all__ = ["STRIDE", "CallIds", "Spill"]

_FLUSH_BYTES: Final = 4 * 1024 * 1024
# About what a pending record holds in memory (its fields), to bound the buffers.
_RECORD_BYTES: Final = 128
#: A record in a buffer: its template and four fields.
STRIDE: Final = 5


class CallIds:
    """A set of 64-bit hashes of (dependency, call id) in one flat array.

    Open addressing with linear probing: 8 bytes a slot at most half full, instead of
    a Python string and set entry per call. Two ids share a hash with a probability of
    about n**2 / 2**65 (under 1e-7 for two million calls): such a pair would be reported
    as a duplicate id. The hash is Python's own (SipHash, keyed per process), so no one
    can craft two ids that collide.
    """

    def __init__(self) -> None:
        self._slots = array("q", bytes(8 * 1024))
        self._mask = len(self._slots) - 1
        self._free = len(self._slots) // 2

    def add(self, ledger: object, dependency: str, call: str) -> bool:
        """Remember the id; ``True`` if it was there already (``ledger`` is not used)."""
        key = hash((dependency, call)) or 1
        slots = self._slots
        index = key & self._mask
        found = slots[index]
        while found:
            if found == key:
                return True
            index = (index + 1) & self._mask
            found = slots[index]
        slots[index] = key
        self._free -= 1
        if not self._free:
            self._grow()
        return False

    def _grow(self) -> None:
        old = self._slots
        self._slots = slots = array("q", bytes(16 * len(old)))
        self._mask = mask = len(slots) - 1
        self._free = len(slots) // 2 - len(old) // 2
        for key in old:
            if key:
                index = key & mask
                while slots[index]:
                    index = (index + 1) & mask
                slots[index] = key


class Spill:
    r"""Per dependency, its transitions as %-templates and their fields, in a temporary file.

    A record is a template of its printed text (with a separator in front, ``",\n"``;
    the reader drops the first one) and the four fields it is filled with, kept in one
    flat list per dependency: template, at, call, generation, open_until, template, ...
    A chunk is written with :mod:`marshal` (the templates of a chunk are a few shared
    strings) and read back as text with one ``%`` for the whole chunk, so neither
    formatting nor writing costs a Python step per record. The canonical text is the
    printed text without newlines and spaces, unless a string in a record holds a space
    (a call id, an operator's reason): a chunk with such a record keeps canonical
    templates too.
    """

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None  # created at the first flush
        self.pending: dict[str, list[object]] = {}
        # Per dependency: position in its buffer -> canonical template, where not derived.
        self._exact: dict[str, dict[int, str]] = {}
        self.buffered = 0
        self.limit = max(1, _FLUSH_BYTES // _RECORD_BYTES)
        self.chunks: dict[str, list[tuple[int, int]]] = {}
        self.counts: dict[str, Counts] = {}

    def start(self, dependency: str) -> list[object]:
        """The (new) buffer of a dependency that has none yet."""
        self.counts.setdefault(dependency, Counts())
        items: list[object] = []
        self.pending[dependency] = items
        return items

    def add(self, dependency: str, record: tuple[object, ...], canonical: str) -> None:
        """Add a record (template and fields) whose canonical text is not derived."""
        items = self.pending.get(dependency)
        if items is None:
            items = self.start(dependency)
        self._exact.setdefault(dependency, {})[len(items) // STRIDE] = canonical
        items.extend(record)
        self.buffered += 1
        if self.buffered >= self.limit:
            self.flush()

    def flush(self) -> None:
        if not self.buffered:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        out = self._file
        for dependency, items in self.pending.items():
            if not items:
                continue
            templates = cast("list[str]", items[::STRIDE])
            del items[::STRIDE]
            counts = self.counts[dependency]
            counts.transitions += len(templates)
            for template, times in Counter(templates).items():
                attempted, rejected, would_reject = flags(template)
                counts.remote += times * attempted
                counts.rejected += times * rejected
                counts.would_reject += times * would_reject
            exact = self._exact.pop(dependency, None)
            canonical = None
            if exact:
                canonical = [
                    exact[index] if index in exact else CANONICAL_OF[template]
                    for index, template in enumerate(templates)
                ]
            data = marshal.dumps((templates, canonical, items))
            offset = out.seek(0, 2)
            out.write(data)
            self.chunks.setdefault(dependency, []).append((offset, len(data)))
            items.clear()
        self.buffered = 0

    def chunks_of(self, dependency: str) -> Iterator[tuple[bytes, bytes]]:
        """A dependency's records as (printed, canonical) text, chunk by chunk."""
        self.flush()
        for index, (offset, length) in enumerate(self.chunks.get(dependency, ())):
            assert self._file is not None
            self._file.seek(offset)
            # Our own temporary file, written by flush() above: not untrusted input.
            templates, canonical, fields = marshal.loads(self._file.read(length))  # noqa: S302
            values = tuple(fields)
            printed = ("".join(templates) % values).encode("utf-8")
            if canonical is None:
                compact = printed.translate(None, LAYOUT)
            else:
                compact = ("".join(canonical) % values).encode("utf-8")
            if not index:  # drop the separator in front of the first record
                printed, compact = printed[1:], compact[1:]
            yield printed, compact

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
