"""What a ``--store`` URL opens: the one place the commands turn a URL into a store.

A command that only reads (``advise``, ``export``, ``dashboard``, ``drain`` and
``policy show``) opens what is there and creates nothing: a mistyped SQLite path, or a
file that is no toolbreaker store, is one error line naming it (exit 2), never an empty
store reported on as if it were healthy. Only ``policy publish`` may make the store it
writes to. A Redis store is there when it answers (an empty one is not an error); a
PostgreSQL one when its database holds the prefix's tables. ``memory://`` is one
process's memory: a command, run as its own process, can never see it, so it is refused
with the reason. The event stream's readers open it with ``open_stream(url,
create=False)``, which keeps the same rules.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from toolbreaker.errors import PolicyError

__all__ = ["SHARED_STORES", "open_store"]

#: What ``--store`` takes for the breakers' store, for help texts and messages.
SHARED_STORES = "sqlite:///PATH, redis://HOST:PORT/DB or postgresql://..."


#: Options of an event stream's URL (see ``open_stream``), which the dashboard's one
#: ``--store`` URL may carry beside the store's.
_STREAM_OPTIONS = ("key", "maxlen", "retain")


def open_store(url: str, *, create: bool = False, stream_url: bool = False) -> Any:
    """The shared breaker store ``url`` names; only an existing one unless ``create``.

    ``sqlite:///PATH``, ``redis://``/``rediss://``/``unix://`` and ``postgres://``/
    ``postgresql://``; ``?prefix=NAME`` sets a Redis or PostgreSQL store's key prefix.
    ``?cluster=1`` names one node of a Redis Cluster.
    ``stream_url``: the URL names the event stream too (the dashboard's), whose options
    are left to the stream.

    Raises:
        PolicyError: a URL naming no shared store, ``memory://`` included (field
            ``store``).
        StoreUnavailable: ``create`` is false and no SQLite store is at the path (a
            PostgreSQL database without the prefix's tables raises at its first use).
    """
    from toolbreaker.instrumentation.stream import masked_url

    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "memory":
        raise PolicyError(
            f"{masked_url(url)} cannot be reached from here: memory:// is one process's "
            f"memory, and this command is another process (use {SHARED_STORES})",
            field="store",
        )
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    prefix = options.pop("prefix", None)
    cluster = options.pop("cluster", None)
    if cluster is not None and cluster not in ("1", "true", "yes"):
        raise PolicyError(f"--store: cluster takes 1, got {cluster!r}", field="store")
    if cluster is not None and scheme not in ("redis", "rediss"):
        raise PolicyError("--store: only a Redis store takes cluster", field="store")
    for name in _STREAM_OPTIONS if stream_url else ():
        options.pop(name, None)
    base = url.split("?", 1)[0]
    if scheme in ("postgres", "postgresql"):
        from toolbreaker.stores._postgres import PostgresStore

        # libpq's own parameters (sslmode=...) stay in the URL; prefix is ours.
        conninfo = f"{base}?{urlencode(options)}" if options else base
        if prefix is None:
            return PostgresStore(conninfo, create=create)
        return PostgresStore(conninfo, prefix=prefix, create=create)
    if options:
        raise PolicyError(
            f"--store: unknown option(s) {sorted(options)} (known: prefix, cluster)",
            field="store",
        )
    if scheme == "sqlite":
        from toolbreaker.stores._sqlite import SQLiteStore

        path = base[len("sqlite://") :]
        if not path:
            raise PolicyError("sqlite:// needs a path, e.g. sqlite:///var/tb/tb.db", field="store")
        if prefix is not None:
            raise PolicyError("--store: an SQLite store takes no prefix", field="store")
        return SQLiteStore(path, create=create)
    if scheme in ("redis", "rediss", "unix"):
        from toolbreaker.stores._redis import RedisStore

        on_cluster = cluster is not None
        if prefix is None:
            return RedisStore(base, cluster=on_cluster)
        return RedisStore(base, prefix=prefix, cluster=on_cluster)
    raise PolicyError(f"unknown store URL {masked_url(url)!r} (use {SHARED_STORES})", field="store")
