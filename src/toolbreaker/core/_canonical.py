"""Canonical JSON and digests: the same value gives the same bytes everywhere."""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import json

__all__ = ["canonical_json", "sha256_hex"]


@functools.cache
def _canonical() -> json.JSONEncoder:
    """The one encoder of canonical JSON, made with the first value encoded.

    ``json.dumps`` with these options builds one per call; json is not loaded at import.
    """
    import json

    return json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` with sorted keys, no spaces, UTF-8; floats are refused.

    Floats are refused because their text differs between producers; every number
    in a receipt is an integer.
    """
    return _canonical().encode(value).encode("utf-8")


def sha256_hex(value: Any) -> str:
    """The SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
