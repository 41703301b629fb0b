"""MCP client adapter: a proxy around ``call_tool`` of the MCP Python SDK (``mcp`` 2.3).

(Over 800 lines for now: the server's liveness check after a timeout joined the call path
here; it moves to a part of its own when the shells are split into parts.)

Wrap a connected :class:`mcp.Client` (or a :class:`mcp.ClientSession`) and call tools
through the proxy; everything else passes through to the client::

    async with Client(server) as client:
        tools = GuardedClient(client, server="catalog", registry=registry, guard=guard,
                              timeout=10)
        result = await tools.call_tool("search", {"q": "usb cable"})

Breakers
--------
One breaker per server *and* tool: the server name is the breaker's dependency and the
tool name its operation (``registry.get(server, tool)``, key ``"catalog:search"``). A
server often fronts several upstreams (search and billing behind one process): a sick
search upstream must not sideline billing, and a boundary sheet configures each tool as
its own ``[catalog.search]`` row with its timeout, fallback and owner. For one breaker
per server pass ``key=lambda tool: (server, "default")``.

Beside them, one *transport* breaker per server, shared by all of its tools: the
server's own row (``registry.get(server, "default")``, key ``"catalog"``, configured by
a ``[catalog.default]`` sheet row, whose ``timeout_ms`` is also the deadline of tools
without one). It counts only what shows the server itself is gone, by the core's rule
(:mod:`toolbreaker.core._breaker.transport`): any JSON-RPC response (a result,
``is_error`` or not, or a protocol error) is a success, so a tool's error never trips it;
a lost connection or a dead process is a failure. A timeout is one tool's slowness until
the server proves otherwise: the proxy then sends a liveness ping (``ping``; on the
2026-07-28 revision, which has none, ``server/discover``) with its own deadline
(``ping_timeout``, :data:`DEFAULT_PING_TIMEOUT`), and only a ping that gets no answer
counts against the server. A dead server is learned once: once its breaker is open
every tool of the server is rejected locally, without a round trip, with the
tool-unavailable result naming the server
(``server_unavailable_result``); after the cooldown one call
probes it under the core's probe lease. A tool whose ``key`` is the server's own row (one
breaker per server) has no second breaker. Pass ``server_breaker=False`` to leave it out.

What counts
-----------
- ``is_error`` results: the SDK hands tool errors over as text, so :func:`result_error`
  looks for an HTTP status, in ``structured_content`` (``status``, ``status_code``) or in
  the text (``HTTP 503``, ``HTTP Error 429``, ``status code 502``), and a
  ``Retry-After``. 5xx and 429 are failures, other statuses and errors without a status
  are ignored: an error the server does not explain is no evidence against it. Pass
  ``classify_result`` for a server that words its errors differently.
- malformed successes: a result that does not match the tool's declared output schema
  (the SDK refuses it) is a bad gateway, :class:`MalformedResult` (502): a failure of
  the tool, an unknown outcome for a write, and an ``is_error`` result for the model,
  never raised to the host; the server's transport breaker hears a success (it answered).
- deadlines: every call has one (``timeout``, or the breaker's from the boundary sheet,
  or the server's row's).
  It is the SDK's read timeout, with an :func:`anyio.fail_after` a moment later
  (:data:`BACKSTOP_GRACE`) around the whole call for what the read timeout does not
  cover (several input-required rounds, a re-list, a stuck send), so a hung *or dead*
  server returns. The SDK's ``REQUEST_TIMEOUT`` and the backstop are a ``timeout``
  failure of the tool; ``CONNECTION_CLOSED`` (the server process died) is a network
  failure. Both come back as an ``is_error`` result, never as a hang; a timeout's
  liveness ping adds at most ``ping_timeout`` to it.
- other SDK errors (invalid parameters, an unknown method ...) are ignored by the breaker
  and raised to the caller unchanged, as the plain client would.

Rounds and tasks
----------------
The 2026-07-28 revision's answers that are not a call's outcome (the core decides what
each is: :mod:`toolbreaker.core._run.rounds`):

- an ``input_required`` round counts as nothing (no success, no failure, no repeat): one
  call spans its rounds, with one run-guard step and the breakers' permits (a probe's
  lease, a bulkhead slot) held until the final answer. :class:`mcp.Client` answers the
  rounds itself; a caller that drives them (``allow_input_required=True`` on a
  :class:`mcp.ClientSession`) gets the ``InputRequiredResult`` and sends the same call
  again with ``input_responses``/``request_state``, which continues the open call
  (:meth:`GuardedClient.aclose_rounds` settles the calls it will not send again);
- a ``task`` result (the tasks extension; give the client :class:`TasksExtension`) is
  no committed write: the proxy polls ``tasks/get`` while a write stays ``pending`` in the
  journal (never sent again by a resumed run), and the task's final status settles it:
  ``completed`` is the call's result, ``failed`` a certain failure
  (:class:`TaskFailedError`), anything else an unknown outcome
  (:class:`TaskOutcomeUnknown`; also past ``task_timeout``).

What the model sees
-------------------
A rejected call is not sent: the proxy returns ``CallToolResult(is_error=True)`` whose
only content is the tool-unavailable JSON (which names the fallback), so a host forwards
it to the model unchanged. Other answers of the guard (a stopped run, blocked writes, an
unknown write outcome, a denied destructive call) come back the same way. The result's
``_meta`` says which (:data:`ANSWER_META_KEY`) and, once the run stopped, carries the
stop packet (:data:`STOP_PACKET_META_KEY`) for the host, not for the model. Any other
result, successful or not, is the server's own.

Run guards
----------
With a :class:`~toolbreaker.RunGuard` every call also goes through the run's budgets,
loop detection and safe writes. A write's idempotency key travels in the request's
``_meta`` under :data:`IDEMPOTENCY_META_KEY` (the arguments are left alone, so the tool's
input schema need not change); the server reads it from
``ctx.request_context.meta``. MCP has no run of its own to stop: once the guard stops the
run, every call answers with the stop result without reaching the server, and
:meth:`GuardedClient.stop_packet` (``await astop_packet()`` on the event loop, which
reads a shared journal off it) returns the packet; the host loop ends its run there.

Risk classes come from the user first (``risk=``, or tools already added to the guard),
then from the server's :class:`~mcp.types.ToolAnnotations` (see
:func:`risk_from_annotations`). A destructive tool is ``irreversible`` and needs an
authority check: without ``authorize=`` every call of it is *denied* (the model is told it
needs approval; the tool never runs). Annotations are hints from the server: declare the
tools you do not trust the server to describe.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypedDict, cast

from toolbreaker._extras import require
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.integrations._described import check_adapter
from toolbreaker.integrations._kit import (
    Breaker,
    BreakerOptions,
    CallEnd,
    CheckEnd,
    Registry,
    Risk,
    RiskClass,
    Stop,
    answer_kind,
    needs_liveness_check,
    server_unavailable_result,
    transport_outcome,
)
from toolbreaker.runtime import (
    Permit,
    Rejection,
    Step,
    StopPacket,
    ToolType,
    hidden_tools_line,
)

require("mcp", "mcp")

import anyio  # noqa: E402 - after require(), which words the missing-extra error
from mcp import Client, ClientSession, MCPError  # noqa: E402
from mcp.shared.dispatcher import ProgressFnT  # noqa: E402
from mcp.types import (  # noqa: E402
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    RequestParamsMeta,
    TextContent,
    ToolAnnotations,
)
from pydantic import ValidationError  # noqa: E402

from toolbreaker.integrations._mcp_results import (  # noqa: E402
    MalformedResult,
    ToolResultError,
    malformed_result,
    result_error,
)
from toolbreaker.integrations._mcp_tasks import (  # noqa: E402
    RoundsAbandoned,
    TaskFailedError,
    TaskOutcomeUnknown,
    await_task,
    result_type_of,
    rounds_key,
    task_of,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        ActionRequest,
        GuardedTool,
        RunGuard,
    )


__all__ = [
    "IDEMPOTENCY_META_KEY",
    "GuardedClient",
    "MalformedResult",
    "RoundsAbandoned",
    "TaskFailedError",
    "TaskOutcomeUnknown",
    "ToolResultError",
]

#: Seconds after the deadline at which the backstop cancels a call the SDK's read timeout
#: did not end.
BACKSTOP_GRACE: Final = 0.1
#: Seconds the liveness ping after a timed-out call waits for the server's answer, by default.
DEFAULT_PING_TIMEOUT: Final = 1.0
#: Seconds a call accepted as a task waits for the task's outcome, by default.
DEFAULT_TASK_TIMEOUT: Final = 600.0
IDEMPOTENCY_META_KEY: Final = "toolbreaker/idempotency-key"
"""The request ``_meta`` key that carries a write's idempotency key."""
#: The result ``_meta`` key naming what a synthesized result is: ``tool_unavailable``,
#: ``run_stopped``, ``writes_blocked``, ``outcome_unknown``, ``denied``, ``error`` or
#: ``journal`` (a confirmed write answered from the run's journal).
ANSWER_META_KEY: Final = "toolbreaker/answer"
#: The result ``_meta`` key carrying the stop packet once the run stopped or writes are
#: blocked (a JSON-ready dict, secrets masked).
STOP_PACKET_META_KEY: Final = "toolbreaker/stop-packet"

# Guard answers, most specific first: a required tool's outage also stops the run.
_ANSWER_KINDS: Final = ("run_stopped", "writes_blocked", "tool_unavailable", "outcome_unknown")
_STOPPING: Final = ("run_stopped", "writes_blocked")
_MAX_PAGES: Final = 100


class _About(TypedDict):
    """A tool as the step observers hear of it (``begin``'s keywords)."""

    tool_type: ToolType
    description: str | None


# One call in flight across its rounds: its step, the server's permit and breaker, and its
# deadline.
_Round: TypeAlias = "tuple[Step, Permit | Rejection | None, Breaker | None, float]"


def risk_from_annotations(
    annotations: ToolAnnotations | None, default: RiskClass = "read"
) -> RiskClass:
    """The risk class a tool's annotations imply, by the MCP spec's defaults.

    - ``read_only_hint=True`` -> ``read``;
    - any write hint (``read_only_hint=False``, ``destructive_hint`` or
      ``idempotent_hint`` set): ``reversible_write`` when ``destructive_hint`` is
      ``False``, else ``irreversible`` (the spec's default for a writing tool is
      destructive; ``idempotent_hint`` says nothing about damage);
    - no hint at all (no annotations, or only ``title``/``open_world_hint``) -> ``default``.
    """
    if annotations is None:
        return default
    if annotations.read_only_hint is True:
        return "read"
    if annotations.destructive_hint is False:
        return "reversible_write"
    if (
        annotations.destructive_hint is True
        or annotations.read_only_hint is False
        or annotations.idempotent_hint is not None
    ):
        return "irreversible"
    return default


def _refuse(_request: ActionRequest) -> bool:
    """The authority check of a destructive tool nobody authorized: fail closed."""
    return False


class GuardedClient:
    """A proxy around an MCP client's ``call_tool`` that guards every call.

    Args:
        client: a connected :class:`mcp.Client` or :class:`mcp.ClientSession`.
        server: the server's name: the breakers' dependency (never taken from the
            server's self-reported info).
        registry: where the breakers live; share it between proxies (and processes,
            through its store) to share state. A private one when omitted.
        guard: the run guard of the current run; without one only breakers apply.
        timeout: the deadline in seconds of calls whose breaker has none (no sheet row
            timeout, no registry default).
        risk: risk classes by tool name (a class, or a function of a call's arguments:
            ``{"run_shell": shell_risk_of("command")}``); they override the server's
            annotations.
        default_risk: the risk class of a tool without risk hints.
        authorize: the authority check of irreversible calls; without it they are denied.
        fallbacks: fallback tool by tool name, for the tool-unavailable result of
            breakers the boundary sheet does not describe (a sheet row names its own).
        key: maps a tool name to its breaker's ``(dependency, operation)``; default
            ``(server, tool)``.
        classify_result: turns an ``is_error`` result into the exception the breaker
            classifies (default :func:`result_error`); ``None`` means success.
        meta_key: the request ``_meta`` key of the idempotency key.
        hide_open_tools: opt in to leaving out of :meth:`list_tools` every tool whose
            breaker rejects all calls now; :meth:`hidden_tools_line` is the system-prompt
            line for the host that names them and until when (a tool whose server's
            breaker is open is hidden too).
        server_breaker: keep one transport breaker for the whole server (its row is
            ``(server, "default")``) beside the per-tool breakers; see the module doc.
        task_timeout: seconds a call the server accepted as a task waits for the task's
            outcome; past it the outcome is unknown (a write is never sent again).
        ping_timeout: seconds the liveness ping after a timed-out call waits: a server
            that answers it in time is alive, whatever the slow tool does (see the
            module doc).
    """

    def __init__(
        self,
        client: Client | ClientSession,
        *,
        server: str,
        registry: Registry | None = None,
        guard: RunGuard | None = None,
        timeout: float | None = None,
        risk: Mapping[str, Risk] | None = None,
        default_risk: RiskClass = "read",
        authorize: Callable[[ActionRequest], bool] | None = None,
        fallbacks: Mapping[str, str] | None = None,
        key: Callable[[str], tuple[str, str]] | None = None,
        classify_result: Callable[[CallToolResult], BaseException | None] = result_error,
        meta_key: str = IDEMPOTENCY_META_KEY,
        hide_open_tools: bool = False,
        server_breaker: bool = True,
        task_timeout: float = DEFAULT_TASK_TIMEOUT,
        ping_timeout: float = DEFAULT_PING_TIMEOUT,
    ) -> None:
        if not isinstance(server, str) or not server:
            raise PolicyError("GuardedClient needs the server's name", field="server")
        check_adapter(
            registry=registry,
            guard=guard,
            flags={"hide_open_tools": hide_open_tools, "server_breaker": server_breaker},
            hooks={"authorize": authorize, "key": key},
            functions={"classify_result": classify_result},
            seconds={"timeout": timeout, "task_timeout": task_timeout},
            names={"default_risk": default_risk, "meta_key": meta_key},
            risks=risk,
            fallbacks=fallbacks,
        )
        self.client = client
        self.server = server
        self.registry = registry if registry is not None else Registry()
        self.guard = guard
        self.timeout = timeout
        self.risk = dict(risk or {})
        self.default_risk: RiskClass = default_risk
        self.authorize = authorize
        self.fallbacks = dict(fallbacks or {})
        self.key = key or (lambda tool: (self.server, tool))
        self.classify_result = classify_result
        self.meta_key = meta_key
        self.hide_open_tools = hide_open_tools
        self._hidden: dict[str, int | None] = {}
        self._annotations: dict[str, ToolAnnotations | None] = {}
        self._descriptions: dict[str, str] = {}
        self._listed = False
        self._breakers: dict[str, Breaker] = {}
        self.use_server_breaker = server_breaker
        #: The server's transport breaker's row: ``(server, "default")``, key ``server``.
        self.server_key: tuple[str, str] = (server, "default")
        self._server_breaker: Breaker | None = None
        self.task_timeout = task_timeout
        self.ping_timeout = ping_timeout
        self._rounds: dict[str, list[_Round]] = {}

    # -- the proxied calls ----------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: ProgressFnT | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> CallToolResult:
        """Call a tool through its breaker (and the run guard); same signature as the SDK's.

        A call the caller sends again with ``input_responses`` or ``request_state`` (it
        drives the input-required rounds itself) continues the call whose round asked
        for them: see "Rounds and tasks" in the module doc.

        Returns:
            The server's result, or a synthesized ``is_error`` result when the call was
            rejected, stopped, timed out or lost its connection (see the module doc); an
            :class:`~mcp.types.InputRequiredResult` when the caller drives the rounds
            (``allow_input_required=True`` on a :class:`mcp.ClientSession`).

        Raises:
            PolicyError: no deadline is configured for the tool.
            MCPError: a protocol error that says nothing about the server's health.
        """
        args = dict(arguments or {})
        call_key = rounds_key(name, args)
        held = self._held_round(call_key, kwargs)
        if held is not None:
            step, permit, server, deadline = held  # the call goes on: not a second call
            _continued(step.permit, permit)
        else:
            begun = await self._begin(name, args, read_timeout_seconds)
            if isinstance(begun, CallToolResult):
                return begun
            step, permit, server, deadline = begun
        request_meta = dict(meta or {})
        if step.idempotency_key is not None:
            request_meta[self.meta_key] = step.idempotency_key
        try:
            with anyio.fail_after(deadline + BACKSTOP_GRACE):
                result: Any = await self.client.call_tool(
                    name,
                    step.args,
                    read_timeout_seconds=deadline,
                    progress_callback=progress_callback,
                    meta=cast("RequestParamsMeta", request_meta) if request_meta else None,
                    **kwargs,
                )
            handle = task_of(result)
            answered = answer_kind(result_type_of(result if handle is None else handle))
            if answered == "interim":
                # An input-required round: no outcome for anyone; the call (its permits,
                # a probe's lease, a bulkhead slot) stays open until it is sent again.
                self._rounds.setdefault(call_key, []).append((step, permit, server, deadline))
                return cast("CallToolResult", result)
            if answered == "task" and handle is not None:
                # Accepted as a task: the server answered (its transport breaker hears
                # so now); the call, and a write's pending entry, wait for its outcome.
                await self._settle_server(server, permit, name, None, None)
                server = None
                result = await await_task(
                    self._session(), handle, read_timeout=deadline, wait=self.task_timeout
                )
                _continued(step.permit)  # each poll had its deadline: none was late
        except BaseException as exc:
            malformed = malformed_result(name, exc)
            if malformed is not None:
                # The server answered, with a success its own schema refuses: the round
                # trip proves it reachable; the tool failed (and a write may be made).
                await self._settle_server(server, permit, name, None, None)
                return await self._answer(await step.afailed(malformed))
            failure = _dependency_failure(exc)
            dead = _server_unreachable(failure)
            opened = await self._settle_server(server, permit, name, failure, exc)
            answer = await step.afailed(failure)
            if isinstance(exc, (TaskFailedError, TaskOutcomeUnknown)):
                return await self._answer(answer)
            if not dead:
                raise  # a protocol error: the caller handles it as without the proxy
            if opened is not None:
                # This failure opened the server's breaker: the model hears it now.
                kind = _kind(answer)
                if kind == "error":
                    answer = opened
                elif kind == "tool_unavailable":
                    answer = server_unavailable_result(answer, self.server)
            return await self._answer(answer)
        await self._settle_server(server, permit, name, None, None)
        error = self.classify_result(result)
        if error is not None:
            answer = await step.afailed(error)
            return await self._answer(answer) if _kind(answer) != "error" else result
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        answer = await step.asucceeded(dumped)
        return result if answer is dumped else await self._answer(answer)

    async def _begin(
        self, name: str, args: dict[str, Any], requested: float | None
    ) -> CallToolResult | _Round:
        """Admit a new call: the run guard, the server's breaker, the tool's breaker.

        Returns the call's round (its step, the server's permit, the server's breaker and
        the deadline), or the result of a call that is not sent.
        """
        server = self.server_breaker_for(name)
        permit: Permit | Rejection | None = None
        if self.guard is None:
            breaker = self.breaker_for(name)
            deadline = self._deadline(breaker, requested)
            if server is not None:
                # The server first: a dead one is rejected before the tool's breaker hears
                # of the call.
                permit = await server.aadmit(timeout=self._round_trip(deadline))
                if isinstance(permit, Rejection):
                    rejected = self._server_rejection(permit, name)
                    return await self._answer(rejected.result_for(name))
            step = await breaker.abegin(name, args, **self._about(name))
        else:
            spec = await self._spec(self.guard, name, requested)
            deadline = self._deadline(spec.breaker, requested)
            step = await self.guard.abegin(name, args, **self._about(name))
            if step.answer is None and server is not None:
                # The run guard first (a stopped run, the turn's limit ...), then the server:
                # a rejection is a local one for the guard (a breaker inside the tool).
                permit = await server.aadmit(timeout=self._round_trip(deadline))
                if isinstance(permit, Rejection):
                    answer = await step.afailed(self._server_rejection(permit, name))
                    return await self._answer(answer)
        if step.answer is not None:
            if isinstance(permit, Permit):
                await permit.arecord("ignored")  # not sent: no evidence about the server
            return await self._answer(step.answer)
        return step, permit, server, deadline

    def _held_round(self, key: str, kwargs: Mapping[str, Any]) -> _Round | None:
        """The open call that a call sent again with input answers continues, if any."""
        if kwargs.get("input_responses") is None and kwargs.get("request_state") is None:
            return None
        waiting = self._rounds.get(key)
        if not waiting:
            return None  # e.g. resumed from a persisted round: a new call
        held = waiting.pop(0)
        if not waiting:
            del self._rounds[key]
        return held

    @property
    def open_rounds(self) -> int:
        """Calls waiting to be sent again with the answers an input-required round asked for."""
        return sum(len(waiting) for waiting in self._rounds.values())

    async def aclose_rounds(self) -> int:
        """Settle every call still waiting to be sent again with its answers; how many.

        Each is :class:`RoundsAbandoned` for its breaker (ignored: a probe's lease and a
        bulkhead slot are given back) and the run guard (a write's outcome is unknown).
        """
        held = [call for waiting in self._rounds.values() for call in waiting]
        self._rounds.clear()
        for step, permit, server, _deadline in held:
            await self._settle_server(server, permit, step.tool, None, None)
            await step.afailed(RoundsAbandoned(f"{step.tool}: its input-required round was closed"))
        return len(held)

    def _session(self) -> ClientSession:
        return self.client.session if isinstance(self.client, Client) else self.client

    async def list_tools(self, *args: Any, **kwargs: Any) -> ListToolsResult:
        """The client's ``list_tools``; the proxy also learns each tool's annotations.

        With ``hide_open_tools``, tools whose breaker rejects every call now are left out
        (see :meth:`hidden_tools_line`); a shared store is asked off the event loop.
        """
        listing: ListToolsResult = await self.client.list_tools(*args, **kwargs)
        self._learn(listing)
        if not self.hide_open_tools:
            return listing
        kept = []
        for tool in listing.tools:
            server = self.server_breaker_for(tool.name)
            down, wait = await server.ahidden_for_ms() if server is not None else (False, None)
            if not down:
                down, wait = await self.breaker_for(tool.name).ahidden_for_ms()
            if down:
                self._hidden[tool.name] = wait
            else:
                self._hidden.pop(tool.name, None)
                kept.append(tool)
        return listing.model_copy(update={"tools": kept})

    def hidden_tools_line(self) -> str:
        """The system-prompt line naming the tools the last listing hid ("" if none)."""
        return hidden_tools_line(self._hidden)

    def __getattr__(self, name: str) -> Any:
        """Everything but ``call_tool`` and ``list_tools`` is the client's own."""
        if name == "client":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.client, name)

    # -- inspection -----------------------------------------------------------------------

    def breaker_for(self, tool: str) -> Breaker:
        """The breaker of ``tool`` on this server, created on first use."""
        breaker = self._breakers.get(tool)
        if breaker is None:
            breaker = self._breakers[tool] = self._get(tool, with_fallback=True)
        return breaker

    def server_breaker_for(self, tool: str) -> Breaker | None:
        """The server's transport breaker that guards calls of ``tool``, created on first use.

        ``None`` with ``server_breaker=False``, or when ``tool``'s own breaker is the
        server's row already (a ``key`` that maps every tool to ``(server, "default")``).
        """
        if not self.use_server_breaker or self.key(tool) == self.server_key:
            return None
        if self._server_breaker is None:
            self._server_breaker = self._row(self.server_key, self.server, None)
        return self._server_breaker

    def _get(self, tool: str, *, with_fallback: bool) -> Breaker:
        fallback = self.fallbacks.get(tool) if with_fallback else None
        if fallback is not None and fallback not in self.registry.tool_names():
            # A fallback served by this server gets its breaker first, so the registry
            # knows the name it points the model at.
            self._get(fallback, with_fallback=False)
        return self._row(self.key(tool), tool, fallback)

    def _row(self, row: tuple[str, str], tool: str, fallback: str | None) -> Breaker:
        """The breaker of ``row``: a boundary-sheet row configures it, else these options.

        The key is taken as given (``exact``): a tool the sheet has no row for runs on the
        defaults (and says so), never on another tool's row; a server name close to one
        the sheet has is refused, naming it.
        """
        dependency, operation = row
        options: BreakerOptions = {}
        if not self.registry.resolve(dependency, operation, exact=True).row:
            options["tool"] = tool
            if self.timeout is not None and self.registry.default_timeout is None:
                options["timeout"] = self.timeout
            if fallback is not None:
                options["fallback"] = fallback
        return self.registry.get(dependency, operation, exact=True, **options)

    def _server_rejection(self, rejection: Rejection, tool: str) -> CircuitOpen:
        """The server breaker's rejection as the local rejection of ``tool``, naming the server."""

        def render(_reason: str, _ms: int | None, *, tool: str = tool) -> dict[str, Any]:
            return server_unavailable_result(rejection.result_for(tool), self.server)

        return CircuitOpen(
            rejection.breaker.key, rejection.reason, rejection.retry_after_ms, render
        )

    async def _settle_server(
        self,
        server: Breaker | None,
        permit: Permit | Rejection | None,
        tool: str,
        failure: BaseException | None,
        raised: BaseException | None,
    ) -> dict[str, Any] | None:
        """Record the round trip on the server's breaker, by the core's transport rule.

        Any response is a success (``failure`` is ``None``, or a protocol error); a lost
        connection is a failure; a timeout is judged by a liveness ping (see
        :func:`~toolbreaker.core._breaker.transport.transport_outcome`); anything else (a
        cancellation) is ignored. Returns the tool-unavailable result naming the server
        when this failure opened it.
        """
        if server is None or not isinstance(permit, Permit):
            return None
        end = _call_end(failure, raised)
        check: CheckEnd | None = None
        if needs_liveness_check(end):
            check, failure = await self._liveness()  # the ping's failure is the evidence
        outcome = transport_outcome(end, check)
        if outcome != "failure" or failure is None:
            await permit.arecord("success" if outcome == "success" else "ignored")
            return None
        await permit.arecord(failure)
        opened = server.failure_result(tool, failure)
        if not opened.get("tool_unavailable"):
            return None
        return server_unavailable_result(opened, self.server)

    async def _liveness(self) -> tuple[CheckEnd, BaseException | None]:
        """Ping the server after a timed-out call: how the ping ended, and its failure.

        The ping has its own deadline (``ping_timeout``): a server that answers it is
        alive, whatever one tool does; one that does not answers nothing. The 2026-07-28
        revision removed ``ping``: a session on it sends its cheapest request instead,
        ``server/discover`` at its own version (any answer, an error too, is a sign of life).
        """
        # A Client's session; a ClientSession; or a wrapper of either, read by duck typing.
        client: Any = self.client
        session: Any = client.session if isinstance(client, Client) else client
        session = getattr(session, "session", session)
        try:
            with anyio.fail_after(self.ping_timeout):
                if getattr(session, "discover_result", None) is not None:
                    await session.send_discover(session.protocol_version)
                else:
                    await session.send_ping()
        except Exception as exc:  # noqa: BLE001 - every end is judged below; cancellation is not caught
            failure = _dependency_failure(exc)
            if isinstance(failure, TimeoutError):
                lost = TimeoutError(
                    f"MCP server {self.server!r} answered no ping within "
                    f"{self.ping_timeout:g} s after a call timed out"
                )
                lost.__cause__ = exc
                return "timeout", lost
            if isinstance(failure, ConnectionError):
                return "closed", failure
            if isinstance(exc, MCPError):
                return "answered", None  # a JSON-RPC error is an answer
            return "other", None
        return "answered", None

    @property
    def stopped(self) -> Stop | None:
        """Why the run stopped (``None`` while it may go on, or without a run guard)."""
        return self.guard.stopped if self.guard is not None else None

    def stop_packet(self) -> StopPacket | None:
        """The operator packet once the run stopped or its writes are blocked, else ``None``."""
        guard = self._stopped_guard()
        return None if guard is None else guard.stop_packet()

    async def astop_packet(self) -> StopPacket | None:
        """:meth:`stop_packet` for the event loop: a shared journal is read off it."""
        guard = self._stopped_guard()
        return None if guard is None else await guard.astop_packet()

    def _stopped_guard(self) -> RunGuard | None:
        """The run guard, if it stopped the run or blocks its writes."""
        guard = self.guard
        if guard is None or (guard.stopped is None and guard.writes_blocked is None):
            return None
        return guard

    # -- helpers --------------------------------------------------------------------------

    async def _spec(self, guard: RunGuard, name: str, requested: float | None) -> GuardedTool:
        breaker = self.breaker_for(name)
        risk: Risk | None = self.risk.get(name)
        if risk is None:
            if name not in self._annotations and not self._listed:
                await self._discover(self._deadline(breaker, requested))
            risk = risk_from_annotations(self._annotations.get(name), self.default_risk)
        authorize = self.authorize if self.authorize is not None else _refuse
        return guard.ensure_tool(
            name,
            risk=risk,
            breaker=breaker,
            idempotency_arg=None,
            authorize=authorize if risk == "irreversible" or callable(risk) else None,
        )

    async def _discover(self, deadline: float) -> None:
        """List the server's tools once, page by page, to read their annotations.

        A listing that fails leaves the tools unknown (``default_risk``) and is tried
        again for the next unknown tool.
        """
        server = self._server_breaker
        if server is not None and (await server.ahidden_for_ms())[0]:
            return  # the server is out: no round trip (the tools stay unknown)
        cursor: str | None = None
        try:
            with anyio.fail_after(deadline):
                for _ in range(_MAX_PAGES):
                    if isinstance(self.client, ClientSession):
                        page = await self.client.list_tools(
                            params=PaginatedRequestParams(cursor=cursor)
                        )
                    else:
                        page = await self.client.list_tools(cursor=cursor)
                    self._learn(page)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except Exception:  # noqa: BLE001 - unknown tools fall back to default_risk
            return
        self._listed = True

    def _learn(self, listing: ListToolsResult) -> None:
        for tool in listing.tools:
            self._annotations[tool.name] = tool.annotations
            if tool.description:
                self._descriptions[tool.name] = tool.description

    def _about(self, name: str) -> _About:
        """What the step observers hear of a tool: the server runs it, and its description.

        The tool type is ``extension``; the description is known once a listing told it
        (a host lists the tools before it calls one).
        """
        return {"tool_type": "extension", "description": self._descriptions.get(name)}

    def _deadline(self, breaker: Breaker | None, requested: float | None) -> float:
        deadline = breaker.timeout if breaker is not None else None
        if deadline is None and self._server_breaker is not None:
            deadline = self._server_breaker.timeout  # the server's sheet row
        if deadline is None:
            deadline = self.timeout
        if requested is not None:
            deadline = requested if deadline is None else min(deadline, requested)
        if deadline is None:
            raise PolicyError(
                f"no deadline for MCP tool calls to {self.server!r}: pass timeout= or set "
                "timeout in the boundary sheet (a hung server must become a failure)",
                field="timeout",
            )
        return deadline

    def _round_trip(self, deadline: float) -> float:
        """The server's transport deadline of a call: the call's, its backstop and a ping.

        The server's breaker judges the whole exchange, the liveness ping after a timeout
        included, so the ping's answer is on time for it.
        """
        return deadline + BACKSTOP_GRACE + self.ping_timeout

    async def _answer(self, answer: Any) -> CallToolResult:
        """A guard's or breaker's answer as a tool result the host forwards unchanged.

        The stop packet it carries once the run stopped is built off the event loop.
        """
        if isinstance(answer, Mapping) and "content" in answer:
            try:  # a confirmed write's result, answered from the journal
                journaled = CallToolResult.model_validate(answer)
            except ValidationError:
                pass
            else:
                return journaled.model_copy(
                    update={"meta": {**(journaled.meta or {}), ANSWER_META_KEY: "journal"}}
                )
        payload = dict(answer) if isinstance(answer, Mapping) else {"ok": True, "result": answer}
        kind = _kind(payload)
        meta: dict[str, Any] = {ANSWER_META_KEY: kind}
        packet = await self.astop_packet() if kind in _STOPPING else None
        if packet is not None:
            meta[STOP_PACKET_META_KEY] = packet.to_dict()
        return CallToolResult.model_validate(
            {
                "content": [
                    TextContent(type="text", text=json.dumps(payload, sort_keys=True, default=str))
                ],
                "isError": payload.get("ok") is False,
                "_meta": meta,
            }
        )


def _continued(*permits: object) -> None:
    """The call goes on after an answer that was not its outcome (see Permit.continued)."""
    for permit in permits:
        if isinstance(permit, Permit):
            permit.continued()


def _kind(answer: Any) -> str:
    if not isinstance(answer, Mapping):
        return "result"
    for kind in _ANSWER_KINDS:
        if answer.get(kind):
            return kind
    if answer.get("denied"):
        return "denied"
    return "error" if answer.get("ok") is False else "result"


def _dependency_failure(exc: BaseException) -> BaseException:
    """The SDK's timeout and lost connection as the exceptions every classifier knows."""
    if isinstance(exc, MCPError):
        if exc.code == REQUEST_TIMEOUT:
            failure: BaseException = TimeoutError(f"MCP request timed out: {exc.message}")
        elif exc.code == CONNECTION_CLOSED:
            failure = ConnectionError(f"MCP server connection closed: {exc.message}")
        else:
            return exc
    elif isinstance(exc, (anyio.BrokenResourceError, anyio.EndOfStream)):
        failure = ConnectionError(f"MCP server connection broken: {type(exc).__name__}")
    else:
        return exc
    failure.__cause__ = exc
    return failure


def _server_unreachable(failure: BaseException) -> bool:
    """Whether ``failure`` (from :func:`_dependency_failure`) means no response came back."""
    return isinstance(failure, (TimeoutError, ConnectionError))


def _call_end(failure: BaseException | None, raised: BaseException | None) -> CallEnd:
    """How a call ended for its transport: ``failure`` from :func:`_dependency_failure`."""
    if failure is None or (isinstance(raised, MCPError) and failure is raised):
        return "answered"  # a result, or a JSON-RPC error: the server is reachable
    if isinstance(failure, ConnectionError):
        return "closed"
    if isinstance(failure, TimeoutError):
        return "timeout"
    return "other"
