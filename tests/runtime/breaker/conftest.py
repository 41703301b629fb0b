"""Fixtures the breaker shell's tests share: a real store that keeps records, the service."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolbreaker import MemoryStore, SQLiteStore


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A real store that keeps records.

    Its timeouts are generous: these tests are about records, not timeouts, and a loaded
    machine (two suites at once) can take longer than the 0.25 s default, which makes a
    write's outcome unknown, as it should.
    """
    kind = request.param
    if kind == "memory":
        made: Any = MemoryStore()
    elif kind == "sqlite":
        made = SQLiteStore(str(tmp_path / "tb.db"))
    elif kind == "redis":
        from toolbreaker import RedisStore

        url = request.getfixturevalue("redis_url")
        made = RedisStore(url, prefix=f"tb-{tmp_path.name}", socket_timeout=5)
    else:
        from stores.patient import patient_postgres

        url = request.getfixturevalue("postgres_url")
        made = patient_postgres(url, prefix=f"tb_{uuid.uuid4().hex[:12]}")
    try:
        made.record_get("probe", "probe")
    except NotImplementedError:
        made.close()
        pytest.skip(f"{kind}: records not on this store yet")
    yield made
    if kind != "memory":
        made.close()
