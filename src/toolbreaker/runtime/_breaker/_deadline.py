"""Deadlines that hold: worker threads for sync calls, a watchdog per event loop.

Nothing here decides anything about a dependency's health; it only runs calls and gives
up on them at their deadline. The breaker turns what happened into events.

Sync: :class:`Workers`. A sync call cannot be interrupted, so it runs in a worker thread
and its caller waits at most until the deadline. Theory of operation:

- A caller takes a worker (:meth:`Workers.acquire`) before it runs anything: an idle
  one, else a new thread. Ordinary concurrency is never refused and never queued: a call
  within its deadline has its caller waiting for it, so the callers the application
  already runs bound these workers (a queue would start calls whose callers were
  answered long ago, possibly after the breaker opened).
- The bound is against *hung* calls. A caller whose deadline passes gets
  :data:`OVERDUE`. If the call had not started yet it never starts; if it is running,
  its worker stays *pinned* to it (counted in :attr:`Workers.pinned`) until it returns:
  no caller waits for it any more, so nothing else bounds such threads. Once
  ``max_hung`` workers are pinned, :meth:`Workers.acquire` answers ``None`` at once (the
  breaker answers ``hung``) until one returns; ``on_late`` is then called and its worker
  is idle again.
- ``reserved`` of those (1 by default) are only for probes: calls that hang while the
  dependency is down cannot starve the probe that would find it healthy again.
- A call holds what it was given (a bulkhead slot) until it is over, not until its
  caller was answered: :meth:`Worker.run` calls its ``then`` once the call is over, in
  the worker thread for a call that outlived its deadline.
- A caller may also stop waiting because it was told to (``stop``: a model turn's call
  cancelled by policy): the call is let go exactly as at its deadline, pinned and
  holding what it was given until it returns.
- Up to ``max_hung`` idle workers are kept; an idle worker beyond those retires after
  :data:`KEEP_ALIVE_S` without a call, so a burst leaves no crowd of threads behind.
- The hand-off is two locks per worker used as binary semaphores (``go`` and ``done``):
  no future, no queue, one wake-up each way.
- After ``os.fork`` the child forgets the parent's threads (they do not exist there) and
  starts its own; nothing in the child waits on a lock a parent thread held.

Async: :class:`Watchdog`. One per event loop; :func:`within` arms a deadline with a dict
insert, and one ``loop.call_at`` timer, set for the earliest deadline, cancels the tasks
that are overdue. :func:`within` turns that cancellation into ``TimeoutError`` (and, on
Python 3.11+, uncancels the task so an ``asyncio.timeout`` or task group around it sees
no cancellation of its own); a cancellation from anywhere else stays a
``CancelledError``.

Precision of the watchdog: a call is never cancelled before its deadline, and at most
:data:`TICK_S` (1 ms) after it, plus the loop's own latency (a loop blocked in sync code
cancels late, as ``asyncio.timeout`` does). The timer fires at the earliest deadline;
when it finds the next one less than :data:`TICK_S` away it is set :data:`TICK_S` ahead
instead, so a crowd of nearly equal deadlines costs one tick rather than one each.
Deadlines are on the loop's clock (``loop.time()``), the one its timers run on.
"""

from __future__ import annotations

import contextvars
import enum
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, TypeVar

from toolbreaker.runtime._log import log as _log

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "KEEP_ALIVE_S",
    "OVERDUE",
    "TICK_S",
    "Overdue",
    "Watchdog",
    "Worker",
    "Workers",
    "deadline_passed",
    "watch",
    "watchdog",
    "within",
]

R = TypeVar("R")


class _Overdue(enum.Enum):
    OVERDUE = "overdue"


#: What :meth:`Worker.run` returns when the deadline passed (or its caller stopped
#: waiting) before the call returned.
OVERDUE: Final = _Overdue.OVERDUE
#: The type of :data:`OVERDUE`.
Overdue: TypeAlias = Literal[_Overdue.OVERDUE]

#: The watchdog's shortest re-arm interval, in seconds: its worst lateness (see above).
TICK_S: Final = 0.001

#: Seconds an idle worker beyond the ones a pool keeps waits for a call before it retires.
KEEP_ALIVE_S: Final = 30.0

# A worker's life: the caller moves it IDLE -> SUBMITTED; the worker thread moves it to
# STARTED (or, if the caller gave up first, finds CANCELLED and skips the call); at the
# end DONE (the caller takes the result) or ABANDONED (the caller gave up while it ran:
# the worker was pinned). STOP ends the thread.
_IDLE: Final = 0
_SUBMITTED: Final = 1
_STARTED: Final = 2
_DONE: Final = 3
_CANCELLED: Final = 4
_ABANDONED: Final = 5
_STOP: Final = 6

_NO_CONTEXT: Final = contextvars.Context()
_NO_KWARGS: Final[dict[str, Any]] = {}  # what an idle worker holds; never written to


def _nothing() -> None:
    """What an idle worker holds instead of a call."""


class Worker:
    """One persistent worker thread, lent to one call by :meth:`Workers.acquire`.

    Use it exactly once: :meth:`run` a call, or :meth:`release` it unused.
    """

    __slots__ = (
        "_args",
        "_call",
        "_context",
        "_done",
        "_error",
        "_go",
        "_kwargs",
        "_pool",
        "_result",
        "_state",
        "_then",
    )

    def __init__(self, pool: Workers) -> None:
        self._pool = pool
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._state = _IDLE
        self._context = _NO_CONTEXT
        self._call: Callable[..., Any] = _nothing
        self._args: tuple[Any, ...] = ()
        self._kwargs: dict[str, Any] = _NO_KWARGS
        self._result: Any = None
        self._error: BaseException | None = None
        self._then: Callable[[], None] | None = None

    def run(
        self,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: float,
        then: Callable[[], None] | None = None,
        *,
        stop: Callable[[], bool] | None = None,
        every: float = 0.05,
    ) -> R | Overdue:
        """Run ``fn(*args, **kwargs)`` in this worker, in a copy of the caller's context.

        Returns the result, or :data:`OVERDUE` once ``timeout`` seconds have passed (a
        negative ``timeout`` waits as long as the call takes); raises what ``fn`` raised.
        With ``stop``, the caller also asks ``stop()`` every ``every`` seconds while it
        waits, and gives up as at the deadline once it is true (:data:`OVERDUE`): a call
        its caller cancelled (a sibling call cancelled by policy) is let go the same way
        as one that ran out of time.

        ``then`` is called exactly once, when the call is over: here, before this returns
        or raises, unless the call is still running (it returned :data:`OVERDUE`, or the
        wait was interrupted); then in the worker thread, once the call returns. Give it
        what must be held until the call really ends (a bulkhead slot). It must not raise.
        """
        self._context = contextvars.copy_context()
        self._call = fn
        self._args = args
        self._kwargs = kwargs
        self._then = then
        self._state = _SUBMITTED
        self._go.release()
        try:
            if stop is None:
                finished = self._done.acquire(True, timeout)
            else:
                finished = self._wait(timeout, stop, every)
        except BaseException:
            # Interrupted while waiting (KeyboardInterrupt in the main thread): give up as
            # at the deadline, so the worker is not lost to the pool. If the call had
            # finished, a signal handler may have run just *after* the acquire succeeded:
            # whether ``done`` is held is unknown, so this worker retires and a fresh one
            # takes its place.
            state = self._give_up()
            if state == _DONE:
                self._pool._retire(self)
            if state != _STARTED and then is not None:
                then()  # the call is over (or never began)
            raise
        if not finished:
            state = self._give_up()
            if state != _DONE:
                if state == _SUBMITTED and then is not None:
                    then()  # cancelled: it never starts
                return OVERDUE
            self._done.acquire()  # it finished as we gave up: the result is here
        result, error = self._take()
        if then is not None:
            then()
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no cycle through this frame's traceback
        return result  # type: ignore[no-any-return]

    def _wait(self, timeout: float, stop: Callable[[], bool], every: float) -> bool:
        """Wait for the call in slices of ``every`` seconds; whether it finished.

        ``False`` once ``stop()`` said so, or ``timeout`` (unless negative) passed; the
        give-up that follows still finds a call that finished meanwhile.
        """
        done = self._done
        end = None if timeout < 0 else time.monotonic() + timeout
        while True:
            left = every if end is None else min(every, end - time.monotonic())
            if left <= 0:
                return False
            if done.acquire(True, left):
                return True
            if stop():
                return False

    def release(self) -> None:
        """Give the worker back without running anything."""
        self._pool._put(self)

    def _give_up(self) -> int:
        """The caller stops waiting; returns the state the call was in.

        ``_SUBMITTED``: it will never start; ``_STARTED``: it runs on, pinned, and the
        worker calls ``then`` when it returns; ``_DONE``: it had finished anyway.
        """
        pool = self._pool
        with pool._lock:
            state = self._state
            if state == _SUBMITTED:
                self._state = _CANCELLED  # the worker skips it and goes back idle
                self._then = None  # the caller calls it
            elif state == _STARTED:
                self._state = _ABANDONED  # pinned until the call returns
                pool._pinned += 1
        return state

    def _take(self) -> tuple[Any, BaseException | None]:
        """The finished call's outcome (``done`` acquired); the worker goes back idle."""
        outcome = self._result, self._error
        self._result = self._error = None
        self._then = None
        self._pool._put(self)
        return outcome

    def _serve(self) -> None:
        """The worker thread: wait for a call, run it, hand back the outcome, repeat."""
        pool = self._pool
        go = self._go
        while True:
            if not go.acquire(True, KEEP_ALIVE_S):
                if pool._expire(self):
                    return  # idle too long, beyond the workers the pool keeps
                continue  # taken just now: the caller releases ``go``
            with pool._lock:
                state = self._state
                if state == _SUBMITTED:
                    self._state = _STARTED
            if state == _STOP:
                return
            if state == _CANCELLED:
                self._clear()
                pool._put(self)
                continue
            call, args, kwargs = self._call, self._args, self._kwargs
            try:
                # No empty tuple or dict spread into Context.run: building them is a tenth
                # of what a hand-off costs, and the caller waits for it.
                if kwargs:
                    self._result = self._context.run(call, *args, **kwargs)
                elif args:
                    self._result = self._context.run(call, *args)
                else:
                    self._result = self._context.run(call)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who re-raises
                self._error = exc
            with pool._lock:
                late = self._state == _ABANDONED
                if late:
                    pool._pinned -= 1
                else:
                    self._state = _DONE
            self._call, self._context = _nothing, _NO_CONTEXT
            self._args, self._kwargs = (), _NO_KWARGS
            if not late:
                self._done.release()
                continue
            then = self._then
            self._clear()
            if then is not None:
                try:
                    then()
                except Exception:  # noqa: BLE001 - a release must not kill the worker
                    _log.exception("toolbreaker: giving back what a late call held failed")
            pool._put(self)
            pool._late()

    def _clear(self) -> None:
        self._call, self._context = _nothing, _NO_CONTEXT
        self._args, self._kwargs = (), _NO_KWARGS
        self._result = self._error = None
        self._then = None


class Workers:
    """Worker threads for sync calls: never a queue, and a bound against hung calls only.

    Args:
        max_hung: the most workers calls running past their deadline may hold (see the
            module docstring); also the idle workers kept between calls.
        reserved: of those, how many only probes may hold (at most ``max_hung - 1``).
        name: the threads' name prefix.
        on_late: called (in the worker thread) when a call its caller gave up on returns.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_idle",
        "_lock",
        "_name",
        "_on_late",
        "_ordinary",
        "_pinned",
        "_reserved",
        "_size",
        "_spawned",
    )

    def __init__(
        self,
        max_hung: int,
        *,
        reserved: int = 1,
        name: str = "toolbreaker",
        on_late: Callable[[], None] | None = None,
    ) -> None:
        if max_hung < 1:
            raise ValueError(f"a pool needs at least one worker, got {max_hung}")
        self._size = max_hung
        self._reserved = max(0, min(reserved, max_hung - 1))
        self._ordinary = max_hung - self._reserved
        self._name = name
        self._on_late = on_late
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._spawned = 0
        self._pinned = 0
        self._closed = False
        _pools.add(self)

    @property
    def max_hung(self) -> int:
        """The most workers hung calls may hold (probes included)."""
        return self._size

    @property
    def reserved(self) -> int:
        """Of :attr:`max_hung`, the workers only probes may take."""
        return self._reserved

    @property
    def pinned(self) -> int:
        """Workers held by calls still running after their caller gave up on them."""
        return self._pinned

    @property
    def busy(self) -> int:
        """Workers lent out, pinned ones included."""
        with self._lock:
            return self._spawned - len(self._idle)

    def refuses(self, *, probe: bool = False) -> int | None:
        """How many hung calls hold the workers ``acquire`` would refuse, else ``None``."""
        pinned = self._pinned
        return pinned if pinned >= (self._size if probe else self._ordinary) else None

    def limit(self, *, probe: bool = False) -> int:
        """The most hung calls a call (a probe, with ``probe``) may run beside."""
        return self._size if probe else self._ordinary

    def acquire(self, *, probe: bool = False) -> Worker | None:
        """A worker for one call (an idle one, else a new thread), or ``None`` when hung.

        ``None`` when hung calls hold as many workers as this call may run beside (see
        :meth:`refuses`); a ``probe`` may run beside the reserved ones too.

        Raises:
            RuntimeError: the pool was closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name}: the worker pool is closed")
            if self._pinned >= (self._size if probe else self._ordinary):
                return None
            if self._idle:
                return self._idle.pop()
            self._spawned += 1
            number = self._spawned
        worker = Worker(self)
        try:
            # Daemon threads: a call hung forever must not keep the interpreter alive.
            threading.Thread(
                target=worker._serve, name=f"{self._name}-{number}", daemon=True
            ).start()
        except BaseException:
            with self._lock:
                self._spawned -= 1
            raise
        return worker

    def close(self) -> None:
        """Stop the idle workers; busy ones stop when their call returns (never waited for)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker._state = _STOP
            worker._go.release()

    def _retire(self, worker: Worker) -> None:
        """End ``worker``'s thread; its place in the pool is free for a new one."""
        with self._lock:
            self._spawned -= 1
        worker._state = _STOP
        worker._go.release()

    def _expire(self, worker: Worker) -> bool:
        """``worker`` waited :data:`KEEP_ALIVE_S` idle: whether it retires now.

        It does when it is still idle and the pool keeps more idle workers than
        :attr:`max_hung`; ``False`` also when a caller took it meanwhile.
        """
        with self._lock:
            idle = self._idle
            if len(idle) <= self._size or worker not in idle:
                return False
            idle.remove(worker)
            self._spawned -= 1
            return True

    def _put(self, worker: Worker) -> None:
        with self._lock:
            if not self._closed:
                worker._state = _IDLE
                self._idle.append(worker)
                return
        worker._state = _STOP
        worker._go.release()

    def _late(self) -> None:
        if self._on_late is not None:
            try:
                self._on_late()
            except Exception:  # noqa: BLE001 - a counter must not kill the worker
                _log.exception("toolbreaker: on_late of %s raised", self._name)

    def _forget_threads(self) -> None:
        """In a forked child: the parent's threads do not exist here."""
        self._lock = threading.Lock()
        self._idle = []
        self._spawned = 0
        self._pinned = 0

    def __repr__(self) -> str:
        return (
            f"<Workers {self._name!r} max_hung={self._size} reserved={self._reserved} "
            f"started={self._spawned} idle={len(self._idle)} pinned={self._pinned}>"
        )


_pools: weakref.WeakSet[Workers] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_threads()
    # A loop that was running in the parent looks as if it still ran here (its thread id
    # was copied): the child finds its running loop afresh.
    _local.watchdog = None


# -- async -------------------------------------------------------------------------------


class Watchdog:
    """Deadlines for the tasks of one event loop, served by one timer.

    Calls are watched with :func:`within`; :func:`watchdog` returns the running loop's.
    """

    __slots__ = ("_base", "_due", "_fired", "_next", "_tasks", "_timer", "loop", "time")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        import asyncio  # a loop runs: asyncio is loaded (a sync program never loads it)

        _bind_asyncio()
        self.loop = loop
        # asyncio's own loops record the thread running them (``_thread_id``): whether
        # this loop is the one running in a thread is then one attribute read, without
        # ``asyncio._get_running_loop``, which makes a getpid() system call every time.
        self._base = isinstance(loop, asyncio.BaseEventLoop)
        #: The loop's clock; ``time.monotonic`` itself when the loop does not override it
        #: (what asyncio's loops do), sparing a Python frame per call.
        self.time: Callable[[], float] = (
            time.monotonic
            if getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time
            else loop.time
        )
        # awaitable -> (deadline on the loop's clock, its task, the task's cancel count)
        self._due: dict[object, tuple[float, asyncio.Task[Any], int]] = {}
        self._fired: dict[object, int] = {}  # cancelled by us -> the task's cancel count
        self._tasks: dict[object, asyncio.Task[Any]] = {}  # cancelled by us -> its task
        self._next = math.inf
        self._timer: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> int:
        """Calls being watched."""
        return len(self._due)

    def done(self, awaitable: object) -> None:
        """``awaitable`` (armed by :func:`watch`) returned: disarm its deadline."""
        if self._due.pop(awaitable, None) is None:
            # The call swallowed our cancellation and returned anyway.
            _uncancel(self._due_task(awaitable))

    def failed(self, awaitable: object, exc: BaseException, seconds: float) -> None:
        """``awaitable`` (armed by :func:`watch`) raised ``exc``; the caller re-raises it.

        Raises:
            TimeoutError: ``exc`` is our own cancellation at the deadline (the task is
                uncancelled). A cancellation from anyone else stays one, and so does any
                other exception: this returns and the caller re-raises ``exc``.
        """
        if self.fired(awaitable, exc):
            raise deadline_passed(seconds) from None

    def fired(self, awaitable: object, exc: BaseException) -> bool:
        """Whether ``exc``, raised by ``awaitable`` (armed by :func:`watch`), is our deadline.

        :meth:`failed` without raising: ``True`` when ``exc`` is our own cancellation at
        the deadline (the task is uncancelled; the caller raises :func:`deadline_passed`),
        so a caller can tell the deadline's timeout from a ``TimeoutError`` of the call's
        own. ``False`` for anything else, a cancellation from anyone else included.
        """
        if self._due.pop(awaitable, None) is not None:
            return False  # the deadline had not passed: whatever it is, it is not ours
        fired = self._fired.pop(awaitable)
        task = self._tasks.pop(awaitable)
        if isinstance(exc, _cancelled_error()):
            # Someone else cancelled too: theirs wins.
            return _uncancel(task) <= fired
        _uncancel(task)  # the call swallowed our cancellation and raised
        return False

    def _due_task(self, awaitable: object) -> asyncio.Task[Any]:
        self._fired.pop(awaitable)
        return self._tasks.pop(awaitable)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._next = when
        self._timer = self.loop.call_at(when, self._tick)

    def _tick(self) -> None:
        """Cancel the overdue tasks; set the timer for the next deadline."""
        self._timer = None
        self._next = math.inf
        now = self.time()
        due = self._due
        following = math.inf
        overdue = []
        for key, (when, task, cancelling) in due.items():
            if when <= now:
                overdue.append((key, task, cancelling))
            elif when < following:
                following = when
        for key, task, cancelling in overdue:
            del due[key]
            self._fired[key] = cancelling
            self._tasks[key] = task
            task.cancel()
        if following < math.inf:
            self._arm(max(following, now + TICK_S))

    def __repr__(self) -> str:
        return f"<Watchdog armed={len(self._due)} next={self._next}>"


class _Local(threading.local):
    watchdog: Watchdog | None = None


# A thread runs one loop at a time: the watchdog of the loop it ran last (thread-local, so
# it goes with its thread). Checked first: when that loop is running in this thread, it
# is the running loop.
_local = _Local()
_get_ident = threading.get_ident


def watchdog() -> Watchdog:
    """The running event loop's watchdog (created on first use).

    Raises:
        RuntimeError: no event loop is running in this thread.
    """
    import asyncio  # a loop runs: asyncio is loaded (a sync program never loads it)

    loop = asyncio.get_running_loop()
    dog = _local.watchdog
    if dog is None or dog.loop is not loop:
        dog = _local.watchdog = Watchdog(loop)
    return dog


def watch(awaitable: object, seconds: float) -> Watchdog:
    """Arm a deadline ``seconds`` from now for ``awaitable``, about to be awaited.

    The awaitable identifies the call: pass a fresh one (a coroutine) each time, await it
    in the current task, then call :meth:`Watchdog.done` with it, or
    :meth:`Watchdog.failed` with what it raised. :func:`within` does all three; the
    breaker's hot path does them inline to spare a coroutine frame per call. Costs a dict
    insert, plus a timer only when this deadline is the loop's earliest.

    Raises:
        RuntimeError: not inside an asyncio task.
    """
    dog = _local.watchdog
    if dog is None or not dog._base or dog.loop._thread_id != _get_ident():  # type: ignore[attr-defined]
        loop = _running_loop()
        if loop is None:
            dog = None
        elif dog is None or dog.loop is not loop:
            dog = _local.watchdog = Watchdog(loop)
    task = _current_tasks.get(dog.loop) if dog is not None else None
    if task is None or dog is None:
        import asyncio  # a failure path: asyncio's own test of a coroutine

        if asyncio.iscoroutine(awaitable):
            awaitable.close()  # never awaited: no "never awaited" warning either
        raise RuntimeError("a deadline must be awaited inside an asyncio task")
    when = dog.time() + seconds
    dog._due[awaitable] = (when, task, _cancelling(task))
    if when < dog._next:
        dog._arm(when)
    return dog


def deadline_passed(seconds: float) -> TimeoutError:
    """The ``TimeoutError`` an awaited call's caller gets when its deadline passed."""
    return TimeoutError(f"deadline of {seconds} s passed")


async def within(awaitable: Awaitable[R], seconds: float) -> R:
    """Await ``awaitable`` in the current task for at most ``seconds``.

    Raises:
        TimeoutError: the deadline passed; the awaitable was cancelled.
        asyncio.CancelledError: the task was cancelled by someone else (also when that
            happened together with the deadline).
        RuntimeError: not inside an asyncio task.
    """
    dog = watch(awaitable, seconds)
    try:
        result = await awaitable
    except BaseException as exc:
        dog.failed(awaitable, exc, seconds)
        raise
    dog.done(awaitable)
    return result


# asyncio's own lookups, bound by _bind_asyncio() when the first watchdog is made (an
# event loop runs then, so asyncio is loaded): a sync program never imports asyncio.


def _no_count(task: asyncio.Task[Any]) -> int:
    return 0  # 3.10 tasks keep no cancellation count (and no task runs before binding)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    _bind_asyncio()  # rebinds this name to asyncio's own
    return _running_loop()


# The tasks running now, by loop: the dict ``asyncio.current_task`` reads (in C from 3.12;
# on 3.10 and 3.11 current_task is a Python function around this same lookup).
_current_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]] = {}
_cancelling: Callable[[asyncio.Task[Any]], int] = _no_count
_uncancel: Callable[[asyncio.Task[Any]], int] = _no_count


def _bind_asyncio() -> None:
    """Bind asyncio's lookups the hot path reads (once; asyncio is loaded by then)."""
    global _running_loop, _current_tasks, _cancelling, _uncancel  # noqa: PLW0603 - bound once, lazily
    import asyncio

    _running_loop = asyncio._get_running_loop
    _current_tasks = asyncio.tasks._current_tasks  # type: ignore[attr-defined]
    if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
        # The C methods themselves: no Python frame per call.
        _cancelling = asyncio.Task.cancelling
        _uncancel = asyncio.Task.uncancel


def _cancelled_error() -> type[BaseException]:
    import asyncio

    return asyncio.CancelledError


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
