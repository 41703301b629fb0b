"""What the stream and dashboard tests share: closing what they open, waiting for views.

Import the helpers and the autouse fixture ``close_opened`` into a test module.
"""

from __future__ import annotations

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
