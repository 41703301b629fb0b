"""One Python MCP server process for a module's tests, a fresh server for each host.

Starting a Python MCP server costs about a second of CPU (importing the SDK), and most
tests only need one that answers: they are about the host, the gateway or the fault
wrapper in front of it, not about the server's process. :func:`serve_shared` runs in one
process (started by :class:`SharedUpstream`, a module-scoped fixture's) and, for every
connection, builds a fresh server (``build()``: fresh state, as a new process has) and
runs it over the SDK's own stdio transport (``mcp.server.stdio.stdio_server``) on the
connection's streams. What a host launches is :data:`RELAY` (``relay_argv``): a
standard-library process that copies its stdin to the connection and the connection to
its stdout, byte for byte, and ends when either side does; so a host still launches a
process and speaks JSON lines over its pipes. Tests about the server's process itself (it
crashes, it is killed, it is started again) launch their own.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: This directory: what a server's process puts on ``sys.path`` to import this module.
HERE = str(Path(__file__).resolve().parent)

#: The relay a host launches: ``python -c RELAY PORT``.
RELAY = r"""
import os, socket, sys, threading

conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))

def inbound():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        conn.sendall(data)
    try:
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass

threading.Thread(target=inbound, daemon=True).start()
while True:
    data = conn.recv(65536)
    if not data:
        break
    os.write(1, data)
"""


def serve_shared(build: Callable[[], Any]) -> None:
    """Serve a fresh ``build()`` MCP server on each connection to 127.0.0.1, until stdin ends.

    The port is the first line written to stdout. Each server runs over the SDK's stdio
    transport on the connection's streams, as ``MCPServer.run("stdio")`` runs it on the
    process's own.
    """
    import io
    import socket
    import threading

    import anyio
    from mcp.server.stdio import stdio_server

    listener = socket.create_server(("127.0.0.1", 0))

    async def session(conn: socket.socket) -> None:
        reader = io.TextIOWrapper(conn.makefile("rb"), encoding="utf-8", errors="replace")
        writer = io.TextIOWrapper(conn.makefile("wb"), encoding="utf-8")
        server = build()
        try:
            async with stdio_server(anyio.wrap_file(reader), anyio.wrap_file(writer)) as (
                read_stream,
                write_stream,
            ):
                # what MCPServer.run_stdio_async does, on these streams
                lowlevel = server._lowlevel_server
                await lowlevel.run(
                    read_stream, write_stream, lowlevel.create_initialization_options()
                )
        except Exception as exc:  # noqa: BLE001 - a host gone mid-answer ends its session only
            print(f"session ended: {exc!r}", file=sys.stderr)
        finally:
            for stream in (reader, writer):
                with contextlib.suppress(OSError):
                    stream.close()
            conn.close()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            while True:
                conn, _ = await anyio.to_thread.run_sync(listener.accept, abandon_on_cancel=True)
                tg.start_soon(session, conn)

    def until_stdin_ends() -> None:
        sys.stdin.buffer.read()
        listener.close()
        sys.stdout.flush()
        import os

        os._exit(0)

    threading.Thread(target=until_stdin_ends, daemon=True).start()
    sys.stdout.write(f"{listener.getsockname()[1]}\n")
    sys.stdout.flush()
    anyio.run(main)


class SharedUpstream:
    """The process of :func:`serve_shared` started by ``argv``; ``command`` launches a relay."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the shared MCP server did not start: {line!r}")
        self.port = int(line)
        self.command = [sys.executable, "-c", RELAY, str(self.port)]

    def close(self) -> None:
        """End the server (its stdin closes) and wait for it."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def __enter__(self) -> SharedUpstream:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
