"""LlamaIndex adapter: breakers and a run guard around an agent workflow's function tools.

Install ``toolbreaker[llama-index]``, then, once per run::

    from toolbreaker.integrations.llama_index import protect, run_stop

    guarded = protect(agent, guard=RunGuard("ticket-4711"), registry=registry)
    result = await guarded.run(user_msg=prompt)        # an AgentOutput, as before
    stop = run_stop(result, guard)                     # None unless the guard stopped it

:func:`protect` takes a ``FunctionAgent``, a ``ReActAgent`` (any agent of
``llama_index.core.agent.workflow``) or an ``AgentWorkflow`` and returns a copy whose
function tools are :class:`ProtectedTool` objects; the agent and its tools are left as
they were. A protected tool is a ``FunctionTool`` with the same ``metadata`` object (name,
description, ``fn_schema``, ``return_direct``), so the model is offered exactly what it was
offered before. One call of it, ``acall`` (what the agent workflow's ``call_tool`` step
awaits) or ``call``, goes like this:

- **before**: :meth:`RunGuard.abegin` decides. A refusal (the dependency's breaker is open,
  the run is stopped, writes are blocked, a confirmed write answered from the journal)
  becomes the tool's ``ToolOutput``: the tool does not run and the model reads the guard's
  JSON result (tool unavailable, naming its fallback ...), ``is_error`` when it is not ok;
- **run**: the wrapped tool runs through :meth:`RunGuard.arun_step` within the breaker's
  timeout; a write receives its idempotency key in its key argument when its ``fn_schema``
  has one (a value the model sent there is dropped), and from :func:`toolbreaker.idempotency_key`
  inside the tool in any case;
- **after**: the outcome settles the step; a failure (the wrapped tool's exception, a
  timeout) reaches the model as the guard's result, never a traceback.

The agent workflow runs one model response's tool calls in parallel (its ``call_tool``
step has several workers); they are one sibling group of the run guard, whose turn starts
with each model request (``take_step``). When a required dependency (a tool declared
``required`` on the guard) opens while they run, the calls in flight that need it are
cancelled by policy (the task toolbreaker runs the tool in, never the workflow's) and the
model reads a cancelled-by-policy answer (a write that may have started: unknown outcome,
journaled, never replayed); independent calls finish with their results.

When the run guard stops the run (budget, repeated action, loop, required dependency
down, an operator), the protected agent's next ``take_step`` asks the model nothing: it
returns an ``AgentOutput`` without tool calls, so the workflow ends through its own path
(``finalize`` and its ``StopEvent``) with that output as the run's result. Its
``response`` says why in words and carries the stop packet (``StopPacket.to_dict()``) under
``additional_kwargs[STOP_KEY]`` and the last turn's outcome under ``[TURN_KEY]``;
:func:`run_stop` (or :func:`arun_stop` on the loop) gives the packet itself.

Every model response's token usage is read where LlamaIndex reports it (the LLM's
``LLMChatEndEvent``: ``ChatResponse.additional_kwargs`` or ``raw`` usage, with the model
name) by :func:`llm_usage`, and priced into the run's cost.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.errors import PolicyError, ToolReportedError
from toolbreaker.integrations import count_usage
from toolbreaker.integrations._described import check_adapter, tool_breaker
from toolbreaker.integrations._kit import (
    SYSTEM_PROMPT_LINE,
    Breaker,
    Registry,
    Step,
    StopPacket,
    hook_failed,
)

require("llama_index.core", "llama-index")

from llama_index.core.agent.workflow import (  # noqa: E402 - after the check naming the extra
    AgentOutput,
    AgentWorkflow,
    BaseWorkflowAgent,
)
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    MessageRole,
)

# LlamaIndex re-exports the dispatcher without listing it as public (mypy's strict view).
from llama_index.core.instrumentation import (  # type: ignore[attr-defined]  # noqa: E402
    get_dispatcher,
)
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent  # noqa: E402
from llama_index.core.tools import FunctionTool, ToolOutput  # noqa: E402

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        GuardedTool,
        RunGuard,
        SiblingOutcome,
    )


__all__ = [
    "arun_stop",
    "protect",
    "run_stop",
]

#: The ``additional_kwargs`` key of a stopped run's final message that holds the stop packet.
STOP_KEY: Final = "toolbreaker_stop"
#: The ``additional_kwargs`` key that holds the last turn's outcome (``SiblingOutcome``).
TURN_KEY: Final = "toolbreaker_turn"

W = TypeVar("W", BaseWorkflowAgent, AgentWorkflow)

#: Where the LLM responses of the model request running in this context are collected.
_RESPONSES: contextvars.ContextVar[list[ChatResponse] | None] = contextvars.ContextVar(
    "toolbreaker_llama_index_responses", default=None
)


# -- the stop -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RunStop:
    """A run the guard stopped: the packet, the last turn and the workflow's result.

    Attributes:
        packet: the guard's stop packet (condition, confirmed work, next safe action).
        output: the run's final ``AgentOutput`` (its message says why it stopped).
        turn: the last model turn's calls as a bounded partial outcome, or ``None``.
    """

    packet: StopPacket
    output: AgentOutput
    turn: SiblingOutcome | None = None


def run_stop(result: Any, guard: RunGuard) -> RunStop | None:
    """The stop packet of a run the guard stopped, with the workflow's result.

    Args:
        result: what awaiting the workflow handler returned (an ``AgentOutput``).
        guard: the run's guard.

    Returns:
        ``None`` when the guard did not stop the run (it ended on its own).
    """
    output = _stop_output(result, guard)
    if output is None:
        return None
    return RunStop(guard.stop_packet(), output, guard.turn_outcome())


async def arun_stop(result: Any, guard: RunGuard) -> RunStop | None:
    """:func:`run_stop` for the event loop: the packet's journal read is made off it."""
    output = _stop_output(result, guard)
    if output is None:
        return None
    return RunStop(await guard.astop_packet(), output, guard.turn_outcome())


def _stop_output(result: Any, guard: RunGuard) -> AgentOutput | None:
    if guard.stopped is None or not isinstance(result, AgentOutput):
        return None
    return result if STOP_KEY in result.response.additional_kwargs else None


def _stopped_output(agent: BaseWorkflowAgent, packet: StopPacket, guard: RunGuard) -> AgentOutput:
    """The output that ends a stopped run: no tool calls, the reason, the packet."""
    data = packet.to_dict()
    turn = guard.turn_outcome()
    text = packet.final_text(turn)
    kwargs: dict[str, Any] = {STOP_KEY: data}
    if turn is not None and turn.branches:
        kwargs[TURN_KEY] = turn.to_result()
    message = ChatMessage(role=MessageRole.ASSISTANT, content=text, additional_kwargs=kwargs)
    return AgentOutput(
        response=message, tool_calls=[], raw={STOP_KEY: data}, current_agent_name=agent.name
    )


# -- protecting agents ------------------------------------------------------------------------


def protect(
    workflow: W,
    *,
    guard: RunGuard,
    registry: Registry | None = None,
    breakers: Mapping[str, Breaker] | None = None,
    instructions: bool = True,
) -> W:
    """A copy of an agent (or of an ``AgentWorkflow`` and its agents) guarded by toolbreaker.

    Every ``FunctionTool`` of the agent becomes a :class:`ProtectedTool` (see
    :func:`protect_tool`); other tools (a query engine tool, the workflow's handoff tool)
    are left as they are. The copy's ``take_step`` ends the run once the guard has stopped
    it and feeds each model response's usage to the guard. A run guard belongs to one run:
    protect the agent once per run (the copy is cheap; breakers are shared through the
    registry). Declare write tools on the guard first (``guard.ensure_tool(name,
    risk="reversible_write", ...)``).

    Args:
        workflow: a ``FunctionAgent``, ``ReActAgent`` (any ``BaseWorkflowAgent``) or an
            ``AgentWorkflow``.
        guard: the run's guard: budgets, loop detection, idempotent writes, stops.
        registry: where breakers are found by tool name (sheet rows and live breakers).
        breakers: breakers by tool name, taking precedence over the other sources.
        instructions: append :func:`toolbreaker.system_prompt_line` to each agent's
            ``system_prompt`` (unless it is there already), so the model knows what a
            tool-unavailable result means.

    Returns:
        The protected copy, of the same type.

    Raises:
        PolicyError: the workflow is neither an agent nor an ``AgentWorkflow``, or one of
            its tools is protected already.
    """
    check_adapter(
        registry=registry, guard=guard, breakers=breakers, flags={"instructions": instructions}
    )
    if guard is None:
        raise PolicyError("protect() needs the run's RunGuard", field="guard")
    _listen_for_usage()
    if isinstance(workflow, BaseWorkflowAgent):
        return _protected_agent(workflow, guard, registry, breakers or {}, instructions)
    if isinstance(workflow, AgentWorkflow):
        protected = copy.copy(workflow)
        protected.agents = {
            name: _protected_agent(agent, guard, registry, breakers or {}, instructions)
            for name, agent in workflow.agents.items()
        }
        return protected
    raise PolicyError(
        f"protect() takes a LlamaIndex agent or AgentWorkflow, not {type(workflow).__name__}",
        field="workflow",
    )


def protect_tool(
    tool: FunctionTool,
    *,
    guard: RunGuard,
    registry: Registry | None = None,
    breaker: Breaker | None = None,
) -> ProtectedTool:
    """``tool`` as a :class:`ProtectedTool` of ``guard``'s run.

    The tool's breaker is ``breaker``, else the one its declaration on the guard names,
    else ``registry.for_tool(name)``, else the registry's default breaker for its name
    (``registry.get(name, tool=name)``, as the other adapters do); without a registry a
    tool the guard names no breaker for is guarded by the run guard only.

    Raises:
        PolicyError: the tool is protected already.
    """
    check_adapter(
        registry=registry, guard=guard, breakers=None if breaker is None else {"": breaker}
    )
    if isinstance(tool, ProtectedTool):
        raise PolicyError(f"tool {tool.metadata.name!r} is already protected", field="tool")
    name = tool.metadata.get_name()
    spec = guard.ensure_tool(name)
    if breaker is None and spec.breaker is None and registry is not None:
        breaker = _breaker_for(name, registry)
    if breaker is not None and breaker is not spec.breaker:
        spec = guard.add_tool(dataclasses.replace(spec, breaker=breaker))
    return ProtectedTool(tool, guard, spec)


def _breaker_for(name: str, registry: Registry) -> Breaker:
    return tool_breaker(registry, name, where=f"tools.{name}")


def _protected_agent(
    agent: BaseWorkflowAgent,
    guard: RunGuard,
    registry: Registry | None,
    breakers: Mapping[str, Breaker],
    instructions: bool,
) -> BaseWorkflowAgent:
    tools: list[Any] = []
    for tool in agent.tools or ():
        if isinstance(tool, FunctionTool):
            name = tool.metadata.name
            given = breakers.get(name) if name is not None else None
            tools.append(protect_tool(tool, guard=guard, registry=registry, breaker=given))
        else:
            tools.append(tool)
    update: dict[str, Any] = {"tools": tools}
    prompt = agent.system_prompt or ""
    if instructions and SYSTEM_PROMPT_LINE not in prompt:
        update["system_prompt"] = (
            f"{prompt}\n\n{SYSTEM_PROMPT_LINE}" if prompt else SYSTEM_PROMPT_LINE
        )
    protected = agent.model_copy(update=update)
    inner = protected.take_step
    # The instance's own take_step: the workflow's run_agent_step (and AgentWorkflow's)
    # calls it through the instance, so the agent's class and its steps stay as they are.
    object.__setattr__(protected, "take_step", _guarded_step(protected, inner, guard))
    return protected


def _guarded_step(
    agent: BaseWorkflowAgent, inner: Callable[..., Awaitable[AgentOutput]], guard: RunGuard
) -> Callable[..., Awaitable[AgentOutput]]:
    async def take_step(ctx: Any, llm_input: Any, tools: Any, memory: Any) -> AgentOutput:
        if guard.stopped is not None:
            # Every call of the last turn has its answer: end the run without asking the
            # model, through the workflow's own path (an output without tool calls).
            return _stopped_output(agent, await guard.astop_packet(), guard)
        guard.mark_turn()  # one model response is one turn: its calls are one group
        responses: list[ChatResponse] = []
        token = _RESPONSES.set(responses)
        try:
            output = await inner(ctx, llm_input, tools, memory)
        finally:
            _RESPONSES.reset(token)
        _spend(guard, agent, responses)
        if guard.stopped is not None and not output.tool_calls and not output.retry_messages:
            # The response's own usage stopped the run (max_cost): a stopped run never
            # ends as a completion. Its calls, had it made any, get the guard's answers
            # first (the history stays whole) and the next take_step ends the run.
            return _stopped_output(agent, await guard.astop_packet(), guard)
        return output

    return take_step


# -- model usage ---------------------------------------------------------------------------------


def llm_usage(
    response: ChatResponse, model: str | None = None
) -> tuple[str | None, int, int] | None:
    """``(model, input_tokens, output_tokens)`` of one LLM response, or ``None`` if unknown.

    Reads what LlamaIndex's LLM integrations report: ``additional_kwargs`` token counts
    (``prompt_tokens`` / ``completion_tokens``, or ``input_tokens`` / ``output_tokens``),
    else the ``usage`` of ``raw`` (a mapping or an object, as the provider's SDK returns
    it). The model name is ``raw``'s ``model`` when it has one, else ``model`` (``None``
    when neither names it: :func:`count_usage` counts it as ``"unknown"``).

    Args:
        response: the ``ChatResponse`` (the last one of a stream carries the usage).
        model: the LLM's model name (``llm.metadata.model_name``), the fallback.
    """
    raw = response.raw
    counts = _tokens(response.additional_kwargs) or _tokens(_field(raw, "usage"))
    if counts is None:
        return None
    name = _field(raw, "model")
    name = name if isinstance(name, str) and name else model
    return name or None, counts[0], counts[1]


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _tokens(usage: Any) -> tuple[int, int] | None:
    if usage is None:
        return None
    for given, made in (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens")):
        sent, received = _field(usage, given), _field(usage, made)
        if isinstance(sent, int) or isinstance(received, int):
            return (
                sent if isinstance(sent, int) else 0,
                received if isinstance(received, int) else 0,
            )
    return None


def _spend(guard: RunGuard, agent: BaseWorkflowAgent, responses: Sequence[ChatResponse]) -> None:
    """Count each of the model request's responses (:func:`count_usage`).

    A usage object the adapter cannot read is logged and never changes the model's answer.
    A usage that stops the run (an unpriced model under a ``max_cost``) lets this turn's
    calls be answered by the guard; the next ``take_step`` ends the run.
    """
    for response in responses:
        try:
            found = llm_usage(response, agent.llm.metadata.model_name)
        except Exception as exc:  # noqa: BLE001 - the model's answer stands whatever usage says
            hook_failed("reading a LlamaIndex response's usage failed; the response stands", exc)
            continue
        if found is not None:
            count_usage(guard, *found)


class _Responses(BaseEventHandler):
    """Hands each LLM response to the protected model request running in its context."""

    @classmethod
    def class_name(cls) -> str:
        return "ToolbreakerResponses"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if not isinstance(event, LLMChatEndEvent) or event.response is None:
            return
        sink = _RESPONSES.get()
        # A decorated chat method calling another reports one response twice: count it once.
        if sink is not None and not any(r is event.response for r in sink):
            sink.append(event.response)


_LISTENING: list[_Responses] = []
_LISTENING_LOCK = threading.Lock()


def _listen_for_usage() -> None:
    """Listen to LlamaIndex's LLM events, once per process (events of other runs pass by)."""
    with _LISTENING_LOCK:
        if not _LISTENING:
            handler = _Responses()
            get_dispatcher().add_event_handler(handler)
            _LISTENING.append(handler)


# -- the protected tool -------------------------------------------------------------------------


class ProtectedTool(FunctionTool):
    """A ``FunctionTool`` whose every call goes through a run guard (see the module).

    Its ``metadata`` is the wrapped tool's own object; it takes the workflow ``Context``
    when the wrapped tool does and passes it on. ``fn`` and ``async_fn`` are guarded too.

    Attributes:
        tool: the wrapped tool.
        guard: the run guard.
        spec: the guard's description of the tool (risk, breaker, key argument ...).
    """

    def __init__(self, tool: FunctionTool, guard: RunGuard, spec: GuardedTool) -> None:
        super().__init__(fn=self._run_sync, async_fn=self._run_async, metadata=tool.metadata)
        self.tool = tool
        self.guard = guard
        self.spec = spec
        self.requires_context = tool.requires_context
        self.ctx_param_name = tool.ctx_param_name
        schema = tool.metadata.fn_schema
        # The tool's parameters: a write's key is sent only when they take it.
        self._params = frozenset(getattr(schema, "model_fields", {}) if schema is not None else {})
        # A sync function whose async side is LlamaIndex's own executor wrapper.
        wrapper = getattr(tool.async_fn, "__qualname__", "")
        self._sync_only = not inspect.iscoroutinefunction(tool.real_fn) and wrapper.startswith(
            "sync_to_async."
        )

    # FunctionTool's call/acall wrap a raw output; ours answer with a whole ToolOutput.

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Guard one call from sync code: answer it, or run the tool and settle it."""
        if args:
            kwargs = {**kwargs, **_positional(self, args)}
        given, passed = self._split(kwargs)
        step = self.guard.begin(
            self.metadata.get_name(),
            given,
            tool_type="function",  # a FunctionTool: the application runs it
            description=self.metadata.description or None,
        )
        given = step.args_for((), given)  # as the guard took them: a made-up key dropped
        if step.answer is not None:
            return self._output(step.answer, given)
        run_kwargs = {**step.args_for(self._params, given), **passed}
        try:
            ran = self.guard.run_step(step, lambda: self.tool.call(**run_kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised by failed() if it must be
            return self._output(step.failed(exc), given, exc)
        return self._settled(step, ran, given, step.succeeded)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Guard one call on the event loop; the store round trips are awaited."""
        if args:
            kwargs = {**kwargs, **_positional(self, args)}
        given, passed = self._split(kwargs)
        step = await self.guard.abegin(
            self.metadata.get_name(),
            given,
            tool_type="function",  # a FunctionTool: the application runs it
            description=self.metadata.description or None,
        )
        given = step.args_for((), given)  # as the guard took them: a made-up key dropped
        if step.answer is not None:
            return self._output(step.answer, given)
        run_kwargs = {**step.args_for(self._params, given), **passed}
        deadline = step.deadline
        try:
            # One call of the model turn's sibling group: the task running it is
            # cancelled by policy when a required dependency it needs opens.
            ran = await self.guard.arun_step(
                step, lambda: _within(self._acall_inner(run_kwargs), deadline)
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised by afailed() if it must be
            return self._output(await step.afailed(exc), given, exc)
        if isinstance(ran, kit.CancelledByPolicy):
            return self._output(ran.answer, given)
        if ran.is_error:
            return self._output(await step.afailed(ToolError(ran.content)), given, ran.exception)
        seen = await step.asucceeded(ran.raw_output)
        return ran if seen is ran.raw_output else self._output(seen, given)

    def _acall_inner(self, kwargs: dict[str, Any]) -> Awaitable[ToolOutput]:
        """The wrapped tool's ``acall``; a sync-only tool's ``call`` in a worker thread.

        LlamaIndex runs a sync function in its executor, before 0.14.22 without this
        context: run here with it, the tool's :func:`toolbreaker.idempotency_key` is the guard's.
        """
        if self._sync_only:
            return asyncio.to_thread(self.tool.call, **kwargs)
        return self.tool.acall(**kwargs)

    def _settled(
        self, step: Step, ran: Any, given: dict[str, Any], succeeded: Callable[[Any], Any]
    ) -> ToolOutput:
        if isinstance(ran, kit.CancelledByPolicy):
            return self._output(ran.answer, given)
        if ran.is_error:
            return self._output(step.failed(ToolError(ran.content)), given, ran.exception)
        seen = succeeded(ran.raw_output)
        return ran if seen is ran.raw_output else self._output(seen, given)

    def _run_sync(self, **kwargs: Any) -> Any:
        return self.call(**kwargs).raw_output

    async def _run_async(self, **kwargs: Any) -> Any:
        return (await self.acall(**kwargs)).raw_output

    def _split(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The model's arguments, and the workflow ``Context``."""
        passed: dict[str, Any] = {}
        given = dict(kwargs)
        if self.ctx_param_name is not None and self.ctx_param_name in given:
            passed[self.ctx_param_name] = given.pop(self.ctx_param_name)
        return given, passed

    def _output(
        self, answer: Any, given: Mapping[str, Any], exc: BaseException | None = None
    ) -> ToolOutput:
        """A guard answer as the ``ToolOutput`` the model reads."""
        failed = isinstance(answer, Mapping) and answer.get("ok") is False
        return ToolOutput(
            content=answer if isinstance(answer, str) else json.dumps(answer, default=str),
            tool_name=self.metadata.get_name(),
            raw_input={"args": (), "kwargs": dict(given)},
            raw_output=answer,
            is_error=failed,
            exception=exc if isinstance(exc, Exception) else None,
        )


class ToolError(ToolReportedError):
    """A wrapped tool answered with an error ``ToolOutput`` instead of raising (a callback).

    The output is all there is of the failure: the default classifier ignores it, so it
    never counts against the dependency.
    """


def _positional(tool: ProtectedTool, args: tuple[Any, ...]) -> dict[str, Any]:
    """Positional arguments by the schema's field order (the workflow passes keywords)."""
    schema = tool.metadata.fn_schema
    names = list(getattr(schema, "model_fields", {})) if schema is not None else []
    if len(args) > len(names):
        raise PolicyError(
            f"tool {tool.metadata.name!r} got {len(args)} positional arguments; pass keywords",
            field=f"{tool.metadata.name}.args",
        )
    return dict(zip(names, args, strict=False))


async def _within(awaitable: Awaitable[ToolOutput], timeout: float | None) -> ToolOutput:
    if timeout is None:
        return await awaitable
    return await asyncio.wait_for(awaitable, timeout)
