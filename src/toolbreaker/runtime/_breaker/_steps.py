"""A breaker's two-step API and tool wrapper: ``allow``/``admit``, ``begin``, ``guard``.

What an adapter or a run guard drives: admission (a model's re-call spends a retry
first), a :class:`~toolbreaker.runtime.Step` settled with the call's outcome, and the
result the model reads after a failure.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, ParamSpec, TypeVar, overload

from toolbreaker.core._breaker.predicates import rejects_callers
from toolbreaker.core._files import shown
from toolbreaker.core._retry import is_transient, unavailable_reason
from toolbreaker.core._run.retrying import failed_retryably
from toolbreaker.errors import AsyncCallError, CircuitOpen, PolicyError
from toolbreaker.runtime._breaker._admission import UNSET, Permit, Rejection
from toolbreaker.runtime._breaker._boundary import check_seconds
from toolbreaker.runtime._breaker._calls import Calls
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

__all__ = ["Steps"]

P = ParamSpec("P")
R = TypeVar("R")

_RETRY_BUDGET: Final = "retry-budget"


class Steps(Calls):
    """The two-step API (admit, then settle) and the tool wrapper ``guard``."""

    def allow(self, *, timeout: float | None = UNSET) -> Permit | Rejection:
        """Ask to make one call.

        Settle the returned :class:`Permit` with ``record()``, or hand
        :attr:`Rejection.result` to the model instead of calling the tool. It is
        :meth:`admit` without a retry, spelled out: the fastest two-step path.
        """
        if self._scopes is not None and (target := self._scope_target()) is not None:
            return target.allow(timeout=timeout)
        deadline = self._deadline_of(timeout)
        return self._enter(self.clock(), deadline)

    def admit(self, *, retry: bool = False, timeout: float | None = UNSET) -> Permit | Rejection:
        """Admission and retries, the one way in.

        What :meth:`allow`, :meth:`begin` and a :class:`~toolbreaker.RunGuard` ask.
        ``retry``: the call re-issues one whose last attempt failed retryably (the model
        is a retry layer; the caller's ledger of failed calls says so: the breaker's own
        for :meth:`begin` steps, the run's for a run guard). It spends one retry of this
        breaker's budget first; when none is left the answer is a :class:`Rejection`
        with reason ``retry-budget``: the call is not made, and the model reads that the
        tool is unavailable for this run. A scoped row admits through the current
        scope's breaker (its budget, its state).
        """
        if self._scopes is not None and (target := self._scope_target()) is not None:
            return target.admit(retry=retry, timeout=timeout)
        deadline = self._deadline_of(timeout)
        return self._admission(retry, deadline)

    def _admission(self, retry: bool, deadline: int | None) -> Permit | Rejection:
        """:meth:`admit` once the scope and the deadline are known."""
        if retry and not self._ledger.spend():
            return Rejection(self, _RETRY_BUDGET, None)
        return self._enter(self.clock(), deadline)

    async def aadmit(
        self, *, retry: bool = False, timeout: float | None = UNSET
    ) -> Permit | Rejection:
        """:meth:`admit` for the event loop: the store round trip is awaited.

        A retry budget shared through the store is paid in a worker thread.
        """
        if self._scopes is not None and (target := self._scope_target()) is not None:
            return await target.aadmit(retry=retry, timeout=timeout)
        deadline = self._deadline_of(timeout)
        return await self._aadmission(retry, deadline)

    async def _aadmission(self, retry: bool, deadline: int | None) -> Permit | Rejection:
        """:meth:`_admission` for the event loop."""
        if retry and not await self._ledger.aspend():
            return Rejection(self, _RETRY_BUDGET, None)
        return await self._aenter(self.clock(), deadline)

    def begin(
        self,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = UNSET,
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Step:
        """Ask to make one call of ``tool``; the :class:`~toolbreaker.runtime.Step` says how.

        If ``step.answer`` is set the call was rejected locally: hand the answer (the
        tool-unavailable result, worded for ``tool``) to the model. Otherwise run the tool
        within ``step.deadline`` seconds and settle the step with ``succeeded(result)`` or
        ``failed(exc)``, whose return value is what the model reads. ``call_id`` is the
        framework's id of this tool call, ``tool_type`` the kind of tool
        (:data:`~toolbreaker.runtime.ToolType`) and ``description`` its description, for
        the step observers (a span's ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` and
        ``gen_ai.tool.description``).

        Raises:
            PolicyError: ``tool_type`` is none of ``TOOL_TYPES``.
        """
        if self._scopes is not None and (target := self._scope_target()) is not None:
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

    async def abegin(
        self,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = UNSET,
        call_id: str | None = None,
        tool_type: ToolType | None = None,
        description: str | None = None,
    ) -> Step:
        """:meth:`begin` for the event loop: a store round trip is awaited."""
        if self._scopes is not None and (target := self._scope_target()) is not None:
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
            if self.step_observers.fns
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
        deadline = self._deadline_of(timeout)
        call = dict(args or {})
        retry = self._ledger.retried(name, call)
        admission = yield Twin(self._admission, self._aadmission, (retry, deadline))
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
        observers = self.step_observers
        if not observers and not any(more):
            return None
        start = StepStart(tool, call_id, self, tool_type, description)
        return observers.start(start, self._observer_failed, *more)

    def _observer_failed(self) -> None:
        self.stats.listener_errors += 1

    def _succeeding(self, step: Step, result: Any) -> Flow[Any]:
        """A step's success, recorded (both twins): what the model reads is ``result``."""
        verdict = self.result_verdict(result)
        if verdict is not SUCCESS:
            step.failed_as("result")  # the tool returned what counts as a failure
        yield Twin(step.permit.record, step.permit.arecord, (verdict,))
        self._ledger.succeeded()
        self._ledger.ended(step.tool, step.args)
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

    @overload
    def guard(
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | dict[str, Any]]]: ...

    @overload
    def guard(self, fn: Callable[P, R], /) -> Callable[P, R | dict[str, Any]]: ...

    @overload
    def guard(
        self, fn: None = None, /, *, timeout: float | None = ..., tool: str | None = ...
    ) -> Callable[[Callable[P, R]], Callable[P, R | dict[str, Any]]]: ...

    def guard(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        timeout: float | None = UNSET,
        tool: str | None = None,
    ) -> Any:
        """Decorate a tool function (sync or async) so it returns results, never raises.

        A local rejection, or the failure that just opened the breaker, returns the
        tool-unavailable result; any other failure returns ``{"ok": false, "error": ...,
        "retryable": ...}``; a success returns the function's own result unchanged. A
        coroutine function gets the async guard (``await``-ed through :meth:`acall`).

        Raises:
            PolicyError: when the decorator is built, never at a call: a ``timeout`` that is
                not a positive number of seconds (or ``None``: no deadline), no deadline at
                all (neither ``timeout`` nor the row's), or a ``tool`` that is not a name.
        """
        if timeout is UNSET:
            if self._default_deadline is None:
                raise self._no_deadline()
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

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            name: str = tool or getattr(func, "__name__", None) or self.tool
            if self._ledger.policy is not None:
                warn_nested_retries(func, name, "the breaker's retry policy")
            tool_call = _ToolCall(func, name, _binder(func), timeout)
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    if self._scopes is not None and (target := self._scope_target()) is not None:
                        return await target._aguarded(tool_call, args, kwargs)
                    return await self._aguarded(tool_call, args, kwargs)

                return async_tool

            @functools.wraps(func)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                if self._scopes is not None and (target := self._scope_target()) is not None:
                    return target._guarded(tool_call, args, kwargs)
                return self._guarded(tool_call, args, kwargs)

            return sync_tool

        return decorate(fn) if fn is not None else decorate

    def _guarded(self, tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call of a :meth:`guard`-ed sync tool by this (scope's) breaker.

        The direct path: :meth:`_tool_calling` with no ledger and no chain to keep (a test
        holds the two to the same answers), and no exception while the core's idle window
        rejects the call.
        """
        if self._ledger.policy is not None or self.degradation.chain:
            return drive(self._tool_calling(tool, args, kwargs))
        state = self._view.state
        if state is not self._quiet and state is not None:
            now = self.clock()
            idle = self._cooling(state, now)
            if idle is not None:
                return idle.answer(now, tool.name)
        try:
            return self.call(tool.func, *args, timeout=tool.timeout, **kwargs)
        except AsyncCallError:
            raise  # the program's mistake (a coroutine on the sync path), not the model's
        except CircuitOpen as exc:
            return exc.result_for(tool.name)
        except Exception as exc:  # noqa: BLE001 - turned into a tool result
            return self.failure_result(tool.name, exc)

    async def _aguarded(
        self, tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """:meth:`_guarded` for a coroutine tool: every store round trip is awaited."""
        if self._ledger.policy is not None or self.degradation.chain:
            return await adrive(self._tool_calling(tool, args, kwargs))
        state = self._view.state
        if state is not self._quiet and state is not None:
            now = self.clock()
            idle = self._cooling(state, now)
            if idle is not None:
                return idle.answer(now, tool.name)
        try:
            return await self.acall(tool.func, *args, timeout=tool.timeout, **kwargs)
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
        ledger = self._ledger
        # The call's keywords by signature: the identity of the model's re-call.
        call = tool.bind(args, kwargs) if ledger.keeps else {}
        if ledger.retried(name, call):
            allowed = yield Twin(ledger.spend, ledger.aspend)
            if not allowed:
                return Rejection(self, _RETRY_BUDGET, None).result_for(name)
        degradation = self.degradation
        try:
            result = yield _Calling(self, tool, args, kwargs)
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
        state = self._view.state or getattr(self._view, "known", None)
        if state is not None and rejects_callers(state, self.policy):
            # This failure (or a concurrent one) just opened the breaker: tell the model now,
            # not on its next attempt.
            return self._unavailable("opened", self.retry_after_ms(), tool=tool)
        failure = self._failure(exc)
        why = unavailable_reason(
            failure, self._ledger.budget, max_retry_after_ms=self.boundary.max_retry_after_ms
        )
        if why is not None:
            # A spent quota, a hint too long to wait out, or a spent retry budget: the
            # model must not retry either, for the rest of the run.
            return self._unavailable(why, None, tool=tool)
        retryable = self.retryable and is_transient(failure.kind, failure.detail, failure.status)
        return error_result(tool, exc, retryable=retryable)

    def _failed_call(self, tool: str, call: Mapping[str, Any], exc: Exception) -> dict[str, Any]:
        """:meth:`failure_result`, remembering how the call ended for the retry ledger.

        The model re-issuing a call whose failure invites a retry is then counted as a
        retry (see :meth:`admit`); the core decides both.
        """
        result = self.failure_result(tool, exc)
        if self._ledger.keeps:
            self._ledger.observe(tool, call, retryable=failed_retryably(result))
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
    """The effect of :meth:`Steps._tool_calling`: the tool through ``call`` or ``acall``."""

    __slots__ = ("args", "breaker", "kwargs", "tool")

    def __init__(
        self, breaker: Steps, tool: _ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.breaker = breaker
        self.tool = tool
        self.args = args
        self.kwargs = kwargs

    def run(self) -> Any:
        """The sync tool, through :meth:`Steps.call`."""
        tool = self.tool
        return self.breaker.call(tool.func, *self.args, timeout=tool.timeout, **self.kwargs)

    async def arun(self) -> Any:
        """The coroutine tool, through :meth:`Steps.acall`."""
        tool = self.tool
        return await self.breaker.acall(tool.func, *self.args, timeout=tool.timeout, **self.kwargs)


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
