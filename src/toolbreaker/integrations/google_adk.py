"""Google ADK adapter: one Runner plugin puts breakers and a run guard around every tool call.

Install with ``pip install '.[google-adk]'`` (Python 3.11 or newer). The plugin is
an ADK ``BasePlugin``: given to the ``Runner`` (``plugins=[...]``) it sees every agent of
the app, and it only translates ADK's own hooks into run-guard calls:

- ``before_tool_callback``: :meth:`RunGuard.abegin` decides. A refusal (the dependency's
  breaker is open, the run is stopped, writes are blocked, a confirmed write answered from
  the journal) is returned as the tool's response: ADK skips the tool and the model reads
  the guard's JSON result (tool unavailable, naming its fallback ...). Otherwise the
  arguments become the guard's (a write's idempotency key filled in under its
  ``idempotency_arg``, which the model never sees: the plugin removes it from the
  declaration in each model request);
- ``after_tool_callback`` settles a success (``Step.asucceeded``); ``on_tool_error_callback``
  settles a failure (``Step.afailed``) and answers with the guard's result, so a failing
  tool never ends the run with an exception; a call ADK cancels (a sibling raised, the
  invocation was cancelled) is recorded as cancelled;
- ADK runs one model response's function calls concurrently, each in its own task; they
  are one sibling group of the run guard (``after_model_callback`` marks the turn). To be
  cancellable by policy a call's tool runs through :meth:`RunGuard.arun_step`: in each
  model request the plugin gives ADK a shallow copy of every tool whose ``run_async`` does
  that (name, description, declaration and class unchanged). When a required dependency
  opens while its siblings run, the calls in flight that need it are cancelled (the task
  toolbreaker runs the tool in, never ADK's, which would cancel the whole batch) and
  answered cancelled-by-policy; independent calls finish with their results. A breaker's
  timeout cuts an async tool at its deadline (``asyncio.wait_for``) and counts as one;
- a run the guard stopped ends through ADK's own path: the next ``before_model_callback``
  answers instead of the model with a final response whose text says why and whose
  ``custom_metadata`` holds the stop packet (:data:`STOP_KEY`) and the last turn's outcome
  (:data:`TURN_KEY`); :func:`stop_of` reads them back from the run's events;
- ``after_model_callback`` also hands each model response's token counts to
  :meth:`RunGuard.add_usage` through ``count_usage`` (:func:`model_usage` reads them
  from ADK's ``usage_metadata``), which prices them from the budget's price table into the run's
  cost: ``Budget.max_cost`` covers the model beside the tools.

Tools are described to the guard by the guard itself (``guard.ensure_tool``), by their
``custom_metadata`` (:func:`tool_metadata`) or by the registry (``registry.for_tool``); any
other tool is a read without a breaker that still counts against the run's budgets.

Example::

    registry = Registry.from_toml("breakers.toml")          # process-wide, shared
    guard = RunGuard("task-42", budget=Budget(max_tool_calls=20), journal=store)
    runner = InMemoryRunner(agent, plugins=[ToolbreakerPlugin(guard, registry=registry)])
    async for event in runner.run_async(user_id=..., session_id=..., new_message=...):
        if (stop := stop_of(event)) is not None:
            print(stop["condition"], stop["next_safe_action"])
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.errors import PolicyError
from toolbreaker.integrations import count_usage

require("google.adk", "google-adk")

from google.adk.agents.callback_context import CallbackContext  # noqa: E402 - after the check
from google.adk.agents.invocation_context import InvocationContext  # noqa: E402
from google.adk.agents.readonly_context import ReadonlyContext  # noqa: E402
from google.adk.events import Event  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.plugins import BasePlugin  # noqa: E402
from google.adk.tools.base_tool import BaseTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

from toolbreaker.integrations._described import (  # noqa: E402
    check_adapter,
    described,
    tool_metadata,
    without_key_argument,
)
from toolbreaker.integrations._kit import (  # noqa: E402
    SYSTEM_PROMPT_LINE,
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
    "ToolbreakerPlugin",
    "stop_of",
    "tool_metadata",
]

#: The plugin's name in the Runner (ADK needs one per plugin).
PLUGIN_NAME: Final = "toolbreaker"
#: The ``custom_metadata`` key of a stopped run's final event: ``StopPacket.to_dict()``.
STOP_KEY: Final = "toolbreaker_stop"
#: The ``custom_metadata`` key of the last turn's outcome (``SiblingOutcome.to_result()``).
TURN_KEY: Final = "toolbreaker_turn"

#: A run guard, or a callable that finds the run's guard from ADK's context of the run.
GuardSource: TypeAlias = "RunGuard | Callable[[ReadonlyContext], RunGuard]"


@dataclasses.dataclass(frozen=True, slots=True)
class ModelUsage:
    """One model response's token counts, as the run's cost is fed them.

    Attributes:
        model: the model's name (the request's ``model``, else the response's version).
        input_tokens: ``usage_metadata.prompt_token_count``.
        output_tokens: ``candidates_token_count`` plus ``thoughts_token_count`` (thinking
            tokens are billed as output).
    """

    model: str
    input_tokens: int
    output_tokens: int


def model_usage(response: LlmResponse, model: str | None = None) -> ModelUsage | None:
    """The ``(model, input, output)`` token counts of one ADK model response.

    Args:
        response: the ``LlmResponse`` (``after_model_callback``'s).
        model: the name the request asked for (``LlmRequest.model``); the response's
            ``model_version`` when not given.

    Returns:
        ``None`` for a partial (streamed) chunk, a response without usage metadata, or one
        that names no model.
    """
    usage = response.usage_metadata
    name = model or response.model_version
    if response.partial or usage is None or not name:
        return None
    output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
    return ModelUsage(name, usage.prompt_token_count or 0, output)


def stop_response(packet: StopPacket, turn: SiblingOutcome | None = None) -> LlmResponse:
    """The final response of a stopped run: the reason in words, the packet in metadata.

    ``turn``: the last model turn's calls; when it has any, the text says which completed
    and ``custom_metadata[TURN_KEY]`` holds ``turn.to_result()``.
    """
    text = packet.final_text(turn)
    metadata: dict[str, Any] = {STOP_KEY: packet.to_dict()}
    if turn is not None and turn.branches:
        metadata[TURN_KEY] = turn.to_result()
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        custom_metadata=metadata,
        turn_complete=True,
    )


def stop_of(events: Event | Iterable[Event]) -> dict[str, Any] | None:
    """The stop packet (``StopPacket.to_dict()``) a stopped run's final event carries.

    Args:
        events: one event, or the run's events (a session's ``events``), newest last.

    Returns:
        ``None`` when the guard did not stop the run.
    """
    for event in [events] if isinstance(events, Event) else reversed(list(events)):
        packet = (event.custom_metadata or {}).get(STOP_KEY)
        if isinstance(packet, Mapping):
            return dict(packet)
    return None


@dataclasses.dataclass(eq=False)
class _Call:
    """One admitted call between its before- and after-tool callbacks."""

    guard: RunGuard
    step: Step
    context: ToolContext
    started: bool = False
    settled: bool = False


class ToolbreakerPlugin(BasePlugin):
    """Guard every tool call of every agent a Runner runs with toolbreaker.

    A run guard belongs to one run. Either give the plugin the run's guard (a Runner per
    run, as in tests and scripts), or a factory that finds it from ADK's context of the
    invocation (called once per invocation), for example in the session state:
    ``ToolbreakerPlugin(lambda ctx: guards[ctx.session.id], registry=registry)``. Breaker
    state is shared through the registry (and its store), never through the plugin.

    Args:
        guard: the run's :class:`~toolbreaker.RunGuard`, or a callable returning it from a
            ``ReadonlyContext`` (an ADK ``Context``).
        registry: where breakers of tools described by metadata or by the sheet come from.
        instructions: add :func:`toolbreaker.system_prompt_line` to every model request.
        name: the plugin's name in the Runner.

    Raises:
        PolicyError: the guard is neither a ``RunGuard`` nor callable.
    """

    def __init__(
        self,
        guard: GuardSource,
        *,
        registry: Registry | None = None,
        instructions: bool = True,
        name: str = PLUGIN_NAME,
    ) -> None:
        super().__init__(name=name)
        check_adapter(registry=registry, flags={"instructions": instructions})
        if not isinstance(guard, kit.RunGuard) and not callable(guard):
            raise PolicyError(
                f"guard must be a RunGuard or a callable, not {type(guard).__name__}",
                field="guard",
            )
        self.guard = guard
        self.registry = registry
        self.instructions = instructions
        self._guards: dict[str, RunGuard] = {}
        self._calls: dict[int, _Call] = {}
        self._models: dict[tuple[str, str], str] = {}
        self._turns = itertools.count(1)

    # -- the run ----------------------------------------------------------------------

    def guard_of(self, context: ReadonlyContext) -> RunGuard:
        """The run guard of the invocation ``context`` belongs to.

        Raises:
            PolicyError: the factory returned something else.
        """
        if isinstance(self.guard, kit.RunGuard):
            return self.guard
        invocation = context.invocation_id
        found = self._guards.get(invocation)
        if found is None:
            found = self.guard(context)
            if not isinstance(found, kit.RunGuard):
                raise PolicyError(
                    f"the guard factory returned {type(found).__name__}, not a RunGuard",
                    field="guard",
                )
            self._guards[invocation] = found
            if self.registry is not None:
                self.registry.adopt_guard(found)  # what watches the registry hears its stops
        return found

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Forget the invocation's guard and model names (the guard itself lives on)."""
        invocation = invocation_context.invocation_id
        self._guards.pop(invocation, None)
        for key in [k for k in self._models if k[0] == invocation]:
            del self._models[key]

    # -- the model ----------------------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """End a stopped run; otherwise prepare the request's tools for the guard.

        A stopped run's model is not asked again: the stop response
        (:func:`stop_response`) answers instead, with the stop packet, and ends the run.
        Otherwise the request gets the system-prompt line, the writes' declarations lose
        their idempotency argument, and ADK is given the tools' guarded copies.

        Raises:
            PolicyError: a tool is misdescribed (see :func:`tool_metadata`), or a write
                cannot receive its idempotency key.
        """
        guard = self.guard_of(callback_context)
        if guard.stopped is not None:
            packet = await guard.astop_packet()  # a shared journal is read off the loop
            return stop_response(packet, guard.turn_outcome())
        if llm_request.model:
            key = (callback_context.invocation_id, callback_context.agent_name)
            self._models[key] = llm_request.model
        if self.instructions:
            llm_request.append_instructions([SYSTEM_PROMPT_LINE])
        hidden: dict[str, GuardedTool] = {}
        for name, tool in list(llm_request.tools_dict.items()):
            spec = self._spec(guard, tool)
            if kit.key_argument(spec) is not None:
                hidden[name] = spec
            llm_request.tools_dict[name] = self._guarded(tool)
        if hidden:
            _hide_keys(llm_request, hidden)
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """A complete model response starts a turn; its usage is handed to the run."""
        if llm_response.partial:
            return None
        guard = self.guard_of(callback_context)
        # One model response is one turn: its function calls are one sibling group
        # (Budget.max_calls_per_turn counts them).
        guard.mark_turn(("google-adk", callback_context.invocation_id, next(self._turns)))
        key = (callback_context.invocation_id, callback_context.agent_name)
        usage = model_usage(llm_response, self._models.get(key))
        if usage is not None:
            # Priced by the budget's price table into the run's cost (a shared run's
            # record is written from a worker thread: the loop never waits on it); a
            # usage that cannot be counted is logged, the response stands.
            count_usage(guard, usage.model, usage.input_tokens, usage.output_tokens)
        return None

    # -- the tools ----------------------------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Ask the run guard; its answer replaces the tool's run, else the call is kept."""
        guard = self.guard_of(tool_context)
        spec = self._spec(guard, tool)
        # A key the model made up is the guard's to drop (begin and args_for do).
        step = await guard.abegin(
            spec.name,
            tool_args,
            call_id=tool_context.function_call_id or None,
            tool_type=_tool_type(tool),
            description=tool.description or None,
        )
        if step.answer is not None:
            return _as_response(step.answer)
        # ADK hands the tool this very dict: the guard's arguments are what runs.
        run_args = step.args_for(args=tool_args)
        tool_args.clear()
        tool_args.update(run_args)
        self._calls[id(tool_context)] = _Call(guard, step, tool_context)
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Settle a success; the guard's verdict replaces the result when it differs."""
        call = self._claim(tool_context)
        if call is None:
            return None  # the guard answered the call, or it is not ours
        seen = await call.step.asucceeded(result)
        return None if seen is result else _as_response(seen)

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """Settle a failure: the model reads the guard's result instead of the run failing.

        ADK also calls this with the ``asyncio.CancelledError`` of a cancelled call (a
        sibling failed, the invocation was cancelled): recorded as a cancellation (a
        write stays pending in the journal, reconciled on resume, never replayed).
        """
        failure: BaseException = error
        call = self._claim(tool_context)
        if call is None:
            return None
        if isinstance(failure, asyncio.CancelledError):
            await _cancelled(call.step, failure)
            return None
        return _as_response(await call.step.afailed(failure))

    # -- helpers ------------------------------------------------------------------------

    def _spec(self, guard: RunGuard, tool: BaseTool) -> GuardedTool:
        return described(
            guard, tool.name, tool.custom_metadata, self.registry, where="custom_metadata"
        )

    def _claim(self, context: ToolContext) -> _Call | None:
        """The call of ``context`` for its one settlement, or ``None`` (settled already)."""
        call = self._calls.pop(id(context), None)
        if call is None or call.context is not context or call.settled:
            return None
        call.settled = True
        return call

    def _guarded(self, tool: BaseTool) -> BaseTool:
        """A shallow copy of ``tool`` whose ``run_async`` runs as a call of its turn.

        ADK runs what the request's ``tools_dict`` holds; the copy keeps the tool's class,
        name, description and declaration. A tool that cannot take an attribute of its own
        is left as it is (its calls run as independent ones).
        """
        inner = tool.run_async
        twin = copy.copy(tool)

        async def run_async(*, args: dict[str, Any], tool_context: ToolContext) -> Any:
            call = self._calls.get(id(tool_context))
            if call is None or call.started or call.context is not tool_context:
                return await inner(args=args, tool_context=tool_context)
            call.started = True
            deadline = call.step.deadline
            try:
                ran = await call.guard.arun_step(
                    call.step,
                    lambda: _within(inner(args=args, tool_context=tool_context), deadline),
                )
            except asyncio.CancelledError as exc:
                # ADK cancelled the batch or the invocation (releases before 2.13 never
                # tell on_tool_error_callback): recorded here, for every release.
                cancelled = self._claim(tool_context)
                if cancelled is not None:
                    await _cancelled(cancelled.step, exc)
                raise
            if isinstance(ran, kit.CancelledByPolicy):
                self._claim(tool_context)  # settled by the turn; after_tool_callback skips it
                return _as_response(ran.answer)
            return ran

        try:
            twin.run_async = run_async  # type: ignore[method-assign]
        except (AttributeError, TypeError, ValueError):  # a frozen or validated model
            return tool
        return twin


def _hide_keys(request: LlmRequest, specs: Mapping[str, GuardedTool]) -> None:
    """Remove each write's idempotency argument from the declarations the model reads.

    Raises:
        PolicyError: a write tool does not accept its argument, or requires it.
    """
    for tool in request.config.tools or ():
        declarations = getattr(tool, "function_declarations", None) or ()
        for declaration in declarations:
            spec = specs.get(declaration.name or "")
            if spec is None:
                continue
            arg = spec.idempotency_arg
            if declaration.parameters_json_schema is not None:
                schema = declaration.parameters_json_schema
                trimmed = without_key_argument(spec.name, schema, spec)
                declaration.parameters_json_schema = trimmed
            elif declaration.parameters is not None:
                parameters = declaration.parameters
                properties = parameters.properties or {}
                given = {
                    "properties": dict.fromkeys(properties),
                    "required": list(parameters.required or ()),
                }
                without_key_argument(spec.name, given, spec)  # the same checks
                parameters.properties = {k: v for k, v in properties.items() if k != arg}
            else:
                without_key_argument(spec.name, {}, spec)  # no arguments: raises


async def _cancelled(step: Step, exc: asyncio.CancelledError) -> None:
    """Record a cancellation (never a failure: a write stays pending, to reconcile)."""
    try:
        await step.afailed(exc)
    except asyncio.CancelledError as raised:  # recorded, and raised again
        if raised is not exc:
            raise


async def _within(awaitable: Awaitable[Any], timeout: float | None) -> Any:
    return await (awaitable if timeout is None else asyncio.wait_for(awaitable, timeout))


def _as_response(answer: Any) -> dict[str, Any]:
    """A guard answer as the dict ADK's function response needs."""
    if isinstance(answer, Mapping):
        return dict(answer)
    return {"result": answer}


def _tool_type(tool: BaseTool) -> ToolType:
    """What kind of tool an ADK tool is, by its class (never imported for the asking).

    An MCP server's tool (``McpTool``) runs on the server's side of its API: ``extension``;
    a retrieval tool (``BaseRetrievalTool``: RAG, files, LlamaIndex) reads a data store:
    ``datastore``; every other tool runs in the application: ``function``.
    """
    names = {kind.__name__ for kind in type(tool).__mro__}
    if "McpTool" in names:
        return "extension"
    if "BaseRetrievalTool" in names:
        return "datastore"
    return "function"
