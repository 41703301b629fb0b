"""JSON-RPC on the wire: frames that keep their bytes, line framing, the gateway's pipes.

A :class:`Frame` is one JSON-RPC message as it came off the wire: its bytes and their
decoding. The gateway relays the bytes, so what a host reads from a healthy server is
byte for byte what the server wrote; only the messages it answers itself (a rejected
call, a stop, a timeout) or changes (a write's ``_meta`` key, a listing that hides
tools) are encoded anew, compactly, as UTF-8.

Ids are compared with their JSON type (``"1"`` is not ``1``): :func:`id_key`. The
gateway's own requests to a server (a listing to learn annotations, a liveness ping, a
task's poll, a restarted server's handshake) carry ids of their own, strings under
:data:`OWN_ID_PREFIX`, so a response is never confused with one a host waits for.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import anyio

__all__ = [
    "MAX_LINE",
    "OWN_ID_PREFIX",
    "Frame",
    "LineBuffer",
    "StdioPipes",
    "encode",
    "error_frame",
    "id_key",
    "own_ids",
    "result_frame",
]

#: The largest message read (a tool result with images can be large).
MAX_LINE: Final = 64 * 1024 * 1024
#: The prefix of the ids of the gateway's own requests to a server.
OWN_ID_PREFIX: Final = "toolbreaker-gateway:"
_READ: Final = 256 * 1024


def encode(message: Mapping[str, Any]) -> bytes:
    r"""One message as a compact JSON line (UTF-8, no newline inside, ``\\n`` at the end)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def id_key(value: object) -> tuple[str, object]:
    """A request id with its JSON type, as a dictionary key (``"1"`` is not ``1``)."""
    return (type(value).__name__, value)


def own_ids() -> Callable[[], str]:
    """A source of fresh ids for the gateway's own requests."""
    counter = itertools.count(1)
    return lambda: f"{OWN_ID_PREFIX}{next(counter)}"


class Frame:
    r"""One JSON-RPC message: the bytes it came as, and what they decode to.

    Attributes:
        raw: the line as read, with its ``\\n`` (encoded from ``message`` when made here).
        message: the decoded object; ``None`` when the line is no JSON object (relayed
            as it is: the other side answers it as it would).
    """

    __slots__ = ("message", "raw")

    def __init__(self, raw: bytes, message: dict[str, Any] | None) -> None:
        self.raw = raw
        self.message = message

    @classmethod
    def read(cls, line: bytes) -> Frame:
        """The frame of one line read off the wire."""
        try:
            decoded = json.loads(line)
        except ValueError:
            decoded = None
        raw = line if line.endswith(b"\n") else line + b"\n"
        return cls(raw, decoded if isinstance(decoded, dict) else None)

    @classmethod
    def of(cls, message: dict[str, Any]) -> Frame:
        """A frame made here."""
        return cls(encode(message), message)

    @property
    def method(self) -> str | None:
        """The method of a request or notification."""
        found = self.message.get("method") if self.message is not None else None
        return found if isinstance(found, str) else None

    @property
    def is_request(self) -> bool:
        """A request: a method and an id."""
        return self.method is not None and self.message is not None and "id" in self.message

    @property
    def is_notification(self) -> bool:
        """A notification: a method and no id."""
        return self.method is not None and self.message is not None and "id" not in self.message

    @property
    def is_response(self) -> bool:
        """A response: an id, and a result or an error."""
        message = self.message
        return (
            message is not None
            and "method" not in message
            and "id" in message
            and ("result" in message or "error" in message)
        )

    @property
    def id(self) -> object:
        """The id (``None`` when there is none)."""
        return self.message.get("id") if self.message is not None else None

    @property
    def params(self) -> dict[str, Any]:
        """The params of a request or notification (``{}`` when there are none)."""
        found = self.message.get("params") if self.message is not None else None
        return found if isinstance(found, dict) else {}


def result_frame(request_id: object, result: Mapping[str, Any]) -> Frame:
    """The response carrying ``result`` to the request ``request_id``."""
    return Frame.of({"jsonrpc": "2.0", "id": request_id, "result": dict(result)})


def error_frame(request_id: object, code: int, message: str, data: object | None = None) -> Frame:
    """The error response to the request ``request_id``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return Frame.of({"jsonrpc": "2.0", "id": request_id, "error": error})


class LineBuffer:
    """Splits a byte stream into lines of at most :data:`MAX_LINE` bytes."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        r"""The complete lines ``chunk`` finishes (each with its ``\\n``; blank ones dropped).

        Raises:
            ValueError: a line longer than :data:`MAX_LINE`.
        """
        buffer = self._buffer
        buffer += chunk
        if b"\n" not in chunk:
            if len(buffer) > MAX_LINE:
                raise ValueError(f"a message longer than {MAX_LINE} bytes")
            return []
        *lines, rest = bytes(buffer).split(b"\n")
        self._buffer = bytearray(rest)
        return [line + b"\n" for line in lines if line.strip()]


async def lines_of(receive: Callable[[], Awaitable[bytes]]) -> AsyncIterator[bytes]:
    """The lines of a byte stream, until it ends (``receive`` returns ``b""``)."""
    buffer = LineBuffer()
    while True:
        chunk = await receive()
        if not chunk:
            return
        for line in buffer.feed(chunk):
            yield line


class StdioPipes:
    """The gateway's own stdin and stdout, read and written without blocking the loop.

    Pipes and sockets (what a host gives a server it launches) are read by the event
    loop itself; anything else (a terminal, a file) on a worker thread.
    """

    def __init__(self, stdin: int = 0, stdout: int = 1) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._in_file: Any = None
        self._out_file: Any = None
        self._lock = anyio.Lock()

    async def open(self) -> None:
        """Connect the pipes to the running event loop."""
        loop = asyncio.get_running_loop()
        if _is_pipe(self._stdin):
            reader = asyncio.StreamReader(limit=MAX_LINE)
            source = os.fdopen(os.dup(self._stdin), "rb", buffering=0)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), source)
            self._reader = reader
        else:
            self._in_file = os.fdopen(os.dup(self._stdin), "rb", buffering=0)
        if _is_pipe(self._stdout):
            sink = os.fdopen(os.dup(self._stdout), "wb", buffering=0)
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), sink
            )
            self._writer = asyncio.StreamWriter(transport, protocol, None, loop)
        else:
            self._out_file = os.fdopen(os.dup(self._stdout), "wb", buffering=0)

    async def receive(self) -> bytes:
        """The next bytes from stdin; ``b""`` at its end."""
        if self._reader is not None:
            return await self._reader.read(_READ)
        data: bytes = await anyio.to_thread.run_sync(
            self._in_file.read, _READ, abandon_on_cancel=True
        )
        return data or b""

    async def send(self, data: bytes) -> None:
        """Write ``data`` to stdout, in order with every other write."""
        if self._writer is not None:
            # write() queues at once, in call order; concurrent drains are safe (3.10+),
            # and no lock means no extra turn of the event loop per message.
            self._writer.write(data)
            await self._writer.drain()
            return
        async with self._lock:
            await anyio.to_thread.run_sync(_write_all, self._out_file, data)

    def close(self) -> None:
        """Close what :meth:`open` opened (the process's own descriptors stay)."""
        if self._writer is not None:
            self._writer.close()
        for file in (self._in_file, self._out_file):
            if file is not None:
                file.close()


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _write_all(file: Any, data: bytes) -> None:
    file.write(data)
    file.flush()


def stderr_line(text: str) -> None:
    """One line for the operator on stderr (what hosts keep in a server's log)."""
    try:
        sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # pragma: no cover - stderr closed
        pass
