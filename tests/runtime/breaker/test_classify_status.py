"""The outcome classifier's statuses: Verdict, HTTP statuses and Retry-After.

What a status (and its Retry-After) counts for against a dependency, and what never does.
"""

from __future__ import annotations

import email.message
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import get_args

import pytest
from classify_helpers import NOW, http_date
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._breaker.state import OUTCOME_TYPES
from toolbreaker.runtime._breaker._classify import (
    SUCCESS,
    Kind,
    Verdict,
    classify_status,
    parse_retry_after,
)

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
