"""Semantic action fingerprints and idempotency keys.

Detecting a loop takes more than comparing tool names: the same intention comes back
with its keys reordered, its reason reworded and a fresh timestamp. :func:`canonical_action`
keeps only what a call *does*, and :func:`fingerprint` hashes that, so two equivalent
intentions collide and two different business actions do not. :func:`evidence` digests
what a tool *returned* in the same canonical form, so a repeat is seen even when every
response carries a fresh request id.

Canonical form (changing it changes every fingerprint, so it is a contract):

- The tool name is NFKC-normalised, case-folded and trimmed.
- Object keys are kept verbatim and sorted. Fields named in :class:`FingerprintRules`
  (volatile ids and timestamps, the model's prose) are dropped at every depth, whatever
  their value; names match case-insensitively and ignoring ``_`` and ``-``, so
  ``requestId``, ``request_id`` and ``Request-ID`` are one name.
- Strings are NFKC-normalised and case-folded, and every run of whitespace becomes one
  space, trimmed at both ends: ``"  Renewal  Notice "`` equals ``"renewal notice"``.
- Numbers compare by value: ``1 == 1.0 == Decimal("1.0")``. Integral values become JSON
  integers; other values become ``{"$decimal": "<text>"}`` with exact text (``"1.5"``,
  ``"-0.025"``; ``<digits>e<exponent>`` beyond 64 fractional digits or 640 integer
  digits). Floats are read through their shortest ``repr``, so ``0.1 == Decimal("0.1")``.
  The decimal context is never consulted. NaN and infinities are refused.
- Types stay apart: ``True != 1``, ``"1" != 1``, ``"1.5" != 1.5``, ``None != ""``. A
  non-integral number is tagged rather than written as a string so that no string can
  equal it; only the object ``{"$decimal": "1.5"}`` itself does, which keeps the
  canonical form a fixed point (canonicalising it again changes nothing).
- Lists and tuples are the same and keep their order, which is meaningful. Anything else
  (sets, bytes, dates, objects) is refused with an error naming its path, like
  ``args.items[2]``: convert it to one of the types above first.

Stability: the digests use :func:`~toolbreaker.core._canonical.sha256_hex` and depend on
nothing but the value, so they are the same in every process and on every machine. They
are the same on every supported Python version for text made of characters assigned in
Unicode 13 (Python 3.10); NFKC and case folding of characters assigned later may differ
on older interpreters.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import functools
import hashlib
import json
import math
import numbers
import re
import unicodedata
import uuid
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from json.encoder import encode_basestring as _json_string  # json.dumps(s, ensure_ascii=False)
from typing import Any, Final

from toolbreaker.core._canonical import sha256_hex
from toolbreaker.errors import BusinessKeyError, FingerprintError, UnsupportedTypeError

__all__ = [
    "DECIMAL_TAG",
    "DEFAULT_PROSE",
    "DEFAULT_VOLATILE",
    "IDEMPOTENCY_PREFIX",
    "BusinessKeyError",
    "FingerprintError",
    "FingerprintRules",
    "UnsupportedTypeError",
    "action_keys",
    "business_key_of",
    "canonical_action",
    "evidence",
    "fingerprint",
    "idempotency_key",
    "write_key",
]

#: The key of the one-field object that carries a non-integral number.
DECIMAL_TAG: Final = "$decimal"

#: Prefix of every idempotency key; the digit is the version of its derivation.
IDEMPOTENCY_PREFIX: Final = "tb1-"

_IDEMPOTENCY_SCHEMA: Final = "toolbreaker.idempotency/v1"

# ``ts`` and ``time`` are left out on purpose: Slack's ``ts`` names the message to
# update, and ``time`` is often the business value itself (book a room at ``time``).
#: Field names of per-attempt noise: ids, nonces, clocks. Stored normalised.
DEFAULT_VOLATILE: Final = frozenset(
    {
        "timestamp",
        "createdat",
        "updatedat",
        "sentat",
        "requestedat",
        "requestid",
        "xrequestid",
        "nonce",
        "traceid",
        "spanid",
        "parentspanid",
        "traceparent",
        "tracestate",
        "idempotencykey",
        "correlationid",
        "cachebuster",
    }
)

#: Field names of the model's own prose about a call. Stored normalised.
DEFAULT_PROSE: Final = frozenset(
    {
        "reason",
        "reasoning",
        "explanation",
        "rationale",
        "thought",
        "thoughts",
        "thinking",
        "chainofthought",
        "justification",
        "comment",
        "note",
        "notes",
        "messagetouser",
    }
)

# 640 is the lowest limit ``sys.set_int_max_str_digits`` accepts, so integers up to this
# many digits serialise on every interpreter whatever that process-wide setting is.
_MAX_INT_DIGITS: Final = 640
_INT_BOUND: Final = 10**_MAX_INT_DIGITS
_MAX_FRACTION_DIGITS: Final = 64
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


#: Strings up to this long are folded once and remembered (field names, tool names, short
#: values: the same few come back on every call); longer ones are folded every time.
_REMEMBERED: Final = 64


def _field_name(name: str) -> str:
    """The form field names are compared in: case-folded, without ``_`` and ``-``."""
    if type(name) is str and len(name) <= _REMEMBERED:
        return _short_field_name(name)
    return _fold_field_name(name)


def _fold_field_name(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold().replace("_", "").replace("-", "")


_short_field_name: Final = functools.lru_cache(maxsize=4096)(_fold_field_name)


def _names(names: Iterable[str], what: str) -> frozenset[str]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"{what} must be a collection of field names, got {names!r}")
    out = set()
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must hold strings, got {name!r}")
        out.add(_field_name(name))
    return frozenset(out)


@dataclasses.dataclass(frozen=True, slots=True)
class FingerprintRules:
    """Which fields a fingerprint ignores, at every depth of the arguments.

    Both sets are stored normalised (case-folded, without ``_`` and ``-``); construction
    accepts names in any spelling. ``FingerprintRules()`` is the default rule set.

    Attributes:
        volatile: per-attempt noise (timestamps, request ids, nonces, trace ids).
        prose: the model's explanations of a call (reason, rationale, notes).
    """

    volatile: frozenset[str] = DEFAULT_VOLATILE
    prose: frozenset[str] = DEFAULT_PROSE

    def __post_init__(self) -> None:
        object.__setattr__(self, "volatile", _names(self.volatile, "volatile"))
        object.__setattr__(self, "prose", _names(self.prose, "prose"))

    @classmethod
    def default(cls) -> FingerprintRules:
        """The default rules: :data:`DEFAULT_VOLATILE` and :data:`DEFAULT_PROSE`."""
        return cls()

    def extend(
        self, *, volatile: Iterable[str] = (), prose: Iterable[str] = ()
    ) -> FingerprintRules:
        """A copy that also ignores the given field names."""
        return FingerprintRules(
            volatile=self.volatile | _names(volatile, "volatile"),
            prose=self.prose | _names(prose, "prose"),
        )

    def without(self, *names: str) -> FingerprintRules:
        """A copy that keeps the given field names (for a tool whose ``note`` is its payload)."""
        drop = _names(names, "names")
        return FingerprintRules(volatile=self.volatile - drop, prose=self.prose - drop)

    def ignores(self, name: str) -> bool:
        """Whether a field called ``name`` is left out of fingerprints."""
        key = _field_name(name)
        return key in self.volatile or key in self.prose


_DEFAULT_RULES: Final = FingerprintRules()
_KEEP_ALL: Final = FingerprintRules(volatile=frozenset(), prose=frozenset())


def _text(value: str) -> str:
    if type(value) is str and len(value) <= _REMEMBERED:
        return _short_text(value)
    return _fold_text(value)


def _fold_text(value: str) -> str:
    # NFKC after case folding can produce text that folds again, so repeat to a fixed
    # point; a handful of rounds is always enough in practice, and the bound keeps it total.
    for _ in range(4):
        folded = " ".join(
            unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold()).split()
        )
        if folded == value:
            break
        value = folded
    return value


_short_text: Final = functools.lru_cache(maxsize=4096)(_fold_text)


def _decimal_text(negative: bool, digits: str, exponent: int) -> str:
    """Exact text of ``digits * 10**exponent``; ``digits`` has no trailing zero."""
    sign = "-" if negative else ""
    if -_MAX_FRACTION_DIGITS <= exponent < 0:
        whole, fraction = digits[:exponent], digits[exponent:]
        return f"{sign}{whole or '0'}.{fraction.rjust(-exponent, '0')}"
    return f"{sign}{digits}e{exponent}"


#: Where a value sits in the arguments: ``args``, or its container's place and its key.
#: Written out (``args.items[2]``) only for an error: most calls have none.
_Path = str | tuple[Any, object]


def _where(path: _Path) -> str:
    """The place ``path`` names, as an error shows it (``args.items[2]``)."""
    if isinstance(path, str):
        return path
    parent, key = path
    return _child(_where(parent), key)


def _number(value: int | float | Decimal, path: _Path) -> int | dict[str, str]:
    if isinstance(value, int):
        number = int(value)
        if -_INT_BOUND < number < _INT_BOUND:
            return number
        exact = Decimal(number)  # exact whatever the context precision
    elif isinstance(value, float):
        if not math.isfinite(value):
            where = _where(path)
            raise FingerprintError(f"{where} is {value!r}, which has no canonical form", path=where)
        exact = Decimal(repr(float(value)))
    else:
        if not value.is_finite():
            where = _where(path)
            raise FingerprintError(f"{where} is {value!r}, which has no canonical form", path=where)
        exact = value
    sign, digit_tuple, exponent = exact.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    text = "".join(map(str, digit_tuple))
    digits = text.rstrip("0")
    if not digits:
        return 0
    exponent += len(text) - len(digits)
    if exponent >= 0 and len(digits) + exponent <= _MAX_INT_DIGITS:
        magnitude = int(digits + "0" * exponent)  # at most 640 digits, see above
        return -magnitude if sign else magnitude
    return {DECIMAL_TAG: _decimal_text(bool(sign), digits, exponent)}


def _child(path: str, key: object) -> str:
    if isinstance(key, str) and _IDENTIFIER.match(key):
        return f"{path}.{key}"
    if isinstance(key, str):
        return f"{path}[{json.dumps(key, ensure_ascii=False)}]"
    return f"{path}[{key!r}]"


def _canon(value: Any, path: _Path, rules: FingerprintRules, active: set[int]) -> Any:
    kind = type(value)
    # The plain types first, by their exact type (an ABC's isinstance costs more than the
    # rest of a small value); subclasses and other mappings take the general checks.
    if kind is str:
        return _text(value)
    if kind is int and -_INT_BOUND < value < _INT_BOUND:
        return value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, (int, float, Decimal)):
        return _number(value, path)
    if kind is dict or kind is list or isinstance(value, (Mapping, list, tuple)):
        if id(value) in active:
            where = _where(path)
            raise FingerprintError(f"{where} contains itself", path=where)
        active.add(id(value))
        try:
            if kind is dict or isinstance(value, Mapping):
                return _canon_mapping(value, path, rules, active)
            return [_canon(item, (path, i), rules, active) for i, item in enumerate(value)]
        finally:
            active.discard(id(value))
    where = _where(path)
    raise UnsupportedTypeError(
        f"{where} is a {type(value).__name__}, which has no canonical form; "
        "use a string, number, boolean, None, list or mapping",
        path=where,
    )


def _canon_mapping(
    value: Mapping[Any, Any], path: _Path, rules: FingerprintRules, active: set[int]
) -> dict[str, Any]:
    for key in value:
        if not isinstance(key, str):
            where = _child(_where(path), key)
            raise UnsupportedTypeError(
                f"{where}: object keys must be strings, got {type(key).__name__}", path=where
            )
    return {
        key: _canon(value[key], (path, key), rules, active)
        for key in sorted(value)
        if not rules.ignores(key)
    }


def _tool_name(tool: str) -> str:
    if not isinstance(tool, str):
        raise UnsupportedTypeError(f"tool must be a string, got {type(tool).__name__}", path="tool")
    name = _text(tool)
    if not name:
        raise FingerprintError("tool must not be blank", path="tool")
    return name


def _mapping(value: Any, path: str) -> Mapping[Any, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise UnsupportedTypeError(
            f"{path} must be a mapping, got {type(value).__name__}", path=path
        )
    return value


def canonical_action(
    tool: str, args: Mapping[str, Any], rules: FingerprintRules | None = None
) -> dict[str, Any]:
    """The canonical form of a tool call: ``{"tool": ..., "args": ...}``.

    The result is plain JSON data (no floats), safe to store and to show an operator.
    Canonicalising its ``args`` again gives the same result.

    Args:
        tool: the tool's name.
        args: the arguments the model chose.
        rules: which fields to leave out; :meth:`FingerprintRules.default` when ``None``.

    Raises:
        UnsupportedTypeError: a value, or a key, of a type with no canonical form; its
            ``path`` names it (also a :class:`TypeError`).
        FingerprintError: a NaN or infinite number, a container that contains itself,
            or a blank tool name (also a :class:`ValueError`).
    """
    name = _tool_name(tool)
    chosen = _DEFAULT_RULES if rules is None else rules
    canonical = _canon(_mapping(args, "args"), "args", chosen, set())
    return {"tool": name, "args": canonical}


def fingerprint(tool: str, args: Mapping[str, Any], rules: FingerprintRules | None = None) -> str:
    """The SHA-256 hex digest of the canonical JSON of :func:`canonical_action`.

    Equal for equivalent intentions (keys reordered, reason reworded, a fresh timestamp,
    ``"  Renewal Notice "`` for ``"renewal notice"``, ``1.0`` for ``1``), different for
    different actions. Raises what :func:`canonical_action` raises.
    """
    return _digest_of(canonical_action(tool, args, rules=rules))


def _digest_of(action: dict[str, Any]) -> str:
    """The fingerprint of a canonical action."""
    if _ACTION_JSON is None:  # no C encoder (another Python): the general one
        return sha256_hex(action)
    return hashlib.sha256("".join(_ACTION_JSON(action, 0)).encode("utf-8")).hexdigest()


def action_keys(
    tool: str,
    args: Mapping[str, Any],
    rules: FingerprintRules | None = None,
    *,
    write: bool = False,
    business_key: Sequence[str] | None = None,
    task: str = "",
    call: int | None = None,
) -> tuple[str, str | None]:
    """A call's :func:`fingerprint` and, for a ``write``, its :func:`write_key`.

    The arguments are canonicalised once for both (a guard asks for both on every write).
    Raises what those two raise.
    """
    action = canonical_action(tool, args, rules=rules)
    if not write:
        return _digest_of(action), None
    if business_key:
        key = idempotency_key(tool, business_key_of(args, business_key))
    else:
        key = _write_key_of(action["tool"], action["args"], tool, task, call)
    return _digest_of(action), key


def _unencodable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: :func:`~toolbreaker.core._canonical.canonical_json`'s encoding (sorted keys, no spaces,
#: text as is, no NaN), made once: ``json.dumps`` builds its encoder on every call, which
#: cost more than the rest of a small fingerprint. Without the check for circular values:
#: a canonical action is fresh, acyclic data (a value that contains itself is refused
#: first), so the encoder keeps no state between calls and threads may share it.
_ACTION_JSON: Final[Any] = (
    None
    if getattr(json.encoder, "c_make_encoder", None) is None
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _unencodable, _json_string, None, ":", ",", True, False, False
    )
)


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (Mapping, list, tuple)) and not value


def _lookup(args: Mapping[str, Any], field: str) -> Any:
    parts = field.split(".")
    if not all(parts):
        raise FingerprintError(f"business key field {field!r} is not a dotted path", path=field)
    current: Any = args
    for depth, part in enumerate(parts):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif (
            isinstance(current, (list, tuple))
            and part.isascii()
            and part.isdigit()
            and int(part) < len(current)
        ):
            current = current[int(part)]
        else:
            where = ".".join(parts[:depth]) or "the arguments"
            raise BusinessKeyError(
                f"business key field {field!r} is missing: {where} has no {part!r}", field=field
            )
    return current


def business_key_of(args: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """Pick the declared business-key fields out of a call's arguments.

    Args:
        args: the arguments the model chose.
        fields: field names; dots walk into nested mappings (``recipient.id``) and
            decimal segments index lists (``items.0.sku``).

    Returns:
        ``{field: value}`` for every declared field, values as found (not copied).

    Raises:
        BusinessKeyError: a field is missing, ``None``, blank, or an empty container
            (also a :class:`KeyError` and a :class:`ValueError`).
        FingerprintError: no fields are declared, or a field is not a dotted path.
        TypeError: ``args`` is not a mapping or ``fields`` is a single string.
    """
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise TypeError(f"fields must be a sequence of field names, got {fields!r}")
    if not fields:
        raise FingerprintError("a business key needs at least one field")
    source = _mapping(args, "args")
    picked: dict[str, Any] = {}
    for field in fields:
        if not isinstance(field, str):
            raise TypeError(f"business key fields must be strings, got {field!r}")
        value = _lookup(source, field)
        if _is_empty(value):
            raise BusinessKeyError(
                f"business key field {field!r} is empty ({value!r})", field=field
            )
        picked[field] = value
    return picked


def idempotency_key(tool: str, business_key: Mapping[str, Any], *, scope: str = "") -> str:
    """A deterministic idempotency key for a mutating call: ``tb1-`` and 32 hex digits.

    Derived only from the tool, the canonicalised business key (every field kept: no
    volatile or prose stripping) and ``scope``; never from a run or attempt id unless the
    caller puts one in ``scope``. So a retry, a resumed run or another process sends the
    same key, and the destination can drop the duplicate. Safe in URLs and headers.

    Args:
        tool: the tool's name (canonicalised like in :func:`canonical_action`).
        business_key: what makes the action unique, e.g. from :func:`business_key_of`.
        scope: an optional namespace (tenant, task id), compared verbatim.

    Raises:
        FingerprintError: the business key is empty or holds a value with no canonical
            form (:class:`UnsupportedTypeError` for a wrong type).
    """
    name = _tool_name(tool)
    key = _mapping(business_key, "business_key")
    if not key:
        raise FingerprintError("business key is empty", path="business_key")
    if not isinstance(scope, str):
        raise UnsupportedTypeError(
            f"scope must be a string, got {type(scope).__name__}", path="scope"
        )
    return _key_of(name, _canon(key, "business_key", _KEEP_ALL, set()), scope)


def _key_of(name: str, canonical: Any, scope: str) -> str:
    """The idempotency key of a canonical tool name and business key in ``scope``."""
    document = {"schema": _IDEMPOTENCY_SCHEMA, "tool": name, "key": canonical, "scope": scope}
    return IDEMPOTENCY_PREFIX + sha256_hex(document)[:32]


def _write_key_of(
    name: str, canonical: Mapping[str, Any], tool: str, task: str, call: int | None
) -> str:
    """:func:`write_key` without a business key, of the call's canonical arguments.

    The key's document canonicalises them again (with every field kept), exactly as
    :func:`idempotency_key` does: a key must never change between versions.
    """
    scope = task if call is None else f"{task}\n#call {call}"
    key = canonical or {"tool": tool}
    return _key_of(name, _canon(key, "business_key", _KEEP_ALL, set()), scope)


def write_key(
    tool: str,
    args: Mapping[str, Any],
    business_key: Sequence[str] | None = None,
    *,
    task: str = "",
    rules: FingerprintRules | None = None,
    call: int | None = None,
) -> str:
    """The idempotency key of one intended write.

    With declared ``business_key`` fields the key is global: the same business action is
    never performed twice, whichever task tries. Without, it is the canonical action
    (volatile and prose fields stripped) scoped to ``task``; with ``call`` (the run's step
    number of a generic tool's write: a shell command), scoped to that call too, so the
    same command made again is a write of its own.
    """
    if business_key:
        return idempotency_key(tool, business_key_of(args, business_key))
    action = canonical_action(tool, args, rules)
    return _write_key_of(action["tool"], action["args"], tool, task, call)


# --- evidence ----------------------------------------------------------------------------

_ADDRESS: Final = re.compile(r"\bat 0x[0-9A-Fa-f]+")
# A container's JSON opening, closing, and its children each with the text before it.
_Node = tuple[str, list[tuple[str, Any]], str]


def _tagged(tag: str, value: str) -> str:
    return "{" + json.dumps(tag) + ":" + json.dumps(value, ensure_ascii=False) + "}"


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _scalar_text(value: Any) -> str | None:
    """The canonical JSON of a value that holds no other value, or ``None``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _json_string(_text(value))
    if isinstance(value, (int, float, Decimal)):
        try:
            number = _number(value, "result")
            if type(number) is int:
                return int.__repr__(number)
            return json.dumps(number, sort_keys=True, separators=(",", ":"))
        except FingerprintError:
            nan = value.is_nan() if isinstance(value, Decimal) else math.isnan(value)
            return _tagged("$nonfinite", "nan" if nan else str(float(value)))
    if isinstance(value, numbers.Number):
        if isinstance(value, numbers.Rational):
            if value.denominator != 1:
                return _tagged("$fraction", f"{value.numerator}/{value.denominator}")
            return _scalar_text(int(value.numerator))
        if isinstance(value, numbers.Real):
            return _scalar_text(float(value))
        return None  # complex: a pair, see _node
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _tagged("$bytes", bytes(value).hex())
    if isinstance(value, enum.Enum):
        return _tagged("$enum", f"{_type_name(value)}.{value.name}")
    if isinstance(value, (datetime.date, datetime.time)):
        return _tagged("$" + type(value).__name__, value.isoformat())
    if isinstance(value, datetime.timedelta):
        return _tagged("$timedelta", f"{value.days},{value.seconds},{value.microseconds}")
    if isinstance(value, uuid.UUID):
        return _tagged("$uuid", str(value))
    return None


def _fields(value: Any) -> dict[str, Any] | None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and attributes and not isinstance(value, type):
        return dict(attributes)
    return None


def _mapping_node(
    value: Mapping[Any, Any], volatile: frozenset[str], active: dict[int, tuple[int, Any]]
) -> _Node:
    items = list(value.items())
    if all(isinstance(key, str) for key, _ in items):
        kept = sorted(
            ((k, v) for k, v in items if _field_name(k) not in volatile), key=lambda kv: kv[0]
        )
        children = [
            (("," if i else "") + _json_string(key) + ":", item)
            for i, (key, item) in enumerate(kept)
        ]
        return "{", children, "}"
    # Keys JSON cannot hold: the mapping becomes a sorted list of [key, value] pairs.
    pairs = sorted(
        _encode([key, item], volatile, active)
        for key, item in items
        if not (isinstance(key, str) and _field_name(key) in volatile)
    )
    return '{"$map":[', [(("," if i else ""), _Raw(pair)) for i, pair in enumerate(pairs)], "]}"


class _Raw(str):
    """Text that is already canonical JSON."""

    __slots__ = ()


def _node(value: Any, volatile: frozenset[str], active: dict[int, tuple[int, Any]]) -> str | _Node:
    """A value's canonical JSON if it is a leaf, else its container node."""
    kind = type(value)
    if kind is dict:
        return _mapping_node(value, volatile, active)
    if kind is list or kind is tuple:
        return "[", [(("," if i else ""), item) for i, item in enumerate(value)], "]"
    if kind is _Raw:
        return str(value)
    text = _scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, Mapping):
        return _mapping_node(value, volatile, active)
    if isinstance(value, (list, tuple)) or (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes))
    ):
        return "[", [(("," if i else ""), item) for i, item in enumerate(value)], "]"
    if isinstance(value, collections.abc.Set):
        members = sorted(_encode(item, volatile, active) for item in value)
        return '{"$set":[', [(("," if i else ""), _Raw(m)) for i, m in enumerate(members)], "]}"
    if isinstance(value, complex):
        return '{"$complex":[', [("", value.real), (",", value.imag)], "]}"
    fields = _fields(value)
    if fields is not None:
        return '{"$object":' + json.dumps(_type_name(value)) + ',"fields":', [("", fields)], "}"
    try:
        shown = _ADDRESS.sub("at 0x", repr(value))
    except Exception:  # noqa: BLE001 - a broken __repr__ still gets a digest
        shown = ""
    return '{"$repr":' + json.dumps(_type_name(value)) + ',"text":', [("", shown)], "}"


def _encode(value: Any, volatile: frozenset[str], active: dict[int, tuple[int, Any]]) -> str:
    """The canonical JSON of ``value``, without recursion on the Python stack.

    ``active`` maps the identity of every container being encoded to its depth (and
    holds the container, so a temporary one cannot be freed and its identity reused), so
    a container met again inside itself becomes ``{"$cycle": <levels up>}``.
    """
    out: list[str] = []
    # Work items: ("value", v) to encode, ("text", s) to write, ("leave", identity).
    stack: list[tuple[str, Any]] = [("value", value)]
    while stack:
        kind, item = stack.pop()
        if kind == "text":
            out.append(item)
            continue
        if kind == "leave":
            del active[item]
            continue
        identity = id(item)
        if identity in active:
            out.append('{"$cycle":' + str(len(active) - active[identity][0]) + "}")
            continue
        try:
            node = _node(item, volatile, active)
        except Exception:  # noqa: BLE001 - a value that cannot be read still has a type
            node = _tagged("$unreadable", _type_name(item))
        if isinstance(node, str):
            out.append(node)
            continue
        opening, children, closing = node
        out.append(opening)
        active[identity] = (len(active), item)
        stack.append(("leave", identity))
        stack.append(("text", closing))
        for prefix, child in reversed(children):
            stack.append(("value", child))
            if prefix:
                stack.append(("text", prefix))
    return "".join(out)


def evidence(result: Any, rules: FingerprintRules | None = None) -> str:
    """The SHA-256 hex digest of a tool result, for telling new evidence from a repeat.

    A result is compared in the canonical form of actions (see the module documentation):
    keys sorted, strings normalised, numbers by value, and the *volatile* fields of
    ``rules`` (request ids, timestamps, trace ids) dropped at every depth, so a result
    that differs only in its ``request_id`` is the same evidence. The *prose* fields are
    kept: in a result, a ``note`` or ``comment`` is what the tool returned, not the
    model's explanation of a call, and a changed note is new evidence.

    Total: any value gets a deterministic digest and nothing raises. Where the canonical
    form refuses a value, a tagged form stands in: ``{"$nonfinite": "nan"}``,
    ``{"$bytes": "<hex>"}``, ``{"$set": [...]}`` (members sorted),
    ``{"$map": [[key, value], ...]}`` for non-string keys, ``{"$datetime": "<iso>"}``,
    ``{"$enum": ...}``, ``{"$object": "<type>", "fields": {...}}`` for dataclasses and
    objects with attributes, ``{"$repr": "<type>", "text": ...}`` otherwise (memory
    addresses removed), ``{"$cycle": <levels up>}`` where a container recurs inside
    itself. Any depth of nesting works. A tagged form equals only the object spelled the
    same way, as with ``$decimal``. The digest depends on nothing but the value, so it is
    the same in every process.

    Args:
        result: what the tool returned.
        rules: whose ``volatile`` names to drop; :meth:`FingerprintRules.default` when
            ``None``. Its ``prose`` names are not used.

    Raises:
        TypeError: ``rules`` is not a :class:`FingerprintRules`.
    """
    chosen = _DEFAULT_RULES if rules is None else rules
    if not isinstance(chosen, FingerprintRules):
        raise TypeError(f"rules must be FingerprintRules, got {type(rules).__name__}")
    if result is None or result is True or result is False:
        return _CONSTANT_EVIDENCE[result]  # what most writes and many tools return
    text = _encode(result, chosen.volatile, {})
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


#: The evidence of ``None``, ``True`` and ``False``: their canonical JSON's digests.
_CONSTANT_EVIDENCE: Final = {
    value: hashlib.sha256(text.encode()).hexdigest()
    for value, text in ((None, "null"), (True, "true"), (False, "false"))
}
