"""What the stream and dashboard tests share: closing what they open, waiting for views,
serving a dashboard on a real server.

Import the helpers and the autouse fixture ``close_opened`` into a test module.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from toolbreaker.instrumentation.stream import open_stream

_OPENED: list[Any] = []


def opened(url: str) -> Any:
    """open_stream, closed when the test ends (Redis clients hold sockets)."""
    stream = open_stream(url)
    _OPENED.append(stream)
    return stream


def closing(thing: Any) -> Any:
    """Close ``thing`` when the test ends (a SQLite store runs a poller thread)."""
    _OPENED.append(thing)
    return thing


@pytest.fixture(autouse=True)
def close_opened() -> Iterator[None]:
    """Close everything :func:`opened` and :func:`closing` were given, after each test."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def eventually(check: Callable[[], Any]) -> Any:
    """Wait (bounded) for another store's change to reach this process's view."""
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


class Unavailable(Exception):
    """A failure the classifier counts (HTTP 503)."""

    status_code = 503


def fail() -> None:
    """A tool call that fails with a 503."""
    raise Unavailable


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """uvicorn serving one dashboard app in a thread of the test process."""

    def __init__(self, app: Any) -> None:
        uvicorn = pytest.importorskip("uvicorn")
        self.port = _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started, "dashboard server did not start"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
