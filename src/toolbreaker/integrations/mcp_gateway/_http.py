"""The gateway over streamable HTTP: each server at ``/mcp/NAME``, bound to 127.0.0.1.

An ASGI app served by uvicorn. Before anything else, every request is checked, as the
MCP spec asks of a local server:

- ``Host`` must name the address it is bound to (a loopback name when bound to
  loopback): a page whose DNS name was rebound to 127.0.0.1 is answered 421;
- ``Origin``, when a browser sends one, must be a loopback origin or one the operator
  allowed (``--allow-origin``): any other is answered 403;
- with a token (required when bound to anything but loopback), ``Authorization:
  Bearer TOKEN``: else 401;
- the path must name a server of the sheet (``/mcp/NAME``; ``/mcp`` when there is one):
  else 404. A host never reaches a server the sheet does not name.

Then the two eras of the wire:

- **2025 (a session).** ``initialize`` opens a host session (:class:`~._session.
  HostSession`, with a connection of its own to the server: a stdio server's command
  runs once per session) and answers with an ``Mcp-Session-Id``. A request's POST is
  answered with an event stream that carries the server's messages about it (its
  progress, by its ``progressToken``) and then its response (JSON when the host does not
  accept event streams); a notification's or a response's POST with 202. A GET opens the
  session's stream for the server's other messages (its requests, its notifications);
  what comes while none is open waits for one (the last :data:`_BACKLOG`). DELETE ends
  the session; a session nobody used for :data:`IDLE_TIMEOUT` ends too.
- **2026-07-28 (no session).** Each POST is one request (``MCP-Protocol-Version:
  2026-07-28``), relayed in the session of its server and client (by the name in the
  request's envelope), under an id of the gateway's own so that two hosts' ids never
  meet; closing the response stream cancels the request.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import ipaddress
import itertools
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolbreaker.errors import PolicyError
from toolbreaker.integrations.mcp_gateway._session import HostSession, ToHost
from toolbreaker.integrations.mcp_gateway._upstream import UpstreamGone
from toolbreaker.integrations.mcp_gateway._wire import (
    MAX_LINE,
    Frame,
    encode,
    id_key,
    stderr_line,
)

__all__ = ["IDLE_TIMEOUT", "Gateway", "GatewayApp", "serve_http"]

#: Seconds after which a 2025 session nobody used is ended (its server stopped).
IDLE_TIMEOUT: Final = 30 * 60.0
#: Server messages kept for a session's stream while none is open.
_BACKLOG: Final = 100
_KEEPALIVE: Final = 15.0
_SESSION_HEADER: Final = b"mcp-session-id"


class Gateway(Protocol):
    """What the HTTP front needs of the gateway it serves.

    Its servers' names and a host session of one: the
    :class:`toolbreaker.integrations.mcp_gateway.Gateway` this module is a part of, which
    it does not import.
    """

    @property
    def servers(self) -> Mapping[str, object]:
        """The servers, by name."""
        ...

    def session(self, server: str, to_host: ToHost) -> HostSession:
        """A host session of ``server`` writing to ``to_host``."""
        ...


_VERSION_HEADER: Final = b"mcp-protocol-version"
_MODERN: Final = frozenset({"2026-07-28"})
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def serve_http(
    gateway: Gateway,
    *,
    host: str,
    port: int,
    token: str | None,
    allowed_origins: tuple[str, ...],
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``gateway`` over HTTP until cancelled; ``task_status.started(port)``.

    Raises:
        PolicyError: bound to an address other than loopback without a token, or the
            address cannot be bound.
    """
    import uvicorn

    if token is None and not _is_loopback(host):
        raise PolicyError(
            f"serving on {host} reaches other machines: it needs a bearer token", field="token"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without
    # it a request's body waits for a delayed ACK (40 ms a call).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise PolicyError(f"cannot listen on {host}:{port}: {exc.strerror}", field="port") from None
    bound = sock.getsockname()[1]
    app = GatewayApp(gateway, host=host, port=bound, token=token, allowed_origins=allowed_origins)
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    stopped = anyio.Event()

    async def run_server() -> None:
        try:
            with anyio.CancelScope(shield=True):  # it stops when told to, closing its sockets
                await server.serve(sockets=[sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as tg:
            app.task_group = tg
            tg.start_soon(app.reap_idle)
            tg.start_soon(run_server)
            task_status.started(bound)
            try:
                await stopped.wait()
            finally:
                server.should_exit = True
                with anyio.CancelScope(shield=True):
                    await app.close()
                    with anyio.move_on_after(10):
                        await stopped.wait()
                tg.cancel_scope.cancel()
    finally:
        sock.close()


class _Channel:
    """Where the server's messages about one POSTed request go: its response stream."""

    __slots__ = ("original", "receive", "send", "token")

    def __init__(self, original: object, token: object) -> None:
        self.original = original
        self.token = token
        self.send: MemoryObjectSendStream[Frame]
        self.receive: MemoryObjectReceiveStream[Frame]
        self.send, self.receive = anyio.create_memory_object_stream[Frame](64)


class HttpSession:
    """A host session over HTTP: its POSTs' streams, its GET stream, and a backlog."""

    def __init__(self, app: GatewayApp, server: str, *, modern: bool) -> None:
        self.app = app
        self.modern = modern
        self.session = app.gateway.session(server, self.to_host)
        self.used = time.monotonic()
        self.inbox_send, self.inbox = anyio.create_memory_object_stream[Frame](1024)
        self.posts: dict[tuple[str, object], _Channel] = {}
        self.tokens: dict[tuple[str, object], _Channel] = {}
        self.stream: MemoryObjectSendStream[Frame] | None = None
        self.backlog: collections.deque[Frame] = collections.deque(maxlen=_BACKLOG)
        self.ended = anyio.Event()
        self._ids = itertools.count(1)

    async def run(self) -> None:
        """Relay until the session is closed."""
        try:
            async with self.inbox:
                await self.session.run(_frames(self.inbox))
        except UpstreamGone as exc:  # the server never came up: its requests were answered
            stderr_line(f"toolbreaker mcp: {exc}")
        finally:
            self.ended.set()
            for channel in list(self.posts.values()):
                channel.send.close()
            if self.stream is not None:
                self.stream.close()  # its GET ends

    def open_post(self, frame: Frame) -> tuple[Frame, _Channel]:
        """Register a POSTed request's stream; the frame to relay (with an id of ours)."""
        message = frame.message or {}
        meta = frame.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        channel = _Channel(frame.id, token)
        if self.modern:  # two hosts may use one id: relay it under one of ours
            unique = f"toolbreaker-http:{next(self._ids)}"
            frame = Frame.of({**message, "id": unique})
        self.posts[id_key(frame.id)] = channel
        if token is not None:
            self.tokens[id_key(token)] = channel
        return frame, channel

    def close_post(self, frame: Frame, channel: _Channel) -> None:
        """Forget a request's stream."""
        if self.posts.get(id_key(frame.id)) is channel:
            del self.posts[id_key(frame.id)]
        if channel.token is not None and self.tokens.get(id_key(channel.token)) is channel:
            del self.tokens[id_key(channel.token)]
        channel.send.close()
        channel.receive.close()

    async def to_host(self, frame: Frame, related: object | None) -> None:
        """A frame for the host: to the stream of the request it is about, or the session's."""
        channel: _Channel | None = None
        if frame.is_response:
            channel = self.posts.get(id_key(frame.id))
            if channel is None:
                return  # its POST is gone: nobody to answer
            if self.modern:
                frame = Frame.of({**(frame.message or {}), "id": channel.original})
        elif isinstance(related, tuple) and related and related[0] == "progress":
            channel = self.tokens.get(id_key(related[1]))
        elif related is not None:
            channel = self.posts.get(id_key(related))
        if channel is None and self.stream is None and frame.is_request and self.posts:
            channel = list(self.posts.values())[-1]  # a server's request during a call
        if channel is not None:
            try:
                await channel.send.send(frame)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            else:
                return
        if self.stream is not None:
            try:
                await self.stream.send(frame)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.stream = None
            else:
                return
        self.backlog.append(frame)

    async def close(self) -> None:
        """End the session: its server is stopped."""
        self.inbox_send.close()
        await self.ended.wait()


class GatewayApp:
    """The ASGI app; see the module doc."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        host: str,
        port: int,
        token: str | None,
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.gateway = gateway
        self.token = token.encode() if token else None
        self.port = port
        self.hosts = _allowed_hosts(host, port)
        self.origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)
        self.sessions: dict[str, HttpSession] = {}
        self.modern: dict[tuple[str, str], HttpSession] = {}
        self.task_group: TaskGroup | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request."""
        if scope["type"] != "http":
            return
        headers = {key.lower(): value for key, value in scope.get("headers", [])}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _plain(send, *refusal)
            return
        server = self._server(scope["path"])
        if server is None:
            await _plain(send, 404, "no such MCP server here (the sheet names its servers)")
            return
        method = scope["method"]
        version = headers.get(_VERSION_HEADER, b"").decode("latin-1")
        if method == "POST":
            if version in _MODERN and _SESSION_HEADER not in headers:
                await self._modern_post(server, headers, receive, send)
            else:
                await self._post(server, headers, receive, send)
        elif method == "GET":
            await self._get(headers, send)
        elif method == "DELETE":
            await self._delete(headers, send)
        else:
            await _plain(send, 405, "use POST, GET or DELETE", [(b"allow", b"GET, POST, DELETE")])

    # -- checks ------------------------------------------------------------------------------

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str] | None:
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if self.hosts is not None and host not in self.hosts:
            return 421, "this MCP server answers for its own address only (Host)"
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_allowed(origin.decode("latin-1")):
            return 403, "this Origin may not use this MCP server"
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            scheme, _, credential = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credential.strip(), self.token
            ):
                return 401, "a bearer token is required (Authorization: Bearer ...)"
        return None

    def _origin_allowed(self, origin: str) -> bool:
        cleaned = origin.rstrip("/").lower()
        if cleaned in self.origins:
            return True
        parts = urlsplit(cleaned)
        return parts.scheme in ("http", "https") and _is_loopback(parts.hostname or "")

    def _server(self, path: str) -> str | None:
        parts = [part for part in path.split("/") if part]
        if parts == ["mcp"] and len(self.gateway.servers) == 1:
            return next(iter(self.gateway.servers))
        if len(parts) == 2 and parts[0] == "mcp" and parts[1] in self.gateway.servers:
            return parts[1]
        return None

    # -- the 2025 wire: sessions ---------------------------------------------------------------

    async def _post(
        self, server: str, headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> None:
        frame = await _read_frame(receive, send)
        if frame is None:
            return
        named = headers.get(_SESSION_HEADER)
        if named is None:
            if frame.method != "initialize":
                await _plain(send, 400, "no Mcp-Session-Id: send initialize first")
                return
            session = self._open(server, modern=False)
        else:
            found = self.sessions.get(named.decode("latin-1"))
            if found is None or found.session.spec.name != server:
                await _plain(send, 404, "no such session (it ended): initialize again")
                return
            session = found
        session.used = time.monotonic()
        extra = [] if named is not None else [(_SESSION_HEADER, self._id_of(session).encode())]
        if not frame.is_request:
            await session.inbox_send.send(frame)
            await _plain(send, 202, "", extra)
            return
        await self._answer(session, frame, headers, send, extra)

    def _open(self, server: str, *, modern: bool) -> HttpSession:
        session = HttpSession(self, server, modern=modern)
        if not modern:
            self.sessions[_new_id()] = session
        assert self.task_group is not None
        self.task_group.start_soon(self._run_session, session)
        return session

    async def _run_session(self, session: HttpSession) -> None:
        await session.run()
        for named in [key for key, value in self.sessions.items() if value is session]:
            del self.sessions[named]
        for pair in [key for key, value in self.modern.items() if value is session]:
            del self.modern[pair]

    def _id_of(self, session: HttpSession) -> str:
        return next(key for key, value in self.sessions.items() if value is session)

    async def _answer(
        self,
        session: HttpSession,
        frame: Frame,
        headers: dict[bytes, bytes],
        send: Send,
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        relayed, channel = session.open_post(frame)
        await session.inbox_send.send(relayed)
        events = b"text/event-stream" in headers.get(b"accept", b"")
        answered = False
        try:
            if not events:
                response = await _response_of(channel)
                answered = True
                if response is None:
                    await _plain(send, 503, "the session ended before the response")
                    return
                await _body(send, 200, b"application/json", response.raw, extra)
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                        *extra,
                    ],
                }
            )
            async for out in channel.receive:
                answered = answered or out.is_response
                await send({"type": "http.response.body", "body": _event(out), "more_body": True})
                if out.is_response:
                    break
            answered = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            session.close_post(relayed, channel)
            if session.modern and not answered:  # the host closed the stream: it cancelled
                note = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": relayed.id, "reason": "the host closed the stream"},
                }
                with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
                    session.inbox_send.send_nowait(Frame.of(note))

    async def _get(self, headers: dict[bytes, bytes], send: Send) -> None:
        named = headers.get(_SESSION_HEADER)
        session = self.sessions.get(named.decode("latin-1")) if named is not None else None
        if session is None:
            await _plain(send, 404 if named is not None else 400, "no such session")
            return
        if b"text/event-stream" not in headers.get(b"accept", b""):
            await _plain(send, 406, "the session's stream is text/event-stream")
            return
        stream_send, stream = anyio.create_memory_object_stream[Frame](256)
        if session.stream is not None:
            session.stream.close()  # a new stream replaces the old one
        session.stream = stream_send
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        while session.backlog:
            await send(
                {
                    "type": "http.response.body",
                    "body": _event(session.backlog.popleft()),
                    "more_body": True,
                }
            )
        try:
            async with stream:
                while not session.ended.is_set():
                    session.used = time.monotonic()
                    with anyio.move_on_after(_KEEPALIVE):
                        frame = await stream.receive()
                        await send(
                            {"type": "http.response.body", "body": _event(frame), "more_body": True}
                        )
                        continue
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b": keepalive\n\n",
                            "more_body": True,
                        }
                    )
        except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
            pass
        finally:
            if session.stream is stream_send:
                session.stream = None
            stream_send.close()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _delete(self, headers: dict[bytes, bytes], send: Send) -> None:
        named = headers.get(_SESSION_HEADER)
        session = self.sessions.pop(named.decode("latin-1"), None) if named is not None else None
        if session is None:
            await _plain(send, 404, "no such session")
            return
        await session.close()
        await _plain(send, 200, "")

    # -- the 2026-07-28 wire: a POST is a request -----------------------------------------------

    async def _modern_post(
        self, server: str, headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> None:
        frame = await _read_frame(receive, send)
        if frame is None:
            return
        if not frame.is_request:
            await _plain(send, 202, "")  # no notification from a host on this wire
            return
        meta = frame.params.get("_meta")
        info = meta.get("io.modelcontextprotocol/clientInfo") if isinstance(meta, dict) else None
        client = str(info.get("name", "")) if isinstance(info, dict) else ""
        session = self.modern.get((server, client))
        if session is None:
            session = self.modern[(server, client)] = self._open(server, modern=True)
        session.used = time.monotonic()
        async with anyio.create_task_group() as tg:

            async def cancel_when_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()  # closing the stream cancels the request

            tg.start_soon(cancel_when_gone)
            await self._answer(session, frame, headers, send, [])
            tg.cancel_scope.cancel()

    # -- the app's life ----------------------------------------------------------------------

    async def reap_idle(self) -> None:
        """End the 2025 sessions nobody used for :data:`IDLE_TIMEOUT`."""
        while True:
            await anyio.sleep(60)
            now = time.monotonic()
            for key, session in list(self.sessions.items()):
                if (
                    session.stream is None
                    and not session.posts
                    and now - session.used > IDLE_TIMEOUT
                ):
                    self.sessions.pop(key, None)
                    await session.close()

    async def close(self) -> None:
        """End every session."""
        sessions = [*self.sessions.values(), *self.modern.values()]
        self.sessions.clear()
        self.modern.clear()
        for session in sessions:
            await session.close()


async def _frames(inbox: MemoryObjectReceiveStream[Frame]) -> Any:
    async for frame in inbox:
        yield frame


async def _response_of(channel: _Channel) -> Frame | None:
    async for frame in channel.receive:
        if frame.is_response:
            return frame
    return None


async def _read_frame(receive: Receive, send: Send) -> Frame | None:
    """The POSTed JSON-RPC message; a bad body is answered here (``None``)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_LINE:
            await _plain(send, 413, "the message is too large")
            return None
        if not message.get("more_body"):
            break
    try:
        decoded = json.loads(body)
    except ValueError:
        await _body(send, 400, b"application/json", encode(_parse_error("not JSON")), [])
        return None
    if not isinstance(decoded, dict):
        await _body(
            send, 400, b"application/json", encode(_parse_error("one JSON-RPC message, please")), []
        )
        return None
    return Frame(encode(decoded), decoded)


def _parse_error(why: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": why}}


def _event(frame: Frame) -> bytes:
    return b"event: message\ndata: " + frame.raw.rstrip(b"\n") + b"\n\n"


async def _plain(
    send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await _body(send, status, b"text/plain; charset=utf-8", text.encode(), extra or [])


async def _body(
    send: Send, status: int, kind: bytes, body: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _new_id() -> str:
    import secrets

    return secrets.token_hex(16)


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The ``Host`` headers that name a loopback server (``None``: not bound to loopback).

    Bound to loopback, a ``Host`` of any other name is a page whose DNS name was rebound
    to 127.0.0.1. Bound to anything else, the bearer token is what keeps others out.
    """
    if not _is_loopback(host):
        return None
    names = {*_LOOPBACK_NAMES, host.lower() if ":" not in host else f"[{host.lower()}]"}
    return frozenset(names | {f"{name}:{port}" for name in names})
