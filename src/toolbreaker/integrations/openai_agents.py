"""OpenAI Agents SDK adapter: breakers and run guards around an agent's function tools.

Install ``toolbreaker[openai-agents]``, then::

    from toolbreaker.integrations.openai_agents import protect, run_config

    agent = protect(agent, registry=registry, guard=RunGuard("ticket-4711"))
    result = await Runner.run(agent, prompt, run_config=run_config())

:func:`protect` returns a copy of the agent whose function tools go through toolbreaker;
:func:`run_config` installs the error formatter that records their failures. One call of
a protected tool (SDK 0.24) goes like this:

- **before**: a tool input guardrail, placed after the tool's own, asks the run guard
  (without one: the tool's breaker) for the call. A refusal becomes ``reject_content``:
  the tool does not run and the model reads the JSON result instead (tool unavailable,
  naming its fallback; writes blocked ...). A refusal that ends the run becomes
  ``raise_exception``: the run raises ``agents.ToolInputGuardrailTripwireTriggered``
  whose ``output.output_info`` is the stop packet (``StopPacket.to_dict()``).
- **run**: the tool's ``on_invoke_tool`` is wrapped: it runs the tool with the guard's
  arguments (a write's idempotency key filled in; that parameter is hidden from the
  model) and records a success.
- **failure**: the SDK catches the tool's exception and asks
  ``RunConfig.tool_error_formatter`` for the message; :func:`format_tool_error` records
  the failure and answers with the guard's result. An exception the tool lets through
  (``failure_error_function=None``) is recorded by the wrapper and still fails the run.
- **timeout**: ``function_tool(timeout=...)``, or the breaker's timeout for an async tool
  without one, is enforced by the SDK, and its timeouts skip the formatter: the tool's
  ``timeout_error_function`` records them as timeouts (``timeout_behavior`` is kept).

- **siblings**: the SDK runs one model response's calls in parallel tasks; they are one
  sibling group of the run guard (the turn is the model request count). When a required
  dependency (a tool declared ``required`` on the guard) opens while they run, the calls
  in flight that need it are cancelled by policy: the task the wrapped invoker runs the
  tool in is cancelled (never the SDK's, which would fail the run) and the invoker
  answers with the cancelled-by-policy result (a write that may have started: unknown
  outcome, journaled, never replayed). Independent calls finish; the run is stopped, so
  the next model request raises the tripwire with the stop packet (the protected agent's
  hooks refuse it; the agent's own hooks still run); ``guard.turn_outcome()`` lists the
  turn's calls and how each ended.

The guardrail, the invoker, the formatter and the timeout function all receive the
call's ``ToolContext`` and its ``tool_call_id``: the step begun before the call is kept
under that id and settled by exactly one of the after paths.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.errors import PolicyError
from toolbreaker.integrations import count_usage
from toolbreaker.integrations._described import check_adapter, tool_breaker
from toolbreaker.integrations._kit import (
    Breaker,
    Registry,
    Step,
    hidden_tools_line,
)

require("agents", "openai-agents")

from agents import (  # noqa: E402 - after the check that names the extra to install
    Agent,
    AgentHooks,
    FunctionTool,
    RunConfig,
    RunContextWrapper,
    ToolErrorFormatterArgs,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolInputGuardrailTripwireTriggered,
)
from agents.items import ModelResponse, TResponseInputItem  # noqa: E402 - see above
from agents.run_context import AgentHookContext  # noqa: E402 - see above
from agents.tool import Tool  # noqa: E402 - see above
from agents.tool_context import ToolContext  # noqa: E402 - see above

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        GuardedTool,
        RunGuard,
    )


__all__ = [
    "protect",
    "run_config",
]

#: The name of the tool input guardrail :func:`protect` adds to every tool it protects.
GUARDRAIL_NAME: Final = "toolbreaker"

TContext = TypeVar("TContext")
_Formatter = Callable[[ToolErrorFormatterArgs[Any]], "str | Awaitable[str | None] | None"]
_TimeoutFunction = Callable[[RunContextWrapper[Any], Exception], "str | Awaitable[str]"]

#: The protected call whose tool is running in this task; the error formatter, which
#: the SDK calls from inside the tool's invoker, finds its call here.
_RUNNING: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "toolbreaker_openai_agents_call", default=None
)


def protect(
    agent: Agent[TContext],
    *,
    registry: Registry | None = None,
    guard: RunGuard | None = None,
    breakers: Mapping[str, Breaker] | None = None,
    hide_open_tools: bool = False,
) -> Agent[TContext]:
    """A copy of ``agent`` whose function tools all go through toolbreaker.

    Every ``FunctionTool`` of the agent is copied with a tool input guardrail (after its
    own), a wrapped invoker and, when it has a deadline, a timeout function; the agent
    and its tools are left as they were. Run the copy with :func:`run_config` so that
    failures are recorded. A tool's breaker is the one ``breakers`` names for it, else
    the one its declaration in ``guard`` names, else ``registry.for_tool(name)``, else the
    registry's default breaker for the tool's name (``registry.get(name)``, as the
    LangChain middleware does); without a registry, a tool with no breaker is guarded by
    the run guard only, and left alone without a guard. Hosted
    tools, MCP servers and handoff targets are not touched: protect those agents too.

    Declare write tools on the guard *before* calling this (``guard.ensure_tool(name,
    risk="reversible_write", ...)``): a write whose function has the guard's idempotency
    parameter (``idempotency_key`` by default) gets the key filled in, and the model no
    longer sees that parameter.

    Args:
        agent: the agent to protect.
        registry: where breakers are found by tool name (sheet rows and live breakers).
        guard: the run guard of this run: budgets, loop detection, idempotent writes.
        breakers: breakers by tool name, taking precedence over the other sources.
        hide_open_tools: opt in to hiding a tool from the model while its breaker rejects
            every call (its ``is_enabled`` also asks the breaker), with one line added to
            the agent's instructions naming the hidden tools and until when.

    Returns:
        The protected copy.

    Raises:
        PolicyError: nothing to protect with (no registry, breakers or guard), a tool is
            already protected, or a tool with a breaker (or a write) has its own
            ``failure_error_function``, whose failures toolbreaker cannot see.
    """
    check_adapter(
        registry=registry,
        guard=guard,
        breakers=breakers,
        flags={"hide_open_tools": hide_open_tools},
    )
    if registry is None and guard is None and not breakers:
        raise PolicyError("protect() needs a registry, breakers or a run guard", field="registry")
    explicit = breakers or {}
    protection = _Protection(guard)
    tools: list[Any] = []
    for tool in agent.tools:
        if not isinstance(tool, FunctionTool):
            tools.append(tool)  # nothing toolbreaker can hook
            continue
        spec = None if guard is None else guard.ensure_tool(tool.name)
        breaker = _breaker_for(tool.name, registry, explicit, spec)
        if guard is None or spec is None:
            if breaker is None:
                tools.append(tool)  # nothing to guard it with
                continue
            protection.breakers[tool.name] = breaker
            tools.append(protection.adopt(tool, breaker, inject=None, write=False))
            continue
        if breaker is not None and breaker is not spec.breaker:
            spec = guard.add_tool(dataclasses.replace(spec, breaker=breaker))
        write = kit.may_write(spec)
        properties = tool.params_json_schema.get("properties") or {}
        key_arg = kit.key_argument(spec)
        inject = key_arg if key_arg is not None and key_arg in properties else None
        tools.append(protection.adopt(tool, spec.breaker, inject=inject, write=write))
    # A run the guard stopped asks the model nothing more (see _StopHooks).
    hooks = agent.hooks if guard is None else _StopHooks(agent.hooks, protection)
    if not hide_open_tools:
        return agent.clone(tools=tools, hooks=hooks)
    hideable: dict[str, Breaker] = {}
    for tool in tools:
        if not isinstance(tool, FunctionTool) or tool.name not in protection.adopted:
            continue
        breaker = protection.breakers.get(tool.name)
        if breaker is None and guard is not None:
            breaker = guard.ensure_tool(tool.name).breaker
        if breaker is not None:
            hideable[tool.name] = breaker
            tool.is_enabled = _enabled_unless_open(tool.is_enabled, breaker)
    return agent.clone(
        tools=tools, hooks=hooks, instructions=_with_hidden_line(agent.instructions, hideable)
    )


class _StopHooks(AgentHooks[Any]):
    """The agent's own hooks, and one rule: a run the guard stopped asks the model nothing.

    A stop decided while a turn's calls ran (a required dependency opened, a budget ran
    out) lets that turn's answers in; the next model request then raises the same
    ``ToolInputGuardrailTripwireTriggered`` as a call refused by the stop, with the stop
    packet as ``output.output_info``. Without this the model would be asked once more
    and could end the run with a final answer as if nothing had stopped it.
    """

    def __init__(self, inner: AgentHooks[Any] | None, protection: _Protection) -> None:
        self._inner = inner
        self._protection = protection

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        await self._protection.refuse_if_stopped()
        if self._inner is not None:
            await self._inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        guard = self._protection.guard
        usage = getattr(response, "usage", None)
        if guard is not None and usage is not None:  # the model's usage, into the budget
            chosen = agent.model
            model = chosen if isinstance(chosen, str) else getattr(chosen, "model", None)
            if model is None and chosen is not None:
                model = type(chosen).__name__  # a model object that names no model
            count_usage(guard, model, usage.input_tokens, usage.output_tokens)
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)

    async def on_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        if self._inner is not None:
            await self._inner.on_start(context, agent)

    async def on_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
        if self._inner is not None:
            await self._inner.on_end(context, agent, output)

    async def on_handoff(
        self, context: RunContextWrapper[Any], agent: Agent[Any], source: Agent[Any]
    ) -> None:
        if self._inner is not None:
            await self._inner.on_handoff(context, agent, source)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        if self._inner is not None:
            await self._inner.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)


async def _resolved(value: Any, *args: Any) -> Any:
    """``value``, called with ``args`` (and awaited) when it is callable."""
    if callable(value):
        value = value(*args)
        if inspect.isawaitable(value):
            value = await value
    return value


def _enabled_unless_open(
    enabled: Any, breaker: Breaker
) -> Callable[[RunContextWrapper[Any], Any], Awaitable[bool]]:
    async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
        if (await breaker.ahidden_for_ms())[0]:  # a shared store is asked off the loop
            return False
        return bool(await _resolved(enabled, ctx, agent))

    return is_enabled


def _with_hidden_line(
    instructions: Any, breakers: Mapping[str, Breaker]
) -> Callable[[RunContextWrapper[Any], Any], Awaitable[str]]:
    async def instructed(ctx: RunContextWrapper[Any], agent: Any) -> str:
        base = await _resolved(instructions, ctx, agent)
        hidden = {}
        for name, breaker in breakers.items():
            down, wait = await breaker.ahidden_for_ms()
            if down:
                hidden[name] = wait
        return "\n\n".join(part for part in (base, hidden_tools_line(hidden)) if part)

    return instructed


def format_tool_error(args: ToolErrorFormatterArgs[Any]) -> Awaitable[str] | None:
    """``RunConfig.tool_error_formatter`` that records a protected tool's failure.

    The failure settles the call's step (the breaker counts it if it qualifies) and the
    model reads the guard's result: the tool-unavailable result when this failure opened
    the breaker, ``{"ok": false, "error": ..., "retryable": ...}`` otherwise. For a
    protected tool it returns an awaitable (the SDK awaits a formatter's answer): the
    step settles with its store round trips awaited, never blocking the event loop.
    Errors of tools that are not protected, or already settled, get ``None``: the SDK's
    default message.
    """
    call = _RUNNING.get()
    if (
        call is None
        or args.kind != "tool_exception"
        or args.error is None
        or call.call_id != args.call_id
    ):
        return None
    return call.fail(args.error)  # awaited by the SDK: the store round trips are awaited


def run_config(base: RunConfig | None = None) -> RunConfig:
    """A ``RunConfig`` with :func:`format_tool_error` installed.

    Returns a copy of ``base`` (or a new ``RunConfig``), or ``base`` itself when it has the
    formatter already. A formatter ``base`` had still words the errors toolbreaker does
    not own.
    """
    config = base if base is not None else RunConfig()
    current = config.tool_error_formatter
    if _is_ours(current):
        return config
    formatter: _Formatter = format_tool_error if current is None else _Chained(current)
    return dataclasses.replace(config, tool_error_formatter=formatter)


class _Chained:
    """Our formatter first, then the one the run config had."""

    def __init__(self, then: _Formatter) -> None:
        self.then = then

    def __call__(self, args: ToolErrorFormatterArgs[Any]) -> str | Awaitable[str | None] | None:
        text = format_tool_error(args)
        return text if text is not None else self.then(args)


def _is_ours(formatter: object) -> bool:
    return formatter is format_tool_error or isinstance(formatter, _Chained)


@dataclasses.dataclass(eq=False)
class _Call:
    """One protected call between its guardrail and its settlement."""

    call_id: str
    arguments: str
    step: Step
    table: dict[str, _Call]
    run_input: str | None = None
    started: bool = False
    settled: bool = False

    async def succeed(self, result: Any) -> Any:
        """Record a success; the tool's own result, or the guard's verdict as text."""
        if not self._settle():
            return result
        answer = await self.step.asucceeded(result)
        return result if answer is result else _text(answer)

    def fail(self, exc: BaseException) -> Awaitable[str] | None:
        """Claim the call and record a failure, awaited; ``None`` if already settled.

        The claim is made at once (exactly one after path settles a call); the awaitable
        settles the step and answers with the guard's result as text.
        """
        if not self._settle():
            return None
        return self._failed(exc)

    async def _failed(self, exc: BaseException) -> str:
        return _text(await self.step.afailed(exc))

    async def cancel(self, exc: asyncio.CancelledError) -> None:
        """Record a cancellation (never a failure; a write stays pending, to reconcile)."""
        if self._settle():
            try:
                await self.step.afailed(exc)
            except asyncio.CancelledError as raised:
                if raised is not exc:
                    raise

    def settled_by_policy(self) -> None:
        """The run guard settled the call: the turn cancelled it by policy."""
        self._settle()

    def _settle(self) -> bool:
        if self.settled:
            return False
        self.settled = True
        if self.table.get(self.call_id) is self:
            del self.table[self.call_id]
        return True


class _Protection:
    """The hooks of one :func:`protect` call, shared by the tools it protected."""

    def __init__(self, guard: RunGuard | None) -> None:
        self.guard = guard
        self.breakers: dict[str, Breaker] = {}
        self.adopted: set[str] = set()
        self.descriptions: dict[str, str] = {}  # as the model reads them, for the spans
        # Each tool's parameters, as its schema names them (a write's key is sent only
        # to a tool that takes it: Step.args_for).
        self.params: dict[str, frozenset[str]] = {}
        self.needs_formatter: set[str] = set()
        self.calls: dict[str, _Call] = {}
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check, name=GUARDRAIL_NAME
        )

    # -- protect time ----------------------------------------------------------------

    def adopt(
        self, tool: FunctionTool, breaker: Breaker | None, *, inject: str | None, write: bool
    ) -> FunctionTool:
        """The protected copy of ``tool``."""
        name = tool.name
        self.adopted.add(name)
        if tool.description:
            self.descriptions[name] = tool.description
        if any(g.get_name() == GUARDRAIL_NAME for g in tool.tool_input_guardrails or ()):
            raise PolicyError(f"tool {name!r} is already protected", field=name)
        handler = _failure_handler(tool)
        if handler == "custom" and (breaker is not None or write):
            raise PolicyError(
                f"tool {name!r} has its own failure_error_function, so its failures never "
                "reach toolbreaker: leave the default (the run's formatter answers) or pass "
                "failure_error_function=None",
                field=f"{name}.failure_error_function",
            )
        if handler == "default":
            self.needs_formatter.add(name)
        # copy.copy rebinds the SDK's failure handling to the copy (FunctionTool.__copy__).
        protected = copy.copy(tool)
        self.params[name] = frozenset(tool.params_json_schema.get("properties") or {})
        if inject is not None:
            protected.params_json_schema = _without(tool.params_json_schema, inject)
        if (
            protected.timeout_seconds is None
            and breaker is not None
            and breaker.timeout is not None
            and _is_async(tool)
        ):
            # The SDK enforces the breaker's deadline; it cannot cancel a sync tool's thread.
            protected.timeout_seconds = float(breaker.timeout)
        if protected.timeout_seconds is not None:
            protected.timeout_error_function = self._on_timeout(
                tool.timeout_behavior, tool.timeout_error_function
            )
            protected.timeout_behavior = "error_as_result"
        protected.tool_input_guardrails = [*(tool.tool_input_guardrails or ()), self.guardrail]
        protected.on_invoke_tool = self._invoker(
            name, protected.on_invoke_tool, timed=protected.timeout_seconds is not None
        )
        return protected

    # -- before ----------------------------------------------------------------------

    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        if ctx.tool_name in self.needs_formatter and not _is_ours(
            ctx.run_config.tool_error_formatter if ctx.run_config is not None else None
        ):
            raise PolicyError(
                f"protected tool {ctx.tool_name!r} records its failures through the run's "
                "tool_error_formatter: run the agent with run_config="
                "toolbreaker.integrations.openai_agents.run_config()",
                field="run_config.tool_error_formatter",
            )
        pending = self.calls.get(ctx.tool_call_id)
        if pending is not None and not pending.started and pending.arguments == ctx.tool_arguments:
            # Asked again before it ran (guardrails run before and after an approval).
            return ToolGuardrailFunctionOutput.allow()
        if self.guard is not None:
            # The model requests made so far number the turn: every call of one model
            # response marks it once (Budget.max_calls_per_turn counts them).
            self.guard.mark_turn(("openai-agents", ctx.usage.requests))
        answer = await self._open(ctx.tool_name, ctx.tool_call_id, ctx.tool_arguments)
        if answer is None:
            return ToolGuardrailFunctionOutput.allow()
        if self.guard is not None and isinstance(answer, Mapping) and answer.get("run_stopped"):
            return await self._stopped(self.guard)
        return ToolGuardrailFunctionOutput.reject_content(_text(answer), output_info=answer)

    @staticmethod
    async def _stopped(guard: RunGuard) -> ToolGuardrailFunctionOutput:
        packet = await guard.astop_packet()  # a shared journal is read off the loop
        return ToolGuardrailFunctionOutput.raise_exception(output_info=packet.to_dict())

    async def refuse_if_stopped(self) -> None:
        """Raise the stop's tripwire if the guard stopped the run (before a model request).

        Raises:
            agents.ToolInputGuardrailTripwireTriggered: the run was stopped; the stop
                packet is ``output.output_info``.
        """
        if self.guard is not None and self.guard.stopped is not None:
            stopped = await self._stopped(self.guard)
            raise ToolInputGuardrailTripwireTriggered(self.guardrail, stopped)

    async def _open(self, tool: str, call_id: str, arguments: str) -> Any:
        """Begin a call; its answer if it must not run, else ``None`` (the call is kept).

        The run guard's (or the breaker's) store round trips are awaited.
        """
        args, parsed = _parse(arguments)
        begin = self.guard.abegin if self.guard is not None else self.breakers[tool].abegin
        step = await begin(
            tool,
            args,
            call_id=call_id or None,
            tool_type="function",  # a FunctionTool: the application runs it
            description=self.descriptions.get(tool),
        )
        if step.answer is not None:
            return step.answer
        call = _Call(call_id, arguments, step, self.calls)
        run_args = step.args_for(self.params.get(tool, ()))
        if parsed and run_args != args:  # the guard's key given, or the model's dropped
            call.run_input = json.dumps(run_args)
        self.calls[call_id] = call
        return None

    # -- run, after ------------------------------------------------------------------

    def _invoker(
        self, name: str, inner: Callable[[ToolContext[Any], str], Awaitable[Any]], *, timed: bool
    ) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
        async def invoke(ctx: ToolContext[Any], input: str) -> Any:
            call = self.calls.get(ctx.tool_call_id)
            if call is None or call.started:
                # No guardrail ran for this call (invoked directly, or a nested agent-tool
                # run resumed): ask here, and answer instead of running if refused.
                answer = await self._open(name, ctx.tool_call_id, input)
                if answer is not None:
                    return _text(answer)
                call = self.calls[ctx.tool_call_id]
            call.started = True
            token = _RUNNING.set(call)
            given = call.run_input or input
            try:
                if self.guard is None:
                    result = await inner(ctx, given)
                else:
                    # One call of the model turn's sibling group: the task running the
                    # tool is cancelled by policy when a required dependency it needs
                    # opens, and the SDK's task gets the answer as the tool's output.
                    result = await self.guard.arun_step(call.step, lambda: inner(ctx, given))
            except asyncio.CancelledError as exc:
                if not timed:
                    await call.cancel(exc)
                # A timed tool is cancelled at its deadline too, and only the SDK knows
                # which it was: its timeout function records a timeout; a cancelled run
                # leaves the call unsettled (a probe's lease expires, a write stays
                # pending in the journal and is reconciled on resume, never replayed).
                raise
            except Exception as exc:
                failing = call.fail(exc)  # failure_error_function=None: the run fails
                if failing is not None:
                    await failing
                raise
            finally:
                _RUNNING.reset(token)
            if isinstance(result, kit.CancelledByPolicy):
                call.settled_by_policy()
                return _text(result.answer)
            # A failure the SDK caught was settled by format_tool_error; this is its text.
            return result if call.settled else await call.succeed(result)

        return invoke

    def _on_timeout(
        self,
        behavior: Literal["error_as_result", "raise_exception"],
        original: _TimeoutFunction | None,
    ) -> _TimeoutFunction:
        async def on_timeout(ctx: RunContextWrapper[Any], error: Exception) -> str:
            # The SDK awaits a timeout function's answer: the settlement's round trips too.
            call = self.calls.get(ctx.tool_call_id) if isinstance(ctx, ToolContext) else None
            failing = call.fail(_as_timeout(error)) if call is not None and call.started else None
            text = None if failing is None else await failing
            if behavior == "raise_exception":
                raise error
            if text is not None:
                return text
            if original is None:
                return str(error)
            given = original(ctx, error)
            return await given if inspect.isawaitable(given) else given

        return on_timeout


def _breaker_for(
    tool: str,
    registry: Registry | None,
    breakers: Mapping[str, Breaker],
    spec: GuardedTool | None,
) -> Breaker | None:
    """The tool's breaker: ``breakers``'s, the guard's declaration's, else the registry's.

    From the registry by the one rule every adapter follows (:func:`tool_breaker`): the
    sheet row whose tool it is, else a breaker of its own named like the tool (on the
    defaults, said so), never a silently unprotected tool; a name close to a row's is
    refused, naming the row.
    """
    if tool in breakers:
        return breakers[tool]
    if spec is not None and spec.breaker is not None:
        return spec.breaker
    if registry is None:
        return None
    return tool_breaker(registry, tool, where=f"tools.{tool}")


def _failure_handler(tool: FunctionTool) -> Literal["default", "propagate", "custom"]:
    # SDK 0.24 keeps a tool's failure policy in private fields; the run's formatter is
    # consulted only for the implicit default handler (RunConfig.tool_error_formatter).
    if tool._use_default_failure_error_function:
        return "default"
    return "propagate" if tool._failure_error_function is None else "custom"


def _is_async(tool: FunctionTool) -> bool:
    try:
        fn = tool.__wrapped__
    except AttributeError:  # a hand-made FunctionTool: its invoker is a coroutine function
        return True
    return inspect.iscoroutinefunction(fn)


def _without(schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The parameters schema without ``name``: the model never sends the key."""
    trimmed = dict(schema)
    trimmed["properties"] = {k: v for k, v in schema.get("properties", {}).items() if k != name}
    if "required" in schema:
        trimmed["required"] = [k for k in schema["required"] if k != name]
    return trimmed


def _parse(arguments: str) -> tuple[dict[str, Any], bool]:
    """The model's arguments as a dict, and whether they were a JSON object."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}, False
    if not isinstance(value, dict):
        return {"arguments": value}, False
    return value, True


def _as_timeout(error: Exception) -> TimeoutError:
    """The SDK's ToolTimeoutError as the timeout the classifier counts."""
    timeout = TimeoutError(str(error))
    timeout.__cause__ = error
    return timeout


def _text(answer: Any) -> str:
    """A guard answer as the text the model reads."""
    return answer if isinstance(answer, str) else json.dumps(answer, default=str)
