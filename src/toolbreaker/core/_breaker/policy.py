"""Breaker policy: frozen, validated at construction, versioned by its content.

A policy is reviewed configuration. Changing any field changes :attr:`Policy.version`,
and every receipt names the version it was produced under, so a new threshold never
silently rewrites the meaning of old transitions.

The opening rules, rollout mode, kill switch and probe source (``failure_rate_permille``
and the fields after it) are left out of :meth:`Policy.to_dict` while they hold their defaults, so a
policy that does not use them keeps the version and receipts it always had.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._canonical import canonical_json
from toolbreaker.core._config import known_fields, load_toml
from toolbreaker.core._files import shown

if TYPE_CHECKING:
    from pathlib import Path
from toolbreaker.errors import PolicyError

__all__ = ["MAX_COUNT", "MAX_DURATION_MS", "PROBES", "Policy"]

_OPTIONAL = frozenset({"window_ms"})
#: The longest duration a policy may hold (30 days): every store keeps it, and a derived
#: key lifetime (a few of them added up) stays far below Redis's signed 64-bit PEXPIRE.
MAX_DURATION_MS: Final = 30 * 24 * 3600 * 1000
#: The largest threshold, limit or multiplier a policy may hold.
MAX_COUNT: Final = 1_000_000
_DURATIONS: Final = frozenset(
    {"window_ms", "cooldown_ms", "cooldown_max_ms", "lease_ttl_ms", "slow_call_ms"}
)
#: ``cooldown_max_ms`` when unset: this, or ``cooldown_ms`` when that is longer.
DEFAULT_COOLDOWN_MAX_MS: Final = 300_000
#: Fields added for the opening rules, rollout modes and the kill switch, with their
#: defaults: :meth:`Policy.to_dict` leaves them out while they hold these.
_ADDED: Final[dict[str, object]] = {
    "failure_rate_permille": None,
    "slow_call_ms": None,
    "slow_call_rate_permille": None,
    "minimum_calls": None,
    "window_calls": None,
    "mode": "enforce",
    "force": None,
    "force_reason": None,
    "probes": "calls",
}
#: The largest count-based window: the state keeps one entry per call in it.
MAX_WINDOW_CALLS: Final = 1000
#: A time-based rate window is kept in this many aligned buckets of ``window_ms // 10``.
WINDOW_BUCKETS: Final = 10
MODES: Final = ("enforce", "shadow")
FORCES: Final = ("open", "closed")
#: Who may probe a breaker whose cooldown has elapsed: any request (``calls``), or only
#: the breaker's health checker (``health-check``).
PROBES: Final = ("calls", "health-check")


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
        failure_rate_permille: open when failures (ambiguous outcomes included) make up
            at least this many per mille of the calls in the window, once the window
            holds ``minimum_calls`` calls; replaces the ``failure_threshold`` count.
        slow_call_ms: a success that took longer than this is a slow call.
        slow_call_rate_permille: open when slow calls make up at least this many per
            mille of the calls in the window (needs ``slow_call_ms``); a slow probe
            reopens the breaker.
        minimum_calls: the volume below which no rate opens the breaker.
        window_calls: a count-based rate window: the last ``window_calls`` calls. Without
            it, rates are taken over ``window_ms`` (in ten aligned buckets).
        mode: ``enforce``, or ``shadow``: decide and record everything, reject nothing
            (transitions of requests that would have been rejected say so).
        force: the kill switch: ``open`` rejects every request, ``closed`` admits every
            request (recording what would have been rejected).
        force_reason: the operator's reason, shown to the model while forced open.
        probes: ``calls`` (any request past the cooldown may probe), or
            ``health-check``: only the breaker's health checker probes (requests whose
            event says ``health_check``); a user's request is rejected while open
            (``cooldown``, for as long as no check has passed) and half-open
            (``probe-limit``), so real traffic never probes a dead dependency. Set by a
            sheet row's ``health_check`` table.

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
    failure_rate_permille: int | None = None
    slow_call_ms: int | None = None
    slow_call_rate_permille: int | None = None
    minimum_calls: int | None = None
    window_calls: int | None = None
    mode: str = "enforce"
    force: str | None = None
    force_reason: str | None = None
    probes: str = "calls"

    def __post_init__(self) -> None:
        if self.cooldown_max_ms is None and type(self.cooldown_ms) is int:
            resolved = max(DEFAULT_COOLDOWN_MAX_MS, self.cooldown_ms)
            object.__setattr__(self, "cooldown_max_ms", resolved)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in _OPTIONAL | _ADDED.keys():
                continue
            if f.name in ("mode", "force", "force_reason", "probes"):
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
        self._check_rules()
        self._check_modes()

    def _check_rules(self) -> None:
        for name in ("failure_rate_permille", "slow_call_rate_permille"):
            value = getattr(self, name)
            if value is not None and value > 1000:
                raise PolicyError(f"{name} must be at most 1000, got {value}", field=name)
        rated = self.uses_rates
        if self.slow_call_rate_permille is not None and self.slow_call_ms is None:
            raise PolicyError(
                "slow_call_rate_permille needs slow_call_ms (what counts as slow)",
                field="slow_call_rate_permille",
            )
        if self.slow_call_ms is not None and self.slow_call_rate_permille is None:
            raise PolicyError(
                "slow_call_ms needs slow_call_rate_permille (the rate that opens)",
                field="slow_call_ms",
            )
        if not rated:
            for name in ("minimum_calls", "window_calls"):
                if getattr(self, name) is not None:
                    raise PolicyError(
                        f"{name} needs failure_rate_permille or slow_call_rate_permille",
                        field=name,
                    )
            return
        if self.minimum_calls is None:
            raise PolicyError(
                "a rate rule needs minimum_calls (the volume below which it never opens)",
                field="minimum_calls",
            )
        if (self.window_calls is None) == (self.window_ms is None):
            raise PolicyError(
                "a rate rule needs exactly one window: window_calls (count-based) or "
                "window_ms (time-based)",
                field="window_calls",
            )
        if self.window_calls is not None:
            if self.window_calls > MAX_WINDOW_CALLS:
                raise PolicyError(
                    f"window_calls must be at most {MAX_WINDOW_CALLS}, got {self.window_calls}",
                    field="window_calls",
                )
            if self.minimum_calls > self.window_calls:
                raise PolicyError(
                    f"minimum_calls ({self.minimum_calls}) exceeds window_calls "
                    f"({self.window_calls}): the rate could never open the breaker",
                    field="minimum_calls",
                )

    def _check_modes(self) -> None:
        if self.mode not in MODES:
            raise PolicyError(
                f"mode must be 'enforce' or 'shadow', got {self.mode!r}", field="mode"
            )
        if self.force is not None and self.force not in FORCES:
            raise PolicyError(
                f"force must be 'open' or 'closed', got {self.force!r}", field="force"
            )
        if self.probes not in PROBES:
            raise PolicyError(
                f"probes must be 'calls' or 'health-check', got {shown(self.probes)}",
                field="probes",
            )
        reason = self.force_reason
        if reason is not None:
            if self.force is None:
                raise PolicyError("force_reason needs force", field="force_reason")
            if not isinstance(reason, str) or not reason.strip() or len(reason) > 300:
                raise PolicyError(
                    "force_reason must be a non-empty string of at most 300 characters",
                    field="force_reason",
                )

    @property
    def uses_rates(self) -> bool:
        """Whether a rate rule is set, so closed breakers keep a window of outcomes."""
        return self.failure_rate_permille is not None or self.slow_call_rate_permille is not None

    @property
    def admits_all(self) -> bool:
        """Whether requests the breaker would reject are admitted (shadow, forced closed)."""
        return self.force == "closed" or (self.mode == "shadow" and self.force is None)

    @property
    def health_probes(self) -> bool:
        """Whether only the health checker may probe (``probes = "health-check"``)."""
        return self.probes == "health-check"

    @property
    def bucket_ms(self) -> int:
        """The width of one bucket of a time-based rate window."""
        return max(1, (self.window_ms or 0) // WINDOW_BUCKETS)

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

    def to_dict(self) -> dict[str, int | str | None]:
        """The fields as a plain dict, in declaration order.

        Added fields at their defaults are left out, so older policies keep their version.
        """
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in _ADDED or getattr(self, f.name) != _ADDED[f.name]
        }

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
