"""One row of the boundary sheet: everything a breaker is configured with, validated once.

A :class:`Boundary` is the only place a breaker option is declared and checked. The
:class:`~toolbreaker.Breaker` constructor builds one from its keyword arguments, the
registry builds one per sheet row (:meth:`Boundary.from_row`), and the framework adapters
take their option names from :data:`BREAKER_OPTIONS`; adding an option means adding a
field here, and its key to :class:`BreakerOptions` (the options as typed keyword
arguments, which ``Breaker(...)`` and the adapters' tool options take; a test holds its
keys to the fields).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypedDict

from toolbreaker.core.breaker.keys import breaker_key
from toolbreaker.core.breaker.policy import MAX_DURATION_MS, Policy
from toolbreaker.core.config import where_in_source
from toolbreaker.core.degrade import check_chain
from toolbreaker.core.files import printable, shown
from toolbreaker.core.retry import RetryPolicy
from toolbreaker.core.run.redact import redact_text
from toolbreaker.errors import PolicyError, ToolbreakerDeprecationWarning
from toolbreaker.runtime._result import DEFAULT_INSTRUCTIONS, validate_template
from toolbreaker.runtime.breaker._classify import Verdict, classify_exception

__all__ = [
    "BREAKER_OPTIONS",
    "BREAKER_TOOL_OPTIONS",
    "CHECK_DURATION",
    "POLICY_FIELDS",
    "SHEET_DURATIONS",
    "SHEET_OPTIONS",
    "Boundary",
    "BreakerOptions",
    "BreakerToolOptions",
    "Enforce",
    "HealthCheck",
    "OldSpellings",
    "as_written",
    "check_seconds",
    "named_units",
    "old_spelling_notes",
    "warn_old_spellings",
]

#: How a deadline is enforced: ``thread`` runs a sync call in a worker and returns at the
#: deadline (async calls are always cancelled at it); ``cooperative`` trusts the callable
#: to honour the timeout it was given and treats a result arriving after the deadline as
#: ambiguous.
Enforce = Literal["thread", "cooperative"]

#: The largest bulkhead (``max_concurrent``) a row may declare.
MAX_CONCURRENT: Final = 10_000

#: The :class:`~toolbreaker.Policy` fields a sheet row may set directly.
POLICY_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(Policy))


@dataclasses.dataclass(frozen=True, slots=True)
class HealthCheck:
    """A cheap check of a dependency, run by a health checker while its breaker is open.

    Its result is a probe (the same leases, success quorum and receipts as a user's
    probe), so recovery spends no user call; and while a row has a health check, user
    calls are never admitted as probes (the policy's ``probes = "health-check"``).

    In a sheet row: ``health_check = { url = "http://host/health", interval_ms = 2000,
    timeout_ms = 1000 }`` (a ``GET``: any 2xx passes), or without ``url`` for a check
    registered in code with :meth:`~toolbreaker.Registry.health_check`. In code the
    check's deadline is ``timeout``, in seconds, as every deadline keyword is.

    Attributes:
        check: a callable or coroutine function of no arguments (code only): it passes
            unless it raises or returns ``False``.
        url: a URL to ``GET`` instead (``http`` or ``https``).
        interval_ms: the time between two checks of one breaker (jittered by up to a
            fifth either way), once its cooldown has elapsed.
        timeout: the check's own deadline in seconds; a check that runs past it (or
            hangs) is a failed probe.
    """

    check: Callable[[], Any] | None = None
    url: str | None = None
    interval_ms: int = 2000
    timeout: float = 1.0

    def __post_init__(self) -> None:
        if self.check is not None and not callable(self.check):
            raise PolicyError("health_check.check must be callable", field="health_check.check")
        url = self.url
        if url is not None and (
            not isinstance(url, str)
            or not url.startswith(("http://", "https://"))
            or len(url) > 2000
            or not url.isprintable()
        ):
            raise PolicyError(
                f"health_check.url must be an http(s) URL, got {shown(url)}",
                field="health_check.url",
            )
        if self.check is not None and url is not None:
            raise PolicyError("a health check is a url or a check, not both", field="health_check")
        interval = self.interval_ms
        if type(interval) is not int or not 10 <= interval <= MAX_DURATION_MS:
            raise PolicyError(
                f"health_check.interval_ms must be an integer from 10 to {MAX_DURATION_MS}, "
                f"got {shown(interval)}",
                field="health_check.interval_ms",
            )
        object.__setattr__(self, "timeout", check_seconds(self.timeout, "health_check.timeout"))

    @classmethod
    def from_value(cls, value: object) -> HealthCheck:
        """A sheet's ``health_check`` table (or a ready :class:`HealthCheck`, or a check).

        Raises:
            PolicyError: not a table, an unknown key, or a bad value.
        """
        if isinstance(value, HealthCheck):
            return value
        if callable(value):  # a check registered in code
            return cls(check=value)
        if not isinstance(value, Mapping):
            raise PolicyError(
                "health_check must be a table: { url = ..., interval_ms = ..., timeout_ms = ... }",
                field="health_check",
            )
        for key in value:
            if key not in ("url", "interval_ms", "timeout"):
                raise PolicyError(
                    f"unknown field {shown(key)} in health_check (known: interval_ms, "
                    "timeout_ms, url)",
                    field=f"health_check.{key}",
                )
        return cls(**value)


@dataclasses.dataclass(frozen=True, slots=True)
class Boundary:
    """One row of the boundary sheet: everything a breaker is configured with.

    Every field is validated when the row is built; a bad value is a
    :class:`~toolbreaker.PolicyError` naming the field.

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
            :mod:`toolbreaker.core.degrade`); empty: the plain tool-unavailable result.
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
        for name in ("dependency", "operation"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise PolicyError(f"{name} must be a non-empty string, got {value!r}", field=name)
        if self.policy is None:  # the default, as a keyword argument can say
            object.__setattr__(self, "policy", Policy())
        if not isinstance(self.policy, Policy):
            raise PolicyError(f"policy must be a Policy, got {self.policy!r}", field="policy")
        if self.timeout is not None:
            timeout = check_seconds(self.timeout, "timeout")
            if timeout * 1000 > self.policy.lease_ttl_ms:
                raise PolicyError(
                    f"timeout ({timeout} s) exceeds lease_ttl_ms ({self.policy.lease_ttl_ms}): "
                    "a probe would be declared lost before its call times out",
                    field="timeout",
                )
        if self.enforce not in ("thread", "cooperative"):
            raise PolicyError(
                f"enforce must be 'thread' or 'cooperative', got {self.enforce!r}",
                field="enforce",
            )
        if type(self.retryable) is not bool:
            raise PolicyError("retryable must be true or false", field="retryable")
        if type(self.defaults) is not bool:
            raise PolicyError("defaults must be true or false", field="defaults")
        for name in ("tool", "fallback", "owner"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise PolicyError(f"{name} must be a non-empty string", field=name)
        if not isinstance(self.fallback_note, str):
            raise PolicyError("fallback_note must be a string", field="fallback_note")
        if self.instructions is None:
            object.__setattr__(self, "instructions", {})
        if not isinstance(self.instructions, Mapping):
            raise PolicyError("instructions must be a table of templates", field="instructions")
        checked = {}
        for reason, text in self.instructions.items():
            where = f"instructions.{reason}"
            if reason not in DEFAULT_INSTRUCTIONS:
                raise PolicyError(
                    f"unknown instruction reason {shown(reason)} "
                    f"(known: {', '.join(sorted(DEFAULT_INSTRUCTIONS))})",
                    field=where,
                )
            if not isinstance(text, str):
                raise PolicyError(f"{where} must be a string", field=where)
            checked[str(reason)] = validate_template(text, where=where)
        object.__setattr__(self, "instructions", checked)
        if not callable(self.classifier):
            raise PolicyError("classifier must be callable", field="classifier")
        if self.result_is_failure is not None and not callable(self.result_is_failure):
            raise PolicyError("result_is_failure must be callable", field="result_is_failure")
        if self.scope is not None and (
            not isinstance(self.scope, str) or not self.scope.isidentifier()
        ):
            raise PolicyError(
                f"scope must be a name such as 'tenant', got {self.scope!r}", field="scope"
            )
        if type(self.max_scopes) is not int or not 0 < self.max_scopes <= 1_000_000:
            raise PolicyError(
                f"max_scopes must be an integer from 1 to 1000000, got {self.max_scopes!r}",
                field="max_scopes",
            )
        self._check_retry()
        self._check_degrade()
        limit = self.max_concurrent
        if limit is not None and (type(limit) is not int or not 0 < limit <= MAX_CONCURRENT):
            raise PolicyError(
                f"max_concurrent must be an integer from 1 to {MAX_CONCURRENT}, got {shown(limit)}",
                field="max_concurrent",
            )
        self._check_health()

    def _check_health(self) -> None:
        if self.health_check is None:
            if self.policy.probes == "health-check":
                raise PolicyError(
                    "probes = 'health-check' needs a health_check (nothing else would probe)",
                    field="probes",
                )
            return
        check = HealthCheck.from_value(self.health_check)
        if check.timeout * 1000 > self.policy.lease_ttl_ms:
            raise PolicyError(
                f"health_check.timeout ({check.timeout} s) exceeds lease_ttl_ms "
                f"({self.policy.lease_ttl_ms})",
                field="health_check.timeout",
            )
        object.__setattr__(self, "health_check", check)
        if self.policy.probes != "health-check":
            object.__setattr__(
                self, "policy", dataclasses.replace(self.policy, probes="health-check")
            )

    def _check_retry(self) -> None:
        retry = self.retry
        if isinstance(retry, Mapping):
            try:
                retry = RetryPolicy.from_dict(retry)
            except PolicyError as exc:
                field = f"retry.{exc.field}" if exc.field else "retry"
                raise PolicyError(f"retry: {exc.message}", field=field) from None
            object.__setattr__(self, "retry", retry)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise PolicyError(
                f"retry must be a RetryPolicy or a table, got {retry!r}", field="retry"
            )
        cap = self.max_retry_after_ms
        if cap is not None and (type(cap) is not int or cap < 0):
            raise PolicyError(
                f"max_retry_after_ms must be a non-negative integer, got {cap!r}",
                field="max_retry_after_ms",
            )

    def _check_degrade(self) -> None:
        max_stale = None if self.max_stale is None else check_seconds(self.max_stale, "max_stale")
        if isinstance(self.stale_every, bool) or not isinstance(self.stale_every, (int, float)):
            raise PolicyError("stale_every must be a number of seconds", field="stale_every")
        if not 0 <= self.stale_every <= 3600:
            raise PolicyError(
                f"stale_every must be from 0 to 3600 seconds, got {self.stale_every!r}",
                field="stale_every",
            )
        chain = check_chain(
            self.degrade,
            operation=self.operation,
            fallback=self.fallback,
            max_stale_ms=None if max_stale is None else round(max_stale * 1000),
        )
        object.__setattr__(self, "degrade", chain)

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

        Raises:
            PolicyError: an unknown or invalid field, named as ``<where>.<field>``.
        """
        where = where or f"{dependency}.{operation}"
        for key in row:
            if key not in POLICY_FIELDS and key not in SHEET_OPTIONS:
                raise PolicyError(
                    f"unknown field {shown(key)} in [{shown(where)[1:-1]}]", field=f"{where}.{key}"
                )
        if row.get("timeout") is None:
            raise PolicyError(
                f"{where} has no timeout: every call needs a deadline (set timeout_ms in the row "
                "or in [defaults])",
                field=f"{where}.timeout",
            )
        options = {k: v for k, v in row.items() if k in SHEET_OPTIONS}
        try:
            policy = Policy.from_dict({k: v for k, v in row.items() if k in POLICY_FIELDS})
            return cls(dependency, operation, policy, **options)
        except PolicyError as exc:
            field = f"{where}.{exc.field}" if exc.field else where
            raise PolicyError(f"{where}.{exc.message}", field=field) from None

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
#: The options a TOML sheet row may set besides policy fields (code-only ones excluded).
SHEET_OPTIONS: Final = BREAKER_OPTIONS - {"policy", "classifier", "result_is_failure"}


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


#: The longest deadline, in seconds: a probe lease (at most 30 days) must outlive it.
MAX_TIMEOUT_S: Final = MAX_DURATION_MS / 1000


def check_seconds(value: object, field: str) -> float:
    """``value`` as positive seconds of at most 30 days; else a PolicyError naming ``field``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_TIMEOUT_S
    ):
        raise PolicyError(
            f"{field} must be a positive number of seconds of at most {MAX_TIMEOUT_S:g}, "
            f"got {shown(value)}",
            field=field,
        )
    return float(value)


#: A sheet's durations, each in milliseconds under a name that says so, and the old
#: spelling in seconds each replaces (the field of :class:`Boundary` it fills). The one
#: table of spellings: loading, the deprecation warning and its advice all read it.
SHEET_DURATIONS: Final = (
    ("timeout_ms", "timeout"),
    ("max_stale_ms", "max_stale"),
    ("stale_every_ms", "stale_every"),
)
#: The same for a row's ``health_check`` table.
CHECK_DURATION: Final = ("timeout_ms", "timeout")

#: Old spellings met in one sheet load: the old field (``timeout``,
#: ``health_check.timeout``) -> every (table, value) that used it, in file order.
OldSpellings = dict[str, list[tuple[str, object]]]

#: How many tables one warning names besides the first.
_ALSO_SHOWN: Final = 3


def named_units(
    table: Mapping[str, Any], where: str, old: OldSpellings | None = None
) -> dict[str, Any]:
    """A sheet table (``[defaults]`` or a row) with its durations as the row's fields.

    Every duration of a sheet names its unit, milliseconds, like the policy fields
    (``cooldown_ms``): ``timeout_ms``, ``max_stale_ms``, ``stale_every_ms`` and
    ``health_check = { timeout_ms = ... }`` become the seconds :class:`Boundary` holds.
    The old spellings in seconds (``timeout``, ``max_stale``, ``stale_every``,
    ``health_check.timeout``) still load; each one met is added to ``old`` (see
    :func:`warn_old_spellings`).

    Raises:
        PolicyError: both spellings of one field, or a value that is not a whole number
            of milliseconds in range, named as ``<where>.<field>``.
    """
    found: OldSpellings = {} if old is None else old
    out = dict(table)
    for new, before in SHEET_DURATIONS:
        if _in_seconds(out, new, before, where):
            found.setdefault(before, []).append((where, out[before]))
    check = out.get("health_check")
    if isinstance(check, Mapping):
        check = dict(check)
        new, before = CHECK_DURATION
        if _in_seconds(check, new, before, f"{where}.health_check"):
            found.setdefault(f"health_check.{before}", []).append((where, check[before]))
        out["health_check"] = check
    return out


def as_written(exc: PolicyError, written: Mapping[str, Any], where: str) -> PolicyError:
    """``exc`` about a row's duration, named as the row spelt it (``timeout_ms``).

    :class:`Boundary` checks the seconds a row's ``timeout_ms`` became, and names
    ``timeout``; the error names the field the file holds, so its line is found.
    """
    spelt = {new: before for new, before in SHEET_DURATIONS if new in written}
    check = written.get("health_check")
    if isinstance(check, Mapping) and CHECK_DURATION[0] in check:
        spelt[f"health_check.{CHECK_DURATION[0]}"] = f"health_check.{CHECK_DURATION[1]}"
    for new, before in spelt.items():
        if exc.field == f"{where}.{before}":
            message = exc.message.replace(f"{where}.{before}", f"{where}.{new}", 1)
            return PolicyError(message, field=f"{where}.{new}", file=exc.file, line=exc.line)
    return exc


def old_spelling_notes(old: OldSpellings) -> list[str]:
    """One line per old spelling met in a sheet load: where, and what to write instead.

    The first table that used it is located by file and line when a sheet file is being
    built (:func:`~toolbreaker.core.config.where_in_source`); the others are named.
    """
    notes = []
    for field, uses in old.items():
        (where, value), others = uses[0], [w for w, _ in uses[1:]]
        new = _NEW_NAMES[field]
        located = where_in_source(f"{where}.{field}")
        ms = _as_ms(value)
        advice = f"write {new} = {ms}" if ms is not None else f"write {new} in milliseconds"
        text = f"[{where}] {field} = {shown(value)} (seconds) is deprecated: {advice}"
        if others:
            named = ", ".join(f"[{w}]" for w in others[:_ALSO_SHOWN])
            more = len(others) - _ALSO_SHOWN
            text += f"; {field} is also in {named}{f' and {more} more' if more > 0 else ''}"
        notes.append(printable(redact_text(f"{located}: {text}" if located else text)))
    return notes


def warn_old_spellings(notes: Sequence[str]) -> None:
    """Each note as a :class:`~toolbreaker.errors.ToolbreakerDeprecationWarning`.

    Attributed to the first caller outside toolbreaker (the user's ``from_toml`` or
    ``from_dict`` line), so Python's default filters show it in a script.
    """
    if not notes:
        return
    level = _user_stacklevel()
    for note in notes:
        warnings.warn(note, ToolbreakerDeprecationWarning, stacklevel=level)


#: Each old spelling's new name.
_NEW_NAMES: Final = {before: new for new, before in SHEET_DURATIONS} | {
    f"health_check.{CHECK_DURATION[1]}": f"health_check.{CHECK_DURATION[0]}"
}


def _as_ms(value: object) -> int | None:
    """Seconds as the whole milliseconds to write, if they are whole."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value):
        return None
    ms = value * 1000
    return round(ms) if abs(ms - round(ms)) < 1e-6 and ms >= 0 else None


#: This package's directory, spelt as its modules' code objects name their files.
_PACKAGE: Final = str(Path(__file__).parents[2]) + os.sep


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside toolbreaker, seen from the caller."""
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # warn_old_spellings
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def _in_seconds(table: dict[str, Any], new: str, old: str, where: str) -> bool:
    """Convert ``new`` (ms) to ``old`` (seconds) in ``table``; whether ``old`` was used."""
    if new in table and old in table:
        raise PolicyError(
            f"{where}: {old} (in seconds) and {new} name one field: keep {new}",
            field=f"{where}.{new}",
        )
    if old in table:  # the old spelling, in seconds: still what the row holds
        return True
    if new not in table:
        return False
    value = table.pop(new)
    low = 0 if new == "stale_every_ms" else 1
    if type(value) is not int or not low <= value <= MAX_DURATION_MS:
        raise PolicyError(
            f"{where}.{new} must be a whole number of milliseconds from {low} to "
            f"{MAX_DURATION_MS}, got {shown(value)}",
            field=f"{where}.{new}",
        )
    table[old] = value / 1000
    return False
