"""A scenario's faults, carried out: an HTTP reverse proxy and a plain tool wrapper.

:class:`FaultProxy` listens on 127.0.0.1 in front of a real HTTP tool service (the user's,
or the bundled :class:`~toolbreaker.testing.ToolService`) and gives each request the
fault the scenario scripts for its route and attempt (:func:`toolbreaker.testing._scenario.
fault_at` decides; this module only carries it out). :func:`wrap_tool` does the same to
a plain Python tool function. Both count into one :class:`Ledger`, *at the service*: the
attempts that reached it, those made while a breaker fed by the target's failures was
open, and the writes it committed, twice or not. Standard library only.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import http.client
import json
import socketserver
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, cast

from toolbreaker.core._breaker.predicates import rejects_callers
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.testing._faults import MALFORMED_SHAPE
from toolbreaker.testing._mcp_faults import CONTROL_PREFIX
from toolbreaker.testing._scenario import (
    FaultRule,
    Scenario,
    TargetCount,
    action_of,
    fault_at,
    is_write,
    route_key,
)

__all__ = ["FaultProxy", "InjectedFault", "Ledger", "wrap_tool"]

_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        "host",
    }
)
_UPSTREAM_TIMEOUT: Final = 30.0
_MAX_BODY: Final = 1 << 20
_STOP_LIMIT: Final = 1.0


class Ledger:
    """What the service saw during an exercise, counted per target; thread-safe.

    The first run counts attempts, faults, attempts after an opening and commits; the
    resumed run (:meth:`resume`) gets no faults and records the business actions it
    commits, to compare with the first run's.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._counts: dict[str, collections.Counter[str]] = {}
        self._faulted: set[str] = set()
        self._watched: list[tuple[Breaker, frozenset[str]]] = []
        self._actions: set[str] = set()
        self._keys: set[str] = set()
        self.committed_keys: list[str] = []
        self.committed_actions: list[str] = []
        self.resumed_actions: list[str] = []
        self.faults_met: set[str] = set()
        self.resumed = False

    def _count(self, target: str) -> collections.Counter[str]:
        return self._counts.setdefault(target, collections.Counter())

    def attempt(self, target: str) -> FaultRule | None:
        """Count an attempt of ``target`` at the service; the fault it gets, if any."""
        with self._lock:
            if self.resumed:
                return None
            counts = self._count(target)
            counts["attempts"] += 1
            watched = [breaker for breaker, fed in self._watched if target in fed]
            rule = fault_at(self.scenario, target, counts["attempts"])
            if rule is not None:
                counts["failed"] += 1
                self._faulted.add(target)
                self.faults_met.add(rule.name)
        # A breaker's state is read outside the lock: a store may take its time.
        if any(rejects_callers(b.state, b.policy) for b in watched):
            with self._lock:
                counts["after_open"] += 1
        return rule

    def opened(self, breaker: Breaker) -> None:
        """A breaker opened: the targets that failed so far fed it; watch it from now."""
        with self._lock:
            if not self.resumed:
                self._watched.append((breaker, frozenset(self._faulted)))

    def committed(self, target: str, key: str | None, args: Mapping[str, Any]) -> None:
        """The service carried out a write of ``target`` (with its idempotency key)."""
        action = action_of(target, args, self.scenario.business_key.get(target, ()))
        with self._lock:
            if self.resumed:
                self.resumed_actions.append(action)
                return
            counts = self._count(target)
            counts["commits"] += 1
            if action in self._actions or (key is not None and key in self._keys):
                counts["duplicates"] += 1
            self._actions.add(action)
            self.committed_actions.append(action)
            if key is not None:
                self._keys.add(key)
                self.committed_keys.append(key)

    def resume(self) -> None:
        """Start counting the resumed run: no faults, no watched breakers."""
        with self._lock:
            self.resumed = True
            self._watched.clear()

    def counts(self) -> tuple[TargetCount, ...]:
        """The first run's counts, per target: the scenario's targets first."""
        with self._lock:
            names = [
                *self.scenario.targets,
                *(t for t in self._counts if t not in self.scenario.targets),
            ]
            return tuple(
                TargetCount(
                    target=name,
                    **{k: self._counts.get(name, collections.Counter())[k] for k in _COUNTED},
                )
                for name in names
            )


_COUNTED: Final = ("attempts", "failed", "after_open", "commits", "duplicates")


# -- the HTTP reverse proxy -----------------------------------------------------------------


class FaultProxy:
    """A reverse proxy on 127.0.0.1 that injects a scenario's faults per route and attempt.

    Every request is forwarded to ``upstream`` (``http://host:port``) unless its fault
    answers in its place (``outage``, ``rate-limit``, ``credential``, ``slow``). Use it as
    a context manager or call :meth:`start` and :meth:`stop`; :attr:`url` is its base URL.

    Args:
        ledger: where attempts and commits are counted (its scenario scripts the faults).
        upstream: the real service's base URL.
    """

    def __init__(self, ledger: Ledger, upstream: str) -> None:
        split = urllib.parse.urlsplit(upstream)
        if split.scheme != "http" or not split.hostname:
            raise ValueError(f"the proxy forwards to an http:// URL, got {upstream!r}")
        self.ledger = ledger
        self.upstream = (split.hostname, split.port or 80, split.path.rstrip("/"))
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FaultProxy:
        """Bind an ephemeral port and serve in a daemon thread."""
        server = _ProxyServer(self)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """Stop serving; held requests are dropped unanswered."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None or thread is None:
            return
        self.ledger.stopping.set()
        server.shutdown()
        thread.join()
        server.server_close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        if self._server is None:
            raise RuntimeError("FaultProxy is not running")
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the host's FQDN, which stalls without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = int(self.socket.getsockname()[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up is no error; stay quiet (the proxy runs inside tests)."""


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection
    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent."""

    def handle(self) -> None:
        """Serve the connection; a client that hangs up or stalls is not an error."""
        with contextlib.suppress(ConnectionError, TimeoutError):
            super().handle()

    def do_GET(self) -> None:
        """Proxy a GET."""
        self._proxy("GET")

    def do_POST(self) -> None:
        """Proxy a POST."""
        self._proxy("POST")

    def do_PUT(self) -> None:
        """Proxy a PUT."""
        self._proxy("PUT")

    def do_PATCH(self) -> None:
        """Proxy a PATCH."""
        self._proxy("PATCH")

    def do_DELETE(self) -> None:
        """Proxy a DELETE."""
        self._proxy("DELETE")

    def _proxy(self, method: str) -> None:
        proxy = cast(_ProxyServer, self.server).proxy
        ledger = proxy.ledger
        body = self._body()
        if self.path.startswith(CONTROL_PREFIX):
            self._control(ledger, self.path[len(CONTROL_PREFIX) :], body)
            return
        target = route_key(method, self.path)
        rule = ledger.attempt(target)
        if rule is not None and rule.answers_status:
            self._answer_fault(rule)
            return
        if rule is not None and rule.kind == "slow":
            ledger.stopping.wait(rule.delay)
            self.close_connection = True  # held past the deadline, never forwarded
            return
        try:
            status, headers, payload = self._forward(proxy, method, body)
        except OSError as exc:
            self._send(502, json.dumps({"error": f"upstream unreachable: {exc}"}).encode(), ())
            return
        replayed = any(k.lower() == "idempotent-replayed" and v == "true" for k, v in headers)
        if is_write(target) and 200 <= status < 300 and not replayed:
            key = self.headers.get("Idempotency-Key")
            ledger.committed(target, key.strip() if key else None, _arguments(body))
        if rule is not None and rule.kind == "commit-then-timeout":
            ledger.stopping.wait(rule.delay)
            self.close_connection = True  # committed; the answer never comes
            return
        if rule is not None and rule.kind == "late-success" and ledger.stopping.wait(rule.delay):
            return  # stopped while holding the answer
        if rule is not None and rule.kind == "malformed":
            wrong = (
                b'{"unexpected": true}'
                if rule.malformed == MALFORMED_SHAPE
                else payload[: len(payload) // 2]
            )
            self._send(200 if method == "GET" else status, wrong or b"{", ())
            return
        self._send(status, payload, headers)

    def _control(self, ledger: Ledger, question: str, body: bytes) -> None:
        """The MCP wrapper's questions: which fault an attempt gets; a commit it saw."""
        data = _arguments(body)
        target = str(data.get("target", ""))
        answer: dict[str, Any]
        if question == "attempt":
            rule = ledger.attempt(target)
            answer = {"rule": None if rule is None else dataclasses.asdict(rule)}
        elif question == "commit":
            key, args = data.get("key"), data.get("args")
            ledger.committed(
                target,
                key if isinstance(key, str) and key else None,
                args if isinstance(args, dict) else {},
            )
            answer = {"ok": True}
        else:
            self._send(404, b'{"error": "unknown control route"}', ())
            return
        self._send(200, json.dumps(answer).encode(), ())

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        return self.rfile.read(min(max(length, 0), _MAX_BODY)) if length else b""

    def _forward(
        self, proxy: FaultProxy, method: str, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        host, port, prefix = proxy.upstream
        connection = http.client.HTTPConnection(host, port, timeout=_UPSTREAM_TIMEOUT)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            connection.request(method, prefix + self.path, body=body or None, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
            return response.status, kept, payload
        finally:
            connection.close()

    def _answer_fault(self, rule: FaultRule) -> None:
        assert rule.status is not None
        headers: list[tuple[str, str]] = []
        if rule.retry_after is not None:
            wait = rule.retry_after
            headers.append(("Retry-After", str(int(wait)) if wait.is_integer() else f"{wait:g}"))
        payload = {"error": "injected fault", "fault": rule.name, "status": rule.status}
        self._send(rule.status, json.dumps(payload).encode(), headers)

    def _send(self, status: int, body: bytes, headers: Any) -> None:
        with contextlib.suppress(OSError):  # the client may have given up
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in ("server", "date"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


def _arguments(body: bytes) -> dict[str, Any]:
    """A write's arguments: its JSON object, or its text."""
    try:
        value = json.loads(body) if body else {}
    except ValueError:
        return {"body": body.decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"body": value}


# -- plain Python tools -----------------------------------------------------------------------


class InjectedFault(Exception):
    """The error an injected fault raises from a wrapped tool: an HTTP-like failure.

    The classifier reads it by duck typing, as it reads an SDK's error: ``status_code``
    and ``headers`` (``Retry-After``).
    """

    def __init__(self, rule: FaultRule) -> None:
        assert rule.status is not None
        super().__init__(f"injected {rule.kind} ({rule.status}) by fault {rule.name!r}")
        self.status_code = rule.status
        self.headers: dict[str, str] = {}
        if rule.retry_after is not None:
            self.headers["Retry-After"] = f"{rule.retry_after:g}"


def wrap_tool(
    ledger: Ledger, name: str, fn: Callable[..., Any], *, write: bool = False
) -> Callable[..., Any]:
    """``fn`` with the scenario's faults for the tool ``name``, counted in ``ledger``.

    Each call is an attempt of the target ``name``: an ``outage``, ``rate-limit`` or
    ``credential`` fault raises :class:`InjectedFault` without calling ``fn``; ``slow``
    waits its delay and raises :class:`TimeoutError`; ``commit-then-timeout`` calls
    ``fn``, waits and raises :class:`TimeoutError`; ``late-success`` waits, then calls
    it; ``malformed`` calls it and returns a body of the wrong shape. A ``write`` tool
    that returns has committed: its keyword arguments (without ``idempotency_key``) are
    the business action.
    """

    @functools.wraps(fn)
    def faulty(*args: Any, **kwargs: Any) -> Any:
        rule = ledger.attempt(name)
        if rule is not None and rule.answers_status:
            raise InjectedFault(rule)
        if rule is not None and rule.kind in ("slow", "late-success"):
            ledger.stopping.wait(rule.delay)
            if rule.kind == "slow":
                raise TimeoutError(f"injected slow call by fault {rule.name!r}")
        result = fn(*args, **kwargs)
        if write:
            key = kwargs.get("idempotency_key")
            action = {k: v for k, v in kwargs.items() if k != "idempotency_key"}
            action.update({f"arg{i}": a for i, a in enumerate(args)})
            ledger.committed(name, key if isinstance(key, str) and key else None, action)
        if rule is not None and rule.kind == "commit-then-timeout":
            ledger.stopping.wait(rule.delay)
            raise TimeoutError(f"injected timeout after the commit by fault {rule.name!r}")
        if rule is not None and rule.kind == "malformed":
            return (
                {"unexpected": True} if rule.malformed == MALFORMED_SHAPE else '{"unexpected": tr'
            )
        return result

    return faulty
