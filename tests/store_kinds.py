"""The one list of store kinds the tests draw from, what each can do, and how to open one.

A test about "every store" asks :func:`kinds` for its parameters, naming the capability it
needs (``kinds(shared=True)``: other processes see the same state), never a list of names;
a store it leaves out is left out by what that store cannot do. :func:`open_store` opens a
store of a kind for one test: a key or table prefix of the test's own on the session's
server (tests keep apart by prefix, not by server) and patient round trips (see
``stores/patient.py``: these tests are not about timeouts), with the URL another process
opens the same store by (the CLI's ``--store`` form).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class StoreKind:
    """One kind of store and what it can do."""

    name: str
    #: Other processes (and other store objects) see the same state: leases, budgets,
    #: published sheets. The in-memory store is one object's memory.
    shared: bool
    #: Keeps records (``record_get``/``record_put``): budgets, bulkheads, registries.
    records: bool = True
    #: Runs on a server of the tests' own (the session's): costlier to run a test on.
    server: bool = False
    #: A Redis Cluster of six servers: the costliest kind to run a many-process test on,
    #: which the cluster's own tests (tests/stores/test_redis_cluster.py) cover.
    cluster: bool = False
    #: An event stream can live there (``open_stream``): a Redis Cluster takes none.
    stream: bool = True
    #: Leases are timed on the caller's clock (a test's FakeClock moves them): Redis
    #: times them on its server's clock instead.
    caller_clock: bool = True


#: Every store kind the library ships, in the order tests list them.
KINDS: tuple[StoreKind, ...] = (
    StoreKind("memory", shared=False),
    StoreKind("sqlite", shared=True),
    StoreKind("redis", shared=True, server=True, caller_clock=False),
    StoreKind(
        "redis-cluster", shared=True, server=True, cluster=True, stream=False, caller_clock=False
    ),
    StoreKind("postgres", shared=True, server=True),
)

BY_NAME = {kind.name: kind for kind in KINDS}


def kinds(**wanted: bool) -> list[Any]:
    """The kinds whose capabilities are as ``wanted`` (``shared=True``), as pytest params.

    Raises:
        TypeError: a capability no kind has (a typo must not select nothing).
    """
    known = set(StoreKind.__dataclass_fields__) - {"name"}
    unknown = set(wanted) - known
    if unknown:
        raise TypeError(f"unknown store capabilities {sorted(unknown)} (known: {sorted(known)})")
    chosen = [k for k in KINDS if all(getattr(k, c) == v for c, v in wanted.items())]
    assert chosen, f"no store kind has {wanted}"
    return [pytest.param(k.name, id=k.name) for k in chosen]


def unique_prefix(kind: str) -> str:
    """A key (Redis) or table (PostgreSQL: lower case, underscores) prefix of one test's own."""
    tag = uuid.uuid4().hex[:12]
    return f"tb_{tag}" if kind == "postgres" else f"tb-{tag}"


def open_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, **options: Any
) -> tuple[Any, str]:
    """A store of ``kind`` for this test, and the URL other processes open it by.

    Server kinds use the session's server (its fixture, through ``request``) under a
    prefix of the test's own; SQLite a file in ``tmp_path``; memory a fresh store, whose
    URL (``memory://``) no other process can open. ``options`` go to the store.
    """
    from stores.patient import patient_postgres, patient_redis
    from toolbreaker.stores import MemoryStore, SQLiteStore

    if kind == "memory":
        return MemoryStore(**options), "memory://"
    if kind == "sqlite":
        path = tmp_path / "tb.db"
        return SQLiteStore(str(path), **options), f"sqlite:///{path}"
    prefix = unique_prefix(kind)
    if kind == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
        return patient_postgres(url, prefix=prefix, **options), f"{url}?prefix={prefix}"
    if kind == "redis-cluster":
        url = str(request.getfixturevalue("redis_cluster").url)
        store = patient_redis(url, prefix=prefix, cluster=True, **options)
        return store, f"{url}?cluster=1&prefix={prefix}"
    if kind == "redis":
        url = str(request.getfixturevalue("redis_url"))
        return patient_redis(url, prefix=prefix, **options), f"{url}?prefix={prefix}"
    raise ValueError(f"unknown store kind {kind!r} (known: {sorted(BY_NAME)})")


@contextlib.contextmanager
def closing(store: Any) -> Iterator[Any]:
    """``store``, closed at the end (the in-memory store holds nothing to close)."""
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def reopen(url: str, **options: Any) -> Any:
    """The store a URL of :func:`open_store` names, as another process opens it (patient).

    ``options`` go to the store.
    """
    from urllib.parse import parse_qs, urlsplit

    from stores.patient import patient_postgres, patient_redis
    from toolbreaker.stores import SQLiteStore

    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    base = url.split("?", 1)[0]
    if parts.scheme == "sqlite":
        return SQLiteStore(base[len("sqlite://") :], **options)
    prefix = {"prefix": query["prefix"]} if "prefix" in query else {}
    if parts.scheme == "postgresql":
        return patient_postgres(base, **prefix, **options)
    if parts.scheme == "redis":
        return patient_redis(base, cluster="cluster" in query, **prefix, **options)
    raise ValueError(f"no store of the tests' at {url!r}")


def redis_scripts_run(*clients: Any) -> int:
    """Scripts the Redis servers of ``clients`` ran: each is one round trip of a store
    (a script counts once, whatever it calls inside; replicas replay effects, not scripts)."""
    total = 0
    for client in clients:
        stats = client.info("commandstats")
        total += sum(
            stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval")
        )
    return total
