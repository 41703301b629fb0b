"""Outcome classification: which failed calls count against a dependency's health.

A breaker must open on evidence that the *dependency* is sick, never on a mistake in
the arguments the model sent. A missed failure costs a few extra calls; a false open
sidelines a healthy tool for a whole cooldown. So the default classifier counts only
what clearly points at the infrastructure, and anything it does not recognise is
``ignored`` (detail ``unknown-exception:<ClassName>``).

What counts
-----------
- **cancellation** -> ``ignored``, ``cancelled``: ``asyncio.CancelledError``,
  ``concurrent.futures.CancelledError``, ``KeyboardInterrupt``, ``SystemExit``,
  ``GeneratorExit``, trio/anyio ``Cancelled``.
- **HTTP status** -> 5xx and 429 are ``failure``; every other status (400, 401, 403,
  404, 408, 409, 422 ...) is ``ignored``. Detail ``http-503``.
- **timeout** -> ``failure``, ``timeout``: ``TimeoutError`` and its aliases
  (``asyncio``, ``socket``, ``concurrent.futures``), the timeouts of httpx/httpcore,
  requests, urllib3, aiohttp, botocore, openai/anthropic ``APITimeoutError``, trio
  ``TooSlowError``, ``subprocess.TimeoutExpired``.
- **network** -> ``failure``, ``network:<code>``: ``ConnectionError`` and its
  subclasses; ``OSError`` with errno ``ECONNREFUSED``, ``ECONNRESET``, ``ECONNABORTED``,
  ``ETIMEDOUT``, ``EHOSTUNREACH``, ``ENETUNREACH``, ``ENETDOWN`` or ``EPIPE``;
  ``socket.gaierror`` ``EAI_AGAIN``, ``EAI_NONAME``, ``EAI_NODATA``; Node-style code
  strings (``"ENOTFOUND"``, ``"EAI_AGAIN"`` ...) in ``exc.code`` or ``exc.errno``; the
  connection errors of httpx/httpcore, requests, urllib3, aiohttp, botocore,
  openai/anthropic ``APIConnectionError``. The code is the errno name when there is
  one, else the class name (``network:ConnectError``).
- **validation** -> ``ignored``, ``validation``: ``ValidationError`` of pydantic (v1,
  v2), jsonschema, marshmallow.
- anything else -> ``ignored``, ``unknown-exception:<ClassName>``.

An HTTP status is read by duck typing, in this order: ``exc.status_code`` (openai,
anthropic, fastapi), ``exc.response.status_code`` (httpx ``HTTPStatusError``, requests
``HTTPError``), ``exc.status`` (aiohttp ``ClientResponseError``), ``exc.code``
(``urllib.error.HTTPError``); only an ``int`` in 100..599 counts. A raised exception is
never a success: a status below 400 in one (a redirect from httpx ``raise_for_status``)
is ``ignored``. On 429 and 503 the ``Retry-After`` header (``exc.headers``, then
``exc.response.headers``, any capitalisation) becomes ``retry_after_ms``; the
``retry-after-ms`` header that OpenAI and Anthropic send wins when present.

Third-party classes are recognised by class name and top-level module, never imported:
the *nearest* class in the MRO that is known decides, so a user subclass of
``httpx.ReadTimeout`` is a timeout, and ``requests.ConnectTimeout`` (both a
``ConnectionError`` and a ``Timeout``) is a timeout by its own name.

Precedence
----------
One exception (a *link*) is judged by the first rule that matches:

1. cancellation;
2. an HTTP status, except a 408 on a known timeout class (LiteLLM's ``Timeout``
   subclasses openai's ``APITimeoutError`` and stamps ``status_code = 408`` on the
   client's own timeout: no server answered, so it is a timeout);
3. timeout;
4. network;
5. validation;

otherwise the link is undecided. The raised exception is judged first; while
undecided, the walk goes on, depth-first, through ``__cause__``, an exception's
``reason`` (``urllib.error.URLError``, urllib3 ``MaxRetryError``), the members of an
exception group, then ``__context__``, with a cycle guard and at most
32 links. The first decided link wins, so the outermost evidence rules:
``asyncio.timeout()`` raises ``TimeoutError`` *from* ``CancelledError``, which is a
timeout, while a ``ToolError`` raised from ``httpx.ConnectError`` is a network failure.
``__context__`` is walked even after ``raise ... from None``: hiding a context from the
traceback does not undo what happened. A cancelled member of an exception group decides
only when nothing else does, because siblings are cancelled *because* one member failed.
When no link decides, the verdict is ``ignored`` / ``unknown-exception:<ClassName>`` of
the raised exception.

Why just over 800 lines: the classifier is one rule, written once (this page is its
documentation), and its tables of the frameworks' and clients' exception names sit
beside the walk that reads them; split, a reader would hold two files to see one verdict.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import math
import re
import sys
import time
from collections.abc import Mapping
from typing import Final, Literal, Protocol, TypeAlias

from toolbreaker.core._breaker.predicates import UNCLASSIFIED
from toolbreaker.core._breaker.state import OUTCOME_TYPES

__all__ = [
    "SUCCESS",
    "Classifier",
    "Kind",
    "Verdict",
    "classify_exception",
    "classify_status",
    "default_classifier",
    "parse_duration",
    "parse_retry_after",
]

#: An outcome event type of the core: how a finished call counts for its dependency.
Kind: TypeAlias = Literal["success", "failure", "ignored", "ambiguous"]

# How many exceptions of a cause/context chain are looked at, at most.
_MAX_LINKS: Final = 32


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """How one finished call counts for its dependency.

    Attributes:
        kind: the outcome event type to feed the core.
        detail: a short machine-readable class of the outcome (``ok``, ``http-503``,
            ``timeout``, ``network:ECONNREFUSED``, ``validation``, ``cancelled``,
            ``unknown-exception:ValueError`` ...).
        retry_after_ms: for failures only, the wait the dependency asked for.
        status: the HTTP status, when one was found.

    Raises:
        ValueError: ``kind`` is not an outcome type, or ``retry_after_ms`` is negative
            or set on something other than a failure.
    """

    kind: Kind
    detail: str
    retry_after_ms: int | None = None
    status: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in OUTCOME_TYPES:
            raise ValueError(f"kind must be one of {sorted(OUTCOME_TYPES)}, got {self.kind!r}")
        wait = self.retry_after_ms
        if wait is not None:
            if self.kind != "failure":
                raise ValueError("retry_after_ms belongs on failure verdicts only")
            if type(wait) is not int or wait < 0:
                raise ValueError(f"retry_after_ms must be a non-negative integer, got {wait!r}")


#: The verdict of a call that returned normally.
SUCCESS: Final = Verdict("success", "ok")

_CANCELLED_VERDICT: Final = Verdict("ignored", "cancelled")
_TIMEOUT_VERDICT: Final = Verdict("failure", "timeout")
_VALIDATION_VERDICT: Final = Verdict("ignored", "validation")


class Classifier(Protocol):
    """Anything that turns a raised exception into a :class:`Verdict`.

    A classifier runs on every failed call, must not raise, and should answer
    ``ignored`` when in doubt.
    """

    def __call__(self, exc: BaseException) -> Verdict:
        """Classify ``exc``."""
        ...


# ---------------------------------------------------------------------------
# Known classes

_CANCELLED: Final = "cancelled"
_TIMEOUT: Final = "timeout"
_NETWORK: Final = "network"
_VALIDATION: Final = "validation"
_GROUP: Final = "group"

# Standard-library classes, by identity (several are aliases of one another on 3.11+).
_STDLIB_CLASSES: Final[dict[type, str]] = {
    **dict.fromkeys(
        (
            KeyboardInterrupt,
            SystemExit,
            GeneratorExit,
        ),
        _CANCELLED,
    ),
    TimeoutError: _TIMEOUT,  # socket.timeout is it, and from 3.11 the asyncio and futures ones
    ConnectionError: _NETWORK,
}

# (top-level modules, category, class names). Only names that mean the same thing in
# every listed module: httpx's ProtocolError also covers our own LocalProtocolError.
_LIBRARY_CLASSES: Final = (
    (
        ("httpx", "httpcore"),
        _TIMEOUT,
        ("TimeoutException", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout"),
    ),
    (
        ("httpx", "httpcore"),
        _NETWORK,
        (
            "NetworkError",
            "ConnectError",
            "ReadError",
            "WriteError",
            "CloseError",
            "RemoteProtocolError",
            "ProxyError",
        ),
    ),
    (("requests",), _TIMEOUT, ("Timeout", "ConnectTimeout", "ReadTimeout")),
    # ChunkedEncodingError: the connection broke in the middle of the body.
    (("requests",), _NETWORK, ("ConnectionError", "ChunkedEncodingError")),
    (("urllib3",), _TIMEOUT, ("TimeoutError", "ConnectTimeoutError", "ReadTimeoutError")),
    # NewConnectionError subclasses ConnectTimeoutError; its own name comes first.
    (("urllib3",), _NETWORK, ("NewConnectionError", "ProtocolError")),
    (
        ("aiohttp",),
        _TIMEOUT,
        ("ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError"),
    ),
    (
        ("aiohttp",),
        _NETWORK,
        ("ClientConnectionError", "ServerDisconnectedError", "ClientPayloadError"),
    ),
    (("openai", "anthropic"), _TIMEOUT, ("APITimeoutError",)),
    (("openai", "anthropic"), _NETWORK, ("APIConnectionError",)),
    (("botocore",), _TIMEOUT, ("ConnectTimeoutError", "ReadTimeoutError")),
    (("botocore",), _NETWORK, ("EndpointConnectionError", "ConnectionClosedError")),
    (("subprocess",), _TIMEOUT, ("TimeoutExpired",)),
    # asyncio's by name: a sync program never loads asyncio, and none of its exceptions
    # can exist until something did. Its TimeoutError is the builtin's from 3.11 on.
    # concurrent.futures' too (its TimeoutError is the builtin's from 3.11 on).
    (("asyncio", "concurrent"), _CANCELLED, ("CancelledError",)),
    (("asyncio", "concurrent"), _TIMEOUT, ("TimeoutError",)),
    (("trio",), _TIMEOUT, ("TooSlowError",)),
    (("trio", "anyio"), _CANCELLED, ("Cancelled",)),
    (
        ("pydantic", "pydantic_core", "jsonschema", "marshmallow"),
        _VALIDATION,
        ("ValidationError",),
    ),
    (("builtins", "exceptiongroup"), _GROUP, ("BaseExceptionGroup",)),
)


def _index_library_classes() -> dict[str, dict[str, str]]:
    index: dict[str, dict[str, str]] = {}
    for roots, category, names in _LIBRARY_CLASSES:
        for name in names:
            for root in roots:
                index.setdefault(name, {})[root] = category
    return index


# class name -> top-level module -> category
_LIBRARY_INDEX: Final = _index_library_classes()


def _category(cls: type) -> str | None:
    """The category of the nearest class in ``cls``'s MRO that is known, if any."""
    for klass in cls.__mro__:
        category = _STDLIB_CLASSES.get(klass)
        if category is not None:
            return category
        roots = _LIBRARY_INDEX.get(klass.__name__)
        if roots is not None:
            category = roots.get(klass.__module__.partition(".")[0])
            if category is not None:
                return category
    return None


# ---------------------------------------------------------------------------
# Network evidence

_NETWORK_ERRNO_NAMES: Final = (
    "ECONNREFUSED",
    "ECONNRESET",
    "ECONNABORTED",
    "ETIMEDOUT",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "ENETDOWN",
    "EPIPE",
)
_NETWORK_ERRNOS: Final[dict[int, str]] = {
    code: name
    for name in _NETWORK_ERRNO_NAMES
    if isinstance(code := getattr(errno, name, None), int)
}
# getaddrinfo() codes, whose numbers overlap ordinary errnos on some platforms: read
# from socket once a gaierror is seen (none exists before socket is loaded).
_EAI_NAMES: Final = ("EAI_AGAIN", "EAI_NONAME", "EAI_NODATA")
# Node-style string codes, as some wrappers carry them in ``code`` or ``errno``.
_NETWORK_CODES: Final = frozenset(
    (*_NETWORK_ERRNO_NAMES, "ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "EAI_NODATA")
)
# Builtin ConnectionError subclasses are often made without an errno.
_CONNECTION_CLASS_CODES: Final[dict[type, str]] = {
    ConnectionRefusedError: "ECONNREFUSED",
    ConnectionResetError: "ECONNRESET",
    ConnectionAbortedError: "ECONNABORTED",
    BrokenPipeError: "EPIPE",
}
_NETWORK_VERDICTS: Final = {
    code: Verdict("failure", f"network:{code}") for code in sorted(_NETWORK_CODES)
}


def _attr(obj: object, name: str) -> object:
    """``getattr`` with a ``None`` default that survives a property raising."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a broken property must not break classification
        return None


def _network_code(exc: BaseException) -> str | None:
    """An errno or Node-style code on ``exc`` that names a network failure."""
    socket = sys.modules.get("socket")
    if socket is not None and isinstance(exc, socket.gaierror):
        if exc.errno is None:
            return None
        return next((n for n in _EAI_NAMES if getattr(socket, n, None) == exc.errno), None)
    if isinstance(exc, OSError) and exc.errno is not None:
        name = _NETWORK_ERRNOS.get(exc.errno)
        if name is not None:
            return name
    for attribute in ("code", "errno"):
        value = _attr(exc, attribute)
        if isinstance(value, str):
            if value in _NETWORK_CODES:
                return value
            if len(value) <= 16 and (upper := value.upper()) in _NETWORK_CODES:
                return upper
    return None


def _network_verdict(exc: BaseException, code: str | None) -> Verdict:
    if code is None:
        for klass in type(exc).__mro__:
            code = _CONNECTION_CLASS_CODES.get(klass)
            if code is not None:
                break
        else:
            return Verdict("failure", f"network:{type(exc).__name__}")
    return _NETWORK_VERDICTS[code]


# ---------------------------------------------------------------------------
# HTTP status


def _http_detail(status: int) -> str:
    return f"http-{status}" if 0 <= status <= 999 else "http-invalid"


def _status_verdict(status: int, *, raised: bool) -> Verdict:
    if status >= 500 or status == 429:
        return Verdict("failure", _http_detail(status), status=status)
    if raised or not 100 <= status < 400:
        return Verdict("ignored", _http_detail(status), status=status)
    return Verdict("success", "ok", status=status)


# Verdicts for 100..599 by status, each built the first time its status is seen (not all
# 1,000 at import) and kept: classification allocates nothing on this path after that.
_RESULT_STATUS: Final[dict[int, Verdict]] = {}
_RAISED_STATUS: Final[dict[int, Verdict]] = {}


def _kept_status_verdict(status: int, *, raised: bool) -> Verdict:
    """:func:`_status_verdict` of a status in 100..599, made once and kept."""
    kept = _RAISED_STATUS if raised else _RESULT_STATUS
    verdict = kept.get(status)
    if verdict is None:
        verdict = kept[status] = _status_verdict(status, raised=raised)
    return verdict


def _as_status(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return int(value)
    return None


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, found by duck typing."""
    status = _as_status(_attr(exc, "status_code"))
    if status is None:
        response = _attr(exc, "response")
        if response is not None:
            status = _as_status(_attr(response, "status_code"))
    if status is None:
        status = _as_status(_attr(exc, "status"))
    if status is None:
        status = _as_status(_attr(exc, "code"))
    return status


_RETRY_AFTER: Final = ("retry-after", "Retry-After")
_RETRY_AFTER_MS: Final = ("retry-after-ms", "Retry-After-Ms")
_RATELIMIT_RESET: Final = ("ratelimit-reset", "RateLimit-Reset")
# OpenAI-style resets, durations such as "1s", "6m0s", "20ms".
_RESET_DURATIONS: Final = (
    ("x-ratelimit-reset-requests", "X-RateLimit-Reset-Requests"),
    ("x-ratelimit-reset-tokens", "X-RateLimit-Reset-Tokens"),
)


@functools.cache
def _duration() -> re.Pattern[str]:
    """An OpenAI-style duration, compiled when a header first holds one (not at import)."""
    return re.compile(
        r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?"
    )


_DURATION_SCALES: Final = (3_600_000, 60_000, 1000, 1)
# A RateLimit-Reset this large is an epoch time, not a delay (some providers send one).
_EPOCH_THRESHOLD: Final = 1_000_000_000
_MAX_BODY_CHARS: Final = 65_536
_QUOTA_VERDICT: Final = Verdict("failure", "quota-exhausted", status=429)


def _header(headers: object, spellings: tuple[str, str]) -> object:
    """A header's value, looked up case-insensitively; ``spellings[0]`` is lower case."""
    if headers is None:
        return None
    get = _attr(headers, "get")
    if callable(get):
        # Most header containers are case-insensitive: one or two cheap lookups.
        for key in spellings:
            try:
                value = get(key)
            except Exception:  # noqa: BLE001 - an odd container is no evidence
                value = None
            if value is not None:
                return value
    if isinstance(headers, Mapping):
        name = spellings[0]
        try:
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == name:
                    return value
        except Exception:  # noqa: BLE001 - an odd container is no evidence
            return None
    return None


def parse_duration(value: object) -> int | None:
    """Read a duration such as ``"1s"``, ``"6m0s"``, ``"1h2m3.5s"`` or ``"20ms"`` as ms.

    The form OpenAI's ``x-ratelimit-reset-*`` headers and Google's ``retryDelay`` use.
    Fractions round up to the next millisecond. ``None`` when it does not parse.
    """
    text = _text(value)
    if text is None or not text or len(text) > _MAX_RETRY_AFTER_CHARS:
        return None
    match = _duration().fullmatch(text.strip())
    if match is None or not any(match.groups()):
        return None
    total = 0.0
    for part, scale in zip(match.groups(), _DURATION_SCALES, strict=True):
        if part is not None:
            total += float(part) * scale
    return math.ceil(total) if math.isfinite(total) else None


def _retry_after_in(headers: object, now: float | None) -> int | None:
    """The wait a response's headers ask for; the most specific header wins.

    ``retry-after-ms``, then ``Retry-After``, then ``RateLimit-Reset`` (delay seconds, or
    an epoch time when it is that large), then the longest of OpenAI's
    ``x-ratelimit-reset-requests`` / ``-tokens``.
    """
    millis = _header(headers, _RETRY_AFTER_MS)
    if millis is not None:
        text = _text(millis)
        wait = None if text is None else _decimal(text.strip(), 1)
        if wait is not None:
            return wait
    value = _header(headers, _RETRY_AFTER)
    if value is not None:
        wait = parse_retry_after(value, now=now)
        if wait is not None:
            return wait
    value = _header(headers, _RATELIMIT_RESET)
    if value is not None:
        text = _text(value)
        seconds = None if text is None else _decimal(text.strip(), 1000)
        if seconds is not None:
            if seconds >= _EPOCH_THRESHOLD * 1000:
                return max(0, seconds - math.floor((time.time() if now is None else now) * 1000))
            return seconds
    waits = [
        wait
        for spellings in _RESET_DURATIONS
        if (raw := _header(headers, spellings)) is not None
        and (wait := parse_duration(raw)) is not None
    ]
    return max(waits) if waits else None


def _json_body(exc: BaseException) -> object:
    """The decoded JSON error body an exception carries, if one can be read cheaply.

    ``exc.body`` (openai, anthropic, google SDKs), else the text of ``exc.response``
    (httpx, requests) or the buffered body of a ``urllib.error.HTTPError``.
    """
    body = _attr(exc, "body")
    if body is None:
        response = _attr(exc, "response")
        body = None if response is None else _attr(response, "text")
    if body is None:
        fp = _attr(exc, "fp")
        getvalue = _attr(fp, "getvalue")
        if callable(getvalue):
            try:
                body = getvalue()
            except Exception:  # noqa: BLE001 - an odd buffer is no evidence
                body = None
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body[:_MAX_BODY_CHARS]).decode("utf-8", "replace")
    if isinstance(body, str):
        if len(body) > _MAX_BODY_CHARS:
            return None
        import json  # a failure's body only: no breaker loads json for this

        try:
            return json.loads(body)
        except ValueError:
            return None
    return body if isinstance(body, (dict, list)) else None


def _body_hint(body: object) -> tuple[bool, int | None]:
    """``(quota exhausted, retry delay in ms)`` read from a decoded error body.

    OpenAI says ``insufficient_quota`` in ``error.code`` or ``error.type``; Google says
    ``RESOURCE_EXHAUSTED`` and names a quota, with a ``RetryInfo`` ``retryDelay`` when
    waiting helps (a per-minute quota) and none when it does not (a spent daily quota).
    """
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return False, None
    if "insufficient_quota" in (error.get("code"), error.get("type")):
        return True, None
    delay = None
    details = error.get("details")
    if isinstance(details, list):
        for detail in details[:_MAX_LINKS]:
            if isinstance(detail, dict) and "retryDelay" in detail:
                delay = parse_duration(detail["retryDelay"])
                if delay is not None:
                    break
    if delay is None and error.get("status") == "RESOURCE_EXHAUSTED":
        message = error.get("message")
        if isinstance(message, str) and "quota" in message.lower():
            return True, None
    return False, delay


def _with_retry_after(verdict: Verdict, headers: object, now: float | None) -> Verdict:
    """``verdict`` with the wait a 429 or 503 asked for, when it asked for one."""
    status = verdict.status
    if status != 429 and status != 503:  # noqa: PLR1714 - no tuple built per call
        return verdict
    wait = _retry_after_in(headers, now)
    if wait is None:
        return verdict
    return Verdict(verdict.kind, verdict.detail, retry_after_ms=wait, status=status)


def _raised_status_verdict(exc: BaseException, status: int, now: float | None) -> Verdict:
    verdict = _RAISED_STATUS.get(status) or _kept_status_verdict(status, raised=True)
    if status != 429 and status != 503:  # noqa: PLR1714 - no tuple built per call
        return verdict
    with_wait = _with_retry_after(verdict, _attr(exc, "headers"), now)
    if with_wait is verdict:
        response = _attr(exc, "response")
        if response is not None:
            with_wait = _with_retry_after(verdict, _attr(response, "headers"), now)
    return _with_body_hint(with_wait, _json_body(exc))


def _with_body_hint(verdict: Verdict, body: object) -> Verdict:
    """``verdict`` read together with its JSON error body: a spent quota, a retryDelay."""
    if body is None:
        return verdict
    quota, delay = _body_hint(body)
    if quota and verdict.status == 429:
        return _QUOTA_VERDICT
    if delay is not None and verdict.retry_after_ms is None:
        return Verdict(verdict.kind, verdict.detail, retry_after_ms=delay, status=verdict.status)
    return verdict


def classify_status(
    status: int,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
    body: object = None,
) -> Verdict:
    """Classify a call that returned a result carrying an HTTP status.

    5xx and 429 are failures (with ``retry_after_ms`` from the rate-limit hints on 429
    and 503); 100..399 is a success; every other status is ignored. A 429 whose body
    says the quota is spent is ``quota-exhausted``: not transient, never retried.

    Args:
        status: the HTTP status of the result.
        headers: the response headers, looked up case-insensitively; any object with
            ``.get`` works.
        now: wall-clock epoch seconds, for a ``Retry-After`` HTTP-date; defaults to
            ``time.time()``.
        body: the decoded JSON error body (or its text), for ``retryDelay`` and quota
            errors.

    Returns:
        The verdict; it never raises.
    """
    if 100 <= status <= 599:
        verdict = _RESULT_STATUS.get(status) or _kept_status_verdict(status, raised=False)
    else:
        verdict = _status_verdict(status, raised=False)
    verdict = _with_retry_after(verdict, headers, now)
    if body is None or (status != 429 and status != 503):  # noqa: PLR1714 - hot path
        return verdict
    if isinstance(body, (str, bytes)):
        import json  # a 429's or a 503's body only

        try:
            body = json.loads(body)
        except ValueError:
            return verdict
    return _with_body_hint(verdict, body)


# ---------------------------------------------------------------------------
# Retry-After

_MAX_RETRY_AFTER_CHARS: Final = 128


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    return None


def _decimal(text: str, scale: int) -> int | None:
    """``text`` as a non-negative decimal times ``scale``, rounded up; else ``None``."""
    if not text.isascii():
        return None
    whole, dot, fraction = text.partition(".")
    if not whole.isdigit() or (dot and not fraction.isdigit()):
        return None
    try:
        value = int(whole) * scale
        if fraction:
            value += -(-int(fraction) * scale // 10 ** len(fraction))
    except ValueError:  # more digits than int() accepts
        return None
    return value


def parse_retry_after(value: object, *, now: float | None = None) -> int | None:
    """Read a ``Retry-After`` value as milliseconds to wait.

    Accepts delay-seconds (``"120"``; a fraction such as ``"1.5"`` is rounded up to the
    next millisecond) and HTTP-dates: the IMF-fixdate of RFC 9110 plus the obsolete
    RFC 850 and asctime forms that :mod:`email.utils` parses. A date in the past gives
    ``0``. Numbers (``int``, ``float``) and ASCII ``bytes`` are accepted too.

    Args:
        value: the header value.
        now: wall-clock epoch seconds a date is measured from; defaults to
            ``time.time()``.

    Returns:
        Milliseconds, at least 0, or ``None`` when the value is missing, negative or
        unparseable. It never raises.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000 if value >= 0 else None
    if isinstance(value, float):
        millis = value * 1000
        return math.ceil(millis) if math.isfinite(millis) and millis >= 0 else None
    text = _text(value)
    if text is None or len(text) > _MAX_RETRY_AFTER_CHARS:
        return None
    text = text.strip()
    seconds = _decimal(text, 1000)
    if seconds is not None:
        return seconds
    return _date_wait(text, now)


def _date_wait(text: str, now: float | None) -> int | None:
    # A Retry-After date is rare: email.utils loads socket, urllib and more.
    import email.utils
    from datetime import datetime, timezone

    try:
        parsed = email.utils.parsedate_tz(text)
        if parsed is None:
            return None
        year, month, day, hour, minute, second = parsed[:6]
        # HTTP-dates are GMT; a leap second (60) is clamped, datetime refuses it.
        moment = datetime(year, month, day, hour, minute, min(second, 59), tzinfo=timezone.utc)
        target = moment.timestamp() - (parsed[9] or 0)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    wait = target - (time.time() if now is None else now)
    return math.ceil(wait * 1000) if wait > 0 else 0


# ---------------------------------------------------------------------------
# Exceptions


def _judge(exc: BaseException, category: str | None, now: float | None) -> Verdict | None:
    """The verdict one link decides by itself, or ``None`` when undecided."""
    if category == _CANCELLED:
        return _CANCELLED_VERDICT
    status = _status_of(exc)
    # A client's own timeout stamped 408 (LiteLLM's Timeout) is a timeout, not a 408 answer.
    if status is not None and not (status == 408 and category == _TIMEOUT):
        return _raised_status_verdict(exc, status, now)
    if category == _TIMEOUT:
        return _TIMEOUT_VERDICT
    code = _network_code(exc)
    if category == _NETWORK or code is not None:
        return _network_verdict(exc, code)
    if category == _VALIDATION:
        return _VALIDATION_VERDICT
    return None


def _push(
    pending: list[tuple[BaseException, bool]], seen: set[int], follower: object, in_group: bool
) -> None:
    if isinstance(follower, BaseException) and id(follower) not in seen:
        seen.add(id(follower))
        pending.append((follower, in_group))


def classify_exception(exc: BaseException, *, now: float | None = None) -> Verdict:
    """Classify a call that raised ``exc``; see the module docstring for the rules.

    Args:
        exc: what the call raised.
        now: wall-clock epoch seconds, for a ``Retry-After`` HTTP-date; defaults to
            ``time.time()``.

    Returns:
        The verdict; it never raises.
    """
    link = exc
    in_group = False
    group_cancelled = False
    pending: list[tuple[BaseException, bool]] | None = None
    seen: set[int] | None = None
    for _ in range(_MAX_LINKS):
        category = _category(type(link))
        if category == _CANCELLED and in_group:
            group_cancelled = True
        else:
            verdict = _judge(link, category, now)
            if verdict is not None:
                return verdict
        cause = link.__cause__
        context = link.__context__
        reason = _attr(link, "reason")
        members = _attr(link, "exceptions") if category == _GROUP else None
        if (
            cause is not None
            or context is not None
            or isinstance(reason, BaseException)
            or isinstance(members, tuple)
        ):
            if pending is None or seen is None:
                pending = []
                seen = {id(exc)}
            # Pushed in reverse: the cause is looked at first, the context last.
            _push(pending, seen, context, in_group)
            if isinstance(members, tuple):
                for member in reversed(members[:_MAX_LINKS]):
                    _push(pending, seen, member, True)
            _push(pending, seen, reason, in_group)
            _push(pending, seen, cause, in_group)
        if not pending:
            break
        link, in_group = pending.pop()
    if group_cancelled:
        return _CANCELLED_VERDICT
    return Verdict("ignored", f"{UNCLASSIFIED}:{type(exc).__name__}")


def default_classifier(exc: BaseException) -> Verdict:
    """The classifier breakers use unless given another: :func:`classify_exception`."""
    return classify_exception(exc)
