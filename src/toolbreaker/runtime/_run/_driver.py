"""The run guard's effects: what its flows yield for the driver to carry out.

A flow of the run guard (begin a call, settle it, run a tool, run it in its turn) is a
generator driven by :func:`~toolbreaker.runtime._flow.drive` (its sync twin) or
:func:`~toolbreaker.runtime._flow.adrive` (its async twin): the one driver the breaker's
twins use too. Wherever it needs something that may block (a journal or store round
trip, the breaker's admission, a degradation's answer, recording an outcome, running the
tool) it yields one of the effects here; each knows how to do it inline (``run``) and
without blocking the event loop (``arun``), so the sync and the async guard cannot
decide differently.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from toolbreaker.runtime._sync_path import is_awaitable, not_awaited
from toolbreaker.stores._memory import in_process

if TYPE_CHECKING:
    from toolbreaker.runtime._breaker._breaker import Breaker, Permit, Rejection
    from toolbreaker.runtime._breaker._classify import Kind, Verdict
    from toolbreaker.runtime._breaker._degrade import Degradation
    from toolbreaker.runtime._run._siblings import TurnGroup, TurnMember
    from toolbreaker.runtime._step import Step

__all__ = [
    "Admit",
    "Blocking",
    "Degrade",
    "InGroup",
    "Invoke",
    "Record",
    "RunTool",
    "returned",
]

R = TypeVar("R")


class Blocking:
    """``fn(*args)``: journal and store work of the guard's own.

    On the event loop it runs inline when every store it may touch lives in this process
    (a :class:`~toolbreaker.stores.MemoryStore`: nothing to wait for), else in a worker
    thread. ``stores`` also lists anything else it may run that may wait (a user's check,
    a stop listener) as one more object that is no such store. A plain slotted class, not
    a frozen dataclass (as :class:`~toolbreaker.runtime._flow.Twin`): three are made for
    every call.
    """

    __slots__ = ("args", "fn", "stores")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], stores: Sequence[object] = ()
    ) -> None:
        self.fn = fn
        self.args = args
        self.stores = stores

    def where(self) -> Sequence[object]:
        """What ``fn`` may touch that may wait: asked on the event loop only.

        A subclass may work it out here, lazily: a sync twin never needs it.
        """
        return self.stores

    def run(self) -> Any:
        """Call it."""
        return self.fn(*self.args)

    async def arun(self) -> Any:
        """Call it inline, or in a worker thread when a shared store may block."""
        if in_process(self.where()):
            return self.fn(*self.args)
        return await asyncio.to_thread(self.fn, *self.args)


@dataclasses.dataclass(frozen=True, slots=True)
class Admit:
    """The dependency breaker's admission of one call (``Breaker.admit``).

    A permit or a rejection; ``retry``: the call re-issues one that just failed, and
    spends a retry of the breaker's budget first.
    """

    breaker: Breaker
    retry: bool = False

    def run(self) -> Permit | Rejection:
        """Ask the breaker (a store round trip, if one is needed, blocks)."""
        return self.breaker.admit(retry=self.retry)

    async def arun(self) -> Permit | Rejection:
        """Ask the breaker; its round trip is awaited, a shared budget paid in a thread."""
        return await self.breaker.aadmit(retry=self.retry)


@dataclasses.dataclass(frozen=True, slots=True)
class Degrade:
    """A sheet row's degradation of a tool-unavailable answer (stores may be involved)."""

    degradation: Degradation
    tool: str
    args: dict[str, Any]
    answer: dict[str, Any]
    options: dict[str, Any]

    def run(self) -> dict[str, Any]:
        """The degraded answer."""
        found: dict[str, Any] = self.degradation.result(
            self.tool, self.args, self.answer, **self.options
        )
        return found

    async def arun(self) -> dict[str, Any]:
        """The degraded answer, its store round trips awaited."""
        found: dict[str, Any] = await self.degradation.aresult(
            self.tool, self.args, self.answer, **self.options
        )
        return found


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """Settle the dependency breaker's permit: a verdict, an exception, an outcome name."""

    permit: Permit
    outcome: Verdict | BaseException | Kind

    def run(self) -> None:
        """Record it (a store round trip, if one is needed, blocks)."""
        self.permit.record(self.outcome)

    async def arun(self) -> None:
        """Record it; the store round trip is awaited."""
        await self.permit.arecord(self.outcome)


@dataclasses.dataclass(frozen=True, slots=True)
class Invoke:
    """Call ``fn()``: a function (sync twins) or a coroutine function (async twins)."""

    fn: Callable[[], Any]

    def run(self) -> Any:
        """Call it."""
        return self.fn()

    async def arun(self) -> Any:
        """Await it."""
        awaitable: Awaitable[Any] = self.fn()
        return await awaitable


@dataclasses.dataclass(frozen=True, slots=True)
class RunTool:
    """Run a begun step's tool, through its breaker (within its deadline) if it has one."""

    breaker: Breaker | None
    step: Step
    fn: Callable[..., Any]

    def run(self) -> Any:
        """Call the tool.

        Raises:
            AsyncCallError: the tool returned an awaitable (it was never run).
        """
        if self.breaker is not None:
            return returned(self.step.tool, self.breaker.run(self.step, self.fn, **self.step.args))
        return returned(self.step.tool, self.fn(**self.step.args))

    async def arun(self) -> Any:
        """Await the coroutine tool."""
        if self.breaker is not None:
            return await self.breaker.arun(self.step, self.fn, **self.step.args)
        awaitable: Awaitable[Any] = self.fn(**self.step.args)
        return await awaitable


def returned(tool: str, result: Any) -> Any:
    """What a sync call of ``tool`` returned, if it is no awaitable (a coroutine tool's).

    Raises:
        AsyncCallError: ``result`` is an awaitable: the tool was never run (it is closed).
    """
    if is_awaitable(result):
        raise not_awaited(
            result,
            f"RunGuard.call({tool!r})",
            f"await guard.acall({tool!r}, args) for a coroutine tool",
        )
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class InGroup:
    """Run a call in its model turn's sibling group (cancelled by policy there)."""

    group: TurnGroup
    member: TurnMember
    step: Step
    fn: Callable[[], Any]

    def run(self) -> Any:
        """The call in a worker thread, let go if cancelled (it counts until it ends)."""
        return self.group.run(self.member, self.step, self.fn)

    async def arun(self) -> Any:
        """The call in a task of its own, cancelled and awaited if cancelled."""
        return await self.group.arun(self.member, self.step, self.fn)
