"""One host session, relayed to one MCP server through the breakers and the run guard.

What the host sends goes to the server as it came, and what the server sends goes to
the host as it came, both ways, whatever the method (resources, prompts, completions,
logging, progress, sampling and elicitation requests from the server, the host's
answers to them): the session reads each message's method and id, never rewrites it.
It steps in for:

- ``tools/call``: through :class:`~toolbreaker.integrations.mcp.GuardedClient` (the
  tool's breaker, the server's transport breaker, the run guard), whose client is the
  relay (:mod:`._relay`). A healthy call's answer is the server's bytes; a call the
  guard answers gets the guard's result (``isError``, the tool-unavailable JSON ...);
- ``tools/list``: through the guard too, which learns each tool's annotations (its
  risk class) and, with ``hide_open_tools``, leaves out the tools whose breaker is
  open; the host then hears ``notifications/tools/list_changed`` when that changes;
- every other request: relayed under the server's deadline (the server row's
  ``timeout_ms``): a server that does not answer in time, or is gone, is answered with a
  JSON-RPC error, never left waiting;
- ``notifications/cancelled``: relayed, and the call it names ends without a response;
- the session's opening (``initialize``, ``notifications/initialized``,
  ``server/discover``, ``logging/setLevel``): kept, and said again to a restarted
  server before anything else.

Ids are the host's own on the way to the server (the server's response is the host's
bytes); the gateway's own requests use ids of their own (see :mod:`._wire`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp import MCPError
from mcp.types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    CONNECTION_CLOSED,
    PROTOCOL_VERSION_META_KEY,
    REQUEST_TIMEOUT,
    CallToolResult,
    ListToolsResult,
    TextContent,
)

from toolbreaker.integrations._kit import (
    Registry,
)
from toolbreaker.integrations.mcp import GuardedClient
from toolbreaker.integrations.mcp_gateway._relay import (
    HostCall,
    HostCancelled,
    RelayClient,
    RelayedError,
    relayed_frame,
)
from toolbreaker.integrations.mcp_gateway._sheet import UpstreamSpec
from toolbreaker.integrations.mcp_gateway._upstream import Connection, UpstreamGone
from toolbreaker.integrations.mcp_gateway._wire import (
    Frame,
    error_frame,
    id_key,
    own_ids,
    result_frame,
    stderr_line,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        RunGuard,
    )


__all__ = ["OPENING", "START_TIMEOUT", "HostSession", "SessionPlan", "ToHost"]

#: Requests and notifications that open a session: said again to a restarted server.
OPENING: Final = frozenset(
    {"initialize", "notifications/initialized", "server/discover", "logging/setLevel"}
)
#: The ``_meta`` keys of the 2026-07-28 envelope the gateway's own requests repeat.
_ENVELOPE: Final = (PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY)
_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
_INTERNAL: Final = -32603
#: Seconds a server gets to answer the session's opening (``initialize``): a server that
#: is installed on its first start (``npx -y ...``) takes its time.
START_TIMEOUT: Final = 120.0

#: How the session writes to the host: a frame, and the host request it relates to.
ToHost = Callable[[Frame, object | None], Awaitable[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class SessionPlan:
    """What a host session is built with (the gateway's part of it).

    Attributes:
        spec: the server.
        registry: the breakers.
        timeout: seconds: the deadline of calls and requests without a sheet row's.
        run_guard: makes the session's run guard from the client's name (``None``: the
            session has breakers only).
        connect: makes the connection to the server, given where its frames go.
        release: told of the session's run guard when the session ends.
    """

    spec: UpstreamSpec
    registry: Registry
    timeout: float
    run_guard: Callable[[str], RunGuard | None] | None
    connect: Callable[[Callable[[Frame], Awaitable[None]]], Connection]
    release: Callable[[RunGuard], None] | None = None


class HostSession:
    """One host session; see the module doc.

    Args:
        plan: the server and how to guard it.
        to_host: writes a frame to the host.
    """

    def __init__(self, plan: SessionPlan, to_host: ToHost) -> None:
        self.plan = plan
        self.spec = plan.spec
        self.to_host = to_host
        self.connection = plan.connect(self._from_server)
        self.relay = RelayClient(self)
        #: The session's guarded client, made at its first tool request.
        self.guarded: GuardedClient | None = None
        #: The client's name, as it introduced itself (``initialize`` or the envelope).
        self.client_name: str | None = None
        self._calls: dict[tuple[str, object], HostCall] = {}
        self._opening: list[Frame] = []
        self._envelope: dict[str, Any] = {}
        self._schemas: dict[str, Mapping[str, Any] | None] = {}
        self._own_id = own_ids()
        self._tg: TaskGroup | None = None
        self._listened: dict[tuple[str, object], object] = {}  # listen streams for tools
        self._listed = False  # whether the host has listed the tools
        self._hidden: frozenset[str] = frozenset()
        self._announced = False
        self._modern = False

    # -- the session's life -----------------------------------------------------------------

    async def run(self, frames: AsyncIterator[Frame]) -> None:
        """Relay until the host's frames end (or the server never came up).

        Raises:
            UpstreamGone: the server went away before it ever answered (a command that
                cannot start, or exits at once); :attr:`Connection.failed_start` says why.
        """
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await tg.start(self._serve_server)
            async for frame in frames:
                await self.from_host(frame)
            await self.close()
            tg.cancel_scope.cancel()
        if self.connection.failed_start is not None:
            raise UpstreamGone(self.connection.failed_start)

    async def _serve_server(self, *, task_status: TaskStatus[None]) -> None:
        """The connection; when the server went away before it ever answered, the end."""
        await self.connection.serve(self._reopen, task_status=task_status)
        why = self.connection.failed_start
        if why is None:
            return
        with anyio.CancelScope(shield=True):
            for call in list(self._calls.values()):
                await self._error(call, CONNECTION_CLOSED, why)
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def close(self) -> None:
        """Stop the server; the session's run guard is released."""
        await self.connection.close()
        guard = self.guarded.guard if self.guarded is not None else None
        if guard is not None and self.plan.release is not None:
            self.plan.release(guard)

    # -- from the host ----------------------------------------------------------------------

    async def from_host(self, frame: Frame) -> None:
        """One frame from the host: relayed, or answered through the guard."""
        tg = self._tg
        assert tg is not None
        method = frame.method
        if frame.is_request:
            self._stamp(frame)
            call = HostCall(frame)
            self._calls[id_key(frame.id)] = call
            if method == "tools/call":
                tg.start_soon(self._tool_call, call)
            elif method == "tools/list":
                tg.start_soon(self._tool_list, call)
            else:
                if method in OPENING:
                    self._keep_opening(frame)
                if method == "subscriptions/listen":
                    self._listen(frame)
                tg.start_soon(self._relay, call)
            return
        if method == "notifications/cancelled":
            self._cancelled(frame)
        elif method in OPENING:
            self._keep_opening(frame)
        with contextlib.suppress(UpstreamGone):  # nothing waits for a notification
            await self.connection.send(frame)

    def _keep_opening(self, frame: Frame) -> None:
        """Keep the last frame of each opening method, in the order they came."""
        self._opening = [kept for kept in self._opening if kept.method != frame.method]
        self._opening.append(frame)

    def _stamp(self, frame: Frame) -> None:
        """Learn the client's name and the 2026-07-28 envelope of its requests."""
        params = frame.params
        if frame.method == "initialize":
            info = params.get("clientInfo")
            if isinstance(info, dict) and isinstance(info.get("name"), str):
                self.client_name = info["name"]
            return
        meta = params.get("_meta")
        if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
            self._modern = True
            self._envelope = {key: meta[key] for key in _ENVELOPE if key in meta}
            info = meta.get(CLIENT_INFO_META_KEY)
            if self.client_name is None and isinstance(info, dict):
                name = info.get("name")
                self.client_name = name if isinstance(name, str) else None

    def _cancelled(self, frame: Frame) -> None:
        """The host gave up on a request: end its wait; it is answered with nothing."""
        call = self._calls.get(id_key(frame.params.get("requestId")))
        if call is not None:
            call.cancelled = True
            self.connection.abandon(call.frame.id, HostCancelled("the host cancelled it"))

    def _listen(self, frame: Frame) -> None:
        wanted = frame.params.get("notifications")
        if isinstance(wanted, dict) and wanted.get("toolsListChanged"):
            self._listened[id_key(frame.id)] = frame.id

    # -- relayed requests ------------------------------------------------------------------

    async def _relay(self, call: HostCall) -> None:
        opening = call.frame.method in ("initialize", "server/discover")
        deadline = max(self._deadline(), START_TIMEOUT) if opening else self._deadline()
        try:
            response = await self.request(call.frame, deadline, call)
        except HostCancelled:
            return
        except UpstreamGone as exc:
            await self._error(call, CONNECTION_CLOSED, str(exc))
            return
        except TimeoutError as exc:
            await self._error(call, REQUEST_TIMEOUT, str(exc))
            return
        finally:
            self._done(call)
        if call.frame.method == "initialize":
            response = self._initialized(response)
        await self.to_host(response, call.frame.id)

    def _initialized(self, response: Frame) -> Frame:
        """The server's ``initialize`` answer; with ``tools.listChanged`` when tools hide."""
        result = (response.message or {}).get("result")
        if not self.spec.hide_open_tools or not isinstance(result, dict):
            return response
        capabilities = result.get("capabilities")
        tools = capabilities.get("tools") if isinstance(capabilities, dict) else None
        if isinstance(tools, dict) and tools.get("listChanged") is True:
            return response
        patched = dict(result)
        patched["capabilities"] = {
            **(capabilities if isinstance(capabilities, dict) else {}),
            "tools": {**(tools if isinstance(tools, dict) else {}), "listChanged": True},
        }
        return result_frame(response.id, patched)

    def _done(self, call: HostCall) -> None:
        key = id_key(call.frame.id)
        if self._calls.get(key) is call:
            del self._calls[key]
        self._listened.pop(key, None)

    async def _error(self, call: HostCall, code: int, message: str) -> None:
        if not call.cancelled:
            await self.to_host(error_frame(call.frame.id, code, message), call.frame.id)

    def _deadline(self) -> float:
        """The deadline of a relayed request: the server row's, else the gateway's."""
        row = self.plan.registry.boundaries().get((self.spec.name, "default"))
        if row is not None and row.timeout is not None:
            return row.timeout
        default = self.plan.registry.default_timeout
        return default if default is not None else self.plan.timeout

    # -- tools through the guard ------------------------------------------------------------

    def _guard(self) -> GuardedClient:
        guarded = self.guarded
        if guarded is None:
            spec = self.spec
            make = self.plan.run_guard
            guard = make(self.client_name or "host") if make is not None else None
            client: Any = self.relay  # the client it guards: the host's requests, relayed
            guarded = self.guarded = GuardedClient(
                client,
                server=spec.name,
                registry=self.plan.registry,
                guard=guard,
                timeout=self.plan.timeout,
                risk=spec.risk,
                default_risk=spec.default_risk,
                authorize=lambda request: spec.allows(request.tool),
                fallbacks=spec.fallbacks,
                hide_open_tools=spec.hide_open_tools,
            )
        return guarded

    async def _tool_call(self, call: HostCall) -> None:
        params = call.frame.params
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, (dict, type(None))):
            await self._relay(call)  # the server answers a malformed call as it would
            return
        options: dict[str, Any] = {"wire": call, "meta": call.meta}
        if "inputResponses" in params:
            options["input_responses"] = params["inputResponses"]
        if "requestState" in params:
            options["request_state"] = params["requestState"]
        try:
            result = await self._guard().call_tool(name, arguments, **options)
        except HostCancelled:
            return
        except RelayedError as exc:
            await self._answer_error(call, exc)
            return
        except MCPError as exc:
            await self._error(call, exc.code, exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - the host gets an answer, the operator a line
            stderr_line(f"toolbreaker mcp: {self.spec.name}: {name}: {type(exc).__name__}: {exc}")
            await self._error(call, _INTERNAL, f"toolbreaker gateway: {type(exc).__name__}")
            return
        finally:
            self._done(call)
        frame = relayed_frame(result)
        if frame is None or frame.id != call.frame.id:
            frame = result_frame(call.frame.id, self._dump(self._structured(name, result)))
        if not call.cancelled:
            await self.to_host(frame, call.frame.id)
        await self._after_call(name)

    def _structured(self, name: str, result: Any) -> Any:
        """A success the guard answered, with the structured content its schema asks for.

        A write reconciled in a resumed run is answered with the record the status check
        found; a tool with an output schema needs it as structured content, or the host's
        SDK refuses the answer. Added when the record matches the schema.
        """
        if (
            not isinstance(result, CallToolResult)
            or result.is_error
            or result.structured_content is not None
            or self.output_schema(name) is None
        ):
            return result
        text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
        try:
            said = json.loads(text)
        except ValueError:
            return result
        if not isinstance(said, dict):
            return result
        for found in (said, said.get("result")):  # the record, or the guard's {"result": ...}
            if isinstance(found, dict) and self.relay.conforms(name, found):
                return result.model_copy(update={"structured_content": found})
        return result

    async def _answer_error(self, call: HostCall, exc: RelayedError) -> None:
        frame = exc.frame
        if frame.id != call.frame.id:  # an error of a request of the gateway's own
            await self._error(call, exc.code, exc.message)
        elif not call.cancelled:
            await self.to_host(frame, call.frame.id)

    def _dump(self, result: Any) -> dict[str, Any]:
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not self._modern and dumped.get("resultType") == "complete":
            del dumped["resultType"]  # a 2026-07-28 field, the SDK's default: not ours to add
        return dumped

    async def _tool_list(self, call: HostCall) -> None:
        try:
            listing = await self._guard().list_tools(wire=call)
        except HostCancelled:
            return
        except RelayedError as exc:
            await self._answer_error(call, exc)
            return
        except MCPError as exc:
            await self._error(call, exc.code, exc.message)
            return
        finally:
            self._done(call)
        frame = relayed_frame(listing)
        sent = _tool_names(frame)
        shown = frozenset(tool.name for tool in listing.tools)
        if frame is None or sent != shown:
            frame = result_frame(call.frame.id, self._dump(listing))
        hidden = sent - shown
        self._hidden = self._hidden | hidden if "cursor" in call.frame.params else hidden
        self._listed = True
        self._announced = False
        await self.to_host(frame, call.frame.id)
        if hidden and self._tg is not None:
            self._tg.start_soon(self._announce_when_back)

    async def _after_call(self, tool: str) -> None:
        """Tell the host its tool list changed when a breaker hid or showed a tool."""
        guarded = self.guarded
        if not self.spec.hide_open_tools or guarded is None or self._announced:
            return
        if await self._down(guarded, tool) != (tool in self._hidden):
            await self._announce()

    async def _announce_when_back(self) -> None:
        """After a listing that hid tools: tell the host when the first may be back."""
        guarded = self.guarded
        if guarded is None:
            return
        waits = []
        for tool in self._hidden:
            down, wait = await _hidden_for(guarded, tool)
            if down and wait is not None:
                waits.append(wait)
        if not waits:
            return
        await anyio.sleep(min(waits) / 1000 + 0.05)
        if not self._announced:
            await self._announce()

    async def _down(self, guarded: GuardedClient, tool: str) -> bool:
        return (await _hidden_for(guarded, tool))[0]

    async def _announce(self) -> None:
        self._announced = True
        note: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        if not self._modern:
            await self.to_host(Frame.of(note), None)
            return
        for listen_id in list(self._listened.values()):
            await self.to_host(
                Frame.of({**note, "params": {"_meta": {_SUBSCRIPTION_ID: listen_id}}}), listen_id
            )

    # -- the link the relay uses --------------------------------------------------------------

    async def request(self, frame: Frame, timeout: float | None, call: HostCall | None) -> Frame:
        """Send ``frame`` and wait up to ``timeout`` for its response; see :class:`Link`."""
        try:
            return await self.connection.request(frame, timeout)
        except TimeoutError:
            await self.connection.forget(frame)
            raise

    def own_request(self, method: str, params: Mapping[str, Any] | None) -> Frame:
        """A request of the gateway's own, stamped with the host's envelope (2026-07-28)."""
        body: dict[str, Any] = dict(params or {})
        if self._envelope:
            body["_meta"] = {**self._envelope, **dict(body.get("_meta") or {})}
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._own_id(), "method": method}
        if body:
            message["params"] = body
        return Frame.of(message)

    def output_schema(self, tool: str) -> Mapping[str, Any] | None:
        """The output schema the tool declared in the last listing."""
        return self._schemas.get(tool)

    def learn(self, listing: ListToolsResult) -> None:
        """Take note of the tools' output schemas."""
        for tool in listing.tools:
            self._schemas[tool.name] = tool.output_schema

    # -- from the server ----------------------------------------------------------------------

    async def _from_server(self, frame: Frame) -> None:
        """A frame of the server nobody here waits for: the host's."""
        if (
            frame.is_response
            and isinstance(frame.id, str)
            and frame.id.startswith("toolbreaker-gateway:")
        ):
            return  # a late answer to a request of the gateway's own
        if frame.is_response:
            return  # a late answer to a request the host was answered for already
        await self.to_host(frame, _related(frame))

    async def _reopen(self) -> None:
        """Say the session's opening again to a restarted server."""
        for frame in list(self._opening):
            if frame.is_request:
                message = {**(frame.message or {}), "id": self._own_id()}
                with contextlib.suppress(UpstreamGone, TimeoutError):
                    await self.connection.request(Frame.of(message), START_TIMEOUT, opening=True)
            else:
                with contextlib.suppress(UpstreamGone):
                    await self.connection.send(frame, opening=True)
        if self._listed and self.spec.hide_open_tools:
            await self._announce()  # the restarted server's tools may differ


async def _hidden_for(guarded: GuardedClient, tool: str) -> tuple[bool, int | None]:
    server = guarded.server_breaker_for(tool)
    if server is not None:
        down, wait = await server.ahidden_for_ms()
        if down:
            return down, wait
    return await guarded.breaker_for(tool).ahidden_for_ms()


def _tool_names(frame: Frame | None) -> frozenset[str]:
    """The tool names a server's ``tools/list`` response holds."""
    result = (frame.message or {}).get("result") if frame is not None else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        return frozenset()
    return frozenset(
        tool["name"]
        for tool in tools
        if isinstance(tool, dict) and isinstance(tool.get("name"), str)
    )


def _related(frame: Frame) -> object | None:
    """The host request a server's notification belongs to, when it says (its progress)."""
    if frame.method == "notifications/progress":
        return ("progress", frame.params.get("progressToken"))
    return None
