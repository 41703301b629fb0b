"""The registry: one breaker per (dependency, operation class), loaded from a boundary sheet.

A boundary sheet is TOML. ``[defaults]`` applies to every breaker; every other table is a
dependency whose sub-tables are operation classes::

    [defaults]
    timeout = 4.0                 # seconds; every call needs a deadline
    cooldown_ms = 30000

    [tools]
    local = ["search_catalog_snapshot"]   # fallbacks that need no breaker

    [search.read]
    tool = "search_catalog"       # the name the model sees
    fallback = "search_catalog_snapshot"
    fallback_note = "say in your answer that prices may be out of date"
    owner = "catalog-team"
    retryable = true
    failure_threshold = 4         # any Policy field
    window_ms = 60000

    [billing.write]
    tool = "charge_card"
    timeout = 10.0
    retryable = false
    failure_threshold = 6

A payment mutation never shares state or retry policy with a catalog read: each entry is
its own breaker. Invalid sheets fail at load with the field (``search.read.fallback``) and
line named.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.config import load_toml
from toolbreaker.core.files import shown
from toolbreaker.errors import PolicyError, RegistryFull
from toolbreaker.runtime._boundary import POLICY_FIELDS, Boundary, Enforce, check_seconds
from toolbreaker.runtime._breaker import Breaker, clock_of
from toolbreaker.runtime._clock import Clock
from toolbreaker.runtime._degrade import check_store
from toolbreaker.stores._protocol import Store
from toolbreaker.stores.memory import MemoryStore

__all__ = ["Boundary", "Registry"]

_DEFAULT_ONLY: Final = POLICY_FIELDS | {"timeout", "enforce", "retryable", "owner", "instructions"}


class Registry:
    """Hands out the same :class:`Breaker` for the same key, bounded in number.

    Args:
        default_policy: the policy of breakers the sheet does not describe.
        store: where every breaker's state lives (shared by all of them).
        clock: integer-millisecond monotonic clock; by default the store's own (Redis:
            the server's time), else this host's.
        default_timeout: deadline in seconds for breakers without one.
        boundaries: sheet rows, keyed by ``(dependency, operation)``.
        local_tools: tool names that may be fallbacks without a breaker of their own.
        max_breakers: the cardinality limit; past it :meth:`get` raises
            :class:`~toolbreaker.errors.RegistryFull`.
        strict: refuse keys the sheet does not describe instead of using the defaults.
    """

    def __init__(
        self,
        default_policy: Policy | None = None,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        default_timeout: float | None = None,
        default_enforce: Enforce = "thread",
        boundaries: Mapping[tuple[str, str], Boundary] | None = None,
        local_tools: frozenset[str] | set[str] | tuple[str, ...] = (),
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> None:
        if type(max_breakers) is not int or max_breakers <= 0:
            raise PolicyError("max_breakers must be a positive integer", field="max_breakers")
        self.default_policy = default_policy or Policy()
        self.store: Store = store if store is not None else MemoryStore()
        self.clock: Clock = clock or clock_of(self.store)
        self.default_timeout = default_timeout
        self.default_enforce: Enforce = default_enforce
        self.max_breakers = max_breakers
        self.strict = strict
        self._boundaries = dict(boundaries or {})
        self._local_tools = frozenset(local_tools)
        self._breakers: dict[tuple[str, str], Breaker] = {}
        self._lock = threading.Lock()
        self._callables: dict[str, Callable[..., Any]] = {}
        _check_fallbacks(self._boundaries, self._local_tools)
        check_store(self._boundaries, self.store)

    @classmethod
    def from_toml(
        cls,
        path: str | Path,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> Registry:
        """Load a boundary sheet; errors name the file, the line and the field."""
        registry: Registry = load_toml(
            path,
            lambda data: cls.from_dict(
                data, store=store, clock=clock, max_breakers=max_breakers, strict=strict
            ),
        )
        return registry

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> Registry:
        """Build a registry from a decoded boundary sheet."""
        defaults = _table(data.get("defaults", {}), "defaults")
        for key in defaults:
            if key not in _DEFAULT_ONLY:
                raise PolicyError(f"unknown field {key!r} in [defaults]", field=f"defaults.{key}")
        tools = _table(data.get("tools", {}), "tools")
        local = tools.get("local", [])
        if (
            set(tools) - {"local"}
            or not isinstance(local, list)
            or not all(isinstance(x, str) and x for x in local)
        ):
            raise PolicyError("[tools] takes one key, local = [tool names]", field="tools.local")
        timeout = defaults.get("timeout")
        if timeout is not None:
            check_seconds(timeout, "defaults.timeout")
        base_policy = _policy({k: v for k, v in defaults.items() if k in POLICY_FIELDS}, "defaults")
        boundaries: dict[tuple[str, str], Boundary] = {}
        for dependency, operations in data.items():
            if dependency in ("defaults", "tools"):
                continue
            _check_key(dependency, dependency)
            for operation, row in _table(operations, dependency).items():
                where = f"{dependency}.{operation}"
                _check_key(operation, where)
                table = {**defaults, **_table(row, where)}
                boundaries[(dependency, operation)] = Boundary.from_row(
                    dependency, operation, table, where
                )
        return cls(
            base_policy,
            store=store,
            clock=clock,
            default_timeout=timeout,
            default_enforce=_enforce(defaults.get("enforce", "thread"), "defaults.enforce"),
            boundaries=boundaries,
            local_tools=frozenset(local),
            max_breakers=max_breakers,
            strict=strict,
        )

    def get(self, dependency: str, operation: str = "default", **options: Any) -> Breaker:
        """The breaker of ``(dependency, operation)``, created on first use.

        ``options`` (``tool``, ``fallback``, ``timeout`` ...) apply only when the breaker
        is created; a sheet row takes precedence over the registry defaults.

        Raises:
            RegistryFull: the registry already holds ``max_breakers`` breakers.
            PolicyError: ``strict`` and the sheet does not describe the key, or an option
                is invalid.
        """
        _check_key(dependency, "dependency")
        _check_key(operation, "operation")
        key = (dependency, operation)
        breaker = self._breakers.get(key)
        if breaker is not None:
            return breaker
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                if len(self._breakers) >= self.max_breakers:
                    raise RegistryFull(self.max_breakers, f"{dependency}:{operation}")
                breaker = self._create(dependency, operation, options)
                self._breakers[key] = breaker
        return breaker

    def _create(self, dependency: str, operation: str, options: Mapping[str, Any]) -> Breaker:
        row = self._boundaries.get((dependency, operation))
        if row is None:
            if self.strict:
                raise PolicyError(
                    f"the boundary sheet has no [{dependency}.{operation}] and the registry "
                    "is strict",
                    field=f"{dependency}.{operation}",
                )
            row = Boundary(
                dependency,
                operation,
                self.default_policy,
                timeout=self.default_timeout,
                enforce=self.default_enforce,
            )
        if options:
            row = row.with_options(options)
        if row.fallback is not None and row.fallback not in self.tool_names():
            raise PolicyError(
                f"fallback {row.fallback!r} of {dependency}.{operation} is not a registered tool",
                field=f"{dependency}.{operation}.fallback",
            )
        breaker = Breaker(dependency, store=self.store, clock=self.clock, boundary=row)
        breaker.degradation.tools = self._callables
        return breaker

    def register_local(self, name: str, fn: Callable[..., Any]) -> None:
        """Register the code of a local tool, run by rows whose ``degrade`` names ``degraded``.

        ``name`` must be a tool the registry knows (``[tools] local`` or a row's tool): a
        row with ``fallback = name`` and ``degrade = ["degraded", ...]`` then answers with
        ``fn(**args)`` (labelled degraded) while its own tool is unavailable.

        Raises:
            PolicyError: ``name`` is not a known tool, or ``fn`` is not callable.
        """
        if name not in self.tool_names():
            raise PolicyError(f"{name!r} is not a registered tool", field="tools.local")
        if not callable(fn):
            raise PolicyError(f"the local tool {name!r} must be callable", field="tools.local")
        self._callables[name] = fn

    def tool_names(self) -> frozenset[str]:
        """Every tool name the registry knows: sheet rows, live breakers, local tools."""
        names = {row.tool or row.dependency for row in self._boundaries.values()}
        names.update(b.tool for b in self._breakers.values())
        return frozenset(names) | self._local_tools

    def for_tool(self, tool: str) -> Breaker:
        """The breaker of the sheet row whose ``tool`` is ``tool``.

        Raises:
            KeyError: no sheet row or live breaker has that tool name.
        """
        for breaker in tuple(self._breakers.values()):
            if breaker.tool == tool:
                return breaker
        for (dependency, operation), row in self._boundaries.items():
            if (row.tool or dependency) == tool:
                return self.get(dependency, operation)
        raise KeyError(tool)

    def boundaries(self) -> dict[tuple[str, str], Boundary]:
        """The sheet rows, keyed by ``(dependency, operation)``."""
        return dict(self._boundaries)

    def __iter__(self) -> Iterator[Breaker]:
        return iter(tuple(self._breakers.values()))

    def __len__(self) -> int:
        return len(self._breakers)

    def close(self) -> None:
        """Release every breaker's worker threads."""
        for breaker in self:
            breaker.close()


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyError(f"[{where}] must be a table", field=where)
    return dict(value)


def _policy(fields: Mapping[str, Any], where: str) -> Policy:
    try:
        return Policy.from_dict(fields)
    except PolicyError as exc:
        raise PolicyError(
            f"{where}.{exc.message}" if exc.field else exc.message,
            field=f"{where}.{exc.field}" if exc.field else where,
        ) from None


#: The longest dependency or operation name: the registry bounds bytes, not only breakers.
MAX_KEY_CHARS: Final = 200


def _check_key(value: object, field: str) -> None:
    """A registry key part is a non-empty string of valid Unicode, at most MAX_KEY_CHARS."""
    if not isinstance(value, str):
        raise PolicyError(f"{field} must be a string, got {shown(value)}", field=field)
    if not value or len(value) > MAX_KEY_CHARS:
        raise PolicyError(
            f"{field} must have 1 to {MAX_KEY_CHARS} characters, got {len(value)}", field=field
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PolicyError(
            f"{field} {shown(value)} is not valid Unicode text (a lone surrogate)", field=field
        ) from None


def _enforce(value: object, field: str) -> Enforce:
    if value == "thread":
        return "thread"
    if value == "cooperative":
        return "cooperative"
    raise PolicyError(f"{field} must be 'thread' or 'cooperative', got {value!r}", field=field)


def _check_fallbacks(
    boundaries: Mapping[tuple[str, str], Boundary], local_tools: frozenset[str]
) -> None:
    tools = {row.tool or row.dependency for row in boundaries.values()} | local_tools
    for (dependency, operation), row in boundaries.items():
        if row.fallback is not None and row.fallback not in tools:
            raise PolicyError(
                f"{dependency}.{operation}.fallback {row.fallback!r} is not a registered tool "
                f"(known: {', '.join(sorted(tools))}; add it to [tools] local if it needs no "
                "breaker)",
                field=f"{dependency}.{operation}.fallback",
            )
