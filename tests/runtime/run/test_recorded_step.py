"""A recorded step's error class is one the classifier gives, reproduced exactly."""

from __future__ import annotations

import pytest

from toolbreaker.errors import ToolReportedError
from toolbreaker.runtime._breaker._classify import classify_exception
from toolbreaker.runtime._breaker._commit import may_have_committed
from toolbreaker.runtime._run._recorded_step import (
    RecordedStep,
    error_exception,
    parse_step,
    raised_for,
)

CLASSES = [
    ("timeout", "failure", True),
    ("network:ECONNREFUSED", "failure", False),
    ("network:ECONNRESET", "failure", True),
    ("network:ETIMEDOUT", "failure", True),  # an OSError of it would be a TimeoutError
    ("network:EPIPE", "failure", True),
    ("network:ENOTFOUND", "failure", False),
    ("network:EAI_AGAIN", "failure", False),
    ("network:ConnectError", "failure", False),
    ("network:RemoteProtocolError", "failure", True),
    ("http-503", "failure", False),
    ("http-429", "failure", False),
    ("http-502", "failure", True),
    ("http-404", "ignored", False),
    ("http-422", "ignored", False),
    ("validation", "ignored", False),
    ("unknown-exception:ValueError", "ignored", False),
    ("unknown-exception:KeyError", "ignored", True),
    ("unknown-exception:ToolReportedError", "ignored", False),
    ("unknown-exception:UnicodeDecodeError", "ignored", True),  # needs arguments: a stand-in
    ("unknown-exception:PaymentDeclined", "ignored", True),
]


@pytest.mark.parametrize(("error", "kind", "committed"), CLASSES)
def test_an_error_class_replays_as_an_exception_the_classifier_reads_so(error, kind, committed):
    """The exception a recorded tool raises for ``error`` is read as exactly that class,
    of the kind the classifier gives it, and may have committed a write exactly when a
    live one of that class may have."""
    exc = error_exception(error)
    verdict = classify_exception(exc)
    assert (verdict.detail, verdict.kind) == (error, kind)
    assert may_have_committed(exc, verdict) is committed


@pytest.mark.parametrize(
    "error",
    ["", "network:", "http-99", "http-abc", "quota", "unknown-exception:a.b", "timeout:x"],
)
def test_a_class_of_no_known_form_is_refused(error):
    """Anything but the classifier's forms is refused, naming them."""
    with pytest.raises(ValueError, match="error must be one of timeout, network:<CODE>"):
        error_exception(error)


def test_a_builtin_the_classifier_reads_otherwise_is_refused():
    """``unknown-exception:ConnectionResetError`` is a network failure to the classifier:
    the step names what it says instead."""
    with pytest.raises(ValueError, match=r"ConnectionResetError: network:ECONNRESET"):
        error_exception("unknown-exception:ConnectionResetError")


def test_without_a_class_the_outcomes_raise_what_they_always_did():
    """An old file's failure is a refused connection, its unknown a timeout and its
    ignored a ValueError: the same classes as before the field existed."""
    assert classify_exception(raised_for("failure")).detail == "network:ECONNREFUSED"
    assert classify_exception(raised_for("unknown")).detail == "timeout"
    assert classify_exception(raised_for("ignored")).detail == "unknown-exception:ValueError"
    assert raised_for("success") is None


def test_a_result_that_reports_a_failure_returns_for_a_read_and_refuses_for_a_write():
    """A read that answered with an error returned it; a write that did made nothing,
    which is the tool's own refusal (as the adapters settle such an answer)."""
    assert raised_for("success", result_error="exit-1") is None
    refused = raised_for("success", result_error="tool-error", risk="reversible_write")
    assert isinstance(refused, ToolReportedError)
    verdict = classify_exception(refused)
    assert verdict.kind == "ignored"
    assert not may_have_committed(refused, verdict)


def test_a_line_with_every_new_field_parses_to_its_step():
    """The new fields land on the step as written."""
    call = parse_step(
        {
            "at": 3,
            "tool": "bash",
            "args": {"command": "sed -i s/a/b/ f.py"},
            "result": {"returncode": 1, "output": ""},
            "result_error": "exit-1",
            "changes_state": True,
        },
        after=2,
    )
    assert (call.result_error, call.changes_state, call.error) == ("exit-1", True, None)
    model = parse_step({"at": 4, "model": "m", "input_tokens": 10, "output_tokens": 2})
    assert model == RecordedStep(at=4, cost="0", model="m", input_tokens=10, output_tokens=2)
    assert model.usage
    assert not parse_step({"at": 5, "cost": "0.1"}).usage


def test_time_going_backwards_is_refused():
    """A step before the one it follows is refused with both times."""
    with pytest.raises(ValueError, match="time went backwards: 1 after 2"):
        parse_step({"at": 1, "tool": "t"}, after=2)
