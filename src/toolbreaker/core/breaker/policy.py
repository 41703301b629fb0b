"""Breaker policy: frozen, validated at construction, versioned by its content.

A policy is reviewed configuration. Changing any field changes :attr:`Policy.version`,
and every receipt names the version it was produced under, so a new threshold never
silently rewrites the meaning of old transitions.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from toolbreaker.core.canonical import canonical_json
from toolbreaker.core.config import known_fields, load_toml
from toolbreaker.core.files import shown
from toolbreaker.errors import PolicyError

__all__ = ["MAX_COUNT", "MAX_DURATION_MS", "Policy"]

_OPTIONAL = frozenset({"window_ms"})
#: The longest duration a policy may hold (30 days): every store keeps it, and a derived
#: key lifetime (a few of them added up) stays far below Redis's signed 64-bit PEXPIRE.
MAX_DURATION_MS: Final = 30 * 24 * 3600 * 1000
#: The largest threshold, limit or multiplier a policy may hold.
MAX_COUNT: Final = 1_000_000
_DURATIONS: Final = frozenset({"window_ms", "cooldown_ms", "cooldown_max_ms", "lease_ttl_ms"})
#: ``cooldown_max_ms`` when unset: this, or ``cooldown_ms`` when that is longer.
DEFAULT_COOLDOWN_MAX_MS: Final = 300_000


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
        cooldown_max_ms: the cap of the growing cooldown; unset, it is 300,000 or
            ``cooldown_ms`` when that is longer (a default never makes a valid setting
            invalid).
        probe_limit: probe leases that may be in flight at once while half-open.
        success_threshold: successful probes that close the breaker.
        lease_ttl_ms: a probe lease not settled within this time counts as a failed probe.

    Durations (``*_ms``) are at most :data:`MAX_DURATION_MS` (30 days); counts and the
    multiplier at most :data:`MAX_COUNT`.
    """

    failure_threshold: int = 3
    window_ms: int | None = None
    cooldown_ms: int = 20_000
    cooldown_multiplier: int = 1
    cooldown_max_ms: int = None  # type: ignore[assignment]  # resolved in __post_init__
    probe_limit: int = 1
    success_threshold: int = 2
    lease_ttl_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.cooldown_max_ms is None and type(self.cooldown_ms) is int:
            resolved = max(DEFAULT_COOLDOWN_MAX_MS, self.cooldown_ms)
            object.__setattr__(self, "cooldown_max_ms", resolved)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in _OPTIONAL:
                continue
            if type(value) is not int:
                raise PolicyError(f"{f.name} must be an integer, got {shown(value)}", field=f.name)
            if value <= 0:
                raise PolicyError(f"{f.name} must be positive, got {shown(value)}", field=f.name)
            bound = MAX_DURATION_MS if f.name in _DURATIONS else MAX_COUNT
            if value > bound:
                raise PolicyError(
                    f"{f.name} must be at most {bound:,}"
                    + (" ms (30 days)" if f.name in _DURATIONS else "")
                    + f", got {shown(value)}",
                    field=f.name,
                )
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
