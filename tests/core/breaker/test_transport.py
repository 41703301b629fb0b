"""The server's transport breaker hears only evidence that the server itself is gone."""

from __future__ import annotations

from typing import get_args

import pytest

from toolbreaker.core._breaker.transport import (
    CallEnd,
    CheckEnd,
    needs_liveness_check,
    transport_outcome,
)


@pytest.mark.parametrize(
    ("call", "outcome"),
    [("answered", "success"), ("closed", "failure"), ("other", "ignored")],
)
def test_a_call_that_answered_or_lost_its_connection_speaks_for_itself(call, outcome):
    """Any answer is a success, a closed connection a failure, anything else (a
    cancellation) nothing; none of them asks the server again."""
    assert needs_liveness_check(call) is False
    assert transport_outcome(call) == outcome
    for check in get_args(CheckEnd):  # a check made anyway changes nothing
        assert transport_outcome(call, check) == outcome


def test_a_timed_out_call_alone_never_counts_against_the_server():
    """One tool's deadline is no proof the server is gone: a timeout needs a liveness
    check, and without one it is ignored."""
    assert needs_liveness_check("timeout") is True
    assert transport_outcome("timeout") == "ignored"


@pytest.mark.parametrize(
    ("check", "outcome"),
    [("answered", "success"), ("timeout", "failure"), ("closed", "failure"), ("other", "ignored")],
)
def test_the_liveness_check_after_a_timeout_decides(check, outcome):
    """A server that answers the check is alive (a success, whatever the slow tool does);
    one that answers nothing in time, or whose connection closed, is gone; a check that
    ended some other way proves nothing."""
    assert transport_outcome("timeout", check) == outcome


def test_only_a_timeout_asks_for_a_check():
    """The shells ping only after a timeout: every other end is judged as it is."""
    assert [end for end in get_args(CallEnd) if needs_liveness_check(end)] == ["timeout"]
