"""A server reached over streamable HTTP (``url = ...``), for the gateway's connection.

Each message is a POST to the server's URL with the sheet's ``headers``. A request's
answer is read from the POST's body, JSON or an event stream (whose other messages, the
server's progress and requests, are relayed as they come); a notification's or a
response's POST expects 202. The 2025 session: the ``Mcp-Session-Id`` of the
``initialize`` answer goes on every later POST, with the negotiated
``MCP-Protocol-Version``, and after ``notifications/initialized`` a GET stream carries
the server's other messages (a server that answers the GET 405 has none). The
2026-07-28 wire: each request carries its own ``MCP-Protocol-Version``, ``Mcp-Method``
and ``Mcp-Name`` (from its envelope), and a request the gateway gives up on has its POST
closed, the wire's cancellation.

What counts as the server going away, for the server's transport breaker: a connection
that cannot be made or breaks, and a session the server no longer knows (404): then
every request in flight fails as a lost connection, and the connection is made again
after the backoff, with the session's opening said again. An HTTP error status without a
JSON-RPC answer (a 502 from a proxy in front) fails that request alone, the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

import anyio
import httpx2
from anyio.abc import TaskGroup
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
)
from mcp.types import PROTOCOL_VERSION_META_KEY

from toolbreaker.integrations._kit import redact_text
from toolbreaker.integrations.mcp_gateway._sheet import UpstreamSpec
from toolbreaker.integrations.mcp_gateway._upstream import Connection, Deliver, UpstreamGone
from toolbreaker.integrations.mcp_gateway._wire import Frame, id_key

__all__ = ["HttpConnection"]

_SESSION: Final = "mcp-session-id"
_ACCEPT: Final = "application/json, text/event-stream"
_CONNECT_TIMEOUT: Final = 10.0


class HttpConnection(Connection):
    """A streamable-HTTP server; see the module doc."""

    def __init__(self, spec: UpstreamSpec, deliver: Deliver, **options: Any) -> None:
        super().__init__(spec, deliver, **options)
        self._client: httpx2.AsyncClient | None = None
        self._session: str | None = None
        self._version: str | None = None
        self._posts: dict[tuple[str, object], anyio.CancelScope] = {}
        self._modern: set[tuple[str, object]] = set()
        self._lost = anyio.Event()
        self._why = ""
        self._tg: TaskGroup | None = None

    async def _connect(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        timeout = httpx2.Timeout(_CONNECT_TIMEOUT, read=None)
        self._client = httpx2.AsyncClient(headers=dict(self.spec.headers), timeout=timeout)
        self._session = None
        self._version = None
        self._lost = anyio.Event()

    async def _relay(self) -> str:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await self._lost.wait()
            tg.cancel_scope.cancel()
        self._tg = None
        return self._why

    def _gone(self, why: str) -> None:
        if not self._lost.is_set():
            # Masked: a URL may carry credentials, and this is written to the host's log.
            self._why = redact_text(f"server {self.spec.name!r} ({self.spec.url}): {why}")
            self._lost.set()

    async def _write(self, frame: Frame) -> None:
        tg = self._tg
        if tg is None or self._client is None:
            raise anyio.ClosedResourceError
        if frame.method == "notifications/cancelled":
            target = id_key(frame.params.get("requestId"))
            if target in self._modern:  # the 2026 wire cancels by closing the stream
                scope = self._posts.get(target)
                if scope is not None:
                    scope.cancel()
                return
        if frame.is_request:
            scope = anyio.CancelScope()
            key = id_key(frame.id)
            self._posts[key] = scope
            if _modern_version(frame) is not None:
                self._modern.add(key)
            tg.start_soon(self._exchange, frame, scope)
            return
        await self._post(frame, None)

    async def _exchange(self, frame: Frame, scope: anyio.CancelScope) -> None:
        key = id_key(frame.id)
        try:
            with scope:
                await self._post(frame, frame.id)
        finally:
            if self._posts.get(key) is scope:
                del self._posts[key]
            self._modern.discard(key)

    async def _post(self, frame: Frame, request_id: object) -> None:
        client = self._client
        assert client is not None
        try:
            async with client.stream(
                "POST", self.spec.url or "", content=frame.raw, headers=self._headers(frame)
            ) as response:
                if frame.method == "initialize" and response.headers.get(_SESSION):
                    self._session = response.headers[_SESSION]
                if response.status_code == 404 and self._session is not None:
                    self._gone("the server ended the session (404)")
                    return
                if request_id is None:
                    if frame.method == "notifications/initialized":
                        self._start_stream()
                    return
                await self._read_answer(response, frame)
        except httpx2.TransportError as exc:
            self._gone(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)

    async def _read_answer(self, response: httpx2.Response, frame: Frame) -> None:
        """Relay what the server answered a request: JSON, or an event stream."""
        kind = response.headers.get("content-type", "").lower()
        if kind.startswith("text/event-stream"):
            async for data in _events(response):
                await self._inbound(Frame.read(data), frame)
            return
        body = await response.aread()
        if kind.startswith("application/json") and body.strip():
            found = Frame.read(body)
            if found.message is not None:
                await self._inbound(found, frame)
                return
        self.abandon(
            frame.id,
            UpstreamGone(
                f"server {self.spec.name!r} answered HTTP {response.status_code} "
                "without a JSON-RPC response"
            ),
        )

    async def _inbound(self, found: Frame, request: Frame) -> None:
        if found.is_response and request.method == "initialize":
            result = (found.message or {}).get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            self._version = version if isinstance(version, str) else None
        await self.inbound(found)

    def _headers(self, frame: Frame) -> dict[str, str]:
        headers = {"accept": _ACCEPT, "content-type": "application/json"}
        if self._session is not None:
            headers[_SESSION] = self._session
        version = _modern_version(frame)
        if version is not None:
            headers[MCP_PROTOCOL_VERSION_HEADER] = version
            method = frame.method or ""
            headers[MCP_METHOD_HEADER] = method
            named = NAME_BEARING_METHODS.get(method)
            value = frame.params.get(named) if named is not None else None
            if isinstance(value, str) and value.isascii() and value.isprintable():
                headers[MCP_NAME_HEADER] = value
        elif self._version is not None:
            headers[MCP_PROTOCOL_VERSION_HEADER] = self._version
        return headers

    def _start_stream(self) -> None:
        if self._tg is not None:
            self._tg.start_soon(self._stream)

    async def _stream(self) -> None:
        """The session's GET stream: the server's messages about no request of ours."""
        client = self._client
        if client is None or self._session is None:
            return
        headers = {"accept": "text/event-stream", _SESSION: self._session}
        if self._version is not None:
            headers[MCP_PROTOCOL_VERSION_HEADER] = self._version
        with contextlib.suppress(httpx2.TransportError):
            async with client.stream("GET", self.spec.url or "", headers=headers) as response:
                if response.status_code != 200:
                    return  # the server has no such stream (405): nothing to relay
                async for data in _events(response):
                    await self.inbound(Frame.read(data))

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        with anyio.CancelScope(shield=True), contextlib.suppress(httpx2.HTTPError):
            if self._session is not None:
                with anyio.move_on_after(2):
                    await client.delete(self.spec.url or "", headers={_SESSION: self._session})
            await client.aclose()
        self._gone("the gateway closed the connection")


def _modern_version(frame: Frame) -> str | None:
    """The 2026-07-28 version a request's envelope names (``None``: a 2025 session's)."""
    meta = frame.params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


async def _events(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The data of each ``message`` event of a server-sent event stream."""
    data: list[str] = []
    event = "message"
    async for line in response.aiter_lines():
        if not line:
            if data and event == "message":
                yield "\n".join(data).encode()
            data, event = [], "message"
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
    if data and event == "message":
        yield "\n".join(data).encode()
