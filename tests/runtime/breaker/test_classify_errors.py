"""The outcome classifier's exceptions: HTTP statuses they carry, timeouts, network errors.

Third-party exceptions are mimicked by fake classes that carry the library's class name
and module (the classifier recognises them by name, never by import).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import socket
from types import SimpleNamespace
from urllib.error import URLError

import pytest
from classify_helpers import NOW, fake, http_date, make, url_http_error

from toolbreaker.runtime._breaker._classify import Verdict, classify_exception

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


def test_a_timeout_class_stamped_408_is_a_timeout():
    """LiteLLM's Timeout (an openai APITimeoutError) carries status_code 408: still a timeout."""
    api_timeout = fake("APITimeoutError", "openai._exceptions")
    litellm_timeout = fake("Timeout", "litellm.exceptions", api_timeout)
    assert classify_exception(make(litellm_timeout, status_code=408)) == Verdict(
        "failure", "timeout"
    )


def test_a_408_without_a_timeout_class_is_ignored():
    """A 408 answered by a server (any other class) stays an ignored 4xx."""
    cls = fake("HTTPStatusError", "httpx")
    assert classify_exception(make(cls, status_code=408)) == Verdict(
        "ignored", "http-408", status=408
    )


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
