"""Pydantic AI adapter: one capability puts breakers and a run guard around every tool call.

Install with ``pip install '.[pydantic-ai]'``. The capability implements
``wrap_tool_execute``, so it covers function tools, MCP servers and every other toolset of
the agent; it holds no breaker logic of its own and only translates:

- before a tool runs, :meth:`RunGuard.begin` decides. A rejection (the dependency's
  breaker is open, the authority check refused, a write's outcome is unknown) becomes
  ``ToolFailed`` carrying the guard's JSON result: the model reads it as a failed tool
  return, terminal for that call, and it costs no retry budget. A write's answer already
  in the journal is returned as the tool's result without running it again;
- the tool runs with the guard's arguments: a write receives its idempotency key under
  ``GuardedTool.idempotency_arg`` (the argument is hidden from the schema the model sees);
- afterwards ``succeeded`` / ``failed`` settle the call; a failure reaches the model as
  ``ToolFailed`` with the guard's result (``tool_unavailable`` when it opened the breaker).
  Pydantic AI's own signals (``ModelRetry``, a tool's ``ToolFailed``, deferrals) are settled
  and passed on unchanged unless the guard's answer must win (tool unavailable, write
  outcome unknown, run stopped);
- Pydantic AI runs one model response's tool calls in parallel tasks; they are one
  sibling group of the run guard (the turn is ``RunContext.run_step``). When a required
  dependency (a tool declared ``required``) opens while its siblings run, the calls in
  flight that need it are cancelled by policy: the task toolbreaker runs the tool in is
  cancelled (never the framework's, which would end the run) and the model reads a
  cancelled-by-policy answer (a write that may have started: unknown outcome, journaled,
  never replayed); independent calls finish with their results;
- when the run guard stops the run (budget, repeated action, loop, required dependency
  down), the capability calls ``ctx.cancel()``: at once when the turn has no other call,
  else in ``before_model_request``, once every call of the turn has its answer and before
  the model is asked again. A response that also ends the run (an output tool call next
  to its sibling calls) is stopped all the same: its output is not processed
  (``wrap_output_process``), and a stop that came after it was (``end_strategy=
  "exhaustive"``) cancels the run in ``after_run``: a stopped run never completes. The
  run ends with the framework's ``RunCancelled``, which keeps the message history;
  :func:`run_stop` pairs it with the guard's stop packet and the last turn's outcome
  (which calls completed, degraded or were cancelled, and why).

A breaker's ``timeout`` becomes the tool's ``ToolDefinition.timeout`` when the tool has
none, so the framework enforces the dependency's deadline and the timeout counts as a
failure. Tools are described to the guard, in this order, by the guard itself
(``guard.add_tool`` / ``guard.ensure_tool``), by their metadata (:func:`tool_metadata`) or
by the registry (``registry.for_tool(name)``); any other tool is a read without a breaker
that still counts against the run's budgets.

Example::

    registry = Registry.from_toml("boundaries.toml")          # process-wide, shared
    guard = RunGuard("task-42", budget=Budget(max_tool_calls=20), journal=store)
    try:
        capability = ToolbreakerCapability(guard, registry=registry)
        result = await agent.run(prompt, capabilities=[capability])
    except RunCancelled as exc:
        stop = run_stop(exc, guard)        # None when the guard did not stop the run
        if stop is None:
            raise
        print(stop.packet.to_json())       # stop.messages resumes the conversation
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.integrations import count_usage

require("pydantic_ai", "pydantic-ai")

from pydantic_ai import RunContext  # noqa: E402 - after the check that names the extra
from pydantic_ai.capabilities import (  # noqa: E402
    AbstractCapability,
    ValidatedToolArgs,
    WrapOutputProcessHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import (  # noqa: E402
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    RunCancelled,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
    UnexpectedModelBehavior,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart  # noqa: E402
from pydantic_ai.models import ModelRequestContext  # noqa: E402
from pydantic_ai.output import OutputContext  # noqa: E402
from pydantic_ai.run import AgentRunResult  # noqa: E402
from pydantic_ai.tools import AgentDepsT, ToolDefinition  # noqa: E402
from pydantic_core import to_jsonable_python  # noqa: E402

from toolbreaker.errors import PolicyError  # noqa: E402
from toolbreaker.integrations._described import (  # noqa: E402
    check_adapter,
    described,
    tool_metadata,
    without_key_argument,
)
from toolbreaker.integrations._kit import (  # noqa: E402
    SYSTEM_PROMPT_LINE,
    Breaker,
    Registry,
    StopPacket,
    hidden_tools_line,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        GuardedTool,
        RunGuard,
        SiblingOutcome,
    )


__all__ = [
    "ToolbreakerCapability",
    "arun_stop",
    "run_stop",
    "tool_metadata",
]

#: Pydantic AI's control-flow signals: settled, then passed on unchanged.
_SIGNALS: Final = (
    ToolRetryError,
    ToolFailedError,
    ModelRetry,
    ToolFailed,
    SkipToolExecution,
    CallDeferred,
    ApprovalRequired,
)
#: Guard answers that replace a framework signal: retrying would be useless or unsafe.
_OVERRIDING: Final = ("tool_unavailable", "outcome_unknown", "run_stopped")


@dataclass(frozen=True, slots=True)
class RunStop:
    """A run the guard stopped: what the operator needs and what resumes the conversation.

    Attributes:
        packet: the guard's stop packet (condition, confirmed work, next safe action).
        messages: the run's complete history, ready to pass as ``message_history``.
        cancelled: the framework's ``RunCancelled`` (usage, run id, new messages).
        turn: the last model turn's calls as a bounded partial outcome: which completed
            (with their results), degraded, failed or were cancelled by policy, and why
            (``turn.to_result()`` is the JSON form); ``None`` if no turn was marked.
    """

    packet: StopPacket
    messages: list[ModelMessage]
    cancelled: RunCancelled
    turn: SiblingOutcome | None = None


def run_stop(exc: BaseException, guard: RunGuard) -> RunStop | None:
    """The guard's stop packet with the history of the cancelled run, if the guard stopped it.

    Args:
        exc: the ``RunCancelled`` raised by ``agent.run()`` (or an exception carrying one,
            see ``RunCancelled.from_cancellation``).
        guard: the run's guard.

    Returns:
        ``None`` when the run was cancelled by something else (a ``CancellationToken``,
        a timeout): re-raise the exception then.
    """
    cancelled = _stopped_by(exc, guard)
    if cancelled is None:
        return None
    return RunStop(guard.stop_packet(), cancelled.all_messages(), cancelled, guard.turn_outcome())


async def arun_stop(exc: BaseException, guard: RunGuard) -> RunStop | None:
    """:func:`run_stop` for the event loop: the packet's journal read is made off it.

    Use it where the run was awaited (``await agent.run(...)``); a shared journal (SQLite,
    Redis, PostgreSQL) is read in a worker thread, so the loop never waits on it.
    """
    cancelled = _stopped_by(exc, guard)
    if cancelled is None:
        return None
    packet = await guard.astop_packet()
    return RunStop(packet, cancelled.all_messages(), cancelled, guard.turn_outcome())


def _stopped_by(exc: BaseException, guard: RunGuard) -> RunCancelled | None:
    """The run's ``RunCancelled`` if the guard stopped it, else ``None``."""
    cancelled = RunCancelled.from_cancellation(exc)
    return None if cancelled is None or guard.stopped is None else cancelled


#: A run guard, or a callable that finds the run's guard from its ``RunContext``.
_GuardSource: TypeAlias = "RunGuard | Callable[[RunContext[AgentDepsT]], RunGuard]"


@dataclass
class ToolbreakerCapability(AbstractCapability[AgentDepsT]):
    """Guard every tool call of an agent run with toolbreaker.

    A run guard belongs to one run. Either pass the capability per run
    (``agent.run(..., capabilities=[ToolbreakerCapability(guard, registry=registry)])``), or
    give the agent one capability with a factory that finds the run's guard, for example
    in its deps: ``ToolbreakerCapability(lambda ctx: ctx.deps.guard, registry=registry)``.
    Breaker state is shared through the registry (and its store), never through the
    capability.

    Attributes:
        guard: the run's :class:`~toolbreaker.RunGuard`, or a callable that returns it from
            the run's ``RunContext`` (called once per run).
        registry: where breakers of tools described by metadata or by the boundary sheet
            come from.
        instructions: add :func:`toolbreaker.system_prompt_line` to the agent's
            instructions, so the model knows what a tool-unavailable result means.
        hide_open_tools: opt in to leaving out of each model request the tools whose
            breaker rejects every call now, with one instruction line naming them and
            until when.
    """

    guard: _GuardSource[AgentDepsT]
    _: KW_ONLY
    registry: Registry | None = None
    instructions: bool = True
    hide_open_tools: bool = False
    _hideable: dict[str, Breaker] = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        """Check the options now, not at the run's first tool call."""
        check_adapter(
            registry=self.registry,
            flags={"instructions": self.instructions, "hide_open_tools": self.hide_open_tools},
        )
        if not isinstance(self.guard, kit.RunGuard) and not callable(self.guard):
            raise PolicyError(
                f"guard must be a RunGuard or a callable, not {type(self.guard).__name__}",
                field="guard",
            )

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not constructible from an agent spec: it holds live objects."""
        return None

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """Bind the run's guard when the capability was given a factory."""
        if isinstance(self.guard, kit.RunGuard):
            return self
        guard = self.guard(ctx)
        if not isinstance(guard, kit.RunGuard):
            raise PolicyError(
                f"the guard factory returned {type(guard).__name__}, not a RunGuard", field="guard"
            )
        if self.registry is not None:
            self.registry.adopt_guard(guard)  # what watches the registry hears its stops
        return dataclasses.replace(self, guard=guard)

    def get_instructions(self) -> Any:  # pydantic_ai's AgentInstructions; mypy rejects its alias
        """The system-prompt line about tool-unavailable results, unless disabled."""
        if not self.hide_open_tools:
            return SYSTEM_PROMPT_LINE if self.instructions else None
        if not self.instructions:
            return self._hidden_line
        return [SYSTEM_PROMPT_LINE, self._hidden_line]

    def _hidden_line(self, ctx: RunContext[Any]) -> str:
        """The line naming the tools hidden now (empty when none is)."""
        hidden = {}
        for name, breaker in tuple(self._hideable.items()):
            down, wait = breaker.hidden_for_ms()
            if down:
                hidden[name] = wait
        return hidden_tools_line(hidden)

    async def prepare_tools(
        self, ctx: RunContext[AgentDepsT], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        """Hide the idempotency argument of writes; give breakers' deadlines to the tools.

        Raises:
            PolicyError: a write tool does not accept its idempotency argument, or requires
                the model to send it.
        """
        guard = self._bound()
        prepared: list[ToolDefinition] = []
        for tool_def in tool_defs:
            spec = self._spec(guard, tool_def)
            changes: dict[str, Any] = {}
            breaker = spec.breaker
            if breaker is not None and breaker.timeout is not None and tool_def.timeout is None:
                changes["timeout"] = breaker.timeout
            if kit.key_argument(spec) is not None:
                changes["parameters_json_schema"] = without_key_argument(
                    tool_def.name, tool_def.parameters_json_schema, spec
                )
            if self.hide_open_tools and breaker is not None:
                self._hideable[tool_def.name] = breaker
                if (await breaker.ahidden_for_ms())[0]:  # a shared store: asked off the loop
                    continue  # the instruction line names it instead
            prepared.append(dataclasses.replace(tool_def, **changes) if changes else tool_def)
        return prepared

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """End a run the guard stopped before the model is asked for more calls.

        A stop during a turn with sibling calls lets the turn finish (independent calls
        complete, calls that need the opened dependency are cancelled by policy); the
        run ends here, with ``RunCancelled`` and every answer of the turn in its history.
        """
        if self._bound().stopped is not None:
            ctx.cancel()
            # The run's task gets the cancellation at its next await, which may come after
            # this hook's task has asked the model: end this hook's task here instead. The
            # run ends with RunCancelled all the same (the run's own cancellation decides).
            raise asyncio.CancelledError
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """The response's usage (``ModelResponse.usage``) goes into the run's budget."""
        usage = response.usage
        count_usage(self._bound(), response.model_name, usage.input_tokens, usage.output_tokens)
        return response

    async def wrap_output_process(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        output_context: OutputContext,
        output: Any,
        handler: WrapOutputProcessHandler,
    ) -> Any:
        """Never process the final output of a run the guard stopped.

        A model response may issue sibling calls and the run's final result at once (an
        output tool call): when the guard stopped the run during that turn there is no
        next model request to end it, so it ends here, before the output (or an output
        function, which may act) is processed: ``RunCancelled``, as for any stop.
        """
        if self._bound().stopped is not None:
            ctx.cancel()
            raise asyncio.CancelledError  # as in before_model_request: end this task now
        return await handler(output)

    async def after_run(
        self, ctx: RunContext[AgentDepsT], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """A run the guard stopped never ends as a normal completion.

        The guard may stop the run after its final output was processed (with
        ``end_strategy="exhaustive"`` the output tool runs alongside the turn's siblings):
        the run is cancelled here, so it ends with ``RunCancelled`` and :func:`run_stop`
        gives the stop packet and the turn's outcome, never the output.
        """
        if self._bound().stopped is not None:
            ctx.cancel()  # honoured at the run's exit: the run raises RunCancelled
        return result

    async def wrap_tool_execute(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Ask the run guard before the tool runs and settle the call after it.

        Raises:
            ToolFailed: the guard's answer for a rejected or failed call.
        """
        guard = self._bound()
        spec = self._spec(guard, tool_def)
        # One model response is one turn: its step number marks the turn once, however
        # many tool calls it issued (Budget.max_calls_per_turn counts them).
        guard.mark_turn(("pydantic-ai", ctx.run_step))
        # Validated arguments may be models, dates or sets: the guard fingerprints their
        # JSON form, the tool still receives them as validated.
        step = await guard.abegin(
            spec.name,
            to_jsonable_python(args),
            call_id=call.tool_call_id or None,
            tool_type="function",  # the agent's own function runs it
            description=tool_def.description or None,
        )
        if step.answer is not None:
            return _answer(ctx, guard, step.answer)
        # The validated arguments, the model's key dropped and the guard's given.
        ready = step.args_for(args=args)
        try:
            # One call of the model turn's sibling group: cancelled by policy (its own
            # task, not the framework's) when a required dependency it needs opens.
            result = await guard.arun_step(step, lambda: handler(ready))
        except BaseException as exc:
            timeout = _as_timeout(exc)
            # records the outcome; re-raises cancellations
            seen = await step.afailed(timeout or exc)
            _stop_if_alone(ctx, guard)
            if timeout is None and isinstance(exc, _SIGNALS) and not _overrides(seen):
                raise
            # A deadline is toolbreaker's to word: the framework would turn it into a
            # retry prompt and, after its retry count, an internal error the model reads.
            raise ToolFailed(_encode(seen)) from exc
        if isinstance(result, kit.CancelledByPolicy):
            return _answer(ctx, guard, result.answer)
        seen = await step.asucceeded(result)
        if seen is result:
            return result
        return _answer(ctx, guard, seen)  # a write whose verification failed

    # -- helpers ------------------------------------------------------------------------

    def _bound(self) -> RunGuard:
        if not isinstance(self.guard, kit.RunGuard):  # pragma: no cover - for_run always binds
            raise PolicyError("the capability has no run guard bound", field="guard")
        return self.guard

    def _spec(self, guard: RunGuard, tool_def: ToolDefinition) -> GuardedTool:
        """The guard's description of a tool, registering it from metadata or the registry."""
        return described(guard, tool_def.name, tool_def.metadata, self.registry)


def _answer(ctx: RunContext[Any], guard: RunGuard, answer: Any) -> Any:
    """Hand the guard's answer to the model; cancel the run if the guard stopped it."""
    _stop_if_alone(ctx, guard)
    if isinstance(answer, Mapping) and answer.get("ok") is False:
        raise ToolFailed(_encode(answer))
    return answer


def _stop_if_alone(ctx: RunContext[Any], guard: RunGuard) -> None:
    """Cancel the run now if the guard stopped it and this is the turn's only call.

    With siblings in the turn the run is cancelled before the next model request
    instead (:meth:`ToolbreakerCapability.before_model_request`): cancelling now would
    cancel them and discard their results (``RunContext.cancel``).
    """
    if guard.stopped is None:
        return
    turn = guard.turn_outcome()
    if turn is None or len(turn.branches) <= 1:
        ctx.cancel()


def _as_timeout(exc: BaseException) -> TimeoutError | None:
    """The framework's deadline as a plain timeout, else ``None``.

    Pydantic AI turns a tool's deadline into ``ModelRetry`` raised in the ``TimeoutError``'s
    handler, wraps that in ``ToolRetryError`` (a retry prompt), and once the tool's retries
    are spent in ``UnexpectedModelBehavior``. Either way the cause is a ``ModelRetry``
    whose context is the ``TimeoutError``.
    """
    retry = exc if isinstance(exc, ModelRetry) else exc.__cause__
    if not (
        isinstance(exc, (ModelRetry, ToolRetryError, UnexpectedModelBehavior))
        and isinstance(retry, ModelRetry)
        and isinstance(retry.__context__, TimeoutError)
    ):
        return None
    timeout = TimeoutError(retry.message)
    timeout.__cause__ = exc
    return timeout


def _overrides(result: Any) -> bool:
    return isinstance(result, Mapping) and any(result.get(k) for k in _OVERRIDING)


def _encode(result: Any) -> str:
    return json.dumps(result, default=str)
