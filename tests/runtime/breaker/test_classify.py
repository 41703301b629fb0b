"""The outcome classifier's walk: chains, cancellation, exception groups, what never counts.

Statuses and Retry-After are in ``test_classify_status.py``; timeouts, network errors and
exceptions carrying a status in ``test_classify_errors.py``. Third-party exceptions are
mimicked by fake classes that carry the library's class name and module (the classifier
recognises them by name, never by import); where a library happens to be installed, one
test also feeds its real class.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import subprocess
import sys
from types import SimpleNamespace

import pytest
from classify_helpers import chained, fake, make, url_http_error

from toolbreaker.runtime._breaker._classify import Verdict, classify_exception, default_classifier

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
        "import sys, toolbreaker.runtime._breaker._classify; "
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
    from toolbreaker.runtime._breaker._commit import found_in_chain

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
