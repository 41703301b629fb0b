"""No false all-clear on servers: reading commands against a real redis-server and a real
PostgreSQL. An empty store that answers is read as empty; one that does not answer, or a
PostgreSQL database without the prefix's tables, is one line naming it and exit 2.

The SQLite side (a mistyped path, a file that is no store) is in
tests/cli/test_no_false_all_clear.py.
"""

from __future__ import annotations

import uuid

import pytest

from ports import free_port
from toolbreaker.cli import main

#: The reading commands that take a breaker store (the stream's readers are below).
STORE_READERS = {
    "drain --list": lambda url: ["drain", "--list", "--store", url],
    "drain --prune-done --dry-run": lambda url: [
        "drain",
        "--prune-done",
        "7d",
        "--dry-run",
        "--store",
        url,
    ],
    "policy show": lambda url: ["policy", "show", "--store", url],
}
STREAM_READERS = {
    "advise": lambda url: ["advise", "--store", url],
    "export": lambda url: ["export", "--store", url],
    "dashboard": lambda url: ["dashboard", "--store", url, "--port", "9"],
}


@pytest.fixture
def no_serving(monkeypatch):
    """The dashboard would serve until interrupted: serving at all is the failure here."""
    import uvicorn

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    return served


def one_error_line(err: str, *words: str) -> None:
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    for word in words:
        assert word in err, err
    assert "hunter2" not in err, err


def test_an_empty_redis_is_read_as_empty(redis_url, capsys):
    """A Redis that answers, with nothing of ours in it: an empty queue, an empty stream
    that says it is not an all-clear, no sheet published (exit 2, as it says)."""
    prefix = f"empty-{uuid.uuid4().hex[:8]}"
    assert main(["drain", "--list", "--store", f"{redis_url}?prefix={prefix}"]) == 0
    assert capsys.readouterr().out == ""
    stream = f"{redis_url}?key={prefix}:events"
    assert main(["export", "--store", stream]) == 0
    assert "holds no breaker events" in capsys.readouterr().err
    assert main(["advise", "--store", stream]) == 0
    assert "no findings" not in capsys.readouterr().out
    assert main(["policy", "show", "--store", f"{redis_url}?prefix={prefix}"]) == 2
    one_error_line(capsys.readouterr().err, "no sheet is published")


@pytest.mark.parametrize("command", sorted({**STORE_READERS, **STREAM_READERS}))
def test_a_redis_that_does_not_answer_is_an_error(command, private_redis, capsys, no_serving):
    """Every reader: one line naming the server (its password masked), exit 2, and the
    dashboard serves no page of nothing."""
    private_redis.stop()
    url = f"redis://default:hunter2@127.0.0.1:{private_redis.port}/0"
    readers = {**STORE_READERS, **STREAM_READERS}
    assert main(readers[command](url)) == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, f"127.0.0.1:{private_redis.port}")
    assert captured.out == ""
    assert not no_serving


@pytest.mark.parametrize("command", sorted(STORE_READERS))
def test_postgres_without_our_tables_is_an_error_and_nothing_is_created(
    command, postgres_url, capsys
):
    """A mistyped prefix (or database) on a PostgreSQL that answers: one line, exit 2,
    no tables made; the same prefix once a store made them reads as empty."""
    import psycopg
    from patient import patient_postgres

    prefix = f"typo_{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}?prefix={prefix}"
    assert main(STORE_READERS[command](url)) == 2
    one_error_line(capsys.readouterr().err, prefix, "nothing was created")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)", (f"{prefix}_records",)).fetchone()
    assert row == (None,)
    store = patient_postgres(postgres_url, prefix=prefix)
    store.record_get("toolbreaker.probe", "x")  # a store's first use makes its tables
    store.close()
    code = main(STORE_READERS[command](url))
    if command == "policy show":
        assert code == 2
        one_error_line(capsys.readouterr().err, "no sheet is published")
    else:
        assert code == 0


@pytest.mark.parametrize("command", sorted(STORE_READERS))
def test_a_postgres_that_does_not_answer_is_an_error(command, postgres_bindir, capsys):
    """Nothing listens on the port: one line naming the server, password masked."""
    port = free_port()
    url = f"postgresql://tb:hunter2@127.0.0.1:{port}/postgres"
    assert main(STORE_READERS[command](url)) == 2
    one_error_line(capsys.readouterr().err, f"127.0.0.1:{port}")
