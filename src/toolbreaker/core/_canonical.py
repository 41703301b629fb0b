"""Canonical JSON and digests: the same value gives the same bytes everywhere."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "sha256_hex"]


#: The one encoder of canonical JSON (``json.dumps`` with these options built one per call).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` with sorted keys, no spaces, UTF-8; floats are refused.

    Floats are refused because their text differs between producers; every number
    in a receipt is an integer.
    """
    return _CANONICAL.encode(value).encode("utf-8")


def sha256_hex(value: Any) -> str:
    """The SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
