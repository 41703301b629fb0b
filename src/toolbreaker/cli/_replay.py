"""Streaming replay: a trace of any size in, its receipt out, in bounded memory and fast.

The receipt's canonical order groups transitions by dependency, but a trace interleaves
dependencies, so each transition is kept, as it happens, as a %-template of its printed
text (one per kind of record) and the few fields that vary (time, call id, generation,
deadline), and spilled per dependency, in chunks, to a temporary file. Writing the
receipt reads the chunks back in dependency order once: each is formatted with one ``%``,
printed, and hashed as canonical text (the printed text without its layout), which is
possible in one pass because ``receipt_hash`` is printed after everything it covers.
Memory holds the ledgers (one per dependency), the unsettled calls, the chunk index, a
few MB of pending records, and an 8-byte hash per call id (to refuse a duplicate id),
not the transitions.

The fast path: :meth:`~toolbreaker.core.breaker.receipt.Replay.feed_trace` reads plain
lines without the JSON decoder and lets the core's
:func:`~toolbreaker.core.breaker.machine.plain_step` decide them without building events
or records; the records it decides come to :meth:`StreamingReplay._keep_plain`.

The output is byte-identical to :func:`~toolbreaker.core.breaker.receipt.dump_receipt` of
the in-memory receipt; tests compare the two on generated traces.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import multiprocessing
import os
import re
import stat
import sys
import tempfile
import threading
import zlib
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from types import ModuleType
from typing import IO, Any, Final, NamedTuple, TextIO, cast

from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.receipt import RECEIPT_SCHEMA, Ledger, Replay
from toolbreaker.core.breaker.state import BreakerState, Transition, opened, opening
from toolbreaker.core.files import MAX_LINE_BYTES, iter_line_blocks, printable
from toolbreaker.errors import ReceiptError, TraceError

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = [
    "INBOX_BYTES",
    "MAX_JOBS",
    "PARALLEL_BYTES",
    "StreamingReplay",
    "SummaryReplay",
    "replay_trace",
    "verify",
]

_string = json.encoder.encode_basestring  # json.dumps(text, ensure_ascii=False), in C
_FLUSH_BYTES: Final = 4 * 1024 * 1024
# The printed receipt nests a transition four levels deep (two spaces each).
_T: Final = " " * 8


class _CallIds:
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


# Bytes that only layout puts in the printed text of a record when no string in it holds
# a space: deleting them gives the canonical text (which has no layout at all).
_LAYOUT: Final = b"\n "
# About what a pending record holds in memory (its fields), to bound the buffers.
_RECORD_BYTES: Final = 128
# A record in a buffer: its template and four fields.
_STRIDE: Final = 5
# Consumes a field and prints nothing of it.
_SKIP: Final = "%.0s" * 4


class _Counts:
    __slots__ = ("opens", "rejected", "remote", "transitions", "would_reject")

    def __init__(self) -> None:
        self.remote = self.rejected = self.opens = self.transitions = self.would_reject = 0


class _Spill:
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
        self.counts: dict[str, _Counts] = {}

    def start(self, dependency: str) -> list[object]:
        """The (new) buffer of a dependency that has none yet."""
        self.counts.setdefault(dependency, _Counts())
        items: list[object] = []
        self.pending[dependency] = items
        return items

    def add(self, dependency: str, record: tuple[object, ...], canonical: str) -> None:
        """Add a record (template and fields) whose canonical text is not derived."""
        items = self.pending.get(dependency)
        if items is None:
            items = self.start(dependency)
        self._exact.setdefault(dependency, {})[len(items) // _STRIDE] = canonical
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
            templates = cast("list[str]", items[::_STRIDE])
            del items[::_STRIDE]
            counts = self.counts[dependency]
            counts.transitions += len(templates)
            for template, times in Counter(templates).items():
                flags = _FLAGS.get(template) or _flags(template)
                counts.remote += times * flags[0]
                counts.rejected += times * flags[1]
                counts.would_reject += times * flags[2]
            exact = self._exact.pop(dependency, None)
            canonical = None
            if exact:
                canonical = [
                    exact[index] if index in exact else _CANONICAL_OF[template]
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
                compact = printed.translate(None, _LAYOUT)
            else:
                compact = ("".join(canonical) % values).encode("utf-8")
            if not index:  # drop the separator in front of the first record
                printed, compact = printed[1:], compact[1:]
            yield printed, compact

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _flags(template: str) -> tuple[int, int, int]:
    """How many records of a template were attempted, rejected, would be rejected."""
    return (
        template.count('"attempted": true'),
        template.count('"rejected": true'),
        template.count('"would_reject": true'),
    )


class StreamingReplay(Replay):
    """A :class:`Replay` that spills transitions instead of keeping them."""

    def __init__(self, policy: Policy, initial: Mapping[str, BreakerState] | None = None) -> None:
        super().__init__(policy, initial)
        self._ids = _CallIds()
        self._spill = _Spill()
        self._counts = self._spill.counts
        # Dependencies other processes replayed: the pipe each sends its transitions on.
        self._sources: dict[str, Connection] = {}
        self._inbox: _Inbox | None = None
        self._workers: list[BaseProcess] = []
        self._pipes: list[Connection] = []
        self._trace: str | None = None  # the trace those processes read

    def _seen(self, ledger: Ledger, dependency: str, call: str) -> bool:
        return self._ids.add(ledger, dependency, call)

    def _seen_check(self) -> Callable[[Ledger, str, str], bool]:
        return self._ids.add

    def _keep(self, ledger: Ledger, dependency: str, records: tuple[Transition, ...]) -> None:
        spill = self._spill
        for record in records:
            if opened(record):
                spill.counts.setdefault(dependency, _Counts()).opens += 1
            compact, pretty = _formats(record)
            # A literal template: it takes (and prints nothing of) four empty fields.
            literal = _SKIP + (_NEXT + pretty).replace("%", "%%")
            spill.add(dependency, (literal, 0, 0, 0, 0), _SKIP + ("," + compact).replace("%", "%%"))

    def _keep_plain(  # noqa: PLR0917 - called once per event by feed_trace
        self,
        dependency: str,
        kind: str,
        at: int,
        call: str,
        generation: int | None,
        before: BreakerState,
        after: BreakerState,
        reason: str,
    ) -> None:
        key = (kind, before.phase, after.phase, reason)
        template = _PRINTED.get(key)
        if template is None:
            template = _plain_templates(key)
        spill = self._spill
        if opening(before, after):
            spill.counts.setdefault(dependency, _Counts()).opens += 1
        until = after.open_until
        record = (
            template,
            at,
            _string(call),
            after.generation,
            "null" if until is None else until,
        )
        if " " in call:
            spill.add(dependency, record, _CANONICAL_OF[template])
            return
        items = spill.pending.get(dependency)
        if items is None:
            items = spill.start(dependency)
        items.extend(record)
        spill.buffered += 1
        if spill.buffered >= spill.limit:
            spill.flush()

    def summary(self) -> dict[str, Any]:
        """Per dependency: the counts and final state, without the transitions."""
        self._spill.flush()
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
        """Remove the temporary files; stop the processes that replayed a share, if any."""
        self._spill.close()
        for pipe in self._pipes:
            pipe.close()  # a process still sending gets a broken pipe and ends
        _stop(self._workers)

    def _share(self) -> _Share:
        """What this replay of a share of the dependencies tells the process that asked."""
        self._spill.flush()
        states = {name: ledger.state for name, ledger in self.ledgers().items()}
        return _Share(states, self._counts)

    def _send_transitions(self, answer: Connection) -> None:
        """Send the transitions of each dependency, in order, as :meth:`write` reads them."""
        for name in sorted(self.ledgers()):
            if self._counts.get(name, _Counts()).transitions:
                for printed, canonical in self._spill.chunks_of(name):
                    answer.send_bytes(printed)
                    answer.send_bytes(canonical)
                answer.send_bytes(b"")

    def _adopt(self, share: _Share, source: Connection) -> None:
        """Take the dependencies another process replayed; ``source`` sends their records."""
        self._counts.update(share.counts)
        for name, state in share.states.items():
            self._ledgers[name] = Ledger(state)
            self._sources[name] = source

    def _chunks_of(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        """A dependency's transitions as (printed, canonical) text, from wherever they are."""
        source = self._sources.get(name)
        if source is None:
            yield from self._spill.chunks_of(name)
            return
        if self._inbox is None:
            self._inbox = _Inbox(self._pipes)
        take = self._inbox.take
        try:
            while printed := take(source):
                yield printed, take(source)
        except (EOFError, OSError):
            raise TraceError(
                "a replay process ended before it sent every transition", file=self._trace
            ) from None

    def __enter__(self) -> StreamingReplay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def write(self, out: TextIO) -> str:
        """Write the receipt to ``out`` exactly as ``dump_receipt`` would; return its hash.

        One pass: the hash covers everything but itself, and it is printed after all of
        that, so each chunk of transitions is printed and hashed (as canonical text) at
        once.
        """
        spill = self._spill
        spill.flush()
        emit = _sink(out)
        digest = hashlib.sha256()
        hashed = digest.update
        names = sorted(self.ledgers())
        hashed(b'{"dependencies":{')
        emit(b'{\n  "dependencies": {' + (b"}," if not names else b""))
        for index, name in enumerate(names):
            head, tail = self._head(name), self._tail(name)
            key = _compact(name)
            hashed((b"," if index else b"") + key + b":" + _compact(head)[:-1])
            hashed(b',"transitions":[')
            printed_head = _pretty(head, "    ")[: -len("\n    }")]
            emit(f"{',' if index else ''}\n    {key.decode()}: {printed_head},".encode())
            printed_tail = "".join(
                f",\n      {_string(field)}: {_pretty(value, '      ')}"
                for field, value in sorted(tail.items())
            ).encode()
            if not spill.counts.get(name, _Counts()).transitions:
                emit(b'\n      "transitions": []' + printed_tail + b"\n    }")
            else:
                emit(b'\n      "transitions": [')
                for printed, canonical in self._chunks_of(name):
                    emit(printed)
                    hashed(canonical)
                emit(b"\n      ]" + printed_tail + b"\n    }")
            hashed(b"]" + (b"," + _compact(tail)[1:] if tail else b"}"))
        if names:
            emit(b"\n  },")
        policy = self.policy.to_dict()
        hashed(b'},"policy":' + _compact(policy))
        hashed(b',"policy_version":' + _compact(self.policy.version))
        hashed(b',"schema":' + _compact(RECEIPT_SCHEMA) + b"}")
        receipt_hash = digest.hexdigest()
        emit(
            (
                f'\n  "policy": {_pretty(policy, "  ")},'
                f'\n  "policy_version": {_string(self.policy.version)},'
                f'\n  "receipt_hash": {_string(receipt_hash)},'
                f'\n  "schema": {_string(RECEIPT_SCHEMA)}\n}}\n'
            ).encode()
        )
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


class SummaryReplay(StreamingReplay):
    """A streaming replay that counts transitions instead of keeping them: ``--summary``.

    The counts are those :meth:`StreamingReplay.summary` gives, without spilling a record
    or formatting one; it writes no temporary file.
    """

    def _keep(self, ledger: Ledger, dependency: str, records: tuple[Transition, ...]) -> None:
        counts = self._counts.get(dependency)
        if counts is None:
            counts = self._counts[dependency] = _Counts()
        for record in records:
            counts.transitions += 1
            counts.remote += record.attempted
            counts.rejected += record.rejected
            counts.would_reject += record.would_reject
            counts.opens += opened(record)

    def _keep_plain(  # noqa: PLR0917 - called once per event by feed_trace
        self,
        dependency: str,
        kind: str,
        at: int,
        call: str,
        generation: int | None,
        before: BreakerState,
        after: BreakerState,
        reason: str,
    ) -> None:
        counts = self._counts.get(dependency)
        if counts is None:
            counts = self._counts[dependency] = _Counts()
        counts.transitions += 1
        if reason in _ADMITTED:
            counts.remote += 1
        elif kind == "request":
            counts.rejected += 1
        if opening(before, after):
            counts.opens += 1


class _Share(NamedTuple):
    """What a process that replayed a share of the dependencies says when it has read all."""

    states: dict[str, BreakerState]
    counts: dict[str, _Counts]
    error: tuple[int, str] | None = None  # its first error in the trace: (line, message)
    failure: str | None = None  # anything else that stopped it
    stopped: bool = False  # another process's error came before where it had read to


#: A trace at least this big (a regular file) is replayed by several processes.
PARALLEL_BYTES: Final = 8 * 1024 * 1024
#: At most this many: each reads and matches every line, so more add less and less.
MAX_JOBS: Final = 4


def replay_trace(
    policy: Policy,
    initial: Mapping[str, BreakerState] | None,
    path: str,
    *,
    jobs: int | None = None,
    transitions: bool = True,
) -> StreamingReplay:
    """Replay the trace at ``path``: the driver, ready to write its receipt or summary.

    A breaker's transitions depend on its own dependency's events only, so a regular file
    of :data:`PARALLEL_BYTES` or more is split by dependency across ``jobs`` processes
    (by default one per usable CPU, at most :data:`MAX_JOBS`; 1 replays in this process).
    Each reads the whole trace and feeds the events of its own dependencies; when
    ``transitions`` (the receipt, not just the summary) is wanted, each then formats its
    dependencies' transitions and sends them down a pipe, in the order :meth:`write`
    reads them. The receipt is byte-identical to a replay in one process, and an invalid
    trace fails at the same first line with the same message: each process stops at its
    own first error, which is the first error among its dependencies' lines and the lines
    no process can place. Close the driver (it is a context manager) when done.
    """
    size = _regular_size(path)
    if jobs is None:
        jobs = 1 if size is None or size < PARALLEL_BYTES else _usable_cpus()
    driver = (StreamingReplay if transitions else SummaryReplay)(policy, initial)
    try:
        if jobs <= 1 or size is None:
            driver.feed_trace(path)
        else:
            _feed_in_processes(driver, path, size, min(jobs, MAX_JOBS), transitions=transitions)
    except BaseException:
        driver.close()
        raise
    return driver


def _regular_size(path: str) -> int | None:
    """The size of a regular file (which several processes can read), else ``None``."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None  # feed_trace() says what is wrong with it
    return status.st_size if stat.S_ISREG(status.st_mode) else None


def _usable_cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return min(MAX_JOBS, len(affinity(0)) if affinity else os.cpu_count() or 1)


def _feed_in_processes(
    driver: StreamingReplay, path: str, size: int, jobs: int, *, transitions: bool
) -> None:
    """Replay the first ``size`` bytes of ``path`` in ``jobs`` processes, into ``driver``."""
    # fork starts at once and shares the imported modules; a process running other threads
    # is not forked (a lock one of them holds would stay held in the child).
    fork = sys.platform.startswith("linux") and threading.active_count() == 1
    context = multiprocessing.get_context("fork" if fork else "spawn")
    initial = {name: ledger.state for name, ledger in driver.ledgers().items()}
    driver._trace = path
    pipes = driver._pipes
    # The first line with an error any process has found: the others stop reading past it.
    first_error = context.Value("q", _NO_ERROR)
    for index in range(jobs):
        receive, send = context.Pipe(duplex=False)
        _widen(send)
        pipes.append(receive)
        # A forked process holds a copy of every read end made so far: it closes them, so
        # that closing ours (an output that failed) breaks its pipe at once.
        inherited = tuple(pipe.fileno() for pipe in pipes) if fork else ()
        share = _ShareOf(path, size, index, jobs, transitions, first_error, inherited)
        worker = context.Process(  # type: ignore[attr-defined]
            target=_replay_share,
            args=(send, driver.policy, initial, share),
            name=f"toolbreaker-replay-{index}",
            daemon=True,
        )
        driver._workers.append(worker)
        worker.start()
        send.close()
    shares = []
    for index, receive in enumerate(pipes):
        try:
            shares.append(receive.recv())
        except EOFError:
            worker = driver._workers[index]
            worker.join()
            raise TraceError(
                f"replay process {index} ended without an answer (exit code {worker.exitcode})",
                file=path,
            ) from None
    for index, share in enumerate(shares):
        if share.failure is not None:
            raise TraceError(f"replay process {index} failed: {share.failure}", file=path)
    errors = [share.error for share in shares if share.error is not None]
    if errors:
        line, message = min(errors)
        raise TraceError(message, file=path, line=line or None)
    assert not any(share.stopped for share in shares)  # only past another one's error
    for share, receive in zip(shares, pipes, strict=True):  # with their initial states, as ended
        driver._adopt(share, receive)
    if not transitions:
        _stop(driver._workers)


def _widen(pipe: Connection) -> None:
    """Give a pipe a 1 MiB buffer where the system allows it (Linux; 64 KiB otherwise).

    With the default, a process formatting transitions and the one writing them take
    turns every 64 KiB; measured on the 20 MB trace of ``benchmarks/bench_replay.py``,
    the receipt's writing took about a fifth less time with 1 MiB.
    """
    setting = getattr(fcntl, "F_SETPIPE_SZ", None)
    if fcntl is not None and setting is not None:
        with contextlib.suppress(OSError):  # over the user's pipe quota: keep the default
            fcntl.fcntl(pipe.fileno(), setting, _PIPE_BYTES)


def _stop(workers: list[BaseProcess]) -> None:
    for worker in workers:
        if worker.pid is None:
            continue  # never started
        worker.join(timeout=5)
        if worker.is_alive():  # pragma: no cover - a process stuck in a write
            worker.terminate()
            worker.join()
    workers.clear()


class _Owners(dict[str, bool]):
    """Per dependency: whether another process replays it (decided once per name)."""

    def __init__(self, index: int, jobs: int) -> None:
        super().__init__()
        self._index, self._jobs = index, jobs

    def __missing__(self, dependency: str) -> bool:
        key = zlib.crc32(dependency.encode("utf-8", "surrogatepass"))
        other = self[dependency] = key % self._jobs != self._index
        return other


_NO_ERROR: Final = 2**63 - 1
_PIPE_BYTES: Final = 1024 * 1024  # the most /proc/sys/fs/pipe-max-size allows by default
#: How much of the transitions a replay process sends may wait here, per process.
INBOX_BYTES: Final = 16 * 1024 * 1024


class _Inbox:
    """The transitions replay processes send, read as they come.

    The receipt takes each dependency's transitions in turn from the process that
    replayed it. Reading only that process's pipe would make the others wait, their
    pipes full, so every pipe is read as it has something, and what is not needed yet
    waits here: up to :data:`INBOX_BYTES` per process, past which that process waits.
    """

    def __init__(self, pipes: list[Connection]) -> None:
        self._waiting: dict[Connection, deque[bytes]] = {pipe: deque() for pipe in pipes}
        self._bytes = dict.fromkeys(pipes, 0)
        self._open = set(pipes)  # not ended

    def take(self, pipe: Connection) -> bytes:
        """The next message from ``pipe``; :class:`EOFError` if it ended without one."""
        waiting = self._waiting[pipe]
        while not waiting:
            if pipe not in self._open:
                raise EOFError
            readable = [
                other for other in self._open if other is pipe or self._bytes[other] < INBOX_BYTES
            ]
            for ready in wait(readable):
                assert isinstance(ready, Connection)
                try:
                    message = ready.recv_bytes()
                except EOFError:
                    self._open.discard(ready)
                    continue
                self._waiting[ready].append(message)
                self._bytes[ready] += len(message)
        message = waiting.popleft()
        self._bytes[pipe] -= len(message)
        return message


class _ShareOf(NamedTuple):
    """Which share of which trace a replay process replays."""

    path: str
    size: int  # bytes to read: the file's size when the replay began
    number: int  # of this share, from 0
    jobs: int
    transitions: bool  # send them (for the receipt), or only the counts (for a summary)
    first_error: Synchronized[int]  # the first line with an error any process found
    inherited: tuple[int, ...] = ()  # descriptors of the parent's read ends, to close


class _Stopped(Exception):
    """Another replay process found an error before the lines this one would read next."""


def _blocks(share: _ShareOf) -> Iterator[tuple[int, list[str]]]:
    for first, lines in iter_line_blocks(share.path, TraceError, size=share.size):
        if first > share.first_error.value:
            raise _Stopped
        yield first, lines


def _replay_share(
    answer: Connection,
    policy: Policy,
    initial: Mapping[str, BreakerState],
    share: _ShareOf,
) -> None:
    """In a process of its own: replay the dependencies of one share and answer."""
    for descriptor in share.inherited:
        os.close(descriptor)
    try:
        others = _Owners(share.number, share.jobs)
        mine = {name: state for name, state in initial.items() if not others[name]}
        with (StreamingReplay if share.transitions else SummaryReplay)(policy, mine) as driver:
            try:
                driver.feed_trace(share.path, skip=others.__getitem__, blocks=_blocks(share))
            except TraceError as exc:
                line = exc.line or 0
                with share.first_error.get_lock():
                    share.first_error.value = min(share.first_error.value, line)
                answer.send(_Share({}, {}, error=(line, exc.message)))
                return
            except _Stopped:
                answer.send(_Share({}, {}, stopped=True))
                return
            answer.send(driver._share())
            if share.transitions:
                driver._send_transitions(answer)
    except (KeyboardInterrupt, BrokenPipeError):  # pragma: no cover - the parent stopped
        pass  # reading (an interrupt, a closed output) and says why
    except Exception as exc:  # noqa: BLE001 - told to the parent, which reports it
        with contextlib.suppress(OSError):  # unless it is gone: then it reports nothing
            answer.send(_Share({}, {}, failure=f"{type(exc).__name__}: {exc}"))
    finally:
        answer.close()


def _sink(out: TextIO) -> Callable[[bytes], object]:
    """Write UTF-8 bytes to ``out``: to its binary buffer when it has one that takes them."""
    buffer = getattr(out, "buffer", None)
    encoding = str(getattr(out, "encoding", "")).lower().replace("_", "-")
    if buffer is not None and encoding in ("utf-8", "utf8") and os.linesep == "\n":
        out.flush()
        return cast("Callable[[bytes], object]", buffer.write)

    def write(data: bytes) -> object:
        return out.write(data.decode("utf-8"))

    return write


def _compact(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _pretty(value: Any, indent: str) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return text.replace("\n", "\n" + indent)


class _Parts(NamedTuple):
    """The parts of a record's text that depend only on its kind, phases and reason."""

    c_head: str
    c_mid: str
    c_tail: str
    p_head: str
    p_mid: str
    p_tail: str


_PARTS: dict[tuple[str, str, str, str, bool, bool], _Parts] = {}
_E: Final = _T + "    "  # an event's fields
_F: Final = _T + "  "  # a record's fields
_NEXT: Final = ",\n"  # before each record in the printed text (the first one's is dropped)
_ADMITTED: Final = frozenset({"call-admitted", "probe-admitted"})


def _parts(key: tuple[str, str, str, str, bool, bool]) -> _Parts:
    """The parts for (type, from, to, reason, attempted, rejected)."""
    parts = _PARTS.get(key)
    if parts is None:
        typ, frm_, to_, why = (_string(x) for x in key[:4])
        yes = "true" if key[4] else "false"
        no = "true" if key[5] else "false"
        parts = _PARTS[key] = _Parts(
            f'{{"attempted":{yes},"event":{{"at":',
            f',"type":{typ}}},"from":{frm_},"generation":',
            f',"reason":{why},"rejected":{no},"to":{to_}}}',
            f'{_T}{{\n{_F}"attempted": {yes},\n{_F}"event": {{\n{_E}"at": ',
            f',\n{_E}"type": {typ}\n{_F}}},\n{_F}"from": {frm_},\n{_F}"generation": ',
            f',\n{_F}"reason": {why},\n{_F}"rejected": {no},\n{_F}"to": {to_}\n{_T}}}',
        )
    return parts


# Per (type, from, to, reason) of a record made by feed_plain (never ``would_reject``): its
# printed text as a %-template of (at, call as JSON, generation, open_until as JSON); per
# such template, its canonical template and its (attempted, rejected, would_reject).
_PRINTED: dict[tuple[str, str, str, str], str] = {}
_CANONICAL_OF: dict[str, str] = {}
_FLAGS: dict[str, tuple[int, int, int]] = {}


def _plain_templates(key: tuple[str, str, str, str]) -> str:
    kind, frm, to, reason = key
    attempted = reason in _ADMITTED
    parts = _parts((kind, frm, to, reason, attempted, not attempted and kind == "request"))
    c_head, c_mid, c_tail, p_head, p_mid, p_tail = (part.replace("%", "%%") for part in parts)
    printed = f'{_NEXT}{p_head}%s,\n{_E}"call": %s{p_mid}%s,\n{_F}"open_until": %s{p_tail}'
    _CANONICAL_OF[printed] = f',{c_head}%s,"call":%s{c_mid}%s,"open_until":%s{c_tail}'
    _FLAGS[printed] = _flags(printed)
    _PRINTED[key] = printed
    return printed


def _formats(record: Transition) -> tuple[str, str]:
    """The canonical and the printed (indented) text of one transition record."""
    event = record.event
    if event.duration_ms is not None or event.reason is not None or record.would_reject:
        # The rarer fields of the newer modes: the generic (slower) form, same bytes.
        data = record.to_dict()
        return _compact(data).decode("utf-8"), _T + _pretty(data, _T)
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
        call = _string(event.call)
        compact_extra = f',"call":{call}'
        pretty_extra = f',\n{_E}"call": {call}'
    if event.retry_after_ms is not None:
        compact_extra += f',"retry_after_ms":{event.retry_after_ms}'
        pretty_extra += f',\n{_E}"retry_after_ms": {event.retry_after_ms}'
    at, generation = str(event.at), str(record.generation)
    until = "null" if record.open_until is None else str(record.open_until)
    compact = (
        f"{parts.c_head}{at}{compact_extra}{parts.c_mid}{generation},"
        f'"open_until":{until}{parts.c_tail}'
    )
    pretty = (
        f"{parts.p_head}{at}{pretty_extra}{parts.p_mid}{generation},"
        f'\n{_F}"open_until": {until}{parts.p_tail}'
    )
    return compact, pretty


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
