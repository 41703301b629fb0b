"""Stores for tests that are not about a store's timeouts.

A store's default round-trip bound (0.25 s) is what users get, and the tests about
timeouts use it. Other tests, on a loaded machine (two suites at once on two cores), can
see a round trip outlast it: PostgreSQL cancels the statement (``statement timeout``),
a Redis reply comes after the socket gave up (a fsync-always server on a busy disk), and
the test fails on an outage it is not about. Those tests open their store here.
"""

from __future__ import annotations

from typing import Any

from toolbreaker.stores import PostgresStore, RedisStore

#: Seconds: long enough for any answer of a loaded test server, short enough to end a
#: test whose server really went away.
PATIENT_S = 5.0


def patient_postgres(conninfo: str, **options: Any) -> PostgresStore:
    """A :class:`PostgresStore` whose statements may take :data:`PATIENT_S` seconds."""
    return PostgresStore(conninfo, **({"timeout": PATIENT_S} | options))


def patient_redis(url: str, **options: Any) -> RedisStore:
    """A :class:`RedisStore` whose round trips may take :data:`PATIENT_S` seconds."""
    return RedisStore(url, **({"socket_timeout": PATIENT_S} | options))
