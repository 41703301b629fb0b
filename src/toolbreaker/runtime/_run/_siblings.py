"""Sibling tool calls under structured concurrency: a bounded partial outcome.

An agent often runs several tool calls at once (search, weather, calendar). When a
dependency one of them *requires* goes down, the calls that need it cannot give a useful
answer any more, while the others can. :class:`Siblings` runs the calls as branches of
one group and, when a required dependency's breaker opens, cancels the branches that need
it (by policy, with the reason) and lets the independent ones finish. What comes back is
a :class:`SiblingOutcome` that says which branches completed, which degraded (a
tool-unavailable answer, a local rejection), which failed and which were cancelled by
policy, with reasons: a bounded partial outcome instead of "the agent failed".

Structured like ``asyncio.TaskGroup``: no branch outlives the group (a cancelled caller
cancels every branch and waits for them), and it works the same on Python 3.10. The
thread flavour (:meth:`Siblings.run`) runs sync branches in worker threads; a running
thread cannot be interrupted, so a branch cancelled by policy is *abandoned* (its result,
whenever it comes, is discarded) and a branch not yet started never starts. An abandoned
branch is answered, not over: what its own calls hold (a breaker's bulkhead slot, its
lease) they keep until they return.

How an opening is noticed: a listener on each required breaker sees the transitions of
this process at once; a poll of the breaker's view every :data:`POLL_S` seconds sees an
opening decided by another process sharing the store. A required dependency already open
when the group starts cancels its branches before they start.

"Open" is the core's :func:`~toolbreaker.core._breaker.predicates.rejects_callers`: a breaker
that admits every request (shadow mode, an operator's forced close) cancels nothing when
its phase opens; an isolated or forced-open one cancels. Which required breaker a call
needs is one rule for both groups (:func:`_required_row`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Literal, TypeVar

from toolbreaker.core._breaker.predicates import may_start_rejecting, rejects_callers
from toolbreaker.core._breaker.state import Transition
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._breaker._deadline import OVERDUE
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._result import siblings_result
from toolbreaker.runtime._step import Step
from toolbreaker.stores._memory import in_process

__all__ = [
    "POLL_S",
    "BranchOutcome",
    "CancelledByPolicy",
    "SiblingOutcome",
    "Siblings",
    "TurnGroup",
    "TurnMember",
    "classified",
    "is_policy",
]

#: How often the group looks at the required breakers' views (openings elsewhere).
POLL_S: Final = 0.05

Status = Literal["completed", "degraded", "failed", "cancelled"]


@dataclasses.dataclass(frozen=True, slots=True)
class BranchOutcome:
    """How one branch ended.

    Attributes:
        name: the branch name.
        status: ``completed``, ``degraded``, ``failed`` or ``cancelled`` (by policy).
        reason: why it did not complete (``required dependency 'x' opened``, the
            tool-unavailable reason, the exception type); ``None`` when completed.
        result: the branch's result (for ``degraded``, the answer the model should read).
        error: the exception a ``failed`` branch raised.
    """

    name: str
    status: Status
    reason: str | None = None
    result: Any = None
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class SiblingOutcome:
    """Every branch of a group, in the order they were added."""

    branches: tuple[BranchOutcome, ...]

    def _named(self, status: Status) -> tuple[str, ...]:
        return tuple(b.name for b in self.branches if b.status == status)

    @property
    def completed(self) -> tuple[str, ...]:
        """Names of the branches that completed."""
        return self._named("completed")

    @property
    def degraded(self) -> tuple[str, ...]:
        """Names of the branches answered with a tool-unavailable result or rejection."""
        return self._named("degraded")

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the branches that failed (raised, or returned an error result)."""
        return self._named("failed")

    @property
    def cancelled(self) -> tuple[str, ...]:
        """Names of the branches cancelled by policy (a required dependency opened)."""
        return self._named("cancelled")

    @property
    def complete(self) -> bool:
        """Whether every branch completed."""
        return all(b.status == "completed" for b in self.branches)

    def __getitem__(self, name: str) -> BranchOutcome:
        for branch in self.branches:
            if branch.name == name:
                return branch
        raise KeyError(name)

    def to_result(self) -> dict[str, Any]:
        """What the model reads: the results that came in and what is missing, and why."""
        return siblings_result([(b.name, b.status, b.reason, b.result) for b in self.branches])


@dataclasses.dataclass(slots=True)
class _Branch:
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    needs: tuple[Breaker, ...]
    cancelled_because: str | None = None


class Siblings:
    """A group of sibling tool calls; see the module docstring.

    Args:
        required: the breakers of the dependencies the group cannot do without: when one
            opens, the branches that need it are cancelled.

    Example::

        group = Siblings(required=[inventory])
        group.add("stock", check_stock, sku, needs=[inventory])
        group.add("reviews", fetch_reviews, sku, needs=[reviews_api])
        outcome = await group.arun()
        outcome.completed, outcome.cancelled   # ("reviews",), ("stock",)
        return outcome.to_result()             # what the model reads
    """

    def __init__(self, *, required: Iterable[Breaker] = ()) -> None:
        self.required: tuple[Breaker, ...] = tuple(required)
        self._branches: list[_Branch] = []
        self._lock = threading.Lock()

    def add(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        needs: Iterable[Breaker] = (),
        **kwargs: Any,
    ) -> None:
        """Add a branch: ``fn(*args, **kwargs)``, which needs the ``needs`` breakers.

        Raises:
            PolicyError: an empty or repeated name.
        """
        if not isinstance(name, str) or not name:
            raise PolicyError("a branch needs a name", field="name")
        if any(b.name == name for b in self._branches):
            raise PolicyError(f"two branches named {name!r}", field="name")
        self._branches.append(_Branch(name, fn, args, kwargs, tuple(needs)))

    # -- asyncio ----------------------------------------------------------------------

    async def arun(self) -> SiblingOutcome:
        """Run every branch (coroutine functions) concurrently; never raises for a branch.

        Raises:
            asyncio.CancelledError: the caller was cancelled; every branch was cancelled
                and awaited first.
        """
        loop = asyncio.get_running_loop()
        tasks: dict[str, asyncio.Task[Any]] = {}

        def cancel(breaker: Breaker, why: str) -> None:
            for branch in self._needing(breaker, why):
                task = tasks.get(branch.name)
                if task is not None:
                    task.cancel()

        def heard(record: Transition, breaker: Breaker) -> None:
            def look() -> None:
                root = self._shut(record, breaker)
                if root is not None:
                    why = f"required dependency {root.key!r} opened"
                    loop.call_soon_threadsafe(cancel, root, why)

            if may_start_rejecting(record):
                _aside(breaker, look)

        # Looks at the required breakers' state: round trips on a shared store.
        local = in_process(breaker.store for breaker in self.required)
        await _looked(local, self._check_open, True)
        for branch in self._branches:
            if branch.cancelled_because is None:
                tasks[branch.name] = loop.create_task(_awaited(branch))
        removers = [breaker.add_listener(heard) for breaker in self.required]
        try:
            pending: set[asyncio.Task[Any]] = set(tasks.values())
            while pending:
                _, pending = await asyncio.wait(pending, timeout=POLL_S)
                for breaker, why in await _looked(local, self._check_open, False):
                    cancel(breaker, why)
        except asyncio.CancelledError:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            raise
        finally:
            for remove in removers:
                _quietly(remove)
        return SiblingOutcome(tuple(self._outcome(b, tasks.get(b.name)) for b in self._branches))

    # -- threads ----------------------------------------------------------------------

    def run(self, *, max_workers: int | None = None) -> SiblingOutcome:
        """Run every branch (sync callables) in worker threads; never raises for a branch.

        A branch cancelled by policy that had not started never starts; one that was
        running is abandoned (its thread finishes on its own; its result is discarded).
        """
        branches = self._branches
        workers = max_workers or max(1, min(32, len(branches)))
        pool = concurrent.futures.ThreadPoolExecutor(workers, "toolbreaker-sibling")
        futures: dict[str, concurrent.futures.Future[Any]] = {}

        def cancel(breaker: Breaker, why: str) -> None:
            for branch in self._needing(breaker, why):
                future = futures.get(branch.name)
                if future is not None:
                    future.cancel()  # never starts if it had not; else abandoned

        def heard(record: Transition, breaker: Breaker) -> None:
            def look() -> None:
                root = self._shut(record, breaker)
                if root is not None:
                    cancel(root, f"required dependency {root.key!r} opened")

            if may_start_rejecting(record):
                _aside(breaker, look)

        self._check_open(True)
        removers = [breaker.add_listener(heard) for breaker in self.required]
        try:
            for branch in branches:
                if branch.cancelled_because is None:
                    context = contextvars.copy_context()
                    futures[branch.name] = pool.submit(
                        context.run, branch.fn, *branch.args, **branch.kwargs
                    )
            while True:
                waiting = [
                    f
                    for b in branches
                    if (f := futures.get(b.name)) is not None
                    and not f.done()
                    and b.cancelled_because is None
                ]
                if not waiting:
                    break
                concurrent.futures.wait(
                    waiting, timeout=POLL_S, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for breaker, why in self._check_open():
                    cancel(breaker, why)
        finally:
            for remove in removers:
                _quietly(remove)
            pool.shutdown(wait=False, cancel_futures=True)
        return SiblingOutcome(tuple(self._outcome(b, futures.get(b.name)) for b in branches))

    # -- shared -----------------------------------------------------------------------

    def _shut(self, record: Transition, breaker: Breaker) -> Breaker | None:
        """The required row whose branches ``record`` (of ``breaker``) cancels, if any.

        Only a transition after which the breaker refuses its callers does: a breaker
        that admits everything (shadow mode, an operator's forced close) cancels nothing
        when its phase opens.
        """
        if not may_start_rejecting(record):
            return None
        found = _required_row(breaker, self.required)
        if found is None or not _refuses(breaker):
            return None
        return found[0]

    def _needing(self, breaker: Breaker, why: str) -> list[_Branch]:
        """Mark the branches that need ``breaker`` cancelled (once); returns them."""
        marked = []
        with self._lock:
            for branch in self._branches:
                if branch.cancelled_because is None and breaker in branch.needs:
                    branch.cancelled_because = why
                    marked.append(branch)
        return marked

    def _check_open(self, cancel_at_start: bool = False) -> list[tuple[Breaker, str]]:
        """Required breakers open now (this process's view), with the reason to give."""
        found = []
        for breaker in self.required:
            if _refuses(breaker.for_scope()):
                verb = "is open" if cancel_at_start else "opened"
                why = f"required dependency {breaker.key!r} {verb}"
                if cancel_at_start:
                    self._needing(breaker, why)
                found.append((breaker, why))
        return found

    def _outcome(self, branch: _Branch, done: Any) -> BranchOutcome:
        name = branch.name
        if done is None or not done.done() or done.cancelled():
            # Cancelled by policy (or abandoned while running), or by its own code.
            return BranchOutcome(name, "cancelled", branch.cancelled_because or "cancelled")
        error = done.exception()
        if error is not None:
            if isinstance(error, CircuitOpen):
                return BranchOutcome(name, "degraded", error.reason, error.result_for(name))
            return BranchOutcome(name, "failed", type(error).__name__, error=error)
        return classified(name, done.result())


def classified(name: str, result: Any) -> BranchOutcome:
    """How a branch ended, from what it returned (the answer the model reads)."""
    if isinstance(result, Mapping) and result.get("ok") is False:
        if result.get("cancelled"):
            # Cancelled by policy while it ran (a write's outcome is then unknown).
            why = f"required dependency {result.get('dependency')!r} opened"
            if result.get("outcome_unknown"):
                why += "; the write's outcome is unknown (reconcile, never replay)"
            return BranchOutcome(name, "cancelled", why, result)
        if result.get("tool_unavailable") or result.get("deferred") or result.get("degradation"):
            # A queued, handed-off or omitted call (the degradation matrix) is degraded,
            # not failed; a stale or substitute answer (ok) completed, labelled as such.
            reason = result.get("reason") or result.get("degradation")
            return BranchOutcome(name, "degraded", str(reason), result)
        if result.get("run_stopped"):
            # Not started: the run had stopped (a required dependency went down).
            return BranchOutcome(name, "cancelled", f"run stopped: {result.get('detail')}", result)
        return BranchOutcome(name, "failed", "error-result", result)
    return BranchOutcome(name, "completed", None, result)


async def _awaited(branch: _Branch) -> Any:
    awaitable: Awaitable[Any] = branch.fn(*branch.args, **branch.kwargs)
    return await awaitable


def _quietly(remove: Callable[[], None]) -> None:
    with contextlib.suppress(ValueError):  # removed twice
        remove()


# -- one model turn's tool calls, as the framework adapters run them ---------------------

R = TypeVar("R")


@dataclasses.dataclass(frozen=True, slots=True)
class CancelledByPolicy:
    """A call the model turn cancelled by policy; its step is settled already.

    :meth:`RunGuard.run_step <toolbreaker.RunGuard.run_step>` returns it instead of the
    tool's result; ``answer`` is what the model reads.
    """

    answer: Any


#: A call the turn cancelled by policy (never seen outside this package).
_POLICY: Final = object()


class TurnMember:
    """One tool call of a model turn: its name in the outcome, what it needs, how it ended.

    Attributes:
        name: the branch name in the turn's outcome (the tool, ``#2`` ... when repeated).
        breaker: the breaker the call was admitted by, ``None`` when it was answered.
        need: the required breaker the call needs, ``None`` when it is independent.
        cancelled_because: why the turn cancelled it by policy, ``None`` while it was not.
        opened: the required breaker whose opening cancelled it.
        started: whether the tool began to run (a write may then have committed).
        outcome: how it ended, once its answer is known.
    """

    __slots__ = (
        "_cancel",
        "breaker",
        "cancelled_because",
        "name",
        "need",
        "opened",
        "outcome",
        "settling",
        "started",
    )

    def __init__(self, name: str, breaker: Breaker | None, need: Breaker | None) -> None:
        self.name = name
        self.breaker = breaker
        self.need = need
        self.cancelled_because: str | None = None
        self.opened: Breaker | None = None
        self.started = False
        #: Its step is being settled: an opening it causes itself never cancels it.
        self.settling = False
        self.outcome: BranchOutcome | None = None
        self._cancel: Callable[[], None] | None = None


class TurnGroup:
    """The tool calls one model turn started through a run guard, as one sibling group.

    The framework runs the calls (in its own tasks or threads); each call runs its tool
    through :meth:`arun` or :meth:`run`, so the group can cancel it by policy: when a
    required breaker opens (its listener hears this process's transition; a poll of its
    view every :data:`POLL_S` seconds sees another process's), every call in flight that
    needs it is cancelled (asyncio: the task running the tool is cancelled and awaited;
    threads: the call is let go in its worker, its result discarded, and it keeps its
    bulkhead slot and lease until it returns, as a call past its deadline does).
    Independent calls finish.
    Listeners are registered only while a call that needs a required breaker is in
    flight. :meth:`outcome` lists every call of the turn with how it ended.

    Args:
        turn: the turn's identity (what the adapter passed to ``mark_turn``).
        required: the breakers of the run's required tools.
    """

    def __init__(self, turn: object, required: Iterable[Breaker]) -> None:
        self.turn = turn
        self.required: tuple[Breaker, ...] = tuple(required)
        self._members: list[TurnMember] = []
        self._names: dict[str, int] = {}
        self._taken: set[str] = set()
        self._flight: set[TurnMember] = set()
        self._removers: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def join(self, tool: str, breaker: Breaker | None) -> TurnMember:
        """A call of this turn; ``breaker``: the breaker that admitted it (else answered)."""
        need = None if breaker is None else self._need(breaker)
        with self._lock:
            n = self._names[tool] = self._names.get(tool, 0) + 1
            name = tool if n == 1 else f"{tool}#{n}"
            while name in self._taken:  # a tool literally named "x#2"
                n = self._names[tool] = n + 1
                name = f"{tool}#{n}"
            self._taken.add(name)
            member = TurnMember(name, breaker, need)
            self._members.append(member)
        return member

    def refresh(self, member: TurnMember, required: Iterable[Breaker]) -> None:
        """Before ``member`` runs: take the run's required breakers as they are now.

        Some frameworks describe tools lazily, so what the call needs is decided again.
        """
        self.required = tuple(required)
        if member.need is None and member.breaker is not None:
            member.need = self._need(member.breaker)
        need = member.need
        if need is not None and member.cancelled_because is None and _refuses(need):
            # Opened after the call was admitted and before it started: it never starts.
            member.cancelled_because = f"required dependency {need.key!r} opened"
            member.opened = need

    def answered(self, member: TurnMember, answer: Any) -> None:
        """Record the answer the model reads for ``member`` (the first one counts)."""
        if member.outcome is None:
            member.outcome = classified(member.name, answer)

    def outcome(self) -> SiblingOutcome:
        """Every call of the turn so far, in the order they began.

        A call still running is listed as ``cancelled`` with the reason ``running``.
        """
        with self._lock:
            members = tuple(self._members)
        return SiblingOutcome(
            tuple(m.outcome or BranchOutcome(m.name, "cancelled", "running") for m in members)
        )

    # -- running a member ---------------------------------------------------------------

    async def arun(
        self, member: TurnMember, step: Step, fn: Callable[[], Awaitable[R]]
    ) -> R | object:
        """Await ``fn()`` as ``member`` (of ``step``); :data:`_POLICY` when cancelled by policy.

        An independent call is awaited as it is. A call that needs a required breaker
        runs in a task of its own, which the group cancels (and this awaits) when that
        breaker opens; a cancelled caller cancels and awaits it too. While the task runs
        past the step's deadline its bulkhead slot is held (it still runs, so it still
        counts) until the step is settled.
        """
        if member.need is None:
            member.started = True
            return await fn()
        if member.cancelled_because is not None:
            return _POLICY  # never started
        loop = asyncio.get_running_loop()
        task: asyncio.Task[R] = loop.create_task(_started(member, fn))

        def cancel() -> None:
            loop.call_soon_threadsafe(task.cancel)

        self._enter(member, cancel)
        permit = step.permit
        held = False
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=POLL_S)
                if not task.done():
                    await self.apoll()
                    held = held or permit.hold_past_deadline()
        except BaseException:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        finally:
            self._leave(member, policy=task.done() and task.cancelled())
        if member.cancelled_because is not None:
            return _POLICY
        return task.result()

    def run(self, member: TurnMember, step: Step, fn: Callable[[], R]) -> R | object:
        """Call ``fn()`` as ``member`` (of ``step``); :data:`_POLICY` when cancelled by policy.

        An independent call runs in the caller's thread. A call that needs a required
        breaker runs in a worker of the breaker that admitted it, which the caller waits
        on (:meth:`Breaker.run_until <toolbreaker.Breaker.run_until>`): when that
        required breaker opens, the caller stops waiting and the call is let go exactly
        as a call past its deadline is. One not started never starts; a running one is
        abandoned (its result, whenever it comes, is discarded) but still counts until it
        returns: its worker stays pinned, and it keeps the step's bulkhead slot (and
        renews its lease) until then.

        Raises:
            CircuitOpen: reason ``hung``: calls hung past their deadline hold the workers
                this call may use (settle the step with it).
        """
        if member.need is None:
            member.started = True
            return fn()
        if member.cancelled_because is not None:
            return _POLICY
        breaker: Breaker = step.permit.breaker  # the one that admitted it (its pool, its slot)
        cancelled = threading.Event()
        gate = threading.Lock()  # a call starts, or is let go unstarted: never both

        def work() -> R | object:
            with gate:
                if cancelled.is_set():
                    return _POLICY  # let go before it started: it never starts
                member.started = True
            return fn()

        def stop() -> bool:
            if not cancelled.is_set():
                self.poll()  # an opening decided by another process
            return cancelled.is_set()

        self._enter(member, cancelled.set)
        policy = False
        try:
            ran = breaker.run_until(step, work, stop, every=POLL_S)
            with gate:  # a start racing the cancellation has happened, or never will
                policy = ran is OVERDUE or ran is _POLICY
        finally:
            self._leave(member, policy=policy)
        if member.cancelled_because is not None:
            return _POLICY
        return ran

    def poll(self) -> None:
        """Cancel the calls in flight whose required breaker is open now.

        This process's view of the store: how an opening decided by another process is seen.
        """
        with self._lock:
            needs = {id(m.need): m.need for m in self._flight if m.need is not None}
        for need in needs.values():
            try:
                opened = _refuses(need)
            except Exception as exc:  # noqa: BLE001 - a poll that fails never changes a call
                hook_failed(f"the turn's look at {need.key} failed; the calls run on", exc)
                continue
            if opened:
                self._opened(need)

    async def apoll(self) -> None:
        """:meth:`poll` on the event loop: a look that may be a round trip runs off it."""
        with self._lock:
            stores = [m.need.store for m in self._flight if m.need is not None]
        await _looked(in_process(stores), self.poll)

    # -- internals ----------------------------------------------------------------------

    def _need(self, breaker: Breaker) -> Breaker | None:
        """The required breaker (a row, or a scope of one) a call of ``breaker`` needs."""
        found = _required_row(breaker, self.required)
        return None if found is None else found[1]

    def _enter(self, member: TurnMember, cancel: Callable[[], None]) -> None:
        member._cancel = cancel
        with self._lock:
            if not self._flight:
                # One listener per required row while a call that needs one is in flight
                # (registered and removed under the lock: an entry and a leave may race).
                heard = _listener(weakref.ref(self))
                self._removers = [breaker.add_listener(heard) for breaker in self.required]
            self._flight.add(member)

    def _leave(self, member: TurnMember, *, policy: bool) -> None:
        with self._lock:
            self._flight.discard(member)
            if not policy:
                member.cancelled_because = None  # it finished first: its outcome stands
            if not self._flight:
                for remove in self._removers:
                    _quietly(remove)
                self._removers = []

    def _opened(self, breaker: Breaker) -> None:
        """A required breaker (or one of its scopes) opened: cancel the calls that need it."""
        why = f"required dependency {breaker.key!r} opened"
        with self._lock:
            # In flight, or admitted and not started yet (it then never starts).
            waiting = [m for m in self._members if m._cancel is None and m.outcome is None]
            hit = [
                m
                for m in (*self._flight, *waiting)
                if m.cancelled_because is None
                and not m.settling
                and m.need is not None
                and (m.need is breaker or m.need.dependency == breaker.dependency)
            ]
            for member in hit:
                member.cancelled_because = why
                member.opened = breaker
        for member in hit:
            if member._cancel is not None:
                member._cancel()

    def _heard(self, record: Transition, breaker: Breaker) -> None:
        def look() -> None:
            if _refuses(breaker):
                self._opened(breaker)

        if may_start_rejecting(record):
            _aside(breaker, look)


def _required_row(breaker: Breaker, required: Iterable[Breaker]) -> tuple[Breaker, Breaker] | None:
    """Which required breaker a call of ``breaker`` needs: ``(row, watched)``, or ``None``.

    The one rule for :class:`Siblings` and :class:`TurnGroup`. ``breaker`` belongs to a
    required row when it is the row, another operation row of the same dependency, one
    of the row's scopes, or another operation row of that scope's dependency. ``row`` is
    the required breaker (what a branch names in ``needs``); ``watched`` is the one whose
    state decides (the scope's breaker for a scoped call, else the row).
    """
    for row in required:
        if breaker is row or breaker.dependency == row.dependency:
            return row, row
        for child in row.scopes().values():
            if breaker is child or breaker.dependency == child.dependency:
                return row, child
    return None


def _refuses(breaker: Breaker) -> bool:
    """Whether ``breaker`` refuses its callers now (the core's :func:`rejects_callers`).

    Read from this process's view of the store, so an opening decided by another process
    sharing it is seen.
    """
    return rejects_callers(breaker.state, breaker.policy)


L = TypeVar("L")


async def _looked(local: bool, look: Callable[..., L], *args: Any) -> L:
    """``look(*args)`` from the event loop, which a round trip must not block.

    Inline when every store it reads lives in this process (``local``), else in a
    worker thread.
    """
    if local:
        return look(*args)
    return await asyncio.to_thread(look, *args)


def _aside(breaker: Breaker, look: Callable[[], None]) -> None:
    """Run a listener's ``look`` at ``breaker``'s state without blocking an event loop.

    A listener runs in the thread that applied the transition: on an event loop's thread
    for an async call. There a look that may be a round trip (a shared store) runs in the
    loop's default executor instead, so the loop goes on; anywhere else it runs now. A
    look that fails changes nothing (the group's poll looks again).
    """

    def guarded() -> None:
        try:
            look()
        except Exception as exc:  # noqa: BLE001 - a look that fails never changes a call
            hook_failed(f"the group's look at {breaker.key} failed; the calls run on", exc)

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None or in_process((breaker.store,)):
        look()  # as before: a fault here is the breaker's listener fault to count
    else:
        loop.run_in_executor(None, guarded)


def _listener(group: weakref.ref[TurnGroup]) -> Callable[[Transition, Breaker], None]:
    def heard(record: Transition, breaker: Breaker) -> None:
        alive = group()
        if alive is not None:
            alive._heard(record, breaker)

    return heard


async def _started(member: TurnMember, fn: Callable[[], Awaitable[R]]) -> R:
    member.started = True
    return await fn()


def is_policy(value: object) -> bool:
    """Whether :meth:`TurnGroup.run` / :meth:`TurnGroup.arun` cancelled the call by policy."""
    return value is _POLICY
