r"""Secret masking for what operators read: stop packets are printed and stored.

:func:`redact` returns a deep copy of a JSON-like value in which

- the value of every key named like a secret (:func:`is_secret_key`: ``password``,
  ``X-Api-Key``, ``openaiApiKey``, ``db_password``, ``access_token``, ``Cookie`` ...)
  becomes :data:`REDACTED`, whatever its type; ``None``, booleans and ``""`` are kept,
  since they hide nothing and say whether a credential was there. A key that is not a
  string is judged by its text: ``b"password"`` by its decoded bytes, other objects by
  ``str()``;
- secret-looking text inside every string is masked (:func:`redact_text`): ``Bearer``
  and ``Basic`` credentials, ``Authorization`` and ``Cookie`` header lines,
  ``password=...`` style pairs (``api_key``, ``x-api-key``, ``access_token``,
  ``AccountKey``, ``AWS_SECRET_ACCESS_KEY`` ...), the password of
  ``scheme://user:pass@host``, signatures of pre-signed URLs, PEM private keys, JWTs, and
  the token formats of some thirty providers, recognised by their prefix: OpenAI and
  Anthropic (``sk-``, ``sk-proj-``, ``sk-ant-``), Stripe, GitHub, GitLab, AWS (``AKIA``),
  Slack, Google (``AIza``, ``ya29.``, ``GOCSPX-``), Hugging Face, npm, PyPI, SendGrid,
  Twilio, Shopify, DigitalOcean, Vault, Groq, LangSmith and more (see ``_TOKENS``);
- the same secrets seen through an escape or an encoding are masked where they are
  written: in the ``repr`` of a string (``said:\nsk-...``), in JSON text
  (``\"password\": \"...\"``, ``\u0022``), URL-encoded (``token%20ghp_...``,
  ``+`` for a space), and these nested up to three levels deep;
- a key that itself holds a secret becomes its masked text (numbered ``#2``, ``#3`` ...
  where that text is taken, so no two keys merge);
- a container that contains itself becomes :data:`CYCLE` where it recurs.

Everything else is kept as it was, so the packet stays useful. Dicts, lists, tuples,
sets and strings are rebuilt (any mapping becomes a ``dict``); numbers, ``None``, dates,
UUIDs and enum members are immutable and returned as they are; any other object becomes
the masked text of its ``repr``. The input is never mutated. Masking is idempotent
(masking masked output changes nothing) and takes time linear in the text.

This is a last line of defence with known limits: a secret under an innocent key, in a
format none of the patterns know (a bare AWS secret access key, a Twilio auth token:
unlabelled random text), split across strings, or encoded in a way not listed above
(base64, hex, HTML entities) passes through. Keep raw prompts out of packets.
"""

from __future__ import annotations

import bisect
import enum
import functools
import hashlib
import re
import sys
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


# The patterns are compiled on first use, not at import (``from toolbreaker import
# Registry`` should not pay for masking it has not done yet); each accessor compiles once.
@functools.cache
def _word() -> re.Pattern[str]:
    return re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


@functools.cache
def _not_alnum() -> re.Pattern[str]:
    return re.compile(r"[^0-9a-z]")


#: Texts up to this long are masked (and key names judged) once and remembered: names,
#: reasons and keys recur on every notice and record. Longer ones, payloads, are never kept.
_CACHED_LENGTH: Final = 256


def _compact(name: str) -> str:
    return _not_alnum().sub("", name.lower())


def _extra_parts(extra_keys: Iterable[str]) -> frozenset[str]:
    if isinstance(extra_keys, str):
        raise TypeError(f"extra_keys must be a collection of names, got {extra_keys!r}")
    return frozenset(part for part in map(_compact, extra_keys) if part)


def _is_secret(name: str, extra: frozenset[str]) -> bool:
    if len(name) <= _CACHED_LENGTH:
        return _is_secret_name(name, extra)
    return _judge(name, extra)


@functools.lru_cache(maxsize=4096)
def _is_secret_name(name: str, extra: frozenset[str]) -> bool:
    return _judge(name, extra)


def _judge(name: str, extra: frozenset[str]) -> bool:
    compact = _compact(name)
    if any(part in compact for part in extra):
        return True
    words = {word.lower() for word in _word().findall(name)}
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


_Span = tuple[int, int]
_Finder = Callable[[re.Match[str]], Iterable[_Span]]


def _whole(match: re.Match[str]) -> Iterable[_Span]:
    return (match.span(),)


def _group(name: str) -> _Finder:
    def spans(match: re.Match[str]) -> Iterable[_Span]:
        start, end = match.span(name)
        return ((start, end),) if end > start else ()

    return spans


def _opaque_credential(match: re.Match[str]) -> Iterable[_Span]:
    credential = match["value"]
    # Prose ("basic authentication", "bearer token") is plain lower-case words; a real
    # credential has a digit, base64 padding or symbols, or capitals past its first letter.
    opaque = (
        any(c.isdigit() or c in "+/=" for c in credential)
        or credential[1:] != credential[1:].lower()
    )
    return (match.span("value"),) if opaque else ()


def _pair_value(match: re.Match[str]) -> Iterable[_Span]:
    name = "quoted" if match["quote"] else "bare"
    start, end = match.span(name)
    return ((start, end),) if end > start else ()


_PAIR_NAMES: Final = (
    r"password|passwd|pwd|passphrase|secret|credentials?|api[_-]?key|access[_-]?key"
    r"|account[_-]?key|shared[_-]?access[_-]?key|subscription[_-]?key|private[_-]?key"
    r"|token|session[_-]?id"
)
_NOT_AFTER_ALNUM: Final = r"(?<![A-Za-z0-9])"

# Token formats that say what they are by their prefix. Each starts with a literal
# prefix after a non-alphanumeric character and repeats only character classes, so a
# failed attempt costs at most the run it started in: masking stays linear (checked on
# 1 MB runs of every prefix).
_TOKENS: Final = (
    r"sk-[A-Za-z0-9_\-]{20,}",  # OpenAI (sk-, sk-proj-, sk-svcacct-), Anthropic (sk-ant-)
    r"[rs]k_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe secret and restricted keys
    r"whsec_[A-Za-z0-9+/=]{20,}",  # Stripe webhook secret
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"github_pat_\w{20,}",  # GitHub fine-grained token
    r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab personal access token
    r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",  # AWS access key id
    r"xox[baprs]-[A-Za-z0-9\-]{10,}",  # Slack
    r"AIza[0-9A-Za-z_\-]{35}",  # Google API key
    r"ya29\.[A-Za-z0-9_\-.]{20,}",  # Google OAuth access token
    r"GOCSPX-[A-Za-z0-9_\-]{20,}",  # Google OAuth client secret
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"npm_[A-Za-z0-9]{36,}",  # npm
    r"pypi-AgE[A-Za-z0-9_\-]{40,}",  # PyPI
    r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",  # SendGrid
    r"SK[0-9a-f]{32}(?![0-9A-Za-z])",  # Twilio API key (lower-case hex, exactly 32)
    r"shp(?:at|ss|ca|pa)_[A-Fa-f0-9]{32,}",  # Shopify
    r"do[opr]_v1_[a-f0-9]{64}",  # DigitalOcean
    r"sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,}",  # Square
    r"dapi[a-f0-9]{32}(?![0-9A-Za-z])",  # Databricks
    r"ATATT3[A-Za-z0-9_\-=]{50,}",  # Atlassian
    r"hv[sb]\.[A-Za-z0-9_\-]{24,}",  # HashiCorp Vault
    r"AGE-SECRET-KEY-1[0-9A-Z]{58}",  # age
    r"gsk_[A-Za-z0-9]{40,}",  # Groq
    r"r8_[A-Za-z0-9]{30,}",  # Replicate
    r"pplx-[A-Za-z0-9]{40,}",  # Perplexity
    r"xai-[A-Za-z0-9]{40,}",  # xAI
    r"lsv2_(?:pt|sk)_[A-Za-z0-9_]{30,}",  # LangSmith
    r"tvly-[A-Za-z0-9_\-]{20,}",  # Tavily
    r"lin_api_[A-Za-z0-9]{30,}",  # Linear
    r"ntn_[A-Za-z0-9]{30,}",  # Notion
    r"sntrys_[A-Za-z0-9+/=_\-]{40,}",  # Sentry
    r"[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])",  # Telegram bot
)


@functools.cache
def _text_rules() -> tuple[tuple[re.Pattern[str], _Finder], ...]:
    """The rules :func:`redact_text` applies: a pattern and what of its match to mask."""
    return (
        (
            re.compile(
                r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                r".*?(?:-----END[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)",
                re.S,
            ),
            _whole,
        ),
        # Header lines: the whole value goes, whatever the scheme.
        (
            re.compile(
                _NOT_AFTER_ALNUM + r"(?:(?:proxy-)?authorization|(?:set-)?cookie)"
                r"[\"']?[ \t]*:[ \t]*[\"']?(?P<value>[^\r\n\"'\\]+)",
                re.I,
            ),
            _group("value"),
        ),
        (
            # Greedy up to the last "@" of the authority: passwords do contain "@". The
            # scheme is bounded, or a long run like "a-a-a-..." takes quadratic time.
            re.compile(r"\b[a-z][a-z0-9+.\-]{0,31}://[^/\s:@?#]*:(?P<value>[^/\s?#]+)@", re.I),
            _group("value"),
        ),
        (
            re.compile(r"\b(?:bearer|basic)\s+(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)", re.I),
            _opaque_credential,
        ),
        (
            re.compile(
                _NOT_AFTER_ALNUM + rf"(?:{_PAIR_NAMES})[\"']?[ \t]*[:=][ \t]*"
                # A quoted value up to its quote; a bare one up to a delimiter or a closing
                # bracket; never an already masked value, so masking twice changes nothing.
                r"(?!\[REDACTED\])(?:(?P<quote>[\"'])(?P<quoted>(?:(?!(?P=quote)).)*)(?P=quote)"
                r"|(?P<bare>[^\s\"'&;,)\]}\\]+))",
                re.I,
            ),
            _pair_value,
        ),
        # Webhook URLs carry their secret in the path.
        (
            re.compile(
                r"(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
                r"|discord(?:app)?\.com/api/webhooks/)(?P<value>[A-Za-z0-9_/\-]+)"
            ),
            _group("value"),
        ),
        # Signatures of pre-signed URLs (Azure SAS, S3, GCS) in query strings.
        (
            re.compile(
                r"[?&](?:sig|x-amz-signature|x-goog-signature)=(?P<value>[^&#\s\"'\\]+)", re.I
            ),
            _group("value"),
        ),
        (re.compile(_NOT_AFTER_ALNUM + "(?:" + "|".join(_TOKENS) + ")"), _whole),
        (
            re.compile(
                r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"
            ),
            _whole,
        ),
    )


# --- escaped and encoded text ------------------------------------------------------------
#
# A secret is often seen through an encoding: the repr() of a string (``said:\nsk-...``,
# where the escape glues an "n" onto the token), JSON (``\"password\": \"...\"``,
# ``\u0022``), a URL (``token%20ghp_...``, ``%3Dsk-...``, ``+`` for a space). The rules
# run on the text as it is and on up to three decoded views of it; each view knows where
# its characters came from, so what a rule finds in a view is masked in the original,
# escapes and all, and everything else stays as it was written.


@functools.cache
def _escape() -> re.Pattern[str]:
    return re.compile(
        r"\\(?:u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|U[0-9A-Fa-f]{8}|.)|%[0-9A-Fa-f]{2}|\+", re.S
    )


_SIMPLE_ESCAPES: Final = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "a": "\a",
    "0": "\0",
}
_VIEWS: Final = 3
_ROUNDS: Final = 4


def _unescape(escape: str) -> str:
    if escape == "+":
        return " "
    if escape[0] == "%":
        return chr(int(escape[1:], 16))
    char = escape[1]
    if len(escape) > 2:  # \uXXXX, \xXX, \UXXXXXXXX
        code = int(escape[2:], 16)
        return chr(code) if code <= sys.maxunicode else char
    return _SIMPLE_ESCAPES.get(char, char)


class _View:
    """``text`` decoded one level; maps its positions back to the text it came from.

    Every escape becomes one character. ``_marks`` holds pairs of positions (decoded,
    source) at both sides of every escape; between two marks the offset is constant.
    """

    __slots__ = ("_decoded", "_source", "text")

    def __init__(self, source: str) -> None:
        pieces: list[str] = []
        decoded, source_at = [0], [0]
        done = length = 0
        for match in _escape().finditer(source):
            start, end = match.span()
            pieces.append(source[done:start])
            length += start - done
            decoded.append(length)
            source_at.append(start)
            pieces.append(_unescape(match[0]))
            length += 1
            decoded.append(length)
            source_at.append(end)
            done = end
        pieces.append(source[done:])
        self.text = "".join(pieces)
        self._decoded = decoded
        self._source = source_at

    def position(self, index: int) -> int:
        """Where the character at ``index`` of the view starts in the source."""
        mark = bisect.bisect_right(self._decoded, index) - 1
        return self._source[mark] + index - self._decoded[mark]


def _spans(text: str) -> list[_Span]:
    return [
        span
        for pattern, find in _text_rules()
        for match in pattern.finditer(text)
        for span in find(match)
    ]


def _secret_spans(text: str) -> list[_Span]:
    spans = _spans(text)
    escape = _escape()
    views: list[_View] = []
    current = text
    while len(views) < _VIEWS and escape.search(current):
        views.append(_View(current))
        current = views[-1].text
        for found in _spans(current):
            start, end = found
            for view in reversed(views):
                start, end = view.position(start), view.position(end)
            spans.append((start, end))
    return spans


def _mask_once(source: str) -> str:
    pieces: list[str] = []
    done = 0
    for start, end in sorted(_secret_spans(source)):
        if end <= done:
            continue
        if start > done or not pieces:
            pieces.append(source[done:start])
            pieces.append(REDACTED)
        # else it overlaps or touches the span just masked, which now reaches further
        done = end
    pieces.append(source[done:])
    return "".join(pieces)


def redact_text(text: str) -> str:
    r"""``text`` with every secret-looking substring masked and the rest unchanged.

    Labels and schemes are kept so the text still reads: ``Bearer [REDACTED]``,
    ``password=[REDACTED]``, ``postgres://app:[REDACTED]@db/prod``. Secrets behind
    escapes and encodings (``repr``, JSON, URL encoding, nested up to three levels) are
    found too, and masked as they are written: ``said:\n[REDACTED]``,
    ``password%3D[REDACTED]``.
    """
    out = str.__str__(text)
    if len(out) > _CACHED_LENGTH:
        return _mask_fully(out)
    # Remembered by digest, never by the text itself: the cache keeps no secret alive.
    digest = hashlib.sha256(out.encode("utf-8", "surrogatepass")).digest()
    masked = _MASKED.get(digest)
    if masked is None:
        masked = _mask_fully(out)
        if len(_MASKED) >= _MASKED_MAX:
            _MASKED.clear()
        _MASKED[digest] = masked
    return masked


#: Masked short texts by the SHA-256 of the text (at most :data:`_MASKED_MAX`).
_MASKED: dict[bytes, str] = {}
_MASKED_MAX: Final = 4096


def _mask_fully(out: str) -> str:
    # Masking can join a secret to what follows it (a header value runs to the end of
    # its line); masking again until nothing changes makes the result a fixed point.
    for _ in range(_ROUNDS):
        masked = _mask_once(out)
        if masked == out:
            break
        out = masked
    return out


@functools.cache
def _kept() -> tuple[type, ...]:
    """Immutable values that cannot hold a secret the patterns would find.

    Their modules are imported on the first :func:`redact`, not with this one (``uuid``
    alone imports ``platform``).
    """
    import datetime
    import numbers
    import uuid

    return (
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


def _shown(value: Any) -> str:
    try:
        return repr(value)
    # A stop packet is built when things are already broken; a failing __repr__ must
    # not stop it.
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__}>"


def _key_text(key: Any) -> str:
    """The text a key is judged by: bytes decoded, other objects as ``str()`` shows them."""
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8", "replace")
    try:
        return str(key)
    except Exception:  # noqa: BLE001 - same as _shown
        return _shown(key)


def _redact_mapping(
    value: Mapping[Any, Any], extra: frozenset[str], active: set[int]
) -> dict[Any, Any]:
    items = list(value.items())
    texts = [_key_text(key) for key, _ in items]
    # A key that holds a secret becomes its masked text; where that text is taken, a
    # number tells it apart, so no two keys merge and no value is lost.
    masked = [redact_text(text) for text in texts]
    renamed = {i: name for i, name in enumerate(masked) if name != texts[i]}
    taken = {key for i, (key, _) in enumerate(items) if i not in renamed}
    for i, name in renamed.items():
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name} #{n}"
        taken.add(candidate)
        renamed[i] = candidate
    return {
        renamed.get(i, key): _masked(item)
        if _is_secret(texts[i], extra)
        else _redact(item, extra, active)
        for i, (key, item) in enumerate(items)
    }


def _redact(value: Any, extra: frozenset[str], active: set[int]) -> Any:
    if value is None or isinstance(value, _kept()):
        return value
    if isinstance(value, str):
        return redact_text(value)
    if not isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return redact_text(_shown(value))
    if id(value) in active:
        return CYCLE
    active.add(id(value))
    try:
        if isinstance(value, Mapping):
            return _redact_mapping(value, extra, active)
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
