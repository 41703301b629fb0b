"""Canonical JSON and digests: the same value gives the same bytes everywhere."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "sha256_hex"]


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` with sorted keys, no spaces, UTF-8; floats are refused.

    Floats are refused because their text differs between producers; every number
    in a receipt is an integer.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(value: Any) -> str:
    """The SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
