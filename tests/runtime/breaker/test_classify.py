"""The outcome classifier: what counts against a dependency, and what never does.

Third-party exceptions are mimicked by fake classes that carry the library's class name
and module (the classifier recognises them by name, never by import); where a library
happens to be installed, one test also feeds its real class.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import email.message
import errno
import itertools
import socket
import subprocess
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import format_datetime
from types import SimpleNamespace
from typing import get_args
from urllib.error import HTTPError, URLError

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core.breaker.state import OUTCOME_TYPES
from toolbreaker.runtime.breaker._classify import (
    SUCCESS,
    Kind,
    Verdict,
    classify_exception,
    classify_status,
    default_classifier,
    parse_retry_after,
)

NOW = 1_700_000_000.0  # a fixed wall-clock instant, in epoch seconds


def fake(name, module, *bases, **attrs):
    """A class that looks like ``module.name`` to the classifier."""
    return type(name, bases or (Exception,), {"__module__": module, **attrs})


def make(cls, *args, **attrs):
    """An instance of ``cls`` with extra instance attributes."""
    exc = cls(*args)
    for key, value in attrs.items():
        setattr(exc, key, value)
    return exc


def http_date(offset_seconds):
    """An IMF-fixdate ``offset_seconds`` after NOW."""
    return format_datetime(
        datetime.fromtimestamp(NOW + offset_seconds, tz=timezone.utc), usegmt=True
    )


def chained(*links, attribute="__cause__"):
    """links[0] with links[1] as its cause (or context), links[1] with links[2], ..."""
    for outer, inner in itertools.pairwise(links):
        setattr(outer, attribute, inner)
    return links[0]


def url_http_error(code, headers=None):
    """A real urllib.error.HTTPError, built without any network."""
    message = email.message.Message()
    for key, value in (headers or {}).items():
        message[key] = value
    exc = HTTPError("http://tool.invalid/", code, "status", message, None)
    exc.close()
    return exc


# ---------------------------------------------------------------------------
# Verdict


def test_kind_is_exactly_the_core_outcome_types():
    """Kind lists exactly the outcome event types the core accepts."""
    assert frozenset(get_args(Kind)) == OUTCOME_TYPES


def test_success_constant():
    """SUCCESS is a plain success with detail ok and nothing else."""
    assert Verdict("success", "ok") == SUCCESS
    assert SUCCESS.retry_after_ms is None
    assert SUCCESS.status is None


def test_verdict_is_frozen():
    """A Verdict cannot be changed after it is made."""
    with pytest.raises(AttributeError):
        SUCCESS.kind = "failure"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kind", "retry_after_ms"),
    [("broken", None), ("ignored", 5), ("success", 0), ("failure", -1), ("failure", 1.5)],
)
def test_verdict_rejects_invalid_fields(kind, retry_after_ms):
    """An unknown kind, or a retry_after_ms that is negative or not on a failure, raises."""
    with pytest.raises(ValueError, match=r"kind|retry_after_ms"):
        Verdict(kind, "x", retry_after_ms=retry_after_ms)


# ---------------------------------------------------------------------------
# classify_status


@pytest.mark.parametrize("status", [500, 501, 502, 503, 504, 505, 507, 508, 510, 511, 599])
def test_status_5xx_is_failure(status):
    """Every 5xx status is a failure named after the status."""
    assert classify_status(status) == Verdict("failure", f"http-{status}", status=status)


def test_status_429_is_failure():
    """429 Too Many Requests is a failure: the dependency asked us to stop."""
    assert classify_status(429) == Verdict("failure", "http-429", status=429)


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 405, 408, 409, 410, 413, 422, 451])
def test_status_4xx_other_than_429_is_ignored(status):
    """A 4xx other than 429 is the caller's mistake, not the dependency's: ignored."""
    assert classify_status(status) == Verdict("ignored", f"http-{status}", status=status)


@pytest.mark.parametrize("status", [100, 200, 201, 204, 301, 304, 399])
def test_status_below_400_is_success(status):
    """A result with a 1xx, 2xx or 3xx status is a success that keeps its status."""
    assert classify_status(status) == Verdict("success", "ok", status=status)


@pytest.mark.parametrize(
    ("status", "kind", "detail"),
    [(600, "failure", "http-600"), (999, "failure", "http-999"), (0, "ignored", "http-0")],
)
def test_status_outside_the_registry(status, kind, detail):
    """Statuses outside 100..599 follow the same rule: >= 500 fails, anything else is ignored."""
    assert classify_status(status) == Verdict(kind, detail, status=status)


def test_status_absurd_value_gets_a_bounded_detail():
    """A status that is not a 3-digit number does not end up verbatim in the detail."""
    verdict = classify_status(-(10**50))
    assert verdict.detail == "http-invalid"
    assert verdict.kind == "ignored"


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [("120", 120_000), ("0", 0), ("1.5", 1_500), (http_date(30), 30_000), (http_date(-30), 0)],
)
def test_status_429_carries_retry_after(value, expected_ms):
    """On 429, Retry-After (seconds or an HTTP-date measured from now) becomes retry_after_ms."""
    verdict = classify_status(429, {"Retry-After": value}, now=NOW)
    assert verdict == Verdict("failure", "http-429", retry_after_ms=expected_ms, status=429)


def test_status_503_carries_retry_after():
    """On 503, Retry-After also becomes retry_after_ms."""
    verdict = classify_status(503, {"Retry-After": "7"})
    assert verdict.retry_after_ms == 7_000


@pytest.mark.parametrize("status", [500, 502, 504, 404, 200])
def test_retry_after_is_read_only_on_429_and_503(status):
    """Retry-After on any other status is not a request to back off, so it is not read."""
    assert classify_status(status, {"Retry-After": "7"}).retry_after_ms is None


@pytest.mark.parametrize("key", ["Retry-After", "retry-after", "RETRY-AFTER", "rEtRy-AfTeR"])
def test_retry_after_header_name_is_case_insensitive(key):
    """The Retry-After header is found whatever its capitalisation, even in a plain dict."""
    assert classify_status(429, {key: "3"}).retry_after_ms == 3_000


def test_retry_after_from_an_object_with_get():
    """Headers may be any object with .get, such as email.message.Message."""
    message = email.message.Message()
    message["RETRY-AFTER"] = "4"
    assert classify_status(429, message).retry_after_ms == 4_000  # type: ignore[arg-type]


def test_retry_after_ms_header_wins():
    """The retry-after-ms header (OpenAI, Anthropic) is preferred, in milliseconds."""
    headers = {"retry-after-ms": "250.5", "Retry-After": "9"}
    assert classify_status(429, headers).retry_after_ms == 251


def test_bad_retry_after_ms_falls_back_to_retry_after():
    """An unparseable retry-after-ms is skipped in favour of Retry-After."""
    headers = {"retry-after-ms": "soon", "Retry-After": "9"}
    assert classify_status(503, headers).retry_after_ms == 9_000


@pytest.mark.parametrize("value", ["soon", "-5", "", "Mon, 32 Jan 2024 00:00:00 GMT"])
def test_unparseable_retry_after_keeps_the_failure(value):
    """A garbage Retry-After still gives the failure, just without retry_after_ms."""
    assert classify_status(429, {"Retry-After": value}) == classify_status(429)


def test_retry_after_ms_with_too_many_digits_falls_back():
    """A retry-after-ms too long for int() is skipped, not raised."""
    headers = {"retry-after-ms": "9" * 5000, "Retry-After": "9"}
    assert classify_status(503, headers).retry_after_ms == 9_000


def test_headers_that_are_not_a_mapping_are_no_evidence():
    """Headers without .get that are not a Mapping (a list of pairs) carry no Retry-After."""
    headers = [("Retry-After", "3")]
    assert classify_status(429, headers) == classify_status(429)  # type: ignore[arg-type]


def test_mapping_whose_items_raise_is_no_evidence():
    """A Mapping that raises while being scanned is treated as having no Retry-After."""

    class Exploding(Mapping):
        def __getitem__(self, key):
            raise KeyError(key)

        def __iter__(self):
            raise RuntimeError("no iteration")

        def __len__(self):
            return 1

    assert classify_status(429, Exploding()) == classify_status(429)


def test_headers_whose_get_raises_are_no_evidence():
    """A header container that raises is treated as if it had no Retry-After."""

    class Broken:
        def get(self, key):
            raise RuntimeError(key)

    assert classify_status(429, Broken()) == classify_status(429)  # type: ignore[arg-type]


@given(st.integers())
def test_status_property_failure_iff_5xx_or_429(status):
    """classify_status never raises and fails exactly on status >= 500 or status == 429."""
    verdict = classify_status(status)
    assert (verdict.kind == "failure") == (status >= 500 or status == 429)
    assert verdict.status == status


@given(st.integers(), st.dictionaries(st.text(max_size=20), st.text(max_size=40)))
def test_status_property_never_raises_on_any_headers(status, headers):
    """classify_status never raises on arbitrary headers, and any wait it reads is >= 0."""
    verdict = classify_status(status, headers, now=NOW)
    assert verdict.retry_after_ms is None or verdict.retry_after_ms >= 0


# ---------------------------------------------------------------------------
# parse_retry_after


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120_000),
        ("  120 ", 120_000),
        ("0", 0),
        ("007", 7_000),
        ("1.5", 1_500),
        ("1.2341", 1_235),  # rounded up: never wait less than asked
        ("0.0001", 1),
        (b"120", 120_000),
        (120, 120_000),
        (0, 0),
        (2.5, 2_500),
    ],
)
def test_parse_retry_after_seconds(value, expected):
    """Delay-seconds, as text, bytes or a number, become milliseconds, rounded up."""
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "-5",
        "-0.5",
        -1,
        -0.5,
        "abc",
        "",
        "   ",
        "1e3",
        "+5",
        "1.",
        ".5",
        "1_000",
        "0x10",
        "\uff11\uff12",  # fullwidth digits
        "\u0661\u0662",  # Arabic-Indic digits
        "inf",
        float("inf"),
        float("nan"),
        1e308,
        True,
        None,
        b"\xff\xfe",
        ["120"],
        "9" * 5000,
        "Sun, 06 Nov 1994 08:49:37 GMT" + " " * 200,
    ],
)
def test_parse_retry_after_rejects(value):
    """Negative, malformed, non-ASCII, non-finite or oversized values give None."""
    assert parse_retry_after(value, now=NOW) is None


@pytest.mark.parametrize(
    "form",
    [
        "%a, %d %b %Y %H:%M:%S GMT",  # IMF-fixdate (RFC 9110)
        "%A, %d-%b-%y %H:%M:%S GMT",  # obsolete RFC 850
        "%a %b %d %H:%M:%S %Y",  # obsolete asctime
    ],
)
def test_parse_retry_after_http_date_forms(form):
    """The IMF-fixdate and the obsolete RFC 850 and asctime forms are all understood."""
    moment = datetime.fromtimestamp(NOW + 90, tz=timezone.utc)
    assert parse_retry_after(moment.strftime(form), now=NOW) == 90_000


def test_parse_retry_after_date_with_offset():
    """A date with a numeric zone offset is converted to UTC first."""
    # 12:00:00 +0200 is 10:00:00 UTC.
    now = datetime(2024, 5, 1, 9, 59, 0, tzinfo=timezone.utc).timestamp()
    assert parse_retry_after("Wed, 01 May 2024 12:00:00 +0200", now=now) == 60_000


@pytest.mark.parametrize("offset", [-1, -86_400 * 365, 0])
def test_parse_retry_after_past_date_is_zero(offset):
    """A date at or before now means: no need to wait, 0 ms."""
    assert parse_retry_after(http_date(offset), now=NOW) == 0


def test_parse_retry_after_date_rounds_up_against_a_fractional_now():
    """A date 10 s minus a fraction away waits until the date, rounded up to the ms."""
    assert parse_retry_after(http_date(10), now=NOW + 0.0004) == 10_000


def test_parse_retry_after_accepts_a_leap_second():
    """A leap second (:60) parses rather than being refused."""
    now = datetime(2016, 12, 31, 23, 59, 0, tzinfo=timezone.utc).timestamp()
    assert parse_retry_after("Sat, 31 Dec 2016 23:59:60 GMT", now=now) == 59_000


def test_parse_retry_after_defaults_to_the_wall_clock():
    """Without now, a date is measured from time.time(): far past is 0, far future is > 0."""
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT") == 0
    wait = parse_retry_after("Fri, 31 Dec 9998 23:59:59 GMT")
    assert wait is not None
    assert wait > 0


@given(st.one_of(st.text(max_size=64), st.binary(max_size=64), st.integers(), st.floats()))
def test_parse_retry_after_never_raises(value):
    """parse_retry_after never raises, and answers None or a non-negative int."""
    result = parse_retry_after(value, now=NOW)
    assert result is None or (type(result) is int and result >= 0)


# ---------------------------------------------------------------------------
# Exceptions carrying an HTTP status


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_exception_status_code_attribute_fails(status):
    """exc.status_code (openai/anthropic APIStatusError, fastapi) 5xx or 429 is a failure."""
    cls = fake("APIStatusError", "openai._exceptions")
    verdict = classify_exception(make(cls, status_code=status))
    assert verdict == Verdict("failure", f"http-{status}", status=status)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_exception_4xx_is_ignored(status):
    """A raised 4xx other than 429 is ignored, and keeps its status."""
    cls = fake("HTTPException", "fastapi.exceptions")
    verdict = classify_exception(make(cls, status_code=status))
    assert verdict == Verdict("ignored", f"http-{status}", status=status)


def test_exception_response_status_code_attribute():
    """exc.response.status_code (httpx HTTPStatusError, requests HTTPError) is read."""
    cls = fake("HTTPStatusError", "httpx")
    response = SimpleNamespace(status_code=502, headers={})
    assert classify_exception(make(cls, response=response)).detail == "http-502"


def test_exception_status_attribute():
    """exc.status (aiohttp ClientResponseError) is read, with exc.headers."""
    cls = fake("ClientResponseError", "aiohttp.client_exceptions")
    exc = make(cls, status=429, headers={"Retry-After": "2"})
    assert classify_exception(exc) == Verdict(
        "failure", "http-429", retry_after_ms=2_000, status=429
    )


def test_exception_retry_after_from_response_headers():
    """Retry-After is also found on exc.response.headers, with an HTTP-date measured from now."""
    cls = fake("RateLimitError", "openai._exceptions")
    response = SimpleNamespace(status_code=429, headers={"retry-after": http_date(45)})
    verdict = classify_exception(make(cls, status_code=429, response=response), now=NOW)
    assert verdict.retry_after_ms == 45_000


@pytest.mark.parametrize("value", [True, "503", 99, 600, 5.03e2, None])
def test_status_like_attributes_that_are_not_statuses_are_ignored(value):
    """Only an int in 100..599 counts as a status; bools, strings and floats do not."""
    cls = fake("Odd", "myapp.errors")
    exc = make(cls, status_code=value, status=value, code=value)
    assert classify_exception(exc).detail == "unknown-exception:Odd"


def test_raised_status_below_400_is_ignored_not_success():
    """A raised exception is never a success: a raised 301 or 200 is ignored."""
    cls = fake("HTTPStatusError", "httpx._exceptions")
    for status in (200, 301):
        verdict = classify_exception(make(cls, response=SimpleNamespace(status_code=status)))
        assert verdict == Verdict("ignored", f"http-{status}", status=status)


@pytest.mark.parametrize(
    ("code", "kind"), [(500, "failure"), (503, "failure"), (429, "failure"), (404, "ignored")]
)
def test_urllib_http_error(code, kind):
    """A real urllib.error.HTTPError is classified by its code."""
    verdict = classify_exception(url_http_error(code))
    assert (verdict.kind, verdict.status) == (kind, code)


def test_urllib_http_error_retry_after():
    """urllib.error.HTTPError's headers (an email Message) give retry_after_ms."""
    verdict = classify_exception(url_http_error(503, {"Retry-After": "7"}))
    assert verdict == Verdict("failure", "http-503", retry_after_ms=7_000, status=503)


def test_property_that_raises_is_no_evidence():
    """An attribute property that raises does not break classification."""

    class Flaky(Exception):
        @property
        def status_code(self):
            raise RuntimeError("not loaded")

    assert classify_exception(Flaky()).detail == "unknown-exception:Flaky"


# ---------------------------------------------------------------------------
# Timeouts

BUILTIN_TIMEOUTS = [
    TimeoutError(),
    asyncio.TimeoutError(),
    concurrent.futures.TimeoutError(),
    OSError(errno.ETIMEDOUT, "timed out"),  # the constructor makes it a TimeoutError
]

LIBRARY_TIMEOUTS = [
    ("httpx", "TimeoutException"),
    ("httpx", "ReadTimeout"),
    ("httpx._exceptions", "ConnectTimeout"),
    ("httpx._exceptions", "WriteTimeout"),
    ("httpx._exceptions", "PoolTimeout"),
    ("httpcore", "ReadTimeout"),
    ("requests.exceptions", "Timeout"),
    ("requests.exceptions", "ConnectTimeout"),
    ("requests.exceptions", "ReadTimeout"),
    ("urllib3.exceptions", "ReadTimeoutError"),
    ("aiohttp.client_exceptions", "ServerTimeoutError"),
    ("aiohttp.client_exceptions", "ConnectionTimeoutError"),
    ("aiohttp.client_exceptions", "SocketTimeoutError"),
    ("openai._exceptions", "APITimeoutError"),
    ("anthropic._exceptions", "APITimeoutError"),
    ("botocore.exceptions", "ConnectTimeoutError"),
    ("botocore.exceptions", "ReadTimeoutError"),
    ("subprocess", "TimeoutExpired"),
    ("trio", "TooSlowError"),
]


@pytest.mark.parametrize("exc", BUILTIN_TIMEOUTS, ids=lambda e: type(e).__qualname__)
def test_builtin_timeouts_fail(exc):
    """The standard library's timeouts are failures with detail timeout."""
    assert classify_exception(exc) == Verdict("failure", "timeout")


@pytest.mark.parametrize(("module", "name"), LIBRARY_TIMEOUTS, ids=lambda v: v)
def test_library_timeouts_fail(module, name):
    """Timeout classes of httpx, requests, urllib3, aiohttp, openai, anthropic, trio fail."""
    assert classify_exception(fake(name, module)()) == Verdict("failure", "timeout")


def test_user_subclass_of_a_library_timeout_is_a_timeout():
    """A class derived from a recognised library class is recognised through its MRO."""
    read_timeout = fake("ReadTimeout", "httpx")
    mine = fake("SearchTimedOut", "myapp.tools", read_timeout)
    assert classify_exception(mine()).detail == "timeout"


def test_requests_connect_timeout_is_a_timeout_not_a_network_error():
    """requests' ConnectTimeout is both a ConnectionError and a Timeout; its own name wins."""
    base = fake("RequestException", "requests.exceptions", OSError)
    connection = fake("ConnectionError", "requests.exceptions", base)
    timeout = fake("Timeout", "requests.exceptions", base)
    connect_timeout = fake("ConnectTimeout", "requests.exceptions", connection, timeout)
    assert classify_exception(connect_timeout()).detail == "timeout"


@pytest.mark.parametrize("module", ["myapp.errors", "httpx_extras", "builtins"])
def test_library_names_need_the_library_module(module):
    """A class named like a library's, in another module, is not recognised."""
    assert classify_exception(fake("ReadTimeout", module)()).kind == "ignored"


def test_asyncio_wait_for_timeout_is_a_timeout_not_a_cancellation():
    """asyncio raises TimeoutError from CancelledError: the outer timeout decides."""

    async def main():
        try:
            await asyncio.wait_for(asyncio.Event().wait(), timeout=0)
        except asyncio.TimeoutError as exc:
            return exc
        raise AssertionError("no timeout")

    exc = asyncio.run(main())
    assert isinstance(exc.__cause__ or exc.__context__, asyncio.CancelledError)
    assert classify_exception(exc) == Verdict("failure", "timeout")


# ---------------------------------------------------------------------------
# Network errors


@pytest.mark.parametrize(
    ("exc", "detail"),
    [
        (ConnectionRefusedError(), "network:ECONNREFUSED"),
        (ConnectionResetError(), "network:ECONNRESET"),
        (ConnectionAbortedError(), "network:ECONNABORTED"),
        (BrokenPipeError(), "network:EPIPE"),
        (ConnectionError(), "network:ConnectionError"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "network:ECONNREFUSED"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v,
)
def test_builtin_connection_errors_fail(exc, detail):
    """ConnectionError and its subclasses fail, named by errno even when made without one."""
    assert classify_exception(exc) == Verdict("failure", detail)


@pytest.mark.parametrize(
    "name", ["ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "EPIPE", "ECONNABORTED"]
)
def test_oserror_with_a_network_errno_fails(name):
    """An OSError carrying a network errno fails, named by the errno."""
    exc = OSError(getattr(errno, name), "boom")
    assert classify_exception(exc) == Verdict("failure", f"network:{name}")


def test_oserror_with_etimedout_errno_on_another_class_fails():
    """ETIMEDOUT set on an OSError subclass that is not TimeoutError still fails."""
    cls = fake("ClientOSError", "myapp.net", OSError)
    assert classify_exception(cls(errno.ETIMEDOUT, "x")).detail == "network:ETIMEDOUT"


@pytest.mark.parametrize("code", [errno.ENOENT, errno.EACCES, errno.EEXIST])
def test_oserror_with_another_errno_is_ignored(code):
    """A file-system OSError says nothing about a remote dependency."""
    exc = OSError(code, "nope")
    assert classify_exception(exc).detail == f"unknown-exception:{type(exc).__name__}"


@pytest.mark.parametrize("name", ["EAI_AGAIN", "EAI_NONAME"])
def test_dns_resolution_failures_fail(name):
    """socket.gaierror with EAI_AGAIN or EAI_NONAME (Node's ENOTFOUND) fails."""
    exc = socket.gaierror(getattr(socket, name), "resolution failed")
    assert classify_exception(exc) == Verdict("failure", f"network:{name}")


@pytest.mark.parametrize("name", ["EAI_SERVICE", "EAI_FAMILY"])
def test_other_gaierrors_are_ignored(name):
    """getaddrinfo errors about our own arguments (service, family) are not counted."""
    exc = socket.gaierror(getattr(socket, name), "bad arguments")
    assert classify_exception(exc).detail == "unknown-exception:gaierror"


@pytest.mark.parametrize(
    ("attribute", "value", "detail"),
    [
        ("code", "ECONNREFUSED", "network:ECONNREFUSED"),
        ("code", "ENOTFOUND", "network:ENOTFOUND"),
        ("code", "EAI_AGAIN", "network:EAI_AGAIN"),
        ("code", "econnreset", "network:ECONNRESET"),
        ("errno", "ETIMEDOUT", "network:ETIMEDOUT"),
    ],
)
def test_node_style_code_strings_fail(attribute, value, detail):
    """A Node-style error code string in exc.code or exc.errno fails."""
    exc = make(fake("FetchError", "myapp.fetch"), **{attribute: value})
    assert classify_exception(exc) == Verdict("failure", detail)


def test_other_code_strings_are_ignored():
    """An error code that is not a network code, like openai's, is no evidence."""
    exc = make(fake("BadRequest", "myapp.fetch"), code="rate_limit_exceeded")
    assert classify_exception(exc).kind == "ignored"


LIBRARY_NETWORK_ERRORS = [
    ("httpx", "ConnectError"),
    ("httpx", "NetworkError"),
    ("httpx._exceptions", "ReadError"),
    ("httpx._exceptions", "RemoteProtocolError"),
    ("httpcore", "ConnectError"),
    ("requests.exceptions", "ConnectionError"),
    ("urllib3.exceptions", "NewConnectionError"),
    ("aiohttp.client_exceptions", "ClientConnectionError"),
    ("aiohttp.client_exceptions", "ServerDisconnectedError"),
    ("openai._exceptions", "APIConnectionError"),
    ("anthropic._exceptions", "APIConnectionError"),
    ("botocore.exceptions", "EndpointConnectionError"),
]


@pytest.mark.parametrize(("module", "name"), LIBRARY_NETWORK_ERRORS, ids=lambda v: v)
def test_library_network_errors_fail(module, name):
    """Connection errors of httpx, requests, urllib3, aiohttp, openai, anthropic fail."""
    assert classify_exception(fake(name, module)()) == Verdict("failure", f"network:{name}")


def test_aiohttp_connector_error_is_named_by_its_errno():
    """aiohttp's ClientConnectorError (an OSError) is named by its errno when it has one."""
    connection = fake("ClientConnectionError", "aiohttp.client_exceptions")
    os_error = fake("ClientOSError", "aiohttp.client_exceptions", connection, OSError)
    connector = fake("ClientConnectorError", "aiohttp.client_exceptions", os_error)
    exc = connector(errno.ECONNREFUSED, "refused")
    assert classify_exception(exc) == Verdict("failure", "network:ECONNREFUSED")


@pytest.mark.parametrize(
    ("module", "name"),
    [("httpx", "LocalProtocolError"), ("httpx", "UnsupportedProtocol"), ("httpx", "InvalidURL")],
)
def test_library_errors_of_our_own_making_are_ignored(module, name):
    """httpx errors caused by our own request (bad URL, local protocol misuse) are ignored."""
    protocol = fake("ProtocolError", module)
    assert classify_exception(fake(name, module, protocol)()).kind == "ignored"


def test_urllib3_new_connection_error_is_network_despite_its_timeout_base():
    """urllib3's NewConnectionError subclasses ConnectTimeoutError; its own name wins."""
    connect_timeout = fake("ConnectTimeoutError", "urllib3.exceptions")
    new_connection = fake("NewConnectionError", "urllib3.exceptions", connect_timeout)
    assert classify_exception(new_connection()).detail == "network:NewConnectionError"


@pytest.mark.parametrize(
    ("reason", "detail"),
    [
        (ConnectionRefusedError(), "network:ECONNREFUSED"),
        (TimeoutError("timed out"), "timeout"),
        (socket.gaierror(socket.EAI_NONAME, "unknown host"), "network:EAI_NONAME"),
    ],
    ids=["refused", "timeout", "dns"],
)
def test_urllib_url_error_is_classified_by_its_reason(reason, detail):
    """urllib.error.URLError is judged by the exception in its .reason."""
    assert classify_exception(URLError(reason)).detail == detail


def test_urllib_url_error_with_a_text_reason_is_ignored():
    """A URLError whose reason is only text says nothing about the dependency."""
    assert classify_exception(URLError("unknown url type: foo")).kind == "ignored"


# ---------------------------------------------------------------------------
# Chains: __cause__, __context__, reason


class ToolError(Exception):
    """What a tool wrapper typically raises around the real error."""


def test_explicit_cause_is_followed():
    """A wrapper raised from a network error (raise ... from ...) is a network failure."""

    def search():
        try:
            raise ConnectionRefusedError
        except ConnectionRefusedError as exc:
            raise ToolError("search failed") from exc

    with pytest.raises(ToolError) as caught:
        search()
    assert classify_exception(caught.value).detail == "network:ECONNREFUSED"


def test_implicit_context_is_followed():
    """A wrapper raised while handling a timeout (implicit __context__) is a timeout."""

    def search():
        try:
            raise TimeoutError
        except TimeoutError:
            raise ToolError("search failed")  # noqa: B904 - the implicit context is the point

    with pytest.raises(ToolError) as caught:
        search()
    assert classify_exception(caught.value).detail == "timeout"


def test_context_hidden_by_from_none_is_still_followed():
    """raise ... from None hides the context from tracebacks, not from the classifier."""

    def search():
        try:
            raise ConnectionResetError
        except ConnectionResetError:
            raise ToolError("search failed") from None

    with pytest.raises(ToolError) as caught:
        search()
    assert caught.value.__suppress_context__
    assert classify_exception(caught.value).detail == "network:ECONNRESET"


def test_status_deep_in_a_chain_is_found():
    """An HTTP status three links down the cause chain is found, with its Retry-After."""
    status_error = make(fake("APIStatusError", "anthropic"), status_code=529)
    exc = chained(ToolError("a"), ValueError("b"), RuntimeError("c"), status_error)
    assert classify_exception(exc) == Verdict("failure", "http-529", status=529)


def test_outermost_decided_link_wins():
    """A 404 raised while handling a connection error is a 404: the outer link decides."""
    not_found = make(fake("HTTPStatusError", "httpx"), response=SimpleNamespace(status_code=404))
    exc = chained(not_found, ConnectionRefusedError(), attribute="__context__")
    assert classify_exception(exc).detail == "http-404"


def test_outer_timeout_beats_an_inner_status():
    """A retry that timed out after an earlier 404 is a timeout."""
    not_found = make(fake("HTTPStatusError", "httpx"), response=SimpleNamespace(status_code=404))
    exc = chained(TimeoutError(), not_found, attribute="__context__")
    assert classify_exception(exc).detail == "timeout"


def test_cause_is_looked_at_before_context():
    """When an exception has both, its __cause__ is judged before its __context__."""
    exc = ToolError("x")
    exc.__cause__ = TimeoutError()
    exc.__context__ = ConnectionRefusedError()
    assert classify_exception(exc).detail == "timeout"


def test_unknown_detail_names_the_raised_exception():
    """When nothing in the chain decides, the detail names the outermost class."""
    exc = chained(ToolError("a"), ValueError("b"), KeyError("c"))
    assert classify_exception(exc) == Verdict("ignored", "unknown-exception:ToolError")


def test_cycle_in_the_chain_terminates():
    """A cycle through __cause__ and __context__ is walked once and ends."""
    first, second = ToolError("a"), ValueError("b")
    first.__cause__ = second
    second.__context__ = first
    assert classify_exception(first).detail == "unknown-exception:ToolError"


def test_cycle_in_the_chain_still_finds_evidence():
    """Evidence inside a cyclic chain is still found."""
    first, second, third = ToolError("a"), ValueError("b"), ConnectionResetError()
    first.__context__ = second
    second.__context__ = first
    second.__cause__ = third
    assert classify_exception(first).detail == "network:ECONNRESET"


def test_self_cause_terminates():
    """An exception that is its own cause does not loop."""
    exc = ToolError("a")
    exc.__cause__ = exc
    assert classify_exception(exc).kind == "ignored"


def test_depth_cap_stops_the_walk():
    """Evidence deeper than the link cap is not reached; a shallower one is."""
    deep = [ToolError(str(i)) for i in range(40)]
    assert classify_exception(chained(*deep, TimeoutError())).kind == "ignored"
    assert classify_exception(chained(*deep[:10], TimeoutError())).detail == "timeout"


def test_urllib3_max_retry_reason_is_followed():
    """An exception's .reason (urllib3 MaxRetryError) is followed like a cause."""
    max_retry = fake("MaxRetryError", "urllib3.exceptions")
    exc = make(max_retry, reason=ConnectionRefusedError())
    assert classify_exception(exc).detail == "network:ECONNREFUSED"


# ---------------------------------------------------------------------------
# Cancellation


def trio_cancelled():
    """A trio.Cancelled made the only way trio allows: by cancelling."""
    trio = pytest.importorskip("trio")
    caught = []

    async def main():
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.sleep(0)
            except trio.Cancelled as exc:
                caught.append(exc)
                raise

    trio.run(main)
    return caught[0]


@pytest.mark.parametrize(
    "exc",
    [
        asyncio.CancelledError(),
        concurrent.futures.CancelledError(),
        KeyboardInterrupt(),
        SystemExit(1),
        GeneratorExit(),
        fake("Cancelled", "trio", BaseException)(),
        fake("Cancelled", "anyio._core", BaseException)(),
    ],
    ids=lambda e: f"{type(e).__module__}.{type(e).__name__}",
)
def test_cancellation_is_ignored(exc):
    """Cancellation and interpreter exits are ignored with detail cancelled."""
    assert classify_exception(exc) == Verdict("ignored", "cancelled")


def test_real_trio_cancelled_is_ignored():
    """A real trio.Cancelled is recognised by name and module."""
    assert classify_exception(trio_cancelled()).detail == "cancelled"


def test_cancellation_beats_a_status_on_the_same_exception():
    """Cancellation comes first: SystemExit(503) is not an HTTP 503."""
    assert classify_exception(SystemExit(503)).detail == "cancelled"


def test_cancellation_raised_while_handling_a_failure_is_cancelled():
    """A call cancelled while handling a connection error counts as cancelled."""
    exc = chained(asyncio.CancelledError(), ConnectionResetError(), attribute="__context__")
    assert classify_exception(exc).detail == "cancelled"


def test_wrapper_raised_from_a_cancellation_is_cancelled():
    """A wrapper raised from a cancellation is cancelled."""
    exc = chained(ToolError("x"), asyncio.CancelledError())
    assert classify_exception(exc).detail == "cancelled"


# ---------------------------------------------------------------------------
# Exception groups


def backport_group(*members):
    """An exceptiongroup-backport-like group."""
    cls = fake("BaseExceptionGroup", "exceptiongroup._exceptions", BaseException)
    return make(cls, "group", exceptions=tuple(members))


@pytest.fixture
def group():
    """The builtin BaseExceptionGroup (3.11+), or the backport lookalike."""
    builtin = getattr(builtins, "BaseExceptionGroup", None)
    if builtin is None:
        return backport_group
    return lambda *members: builtin("group", list(members))


def test_group_member_decides(group):
    """A group whose member is a network error is a network failure."""
    exc = group(ValueError("a"), ConnectionRefusedError())
    assert classify_exception(exc).detail == "network:ECONNREFUSED"


def test_backport_group_member_decides():
    """The exceptiongroup backport's groups are recognised too."""
    assert classify_exception(backport_group(TimeoutError())).detail == "timeout"


def test_cancelled_sibling_does_not_hide_the_failure(group):
    """Siblings cancelled because one member failed do not mask that failure."""
    exc = group(asyncio.CancelledError(), ConnectionResetError())
    assert classify_exception(exc).detail == "network:ECONNRESET"


def test_group_of_only_cancellations_is_cancelled(group):
    """A group whose members are all cancellations is cancelled."""
    exc = group(asyncio.CancelledError(), asyncio.CancelledError())
    assert classify_exception(exc).detail == "cancelled"


def test_group_without_evidence_is_unknown(group):
    """A group of unrecognised errors is ignored as an unknown exception."""
    exc = group(ValueError("a"), KeyError("b"))
    assert classify_exception(exc).detail.startswith("unknown-exception:")


# ---------------------------------------------------------------------------
# Validation and unknown exceptions


@pytest.mark.parametrize(
    "module",
    [
        "pydantic_core._pydantic_core",
        "pydantic.v1.error_wrappers",
        "jsonschema.exceptions",
        "marshmallow.exceptions",
    ],
)
def test_validation_errors_are_ignored(module):
    """ValidationError of pydantic (v1 and v2), jsonschema and marshmallow is ignored."""
    assert classify_exception(fake("ValidationError", module)()) == Verdict("ignored", "validation")


def test_real_pydantic_validation_error_is_ignored():
    """A real pydantic ValidationError is recognised."""
    pydantic = pytest.importorskip("pydantic")
    with pytest.raises(pydantic.ValidationError) as caught:
        pydantic.TypeAdapter(int).validate_python("not a number")
    assert classify_exception(caught.value) == Verdict("ignored", "validation")


def test_real_jsonschema_validation_error_is_ignored():
    """A real jsonschema ValidationError is recognised."""
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(1, {"type": "string"})
    assert classify_exception(caught.value) == Verdict("ignored", "validation")


def test_validation_is_outranked_by_network_evidence_on_the_same_link():
    """On one exception, network evidence comes before validation."""
    cls = fake("ValidationError", "pydantic_core._pydantic_core")
    assert classify_exception(make(cls, code="ECONNRESET")).detail == "network:ECONNRESET"


@pytest.mark.parametrize(
    "exc",
    [ValueError("bad"), TypeError("bad"), KeyError("k"), RuntimeError("x"), ToolError("x")],
    ids=lambda e: type(e).__name__,
)
def test_unknown_exceptions_are_ignored(exc):
    """When in doubt it does not count: an unknown exception is ignored, named by class."""
    expected = Verdict("ignored", f"unknown-exception:{type(exc).__name__}")
    assert classify_exception(exc) == expected


@pytest.mark.parametrize(
    "exc",
    [TimeoutError(), ConnectionRefusedError(), ValueError("x"), url_http_error(503)],
    ids=lambda e: type(e).__name__,
)
def test_default_classifier_is_classify_exception(exc):
    """default_classifier gives the same verdict as classify_exception."""
    assert default_classifier(exc) == classify_exception(exc)


def test_importing_the_classifier_imports_no_http_library():
    """The classifier recognises libraries by name and never imports them."""
    code = (
        "import sys, toolbreaker.runtime.breaker._classify; "
        "print([m for m in ('httpx', 'httpcore', 'requests', 'urllib3', 'aiohttp', 'openai', "
        "'anthropic', 'pydantic', 'jsonschema', 'trio', 'anyio') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "[]", done.stderr


# ---------------------------------------------------------------------------
# Real libraries, when installed (no dependency is added for them)


def test_real_requests_exceptions():
    """requests' real timeout, connection and HTTP errors are classified."""
    requests = pytest.importorskip("requests")
    exceptions = requests.exceptions
    assert classify_exception(exceptions.ConnectTimeout()).detail == "timeout"
    assert classify_exception(exceptions.ReadTimeout()).detail == "timeout"
    assert classify_exception(exceptions.ConnectionError()).detail == "network:ConnectionError"
    assert classify_exception(exceptions.SSLError()).kind == "failure"
    assert classify_exception(exceptions.InvalidURL("nope")).kind == "ignored"
    response = requests.Response()
    response.status_code = 429
    response.headers["Retry-After"] = "3"
    verdict = classify_exception(exceptions.HTTPError("slow down", response=response))
    assert verdict == Verdict("failure", "http-429", retry_after_ms=3_000, status=429)


def test_real_httpx_exceptions():
    """httpx's real timeout, connection and status errors are classified."""
    httpx = pytest.importorskip("httpx")
    request = httpx.Request("GET", "http://tool.invalid/")
    assert classify_exception(httpx.ReadTimeout("slow", request=request)).detail == "timeout"
    assert classify_exception(httpx.ConnectError("refused", request=request)).kind == "failure"
    response = httpx.Response(503, headers={"Retry-After": "2"}, request=request)
    exc = httpx.HTTPStatusError("down", request=request, response=response)
    assert classify_exception(exc) == Verdict(
        "failure", "http-503", retry_after_ms=2_000, status=503
    )
    response = httpx.Response(404, request=request)
    exc = httpx.HTTPStatusError("missing", request=request, response=response)
    assert classify_exception(exc).kind == "ignored"


def test_real_aiohttp_exceptions():
    """aiohttp's real timeout and connection errors are classified."""
    aiohttp = pytest.importorskip("aiohttp")
    assert classify_exception(aiohttp.ServerTimeoutError()).detail == "timeout"
    assert classify_exception(aiohttp.ServerDisconnectedError()).kind == "failure"
    assert classify_exception(aiohttp.ClientConnectionError()).kind == "failure"


def test_the_exception_chain_walk_finds_the_first_of_a_kind_and_ends():
    """found_in_chain (the one walk the write rule and the run guard share) follows each
    link's cause, else its context; it ends at a cycle and after 32 links."""
    from toolbreaker.runtime.breaker._commit import found_in_chain

    inner = KeyError("inner")
    try:
        try:
            raise inner
        except KeyError as exc:
            raise ValueError("middle") from exc
    except ValueError as exc:
        outer = RuntimeError("outer")
        outer.__context__ = exc
    assert found_in_chain(outer, KeyError) is inner
    assert found_in_chain(outer, RuntimeError) is outer
    assert found_in_chain(outer, TypeError) is None
    looped = ValueError("a")
    other = ValueError("b")
    looped.__cause__, other.__cause__ = other, looped
    assert found_in_chain(looped, KeyError) is None
    deep: BaseException = KeyError("deep")
    for n in range(40):
        link = ValueError(n)
        link.__cause__ = deep
        deep = link
    assert found_in_chain(deep, KeyError) is None  # 41 links away: past the bound
