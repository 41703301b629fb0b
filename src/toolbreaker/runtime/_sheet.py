"""The boundary sheet: the one parser of its tables, units, defaults and unknown fields.

A boundary sheet (see :mod:`toolbreaker.runtime._fleet._registry` for its shape) is read
here and nowhere else, and so is every option a row holds, from a sheet or from code:

- **tables and fields**: :func:`table` and :func:`known` are the one check of a table's
  shape and of the fields it may hold (the ``[mcp]`` table uses them too); :data:`TABLES`
  are the tables that name no dependency.
- **units**: every duration of a sheet names its unit, milliseconds (:func:`named_units`
  turns ``timeout_ms`` into the seconds a row holds; the old spellings in seconds load
  with a note each, :func:`old_spelling_notes`); :func:`check_seconds` is the rule of a
  deadline in seconds (:func:`toolbreaker.core._config.seconds` with a breaker's bound).
- **defaults**: ``[defaults]`` holds what every row inherits (:data:`DEFAULT_FIELDS`) and
  is checked as a row is: its deadline must fit its lease.
- **a row's options**: :func:`row_values` checks and converts every option of one row
  (a retry table, a degrade mode, a health check table or callable, ``None`` for the
  default policy). :class:`~toolbreaker.Boundary` holds what it returns, so a row built
  in code and a sheet's row obey one set of rules.
- **the whole sheet**: :func:`parse_sheet` turns a decoded sheet into a :class:`Sheet`,
  validated: what the registry is built from.

Pure: it takes decoded tables; reading a file and locating an error at its line are
:func:`toolbreaker.core._config.load_toml`'s (which the shells call with :func:`parse_sheet`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final, Literal

from toolbreaker.core._breaker.policy import MAX_DURATION_MS, Policy
from toolbreaker.core._breaker.sheet import MCP_TABLE
from toolbreaker.core._config import seconds, where_in_source
from toolbreaker.core._degrade import check_chain
from toolbreaker.core._files import printable, shown
from toolbreaker.core._retry import RetryPolicy
from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import PolicyError, ToolbreakerDeprecationWarning
from toolbreaker.runtime._result import DEFAULT_INSTRUCTIONS, validate_template

__all__ = [
    "CHECK_DURATION",
    "CODE_ONLY",
    "DEFAULT_FIELDS",
    "MAX_CONCURRENT",
    "MAX_KEY_CHARS",
    "MAX_TIMEOUT_S",
    "POLICY_FIELDS",
    "ROW_OPTIONS",
    "SHEET_DURATIONS",
    "SHEET_OPTIONS",
    "TABLES",
    "Enforce",
    "HealthCheck",
    "OldSpellings",
    "Sheet",
    "as_written",
    "check_fallbacks",
    "check_key",
    "check_seconds",
    "deadline",
    "enforce",
    "flag",
    "known",
    "named_units",
    "names",
    "old_spelling_notes",
    "parse_sheet",
    "row",
    "row_values",
    "table",
    "warn_old_spellings",
    "with_deadline",
]

#: How a deadline is enforced: ``thread`` runs a sync call in a worker and returns at the
#: deadline (async calls are always cancelled at it); ``cooperative`` trusts the callable
#: to honour the timeout it was given and treats a result arriving after the deadline as
#: ambiguous.
Enforce = Literal["thread", "cooperative"]

#: The tables of a sheet that name no dependency (nor an MCP server).
TABLES: Final = frozenset({"defaults", "tools", MCP_TABLE})
#: The :class:`~toolbreaker.Policy` fields a sheet row may set directly.
POLICY_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(Policy))
#: The largest bulkhead (``max_concurrent``) a row may declare.
MAX_CONCURRENT: Final = 10_000
#: The longest deadline, in seconds: a probe lease (at most 30 days) must outlive it.
MAX_TIMEOUT_S: Final = MAX_DURATION_MS / 1000
#: The longest dependency or operation name: the registry bounds bytes, not only breakers.
MAX_KEY_CHARS: Final = 200
#: The most scoped breakers one row may keep.
_MAX_SCOPES: Final = 1_000_000
#: The longest ``stale_every``, in seconds.
_MAX_STALE_EVERY: Final = 3600


def table(value: object, where: str) -> dict[str, Any]:
    """``value`` as a table of a sheet; anything else is a PolicyError naming ``where``."""
    if not isinstance(value, Mapping):
        raise PolicyError(f"[{where}] must be a table, got {shown(value)}", field=where)
    return dict(value)


def known(
    fields: Mapping[str, Any],
    names: Collection[str],
    where: str,
    *,
    listed: Sequence[str] | None = None,
) -> None:
    """Refuse a field of the table ``where`` that is not one of ``names``.

    ``listed``: the known names the error shows (as a user writes them); ``None`` shows
    none (a row, whose fields are many).
    """
    for key in fields:
        if key not in names:
            also = f" (known: {', '.join(listed)})" if listed is not None else ""
            raise PolicyError(
                f"unknown field {shown(key)} in [{shown(where)[1:-1]}]{also}",
                field=f"{where}.{key}",
            )


def flag(value: object, field: str) -> bool:
    """``value`` as ``true`` or ``false``, nothing else."""
    if not isinstance(value, bool):
        raise PolicyError(f"{field} must be true or false, got {shown(value)}", field=field)
    return value


def enforce(value: object, field: str) -> Enforce:
    """``value`` as an :data:`Enforce` mode."""
    if value == "thread":
        return "thread"
    if value == "cooperative":
        return "cooperative"
    raise PolicyError(f"{field} must be 'thread' or 'cooperative', got {value!r}", field=field)


def check_key(value: object, field: str) -> None:
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


def names(value: object, field: str) -> frozenset[str]:
    """A list of dependency names (``[defaults] unlisted``), each checked as a key."""
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise PolicyError(f"{field} must be a list of dependency names", field=field)
    for name in value:
        check_key(name, field)
    return frozenset(value)


def check_seconds(value: object, field: str) -> float:
    """``value`` as positive seconds of at most 30 days; else a PolicyError naming ``field``."""
    return seconds(value, field, MAX_TIMEOUT_S)


def deadline(value: object, policy: Policy, field: str) -> float:
    """A deadline in seconds that a probe's lease under ``policy`` outlives."""
    timeout = check_seconds(value, field)
    if timeout * 1000 > policy.lease_ttl_ms:
        raise PolicyError(
            f"{field} ({timeout} s) exceeds lease_ttl_ms ({policy.lease_ttl_ms}): "
            "a probe would be declared lost before its call times out",
            field=field,
        )
    return timeout


# -- one row's options ---------------------------------------------------------------------


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
        known(value, _CHECK_FIELDS, "health_check", listed=("interval_ms", "timeout_ms", "url"))
        return cls(**value)


#: The fields of a ``health_check`` table once its units are named (see named_units).
_CHECK_FIELDS: Final = ("url", "interval_ms", "timeout")


def _text(value: object, field: str) -> object:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise PolicyError(f"{field} must be a non-empty string", field=field)
    return value


def _note(value: object, field: str) -> object:
    if not isinstance(value, str):
        raise PolicyError(f"{field} must be a string", field=field)
    return value


def _callable(value: object, field: str) -> object:
    if not callable(value):
        raise PolicyError(f"{field} must be callable", field=field)
    return value


def _optional(check: Callable[[object, str], object]) -> Callable[[object, str], object]:
    """``check``, or ``None`` (the option unset)."""

    def optional(value: object, field: str) -> object:
        return None if value is None else check(value, field)

    return optional


def _instructions(value: object, field: str) -> dict[str, str]:
    if value is None:  # the defaults, as a keyword argument can say
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{field} must be a table of templates", field=field)
    checked = {}
    for reason, text in value.items():
        where = f"{field}.{reason}"
        if reason not in DEFAULT_INSTRUCTIONS:
            raise PolicyError(
                f"unknown instruction reason {shown(reason)} "
                f"(known: {', '.join(sorted(DEFAULT_INSTRUCTIONS))})",
                field=where,
            )
        if not isinstance(text, str):
            raise PolicyError(f"{where} must be a string", field=where)
        checked[str(reason)] = validate_template(text, where=where)
    return checked


def _scope(value: object, field: str) -> object:
    if value is not None and (not isinstance(value, str) or not value.isidentifier()):
        raise PolicyError(f"{field} must be a name such as 'tenant', got {value!r}", field=field)
    return value


def _count(most: int) -> Callable[[object, str], object]:
    def check(value: object, field: str) -> object:
        if type(value) is not int or not 0 < value <= most:
            raise PolicyError(
                f"{field} must be an integer from 1 to {most}, got {shown(value)}", field=field
            )
        return value

    return check


def _retry(value: object, field: str) -> RetryPolicy | None:
    if isinstance(value, Mapping):
        try:
            value = RetryPolicy.from_dict(value)
        except PolicyError as exc:
            where = f"{field}.{exc.field}" if exc.field else field
            raise PolicyError(f"{field}: {exc.message}", field=where) from None
    if value is not None and not isinstance(value, RetryPolicy):
        raise PolicyError(f"{field} must be a RetryPolicy or a table, got {value!r}", field=field)
    return value


def _retry_cap(value: object, field: str) -> object:
    if value is not None and (type(value) is not int or value < 0):
        raise PolicyError(f"{field} must be a non-negative integer, got {value!r}", field=field)
    return value


def _stale_every(value: object, field: str) -> object:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(f"{field} must be a number of seconds", field=field)
    if not 0 <= value <= _MAX_STALE_EVERY:
        raise PolicyError(
            f"{field} must be from 0 to {_MAX_STALE_EVERY} seconds, got {value!r}", field=field
        )
    return value


#: Each option of a row whose check needs no other option, in the order they are checked.
_OPTIONS: Final[dict[str, Callable[[Any, str], Any]]] = {
    "enforce": enforce,
    "retryable": flag,
    "defaults": flag,
    "tool": _text,
    "fallback": _text,
    "owner": _text,
    "fallback_note": _note,
    "instructions": _instructions,
    "classifier": _callable,
    "result_is_failure": _optional(_callable),
    "scope": _scope,
    "max_scopes": _count(_MAX_SCOPES),
    "retry": _retry,
    "max_retry_after_ms": _retry_cap,
    "max_stale": _optional(check_seconds),
    "stale_every": _stale_every,
    "max_concurrent": _optional(_count(MAX_CONCURRENT)),
}
#: Every option of a row (each field of :class:`~toolbreaker.Boundary` but its key and
#: ``defaults``, which the registry sets): a test holds it to the fields.
ROW_OPTIONS: Final = frozenset(_OPTIONS) - {"defaults"} | {
    "policy",
    "timeout",
    "degrade",
    "health_check",
}
#: The options only code can give (a sheet cannot write a Python object).
CODE_ONLY: Final = frozenset({"policy", "classifier", "result_is_failure"})
#: The options a sheet row may set besides policy fields.
SHEET_OPTIONS: Final = ROW_OPTIONS - CODE_ONLY
#: The fields ``[defaults]`` may hold besides ``unlisted``: the policy, and what every row
#: inherits of its deadline, its enforcement and its model-facing text.
DEFAULT_FIELDS: Final = POLICY_FIELDS | {"timeout", "enforce", "retryable", "owner", "instructions"}


def row_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of one row, checked and converted: the one set of rules of a row.

    ``values`` holds the row's ``dependency`` and ``operation`` and any other field of a
    :class:`~toolbreaker.Boundary` by name, as a sheet or code gave it (a field left out
    keeps Boundary's default, which is valid); the result holds them as the row keeps
    them (a retry table as a :class:`~toolbreaker.RetryPolicy`, a degrade mode as a
    chain, a health check table or callable as a :class:`HealthCheck`, ``None`` as the
    default policy or instructions), and the policy, which a health check sets to
    ``probes = "health-check"``. Checking what it returned again changes nothing.

    Raises:
        PolicyError: naming the field.
    """
    out = dict(values)
    for name in ("dependency", "operation"):
        value = out[name]
        if not isinstance(value, str) or not value:
            raise PolicyError(f"{name} must be a non-empty string, got {value!r}", field=name)
    policy = out.get("policy")
    policy = Policy() if policy is None else policy
    if not isinstance(policy, Policy):
        raise PolicyError(f"policy must be a Policy, got {policy!r}", field="policy")
    if out.get("timeout") is not None:
        deadline(out["timeout"], policy, "timeout")
    for name, check in _OPTIONS.items():
        if name in out:
            out[name] = check(out[name], name)
    max_stale = out.get("max_stale")
    out["degrade"] = check_chain(
        out.get("degrade", ()),
        operation=out["operation"],
        fallback=out.get("fallback"),
        max_stale_ms=None if max_stale is None else round(max_stale * 1000),
    )
    out["policy"], health = _health(policy, out.get("health_check"))
    if health is not None:
        out["health_check"] = health
    return out


def _health(policy: Policy, value: object) -> tuple[Policy, HealthCheck | None]:
    """A row's health check, and its policy: with a check, only the checker probes."""
    if value is None:
        if policy.probes == "health-check":
            raise PolicyError(
                "probes = 'health-check' needs a health_check (nothing else would probe)",
                field="probes",
            )
        return policy, None
    check = HealthCheck.from_value(value)
    if check.timeout * 1000 > policy.lease_ttl_ms:
        raise PolicyError(
            f"health_check.timeout ({check.timeout} s) exceeds lease_ttl_ms "
            f"({policy.lease_ttl_ms})",
            field="health_check.timeout",
        )
    if policy.probes != "health-check":
        policy = dataclasses.replace(policy, probes="health-check")
    return policy, check


def row(dependency: str, operation: str, fields: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A sheet row's table as the keyword arguments of its Boundary, every one checked.

    The table's durations are named in seconds (:func:`named_units`); the result holds
    what :func:`row_values` returns, for :class:`~toolbreaker.Boundary`.

    Raises:
        PolicyError: an unknown or invalid field, named as ``<where>.<field>``.
    """
    known(fields, POLICY_FIELDS | SHEET_OPTIONS, where)
    if fields.get("timeout") is None:
        raise PolicyError(
            f"{where} has no timeout: every call needs a deadline (set timeout_ms in the row "
            "or in [defaults])",
            field=f"{where}.timeout",
        )
    options = {k: v for k, v in fields.items() if k in SHEET_OPTIONS}
    try:
        policy = Policy(**{k: v for k, v in fields.items() if k in POLICY_FIELDS})
        checked = row_values(
            {**options, "dependency": dependency, "operation": operation, "policy": policy}
        )
    except PolicyError as exc:
        field = f"{where}.{exc.field}" if exc.field else where
        raise PolicyError(f"{where}.{exc.message}", field=field) from None
    del checked["dependency"], checked["operation"]
    return checked


# -- units -----------------------------------------------------------------------------------

#: A sheet's durations, each in milliseconds under a name that says so, and the old
#: spelling in seconds each replaces (the field of :class:`~toolbreaker.Boundary` it
#: fills). The one table of spellings: loading, the deprecation warning and its advice
#: all read it.
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
    fields: Mapping[str, Any], where: str, old: OldSpellings | None = None
) -> dict[str, Any]:
    """A sheet table (``[defaults]`` or a row) with its durations as the row's fields.

    Every duration of a sheet names its unit, milliseconds, like the policy fields
    (``cooldown_ms``): ``timeout_ms``, ``max_stale_ms``, ``stale_every_ms`` and
    ``health_check = { timeout_ms = ... }`` become the seconds a row holds.
    The old spellings in seconds (``timeout``, ``max_stale``, ``stale_every``,
    ``health_check.timeout``) still load; each one met is added to ``old`` (see
    :func:`warn_old_spellings`).

    Raises:
        PolicyError: both spellings of one field, or a value that is not a whole number
            of milliseconds in range, named as ``<where>.<field>``.
    """
    found: OldSpellings = {} if old is None else old
    out = dict(fields)
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


def with_deadline(data: Mapping[str, Any], timeout: float) -> Mapping[str, Any]:
    """``data`` with ``timeout`` (seconds) as ``[defaults]``' deadline, unless it names one."""
    defaults = data.get("defaults", {})
    new, old = SHEET_DURATIONS[0]
    if not isinstance(defaults, Mapping) or new in defaults or old in defaults:
        return data
    return {**data, "defaults": {**defaults, new: round(timeout * 1000)}}


def as_written(exc: PolicyError, written: Mapping[str, Any], where: str) -> PolicyError:
    """``exc`` about a table's duration, named as the table spelt it (``timeout_ms``).

    A row holds the seconds its ``timeout_ms`` became, and is checked naming
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
    built (:func:`~toolbreaker.core._config.where_in_source`); the others are named.
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
_PACKAGE: Final = os.path.dirname(os.path.dirname(__file__)) + os.sep  # no pathlib at import


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside toolbreaker, seen from the caller."""
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # warn_old_spellings
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def _in_seconds(fields: dict[str, Any], new: str, old: str, where: str) -> bool:
    """Convert ``new`` (ms) to ``old`` (seconds) in ``fields``; whether ``old`` was used."""
    if new in fields and old in fields:
        raise PolicyError(
            f"{where}: {old} (in seconds) and {new} name one field: keep {new}",
            field=f"{where}.{new}",
        )
    if old in fields:  # the old spelling, in seconds: still what the row holds
        return True
    if new not in fields:
        return False
    value = fields.pop(new)
    low = 0 if new == "stale_every_ms" else 1
    if type(value) is not int or not low <= value <= MAX_DURATION_MS:
        raise PolicyError(
            f"{where}.{new} must be a whole number of milliseconds from {low} to "
            f"{MAX_DURATION_MS}, got {shown(value)}",
            field=f"{where}.{new}",
        )
    fields[old] = value / 1000
    return False


# -- the whole sheet -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Sheet:
    """A boundary sheet, validated: what a registry is built from.

    Attributes:
        policy: ``[defaults]``' policy: of every breaker the sheet has no row for.
        timeout: ``[defaults]``' deadline in seconds (``None``: none).
        enforce: ``[defaults]``' enforcement.
        rows: per ``(dependency, operation)``, the keyword arguments of its
            :class:`~toolbreaker.Boundary` (:func:`row`), checked.
        local_tools: ``[tools] local``: fallbacks that need no breaker.
        unlisted: ``[defaults] unlisted``: dependencies left out on purpose.
        notes: one line per old spelling the sheet uses (:func:`old_spelling_notes`),
            not yet warned.
    """

    policy: Policy
    timeout: float | None
    enforce: Enforce
    rows: Mapping[tuple[str, str], Mapping[str, Any]]
    local_tools: frozenset[str]
    unlisted: frozenset[str]
    notes: tuple[str, ...]


def parse_sheet(data: Mapping[str, Any]) -> Sheet:
    """A decoded boundary sheet, validated whole: defaults, tools, every row, fallbacks.

    ``[mcp]`` is the MCP gateway's (:data:`TABLES`): left alone here.

    Raises:
        PolicyError: naming the field (``search.read.timeout_ms``); within
            :func:`~toolbreaker.core._config.load_toml` it is located at its line.
    """
    old: OldSpellings = {}
    written = table(data.get("defaults", {}), "defaults")
    defaults = named_units(written, "defaults", old)
    unlisted = names(defaults.pop("unlisted", ()), "defaults.unlisted")
    known(defaults, DEFAULT_FIELDS, "defaults")
    tools = table(data.get("tools", {}), "tools")
    local = tools.get("local", [])
    if (
        set(tools) - {"local"}
        or not isinstance(local, list)
        or not all(isinstance(x, str) and x for x in local)
    ):
        raise PolicyError("[tools] takes one key, local = [tool names]", field="tools.local")
    policy = _policy({k: v for k, v in defaults.items() if k in POLICY_FIELDS}, "defaults")
    timeout = defaults.get("timeout")
    if timeout is not None:
        try:
            timeout = deadline(timeout, policy, "defaults.timeout")
        except PolicyError as exc:
            raise as_written(exc, written, "defaults") from None
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for dependency, operations in data.items():
        if dependency in TABLES:
            continue
        check_key(dependency, dependency)
        for operation, fields in table(operations, dependency).items():
            where = f"{dependency}.{operation}"
            check_key(operation, where)
            given = table(fields, where)
            merged = {**defaults, **named_units(given, where, old)}
            try:
                rows[(dependency, operation)] = row(dependency, operation, merged, where)
            except PolicyError as exc:
                raise as_written(exc, given, where) from None
    local_tools = frozenset(local)
    check_fallbacks(
        {key: (r.get("tool") or key[0], r.get("fallback")) for key, r in rows.items()},
        local_tools,
    )
    return Sheet(
        policy=policy,
        timeout=timeout,
        enforce=enforce(defaults.get("enforce", "thread"), "defaults.enforce"),
        rows=rows,
        local_tools=local_tools,
        unlisted=unlisted,
        notes=tuple(old_spelling_notes(old)),
    )


def _policy(fields: Mapping[str, Any], where: str) -> Policy:
    """``[defaults]``' policy fields (the only ones ``known`` let through) as a Policy."""
    try:
        return Policy(**fields)
    except PolicyError as exc:
        raise PolicyError(
            f"{where}.{exc.message}" if exc.field else exc.message,
            field=f"{where}.{exc.field}" if exc.field else where,
        ) from None


def check_fallbacks(
    rows: Mapping[tuple[str, str], tuple[str, str | None]], local_tools: frozenset[str]
) -> None:
    """Refuse a row whose ``fallback`` is no tool of the sheet (a row's, or ``[tools] local``).

    Args:
        rows: per ``(dependency, operation)``, the row's tool name and its fallback.
        local_tools: ``[tools] local``.

    Raises:
        PolicyError: naming ``<dependency>.<operation>.fallback``.
    """
    tools = {tool for tool, _ in rows.values()} | local_tools
    for (dependency, operation), (_, fallback) in rows.items():
        if fallback is not None and fallback not in tools:
            raise PolicyError(
                f"{dependency}.{operation}.fallback {fallback!r} is not a registered tool "
                f"(known: {', '.join(sorted(tools))}; add it to [tools] local if it needs no "
                "breaker)",
                field=f"{dependency}.{operation}.fallback",
            )
