"""Fixtures the runtime tests share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

# The store tests' real PostgreSQL (one server per session, fsync on, as in production):
# the same fixtures, so no second kind of server. Tests keep apart by table prefix.
from stores.conftest import postgres_bindir, postgres_server, postgres_url

__all__ = ["postgres_bindir", "postgres_server", "postgres_url"]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real, durable redis-server (append-only file, fsync always), as in production:
    queued work and run journals must survive a restart."""
    from stores.conftest import RedisServer  # the store tests' real redis-server helper

    binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    if binary is None:
        pytest.fail("redis-server is not installed")
    server = RedisServer(
        binary, tmp_path_factory.mktemp("redis"), "--appendonly", "yes", "--appendfsync", "always"
    )
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
