"""Fixtures the runtime tests share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store_kinds import closing, kinds, open_store

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


# Every kind that keeps records; the Redis Cluster's six servers are left to the
# cluster's own conformance tests (tests/stores/test_redis_cluster.py).
@pytest.fixture(params=kinds(records=True, cluster=False))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A real store that keeps records, with patient round trips (these tests are about
    records, not timeouts: a loaded machine can take longer than the 0.25 s default)."""
    made, _ = open_store(request.param, request, tmp_path)
    with closing(made):
        yield made
