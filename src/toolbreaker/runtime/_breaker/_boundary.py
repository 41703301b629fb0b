"""One row of the boundary sheet: everything a breaker is configured with, validated once.

A :class:`Boundary` is the only place a breaker option is declared; the rules every
option obeys, from a sheet or from code, are the sheet's (:mod:`toolbreaker.runtime._sheet`,
:func:`~toolbreaker.runtime._sheet.row_values`), and the row holds what they return. The
:class:`~toolbreaker.Breaker` constructor builds one from its keyword arguments, the
registry one per sheet row, and the framework adapters take their option names from
:data:`BREAKER_OPTIONS`; adding an option means adding a field here, its rule to the
sheet's table of options, and its key to :class:`BreakerOptions` (the options as typed
keyword arguments, which ``Breaker(...)`` and the adapters' tool options take; tests hold
both to the fields).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypedDict

from toolbreaker.core._breaker.keys import breaker_key
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._retry import RetryPolicy
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._breaker._classify import Verdict, classify_exception
from toolbreaker.runtime._sheet import (
    SHEET_OPTIONS,
    Enforce,
    HealthCheck,
    check_seconds,
    row_values,
)
from toolbreaker.runtime._sheet import row as sheet_row

__all__ = [
    "BREAKER_OPTIONS",
    "BREAKER_TOOL_OPTIONS",
    "SHEET_OPTIONS",
    "Boundary",
    "BreakerOptions",
    "BreakerToolOptions",
    "Enforce",
    "HealthCheck",
    "check_seconds",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Boundary:
    """One row of the boundary sheet: everything a breaker is configured with.

    Every field is validated when the row is built; a bad value is a
    :class:`~toolbreaker.errors.PolicyError` naming the field.

    Attributes:
        dependency: the remote dependency.
        operation: the operation class (``read``, ``write``, ``default`` ...).
        policy: thresholds, cooldowns and probes.
        tool: the tool name the model sees (defaults to the dependency).
        timeout: the deadline in seconds; every call needs one.
        enforce: how sync deadlines are enforced.
        retryable: whether the model may retry a transient failure while closed.
        fallback: the tool to use while this one is unavailable.
        fallback_note: what the model must say when it uses the fallback.
        owner: who to page.
        instructions: per-reason instruction templates.
        classifier: decides what an exception says about the dependency (code only).
        result_is_failure: a predicate on results, e.g. a 200 whose body is an error
            (code only).
        scope: key one breaker per value of this scope (``tenant``, ``api_key``,
            ``agent``), set with :func:`toolbreaker.scope`; calls without a value use the
            row's own breaker.
        max_scopes: the most scoped breakers the row keeps in a process; past it the
            least recently used closed one is forgotten (its state stays in the store),
            and when none is closed, new values share one overflow breaker (logged and
            counted), so an open breaker is never dropped.
        retry: the row's retry policy (a nested ``retry`` table in the sheet), used by
            ``call()``/``acall()``; ``None``: no retries at this layer. Retries belong to
            one chosen layer: turn the others off (a client's ``max_retries=0``).
        max_retry_after_ms: a server hint (``Retry-After`` ...) longer than this is not
            waited out: the tool is unavailable for the run and the model is told so.
            ``None``: no limit.
        degrade: the degradation chain while the tool may not be called (a mode or a list:
            ``omit``, ``stale``, ``degraded``, ``queue``, ``handoff``, ``stop``; see
            :mod:`toolbreaker.core._degrade`); empty: the plain tool-unavailable result.
        max_stale: seconds: the oldest last good answer ``stale`` may serve (read rows).
        stale_every: seconds: a success refreshes the kept answer at most this often, so a
            busy read does not pay a store round trip per call.
        health_check: a cheap check a health checker runs while the breaker is open
            (:class:`HealthCheck`, or its sheet table); it sets the policy's
            ``probes = "health-check"``, so only the checker probes.
        max_concurrent: the bulkhead: the most calls of this row in flight at once (in
            this process, and across processes when the store is shared), counted until
            they really end (a sync call still running past its deadline too); a call
            over the limit is answered at once with reason ``saturated``. ``None``: no
            limit.
        defaults: the registry made this row from the sheet's ``[defaults]``: the sheet
            has no row of its own for the breaker (its ``stats.on_defaults``). Set by the
            registry; not an option.
    """

    dependency: str
    operation: str = "default"
    policy: Policy = dataclasses.field(default_factory=Policy)
    tool: str | None = None
    timeout: float | None = None
    enforce: Enforce = "thread"
    retryable: bool = True
    fallback: str | None = None
    fallback_note: str = ""
    owner: str | None = None
    instructions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    classifier: Callable[[BaseException], Verdict] = classify_exception
    result_is_failure: Callable[[Any], bool] | None = None
    scope: str | None = None
    max_scopes: int = 1000
    retry: RetryPolicy | None = None
    max_retry_after_ms: int | None = None
    degrade: tuple[str, ...] = ()
    max_stale: float | None = None
    stale_every: float = 5.0
    health_check: HealthCheck | None = None
    max_concurrent: int | None = None
    defaults: bool = False

    def __post_init__(self) -> None:
        # Built by a sheet or in code, a row obeys the one set of rules of a row, the
        # sheet's (toolbreaker.runtime._sheet.row_values); it holds what they return.
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, value in row_values(given).items():
            if value is not given[name]:
                object.__setattr__(self, name, value)

    @property
    def max_stale_ms(self) -> int | None:
        """``max_stale`` in milliseconds."""
        return None if self.max_stale is None else round(self.max_stale * 1000)

    @property
    def idempotent(self) -> bool:
        """Whether an attempt may be replayed even if it may have committed (``read`` rows)."""
        return self.operation == "read" or (self.retry is not None and self.retry.idempotent)

    @property
    def key(self) -> str:
        """The breaker key: the dependency, with the operation class unless ``default``."""
        return breaker_key(self.dependency, self.operation)

    @classmethod
    def from_row(
        cls, dependency: str, operation: str, row: Mapping[str, Any], where: str | None = None
    ) -> Boundary:
        """Build a row from a decoded sheet table (policy fields and :data:`SHEET_OPTIONS`).

        The table's durations are the seconds a row holds (``timeout``); a sheet file's
        ``timeout_ms`` is read by :meth:`~toolbreaker.Registry.from_toml`.

        Raises:
            PolicyError: an unknown or invalid field, named as ``<where>.<field>``.
        """
        where = where or f"{dependency}.{operation}"
        return cls(dependency, operation, **sheet_row(dependency, operation, row, where))

    def with_options(self, options: Mapping[str, Any]) -> Boundary:
        """A copy with some :data:`BREAKER_OPTIONS` replaced (validated again).

        Raises:
            PolicyError: an unknown option or an invalid value.
        """
        for name in options:
            if name not in BREAKER_OPTIONS:
                known = ", ".join(sorted(BREAKER_OPTIONS))
                raise PolicyError(f"unknown breaker option {name!r} (known: {known})", field=name)
        return dataclasses.replace(self, **options)


#: Options a breaker takes, besides its dependency and operation: every field of
#: :class:`Boundary` but ``defaults`` (the registry's to set). Adapters take their option
#: names from here.
BREAKER_OPTIONS: Final = frozenset(f.name for f in dataclasses.fields(Boundary)) - {
    "dependency",
    "operation",
    "defaults",
}


class BreakerToolOptions(TypedDict, total=False):
    """The breaker options an adapter's tool may set, as keyword arguments.

    Every option but the tool's name and the code-only classifier and result predicate
    (the adapter sets or keeps those); see :class:`Boundary` for what each means.
    """

    policy: Policy | None
    timeout: float | None
    enforce: Enforce
    retryable: bool
    fallback: str | None
    fallback_note: str
    owner: str | None
    instructions: Mapping[str, str] | None
    scope: str | None
    max_scopes: int
    retry: RetryPolicy | Mapping[str, Any] | None
    max_retry_after_ms: int | None
    degrade: str | Sequence[str]
    max_stale: float | None
    stale_every: float
    health_check: HealthCheck | Mapping[str, Any] | Callable[[], Any] | None
    max_concurrent: int | None


class BreakerOptions(BreakerToolOptions, total=False):
    """Every breaker option (:data:`BREAKER_OPTIONS`) as keyword arguments, typed.

    ``Breaker(dependency, **options)``; :class:`Boundary` converts and checks them (a
    retry table, a degrade mode or list, a health check callable or table, ``None`` for
    the default policy or instructions).
    """

    tool: str | None
    classifier: Callable[[BaseException], Verdict]
    result_is_failure: Callable[[Any], bool] | None


#: The option names of :class:`BreakerToolOptions`.
BREAKER_TOOL_OPTIONS: Final = frozenset(BreakerToolOptions.__optional_keys__)
