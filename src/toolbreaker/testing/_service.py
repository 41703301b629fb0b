"""The fault-injecting tool service: a real local HTTP service (see :mod:`toolbreaker.testing`).

``toolbreaker demo`` and the adversarial tests point tools at this service instead of a
mock, so every call crosses a real socket: timeouts, resets and successes hidden behind a
timeout behave as they do against a production API. Standard library only.

Routes (JSON in and out)::

    GET  /health                         {"ok": true}
    GET  /search?q=Q                     {"query": Q, "results": [deterministic items]}
    GET  /search_snapshot?q=Q            the same, plus "as_of" (fixed) and "stale": true
    GET  /orders/<id>                    a seeded order (see ORDER_IDS), or 404
    POST /tickets                        {"title", "body", ...}; 201, or 200 for a repeated
                                         Idempotency-Key (409 if its body differs)
    GET  /tickets                        {"tickets": [...]}
    GET  /tickets?idempotency_key=K      {"tickets": [0 or 1 record]}: the reconcile check
    GET  /tickets/<id>                   one ticket, or 404
    POST /emails, GET /emails[...]       the same for {"to", "template", "period"?}
    POST /v1/chat/completions            an OpenAI chat completion echoing the last user
                                         message, with word-count usage (testing._chat)

Faults are scripted per *route key*, ``"METHOD /first-segment"``: ``"GET /search"``,
``"POST /tickets"``, ``"GET /orders"`` (every order lookup), ``"GET /tickets"`` (list,
lookup and reconcile check alike). Queued faults are consumed one per request, first in
first out; an outage fails every request until it is recovered and leaves the queue alone.

Example::

    with ToolService() as service:
        service.inject("GET /search", Fault(status=503, retry_after=1), Fault(delay=0.2))
        request_json("GET", f"{service.url}/search?q=cable", timeout=2)  # HTTPError 503
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import hashlib
import io
import itertools
import json
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, cast

from toolbreaker.testing._chat import chat_reply
from toolbreaker.testing._faults import MALFORMED_SHAPE, MALFORMED_TRUNCATED, NO_FAULT, Fault
from toolbreaker.testing._scenario import normal_route, route_key

__all__ = [
    "MALFORMED_SHAPE",
    "MALFORMED_TRUNCATED",
    "ORDER_IDS",
    "SNAPSHOT_AS_OF",
    "Fault",
    "ToolService",
    "request_json",
]

#: The fixed date ``/search_snapshot`` claims its (stale) results are from.
SNAPSHOT_AS_OF: Final = "2024-01-01T00:00:00Z"

_ORDERS: Final[Mapping[str, Mapping[str, Any]]] = {
    "A-1001": {"carrier": "UPS", "tracking": "1Z999AA10123456784", "eta": "2024-05-03"},
    "A-1002": {"carrier": "DHL", "tracking": "JD014600006281230000", "eta": "2024-05-06"},
    "A-1003": {"carrier": "USPS", "tracking": "9400100000000000000000", "eta": "2024-05-09"},
}
#: Order ids ``GET /orders/<id>`` knows; any other id answers 404.
ORDER_IDS: Final = tuple(_ORDERS)

_KINDS: Final = {"tickets": "T", "emails": "E"}
_REQUIRED: Final = {"tickets": ("title", "body"), "emails": ("to", "template")}
_OPTIONAL: Final = {"tickets": (), "emails": ("period",)}
_INITIAL_STATUS: Final = {"tickets": "open", "emails": "queued"}
_RESERVED: Final = frozenset({"id", "status", "idempotency_key"})
_VARIANTS: Final = ("Basic", "Pro", "Max")
_MAX_BODY: Final = 1 << 20
_MAX_KEY: Final = 255
_HANDLER_TIMEOUT: Final = 5.0  # an idle or stalled client cannot pin a handler thread longer
_POLL_INTERVAL: Final = 0.01  # bounds how long shutdown() waits for the accept loop
_STOP_GRACE: Final = 0.25  # handlers get this long to finish before their sockets are shut
_STOP_LIMIT: Final = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class _Request:
    method: str
    head: str
    rest: tuple[str, ...]
    query: Mapping[str, list[str]]
    body: bytes | None
    idempotency_key: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    payload: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


class ToolService:
    """A local HTTP tool service on 127.0.0.1, with faults scripted from Python.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. It listens on an
    ephemeral port (see :attr:`url`) and serves each request in a daemon thread. Every
    method is thread-safe. A stopped service may be started again, on a new port; its
    data, faults and counters survive until :meth:`reset`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lifecycle = threading.Lock()
        self._faults: dict[str, collections.deque[Fault]] = {}
        self._outages: dict[str, Fault] = {}
        self._hits: collections.Counter[str] = collections.Counter()
        self._records: dict[str, list[dict[str, Any]]] = {kind: [] for kind in _KINDS}
        self._by_key: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {
            kind: {} for kind in _KINDS
        }
        self._errors: list[str] = []
        self._in_flight = 0
        self._peak_in_flight = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ToolService:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ToolService:
        """Bind an ephemeral port on 127.0.0.1 and serve in a daemon thread.

        Returns:
            The service itself, so ``service = ToolService().start()`` reads naturally.

        Raises:
            RuntimeError: if the service is already running.
        """
        with self._lifecycle:
            if self._server is not None:
                raise RuntimeError("ToolService is already running")
            server = _Server(self)
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": _POLL_INTERVAL},
                name="toolservice-serve",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """Stop serving and close the port; calling it again does nothing.

        Delayed handlers wake at once and drop their requests unanswered; handler threads
        get about a second in all to finish before ``stop`` returns regardless.
        """
        with self._lifecycle:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.stopping.set()
        server.shutdown()
        thread.join()
        server.drain()
        server.server_close()

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:<port>``, without a trailing slash.

        Raises:
            RuntimeError: if the service is not running.
        """
        server = self._server
        if server is None:
            raise RuntimeError("ToolService is not running; call start() or use 'with'")
        return f"http://127.0.0.1:{server.server_port}"

    def inject(self, route: str, *faults: Fault) -> None:
        """Queue faults for a route key; each request to it consumes one, first in first out.

        Args:
            route: a route key such as ``"GET /search"`` or ``"POST /tickets"``.
            *faults: the faults, in the order requests will meet them.

        Raises:
            ValueError: if the route is not a route key.
            TypeError: if a fault is not a :class:`Fault`.
        """
        key = _normalise_route(route)
        for fault in faults:
            if not isinstance(fault, Fault):
                raise TypeError(f"inject() takes Fault instances, not {type(fault).__name__}")
        with self._lock:
            self._faults.setdefault(key, collections.deque()).extend(faults)

    def outage(self, route: str, status: int = 503, retry_after: float | str | None = None) -> None:
        """Fail every request to a route with ``status`` until :meth:`recover`.

        Queued faults wait, unconsumed, until the outage ends.

        Args:
            route: a route key such as ``"GET /search"``.
            status: the error status every request gets.
            retry_after: seconds (or verbatim text) for a ``Retry-After`` header.

        Raises:
            ValueError: if the route or the status is invalid.
        """
        key = _normalise_route(route)
        fault = Fault(status=status, retry_after=retry_after)
        with self._lock:
            self._outages[key] = fault

    def recover(self, route: str) -> None:
        """End an outage of a route; a route without one is left as it is.

        Raises:
            ValueError: if the route is not a route key.
        """
        key = _normalise_route(route)
        with self._lock:
            self._outages.pop(key, None)

    @property
    def hits(self) -> dict[str, int]:
        """A snapshot: route key to the number of requests that reached a handler.

        Every request counts, faulted or not: these are the remote attempts.
        """
        with self._lock:
            return dict(self._hits)

    @property
    def in_flight(self) -> int:
        """Requests being handled right now (a gauge)."""
        with self._lock:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most requests handled at once since the start or the last :meth:`reset`.

        What a bulkhead test compares with its limit: the concurrency the service saw.
        """
        with self._lock:
            return self._peak_in_flight

    def created(self, kind: str) -> list[dict[str, Any]]:
        """Copies of the records created so far, oldest first.

        Args:
            kind: ``"tickets"`` or ``"emails"``.

        Raises:
            ValueError: for any other kind.
        """
        if kind not in _KINDS:
            raise ValueError(f"kind must be 'tickets' or 'emails': {kind!r}")
        with self._lock:
            return copy.deepcopy(self._records[kind])

    @property
    def errors(self) -> tuple[str, ...]:
        """Unexpected handler exceptions, as text; clients that hang up are not errors.

        They were answered with a 500 where possible and never printed; tests can assert
        this stays empty.
        """
        with self._lock:
            return tuple(self._errors)

    def reset(self) -> None:
        """Forget faults, outages, counters, errors and every created record."""
        with self._lock:
            self._faults.clear()
            self._outages.clear()
            self._hits.clear()
            self._errors.clear()
            self._peak_in_flight = self._in_flight
            for kind in _KINDS:
                self._records[kind].clear()
                self._by_key[kind].clear()

    # Below: called from handler threads.

    def _admit(self, key: str) -> Fault:
        with self._lock:
            self._hits[key] += 1
            outage = self._outages.get(key)
            if outage is not None:
                return outage
            queue = self._faults.get(key)
            return queue.popleft() if queue else NO_FAULT

    def _entered(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self._errors.append(f"{type(exc).__name__}: {exc}")

    def _dispatch(self, request: _Request) -> _Reply:
        arity = min(len(request.rest), 2)
        handler = _ROUTES.get((request.method, request.head, arity))
        if handler is not None:
            return handler(self, request)
        allowed = sorted(m for (m, head, n) in _ROUTES if head == request.head and n == arity)
        if allowed:
            return _Reply(405, {"error": "method not allowed"}, (("Allow", ", ".join(allowed)),))
        return _Reply(404, {"error": "not found"})

    def _health(self, request: _Request) -> _Reply:
        return _Reply(200, {"ok": True})

    def _search(self, request: _Request) -> _Reply:
        query = request.query.get("q", [""])[0].strip()
        if not query:
            return _Reply(422, {"error": "query parameter 'q' is required"})
        payload: dict[str, Any] = {"query": query, "results": _catalog(query)}
        if request.head == "search_snapshot":
            payload.update(as_of=SNAPSHOT_AS_OF, stale=True)
        return _Reply(200, payload)

    def _chat(self, request: _Request) -> _Reply:
        if request.rest != ("chat", "completions"):
            return _Reply(404, {"error": "not found"})
        return _Reply(*chat_reply(request.body))

    def _order(self, request: _Request) -> _Reply:
        order_id = request.rest[0]
        order = _ORDERS.get(order_id)
        if order is None:
            return _Reply(404, {"error": "order not found", "id": order_id})
        return _Reply(200, {"id": order_id, "status": "shipped", **order})

    def _list(self, request: _Request) -> _Reply:
        kind = request.head
        keys = request.query.get("idempotency_key")
        with self._lock:
            if keys is None:
                records = self._records[kind]
            else:
                found = self._by_key[kind].get(keys[0])
                records = [] if found is None else [found[1]]
            return _Reply(200, {kind: copy.deepcopy(records)})

    def _get(self, request: _Request) -> _Reply:
        kind, record_id = request.head, request.rest[0]
        with self._lock:
            for record in self._records[kind]:
                if record["id"] == record_id:
                    return _Reply(200, copy.deepcopy(record))
        return _Reply(404, {"error": f"{kind[:-1]} not found", "id": record_id})

    def _create(self, request: _Request) -> _Reply:
        kind, key = request.head, request.idempotency_key
        payload = _json_object(request.body)
        if payload is None:
            return _Reply(422, {"error": "the body must be a JSON object"})
        problem = _invalid_field(kind, payload)
        if problem is not None:
            return _Reply(422, {"error": problem})
        if key is not None and not 0 < len(key) <= _MAX_KEY:
            return _Reply(422, {"error": f"Idempotency-Key must be 1-{_MAX_KEY} characters"})
        with self._lock:
            seen = None if key is None else self._by_key[kind].get(key)
            if seen is not None:
                first_payload, record = seen
                if first_payload != payload:
                    return _Reply(
                        409, {"error": "Idempotency-Key reused with a different body", "key": key}
                    )
                return _Reply(200, copy.deepcopy(record), (("Idempotent-Replayed", "true"),))
            records = self._records[kind]
            record_id = f"{_KINDS[kind]}-{len(records) + 1}"
            record = {
                "id": record_id,
                **copy.deepcopy(payload),
                "status": _INITIAL_STATUS[kind],
                "idempotency_key": key,
            }
            records.append(record)
            if key is not None:
                self._by_key[kind][key] = (copy.deepcopy(payload), record)
            return _Reply(201, copy.deepcopy(record), (("Location", f"/{kind}/{record_id}"),))


_Route = Callable[[ToolService, _Request], _Reply]
# (method, first segment, number of further segments capped at 2) -> handler
_ROUTES: Final[Mapping[tuple[str, str, int], _Route]] = {
    ("GET", "health", 0): ToolService._health,
    ("GET", "search", 0): ToolService._search,
    ("GET", "search_snapshot", 0): ToolService._search,
    ("GET", "orders", 1): ToolService._order,
    ("GET", "tickets", 0): ToolService._list,
    ("GET", "tickets", 1): ToolService._get,
    ("POST", "tickets", 0): ToolService._create,
    ("GET", "emails", 0): ToolService._list,
    ("GET", "emails", 1): ToolService._get,
    ("POST", "emails", 0): ToolService._create,
    ("POST", "v1", 2): ToolService._chat,
}


def _normalise_route(route: str) -> str:
    key = normal_route(route)
    if key is None:
        raise ValueError(
            f"a route key is 'METHOD /first-segment', such as 'GET /search': {route!r}"
        )
    return key


def _catalog(query: str) -> list[dict[str, Any]]:
    digest = hashlib.sha256(query.casefold().encode()).digest()
    return [
        {
            "sku": f"SKU-{digest[4 * i : 4 * i + 3].hex().upper()}",
            "name": f"{query} {variant}",
            "price": round(4.99 + int.from_bytes(digest[4 * i : 4 * i + 2], "big") % 9500 / 100, 2),
            "currency": "USD",
            "stock": digest[4 * i + 3] % 40,
        }
        for i, variant in enumerate(_VARIANTS)
    ]


def _json_object(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        value = json.loads(body)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return None
    return value if isinstance(value, dict) else None


def _invalid_field(kind: str, payload: Mapping[str, Any]) -> str | None:
    for name in _REQUIRED[kind]:
        value = payload.get(name)
        if not isinstance(value, str) or not value.strip():
            return f"field {name!r} must be a non-empty string"
    for name in _OPTIONAL[kind]:
        if name in payload and not isinstance(payload[name], str):
            return f"field {name!r} must be a string"
    reserved = sorted(_RESERVED.intersection(payload))
    if reserved:
        return f"field {reserved[0]!r} is set by the service"
    return None


def _encode(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True).encode()


def _retry_after_header(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _error_payload(status: int) -> dict[str, Any]:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    return {"error": phrase, "status": status, "injected": True}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 makes concurrent callers wait a SYN retry (1 s)
    block_on_close = False  # stop() joins handler threads itself, with a deadline

    def __init__(self, service: ToolService) -> None:
        self.service = service
        self.stopping = threading.Event()
        self._active: dict[threading.Thread, socket.socket] = {}
        self._active_lock = threading.Lock()
        self._numbers = itertools.count(1)
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the host's FQDN, which stalls without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = int(self.socket.getsockname()[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run,
            args=(request, client_address),
            name=f"toolservice-handler-{next(self._numbers)}",
            daemon=True,
        )
        with self._active_lock:
            self._active[thread] = request
        thread.start()

    def _run(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._active_lock:
                self._active.pop(threading.current_thread(), None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints a traceback to stderr; record it instead, quietly.
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, ConnectionError | TimeoutError):
            self.service._record_error(exc)

    def drain(self) -> None:
        """Wait for handler threads; shut the sockets of stragglers; give up after a second."""
        deadline = time.monotonic() + _STOP_LIMIT
        self._join(time.monotonic() + _STOP_GRACE)
        with self._active_lock:
            stragglers = list(self._active.values())
        for sock in stragglers:
            with contextlib.suppress(OSError):  # already closed by its handler
                sock.shutdown(socket.SHUT_RDWR)
        self._join(deadline)

    def _join(self, deadline: float) -> None:
        with self._active_lock:
            threads = list(self._active)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    server_version = "toolservice/1"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request per connection: nothing idles between calls
    timeout = _HANDLER_TIMEOUT
    _responded = False

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent: the service runs inside test sessions and demos."""

    def handle(self) -> None:
        """Serve the connection; a client that hangs up or stalls is not an error."""
        with contextlib.suppress(ConnectionError, TimeoutError):
            super().handle()

    def do_GET(self) -> None:
        """Serve a GET."""
        self._serve("GET")

    def do_POST(self) -> None:
        """Serve a POST."""
        self._serve("POST")

    def do_PUT(self) -> None:
        """Serve a PUT (every route answers 404 or 405)."""
        self._serve("PUT")

    def do_PATCH(self) -> None:
        """Serve a PATCH (every route answers 404 or 405)."""
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        """Serve a DELETE (every route answers 404 or 405)."""
        self._serve("DELETE")

    @property
    def _server(self) -> _Server:
        return cast(_Server, self.server)

    def _serve(self, method: str) -> None:
        self._responded = False
        # In flight from here until the answer starts (never after: a client that has its
        # answer may already have sent the next request).
        self._counted = True
        self._server.service._entered(1)
        try:
            self._exchange(method)
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client left or stalled; nothing to answer
        except Exception as exc:  # noqa: BLE001 - a handler bug becomes a 500, not a traceback
            self._server.service._record_error(exc)
            self.close_connection = True
            if not self._responded:
                with contextlib.suppress(OSError):
                    self._send(500, _encode({"error": "internal error"}))
        finally:
            self._leave()

    def _leave(self) -> None:
        if self._counted:
            self._counted = False
            self._server.service._entered(-1)

    def _exchange(self, method: str) -> None:
        service, stopping = self._server.service, self._server.stopping
        split = urllib.parse.urlsplit(self.path)
        segments = [urllib.parse.unquote(s) for s in split.path.strip("/").split("/")]
        key = self.headers.get("Idempotency-Key")
        request = _Request(
            method=method,
            head=segments[0],
            rest=tuple(segments[1:]),
            query=urllib.parse.parse_qs(split.query, keep_blank_values=True),
            body=self._read_body() if method == "POST" else None,
            idempotency_key=None if key is None else key.strip(),
        )
        fault = service._admit(route_key(method, split.path))
        if fault.delay and stopping.wait(fault.delay):
            self._drop()
            return
        reply = service._dispatch(request) if fault.commits or not fault.intercepts else None
        if fault.commit_then_delay and stopping.wait(fault.commit_then_delay):
            self._drop()
            return
        if fault.reset:
            self._reset()
        elif fault.status is not None:
            headers: tuple[tuple[str, str], ...] = tuple((fault.headers or {}).items())
            if fault.retry_after is not None:
                headers = (*headers, ("Retry-After", _retry_after_header(fault.retry_after)))
            payload = _error_payload(fault.status) if fault.body is None else fault.body
            self._send(fault.status, _encode(payload), headers)
        elif fault.malformed is not None:
            self._send_malformed(method, fault.malformed, reply)
        else:
            assert reply is not None  # a fault that does not intercept always dispatches
            self._send(reply.status, _encode(reply.payload), reply.headers)

    def _read_body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return None
        if not 0 <= length <= _MAX_BODY:
            return None
        return self.rfile.read(length)

    def _send(self, status: int, body: bytes, headers: Iterable[tuple[str, str]] = ()) -> None:
        self._responded = True
        self._leave()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_malformed(self, method: str, how: str, reply: _Reply | None) -> None:
        ok = reply is not None and 200 <= reply.status < 300
        status = reply.status if reply is not None and ok else (201 if method == "POST" else 200)
        if how == MALFORMED_SHAPE:
            body = _encode({"unexpected": True})
        else:
            whole = _encode(reply.payload if reply is not None else {"unexpected": True})
            body = whole[: len(whole) // 2]  # a proper prefix of a JSON object never parses
        self._send(status, body)

    def _drop(self) -> None:
        """Leave without answering; the client sees the connection close."""
        self._leave()
        self.close_connection = True

    def _reset(self) -> None:
        """Close the connection at once with a TCP reset and no answer."""
        self._leave()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # drops the file's hold on the socket, so close() really closes
        self.connection.close()


_OPENER: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request_json(
    method: str,
    url: str,
    *,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float,
) -> dict[str, Any]:
    """Send one JSON request with urllib and return the JSON object answered.

    Proxies from the environment are ignored: the service is always local.

    Args:
        method: the HTTP method.
        url: an ``http`` or ``https`` URL.
        body: a JSON-serialisable value to send, or ``None`` to send no body.
        headers: extra headers, such as ``Idempotency-Key``.
        timeout: seconds for connecting and for each wait on the socket.

    Returns:
        The decoded JSON object.

    Raises:
        urllib.error.HTTPError: for a non-2xx answer; its body is already read into
            memory and its socket closed, so it needs no closing.
        urllib.error.URLError: when the request cannot be sent.
        TimeoutError: when the answer does not come in time (urllib lets it through
            unwrapped once the request is sent).
        ConnectionError: when the server drops the connection without an answer.
        ValueError: when the answer is not a JSON object; broken JSON raises its
            subclass ``json.JSONDecodeError``.
    """
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"request_json needs an http or https URL: {url!r}")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method.upper())  # noqa: S310 - scheme checked above
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as err:
        try:
            content = err.read()
        finally:
            err.close()
        raise urllib.error.HTTPError(
            err.geturl(), err.code, err.msg, err.headers, io.BytesIO(content)
        ) from None
    payload = json.loads(raw)
    if not isinstance(payload, dict):
        raise ValueError(  # noqa: TRY004 - a wrong shape is malformed JSON to the caller
            f"expected a JSON object, got {type(payload).__name__}"
        )
    return payload
