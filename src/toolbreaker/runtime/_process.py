"""This process's token: the prefix that keeps the ids made here apart from any other's.

Call ids (a probe's lease is held under one), retry operations and bulkhead slot holders
start with it. A forked child gets a token of its own: reusing its parent's ids would put
two probes with one id in a shared state (which then loads as corrupt) and make a slot the
child holds look like its parent's.
"""

from __future__ import annotations

import os

__all__ = ["process_token"]


def _new() -> str:
    return f"{os.getpid():x}.{os.urandom(3).hex()}"


_token = _new()


def process_token() -> str:
    """This process's token (``<pid in hex>.<6 random hex digits>``), renewed by a fork."""
    return _token


def _renew() -> None:
    global _token  # noqa: PLW0603 - one token per process, by design
    _token = _new()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_renew)
