"""A big trace replayed by several processes, split by dependency.

A breaker depends on its own dependency's events only, so a regular file of
:data:`PARALLEL_BYTES` or more is split by dependency (a CRC-32 of the name) across
processes. Each reads the whole file, feeds only its own dependencies, formats their
transitions and sends them down a pipe; the process the user started reads every pipe as
it has something (so no process waits on another's turn), writes the receipt in order and
hashes it. Each process stops at its own first error; the earliest line among them is the
error a single process reports, and a process stops reading once another has found an
error before where it is.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import stat
import sys
import threading
import zlib
from collections import deque
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from types import ModuleType
from typing import Final, NamedTuple

from toolbreaker._replaying._stream import StreamingReplay, SummaryReplay
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import Counts
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.core._files import iter_line_blocks
from toolbreaker.errors import TraceError

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["INBOX_BYTES", "MAX_JOBS", "PARALLEL_BYTES", "replay_trace"]


class _Share(NamedTuple):
    """What a process that replayed a share of the dependencies says when it has read all."""

    states: dict[str, BreakerState]
    counts: dict[str, Counts]
    error: tuple[int, str] | None = None  # its first error in the trace: (line, message)
    failure: str | None = None  # anything else that stopped it
    stopped: bool = False  # another process's error came before where it had read to


#: A trace at least this big (a regular file) is replayed by several processes.
PARALLEL_BYTES: Final = 8 * 1024 * 1024
#: At most this many: each reads and matches every line, so more add less and less.
MAX_JOBS: Final = 4


def replay_trace(
    policy: Policy | PolicySheet,
    initial: Mapping[str, BreakerState] | None,
    path: str,
    *,
    jobs: int | None = None,
    transitions: bool = True,
) -> StreamingReplay:
    """Replay the trace at ``path``: the driver, ready to write its receipt or summary.

    ``policy`` is one policy for every dependency or a boundary sheet's
    (:class:`~toolbreaker.core._breaker.sheet.PolicySheet`): each under its row's policy.

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
    split = _Split(path)
    try:
        _split(driver, split, size, jobs, transitions=transitions)
    except BaseException:
        split.close()
        raise


def _split(
    driver: StreamingReplay, split: _Split, size: int, jobs: int, *, transitions: bool
) -> None:
    # fork starts at once and shares the imported modules; a process running other threads
    # is not forked (a lock one of them holds would stay held in the child).
    fork = sys.platform.startswith("linux") and threading.active_count() == 1
    context = multiprocessing.get_context("fork" if fork else "spawn")
    initial = {name: ledger.state for name, ledger in driver.ledgers().items()}
    pipes = split.pipes
    # The first line with an error any process has found: the others stop reading past it.
    first_error = context.Value("q", _NO_ERROR)
    for index in range(jobs):
        receive, send = context.Pipe(duplex=False)
        _widen(send)
        pipes.append(receive)
        # A forked process holds a copy of every read end made so far: it closes them, so
        # that closing ours (an output that failed) breaks its pipe at once.
        inherited = tuple(pipe.fileno() for pipe in pipes) if fork else ()
        share = _ShareOf(split.trace, size, index, jobs, transitions, first_error, inherited)
        worker = context.Process(  # type: ignore[attr-defined]
            target=_replay_share,
            args=(send, driver.sheet, initial, share),
            name=f"toolbreaker-replay-{index}",
            daemon=True,
        )
        split.workers.append(worker)
        worker.start()
        send.close()
    shares = []
    for index, receive in enumerate(pipes):
        try:
            shares.append(receive.recv())
        except EOFError:
            worker = split.workers[index]
            worker.join()
            raise TraceError(
                f"replay process {index} ended without an answer (exit code {worker.exitcode})",
                file=split.trace,
            ) from None
    for index, share in enumerate(shares):
        if share.failure is not None:
            raise TraceError(f"replay process {index} failed: {share.failure}", file=split.trace)
    errors = [share.error for share in shares if share.error is not None]
    if errors:
        line, message = min(errors)
        raise TraceError(message, file=split.trace, line=line or None)
    assert not any(share.stopped for share in shares)  # only past another one's error
    for share, receive in zip(shares, pipes, strict=True):  # with their initial states, as ended
        for name in share.states:
            split.sources[name] = receive
        driver.adopt(share.states, share.counts, split)
    if not transitions:
        split.stop()


class _Split:
    """The processes a replay was split across, and the pipes their transitions come on."""

    def __init__(self, trace: str) -> None:
        self.trace = trace
        self.workers: list[BaseProcess] = []
        self.pipes: list[Connection] = []
        self.sources: dict[str, Connection] = {}  # dependency -> the pipe of its process
        self._inbox: _Inbox | None = None

    def chunks_of(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        """A dependency's transitions as its process sends them (see ``send_transitions``)."""
        source = self.sources[name]
        if self._inbox is None:
            self._inbox = _Inbox(self.pipes)
        take = self._inbox.take
        try:
            while printed := take(source):
                yield printed, take(source)
        except (EOFError, OSError):
            raise TraceError(
                "a replay process ended before it sent every transition", file=self.trace
            ) from None

    def stop(self) -> None:
        """Wait for the processes to end (they have nothing more to send)."""
        _stop(self.workers)

    def close(self) -> None:
        """Close the pipes (a process still sending gets a broken pipe and ends); stop them."""
        for pipe in self.pipes:
            pipe.close()
        _stop(self.workers)


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
    policy: PolicySheet,
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
            answer.send(_Share(*driver.share()))
            if share.transitions:
                driver.send_transitions(answer.send_bytes)
    except (KeyboardInterrupt, BrokenPipeError):  # pragma: no cover - the parent stopped
        pass  # reading (an interrupt, a closed output) and says why
    except Exception as exc:  # noqa: BLE001 - told to the parent, which reports it
        with contextlib.suppress(OSError):  # unless it is gone: then it reports nothing
            answer.send(_Share({}, {}, failure=f"{type(exc).__name__}: {exc}"))
    finally:
        answer.close()
