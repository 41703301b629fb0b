"""Breaker policy: frozen, validated at construction, versioned by its content.

A policy is reviewed configuration. Changing any field changes :attr:`Policy.version`,
and every receipt names the version it was produced under, so a new threshold never
silently rewrites the meaning of old transitions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolbreaker.core.canonical import canonical_json
from toolbreaker.errors import PolicyError

if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
    import tomllib
else:  # pragma: no cover - version dependent
    import tomli as tomllib

__all__ = ["Policy", "known_fields", "load_toml"]

_OPTIONAL = frozenset({"window_ms"})


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """How one breaker counts failures, cools down and probes.

    Attributes:
        failure_threshold: qualifying failures that open the breaker; the threshold
            failure itself opens it.
        window_ms: ``None`` counts consecutive failures (a success resets the count);
            otherwise failures younger than ``window_ms`` count, and successes do not reset.
        cooldown_ms: how long the breaker stays open before one request may probe.
        cooldown_multiplier: the n-th consecutive opening waits
            ``min(cooldown_max_ms, cooldown_ms * cooldown_multiplier ** (n - 1))``.
        cooldown_max_ms: the cap of the growing cooldown.
        probe_limit: probe leases that may be in flight at once while half-open.
        success_threshold: successful probes that close the breaker.
        lease_ttl_ms: a probe lease not settled within this time counts as a failed probe.
    """

    failure_threshold: int = 3
    window_ms: int | None = None
    cooldown_ms: int = 20_000
    cooldown_multiplier: int = 1
    cooldown_max_ms: int = 300_000
    probe_limit: int = 1
    success_threshold: int = 2
    lease_ttl_ms: int = 30_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in _OPTIONAL:
                continue
            if type(value) is not int:
                raise PolicyError(f"{f.name} must be an integer, got {value!r}", field=f.name)
            if value <= 0:
                raise PolicyError(f"{f.name} must be positive, got {value}", field=f.name)
        if self.cooldown_max_ms < self.cooldown_ms:
            raise PolicyError(
                f"cooldown_max_ms ({self.cooldown_max_ms}) must not be below "
                f"cooldown_ms ({self.cooldown_ms})",
                field="cooldown_max_ms",
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """Build a policy from a mapping of field names; unknown keys are an error."""
        return cls(**known_fields(data, cls, "policy"))

    @classmethod
    def from_toml(cls, path: str | Path) -> Policy:
        """Load a policy from a TOML file whose top-level keys are the fields.

        Errors name the file and, when the offending key can be found, its line.
        """
        policy: Policy = load_toml(path, cls.from_dict)
        return policy

    def to_dict(self) -> dict[str, int | None]:
        """The fields as a plain dict, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def version(self) -> str:
        """A short SHA-256 of the canonical JSON of the fields."""
        return hashlib.sha256(canonical_json(self.to_dict())).hexdigest()[:12]

    def cooldown_for(self, opening: int) -> int:
        """The cooldown of the ``opening``-th consecutive opening (1-based), in ms."""
        # Multiply step by step so a long outage never builds a huge integer.
        cooldown = self.cooldown_ms
        for _ in range(opening - 1):
            if cooldown >= self.cooldown_max_ms or self.cooldown_multiplier == 1:
                break
            cooldown *= self.cooldown_multiplier
        return min(cooldown, self.cooldown_max_ms)


def known_fields(data: object, cls: Any, what: str) -> dict[str, Any]:
    """``data`` as a dict of ``cls``'s dataclass fields; anything else is a PolicyError."""
    if not isinstance(data, Mapping):
        raise PolicyError(f"a {what} must be a table of fields, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise PolicyError(
                f"unknown {what} field {key!r} (known: {', '.join(sorted(known))})",
                field=str(key),
            )
    return dict(data)


def load_toml(path: str | Path, build: Any) -> Any:
    """Parse a TOML file and hand its table to ``build``, locating errors in the file.

    A :class:`PolicyError` raised by ``build`` gets the file name and the line of the
    key it names; a TOML syntax error keeps the line tomllib reports.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except UnicodeDecodeError:
        raise PolicyError("not UTF-8 text", file=name) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(match.group(1)) if match else None
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise PolicyError(f"invalid TOML: {message}", file=name, line=line) from None
    try:
        return build(data)
    except PolicyError as exc:
        exc.file = exc.file or name
        if exc.line is None and exc.field:
            exc.line = _line_of_key(text, exc.field)
        raise


def _line_of_key(text: str, field: str) -> int | None:
    """The line of a dotted field (``table.sub.key``), following ``[table]`` headers."""
    header = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
    assignment = re.compile(r"^\s*(\"[^\"]+\"|[A-Za-z0-9_-]+)\s*=")
    table = ""
    fallback = None
    for number, line in enumerate(text.splitlines(), start=1):
        found = header.match(line)
        if found:
            table = ".".join(part.strip().strip('"') for part in found.group(1).split("."))
            if table == field:
                fallback = fallback or number
            continue
        found = assignment.match(line)
        if found:
            key = found.group(1).strip('"')
            if (f"{table}.{key}" if table else key) == field:
                return number
    return fallback
