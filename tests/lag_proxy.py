"""A proxy that acknowledges chosen writes late: the store makes them, the client times out.

The store tests and the runtime tests use it to make a write whose outcome is ambiguous
to its client, against a real server: the request reaches the server at once (so the
write is made), and only its reply is held. That is a reply slower than the client's
socket timeout, with nothing timed in the test: the reply is held until :meth:`release`
(or the client gives up), however slow the machine is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Final

__all__ = ["LaggingProxy"]

# A child process, as toolbreaker.testing's SlowProxy: its event loop never competes with
# the code under test. SIGUSR1 arms it: the reply to the next request chunk that contains
# the pattern is held (one request: later ones pass). SIGUSR2 releases what is held.
_PROXY: Final = """
import asyncio, signal, sys

host, target, pattern = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
armed = False
release = None

def arm():
    global armed
    armed = True
    print("armed", flush=True)

def let_go():
    if release is not None:
        release.set()

async def serve(client_r, client_w):
    server_r, server_w = await asyncio.open_connection(host, target)
    hold = asyncio.Event()
    hold.set()

    async def upstream():
        global armed
        try:
            while chunk := await client_r.read(65536):
                if armed and pattern in chunk:
                    armed = False
                    hold.clear()  # the server makes it; its answer waits
                    print("held", flush=True)
                server_w.write(chunk)
                await server_w.drain()
        except OSError:
            pass
        finally:
            server_w.close()

    async def downstream():
        try:
            while chunk := await server_r.read(65536):
                await hold.wait()
                client_w.write(chunk)
                await client_w.drain()
        except OSError:
            pass
        finally:
            client_w.close()

    async def freed():
        await release.wait()
        hold.set()

    waiter = asyncio.ensure_future(freed())
    await asyncio.gather(upstream(), downstream())
    waiter.cancel()

async def main():
    global release
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, arm)
    loop.add_signal_handler(signal.SIGUSR2, let_go)
    server = await asyncio.start_server(serve, host, 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


class LaggingProxy:
    """TCP from a free port on 127.0.0.1 to ``target_port``, holding chosen replies.

    Args:
        target_port: the real server's port on 127.0.0.1.
        pattern: bytes of the request whose reply is held once armed (a record space's
            name, a table's name).
    """

    def __init__(self, target_port: int, pattern: bytes) -> None:
        self.target_port = target_port
        self.pattern = pattern
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> LaggingProxy:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PROXY,
                "127.0.0.1",
                str(self.target_port),
                self.pattern.decode(),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        self.port = int(process.stdout.readline())
        self._process = process
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(5)
            assert process.stdout is not None
            process.stdout.close()

    def arm(self) -> None:
        """Hold the reply to the next request that contains the pattern (once armed)."""
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGUSR1)
        self._expect("armed")

    def _expect(self, word: str) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        while (line := self._process.stdout.readline()) and line.strip() != word:
            pass
        assert line, f"the proxy ended before it said {word!r}"

    def held(self) -> None:
        """Wait until a reply is being held (the request reached the server)."""
        self._expect("held")

    def release(self) -> None:
        """Let every held reply go (clients that gave up never read it)."""
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGUSR2)

    def url(self, scheme: str, path: str = "/0") -> str:
        """``scheme://127.0.0.1:<port><path>``."""
        return f"{scheme}://127.0.0.1:{self.port}{path}"
