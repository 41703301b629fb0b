"""LangChain 1.x and LangGraph: breakers and run guards as agent middleware.

One object, :class:`ToolbreakerMiddleware`, serves both:

- ``create_agent(model, tools, middleware=[ToolbreakerMiddleware(...)])``: its
  ``wrap_tool_call`` / ``awrap_tool_call`` guard every tool call and its ``before_model``
  ends the run (``jump_to: "end"``) once the run guard has stopped it;
- a hand-built LangGraph: ``ToolNode(tools, wrap_tool_call=mw.wrap_tool_call,
  awrap_tool_call=mw.awrap_tool_call)`` (or :meth:`ToolbreakerMiddleware.tool_node`),
  with :meth:`ToolbreakerMiddleware.route` as the conditional edge after the tools node
  and, optionally, :meth:`ToolbreakerMiddleware.stop_node` to write the stop message.

In ``create_agent`` its ``wrap_model_call`` also appends
:func:`toolbreaker.system_prompt_line` to the system prompt (``instructions=False`` to
opt out) and, with ``hide_open_tools=True``, removes from the model's tool list every tool
whose breaker rejects all calls now (open and cooling down, isolated, forced open), with
one system-prompt line naming them and until when.

What happens to one tool call
-----------------------------
The run guard is asked first (:meth:`~toolbreaker.RunGuard.begin`): when it answers (the
dependency's breaker is open, the run is stopped, writes are blocked, a confirmed write is
answered from the journal) the tool does not run and the model gets that answer as a
``ToolMessage``, ``status="error"`` unless the answer is a success. Otherwise the tool runs
through LangChain's handler; a write carries its idempotency key (see
:func:`toolbreaker.idempotency_key`). The outcome is settled with the guard, which decides what the
model reads: the tool's own message on success, a JSON result it can act on on failure
(a tool-unavailable result naming the fallback, or ``{"ok": false, "error": ...,
"retryable": ...}``), never "please try again".

Sibling calls
-------------
``ToolNode`` runs one model message's tool calls in parallel (async tasks, or threads for
sync tools); they are one sibling group of the run guard (the turn is the message that
issued them). When a required dependency (a tool with ``required: True``) opens while
they run, the calls in flight that need it are cancelled by policy: async, the task the
middleware runs the handler in is cancelled (never ``ToolNode``'s, which would fail the
node); sync, the call is abandoned and its result discarded. The model reads a
cancelled-by-policy answer (a write that may have started: unknown outcome, journaled,
never replayed); independent calls finish with their results. The run stops at the next
``before_model``, with the turn's outcome next to the stop packet (see below).

Which run a call belongs to
---------------------------
Breakers are shared through the :class:`~toolbreaker.Registry`; run guards are per task.
The task id of a call is, in order: the ``task_id`` callable given to the middleware;
``task_id`` in the runtime context (``agent.invoke(..., context={"task_id": "T-1"})``, a
mapping key or an attribute of a context object); the LangGraph ``thread_id``
(``config={"configurable": {"thread_id": ...}}``); the ``run_id`` of the config. A fixed
``guard=`` skips all that. The middleware keeps one :class:`~toolbreaker.RunGuard` per task
(the most recent ``max_runs`` of them), so a second ``invoke`` with the same task id
continues the same run, budgets and all; :meth:`ToolbreakerMiddleware.forget` starts over
(the journal still skips confirmed writes).

Where the stop packet goes
--------------------------
When the run guard stops the run, the next ``before_model`` ends it without calling the
model and adds an ``AIMessage`` whose text says why and whose
``additional_kwargs["toolbreaker_stop"]`` holds the packet (``StopPacket.to_dict()``); the
same dict is in the final state under ``"toolbreaker_stop"``, and
:meth:`ToolbreakerMiddleware.stop_packet` returns the packet itself. The last turn's calls,
as a bounded partial outcome (``SiblingOutcome.to_result()``: the completed results, and
which calls degraded or were cancelled and why), are under ``"toolbreaker_turn"`` in both.
On an event loop (``ainvoke``, ``astream``) the async hooks build the packet with the
journal read off the loop; there use ``astop_packet`` and, in a hand-built graph,
``astop_node``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.errors import PolicyError, ToolReportedError
from toolbreaker.integrations._kit import (
    BREAKER_TOOL_OPTIONS,
    Breaker,
    BreakerToolOptions,
    Budget,
    GuardToolOptions,
    Journal,
    MemoryStore,
    Registry,
    Step,
    StopPacket,
    hidden_tools_line,
    system_prompt_line,
)

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
        hook_config,
    )
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.graph import END
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
    from typing_extensions import NotRequired
except ImportError:  # pragma: no cover - depends on the installed extras
    require("langchain.agents", "langchain")  # raises with the install hint
    raise

from toolbreaker.integrations._described import check_adapter, guard_options, tool_breaker
from toolbreaker.integrations._langchain_messages import (
    STOP_KEY,
    answer_message,
    call_id_of,
    content_text,
    count_response,
    description_of,
    failed_reply,
    settles_with,
    stop_message,
    stop_update,
    tool_name_of,
    tool_reply,
    tool_value,
    turn_of,
    with_system_line,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        GuardedTool,
        RunGuard,
    )


__all__ = [
    "STOP_KEY",
    "ToolbreakerMiddleware",
]

_SELECT: Final = frozenset({"dependency", "operation", "breaker"})
#: Breaker options a tool may set, and the run guard's: taken from Boundary and
#: GuardedTool, so they cannot drift.
_BREAKER_OPTIONS: Final = BREAKER_TOOL_OPTIONS
_GUARD_OPTIONS: Final = frozenset(GuardToolOptions.__optional_keys__)


class ToolOptions(BreakerToolOptions, GuardToolOptions, total=False):
    """How one tool is guarded; every key is optional.

    Which breaker: ``breaker`` (a ready one), else ``registry.get(dependency,
    operation)`` (``dependency`` defaults to the tool name), else a sheet row whose
    ``tool`` is the tool name. Breaker options (``BreakerToolOptions``)
    apply when the registry creates the breaker: ``policy``, ``timeout``, ``enforce``,
    ``retryable``, ``fallback``, ``fallback_note``, ``owner``, ``instructions``, ``scope``,
    ``max_scopes``, ``retry`` (its budget counts the model's re-calls),
    ``max_retry_after_ms``, ``max_concurrent`` (the bulkhead), ``health_check``, and the
    degradation matrix's ``degrade``, ``max_stale``, ``stale_every``. The rest are the run
    guard's :class:`~toolbreaker.GuardedTool` fields (``risk``, ``business_key``,
    ``idempotency_arg``, ``verify``, ``reconcile``, ``external_id``, ``authorize``,
    ``required``, ``recovery``); ``verify`` and ``external_id`` receive the tool's output
    as the model would read it, JSON-decoded when it is JSON.
    """

    dependency: str
    operation: str
    breaker: Breaker


class ToolbreakerState(AgentState[Any]):
    """The agent state with the stop packet dict under :data:`STOP_KEY` once stopped."""

    toolbreaker_stop: NotRequired[dict[str, Any] | None]
    toolbreaker_turn: NotRequired[dict[str, Any] | None]


class ToolError(ToolReportedError):
    """A tool call LangChain answered with an error message (bad arguments, unknown tool).

    The message is all that is left of the failure; the default classifier ignores it,
    so it never counts against the dependency.
    """


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    """A tool call the guard admitted: settle ``step`` with the handler's outcome."""

    step: Step
    request: ToolCallRequest
    timeout: float | None


class ToolbreakerMiddleware(AgentMiddleware[ToolbreakerState, Any, Any]):
    """Guards every tool call of a LangChain agent or LangGraph ``ToolNode``.

    Args:
        registry: where the tools' breakers come from; share it between agents so they
            share breakers. A private one by default.
        tools: per-tool options (:class:`ToolOptions`), keyed by tool name. Tools left
            out are reads behind the breaker ``registry.for_tool(name)`` or, failing that,
            ``registry.get(name)``.
        guard: one fixed run guard for every call (one run at a time); excludes
            ``guard_factory``.
        guard_factory: builds the run guard of a task id; by default
            ``RunGuard(task, budget=budget, journal=journal, clock=registry.clock)``.
        budget: the run budget of the default factory.
        journal: the journal of the default factory; pass a persistent store to resume
            tasks across processes. A private in-memory store by default.
        task_id: maps the runtime (``.context``, ``.execution_info``) to a task id, or
            ``None`` to use the default lookup (see the module docs).
        max_runs: run guards kept; the least recently used beyond that are dropped.
        instructions: append :func:`toolbreaker.system_prompt_line` to the system prompt
            of every model call (unless it is already there).
        hide_open_tools: opt in to removing open tools from the tool list of each model
            call (see :meth:`~toolbreaker.Breaker.hidden_for_ms`), with a system-prompt
            line that names them and when they come back.

    Raises:
        PolicyError: unknown tool options, ``breaker`` with breaker options, or both
            ``guard`` and ``guard_factory``.
    """

    state_schema = ToolbreakerState

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        tools: Mapping[str, ToolOptions] | None = None,
        guard: RunGuard | None = None,
        guard_factory: Callable[[str], RunGuard] | None = None,
        budget: Budget | None = None,
        journal: Journal | None = None,
        task_id: Callable[[Any], str | None] | None = None,
        max_runs: int = 1024,
        instructions: bool = True,
        hide_open_tools: bool = False,
    ) -> None:
        super().__init__()
        if guard is not None and guard_factory is not None:
            raise PolicyError("pass guard or guard_factory, not both", field="guard_factory")
        check_adapter(
            registry=registry,
            guard=guard,
            flags={"instructions": instructions, "hide_open_tools": hide_open_tools},
            hooks={"guard_factory": guard_factory, "task_id": task_id},
        )
        if type(max_runs) is not int or max_runs <= 0:
            raise PolicyError("max_runs must be a positive integer", field="max_runs")
        self.registry = registry if registry is not None else Registry()
        self.tool_options: dict[str, ToolOptions] = {
            name: _checked(name, options) for name, options in (tools or {}).items()
        }
        self.budget = budget
        self.journal: Journal = journal if journal is not None else MemoryStore()
        self.max_runs = max_runs
        self.instructions = instructions
        self.hide_open_tools = hide_open_tools
        self._fixed = guard
        self._factory = guard_factory
        self._task_id = task_id
        self._guards: collections.OrderedDict[str, RunGuard] = collections.OrderedDict()
        self._breakers: dict[str, Breaker] = {}
        self._lock = threading.Lock()
        for name in self.tool_options:
            self.breaker_of(name)
        if guard is not None:
            self.registry.adopt_guard(guard)

    # -- runs -----------------------------------------------------------------------------

    def task_of(self, runtime: Any) -> str:
        """The task id of a LangGraph ``Runtime`` or ``ToolRuntime``.

        Raises:
            PolicyError: no task id could be found.
        """
        if self._fixed is not None:
            return self._fixed.task
        if self._task_id is not None:
            task = self._task_id(runtime)
            if task:
                return task
        context = getattr(runtime, "context", None)
        value = (
            context.get("task_id")
            if isinstance(context, Mapping)
            else getattr(context, "task_id", None)
        )
        if value:
            return str(value)
        info = getattr(runtime, "execution_info", None)
        for candidate in (getattr(info, "thread_id", None), getattr(info, "run_id", None)):
            if candidate:
                return str(candidate)
        raise PolicyError(
            "toolbreaker cannot tell which task this run is: pass context={'task_id': ...}, "
            "a configurable thread_id, task_id= or guard= to the middleware",
            field="task_id",
        )

    def guard_for(self, task: str) -> RunGuard:
        """The run guard of ``task``, created on first use."""
        if self._fixed is not None:
            return self._fixed
        with self._lock:
            guard = self._guards.get(task)
            if guard is not None:
                self._guards.move_to_end(task)
                return guard
        created = self._new_guard(task)
        with self._lock:
            guard = self._guards.setdefault(task, created)
            self._guards.move_to_end(task)
            while len(self._guards) > self.max_runs:
                self._guards.popitem(last=False)
        return guard

    def forget(self, task: str) -> None:
        """Drop the run guard of ``task``: its next run starts fresh (the journal stays)."""
        with self._lock:
            self._guards.pop(task, None)

    def stop_packet(self, task: str) -> StopPacket:
        """The stop packet of ``task`` as it is now (condition ``running`` if not stopped)."""
        return self.guard_for(task).stop_packet()

    async def astop_packet(self, task: str) -> StopPacket:
        """:meth:`stop_packet` for the event loop: a shared journal is read off it."""
        return await self.guard_for(task).astop_packet()

    def breaker_of(self, tool: str) -> Breaker:
        """The breaker that guards ``tool``, created in the registry on first use."""
        breaker = self._breakers.get(tool)
        if breaker is None:
            breaker = self._breakers.setdefault(tool, self._resolve(tool, ()))
        return breaker

    # -- LangChain hooks --------------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Guard one tool call: answer it locally or run it and settle the outcome."""
        guard, name, args, spec = self._prepare(request)
        step = guard.begin(
            name,
            args,
            call_id=call_id_of(request),
            tool_type="function",  # a LangChain tool runs in the application
            description=description_of(request),
        )
        pending = self._pending(request, step, spec)
        if not isinstance(pending, _Pending):
            return pending
        call = request.tool_call
        try:
            # One call of the model turn's sibling group: abandoned by policy when a
            # required dependency it needs opens (see RunGuard.run_step).
            result = guard.run_step(pending.step, lambda: handler(pending.request))
        except BaseException as exc:  # noqa: BLE001 - interrupts and cancellations re-raised
            return failed_reply(call, exc, pending.step.failed(settles_with(exc)))
        if isinstance(result, kit.CancelledByPolicy):
            return answer_message(call, result.answer)
        failure, value = _outcome(result)
        answer = pending.step.failed(failure) if failure else pending.step.succeeded(value)
        return tool_reply(call, result, value, answer)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """The async twin of :meth:`wrap_tool_call`; also cancels at the breaker's timeout.

        The run guard's and the breaker's store round trips are awaited: the loop never
        waits on them.
        """
        guard, name, args, spec = self._prepare(request)
        step = await guard.abegin(
            name,
            args,
            call_id=call_id_of(request),
            tool_type="function",  # a LangChain tool runs in the application
            description=description_of(request),
        )
        pending = self._pending(request, step, spec)
        if not isinstance(pending, _Pending):
            return pending
        call = request.tool_call
        try:
            # One call of the model turn's sibling group: the task running it is
            # cancelled by policy when a required dependency it needs opens.
            result = await guard.arun_step(
                pending.step, lambda: _within(handler(pending.request), pending.timeout)
            )
        except BaseException as exc:  # noqa: BLE001 - interrupts and cancellations re-raised
            return failed_reply(call, exc, await pending.step.afailed(settles_with(exc)))
        if isinstance(result, kit.CancelledByPolicy):
            return answer_message(call, result.answer)
        failure, value = _outcome(result)
        step = pending.step
        answer = await step.afailed(failure) if failure else await step.asucceeded(value)
        return tool_reply(call, result, value, answer)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Tell the model the tool-unavailable protocol; hide open tools if asked to.

        The response's usage (each ``AIMessage.usage_metadata``) goes into the run's
        budget, priced by the budget's ``prices``.
        """
        looks = {name: self._down(name) for name in self._hideable(request)}
        response = handler(self._hidden(self._instructed(request), looks))
        count_response(lambda: self._guard_of(request.runtime), request, response)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """The async twin of :meth:`wrap_model_call`: breakers are asked off the loop."""
        looks = {name: await self._adown(name) for name in self._hideable(request)}
        response = await handler(self._hidden(self._instructed(request), looks))
        count_response(lambda: self._guard_of(request.runtime), request, response)
        return response

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: ToolbreakerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """End the run, without calling the model, once the run guard has stopped it.

        Otherwise a model turn begins: the run guard's per-turn call count starts again.
        """
        guard = self._guard_of(runtime)
        if _goes_on(guard, new_turn=True):
            return None
        return stop_update(guard.stop_packet(), guard.turn_outcome())

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: ToolbreakerState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """The async twin of :meth:`before_model`: the stop packet is built off the loop."""
        guard = self._guard_of(runtime)
        if _goes_on(guard, new_turn=True):
            return None
        return stop_update(await guard.astop_packet(), guard.turn_outcome())

    # -- hand-built LangGraph -----------------------------------------------------------------

    def tool_node(self, tools: Sequence[BaseTool | Callable[..., Any]], **kwargs: Any) -> ToolNode:
        """A ``ToolNode`` whose every call goes through this middleware."""
        return ToolNode(
            tools,
            wrap_tool_call=self.wrap_tool_call,
            awrap_tool_call=self.awrap_tool_call,
            **kwargs,
        )

    def route(self, next_node: str, *, stop: str = END) -> Callable[[Any, Runtime[Any]], str]:
        """A conditional edge: ``stop`` once the run guard has stopped the run, else ``next_node``.

        Use it after the tools node: ``builder.add_conditional_edges("tools",
        mw.route("agent"), ["agent", END])``.
        """

        def router(state: Any, runtime: Runtime[Any]) -> str:
            task = self.task_of(runtime)
            return stop if self.guard_for(task).stopped is not None else next_node

        return router

    def stop_node(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any]:
        """A graph node that adds the stop message (packet in its ``additional_kwargs``).

        For a graph run with ``ainvoke``/``astream`` use :meth:`astop_node`: LangGraph runs
        a plain function node on the event loop.
        """
        guard = self.guard_for(self.task_of(runtime))
        return {"messages": [stop_message(guard.stop_packet(), guard.turn_outcome())]}

    async def astop_node(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any]:
        """:meth:`stop_node` for a graph run on an event loop: the packet is built off it."""
        guard = self.guard_for(self.task_of(runtime))
        return {"messages": [stop_message(await guard.astop_packet(), guard.turn_outcome())]}

    # -- internals ------------------------------------------------------------------------------

    def _new_guard(self, task: str) -> RunGuard:
        if self._factory is not None:
            guard = self._factory(task)
        else:
            guard = kit.RunGuard(
                task, budget=self.budget, journal=self.journal, clock=self.registry.clock
            )
        # What watches the registry (an event stream, a recorder) hears the task's stops.
        self.registry.adopt_guard(guard)
        return guard

    def _resolve(self, tool: str, resolving: tuple[str, ...]) -> Breaker:
        options = self.tool_options.get(tool, ToolOptions())
        given = options.get("breaker")
        if given is not None:
            return given
        # The tool's breaker options (_checked let only known ones in).
        creation = {k: v for k, v in options.items() if k in _BREAKER_OPTIONS}
        fallback = creation.get("fallback")
        if (
            isinstance(fallback, str)
            and fallback not in resolving
            and fallback not in self.registry.tool_names()
        ):
            # The registry refuses a fallback it does not know: bring it in first.
            self._breakers.setdefault(fallback, self._resolve(fallback, (*resolving, tool)))
        return tool_breaker(
            self.registry,
            tool,
            dependency=options.get("dependency"),
            operation=options.get("operation"),
            options=creation,
            where=f"tools.{tool}",
        )

    def _hideable(self, request: ModelRequest[Any]) -> list[str]:
        """The names of the request's tools to ask about (none unless hiding open tools)."""
        if not self.hide_open_tools:
            return []
        return [name for name in map(tool_name_of, request.tools) if name is not None]

    def _hidden(
        self, request: ModelRequest[Any], looks: Mapping[str, tuple[bool, int | None]]
    ) -> ModelRequest[Any]:
        """The request without the tools ``looks`` found down, with a line naming them."""
        kept: list[Any] = []
        hidden: dict[str, int | None] = {}
        for tool in request.tools:
            name = tool_name_of(tool)
            down, wait = looks.get(name, (False, None)) if name is not None else (False, None)
            if down and name is not None:
                hidden[name] = wait
            else:
                kept.append(tool)
        if not hidden:
            return request
        return with_system_line(request.override(tools=kept), hidden_tools_line(hidden))

    def _breaker_to_ask(self, tool: str) -> Breaker | None:
        try:
            return self.breaker_of(tool)
        except PolicyError:  # a strict registry without a row for it: never hidden
            return None

    def _down(self, tool: str) -> tuple[bool, int | None]:
        breaker = self._breaker_to_ask(tool)
        return (False, None) if breaker is None else breaker.hidden_for_ms()

    async def _adown(self, tool: str) -> tuple[bool, int | None]:
        breaker = self._breaker_to_ask(tool)
        return (False, None) if breaker is None else await breaker.ahidden_for_ms()

    def _instructed(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        line = system_prompt_line()
        current = request.system_message
        if not self.instructions or (current is not None and line in current.text):
            return request
        return with_system_line(request, line)

    def _guard_of(self, runtime: Any) -> RunGuard:
        return self.guard_for(self.task_of(runtime))

    def _prepare(
        self, request: ToolCallRequest
    ) -> tuple[RunGuard, str, dict[str, Any], GuardedTool]:
        """The run guard, tool name, arguments (without a model-made key) and tool spec."""
        call = request.tool_call
        name = call["name"]
        guard = self._guard_of(request.runtime)
        # Every configured tool is described before any call of the turn runs: which
        # dependencies are required must be known to the turn's sibling group at once.
        for configured in self.tool_options:
            self._describe(guard, configured, known=True)
        turn = turn_of(request)
        if turn is not None:
            # The model message that issued the call is the turn (one mark per turn, also
            # in a hand-built graph without before_model).
            guard.mark_turn(("langchain", turn))
        spec = self._describe(guard, name, known=request.tool is not None)
        # The key argument is the guard's: begin() drops a value the model made up.
        return guard, name, dict(call["args"]), spec

    def _describe(self, guard: RunGuard, name: str, *, known: bool) -> GuardedTool:
        """The guard's description of tool ``name``, registered on first use."""
        known = known or name in self.tool_options
        given: Mapping[str, Any] = self.tool_options.get(name, {})
        options = {k: v for k, v in given.items() if k in _GUARD_OPTIONS}
        # An unknown tool name (a model's invention) is counted by the run guard but gets
        # no breaker: the registry is not grown by whatever the model makes up.
        return guard.ensure_tool(name, breaker=self.breaker_of(name) if known else None, **options)

    def _pending(
        self, request: ToolCallRequest, step: Step, spec: GuardedTool
    ) -> _Pending | ToolMessage:
        """The begun step's answer as a message, or the request to run with its arguments."""
        call = request.tool_call
        if step.answer is not None:
            return answer_message(call, step.answer)
        # A tool that does not take the key as a parameter (it reads idempotency_key())
        # is not sent it: it could reach a server that rejects unknown arguments.
        run_args = step.args_for(() if request.tool is None else request.tool.args)
        if run_args != call["args"]:
            request = request.override(tool_call={**call, "args": run_args})
        timeout = spec.breaker.timeout if spec.breaker is not None else None
        return _Pending(step, request, timeout)


def _goes_on(guard: RunGuard, *, new_turn: bool) -> bool:
    """Whether the run goes on to its model call (a new turn marked if so)."""
    if guard.stopped is not None:
        return False
    if new_turn:
        guard.mark_turn()
    return True


def _checked(name: str, options: Mapping[str, Any]) -> ToolOptions:
    """A tool's options, checked now: unknown keys, types and values, named by field.

    The breaker options are checked as the middleware makes the tool's breaker (at once);
    the run guard's here, so a wrong one never reaches the model as a tool error.
    """
    where = f"tools.{name}"
    if not isinstance(options, Mapping):
        raise PolicyError(f"{where} must be a mapping of tool options", field=where)
    unknown = set(options) - _SELECT - _BREAKER_OPTIONS - _GUARD_OPTIONS
    if unknown:
        key = sorted(unknown)[0]
        raise PolicyError(f"unknown option {key!r} for tool {name!r}", field=f"{where}.{key}")
    if "breaker" in options and set(options) & (_BREAKER_OPTIONS | {"dependency", "operation"}):
        raise PolicyError(
            f"tool {name!r} has a ready breaker; breaker options would be ignored",
            field=f"{where}.breaker",
        )
    breaker = options.get("breaker")
    if breaker is not None and not isinstance(breaker, Breaker):
        raise PolicyError(
            f"{where}.breaker must be a Breaker, got a {type(breaker).__name__}",
            field=f"{where}.breaker",
        )
    guard_options(name, {k: v for k, v in options.items() if k in _GUARD_OPTIONS}, where)
    return cast(ToolOptions, dict(options))


async def _within(awaitable: Awaitable[Any], timeout: float | None) -> Any:
    return await (awaitable if timeout is None else asyncio.wait_for(awaitable, timeout))


def _outcome(result: ToolMessage | Command[Any]) -> tuple[ToolError | None, Any]:
    """How a handler's return settles: a failure LangChain worded, or the tool's value."""
    if isinstance(result, ToolMessage) and result.status == "error":
        # LangChain already turned the failure into text (invalid arguments, unknown tool).
        return ToolError(content_text(result.content)), None
    return None, tool_value(result)
