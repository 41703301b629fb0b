"""A slow dependency on demand: a TCP proxy that holds every request for a while."""

from __future__ import annotations

import subprocess
import sys
from typing import Final

__all__ = ["SlowProxy"]

# Run in a child process: in the process under test, its threads or tasks would compete
# with the code being measured (for the GIL, or for the event loop).
_PROXY: Final = """
import asyncio, sys

host, target, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

async def pipe(reader, writer, hold):
    try:
        while chunk := await reader.read(65536):
            if hold:
                await asyncio.sleep(hold)
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()

async def serve(client_r, client_w):
    server_r, server_w = await asyncio.open_connection(host, target)
    await asyncio.gather(pipe(client_r, server_w, delay), pipe(server_r, client_w, 0))

async def main():
    server = await asyncio.start_server(serve, host, 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


class SlowProxy:
    """Forwards TCP from a free port on 127.0.0.1 to ``target_port``, slowly.

    Every chunk a client sends waits ``delay`` seconds before it is forwarded, so every
    request/response round trip through the proxy takes at least that long: a slow
    Redis, database or HTTP service for a test, with the real server behind it. Use it
    as a context manager; the proxy runs in a child process and stops on exit::

        with SlowProxy(6379, delay=0.2) as proxy:
            store = RedisStore(proxy.url("redis"))

    Args:
        target_port: the real server's port on 127.0.0.1.
        delay: seconds each client chunk is held.
    """

    def __init__(self, target_port: int, delay: float) -> None:
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"delay must be a non-negative number of seconds, got {delay!r}")
        self.target_port = target_port
        self.delay = float(delay)
        self._process: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> SlowProxy:
        """Start the proxy; ``port`` is its port once this returns."""
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, "-c", _PROXY, "127.0.0.1", str(self.target_port), str(self.delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        self.port = int(process.stdout.readline())
        process.stdout.close()
        self._process = process
        return self

    def stop(self) -> None:
        """Stop the proxy (connections through it break)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(5)

    def url(self, scheme: str, path: str = "/0") -> str:
        """``scheme://127.0.0.1:<port><path>``, e.g. ``url("redis")``."""
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> SlowProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
