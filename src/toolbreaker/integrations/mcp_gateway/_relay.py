"""The client :class:`~toolbreaker.integrations.mcp.GuardedClient` wraps in the gateway.

``GuardedClient`` guards the calls of an MCP client: here the "client" is
:class:`RelayClient`, which sends the host's own request to the server and hands back
what the server answered, parsed as the SDK's client would parse it, with the bytes it
came as. When the guard lets the server's answer through unchanged, the gateway writes
those bytes to the host; when the guard answers instead (a rejected, stopped or
timed-out call), the gateway writes the guard's result.

What the SDK's client would do, the relay does too, so the breakers hear the same
evidence as ``GuardedClient`` around a real client:

- a response that never comes within the deadline is the SDK's ``REQUEST_TIMEOUT``
  (and the server is told, ``notifications/cancelled``); a server that went away is
  ``CONNECTION_CLOSED``;
- a JSON-RPC error is an :class:`~mcp.MCPError` (:class:`RelayedError`, which keeps
  the error's bytes for the host);
- a success that does not match the tool's declared output schema is refused with the
  SDK's own ``RuntimeError`` (a malformed success: a failure of the tool);
- a ``task`` answer (the tasks extension) is a task handle, which the guard follows with
  ``tasks/get`` (:meth:`RelayClient.send_request`) to the task's result;
- an ``input_required`` round is the server's ``InputRequiredResult``.

A host that cancels its call (``notifications/cancelled``) ends the wait with
:class:`HostCancelled`: the guard counts it for nothing (an unknown outcome for a write,
whose request may have reached the server), and the host gets no response, as the spec
says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from jsonschema import ValidationError as SchemaError  # type: ignore[import-untyped]
from jsonschema import exceptions as schema_exceptions
from jsonschema.validators import validator_for  # type: ignore[import-untyped]
from mcp import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    EmptyResult,
    InputRequiredResult,
    ListToolsResult,
)
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from toolbreaker.errors import NotSent, ToolbreakerError
from toolbreaker.integrations._mcp_results import MISSING_STRUCTURED
from toolbreaker.integrations._mcp_tasks import TaskHandle
from toolbreaker.integrations.mcp_gateway._upstream import UpstreamGone
from toolbreaker.integrations.mcp_gateway._wire import Frame, encode

__all__ = [
    "HostCall",
    "HostCancelled",
    "Link",
    "RelayClient",
    "RelayedCall",
    "RelayedError",
    "RelayedInputRequired",
    "RelayedListing",
    "relayed_frame",
]


_M = TypeVar("_M", bound=BaseModel)


class HostCancelled(ToolbreakerError):
    """The host cancelled its request: nothing is answered, nothing is counted."""


class RelayedError(MCPError):
    """A JSON-RPC error from the server, with the frame it came in.

    Attributes:
        frame: the server's response, relayed to the host as it is.
    """

    def __init__(self, frame: Frame) -> None:
        error = frame.message.get("error") if frame.message is not None else None
        error = error if isinstance(error, Mapping) else {}
        code = error.get("code")
        super().__init__(
            code if isinstance(code, int) else -32603,
            str(error.get("message", "")),
            error.get("data"),
        )
        self.frame = frame


class RelayedCall(CallToolResult):
    """A ``tools/call`` result as the server sent it; ``frame`` is never serialised."""

    frame: Any = Field(default=None, exclude=True)


class RelayedInputRequired(InputRequiredResult):
    """An ``input_required`` round as the server sent it."""

    frame: Any = Field(default=None, exclude=True)


class RelayedListing(ListToolsResult):
    """A ``tools/list`` page as the server sent it."""

    frame: Any = Field(default=None, exclude=True)


def relayed_frame(result: object) -> Frame | None:
    """The server's own frame of a result the relay made (``None`` for any other)."""
    if isinstance(result, (RelayedCall, RelayedInputRequired, RelayedListing)):
        frame = result.frame
        return frame if isinstance(frame, Frame) else None
    return None


class HostCall:
    """A host's request as it came, and whether the host has cancelled it.

    Attributes:
        frame: the host's request.
        cancelled: set when the host sent ``notifications/cancelled`` for it.
    """

    __slots__ = ("cancelled", "frame")

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.cancelled = False

    @property
    def meta(self) -> dict[str, Any] | None:
        """The request's ``_meta``."""
        meta = self.frame.params.get("_meta")
        return meta if isinstance(meta, dict) else None


class Link(Protocol):
    """What the relay needs of the host session: the server, and the session's stamp."""

    async def request(self, frame: Frame, timeout: float | None, call: HostCall | None) -> Frame:
        """Send ``frame`` to the server and wait up to ``timeout`` for its response."""

    def own_request(self, method: str, params: Mapping[str, Any] | None) -> Frame:
        """A request of the gateway's own, stamped as the host's session requires."""

    def output_schema(self, tool: str) -> Mapping[str, Any] | None:
        """The output schema ``tool`` declared in the last listing (``None``: none)."""

    def learn(self, listing: ListToolsResult) -> None:
        """Take note of the tools of a listing page (their output schemas)."""


class RelayClient:
    """The client ``GuardedClient`` wraps: the host's requests, relayed; see the module doc."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self._validators: dict[str, tuple[Mapping[str, Any], Any]] = {}

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: object = None,
        *,
        meta: Mapping[str, Any] | None = None,
        wire: HostCall | None = None,
        **_rounds: Any,
    ) -> RelayedCall | RelayedInputRequired | TaskHandle:
        """Send the host's ``tools/call`` (with ``meta`` as its ``_meta``); its answer.

        Raises:
            MCPError: ``REQUEST_TIMEOUT`` or ``CONNECTION_CLOSED`` (what the SDK raises),
                or the server's JSON-RPC error (:class:`RelayedError`).
            HostCancelled: the host cancelled the call.
            RuntimeError: a success that does not match the tool's output schema.
        """
        if wire is None:  # a call of the gateway's own: none is made today
            params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
            if meta:
                params["_meta"] = dict(meta)
            frame = self.link.own_request("tools/call", params)
        else:
            if wire.cancelled:  # before anything left: a certain failure, never unknown
                raise HostCancelled(f"the host cancelled its call of {name!r}") from NotSent(
                    "cancelled before it was sent"
                )
            frame = _with_meta(wire, meta)
        response = await self._exchange(frame, read_timeout_seconds, wire)
        result = _result_of(response)
        kind = result.get("resultType")
        if kind == "task":
            return _parse(TaskHandle, result, response)
        if kind == "input_required":
            found = _parse(RelayedInputRequired, result, response)
            found.frame = response
            return found
        call = _parse(RelayedCall, result, response)
        call.frame = response
        if not call.is_error:
            self._check_output(name, call)
        return call

    async def list_tools(
        self,
        cursor: str | None = None,
        *,
        params: BaseModel | None = None,
        wire: HostCall | None = None,
    ) -> RelayedListing:
        """A ``tools/list`` page: the host's request relayed, or one of the gateway's own."""
        if wire is not None:
            frame = wire.frame
        else:
            if params is not None:
                cursor = getattr(params, "cursor", cursor)
            frame = self.link.own_request("tools/list", {"cursor": cursor} if cursor else None)
        response = await self._exchange(frame, None, wire)
        listing = _parse(RelayedListing, _result_of(response), response)
        listing.frame = response
        self.link.learn(listing)
        return listing

    async def send_request(
        self,
        request: BaseModel,
        result_type: type[BaseModel] | TypeAdapter[Any],
        request_read_timeout_seconds: float | None = None,
        **_: Any,
    ) -> Any:
        """A request of the gateway's own (a task's ``tasks/get``), as the SDK sends one."""
        dumped = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        frame = self.link.own_request(str(dumped["method"]), dumped.get("params"))
        response = await self._exchange(frame, request_read_timeout_seconds, None)
        result = _result_of(response)
        if isinstance(result_type, TypeAdapter):
            return result_type.validate_python(result)
        return result_type.model_validate(result)

    async def send_ping(self, **_: Any) -> EmptyResult:
        """A liveness ping: any answer, a result or an error, says the server is there."""
        frame = self.link.own_request("ping", None)
        response = await self._exchange(frame, None, None)
        _result_of(response)
        return EmptyResult()

    async def _exchange(self, frame: Frame, timeout: float | None, call: HostCall | None) -> Frame:
        try:
            return await self.link.request(frame, timeout, call)
        except UpstreamGone as exc:
            raise MCPError(CONNECTION_CLOSED, str(exc)) from exc
        except TimeoutError as exc:
            raise MCPError(REQUEST_TIMEOUT, str(exc)) from exc

    def _check_output(self, name: str, result: CallToolResult) -> None:
        """Refuse a success that does not match the tool's output schema, as the SDK does."""
        if self.link.output_schema(name) is None:
            return
        if (
            result.structured_content is None
            and "structured_content" not in result.model_fields_set
        ):
            raise RuntimeError(MISSING_STRUCTURED.format(tool=name))
        error = self._schema_error(name, result.structured_content)
        if error is not None:
            raise RuntimeError(
                f"Invalid structured content returned by tool {name}: {error}"
            ) from error

    def conforms(self, name: str, structured: object) -> bool:
        """Whether ``structured`` matches the tool's output schema (``True`` without one)."""
        return self._schema_error(name, structured) is None

    def _schema_error(self, name: str, structured: object) -> SchemaError | None:
        schema = self.link.output_schema(name)
        if schema is None:
            return None
        cached = self._validators.get(name)
        if cached is None or cached[0] is not schema:
            try:
                validator_cls = validator_for(schema)
                validator_cls.check_schema(schema)
            except Exception:  # noqa: BLE001 - a schema that is no schema judges nothing
                return None
            cached = self._validators[name] = (schema, validator_cls(schema))
        error = schema_exceptions.best_match(cached[1].iter_errors(structured))
        return error if isinstance(error, SchemaError) else None


def _with_meta(call: HostCall, meta: Mapping[str, Any] | None) -> Frame:
    """The host's request, with ``meta`` as its ``_meta`` (its own bytes when unchanged)."""
    if (meta or None) == call.meta:
        return call.frame
    message = dict(call.frame.message or {})
    params = dict(call.frame.params)
    if meta:
        params["_meta"] = dict(meta)
    else:
        params.pop("_meta", None)
    message["params"] = params
    return Frame(encode(message), message)


def _result_of(response: Frame) -> dict[str, Any]:
    """The result of a response; its error raised as :class:`RelayedError`."""
    message = response.message or {}
    if "error" in message:
        raise RelayedError(response)
    result = message.get("result")
    if not isinstance(result, dict):
        raise RelayedError(_invalid(response, "a response without a result object"))
    return result


def _parse(model: type[_M], result: dict[str, Any], response: Frame) -> _M:
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        raise RelayedError(
            _invalid(response, f"an invalid result: {exc.error_count()} error(s)")
        ) from exc


def _invalid(response: Frame, why: str) -> Frame:
    return Frame.of(
        {
            "jsonrpc": "2.0",
            "id": response.id,
            "error": {"code": -32603, "message": f"the server sent {why}"},
        }
    )
