"""One driver for sync and async twins: each flow is written once, as a generator.

A flow (the breaker's ``begin``, the run guard's settling of a call ...) is a generator.
Wherever it needs something that may block (a store round trip, admission, a
degradation's answer, running the tool) it yields an *effect* and receives the effect's
value back, or has its exception thrown in::

    def _begin(self, tool, args):              # the rules, once
        admission = yield Twin(self._enter, self._aenter, (now, deadline))
        ...

    def begin(self, tool, args):               # the sync twin
        return drive(self._begin(tool, args))

    async def abegin(self, tool, args):        # the async twin
        return await adrive(self._begin(tool, args))

:func:`drive` carries every effect out inline; :func:`adrive` awaits it. So the sync and
the async twin cannot decide differently: they run the same generator (the pattern of the
stores' compare-and-set loop, ``stores/_shell.py``). The breaker and the run guard both
drive their twins here; what their effects do is theirs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Protocol, TypeVar

__all__ = ["Effect", "Flow", "Twin", "adrive", "drive"]

R = TypeVar("R")


class Effect(Protocol):
    """Something a flow needs done: inline (:meth:`run`) or on the event loop (:meth:`arun`)."""

    def run(self) -> Any:
        """Do it now, blocking."""
        ...

    async def arun(self) -> Any:
        """Do it without blocking the event loop."""
        ...


#: A flow: yields effects, receives their values, returns its answer.
Flow = Generator[Effect, Any, R]


def drive(flow: Flow[R]) -> R:
    """Run ``flow`` to its end, every effect inline (the sync twins)."""
    value: Any = None
    raised: BaseException | None = None
    while True:
        try:
            effect = flow.send(value) if raised is None else flow.throw(raised)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return] # R: the flow's answer
        value, raised = None, None
        try:
            value = effect.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the flow, which decides
            raised = exc


async def adrive(flow: Flow[R]) -> R:
    """Run ``flow`` to its end on the event loop, every effect awaited (the async twins)."""
    value: Any = None
    raised: BaseException | None = None
    while True:
        try:
            effect = flow.send(value) if raised is None else flow.throw(raised)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return] # R: the flow's answer
        value, raised = None, None
        try:
            value = await effect.arun()
        except BaseException as exc:  # noqa: BLE001 - handed to the flow, which decides
            raised = exc


class Twin:
    """An effect that has a blocking and an awaitable form already: the pair is the effect.

    ``fn(*args, **kwargs)`` inline; ``await afn(*args, **kwargs)`` on the event loop (the
    breaker's ``_enter``/``_aenter``, ``Permit.record``/``arecord`` ...). A plain slotted
    class, not a frozen dataclass: one is made per effect of a call, on hot paths.
    """

    __slots__ = ("afn", "args", "fn", "kwargs")

    def __init__(
        self,
        fn: Callable[..., Any],
        afn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.afn = afn
        self.args = args
        self.kwargs = kwargs

    def run(self) -> Any:
        """Call the blocking form."""
        if self.kwargs is None:
            return self.fn(*self.args)
        return self.fn(*self.args, **self.kwargs)

    async def arun(self) -> Any:
        """Await the awaitable form."""
        if self.kwargs is None:
            return await self.afn(*self.args)
        return await self.afn(*self.args, **self.kwargs)
