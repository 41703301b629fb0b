"""A breaker's two-step API and tool wrapper: ``allow``/``admit``, ``begin``, ``guard``.

One part of :class:`~toolbreaker.Breaker` (:class:`Steps`, built with the parts it
drives: admission, the runner, the retry ledger, the degradation chain).

What an adapter or a run guard drives: admission (a model's re-call spends a retry
first), a :class:`~toolbreaker.runtime.Step` settled with the call's outcome, and the
result the model reads after a failure.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, TypeVar

from toolbreaker.core._breaker.predicates import rejects_callers
from toolbreaker.core._files import shown
from toolbreaker.core._retry import is_transient, unavailable_reason
from toolbreaker.core._run.retrying import failed_retryably
from toolbreaker.errors import AsyncCallError, CircuitOpen, PolicyError
from toolbreaker.runtime._breaker._admission import UNSET, BreakerT, Permit, Rejection
from toolbreaker.runtime._breaker._boundary import check_seconds
from toolbreaker.runtime._breaker._classify import SUCCESS
from toolbreaker.runtime._breaker._layers import warn_nested_retries
from toolbreaker.runtime._flow import Flow, Twin, adrive, drive
from toolbreaker.runtime._result import error_result
from toolbreaker.runtime._step import (
    Step,
    StepObservers,
    StepStart,
    ToolType,
    Watching,
    check_tool_type,
)

if TYPE_CHECKING:
    from toolbreaker.runtime._breaker._admission import Admission
    from toolbreaker.runtime._breaker._boundary import Boundary
    from toolbreaker.runtime._breaker._calls import Runner
    from toolbreaker.runtime._breaker._degrade import Degradation
    from toolbreaker.runtime._breaker._ledger import RetryLedger

__all__ = ["Steps"]

P = ParamSpec("P")
R = TypeVar("R")

_RETRY_BUDGET: Final = "retry-budget"


class Steps(Generic[BreakerT]):
    """The two-step API (admit, then settle) and the tool wrapper ``guard``.

    The owner of the :class:`~toolbreaker.runtime.Step` values it makes: a step is
    settled through it.

    Args:
        owner: the breaker it serves (what step observers are told of).
        admission: the breaker's admission part.
        runner: the breaker's runner (its deadlines, its calls).
        ledger: the retry ledger (the model's re-calls, the retry budget).
        degradation: the row's degradation chain.
        observers: who hears each tool call begun here.
        boundary: the row (its tool name and retry answers).
        scope_steps: a scoped row's: the steps of the current scope's breaker, which
            serve the call (``None`` when no scope is set); ``None`` for a row not scoped.
    """

    def __init__(
        self,
        owner: BreakerT,
        *,
        admission: Admission[BreakerT],
        runner: Runner[BreakerT],
        ledger: RetryLedger,
        degradation: Degradation,
        observers: StepObservers,
        boundary: Boundary,
        scope_steps: Callable[[], Steps[BreakerT] | None] | None,
    ) -> None:
        self.owner = owner
        self.scope_steps = scope_steps
        self.admission = admission
        self.runner = runner
        self.ledger = ledger
        self.degradation = degradation
        self.observers = observers
        self.stats = admission.stats
        self.tool = boundary.tool or boundary.dependency
        self.configure(boundary)

    def configure(self, boundary: Boundary) -> None:
        """Take the row's retry answers (adopt changes them)."""
        self.retryable = boundary.retryable
        self.max_retry_after_ms = boundary.max_retry_after_ms

    def allow(self, timeout: float | None) -> Permit[BreakerT] | Rejection[BreakerT]:
        """:meth:`Breaker.allow <toolbreaker.Breaker.allow>`: admission without a retry."""
        if self.scope_steps is not None and (target := self.scope_steps()) is not None:
            return target.allow(timeout=timeout)
        deadline = self.runner.deadline_of(timeout)
        return self.runner.enter(self.admission.clock(), deadline)

    def admit(self, retry: bool, timeout: float | None) -> Permit[BreakerT] | Rejection[BreakerT]:
        """:meth:`Breaker.admit <toolbreaker.Breaker.admit>`: a re-call spends a retry first."""
        if self.scope_steps is not None and (target := self.scope_steps()) is not None:
            return target.admit(retry=retry, timeout=timeout)
        deadline = self.runner.deadline_of(timeout)
        if not retry:  # nothing to spend: the runner's admission alone (no flow to drive)
            return self.runner.enter(self.admission.clock(), deadline)
        return drive(self._admitting(retry, deadline))

    def _admitting(
        self, retry: bool, deadline: int | None
    ) -> Flow[Permit[BreakerT] | Rejection[BreakerT]]:
        """:meth:`admit` and :meth:`aadmit` once the scope and the deadline are known.

        A re-call spends a retry first; then the runner's slot and admission.
        """
        if retry and not (yield Twin(self.ledger.spend, self.ledger.aspend)):
            return Rejection(self.admission, _RETRY_BUDGET, None)
        return (yield from self.runner.entering(self.admission.clock(), deadline))

    async def aadmit(
        self, retry: bool, timeout: float | None
    ) -> Permit[BreakerT] | Rejection[BreakerT]:
        """:meth:`admit` for the event loop: the store round trip is awaited."""
        if self.scope_steps is not None and (target := self.scope_steps()) is not None:
            return await target.aadmit(retry=retry, timeout=timeout)
        deadline = self.runner.deadline_of(timeout)
        if not retry:
            return await self.runner.aenter(self.admission.clock(), deadline)
        return await adrive(self._admitting(retry, deadline))

    def begin(  # noqa: PLR0917 - Breaker.begin's arguments, passed on
        self,
        tool: str | None,
        args: Mapping[str, Any] | None,
        timeout: float | None,
        call_id: str | None,
        tool_type: ToolType | None,
        description: str | None,
    ) -> Step:
        """:meth:`Breaker.begin <toolbreaker.Breaker.begin>`: a step, admitted or answered."""
        if self.scope_steps is not None and (target := self.scope_steps()) is not None:
            return target.begin(
                tool,
                args,
                timeout=timeout,
                call_id=call_id,
                tool_type=tool_type,
                description=description,
            )
        check_tool_type(tool_type)
        return drive(
            self._beginning(
                tool, args, timeout, call_id=call_id, tool_type=tool_type, description=description
            )
        )

    async def abegin(  # noqa: PLR0917 - Breaker.abegin's arguments, passed on
        self,
        tool: str | None,
        args: Mapping[str, Any] | None,
        timeout: float | None,
        call_id: str | None,
        tool_type: ToolType | None,
        description: str | None,
    ) -> Step:
        """:meth:`begin` for the event loop: a store round trip is awaited."""
        if self.scope_steps is not None and (target := self.scope_steps()) is not None:
            return await target.abegin(
                tool,
                args,
                timeout=timeout,
                call_id=call_id,
                tool_type=tool_type,
                description=description,
            )
        check_tool_type(tool_type)
        return await adrive(
            self._beginning(
                tool, args, timeout, call_id=call_id, tool_type=tool_type, description=description
            )
        )

    def _beginning(
        self,
        tool: str | None,
        args: Mapping[str, Any] | None,
        timeout: float | None,
        *,
        call_id: str | None,
        tool_type: ToolType | None,
        description: str | None,
    ) -> Flow[Step]:
        """:meth:`begin`'s rules, once (both twins), inside the step observers' watches."""
        name = tool or self.tool
        watching = (
            self.watch_step(name, call_id, tool_type=tool_type, description=description)
            if self.observers.fns
            else None
        )
        if watching is None:
            return (yield from self._deciding(name, args, timeout, call_id, None))
        try:
            with watching.current():
                step = yield from self._deciding(name, args, timeout, call_id, watching)
        except BaseException as exc:
            watching.end(None, exc)
            raise
        if step.answer is not None:
            step.end()
        return step

    def _deciding(
        self,
        name: str,
        args: Mapping[str, Any] | None,
        timeout: float | None,
        call_id: str | None,
        watching: Watching | None,
    ) -> Flow[Step]:
        """Admission (a model's re-call spends a retry first), then the step."""
        deadline = self.runner.deadline_of(timeout)
        call = dict(args or {})
        retry = self.ledger.retried(name, call)
        admission = yield from self._admitting(retry, deadline)
        if isinstance(admission, Permit):
            seconds = None if deadline is None else deadline / 1000
            return Step(
                self,
                name,
                call,
                deadline=seconds,
                permit=admission,
                call_id=call_id,
                watching=watching,
            )
        answer = admission.result_for(name)
        degradation = self.degradation
        if degradation.chain:
            answer = yield Twin(degradation.result, degradation.aresult, (name, call, answer))
        return Step(
            self,
            name,
            call,
            answer=answer,
            call_id=call_id,
            reason=admission.reason,
            refused=True,
            watching=watching,
        )

    def watch_step(
        self,
        tool: str,
        call_id: str | None,
        *more: StepObservers,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Watching | None:
        """The step observers' watches of a call of ``tool`` that starts now, if any.

        What :meth:`begin` (and a run guard's ``begin``, with its own observers as
        ``more``) asks first; ``None`` when nobody observes steps.
        """
        observers = self.observers
        if not observers and not any(more):
            return None
        start = StepStart(tool, call_id, self.owner, tool_type, description)
        return observers.start(start, self._observer_failed, *more)

    def _observer_failed(self) -> None:
        self.stats.listener_errors += 1

    def _succeeding(self, step: Step, result: Any) -> Flow[Any]:
        """A step's success, recorded (both twins): what the model reads is ``result``."""
        verdict = self.admission.result_verdict(result)
        if verdict is not SUCCESS:
            step.failed_as("result")  # the tool returned what counts as a failure
        yield Twin(step.permit.record, step.permit.arecord, (verdict,))
        self.ledger.succeeded()
        self.ledger.ended(step.tool, step.args)
        degradation = self.degradation
        if degradation.chain:  # only a stale row keeps answers
            yield Twin(degradation.remember, degradation.aremember, (step.tool, step.args, result))
        return result

    def _failing(self, step: Step, exc: BaseException) -> Flow[Any]:
        """A step's failure, recorded (both twins); a cancellation is raised again."""
        yield Twin(step.permit.record, step.permit.arecord, (exc,))
        if not isinstance(exc, Exception):
            raise exc
        failed = self._failed_call(step.tool, step.args, exc)
        degradation = self.degradation
        if not degradation.chain:
            return failed
        answer = yield Twin(degradation.result, degradation.aresult, (step.tool, step.args, failed))
        return answer

    # -- the Step's owner callbacks: both twins drive the one flow -------------------------

    def _step_succeeded(self, step: Step, result: Any) -> Any:
        return drive(self._succeeding(step, result))

    def _step_failed(self, step: Step, exc: BaseException) -> Any:
        return drive(self._failing(step, exc))

    async def _step_asucceeded(self, step: Step, result: Any) -> Any:
        return await adrive(self._succeeding(step, result))

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any:
        return await adrive(self._failing(step, exc))

    def guard(self, fn: Callable[..., Any] | None, timeout: float | None, tool: str | None) -> Any:
        """:meth:`Breaker.guard <toolbreaker.Breaker.guard>`: the decorator, or the tool.

        Raises:
            PolicyError: a ``timeout`` or ``tool`` that is not one, or no deadline at all.
        """
        if timeout is UNSET:
            if self.runner.default_deadline is None:
                raise self.runner.no_deadline()
        elif timeout is None:
            raise PolicyError(
                "guard(timeout=None) leaves every call without a deadline: pass seconds, or "
                "leave timeout out for the row's",
                field="timeout",
            )
        else:
            check_seconds(timeout, "timeout")
        if tool is not None and (not isinstance(tool, str) or not tool.strip()):
            raise PolicyError(f"tool must be a tool's name, got {shown(tool)}", field="tool")

        # A row's scope never changes (adopt keeps it): asked once, not at every call.
        scope_steps, guarded, aguarded = self.scope_steps, self.guarded, self.aguarded

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            name: str = tool or getattr(func, "__name__", None) or self.tool
            if self.ledger.policy is not None:
                warn_nested_retries(func, name, "the breaker's retry policy")
            tool_call = _ToolCall(func, name, _binder(func), timeout)
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    if scope_steps is not None and (target := scope_steps()) is not None:
                        return await target.aguarded(tool_call, args, kwargs)
                    return await aguarded(tool_call, args, kwargs)

                return async_tool

            @functools.wraps(func)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                if scope_steps is not None and (target := scope_steps()) is not None:
                    return target.guarded(tool_call, args, kwargs)
                return guarded(tool_call, args, kwargs)

            return sync_tool

        return decorate(fn) if fn is not None else decorate

    def guarded(self, tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call of a :meth:`guard`-ed sync tool by this (scope's) breaker.

        The direct path: :meth:`_tool_calling` with no ledger and no chain to keep (a test
        holds the two to the same answers), and no exception while the core's idle window
        rejects the call.
        """
        if self.ledger.policy is not None or self.degradation.chain:
            return drive(self._tool_calling(tool, args, kwargs))
        admission = self.admission
        state = admission.view.state
        if state is not admission.quiet and state is not None:
            now = admission.clock()
            idle = admission.cooling(state, now)
            if idle is not None:
                return idle.answer(now, tool.name)
        try:
            return self.runner.call(tool.func, args, kwargs, tool.timeout)
        except AsyncCallError:
            raise  # the program's mistake (a coroutine on the sync path), not the model's
        except CircuitOpen as exc:
            return exc.result_for(tool.name)
        except Exception as exc:  # noqa: BLE001 - turned into a tool result
            return self.failure_result(tool.name, exc)

    async def aguarded(self, tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """:meth:`guarded` for a coroutine tool: every store round trip is awaited."""
        if self.ledger.policy is not None or self.degradation.chain:
            return await adrive(self._tool_calling(tool, args, kwargs))
        admission = self.admission
        state = admission.view.state
        if state is not admission.quiet and state is not None:
            now = admission.clock()
            idle = admission.cooling(state, now)
            if idle is not None:
                return idle.answer(now, tool.name)
        try:
            return await self.runner.acall(tool.func, args, kwargs, tool.timeout)
        except CircuitOpen as exc:
            return exc.result_for(tool.name)
        except Exception as exc:  # noqa: BLE001 - turned into a tool result
            return self.failure_result(tool.name, exc)

    def _tool_calling(
        self, tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Flow[Any]:
        """One call of a :meth:`guard`-ed tool by this (scope's) breaker, for both twins.

        A model's re-call spends a retry first; the call goes through ``call``/``acall``;
        a rejection or a failure becomes what the model reads, through the row's
        degradation chain.
        """
        name = tool.name
        ledger = self.ledger
        # The call's keywords by signature: the identity of the model's re-call.
        call = tool.bind(args, kwargs) if ledger.keeps else {}
        if ledger.retried(name, call):
            allowed = yield Twin(ledger.spend, ledger.aspend)
            if not allowed:
                return Rejection(self.admission, _RETRY_BUDGET, None).result_for(name)
        degradation = self.degradation
        try:
            result = yield _Calling(self.runner, tool, args, kwargs)
        except AsyncCallError:
            raise  # the program's mistake (a coroutine on the sync path), not the model's
        except CircuitOpen as exc:
            answer = exc.result_for(name)
        except Exception as exc:  # noqa: BLE001 - turned into a tool result
            answer = self._failed_call(name, call, exc)
        else:
            ledger.ended(name, call)
            if degradation.chain:
                yield Twin(
                    degradation.remember,
                    degradation.aremember,
                    (name, tool.bind(args, kwargs), result),
                )
            return result
        if not degradation.chain:
            return answer
        return (
            yield Twin(
                degradation.result, degradation.aresult, (name, tool.bind(args, kwargs), answer)
            )
        )

    def failure_result(self, tool: str, exc: BaseException) -> dict[str, Any]:
        """What the model should read after ``tool`` failed with ``exc`` (already recorded).

        The tool-unavailable result when the breaker is now open (this failure may just
        have opened it: the model hears it now, not one wasted call later); otherwise an
        error result that says whether retrying can help.
        """
        # A shared store's view may not be trusted for admission yet, but the state this
        # process last saw (the failure's own round trip) says whether it just opened.
        admission = self.admission
        view = admission.view
        state = view.state or getattr(view, "known", None)
        if state is not None and rejects_callers(state, admission.policy):
            # This failure (or a concurrent one) just opened the breaker: tell the model now,
            # not on its next attempt.
            return admission.unavailable("opened", admission.retry_after_ms(), tool=tool)
        failure = self.runner.failure(exc)
        why = unavailable_reason(
            failure, self.ledger.budget, max_retry_after_ms=self.max_retry_after_ms
        )
        if why is not None:
            # A spent quota, a hint too long to wait out, or a spent retry budget: the
            # model must not retry either, for the rest of the run.
            return admission.unavailable(why, None, tool=tool)
        retryable = self.retryable and is_transient(failure.kind, failure.detail, failure.status)
        return error_result(tool, exc, retryable=retryable)

    def _failed_call(self, tool: str, call: Mapping[str, Any], exc: Exception) -> dict[str, Any]:
        """:meth:`failure_result`, remembering how the call ended for the retry ledger.

        The model re-issuing a call whose failure invites a retry is then counted as a
        retry (see :meth:`admit`); the core decides both.
        """
        result = self.failure_result(tool, exc)
        if self.ledger.keeps:
            self.ledger.observe(tool, call, retryable=failed_retryably(result))
        return result


def _binder(
    func: Callable[..., Any],
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """Turns a call's positional and keyword arguments into keywords, by ``func``'s signature.

    The degradation matrix keys kept answers and queued work by keyword arguments.
    """
    try:
        signature: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if signature is not None:
            try:
                return dict(signature.bind(*args, **kwargs).arguments)
            except TypeError:
                pass
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}

    return bind


class _Calling:
    """The effect of :meth:`Steps._tool_calling`: the tool through the runner's call."""

    __slots__ = ("args", "kwargs", "runner", "tool")

    def __init__(
        self, runner: Runner[Any], tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.runner = runner
        self.tool = tool
        self.args = args
        self.kwargs = kwargs

    def run(self) -> Any:
        """The sync tool, through :meth:`Runner.call`."""
        tool = self.tool
        return self.runner.call(tool.func, self.args, self.kwargs, tool.timeout)

    async def arun(self) -> Any:
        """The coroutine tool, through :meth:`Runner.acall`."""
        tool = self.tool
        return await self.runner.acall(tool.func, self.args, self.kwargs, tool.timeout)


class _ToolCall:
    """What :meth:`Steps.guard` knows of a tool: the function, its name, its binder."""

    __slots__ = ("bind", "func", "name", "timeout")

    def __init__(
        self,
        func: Callable[..., Any],
        name: str,
        bind: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]],
        timeout: float | None,
    ) -> None:
        self.func = func
        self.name = name
        self.bind = bind
        self.timeout = timeout
