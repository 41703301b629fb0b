"""One tool call between its admission and its outcome: the step every shell drives.

:meth:`Breaker.begin() <toolbreaker.Breaker.begin>` and :meth:`RunGuard.begin()
<toolbreaker.RunGuard.begin>` both return a :class:`Step`, and every framework adapter
does the same three things with it::

    step = guard.begin("create_ticket", args)      # or breaker.begin(tool=..., args=...)
    if step.answer is not None:
        return step.answer                         # do not run the tool
    try:
        result = run_tool(**step.args)             # within step.deadline seconds
    except Exception as exc:
        return step.failed(exc)                    # what the model reads
    return step.succeeded(result)                  # the result, or the guard's verdict

``asucceeded`` / ``afailed`` are the same for code on an event loop: the store round trip
they may need is awaited, never blocking the loop. A step settles exactly once.

Step observers (OpenTelemetry's tool-call spans) hear every step from one place, here: a
breaker or run guard opens the observers' watches when it begins deciding a call
(:class:`StepObservers`), makes them current while it works on the step (admission,
settling, and running the tool when it runs it itself) and ends them once, when the step
carried an answer or was settled. No adapter does any of it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Container, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias

from toolbreaker.errors import AsyncCallError, PermitError, PolicyError
from toolbreaker.runtime._log import hook_failed
from toolbreaker.runtime._sync_path import is_awaitable, not_awaited

if TYPE_CHECKING:
    from toolbreaker.core._run.machine import RunDecision

__all__ = [
    "TOOL_TYPES",
    "Step",
    "StepObserver",
    "StepObservers",
    "StepStart",
    "StepWatch",
    "ToolType",
    "Watching",
    "check_tool_type",
    "idempotency_key",
    "no_deadline",
    "no_step",
]


class _Owner(Protocol):
    """What settles a step: a breaker or a run guard."""

    def _step_succeeded(self, step: Step, result: Any) -> Any: ...

    def _step_failed(self, step: Step, exc: BaseException) -> Any: ...

    async def _step_asucceeded(self, step: Step, result: Any) -> Any: ...

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any: ...


ToolType: TypeAlias = Literal["function", "extension", "datastore"]
"""What kind of tool a call runs, in the words of the OpenTelemetry GenAI conventions
(``gen_ai.tool.type``): ``function``, the application's own code runs it (a framework's
function tool); ``extension``, it runs on the agent's side of an external API (an MCP
server's tool); ``datastore``, it retrieves from a data store (a retriever).
"""
#: The values of :data:`ToolType`.
TOOL_TYPES: Final = ("function", "extension", "datastore")


def check_tool_type(tool_type: object) -> None:
    """Refuse a tool type that is none of :data:`TOOL_TYPES` (``None``: not known).

    Raises:
        PolicyError: naming ``tool_type``.
    """
    if tool_type is not None and tool_type not in TOOL_TYPES:
        raise PolicyError(
            f"tool_type must be one of {', '.join(TOOL_TYPES)} or None, got {tool_type!r}",
            field="tool_type",
        )


@dataclasses.dataclass(frozen=True, slots=True)
class StepStart:
    """A tool call a breaker or run guard begins to decide, as step observers see it.

    Attributes:
        tool: the tool name the model called.
        call_id: the framework's id of this tool call, when it gives one.
        breaker: the dependency breaker the call goes through, when there is one.
        tool_type: what kind of tool it is (:data:`ToolType`), when the adapter knows.
        description: the tool's description as the model reads it, when the adapter knows.
    """

    tool: str
    call_id: str | None
    breaker: Any
    tool_type: ToolType | None = None
    description: str | None = None


class StepWatch(Protocol):
    """What a step observer keeps of one step, from its start to its end."""

    def enter(self) -> object:
        """The step is being worked on (in this context) until :meth:`exit`; a token."""
        ...

    def exit(self, token: object) -> None:
        """The work :meth:`enter` began is over."""
        ...

    def end(self, step: Step | None, error: BaseException | None) -> None:
        """The step ended: it carried an answer, or was settled (``error``: the failure).

        ``step`` is ``None`` when the owner raised before a step existed.
        """
        ...


#: Told of a step as it starts; what it returns hears the step until its end.
StepObserver = Callable[[StepStart], "StepWatch | None"]


class StepObservers:
    """The step observers of one breaker (its scoped breakers share them) or run guard."""

    __slots__ = ("fns",)

    def __init__(self) -> None:
        #: The observers (a plain list: shells test it on their hot paths).
        self.fns: list[StepObserver] = []

    def add(self, fn: StepObserver) -> Callable[[], None]:
        """Tell ``fn`` of every step from now on; returns a remover."""
        self.fns.append(fn)
        return lambda: self.fns.remove(fn)

    def __bool__(self) -> bool:
        return bool(self.fns)

    def start(
        self, start: StepStart, fault: Callable[[], None], *more: StepObservers
    ) -> Watching | None:
        """Tell every observer (of this and ``more``, each once) that ``start`` starts.

        ``fault`` counts an observer that raised (it is logged; the call goes on).
        Returns the watches, or ``None`` when nobody watches.
        """
        fns = list(self.fns)
        for other in more:
            fns.extend(fn for fn in other.fns if fn not in fns)
        if not fns:
            return None
        watching = Watching(fault)
        for fn in fns:
            try:
                watch = fn(start)
            except Exception as exc:  # noqa: BLE001 - an observer never changes a call
                watching.failed(fn, exc)
                continue
            if watch is not None:
                watching.watches.append(watch)
        return watching if watching.watches else None


class Watching:
    """The observers' watches of one step; their faults are counted and logged."""

    __slots__ = ("ended", "fault", "watches")

    def __init__(self, fault: Callable[[], None]) -> None:
        self.watches: list[StepWatch] = []
        self.fault = fault
        self.ended = False

    def failed(self, what: object, exc: Exception) -> None:
        """Count and log an observer's fault; the call's outcome stands."""
        self.fault()
        hook_failed(f"step observer {what!r} failed; the call's outcome stands", exc)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Every watch entered (made current) for the block."""
        entered: list[tuple[StepWatch, object]] = []
        for watch in self.watches:
            try:
                entered.append((watch, watch.enter()))
            except Exception as exc:  # noqa: BLE001 - an observer never changes a call
                self.failed(watch, exc)
        try:
            yield
        finally:
            for watch, token in reversed(entered):
                try:
                    watch.exit(token)
                except Exception as exc:  # noqa: BLE001 - an observer never changes a call
                    self.failed(watch, exc)

    def end(self, step: Step | None, error: BaseException | None) -> None:
        """End every watch, once."""
        if self.ended:
            return
        self.ended = True
        for watch in self.watches:
            try:
                watch.end(step, error)
            except Exception as exc:  # noqa: BLE001 - an observer never changes a call
                self.failed(watch, exc)


_UNWATCHED = contextlib.nullcontext()

#: The step whose tool runs in this context (see :meth:`Step.current`).
_RUNNING: contextvars.ContextVar[Step | None] = contextvars.ContextVar(
    "toolbreaker_running_step", default=None
)


def idempotency_key() -> str | None:
    """The idempotency key of the guarded write whose tool runs in this context, else ``None``.

    Call it inside a write tool to send the key its service deduplicates by, without
    putting the key in the tool's schema (where the model would fill it). It answers
    inside every tool a run guard runs: ``guard.call``, ``guard.tool`` and each framework
    adapter's tools, in the tool's thread or task. A tool that declares the key argument
    (``idempotency_key``, or the tool's ``key_argument``) receives the same key there.
    A read, and code outside a guarded tool, get ``None``.
    """
    step = _RUNNING.get()
    return None if step is None else step.idempotency_key


def no_step() -> contextlib.AbstractContextManager[None]:
    """The block that runs a tool of no step: a read a run guard counted without one.

    :func:`idempotency_key` answers ``None`` in it, as in a read's step, and not the key
    of a write whose tool the call may be nested in.
    """
    return _Current(None, _UNWATCHED)


class _Current:
    """:meth:`Step.current`'s block: the step is the running one, its watches entered."""

    __slots__ = ("_step", "_token", "_watched")

    def __init__(self, step: Step | None, watched: contextlib.AbstractContextManager[Any]) -> None:
        self._step = step
        self._watched = watched

    def __enter__(self) -> None:
        self._token = _RUNNING.set(self._step)
        self._watched.__enter__()

    def __exit__(self, *exc_info: Any) -> bool | None:
        try:
            return self._watched.__exit__(*exc_info)
        finally:
            try:
                _RUNNING.reset(self._token)
            except ValueError:  # left in another context (a generator resumed elsewhere)
                _RUNNING.set(None)


_set_fields: Final = object.__setattr__


class _Latch:
    """What changes of a step as it is settled: whether it was, and why it did not succeed.

    The one mutable part of a :class:`Step`, settled exactly once (:meth:`Step.claim`).
    """

    __slots__ = ("failure", "settled")

    def __init__(self, settled: bool) -> None:
        self.settled = settled
        self.failure: str | None = None


# Not slotted, with its own __init__: one is built for every call, and setting sixteen
# slots of a frozen dataclass one by one cost more than a breaker's admission. The fields
# are set as one dict; the test holds the signature to the fields.
@dataclasses.dataclass(frozen=True, eq=False, init=False)
class Step:
    """One tool call in flight, as its owner decided it: a frozen value; settle it once.

    Built once by the breaker or run guard that decided the call, never changed after;
    only whether it was settled (and how it failed) is recorded as it is settled.

    Attributes:
        tool: the tool name the model called.
        args: the arguments to run the tool with (a write's idempotency key filled in
            under :attr:`key_arg`); never change them: :meth:`args_for` gives a copy.
        answer: when not ``None``, do not run the tool: give this to the model.
        deadline: seconds the tool may take (the breaker's timeout), ``None`` if unset.
        permit: the dependency breaker's permit, when one was granted.
        idempotency_key: a write's idempotency key, else ``None``.
        key_arg: the argument that carries the tool's idempotency key (a run-guard write
            tool's ``idempotency_arg``), else ``None``: see :meth:`args_for`.
        fingerprint: the action's semantic fingerprint (run-guard steps), else ``None``.
        decision: the run machine's decision (run-guard steps), else ``None``.
        plan: what the owner keeps of the call between its start and its outcome (a
            run guard's call record), else ``None``.
        call_id: the framework's id of this tool call, when the adapter knows one.
        reason: why the step carries an answer instead of a run (a breaker's rejection
            reason, a run's stop condition, ``journal`` ...), else ``None``.
        refused: the answer refuses the call (the tool was not run and its result is not
            in the answer); ``False`` for an answer that stands for the call's result
            (a confirmed write's journaled result, a queued write).
        watching: the step observers' watches (see :class:`StepObservers`), if any.
    """

    _owner: _Owner
    tool: str
    args: dict[str, Any]
    _: dataclasses.KW_ONLY
    answer: Any = None
    deadline: float | None = None
    permit: Any = None
    idempotency_key: str | None = None
    key_arg: str | None = None
    fingerprint: str | None = None
    decision: RunDecision | None = None
    plan: object = None
    call_id: str | None = None
    reason: str | None = None
    refused: bool = False
    watching: Watching | None = None
    _latch: _Latch = dataclasses.field(init=False, repr=False)

    def __init__(
        self,
        _owner: _Owner,
        tool: str,
        args: dict[str, Any],
        *,
        answer: Any = None,
        deadline: float | None = None,
        permit: Any = None,
        idempotency_key: str | None = None,
        key_arg: str | None = None,
        fingerprint: str | None = None,
        decision: RunDecision | None = None,
        plan: object = None,
        call_id: str | None = None,
        reason: str | None = None,
        refused: bool = False,
        watching: Watching | None = None,
    ) -> None:
        _set_fields(
            self,
            "__dict__",
            {
                "_owner": _owner,
                "tool": tool,
                "args": args,
                "answer": answer,
                "deadline": deadline,
                "permit": permit,
                "idempotency_key": idempotency_key,
                "key_arg": key_arg,
                "fingerprint": fingerprint,
                "decision": decision,
                "plan": plan,
                "call_id": call_id,
                "reason": reason,
                "refused": refused,
                "watching": watching,
                "_latch": _Latch(answer is not None),
            },
        )

    @property
    def settled(self) -> bool:
        """Whether the step was settled (or never runnable: it carried an answer)."""
        return self._latch.settled

    @property
    def failure(self) -> str | None:
        """Why a step settled without an exception did not succeed, else ``None``.

        Set as it is settled (:meth:`failed_as`): ``result`` (its breaker counts the
        result as a failure, ``result_is_failure``), ``unverified`` (a write whose result
        does not prove it happened: its outcome is unknown), ``cancelled-by-policy`` (its
        model turn cancelled it: a required dependency opened).
        """
        return self._latch.failure

    def failed_as(self, failure: str) -> None:
        """Record why the step, settled without an exception, did not succeed (:attr:`failure`).

        For the step's owner while it settles the step.
        """
        self._latch.failure = failure

    def args_for(
        self, params: Container[str] | None = None, args: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The arguments to send the tool, its idempotency argument as its parameters require.

        A value the model gave for :attr:`key_arg` is dropped (the key is the guard's to
        give, never the model's); a write's :attr:`idempotency_key` is put there when the
        tool takes that parameter. Every adapter sends what this returns, so none handles
        the key itself.

        Args:
            params: the names of the parameters the tool takes; ``None``: it takes the
                key argument (a tool described with one must accept it).
            args: the arguments the framework will pass (its own, validated form);
                ``None``: the step's :attr:`args`.

        Returns:
            A new dict; the step's own arguments are never changed.
        """
        given = self.args if args is None else args
        arg = self.key_arg
        if arg is None:
            return dict(given)
        sent = {name: value for name, value in given.items() if name != arg}
        key = self.idempotency_key
        if key is not None and (params is None or arg in params):
            sent[arg] = key
        return sent

    def succeeded(self, result: Any) -> Any:
        """Record a result; returns what the model should read (usually ``result``).

        Raises:
            PermitError: the step was settled already, or carried an answer.
            AsyncCallError: ``result`` is a coroutine (or another awaitable): the tool was
                never awaited. The step is settled as not counted, the coroutine closed.
        """
        if is_awaitable(result):
            raise self._not_awaited(result, "step.succeeded()")
        self.claim()
        watching = self.watching
        if watching is None:
            return self._owner._step_succeeded(self, result)
        with watching.current():
            try:
                answer = self._owner._step_succeeded(self, result)
            except BaseException as exc:
                watching.end(self, exc)
                raise
        watching.end(self, None)
        return answer

    def failed(self, exc: BaseException) -> Any:
        """Record a failure; returns the result dict the model should read.

        A cancellation (anything not an ``Exception``) is recorded, then raised again.

        Raises:
            PermitError: the step was settled already, or carried an answer.
        """
        self.claim()
        watching = self.watching
        if watching is None:
            return self._owner._step_failed(self, exc)
        try:
            with watching.current():
                return self._owner._step_failed(self, exc)
        finally:
            watching.end(self, exc)

    async def asucceeded(self, result: Any) -> Any:
        """:meth:`succeeded` for the event loop: never blocks it on the store."""
        if is_awaitable(result):
            error = not_awaited(result, "step.asucceeded()", _AWAIT_IT)
            await self.afailed(error)
            raise error
        self.claim()
        watching = self.watching
        if watching is None:
            return await self._owner._step_asucceeded(self, result)
        with watching.current():
            try:
                answer = await self._owner._step_asucceeded(self, result)
            except BaseException as exc:
                watching.end(self, exc)
                raise
        watching.end(self, None)
        return answer

    async def afailed(self, exc: BaseException) -> Any:
        """:meth:`failed` for the event loop: never blocks it on the store."""
        self.claim()
        watching = self.watching
        if watching is None:
            return await self._owner._step_afailed(self, exc)
        try:
            with watching.current():
                return await self._owner._step_afailed(self, exc)
        finally:
            watching.end(self, exc)

    def _not_awaited(self, result: Any, where: str) -> AsyncCallError:
        """Settle the step as not counted (the tool never ran); the error to raise."""
        error = not_awaited(result, where, _AWAIT_IT)
        self.failed(error)
        return error

    def current(self) -> contextlib.AbstractContextManager[None]:
        """The block that runs the step's tool (the owner's work).

        The step is the running one (:func:`idempotency_key` answers its key) and its
        observers' watches are made current.
        """
        watching = self.watching
        return _Current(self, _UNWATCHED if watching is None else watching.current())

    def end(self, error: BaseException | None = None) -> None:
        """Tell the step observers the step ended (once; ``error``: how it failed).

        :meth:`succeeded`, :meth:`failed` and their twins do it; so does the owner when
        the step carries an answer, or when it settles the step itself.
        """
        watching = self.watching
        if watching is not None:
            watching.end(self, error)

    def claim(self) -> None:
        """Mark the step settled, before settling it.

        What :meth:`succeeded`, :meth:`failed` (and their async twins) do first, and what
        an owner does when it settles a step itself (a call its turn cancelled by policy).

        Raises:
            PermitError: the step was settled already, or carried an answer.
        """
        latch = self._latch
        if latch.settled:
            raise PermitError(f"step for {self.tool!r} settled twice or not runnable")
        latch.settled = True

    def __repr__(self) -> str:
        what = "answered" if self.answer is not None else "running"
        return f"<Step {self.tool!r} {what}>"


#: What a step settled with an awaitable should have been given.
_AWAIT_IT: Final = (
    "the tool's awaited result: on an event loop, result = await tool(**step.args), then "
    "await step.asucceeded(result)"
)


def no_deadline(key: str) -> PolicyError:
    """The error for a call without a deadline: every call needs one."""
    return PolicyError(
        f"no deadline for {key!r}: pass timeout= or set timeout in the boundary sheet "
        "(a hung call must become a failure)",
        field="timeout",
    )
