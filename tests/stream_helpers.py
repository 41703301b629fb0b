"""What the stream and dashboard tests share: closing what they open, waiting for views,
serving a dashboard on a real server.

Import the helpers and the autouse fixture ``close_opened`` into a test module.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ports import free_port
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


class Server:
    """The dashboard of ``stream`` (``build_app``'s options), served in a thread of the test
    process by the command's own server, which ends connected pages' streams on exit."""

    def __init__(self, stream: Any, **options: Any) -> None:
        pytest.importorskip("uvicorn")
        from toolbreaker.cli._dashboard import build_app, dashboard_server

        self.port = free_port()
        closing = threading.Event()
        app = build_app(stream, closing=closing, **options)
        self.server = dashboard_server(app, self.port, closing=closing)
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
        self.server.handle_exit(signal.SIGINT, None)
        self.thread.join(10)
        assert not self.thread.is_alive(), "dashboard server did not stop"
