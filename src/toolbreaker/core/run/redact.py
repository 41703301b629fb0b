"""Secret masking for what operators read: stop packets are printed and stored.

:func:`redact` returns a deep copy of a JSON-like value in which

- the value of every key named like a secret (:func:`is_secret_key`: ``password``,
  ``X-Api-Key``, ``openaiApiKey``, ``db_password``, ``access_token``, ``Cookie`` ...)
  becomes :data:`REDACTED`, whatever its type; ``None``, booleans and ``""`` are kept,
  since they hide nothing and say whether a credential was there;
- secret-looking text inside every string is masked (:func:`redact_text`): ``Bearer``
  and ``Basic`` credentials, ``Authorization`` and ``Cookie`` header lines,
  ``password=...`` style pairs, the password of ``scheme://user:pass@host``, PEM private
  keys, JWTs, and the token formats of OpenAI and Anthropic (``sk-``), Stripe
  (``sk_live_``), GitHub (``ghp_``, ``github_pat_``), AWS (``AKIA``), Slack (``xoxb-``)
  and Google (``AIza``);
- a container that contains itself becomes :data:`CYCLE` where it recurs.

Everything else is kept as it was, so the packet stays useful. Dicts, lists, tuples,
sets and strings are rebuilt (any mapping becomes a ``dict``); numbers, ``None``, dates,
UUIDs and enum members are immutable and returned as they are; any other object becomes
the masked text of its ``repr``. Dictionary keys are never rewritten. The input is never
mutated.

This is a last line of defence with known limits: a secret under an innocent key, in a
format none of the patterns know, passes through. Keep raw prompts out of packets.
"""

from __future__ import annotations

import datetime
import enum
import numbers
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

__all__ = ["CYCLE", "REDACTED", "is_secret_key", "redact", "redact_text"]

#: What a masked secret is replaced with.
REDACTED: Final = "[REDACTED]"
#: What replaces a container where it recurs inside itself.
CYCLE: Final = "[CYCLE]"

# Matched inside the key name with everything but letters and digits removed, so
# "X-Api-Key", "openaiApiKey" and "OPENAI_API_KEY" all contain "apikey".
_SECRET_PARTS: Final = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "accesskey",
    "privatekey",
    "signingkey",
    "authorization",
    "credential",
    "cookie",
    "bearer",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "authtoken",
    "apitoken",
    "sessiontoken",
    "sessionid",
    "sessionkey",
    "csrftoken",
    "xsrftoken",
)
# Matched as whole words only: as substrings they hit "author", "possession", "bypass".
_SECRET_WORDS: Final = frozenset({"token", "auth", "session", "pwd", "pass", "jwt", "otp"})
# A name with one of these words describes a secret without holding it: token_count,
# max_token, password_length, token_type, auth_url, secret_name, session_ttl ...
_DESCRIPTIVE_WORDS: Final = frozenset(
    {
        "at",
        "budget",
        "count",
        "counts",
        "enabled",
        "endpoint",
        "expiration",
        "expires",
        "expiry",
        "format",
        "kind",
        "len",
        "length",
        "limit",
        "limits",
        "max",
        "method",
        "min",
        "mode",
        "name",
        "path",
        "policy",
        "provider",
        "remaining",
        "required",
        "scope",
        "scopes",
        "secretaries",
        "secretary",
        "status",
        "total",
        "ttl",
        "type",
        "uri",
        "url",
        "usage",
        "used",
        "version",
    }
)
_WORD: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_NOT_ALNUM: Final = re.compile(r"[^0-9a-z]")


def _compact(name: str) -> str:
    return _NOT_ALNUM.sub("", name.lower())


def _extra_parts(extra_keys: Iterable[str]) -> frozenset[str]:
    if isinstance(extra_keys, str):
        raise TypeError(f"extra_keys must be a collection of names, got {extra_keys!r}")
    return frozenset(part for part in map(_compact, extra_keys) if part)


def _is_secret(name: str, extra: frozenset[str]) -> bool:
    compact = _compact(name)
    if any(part in compact for part in extra):
        return True
    words = {word.lower() for word in _WORD.findall(name)}
    if words & _DESCRIPTIVE_WORDS:
        return False
    return bool(words & _SECRET_WORDS) or any(part in compact for part in _SECRET_PARTS)


def is_secret_key(name: str, *, extra_keys: Iterable[str] = ()) -> bool:
    """Whether a value stored under ``name`` should be masked.

    Case, ``_``, ``-`` and camelCase do not matter. Long markers (``password``,
    ``secret``, ``apikey``, ``accesstoken``, ``cookie`` ...) match anywhere in the name;
    short ones (``token``, ``auth``, ``session``, ``pass``, ``pwd``) only as whole words,
    so ``author`` and ``max_tokens`` are not secrets. A name that describes a secret
    rather than holding it (``token_count``, ``password_length``, ``token_type``,
    ``auth_url``) is not one either.

    Args:
        name: the key.
        extra_keys: more names to treat as secrets, matched anywhere in the name the same
            way (``ssn`` masks ``customer_SSN``); they win over the descriptive words.
    """
    return _is_secret(name, _extra_parts(extra_keys))


def _keep_scheme_if_opaque(match: re.Match[str]) -> str:
    credential = match[3]
    # Prose ("basic authentication", "bearer token") is plain lower-case words; a real
    # credential has a digit, base64 padding or symbols, or capitals past its first letter.
    opaque = (
        any(c.isdigit() or c in "+/=" for c in credential)
        or credential[1:] != credential[1:].lower()
    )
    return f"{match[1]}{match[2]}{REDACTED}" if opaque else match[0]


def _keep_label(match: re.Match[str]) -> str:
    quote = match[2] or ""
    return f"{match[1]}{quote}{REDACTED}{quote}"


_PAIR_NAMES: Final = (
    r"password|passwd|pwd|passphrase|secret|credentials?|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|token|session[_-]?id"
)
_NOT_AFTER_ALNUM: Final = r"(?<![A-Za-z0-9])"

_TEXT_RULES: Final[tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...]] = (
    (
        re.compile(
            r"-----BEGIN[A-Z ]*PRIVATE KEY-----.*?(?:-----END[A-Z ]*PRIVATE KEY-----|\Z)", re.S
        ),
        lambda _: REDACTED,
    ),
    # Header lines: the whole value goes, whatever the scheme.
    (
        re.compile(
            _NOT_AFTER_ALNUM + r"((?:proxy-)?authorization|(?:set-)?cookie)"
            r"([\"']?[ \t]*:[ \t]*[\"']?)[^\r\n\"']+",
            re.I,
        ),
        lambda m: f"{m[1]}{m[2]}{REDACTED}",
    ),
    (
        # Greedy up to the last "@" of the authority: passwords do contain "@". The
        # scheme is bounded, or a long run like "a-a-a-..." takes quadratic time.
        re.compile(r"\b([a-z][a-z0-9+.\-]{0,31}://[^/\s:@?#]*):[^/\s?#]+@", re.I),
        lambda m: f"{m[1]}:{REDACTED}@",
    ),
    (
        re.compile(r"\b(bearer|basic)(\s+)([A-Za-z0-9\-._~+/]{8,}=*)", re.I),
        _keep_scheme_if_opaque,
    ),
    (
        re.compile(
            _NOT_AFTER_ALNUM + rf"((?:{_PAIR_NAMES})[\"']?[ \t]*[:=][ \t]*)"
            # A quoted value up to its quote; a bare one up to a delimiter or a closing
            # bracket; never an already masked value, so masking twice changes nothing.
            r"(?!\[REDACTED\])(?:([\"'])(?:(?!\2).)*\2|[^\s\"'&;,)\]}]+)",
            re.I,
        ),
        _keep_label,
    ),
    (re.compile(_NOT_AFTER_ALNUM + r"sk-[A-Za-z0-9_\-]{20,}"), lambda _: REDACTED),
    (re.compile(_NOT_AFTER_ALNUM + r"[rs]k_(?:live|test)_[A-Za-z0-9]{10,}"), lambda _: REDACTED),
    (
        re.compile(_NOT_AFTER_ALNUM + r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})"),
        lambda _: REDACTED,
    ),
    (re.compile(_NOT_AFTER_ALNUM + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"), lambda _: REDACTED),
    (re.compile(_NOT_AFTER_ALNUM + r"xox[baprs]-[A-Za-z0-9\-]{10,}"), lambda _: REDACTED),
    (re.compile(_NOT_AFTER_ALNUM + r"AIza[0-9A-Za-z_\-]{35}"), lambda _: REDACTED),
    (
        re.compile(
            r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"
        ),
        lambda _: REDACTED,
    ),
)


def redact_text(text: str) -> str:
    """``text`` with every secret-looking substring masked and the rest unchanged.

    Labels and schemes are kept so the text still reads: ``Bearer [REDACTED]``,
    ``password=[REDACTED]``, ``postgres://app:[REDACTED]@db/prod``.
    """
    out = str.__str__(text)
    for pattern, replace in _TEXT_RULES:
        out = pattern.sub(replace, out)
    return out


# Immutable values that cannot hold a secret the patterns would find.
_KEPT: Final = (
    numbers.Number,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    enum.Enum,
)


def _masked(value: Any) -> Any:
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value):
        return value
    return REDACTED


def _redact(value: Any, extra: frozenset[str], active: set[int]) -> Any:
    if value is None or isinstance(value, _KEPT):
        return value
    if isinstance(value, str):
        return redact_text(value)
    if not isinstance(value, (Mapping, list, tuple, set, frozenset)):
        try:
            shown = repr(value)
        # A stop packet is built when things are already broken; a failing __repr__
        # must not stop it.
        except Exception:  # noqa: BLE001
            shown = f"<{type(value).__name__}>"
        return redact_text(shown)
    if id(value) in active:
        return CYCLE
    active.add(id(value))
    try:
        if isinstance(value, Mapping):
            return {
                key: _masked(item)
                if isinstance(key, str) and _is_secret(key, extra)
                else _redact(item, extra, active)
                for key, item in value.items()
            }
        items = [_redact(item, extra, active) for item in value]
        if isinstance(value, list):
            return items
        if isinstance(value, tuple):
            return tuple(items)
        return frozenset(items) if isinstance(value, frozenset) else set(items)
    finally:
        active.discard(id(value))


def redact(value: Any, *, extra_keys: Iterable[str] = ()) -> Any:
    """A deep copy of ``value`` with secrets masked as :data:`REDACTED`.

    Args:
        value: what to mask: dicts (any mapping), lists, tuples, sets, strings, numbers.
        extra_keys: more key names whose values are secrets (see :func:`is_secret_key`).

    Returns:
        The masked copy; see the module documentation for exactly what is kept.
    """
    return _redact(value, _extra_parts(extra_keys), set())
