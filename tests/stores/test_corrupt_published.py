"""A published sheet whose record does not decode: refused, not an outage, and replaceable.

On a real SQLite file, a real redis-server and a real PostgreSQL, through the command
line: the record's bytes are garbled in the store itself, as a bad restore or a hand
edit would leave them.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from patient import patient_postgres, patient_redis

from store_kinds import kinds
from toolbreaker import Registry
from toolbreaker.cli import main
from toolbreaker.runtime._fleet._published import POLICY_SPACE
from toolbreaker.stores import SQLiteStore

V1 = """\
[defaults]
timeout_ms = 1000
enforce = "cooperative"

[search.read]
failure_threshold = 2
"""
V2 = V1.replace("failure_threshold = 2", "failure_threshold = 5")


class Target:
    """One store of a test's own: its --store URL, a store object, a way to garble it."""

    def __init__(self, url: str, store: Any, garble: Callable[[str], None]) -> None:
        self.url, self.store, self.garble = url, store, garble


# Every kind other processes reach, but the Redis Cluster: garbling a record there would
# need the cluster's own client, and the published sheet's decoding is the store's shell.
@pytest.fixture(params=kinds(shared=True, cluster=False))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    kind = request.param
    if kind == "sqlite":
        import sqlite3

        path = tmp_path / "breakers.db"

        def garble_sqlite(text: str) -> None:
            with contextlib.closing(sqlite3.connect(path)) as db, db:
                db.execute(
                    "UPDATE toolbreaker_records SET value = ? WHERE space = ? AND key = ?",
                    (text, POLICY_SPACE, "default"),
                )

        found = Target(f"sqlite://{path}", SQLiteStore(path), garble_sqlite)
    elif kind == "redis":
        import redis

        url = request.getfixturevalue("redis_url")
        prefix = f"corrupt-{uuid.uuid4().hex[:8]}"

        def garble_redis(text: str) -> None:
            with redis.Redis.from_url(url) as client:
                (key,) = client.keys(f"{prefix}:*records*")
                version = client.hget(key, "default").split(b" ", 1)[0]
                client.hset(key, "default", version + b" " + text.encode())  # "<version> <json>"

        found = Target(f"{url}?prefix={prefix}", patient_redis(url, prefix=prefix), garble_redis)
    else:
        assert kind == "postgres", kind
        import psycopg

        url = request.getfixturevalue("postgres_url")
        prefix = f"corrupt_{uuid.uuid4().hex[:8]}"

        def garble_postgres(text: str) -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE {prefix}_records SET value = %s WHERE space = %s AND key = %s",
                    (text, POLICY_SPACE, "default"),
                )

        found = Target(
            f"{url}?prefix={prefix}", patient_postgres(url, prefix=prefix), garble_postgres
        )
    yield found
    found.store.close()


def sheet(tmp_path: Path, text: str, name: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def one_line(err: str, *words: str) -> None:
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_a_record_that_does_not_decode_is_refused_and_can_be_replaced(target, tmp_path, capsys):
    """The follower counts the garbled record as a refusal (not a store outage) and keeps
    its revision; show and publish say what is wrong and how out (one line, exit 2);
    publish --over-corrupt REASON lands the next revision, recorded with who and why,
    and the follower adopts it."""
    v1, v2 = sheet(tmp_path, V1, "v1.toml"), sheet(tmp_path, V2, "v2.toml")
    assert main(["policy", "publish", v1, "--store", target.url]) == 0
    assert main(["policy", "publish", v1, "--store", target.url]) == 0
    capsys.readouterr()
    registry = Registry.from_store(target.store, follow=False)
    breaker = registry.get("search", "read")
    follower = registry.follower
    assert follower is not None
    target.garble('{"schema": "toolbreaker.policy/v1", "revision": 3, "sheet": ')

    assert not follower.refresh()
    assert not follower.refresh()  # the same garbled record is one refusal
    assert (follower.refused, follower.read_errors) == (1, 0)
    assert breaker.policy.failure_threshold == 2
    assert follower.current is not None
    assert follower.current.revision == 2

    assert main(["policy", "show", "--store", target.url]) == 2
    one_line(capsys.readouterr().err, "does not decode", "--over-corrupt")
    assert main(["policy", "publish", v2, "--store", target.url]) == 2
    one_line(capsys.readouterr().err, "does not decode", "--over-corrupt")
    assert not follower.refresh()
    assert breaker.policy.failure_threshold == 2

    reason = "INC-9: record garbled by a restore"
    assert main(["policy", "publish", v2, "--store", target.url, "--over-corrupt", reason]) == 0
    out = capsys.readouterr().out
    assert out.startswith("published default revision ")
    assert int(out.split()[3]) > 2  # above every revision the garbled record could hold
    assert main(["policy", "show", "--store", target.url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["over_corrupt"] == reason
    assert "@" in doc["published_by"]
    assert main(["policy", "show", "--store", target.url]) == 0
    assert f"replaced   a record that did not decode: {reason}" in capsys.readouterr().out

    assert follower.refresh()
    assert breaker.policy.failure_threshold == 5
    assert (follower.refused, follower.read_errors, follower.adopted) == (1, 0, 1)

    # Over a record that decodes, the flag is refused: nothing corrupt to replace.
    assert main(["policy", "publish", v2, "--store", target.url, "--over-corrupt", "x"]) == 2
    one_line(capsys.readouterr().err, "--over-corrupt")
    registry.close()


def test_a_garbled_redis_version_is_replaceable_too(redis_url, tmp_path, capsys):
    """A Redis record whose version prefix is gone: refused and replaced all the same."""
    import redis

    prefix = f"corrupt-{uuid.uuid4().hex[:8]}"
    url = f"{redis_url}?prefix={prefix}"
    v1, v2 = sheet(tmp_path, V1, "v1.toml"), sheet(tmp_path, V2, "v2.toml")
    assert main(["policy", "publish", v1, "--store", url]) == 0
    store = patient_redis(redis_url, prefix=prefix)
    registry = Registry.from_store(store, follow=False)
    with redis.Redis.from_url(redis_url) as client:
        (key,) = client.keys(f"{prefix}:*records*")
        client.hset(key, "default", b"garbage")
    follower = registry.follower
    assert follower is not None
    assert not follower.refresh()
    assert (follower.refused, follower.read_errors) == (1, 0)
    assert main(["policy", "publish", v2, "--store", url, "--over-corrupt", "INC-10"]) == 0
    assert follower.refresh()
    assert registry.get("search", "read").policy.failure_threshold == 5
    registry.close()
    store.close()
