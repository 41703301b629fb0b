"""CrewAI adapter: CrewAI's own tool and LLM hooks put a run guard around a crew's calls.

Install with ``pip install '.[crewai]'``, then::

    from toolbreaker.integrations.crewai import protect, run_stop

    guard = RunGuard("ticket-4711", budget=Budget(max_tool_calls=20), journal=store)
    with protect(crew, guard=guard, registry=registry):
        try:
            result = crew.kickoff()
        except Exception as exc:
            stop = run_stop(exc, guard)       # None when the guard did not stop the run
            if stop is None:
                raise
            print(stop.packet.to_json())

:func:`protect` binds the crew (or an agent) to the run guard and registers four global
CrewAI hooks (``crewai.hooks``), once for the process, that act only on calls made by bound
agents. The crew, its agents and their tools are left as they are: every ``BaseTool`` keeps
its name, description and ``args_schema``. One call of a tool goes like this (CrewAI 1.6):

- **before** (``before_tool_call``): the run guard decides (:meth:`RunGuard.begin`) on
  the model's arguments. A refusal (the dependency's breaker is open, the run stopped, a
  write's outcome unknown) never runs the tool: the model reads the guard's JSON result
  (tool unavailable, naming its fallback ...) as the tool's observation. A permitted call
  runs through toolbreaker (below);
- **run**: the call's ``CrewStructuredTool`` (CrewAI's per-execution view of the tool) runs
  the tool's function with the guard's arguments: a write's idempotency key fills the
  tool's key argument when its ``args_schema`` has one, before CrewAI checks the
  arguments (its ``@tool`` makes every parameter required; a value the model made up is
  dropped), and :func:`toolbreaker.idempotency_key` returns it inside the tool either
  way. The tool's exception settles the call (:meth:`Step.failed`) and the model reads
  the guard's result (``tool_unavailable`` when it opened the breaker, ``{"ok": false,
  ...}`` otherwise), so
  CrewAI's own retry of a raising tool never calls a failing dependency again;
- **after** (``after_tool_call``): the observation is the guard's answer whenever there
  is one; a permitted call that CrewAI answered itself without running the tool (its
  tool cache, its repeated-input check, a usage limit, arguments its schema rejects) is
  settled as never sent, so the breaker counts nothing. A call the guard answered is not
  remembered as the agent's last tool call, as a tool that raised is not: CrewAI's
  repeated-input check refuses only the repeat of a call that returned its own result,
  so the model may retry a failure it was told is retryable.

CrewAI 1.6 runs one tool call per model response (its ReAct loop), so each model request
is one turn of the run guard (``before_llm_call`` marks it; ``Budget.max_calls_per_turn``
counts per response) and a turn never has siblings. When the guard stops the run, the
next ``before_llm_call`` blocks the model request: CrewAI ends the agent's task with its
own ``ValueError`` ("LLM call blocked by before_llm_call hook"; the agent's
``max_retry_limit`` retries are blocked the same way), ``kickoff()`` raises it and
:func:`run_stop` pairs it with the stop packet. The model is never asked again.

``after_llm_call`` feeds each model response's usage to :meth:`RunGuard.add_usage`: the
tokens the LLM object counted during that call (:func:`llm_usage`), with its model name,
so the budget's ``max_cost`` and the stop packet's counters include the model.

``kickoff_async()`` runs ``kickoff()`` in a worker thread in CrewAI 1.6, so the hooks (and
the guard's store round trips) never run on the event loop; :func:`arun_stop` reads the
stop packet off the loop. CrewAI's tools have no deadline of their own: a tool passes its
breaker's timeout to its client (the registry's ``enforce="cooperative"``). ``agent.kickoff()``
(CrewAI's ``LiteAgent``) runs the tool hooks but not the LLM hooks in CrewAI 1.6: its tool
calls are guarded, but a stop does not end it; kick off a crew for stops, turns and usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.integrations._described import check_adapter

require("crewai", "crewai")

from crewai import Agent, Crew  # noqa: E402 - after the check that names the extra
from crewai.hooks import (  # noqa: E402
    LLMCallHookContext,
    ToolCallHookContext,
    register_after_llm_call_hook,
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_llm_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)

from toolbreaker.errors import NotSent, PolicyError  # noqa: E402
from toolbreaker.integrations._kit import (  # noqa: E402
    Registry,
    Step,
    StopPacket,
    ToolType,
)

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

#: The guarded call between its before and after hooks, in the thread CrewAI runs it in.
_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "toolbreaker_crewai_call", default=None
)
_NOT_RUN: Final = (
    "CrewAI answered the call without running the tool (its tool cache, its repeated-input "
    "check, a usage limit or arguments its schema rejected)"
)


@dataclass(frozen=True, slots=True)
class RunStop:
    """A crew run the guard stopped.

    Attributes:
        packet: the guard's stop packet (condition, confirmed work, next safe action).
        error: what ``kickoff()`` raised: CrewAI's error for the blocked model request.
        turn: the last model turn's calls and how each ended (``None`` before any turn).
    """

    packet: StopPacket
    error: BaseException
    turn: SiblingOutcome | None = None


def run_stop(exc: BaseException, guard: RunGuard) -> RunStop | None:
    """The stop packet of a run that ended with ``exc``, if the guard stopped it.

    Args:
        exc: what ``crew.kickoff()`` (or ``agent.kickoff()``) raised.
        guard: the run's guard.

    Returns:
        ``None`` when the guard did not stop the run: re-raise ``exc`` then.
    """
    if guard.stopped is None:
        return None
    return RunStop(guard.stop_packet(), exc, guard.turn_outcome())


async def arun_stop(exc: BaseException, guard: RunGuard) -> RunStop | None:
    """:func:`run_stop` after ``await crew.kickoff_async()``: the journal is read off the loop."""
    if guard.stopped is None:
        return None
    return RunStop(await guard.astop_packet(), exc, guard.turn_outcome())


def llm_usage(before: Any, after: Any) -> tuple[int, int]:
    """The input and output tokens an LLM counted between two of its usage summaries.

    ``before`` and ``after`` are ``BaseLLM.get_token_usage_summary()`` results (CrewAI's
    ``UsageMetrics``) taken around one model call; ``(0, 0)`` when it counted none.
    """
    return (
        max(0, int(after.prompt_tokens) - int(before.prompt_tokens)),
        max(0, int(after.completion_tokens) - int(before.completion_tokens)),
    )


@dataclass(eq=False)
class _Binding:
    """What one :func:`protect` call bound: a run guard and where breakers come from."""

    guard: RunGuard
    registry: Registry | None
    #: Each executor's LLM usage summary before its model call in flight.
    usage: dict[int, Any] = dataclasses.field(default_factory=dict)

    def spec(self, name: str) -> GuardedTool:
        """The guard's description of tool ``name``, its breaker found on first use."""
        guard = self.guard
        spec = guard.ensure_tool(name)
        if spec.breaker is None and self.registry is not None:
            # A tool the sheet does not describe has no breaker: the run's budgets apply.
            with contextlib.suppress(KeyError):
                breaker = self.registry.for_tool(name)
                spec = guard.add_tool(dataclasses.replace(spec, breaker=breaker))
        return spec


@dataclass(eq=False)
class _Call:
    """One guarded call between its before and after hooks."""

    binding: _Binding
    spec: GuardedTool
    step: Step
    tool: object  # the CrewStructuredTool the call runs through
    #: The agent's ``ToolsHandler`` and the call it remembered as last used before this one.
    handler: Any = None
    last_used: Any = None
    token: contextvars.Token[_Call | None] | None = None
    ran: bool = False
    #: What the model reads instead of CrewAI's observation, if anything.
    answer: Any = None

    def forget(self) -> None:
        """The guard answered instead of the tool: CrewAI does not remember the call.

        CrewAI remembers a call that returned as the last one used and refuses the same
        call straight after it (its repeated-input check); a tool that raised is not
        remembered, so the model may try it again. The guard's answer (a failure it may
        retry, a refusal) is what CrewAI would not have remembered, so neither is it.
        """
        if self.handler is not None and hasattr(self.handler, "last_used_tool"):
            self.handler.last_used_tool = self.last_used


class _Runner:
    """A ``CrewStructuredTool.func`` that runs the guarded call of this context."""

    def __init__(self, tool: object, inner: Callable[..., Any]) -> None:
        self.tool = tool
        self.inner = inner
        self.cache: Callable[..., Any] | None = None

    def should_cache(self, args: Any = None, result: Any = None) -> bool:
        """CrewAI's ``cache_function``: a guard's answer is never cached as the result."""
        call = _CALL.get()
        if call is not None and call.tool is self.tool and call.answer is not None:
            return False
        return True if self.cache is None else bool(self.cache(args, result))

    def __call__(self, **kwargs: Any) -> Any:
        call = _CALL.get()
        if call is None or call.tool is not self.tool or call.ran:
            # Not a call the hooks began (an unbound agent, a fault in a hook, a direct
            # invocation): the tool runs as CrewAI asked, untouched.
            return _resolved(self.inner(**kwargs))
        call.ran = True
        step = call.step
        if step.answer is not None:
            call.answer = step.answer
            return _text(step.answer)
        # The tool takes what CrewAI passes it (its checked arguments).
        kwargs = step.args_for(kwargs, kwargs)
        try:
            ran = call.binding.guard.run_step(step, lambda: _resolved(self.inner(**kwargs)))
        except BaseException as exc:  # noqa: BLE001 - interrupts are recorded, then re-raised
            call.answer = step.failed(exc)
            return _text(call.answer)
        if isinstance(ran, kit.CancelledByPolicy):
            call.answer = ran.answer
            return _text(ran.answer)
        seen = step.succeeded(ran)
        if seen is ran:
            return ran
        call.answer = seen  # a write whose verification failed
        return _text(seen)


class _Hooks:
    """The four global hooks and the table of bound crews and agents they serve."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bound: dict[int, _Binding] = {}
        self._registered = False

    def bind(self, owners: Iterable[object], binding: _Binding) -> Callable[[], None]:
        """Serve the calls of ``owners`` (crews, agents) with ``binding``; the undo."""
        keys = [id(owner) for owner in owners]
        with self._lock:
            taken = [k for k in keys if k in self._bound]
            if taken:
                raise PolicyError(
                    "this crew or agent is already protected: close its protection first",
                    field="crew",
                )
            for key in keys:
                self._bound[key] = binding
            if not self._registered:
                register_before_llm_call_hook(self.before_llm_call)
                register_after_llm_call_hook(self.after_llm_call)
                register_before_tool_call_hook(self.before_tool_call)
                register_after_tool_call_hook(self.after_tool_call)
                self._registered = True

        def unbind() -> None:
            with self._lock:
                for key in keys:
                    if self._bound.get(key) is binding:
                        del self._bound[key]
                if not self._bound and self._registered:
                    unregister_before_llm_call_hook(self.before_llm_call)
                    unregister_after_llm_call_hook(self.after_llm_call)
                    unregister_before_tool_call_hook(self.before_tool_call)
                    unregister_after_tool_call_hook(self.after_tool_call)
                    self._registered = False

        return unbind

    def _binding(self, agent: object, crew: object) -> _Binding | None:
        bound = self._bound
        return bound.get(id(agent)) or (bound.get(id(crew)) if crew is not None else None)

    # -- model requests -----------------------------------------------------------------

    def before_llm_call(self, context: LLMCallHookContext) -> bool | None:
        """Block the model request of a stopped run; else a model turn begins."""
        binding = self._binding(context.agent, context.crew)
        if binding is None:
            return None
        guard = binding.guard
        if guard.stopped is not None:
            return False  # CrewAI raises: the agent's task ends without asking the model
        guard.mark_turn()  # one tool call per response: each request is a turn of its own
        summary = _summary(context.llm)
        if summary is not None:
            binding.usage[id(context.executor)] = summary
        return None

    def after_llm_call(self, context: LLMCallHookContext) -> str | None:
        """Feed the response's usage to the run guard."""
        binding = self._binding(context.agent, context.crew)
        if binding is None:
            return None
        before = binding.usage.pop(id(context.executor), None)
        after = _summary(context.llm)
        if before is not None and after is not None:
            input_tokens, output_tokens = llm_usage(before, after)
            if input_tokens or output_tokens:
                model = str(getattr(context.llm, "model", "") or "unknown")
                binding.guard.add_usage(
                    model, input_tokens=input_tokens, output_tokens=output_tokens
                )
        return None

    # -- tool calls ---------------------------------------------------------------------

    def before_tool_call(self, context: ToolCallHookContext) -> bool | None:
        """Ask the run guard for the call; the call runs (or is answered) through it."""
        binding = self._binding(context.agent, context.crew)
        if binding is None:
            return None
        tool = context.tool
        spec = binding.spec(tool.name)
        # The key argument is the guard's: begin drops one the model made up.
        given = context.tool_input or {}
        step = binding.guard.begin(
            tool.name, given, tool_type=_tool_type(tool), description=_description(tool)
        )
        # Before CrewAI checks the arguments: its ``@tool`` makes every parameter
        # required, the key argument too, which the model rightly leaves out. In place
        # (the hook's dict is the call's arguments), and only added to: a key the model
        # sent is dropped as the tool runs (_Runner).
        run_args = step.args_for(_fields(tool), given)
        if context.tool_input is not None:
            context.tool_input.update(run_args)
        if not isinstance(tool.func, _Runner):
            runner = _Runner(tool, tool.func)
            tool.func = runner
            # CrewAI caches a tool's observation by its arguments: never the guard's answer.
            original = getattr(getattr(tool, "_original_tool", None), "cache_function", None)
            runner.cache = original
            tool.cache_function = runner.should_cache  # type: ignore[attr-defined]
        handler = getattr(context.agent, "tools_handler", None)
        call = _Call(binding, spec, step, tool, handler, getattr(handler, "last_used_tool", None))
        call.token = _CALL.set(call)
        return None  # a refusal is answered by the runner: CrewAI's "blocked" is not ours

    def after_tool_call(self, context: ToolCallHookContext) -> str | None:
        """The guard's answer as the observation; settle a call CrewAI never ran."""
        call = _CALL.get()
        if call is None or call.tool is not context.tool:
            return None
        if call.token is not None:
            with contextlib.suppress(ValueError):  # reset in another context: leave it
                _CALL.reset(call.token)
        step = call.step
        answer = step.answer if step.answer is not None else call.answer
        if answer is not None:
            call.forget()
            return _text(answer)
        if not call.ran and not step.settled:
            step.failed(NotSent(_NOT_RUN))  # the breaker counts nothing; CrewAI's text stands
        return None


_HOOKS: Final = _Hooks()


class Protection:
    """A crew (or agents) bound to a run guard; close it (or leave its ``with``) to unbind.

    Made by :func:`protect`. While it is open, CrewAI's global hooks guard every tool call
    and model request of the bound agents; other crews in the process are not touched.
    """

    def __init__(self, unbind: Callable[[], None], guard: RunGuard) -> None:
        self._unbind = unbind
        self.guard = guard

    def close(self) -> None:
        """Unbind (the hooks leave CrewAI when no crew is protected any more)."""
        self._unbind()

    def __enter__(self) -> Protection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def protect(
    target: Crew | Agent | Iterable[Agent],
    *,
    guard: RunGuard,
    registry: Registry | None = None,
) -> Protection:
    """Guard every tool call and model request of a crew's agents with ``guard``.

    A tool's breaker is the one its declaration on the guard names (``guard.add_tool`` /
    ``guard.ensure_tool``, declare writes there first), else ``registry.for_tool(name)``;
    any other tool is a read without a breaker that still counts against the run's
    budgets. Breaker state is shared through the registry (and its store): crews protected
    with one registry share their breakers, whatever their run guards.

    Args:
        target: the crew to kick off (its agents and manager agent), an agent, or agents.
        guard: the run guard of this run.
        registry: where breakers of tools described by the boundary sheet come from.

    Returns:
        The :class:`Protection`; close it when the run is over (``with`` does).

    Raises:
        PolicyError: no run guard, or the crew or an agent is protected already.
    """
    if not isinstance(guard, kit.RunGuard):
        raise PolicyError("protect() needs a RunGuard", field="guard")
    check_adapter(registry=registry)
    binding = _Binding(guard, registry)
    return Protection(_HOOKS.bind(_owners(target), binding), guard)


def _owners(target: Crew | Agent | Iterable[Agent]) -> list[object]:
    """The crew and agents whose calls a protection serves."""
    if isinstance(target, Crew):
        manager = [target.manager_agent] if target.manager_agent is not None else []
        return [target, *target.agents, *manager]
    if isinstance(target, Agent):
        return [target]
    return list(target)


def _fields(tool: object) -> Any:
    """The argument names of a tool's ``args_schema`` (none when it has no schema)."""
    return getattr(getattr(tool, "args_schema", None), "model_fields", None) or {}


def _summary(llm: Any) -> Any:
    """The LLM's usage summary so far, or ``None`` if it keeps none."""
    get = getattr(llm, "get_token_usage_summary", None)
    if get is None:
        return None
    try:
        return get()
    except Exception:  # noqa: BLE001 - a fault around the call never changes it
        return None


def _resolved(result: Any) -> Any:
    """A tool's result, its coroutine run as CrewAI runs one (``asyncio.run``)."""
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result


def _text(answer: Any) -> str:
    """A guard answer as the observation the model reads."""
    return answer if isinstance(answer, str) else json.dumps(answer, default=str)


#: What CrewAI puts before a tool's own description when it describes the tool to the model.
_DESCRIPTION_MARK: Final = "\nTool Description: "
#: CrewAI's tools that run on an MCP server (``mcps=`` on an agent, or wrapped).
_MCP_TOOLS: Final = frozenset({"MCPNativeTool", "MCPToolWrapper"})


def _tool_type(tool: Any) -> ToolType:
    """``extension`` for a tool an MCP server runs, else ``function`` (the crew runs it)."""
    original = getattr(tool, "_original_tool", tool)
    names = {kind.__name__ for kind in type(original).__mro__}
    return "extension" if names & _MCP_TOOLS else "function"


def _description(tool: Any) -> str | None:
    """The tool's own description, without the name and arguments CrewAI writes before it."""
    text = getattr(tool, "description", None)
    if not isinstance(text, str) or not text:
        return None
    own = text.rpartition(_DESCRIPTION_MARK)[2] if text.startswith("Tool Name: ") else text
    return own.strip() or None
