"""``toolbreaker dashboard``: a live page of every breaker, read from the event stream.

Needs the ``dashboard`` extra (Starlette and uvicorn), imported only here. The page and
its chart library ship in the wheel (``dashboard_assets/``), so it works offline.

What it serves, on 127.0.0.1 only: ``/`` (the page), ``/api/events`` (Server-Sent Events:
a full snapshot first, then the breakers that changed, the per-second demand, admitted
and rejected series, calibration findings, recent run stops with their masked packets,
and the degradation choices and limit notices: counts per breaker over the series'
window and the most recent ones, masked), ``/api/snapshot`` (the same as one JSON
document), ``/api/breaker?key=K`` (one breaker's history with its receipt fields, runs
of local rejections collapsed into counted lines, times also on the wall clock; its
calibration signals and its recent notices) and, only with
``--allow-actions``, ``POST /api/action`` to isolate or release a breaker with an operator
reason. An action needs the token printed at start-up in ``X-Toolbreaker-Token``, a JSON
body, and an ``Origin`` that is this server; the Host header must be ``127.0.0.1`` or
``localhost`` (no DNS rebinding), and the page may not be framed. The board only reads the
stream: it never takes part in a breaker's decision.

The series and the counts are over the 600 s ending at ``as_of`` (Unix seconds, in
every document): the later of the stream's newest entry and the server's current time,
so while the stream is quiet they fall off with real time, and a connected page is
pushed the change (its event stream ticks every 0.25 s and moves the window; the board
works only when the second changed and pushes only when something left the window).
"""

from __future__ import annotations

import hmac
import json
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from importlib import resources
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from toolbreaker._extras import require
from toolbreaker.cli._board import Board
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._run.redact import REDACTED
from toolbreaker.errors import PolicyError, ToolbreakerError
from toolbreaker.instrumentation.stream import (
    EventStream,
    StreamPublisher,
    open_stream,
)

__all__ = ["StoreActor", "build_app", "serve", "store_actor"]

_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_ASSETS: Final = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "LICENSE.uPlot.txt": "text/plain",
}

#: ``act(key, action, reason)`` carries out an operator action and returns its record.
Actor = Callable[[str, str, str], Mapping[str, Any]]


_T = TypeVar("_T")


class _Feed:
    """Reads new stream entries into the board, at most every ``interval`` seconds.

    Every call also moves the board's window to ``clock()`` (wall time, Unix seconds).
    Refreshes run on worker threads while requests read the board on the event loop, so
    the board is only folded into and read under :meth:`look`'s lock (held for the fold
    or the read, never for the stream's I/O).
    """

    def __init__(
        self,
        stream: EventStream,
        board: Board,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stream = stream
        self.board = board
        self.interval = interval
        self.clock = clock
        self.cursor: str | None = None
        self.error: str | None = None
        self._lock = threading.Lock()  # one refresh at a time
        self._board = threading.Lock()  # one use of the board at a time
        self._last = 0.0

    def look(self, read: Callable[[], _T]) -> _T:
        """``read()``, while no refresh changes the board."""
        with self._board:
            return read()

    def refresh(self) -> None:
        with self._lock:
            try:
                self._read()
            finally:
                # After the read, so the window ends at least at the newest entry; a no-op
                # within the same second, so at most once a second does it do any work.
                now = self.clock()
                with self._board:
                    self.board.advance(now)

    def _read(self) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        try:
            while True:
                rows = self.stream.read(self.cursor, 5_000)
                if rows:
                    self.cursor = rows[-1][0]
                    with self._board:
                        self.board.feed(entry for _, entry in rows)
                if len(rows) < 5_000:
                    break
            self.error = None
        except ToolbreakerError as exc:
            self.error = str(exc)


class StoreActor:
    """Isolates and releases breakers through a store, and publishes what it did."""

    def __init__(self, store: Any, board: Board, stream: EventStream) -> None:
        self.store = store
        self.board = board
        self.publisher = StreamPublisher(stream)

    def __call__(self, key: str, action: str, reason: str) -> Mapping[str, Any]:
        """Apply ``action`` (``isolate`` or ``release``) to ``key`` with ``reason``."""
        from toolbreaker.runtime._breaker._breaker import Breaker

        row = self.board.breakers.get(key)
        if row is None:
            raise PolicyError(f"no breaker {key!r} in the stream", field="key")
        policy = Policy.from_dict(self.board.policy_of(key) or {})
        breaker = Breaker(
            row["dependency"], operation=row["operation"], policy=policy, store=self.store
        )
        if REDACTED in key or breaker.key != key:
            # The board shows names masked and cut: acting on what it shows would isolate
            # a breaker no call goes through.
            raise PolicyError(
                f"{key!r} is the breaker's name masked or cut on the page, not its key: "
                "isolate or release it where its name is known (Breaker.isolate)",
                field="key",
            )
        detach = self.publisher.attach(breaker)  # one action's breaker: detached after it
        try:
            record = breaker.isolate(reason) if action == "isolate" else breaker.release(reason)
        finally:
            detach()
        return record.to_dict()

    def close(self) -> None:
        """Close the store (its connections and feed)."""
        self.store.close()


def store_actor(url: str, board: Board, stream: EventStream) -> StoreActor | None:
    """Isolate and release through the breaker store at ``url`` (SQLite, Redis, PostgreSQL).

    The action is applied with the policy last seen for the key (the defaults when the
    stream no longer holds one; isolate and release force their outcome whatever it is)
    and published to the stream like any transition. ``None`` for ``memory://``: another
    process's memory cannot be reached.
    """
    from toolbreaker.cli._stores import open_store

    if urlsplit(url).scheme == "memory":
        return None  # another process's memory is unreachable
    return StoreActor(open_store(url, stream_url=True), board, stream)


async def _pushes(
    feed: _Feed,
    board: Board,
    document: Callable[[int], dict[str, Any]],
    interval: float,
    since: int,
    *,
    closing: threading.Event,
) -> AsyncIterator[str]:
    """Server-Sent Events: what changed after revision ``since`` (everything for -1).

    It ends when the server is ``closing``, so shutting down never waits for (and then
    cancels) a page that stays connected.
    """
    import anyio

    # A page from before a restart of this server asks for a revision it never reached.
    seen, idle = (since if since <= board.revision else -1), 0
    while not closing.is_set():
        await anyio.to_thread.run_sync(feed.refresh)
        if board.revision != seen:
            payload = document(max(seen, 0))
            seen, idle = board.revision, 0
            yield f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
        else:
            idle += 1
            if idle % 40 == 0:
                yield ": idle\n\n"
        await anyio.sleep(interval)


#: The ``closing`` of an app built without one: it is never set.
_NEVER: Final = threading.Event()
_NOT_JSON: Final = "actions are JSON"


def _refused(headers: Mapping[str, str], token: str) -> str | None:
    """Why a request may not act: another site, not JSON, no token; ``None`` if it may.

    A cross-site form cannot send JSON or a custom header without a CORS preflight this
    server never grants, and a browser always names the page's origin on a POST.
    """
    if headers.get("origin") != f"http://{headers.get('host', '')}":
        return "cross-site request refused (Origin is not this dashboard)"
    if headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return _NOT_JSON
    if not hmac.compare_digest(headers.get("x-toolbreaker-token", "").encode(), token.encode()):
        return "missing or wrong token"
    return None


def _parse_action(raw: bytes) -> tuple[str, str, str] | str:
    """``(key, action, reason)`` from a request body, or what is wrong with it."""
    try:
        body = json.loads(raw)
        key, kind, reason = body["key"], body["action"], body["reason"]
    except (ValueError, KeyError, TypeError):
        return "body must be {key, action, reason}"
    if kind not in ("isolate", "release"):
        return "action must be isolate or release"
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 200:
        return "an operator reason (1-200 characters) is required"
    if not isinstance(key, str):
        return "key must be a string"
    return key, kind, reason.strip()


def build_app(
    stream: EventStream,
    *,
    actor: Actor | None = None,
    token: str | None = None,
    interval: float = 0.25,
    board: Board | None = None,
    clock: Callable[[], float] = time.time,
    closing: threading.Event | None = None,
) -> Any:
    """The Starlette application; actions are enabled when ``actor`` and ``token`` are.

    ``clock`` gives the current wall time (Unix seconds; a test passes its own): every
    request and every tick of a connected page's event stream (each ``interval``) move
    the board's window to it, so counts leave the window while the stream is quiet and
    connected pages are pushed the change. Once ``closing`` is set the pages' event
    streams end (see :func:`dashboard_server`).
    """
    require("starlette", "dashboard")
    import anyio
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    board = board or Board()
    feed = _Feed(stream, board, interval, clock)
    assets = resources.files("toolbreaker.cli") / "dashboard_assets"
    actions = actor is not None and token is not None

    def asset(name: str, media: str) -> Response:
        body = (assets / name).read_bytes()
        return Response(body, media_type=media, headers=_SECURITY_HEADERS)

    async def index(request: Request) -> Response:
        # The first snapshot rides in the page as inert JSON (CSP allows no inline script),
        # so the table renders without waiting for the event stream to connect.
        await anyio.to_thread.run_sync(feed.refresh)
        initial = json.dumps(document(0), separators=(",", ":")).replace("<", "\\u003c")
        page = (assets / "index.html").read_text(encoding="utf-8")
        body = page.replace("<!--initial-->", initial, 1)
        return Response(body, media_type="text/html", headers=_SECURITY_HEADERS)

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _ASSETS:
            return Response("not found", status_code=404)
        return asset(name, _ASSETS[name])

    def document(since: int) -> dict[str, Any]:
        return {
            **feed.look(lambda: board.snapshot(since)),
            "actions": actions,
            "stream": stream.url,
            "error": feed.error,
        }

    async def snapshot(request: Request) -> Response:
        await anyio.to_thread.run_sync(feed.refresh)
        return JSONResponse(document(0), headers=_SECURITY_HEADERS)

    async def one(request: Request) -> Response:
        await anyio.to_thread.run_sync(feed.refresh)
        key = request.query_params.get("key", "")
        row = feed.look(lambda: board.breaker(key))
        if row is None:
            return JSONResponse({"error": "no such breaker"}, status_code=404)
        return JSONResponse(row, headers=_SECURITY_HEADERS)

    async def events(request: Request) -> Response:
        headers = {**_SECURITY_HEADERS, "X-Accel-Buffering": "no"}
        raw = request.query_params.get("since", "-1")
        since = int(raw) if raw.lstrip("-").isdigit() else -1
        body = _pushes(feed, board, document, interval, max(since, -1), closing=closing or _NEVER)
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)

    async def action(request: Request) -> Response:
        def refuse(status: int, why: str) -> Response:
            return JSONResponse({"ok": False, "error": why}, status_code=status)

        if not actions or actor is None or token is None:
            return refuse(403, "read-only: start the dashboard with --allow-actions")
        why = _refused(request.headers, token)
        if why is not None:
            return refuse(415 if why == _NOT_JSON else 403, why)
        parsed = _parse_action(await request.body())
        if isinstance(parsed, str):
            return refuse(400, parsed)
        key, kind, reason = parsed
        try:
            record = await anyio.to_thread.run_sync(actor, key, kind, reason)
        except ToolbreakerError as exc:
            return refuse(409, str(exc))
        return JSONResponse({"ok": True, "record": dict(record)})

    routes = [
        Route("/", index),
        Route("/assets/{name}", static),
        Route("/favicon.ico", favicon),
        Route("/api/snapshot", snapshot),
        Route("/api/events", events),
        Route("/api/breaker", one),
        Route("/api/action", action, methods=["POST"]),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost"]),
    ]
    return Starlette(routes=routes, middleware=middleware)


def listening(port: int) -> socket.socket:
    """A socket bound to 127.0.0.1:``port`` and listening, for the server to serve on.

    Raises:
        PolicyError: the port is taken or not ours to use (field ``port``): one line,
            where uvicorn would log the failure and exit 1.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise PolicyError(
            f"--port: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc} "
            "(another program may use it: choose another --port)",
            field="port",
        ) from None
    return sock


def dashboard_server(app: Any, port: int, *, closing: threading.Event) -> Any:
    """The uvicorn server of ``app`` on 127.0.0.1:``port``; ``closing`` is the app's.

    Asked to exit (a signal, or ``handle_exit`` from another thread), it first sets
    ``closing``, the event :func:`build_app` was given, which ends the pages' event
    streams: it stops at once with pages still connected instead of cancelling them
    after a grace period with a traceback. ``interrupted`` says whether a Ctrl-C
    (``SIGINT``) asked it.
    """
    uvicorn = require("uvicorn", "dashboard")

    class Server(uvicorn.Server):  # type: ignore[misc, name-defined]
        interrupted = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            closing.set()
            self.interrupted = self.interrupted or sig == signal.SIGINT
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    return Server(config)


def serve(url: str, *, port: int = 8765, allow_actions: bool = False) -> int:
    """Serve the dashboard for the stream at ``url`` on 127.0.0.1 until interrupted."""
    require("uvicorn", "dashboard")
    stream = open_stream(url, create=False)  # a page of nothing would read as all clear
    board = Board()
    token = actor = None
    if allow_actions:
        actor = store_actor(url, board, stream)
        if actor is None:
            raise PolicyError(
                "--allow-actions needs the breakers' store (sqlite:///PATH or redis://...)",
                field="allow-actions",
            )
        token = secrets.token_urlsafe(24)
    closing = threading.Event()
    app = build_app(stream, actor=actor, token=token, board=board, closing=closing)
    sock = listening(port)
    print(f"toolbreaker dashboard: http://127.0.0.1:{port}/  (stream {stream.url})")
    if token:
        print(f"actions enabled; operator token: {token}", flush=True)
    sys.stdout.flush()
    server = dashboard_server(app, port, closing=closing)
    with sock:
        server.run(sockets=[sock])
    if server.interrupted:
        # uvicorn raises a Ctrl-C it caught again once it has stopped, but asyncio's own
        # handler can swallow it when the server's task ends first: the command still
        # ends as every command does on an interrupt (exit 130, from main).
        raise KeyboardInterrupt
    return 0
