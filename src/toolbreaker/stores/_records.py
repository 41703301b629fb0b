"""What every store does around a record, and leases built on records.

A record's value is canonical JSON, bounded in size; its space and key are short
printable names. A lease is a record ``{"holder", "until"}`` taken and renewed by
compare-and-set, so one holder at a time across every process that shares the store,
until its time runs out. The caller passes the time (wall-clock milliseconds): leases
assume the fleet's clocks agree to well within a lease's length.

A space that belongs to one breaker is named with :func:`breaker_space`: the breaker key
in braces, the hash tag Redis Cluster places keys by, so a store that shards (Redis
Cluster) keeps the space in the breaker's own slot, beside its state. Losing another
shard then cannot deny that breaker's calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.core._canonical import canonical_json
from toolbreaker.errors import RecordCorrupt
from toolbreaker.stores._protocol import Records

__all__ = [
    "DURABLE_SPACES",
    "MAX_NAME",
    "MAX_RECORD",
    "acquire_lease",
    "breaker_space",
    "check_name",
    "check_version",
    "corrupt_record",
    "decode_record",
    "encode_record",
    "release_lease",
]

#: The longest space or key, in characters.
MAX_NAME = 512
#: The largest record, in bytes of canonical JSON.
MAX_RECORD = 1 << 20
#: Spaces whose writes must survive a crash of the store, as journal entries do: work a
#: model was told is queued, a drain's progress through it (a forgotten ``running`` would
#: run the work again) and handoff packets. A store commits them as it commits its
#: journal; other records (leases, budgets, kept answers) may be lost by a crash.
DURABLE_SPACES: Final = frozenset({"toolbreaker.queue", "toolbreaker.handoff"})


def breaker_space(kind: str, key: str) -> str:
    """The record space ``kind`` of the breaker ``key``: ``<kind>/{<key>}``.

    The braces are the breaker's hash tag (its state's in a sharded store): every record
    of the space lives where the breaker does.
    """
    return f"{kind}/{{{key}}}"


def check_name(what: str, name: object) -> None:
    """Refuse a record ``space`` or ``key`` (``what``) that no store can name.

    A name is a printable string of 1 to :data:`MAX_NAME` characters.

    Raises:
        ValueError: saying which.
    """
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ValueError(f"a record {what} must be a string of 1 to {MAX_NAME} characters")
    if not name.isprintable():
        raise ValueError(f"a record {what} must be printable")


def check_version(version: object) -> None:
    """Refuse a version that is not ``None`` or a whole number from 0."""
    if version is not None and (
        not isinstance(version, int) or isinstance(version, bool) or version < 0
    ):
        raise ValueError("a record version is None or a whole number from 0")


def encode_record(space: str, key: str, value: Mapping[str, Any]) -> bytes:
    """The canonical JSON of ``value``, after checking ``space``, ``key`` and its size.

    Raises:
        ValueError: a bad name, or a value too large.
        TypeError: a value that is not a JSON object.
    """
    check_name("space", space)
    check_name("key", key)
    if not isinstance(value, Mapping):
        raise TypeError("a record is a JSON object")
    text = canonical_json(dict(value))
    if len(text) > MAX_RECORD:
        raise ValueError(f"a record is at most {MAX_RECORD} bytes of JSON")
    return text


def decode_record(raw: object, space: str, key: str, version: int | None) -> dict[str, Any]:
    """A stored record's JSON text as a dict; anything else is :class:`RecordCorrupt`."""
    import json  # loaded with the first record read, not with every store

    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else None
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise corrupt_record(space, key, version)
    return value


def corrupt_record(space: str, key: str, version: int | None) -> RecordCorrupt:
    """The error for the record ``(space, key)`` that does not decode."""
    at = f" (version {version})" if version is not None else " (its version unreadable)"
    return RecordCorrupt(
        f"the record {key!r} in space {space!r} does not decode{at}",
        space=space,
        key=key,
        version=version,
    )


def acquire_lease(
    store: Records, space: str, name: str, holder: str, *, ttl_ms: int, now_ms: int
) -> bool:
    """Take or renew the lease ``name`` for ``holder`` until ``now_ms + ttl_ms``.

    Returns whether ``holder`` holds the lease now. A lease held by someone else is
    taken over only once its time has run out.

    Raises:
        StoreUnavailable: the store could not be asked (treat as "not held").
    """
    if ttl_ms <= 0:
        raise ValueError("a lease lasts at least 1 ms")
    wanted = {"holder": holder, "until": now_ms + ttl_ms}
    found = store.record_get(space, name)
    if found is None:
        return store.record_put(space, name, wanted, version=0) is not None
    value, version = found
    until = value.get("until")
    expired = not isinstance(until, int) or until <= now_ms
    if value.get("holder") != holder and not expired:
        return False
    return store.record_put(space, name, wanted, version=version) is not None


def release_lease(store: Records, space: str, name: str, holder: str) -> bool:
    """Give the lease up if ``holder`` holds it; whether it was given up."""
    found = store.record_get(space, name)
    if found is None or found[0].get("holder") != holder:
        return False
    return store.record_delete(space, name, version=found[1])
