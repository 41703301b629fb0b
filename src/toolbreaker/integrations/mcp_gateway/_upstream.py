"""The gateway's side of one MCP server: a connection that relays frames and restarts.

A :class:`Connection` carries frames to the server and back, and keeps the requests in
flight: :meth:`Connection.request` sends one and waits for its response, up to a
deadline. What the server sends otherwise (its notifications and requests, a late
response) goes to ``deliver``: the host session forwards it.

A server that goes away (its process exits, its stdout closes, its HTTP endpoint stops
answering) fails every request in flight at once with :class:`UpstreamGone`: a lost
connection, the evidence the server's transport breaker counts. It is then reconnected
(a stdio server's command started again) after a backoff that doubles from
``restart_backoff`` up to :data:`MAX_BACKOFF` while it keeps failing, and is reset once
the server answers. Before anything else the reconnected server hears the session's
opening again (``reopen``: the host's ``initialize``, ``notifications/initialized``, its
log level), so the host's session goes on. A request while it is down is failed at
once: nobody waits for a server that is not there.

A server that never answered anything and is gone (a command that exits at once, a
package that does not exist) is :attr:`Connection.failed_start`: the gateway reports
that to the operator instead of restarting it for ever.

:class:`StdioConnection` runs a command (in a session of its own, so its children go
with it; stderr is the gateway's, which hosts keep in the server's log); the HTTP
connection is in :mod:`._upstream_http`.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
from anyio.abc import Process, TaskStatus

from toolbreaker.integrations._kit import redact_text
from toolbreaker.integrations.mcp_gateway._sheet import UpstreamSpec
from toolbreaker.integrations.mcp_gateway._wire import Frame, LineBuffer, id_key, stderr_line

__all__ = [
    "DEFAULT_RESTART_BACKOFF",
    "MAX_BACKOFF",
    "Connection",
    "Deliver",
    "StdioConnection",
    "UpstreamGone",
]

#: Seconds before a gone server is first started again.
DEFAULT_RESTART_BACKOFF: Final = 0.5
#: The longest wait between two restarts of a server that keeps failing.
MAX_BACKOFF: Final = 30.0
#: Seconds a stopping stdio server gets after its stdin closed, then after SIGTERM.
_STOP_GRACE: Final = 2.0

#: What the connection hands over: a frame from the server nobody waits for.
Deliver = Callable[[Frame], Awaitable[None]]


class UpstreamGone(ConnectionError):
    """The server went away (or is not back yet): no response will come."""


class _Waiter:
    __slots__ = ("error", "event", "frame", "ready")

    def __init__(self) -> None:
        self.event = anyio.Event()  # the response came (or the wait ended)
        self.ready: anyio.Event | None = None  # the server is up: made when one waits
        self.frame: Frame | None = None
        self.error: BaseException | None = None

    def end(self, error: BaseException) -> None:
        self.error = error
        if self.ready is not None:
            self.ready.set()
        self.event.set()

    def up(self) -> None:
        if self.ready is not None:
            self.ready.set()


class Connection:
    """One MCP server, as the gateway reaches it; see the module doc.

    Args:
        spec: the server.
        deliver: receives every frame of the server that no request waits for.
        restart_backoff: seconds before the first restart of a server that went away.
    """

    def __init__(
        self,
        spec: UpstreamSpec,
        deliver: Deliver,
        *,
        restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    ) -> None:
        self.spec = spec
        self.deliver = deliver
        self.restart_backoff = restart_backoff
        #: Connections made so far (a restart makes a new one).
        self.generation = 0
        #: Whether the server has answered anything, ever.
        self.answered = False
        #: Set when the server went away before it ever answered: it will not be restarted.
        self.failed_start: str | None = None
        #: Whether the connection is up now.
        self.up = False
        self._waiters: dict[tuple[str, object], _Waiter] = {}
        self._answers = 0
        self._starting = False
        self._parked: set[_Waiter] = set()
        self._closed = False
        self._reopen: Callable[[], Awaitable[None]] | None = None
        self._ended = anyio.Event()
        self._went = 0  # how many times the server went away, and the last time's why
        self._gone_why = ""

    # -- what the host session uses -------------------------------------------------------

    async def request(self, frame: Frame, timeout: float | None, *, opening: bool = False) -> Frame:
        """Send a request and wait for its response (``opening``: the session's, said again).

        A server that is starting again is waited for, within ``timeout``.

        Raises:
            UpstreamGone: the server is down, or went away before it answered.
            BaseException: what :meth:`abandon` ended the wait with.
            TimeoutError: no response within ``timeout`` seconds (``None``: no limit);
                the request stays unanswered: the caller tells the server it gave up.
        """
        key = id_key(frame.id)
        waiter = self._waiters[key] = _Waiter()
        try:
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                if not (opening or self.up):
                    if not self._starting:
                        raise UpstreamGone(self._down_reason())
                    waiter.ready = anyio.Event()
                    self._parked.add(waiter)
                    await waiter.ready.wait()
                if not waiter.event.is_set():
                    await self.send(frame, opening=opening)
                    await waiter.event.wait()
        finally:
            self._parked.discard(waiter)
            if self._waiters.get(key) is waiter:
                del self._waiters[key]
        if waiter.frame is not None:
            return waiter.frame
        if waiter.error is not None:
            raise waiter.error
        raise TimeoutError(f"no response from {self.spec.name!r} within {timeout:g} s")

    async def send(self, frame: Frame, *, opening: bool = False) -> None:
        """Send a frame to the server (``opening``: while the session's opening is said).

        Raises:
            UpstreamGone: the server is down.
        """
        if not (self.up or (opening and self._starting)):
            raise UpstreamGone(self._down_reason())
        gone = self._went
        try:
            await self._write(frame)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            # The pipe broke because the server is going: the relay, which waits for its
            # exit, says why (its exit code) within the grace it gives a stopping server.
            with anyio.move_on_after(_STOP_GRACE + 1):
                while self._went == gone:
                    await anyio.sleep(0.01)
            if self._went > gone:
                raise UpstreamGone(self._gone_why) from exc
            raise UpstreamGone(f"server {self.spec.name!r} went away: {exc!r}") from exc

    def abandon(self, request_id: object, error: BaseException) -> None:
        """End the wait for the response to ``request_id`` with ``error`` (a cancellation)."""
        waiter = self._waiters.pop(id_key(request_id), None)
        if waiter is not None:
            waiter.end(error)

    async def forget(self, frame: Frame) -> None:
        """Tell the server the request ``frame`` is no longer waited for (a timeout)."""
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": frame.id, "reason": "the gateway's deadline passed"},
        }
        with contextlib.suppress(UpstreamGone):
            await self.send(Frame.of(note))

    def _down_reason(self) -> str:
        if self.failed_start is not None:
            return self.failed_start
        if self._closed:
            return f"the gateway's connection to {self.spec.name!r} is closed"
        return f"server {self.spec.name!r} is not connected (restarting)"

    # -- the connection's life ------------------------------------------------------------

    async def serve(
        self,
        reopen: Callable[[], Awaitable[None]] | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, relay, and reconnect after a backoff when the server goes away.

        ``task_status.started()`` once the first connection is up (or failed). Returns
        when :meth:`close` is called, or when the server went away before it ever
        answered (:attr:`failed_start`).
        """
        self._reopen = reopen
        backoff = self.restart_backoff
        started = False
        try:
            while not self._closed:
                try:
                    await self._connect()
                except OSError as exc:
                    self.failed_start = self._cannot_start(exc)
                    if not started:
                        task_status.started()
                    return
                self.generation += 1
                answers = self._answers
                why = await self._connected(started, task_status)
                started = True
                self._went_away(why)
                if self._closed:
                    return
                if not self.answered:
                    self.failed_start = why
                    return
                if self._answers > answers:
                    backoff = self.restart_backoff  # it worked for a while: start over
                stderr_line(f"toolbreaker mcp: {why}; starting it again in {backoff:g} s")
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
        finally:
            self.up = False
            if not self._closed:  # cancelled (the gateway is stopping): the server stops too
                with anyio.CancelScope(shield=True):
                    await self._disconnect()
            self._ended.set()

    async def _connected(self, started: bool, task_status: TaskStatus[None]) -> str:
        """Relay one connection; a restarted server first hears the session's opening.

        Until it has, only the opening goes through (:attr:`up` is false): a host's
        request waits, as it would reach a server whose session is not open yet.
        """
        ended: list[str] = []
        async with anyio.create_task_group() as tg:

            async def relay() -> None:
                ended.append(await self._relay())
                tg.cancel_scope.cancel()

            self._starting = True
            tg.start_soon(relay)
            if started and self._reopen is not None:
                await self._reopen()
            self._starting = False
            self.up = True
            parked, self._parked = self._parked, set()
            for waiter in parked:
                waiter.up()
            if not started:
                task_status.started()
            await anyio.sleep_forever()
        return ended[0] if ended else self._down_reason()

    def _went_away(self, why: str) -> None:
        self._went += 1
        self._gone_why = why
        self.up = False
        self._starting = False
        gone = UpstreamGone(why)
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.end(gone)

    async def inbound(self, frame: Frame) -> None:
        """A frame from the server: the response a request waits for, or the host's."""
        self.answered = True
        self._answers += 1
        if frame.is_response:
            waiter = self._waiters.pop(id_key(frame.id), None)
            if waiter is not None:
                waiter.frame = frame
                waiter.event.set()
                return
        await self.deliver(frame)

    async def close(self) -> None:
        """Stop relaying and stop the server; waits until :meth:`serve` returned."""
        self._closed = True
        await self._disconnect()
        self._went_away(self._down_reason())

    # -- what a transport provides ---------------------------------------------------------

    async def _connect(self) -> None:
        raise NotImplementedError

    async def _relay(self) -> str:
        """Relay until the server goes away; why it did."""
        raise NotImplementedError

    async def _write(self, frame: Frame) -> None:
        raise NotImplementedError

    async def _disconnect(self) -> None:
        raise NotImplementedError

    def _cannot_start(self, exc: OSError) -> str:
        return f"server {self.spec.name!r} cannot be reached: {exc}"


class StdioConnection(Connection):
    """A server the gateway starts: its command, stdin and stdout; see the module doc."""

    def __init__(self, spec: UpstreamSpec, deliver: Deliver, **options: Any) -> None:
        super().__init__(spec, deliver, **options)
        self._process: Process | None = None

    @property
    def pid(self) -> int | None:
        """The process id of the server now running (``None`` when none is)."""
        process = self._process
        return process.pid if process is not None and self.up else None

    async def _connect(self) -> None:
        command = self.spec.command
        assert command is not None
        env = {**os.environ, **self.spec.env} if self.spec.env else None
        self._process = await anyio.open_process(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the gateway's: what hosts keep in the server's log
            cwd=self.spec.cwd,
            env=env,
            start_new_session=True,
        )

    def _cannot_start(self, exc: OSError) -> str:
        command = self.spec.command or ("?",)
        return (
            f"server {self.spec.name!r}: cannot run {command[0]!r}: "
            f"{exc.strerror or exc.__class__.__name__}"
        )

    async def _relay(self) -> str:
        process = self._process
        assert process is not None
        assert process.stdout is not None
        buffer = LineBuffer()
        stdout = process.stdout
        try:
            while True:
                try:
                    chunk = await stdout.receive(256 * 1024)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                for line in buffer.feed(chunk):
                    await self.inbound(Frame.read(line))
        except ValueError as exc:  # a line longer than any message may be
            await self._disconnect()
            return f"server {self.spec.name!r} wrote {exc}"
        with anyio.move_on_after(_STOP_GRACE):
            await process.wait()
        code = process.returncode
        command = redact_text(" ".join((self.spec.command or ())[:3]))  # may hold a key
        if code is None:
            await self._disconnect()
            return f"server {self.spec.name!r} ({command}) closed its stdout"
        if code < 0:
            return f"server {self.spec.name!r} ({command}) was killed by signal {-code}"
        return f"server {self.spec.name!r} ({command}) exited with code {code}"

    async def _write(self, frame: Frame) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise anyio.ClosedResourceError
        # The stream queues each write at once, in call order (its drain may be shared):
        # no lock, so no extra turn of the event loop per message.
        await process.stdin.send(frame.raw)

    async def _disconnect(self) -> None:
        """Close the server's stdin, then SIGTERM, then SIGKILL its process group."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                with contextlib.suppress(Exception):
                    await process.stdin.aclose()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with anyio.move_on_after(_STOP_GRACE):
                    await process.wait()
                if process.returncode is not None:
                    return
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, sig)
            with anyio.move_on_after(_STOP_GRACE):
                await process.wait()
