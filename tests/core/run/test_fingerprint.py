"""Semantic fingerprints and idempotency keys: equivalent intentions collide, others don't."""

from __future__ import annotations

import datetime
import decimal
import os
import re
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._canonical import canonical_json, sha256_hex
from toolbreaker.core._run.fingerprint import (
    DEFAULT_PROSE,
    DEFAULT_VOLATILE,
    BusinessKeyError,
    FingerprintError,
    FingerprintRules,
    UnsupportedTypeError,
    action_keys,
    business_key_of,
    canonical_action,
    evidence,
    fingerprint,
    idempotency_key,
    write_key,
)
from toolbreaker.errors import ToolbreakerError

RENEWAL: dict[str, Any] = {
    "recipient": "customer-1842",
    "template": "renewal_notice",
    "business_key": "renewal-2026-08",
    "subject": "Renewal Notice",
    "amount": 120,
}


def with_changes(**changes: Any) -> dict[str, Any]:
    return {**RENEWAL, **changes}


# --- equivalent intentions collide ----------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(RENEWAL, dict(reversed(list(RENEWAL.items()))), id="keys-reordered"),
        pytest.param(
            with_changes(reason="The customer's plan expires soon."),
            with_changes(reason="Sending the renewal reminder as requested."),
            id="reason-reworded",
        ),
        pytest.param(RENEWAL, with_changes(rationale="because"), id="prose-added"),
        pytest.param(
            with_changes(timestamp="2026-08-01T10:00:00Z"),
            with_changes(timestamp="2026-08-01T10:00:07Z"),
            id="fresh-timestamp",
        ),
        pytest.param(RENEWAL, with_changes(requestId="req-1"), id="request-id-added"),
        pytest.param(
            with_changes(subject="  Renewal   Notice "),
            with_changes(subject="renewal notice"),
            id="case-and-whitespace",
        ),
        pytest.param(
            with_changes(subject="Renewal\tNotice\n"),
            with_changes(subject="renewal notice"),
            id="tabs-and-newlines",
        ),
        pytest.param(
            with_changes(subject="\uff32\uff25\uff2e\uff25\uff37\uff21\uff2c notice"),
            with_changes(subject="renewal notice"),
            id="fullwidth-nfkc",
        ),
        pytest.param(with_changes(amount=1), with_changes(amount=1.0), id="int-float"),
        pytest.param(with_changes(amount=1), with_changes(amount=Decimal("1.0")), id="int-decimal"),
        pytest.param(
            with_changes(amount=12.5), with_changes(amount=Decimal("12.50")), id="float-decimal"
        ),
        pytest.param(with_changes(amount=0.1), with_changes(amount=Decimal("0.1")), id="float-0.1"),
        pytest.param(with_changes(amount=-0.0), with_changes(amount=0), id="negative-zero"),
        pytest.param(
            with_changes(tags=("a", "b")), with_changes(tags=["a", "b"]), id="tuple-is-list"
        ),
        pytest.param(
            with_changes(meta={"trace_id": "t-1", "channel": "email"}),
            with_changes(meta={"channel": "EMAIL", "Trace-ID": "t-2"}),
            id="nested-volatile-and-case",
        ),
        pytest.param(
            with_changes(lines=[{"sku": "a", "note": "x"}]),
            with_changes(lines=[{"sku": "A", "note": "y"}]),
            id="prose-inside-list",
        ),
    ],
)
def test_equivalent_intentions_collide(first: dict[str, Any], second: dict[str, Any]) -> None:
    """Rephrasing the same action (order, prose, noise, case, number type) keeps its fingerprint."""
    assert fingerprint("send_email", first) == fingerprint("send_email", second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(RENEWAL, with_changes(recipient="customer-1843"), id="other-recipient"),
        pytest.param(RENEWAL, with_changes(business_key="renewal-2026-09"), id="other-period"),
        pytest.param(with_changes(amount=120), with_changes(amount=121), id="other-amount"),
        pytest.param(with_changes(amount=12.5), with_changes(amount=12.51), id="other-cents"),
        pytest.param(with_changes(flag=True), with_changes(flag=1), id="true-vs-1"),
        pytest.param(with_changes(flag=False), with_changes(flag=0), id="false-vs-0"),
        pytest.param(with_changes(amount="1"), with_changes(amount=1), id="string-vs-int"),
        pytest.param(with_changes(amount="1.5"), with_changes(amount=1.5), id="string-vs-decimal"),
        pytest.param(with_changes(cc=None), with_changes(cc=""), id="none-vs-empty"),
        pytest.param(RENEWAL, with_changes(cc=None), id="none-vs-absent"),
        pytest.param(with_changes(ids=[1, 2]), with_changes(ids=[2, 1]), id="list-order"),
        pytest.param(
            with_changes(subject="renewal notice"),
            with_changes(subject="renewalnotice"),
            id="words-joined",
        ),
        pytest.param(with_changes(time="10:00"), with_changes(time="11:00"), id="time-is-business"),
        pytest.param(with_changes(ts="1.1"), with_changes(ts="1.2"), id="slack-ts-is-business"),
    ],
)
def test_different_actions_do_not_collide(first: dict[str, Any], second: dict[str, Any]) -> None:
    """A different recipient, period, amount, type or order is a different action."""
    assert fingerprint("send_email", first) != fingerprint("send_email", second)


def test_tool_name_is_trimmed_and_case_folded() -> None:
    """`` Send_Email `` and ``send_email`` are one tool."""
    assert fingerprint(" Send_Email ", RENEWAL) == fingerprint("send_email", RENEWAL)


def test_different_tools_do_not_collide() -> None:
    """The same arguments sent to another tool are another action."""
    assert fingerprint("send_email", RENEWAL) != fingerprint("send_sms", RENEWAL)


# --- canonical form ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "canonical"),
    [
        (1, 1),
        (1.0, 1),
        (Decimal("1.000"), 1),
        (Decimal("0.1E1"), 1),
        (Decimal("1E+3"), 1000),
        (-0.0, 0),
        (Decimal("-0E-5"), 0),
        (-7, -7),
        (1.5, {"$decimal": "1.5"}),
        (Decimal("-0.0250"), {"$decimal": "-0.025"}),
        (0.1, {"$decimal": "0.1"}),
        (1e300, 10**300),
        (10**640 - 1, 10**640 - 1),
        (10**640, {"$decimal": "1e640"}),
        (Decimal("1E+640"), {"$decimal": "1e640"}),
        (Decimal("1E-64"), {"$decimal": "0." + "0" * 63 + "1"}),
        (Decimal("15E-66"), {"$decimal": "15e-66"}),
    ],
)
def test_numbers_have_one_canonical_form(number: Any, canonical: Any) -> None:
    """Integral values become ints; others an exact tagged decimal; huge ones use an exponent."""
    assert canonical_action("t", {"n": number})["args"]["n"] == canonical


def test_numbers_ignore_the_decimal_context() -> None:
    """A low precision in the thread's decimal context changes nothing."""
    value = Decimal("1.00000000000000000000000000000000001")
    expected = fingerprint("t", {"n": value})
    with decimal.localcontext() as context:
        context.prec = 3
        assert fingerprint("t", {"n": value}) == expected
    assert expected != fingerprint("t", {"n": 1})


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("  Renewal Notice ", "renewal notice"),
        ("a\t\n b", "a b"),
        ("ﬁle", "file"),
        ("Straße", "strasse"),
        ("", ""),
        ("   ", ""),
    ],
)
def test_strings_are_normalised(text: str, canonical: str) -> None:
    """Strings are NFKC-normalised, case-folded, trimmed and whitespace-collapsed."""
    assert canonical_action("t", {"s": text})["args"]["s"] == canonical


def test_canonical_form_is_sorted_json_data() -> None:
    """The canonical form sorts keys, keeps None and list order, and is plain JSON data."""
    action = canonical_action(
        "Send_Email", {"b": [3, 1, None], "a": {"z": 1, "y": (True,)}, "reason": "x"}
    )
    assert action == {"tool": "send_email", "args": {"a": {"y": [True], "z": 1}, "b": [3, 1, None]}}
    assert list(action["args"]) == ["a", "b"]
    assert canonical_json(action)  # no floats, nothing unserialisable


def test_fingerprint_is_the_digest_of_the_canonical_form() -> None:
    """``fingerprint`` is ``sha256_hex`` of ``canonical_action``: anyone can recompute it."""
    assert fingerprint("send_email", RENEWAL) == sha256_hex(canonical_action("send_email", RENEWAL))


def test_fingerprint_is_pinned() -> None:
    """The canonical bytes and digest of a fixed action never change (processes, versions)."""
    assert canonical_json(canonical_action("send_email", RENEWAL)) == (
        b'{"args":{"amount":120,"business_key":"renewal-2026-08","recipient":"customer-1842",'
        b'"subject":"renewal notice","template":"renewal_notice"},"tool":"send_email"}'
    )
    assert (
        fingerprint("send_email", RENEWAL)
        == "13eb20c78061ee7e5b63f13da6ee2ed1e05c95e0aaf13f44d56a3777e352902f"
    )


def test_keys_are_kept_verbatim() -> None:
    """Keys are not case-folded: they come from the tool's schema, not from prose."""
    assert fingerprint("t", {"ID": 1}) != fingerprint("t", {"id": 1})


# --- rules -----------------------------------------------------------------------------


def test_default_rules_are_the_documented_sets() -> None:
    """``FingerprintRules()`` and ``default()`` hold the default volatile and prose names."""
    assert FingerprintRules.default() == FingerprintRules()
    assert FingerprintRules().volatile == DEFAULT_VOLATILE
    assert FingerprintRules().prose == DEFAULT_PROSE


@pytest.mark.parametrize("name", ["request_id", "requestId", "Request-ID", "REQUESTID"])
def test_rule_names_match_any_spelling(name: str) -> None:
    """Field names compare case-insensitively and ignoring ``_`` and ``-``."""
    assert FingerprintRules().ignores(name)


def test_extend_adds_names_in_any_spelling() -> None:
    """``extend`` returns new rules that also drop the given fields; the original is unchanged."""
    rules = FingerprintRules.default().extend(volatile=["Attempt-No"], prose=["agentNote"])
    assert rules.ignores("attempt_no")
    assert rules.ignores("AGENT_NOTE")
    assert not FingerprintRules().ignores("attempt_no")
    assert fingerprint("t", {"a": 1, "attemptNo": 2}, rules=rules) == fingerprint(
        "t", {"a": 1}, rules=rules
    )


def test_without_keeps_a_field_that_is_the_payload() -> None:
    """``without("comment")`` makes two different comments two different actions."""
    rules = FingerprintRules().without("comment")
    assert fingerprint("add_comment", {"comment": "a"}, rules) != fingerprint(
        "add_comment", {"comment": "b"}, rules
    )
    assert fingerprint("add_comment", {"comment": "a"}) == fingerprint(
        "add_comment", {"comment": "b"}
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda: FingerprintRules(volatile="nonce"),  # type: ignore[arg-type]
        lambda: FingerprintRules().extend(prose="reason"),
        lambda: FingerprintRules(prose=frozenset({1})),  # type: ignore[arg-type]
    ],
)
def test_rules_refuse_a_bare_string_or_non_strings(call: Any) -> None:
    """A string where a collection of names is expected is an error, not its characters."""
    with pytest.raises(TypeError):
        call()


def test_ignored_fields_are_never_inspected() -> None:
    """A volatile field may hold anything, even values with no canonical form."""
    assert fingerprint("t", {"a": 1, "nonce": float("nan"), "note": {1, 2}}) == fingerprint(
        "t", {"a": 1}
    )


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), float("-inf"), Decimal("NaN"), Decimal("sNaN"), Decimal("-Inf")],
)
def test_non_finite_numbers_are_refused(value: Any) -> None:
    """NaN and infinities raise a ValueError naming their path."""
    with pytest.raises(ValueError, match=r"args\.amounts\[1\]") as caught:
        fingerprint("t", {"amounts": [1, value]})
    assert isinstance(caught.value, FingerprintError)
    assert caught.value.path == "args.amounts[1]"


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"items": [1, 2, {3}]}, "args.items[2]"),
        ({"blob": b"x"}, "args.blob"),
        ({"when": object()}, "args.when"),
        ({"odd key": [1j]}, 'args["odd key"][0]'),
        ({"m": {1: "a"}}, "args.m[1]"),
    ],
)
def test_unsupported_types_name_their_path(args: dict[str, Any], path: str) -> None:
    """A value or key with no canonical form raises a TypeError naming where it is."""
    with pytest.raises(TypeError, match=re.escape(path)) as caught:
        canonical_action("t", args)
    assert isinstance(caught.value, UnsupportedTypeError)
    assert caught.value.path == path


def test_a_cycle_is_an_error() -> None:
    """A container that contains itself raises instead of recursing forever."""
    args: dict[str, Any] = {"a": []}
    args["a"].append(args)
    with pytest.raises(FingerprintError, match="contains itself"):
        fingerprint("t", args)


def test_shared_values_are_not_cycles() -> None:
    """The same list referenced twice is fine: only a container inside itself is a cycle."""
    shared = [1, 2]
    assert fingerprint("t", {"a": shared, "b": shared}) == fingerprint(
        "t", {"a": [1, 2], "b": [1, 2]}
    )


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        ("   ", {}, FingerprintError),
        (3, {}, TypeError),
        ("t", [("a", 1)], TypeError),
    ],
)
def test_bad_tool_or_args_are_refused(tool: Any, args: Any, error: type[Exception]) -> None:
    """A blank or non-string tool name, or arguments that are not a mapping, raise."""
    with pytest.raises(error):
        fingerprint(tool, args)


def test_errors_belong_to_the_library_tree() -> None:
    """Every fingerprint error is a ToolbreakerError; the key error is also a KeyError."""
    assert issubclass(FingerprintError, ToolbreakerError)
    assert issubclass(UnsupportedTypeError, TypeError)
    assert issubclass(BusinessKeyError, KeyError)
    assert issubclass(BusinessKeyError, ValueError)


# --- business keys and idempotency keys --------------------------------------------------


def test_business_key_picks_declared_fields() -> None:
    """Declared fields, dotted paths and list indexes are picked, values as found."""
    args = {"recipient": {"id": "c-1842"}, "period": "2026-08", "lines": [{"sku": "x"}]}
    assert business_key_of(args, ["recipient.id", "period", "lines.0.sku"]) == {
        "recipient.id": "c-1842",
        "period": "2026-08",
        "lines.0.sku": "x",
    }


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"period": "2026-08"}, "recipient.id"),
        ({"recipient": {}}, "recipient.id"),
        ({"recipient": "c-1"}, "recipient.id"),
        ({"lines": []}, "lines.0"),
        ({"recipient": None}, "recipient"),
        ({"recipient": "   "}, "recipient"),
        ({"recipient": {}}, "recipient"),
    ],
)
def test_missing_or_empty_business_field_is_an_error(args: dict[str, Any], field: str) -> None:
    """A missing, None, blank or empty declared field raises, naming it: never an empty key."""
    with pytest.raises(KeyError) as caught:
        business_key_of(args, [field])
    assert isinstance(caught.value, BusinessKeyError)
    assert caught.value.field == field
    assert repr(field) in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ([], FingerprintError),
        ("recipient", TypeError),
        ([1], TypeError),
        (["a..b"], FingerprintError),
    ],
)
def test_bad_field_declarations_are_refused(fields: Any, error: type[Exception]) -> None:
    """No fields, a bare string, a non-string or a malformed dotted path is a declaration error."""
    with pytest.raises(error):
        business_key_of({"a": {"b": 1}}, fields)


def test_idempotency_key_format() -> None:
    """The key is ``tb1-`` and 32 lower-case hex digits: safe in URLs and headers."""
    key = idempotency_key("send_email", {"recipient": "c-1842", "period": "2026-08"})
    assert re.fullmatch(r"tb1-[0-9a-f]{32}", key)


def test_idempotency_key_is_pinned() -> None:
    """The derivation never changes within ``tb1``: a resumed run must send the same key."""
    key = idempotency_key("send_email", {"recipient": "customer-1842", "period": "2026-08"})
    assert key == "tb1-8e577377f660e5827cb214c19282dfc1"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"r": "c-1", "p": "2026-08"}, {"p": "2026-08", "r": "c-1"}),
        ({"r": " C-1 ", "amount": 1}, {"r": "c-1", "amount": 1.0}),
    ],
)
def test_equivalent_business_keys_share_a_key(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Reordered or rephrased business keys give the same idempotency key."""
    assert idempotency_key("pay", first) == idempotency_key("pay", second)


@pytest.mark.parametrize(
    ("tool", "key", "scope"),
    [
        ("pay", {"r": "c-2"}, ""),
        ("refund", {"r": "c-1"}, ""),
        ("pay", {"r": "c-1"}, "tenant-b"),
        ("pay", {"r": "c-1", "request_id": "x"}, ""),
    ],
)
def test_different_business_actions_get_different_keys(
    tool: str, key: dict[str, Any], scope: str
) -> None:
    """Another tool, key value, scope or field changes the key; no field is stripped."""
    assert idempotency_key(tool, key, scope=scope) != idempotency_key("pay", {"r": "c-1"})


def test_idempotency_key_ignores_the_run_unless_scoped() -> None:
    """Keys come from the business key only, so a retry in another run sends the same key."""
    args_run_1 = {"recipient": "c-1", "period": "2026-08", "run_id": "run-1"}
    args_run_2 = {"recipient": "c-1", "period": "2026-08", "run_id": "run-2"}
    fields = ["recipient", "period"]
    assert idempotency_key("send_email", business_key_of(args_run_1, fields)) == idempotency_key(
        "send_email", business_key_of(args_run_2, fields)
    )


@pytest.mark.parametrize(
    ("key", "scope", "error"),
    [({}, "", FingerprintError), ({"a": {1}}, "", TypeError), ({"a": 1}, 7, TypeError)],
)
def test_idempotency_key_refuses_bad_input(key: Any, scope: Any, error: type[Exception]) -> None:
    """An empty key, a value with no canonical form, or a non-string scope raises."""
    with pytest.raises(error):
        idempotency_key("pay", key, scope=scope)


# --- properties ------------------------------------------------------------------------

_KEYS = st.text(alphabet="abcdefgh", min_size=1, max_size=6).filter(
    lambda k: not FingerprintRules().ignores(k)
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_KEYS, inner, max_size=3)
    ),
    max_leaves=10,
)
_ARGS = st.dictionaries(_KEYS, _VALUES, max_size=4)
_ANYTHING = _VALUES | st.floats() | st.builds(object) | st.sets(st.integers(), max_size=2)


def _respelled(name: str, data: st.DataObject) -> str:
    """``name`` with random case and random ``_``/``-`` separators inserted."""
    out = []
    for char in name:
        out.append(char.upper() if data.draw(st.booleans()) else char)
        out.append(data.draw(st.sampled_from(["", "", "_", "-"])))
    return "".join(out)


def _reordered(value: Any, data: st.DataObject) -> Any:
    if isinstance(value, dict):
        keys = data.draw(st.permutations(list(value)))
        return {key: _reordered(value[key], data) for key in keys}
    if isinstance(value, list):
        return [_reordered(item, data) for item in value]
    return value


@given(args=_ARGS, data=st.data())
def test_property_key_order_does_not_matter(args: dict[str, Any], data: st.DataObject) -> None:
    """Reordering keys at every depth never changes the fingerprint."""
    assert fingerprint("t", _reordered(args, data)) == fingerprint("t", args)


@given(args=_ARGS, value=_ANYTHING, data=st.data())
def test_property_ignored_fields_do_not_matter(
    args: dict[str, Any], value: Any, data: st.DataObject
) -> None:
    """Adding any volatile or prose field, spelled any way, with any value changes nothing."""
    name = _respelled(data.draw(st.sampled_from(sorted(DEFAULT_VOLATILE | DEFAULT_PROSE))), data)
    assert fingerprint("t", {**args, name: value}) == fingerprint("t", args)


@given(args=_ARGS, value=_ANYTHING, data=st.data())
def test_property_ignored_fields_do_not_matter_when_nested(
    args: dict[str, Any], value: Any, data: st.DataObject
) -> None:
    """The same holds inside a nested object."""
    name = _respelled(data.draw(st.sampled_from(sorted(DEFAULT_VOLATILE | DEFAULT_PROSE))), data)
    assert fingerprint("t", {"inner": {**args, name: value}}) == fingerprint("t", {"inner": args})


@given(tool=st.text(min_size=1, max_size=12).filter(str.strip), args=_ARGS)
def test_property_canonical_form_is_a_fixed_point(tool: str, args: dict[str, Any]) -> None:
    """Canonicalising an already canonical action gives the same form and fingerprint."""
    canonical = canonical_action(tool, args)
    again = canonical_action(canonical["tool"], canonical["args"])
    assert again == canonical
    assert fingerprint(canonical["tool"], canonical["args"]) == fingerprint(tool, args)


@given(
    tool=st.text(min_size=1, max_size=12).filter(str.strip),
    args=_ARGS,
    task=st.sampled_from(["", "task-1"]),
    call=st.sampled_from([None, 3]),
)
def test_property_action_keys_are_the_fingerprint_and_the_write_key(
    tool: str, args: dict[str, Any], task: str, call: int | None
) -> None:
    """``action_keys`` canonicalises a call once and answers what ``fingerprint`` and
    ``write_key`` answer apart: the same fingerprint, the same key (none for a read)."""
    assert action_keys(tool, args) == (fingerprint(tool, args), None)
    assert action_keys(tool, args, write=True, task=task, call=call) == (
        fingerprint(tool, args),
        write_key(tool, args, task=task, call=call),
    )


def test_action_keys_of_a_write_with_a_business_key_is_its_write_key() -> None:
    """A declared business key makes the key global, whichever task asks."""
    keys = action_keys("send_email", RENEWAL, write=True, business_key=["recipient"], task="t")
    assert keys == (
        fingerprint("send_email", RENEWAL),
        write_key("send_email", RENEWAL, ["recipient"], task="t"),
    )
    assert keys[1] == idempotency_key("send_email", {"recipient": "customer-1842"})


# --- evidence digests ----------------------------------------------------------------------

SEARCH_RESULT: dict[str, Any] = {
    "query": "renewal policy",
    "hits": [{"title": "Renewals", "score": 0.5, "note": "from the handbook"}],
    "request_id": "req-1",
    "timestamp": "2026-08-01T10:00:00Z",
    "meta": {"traceId": "abc", "page": 1},
}


@pytest.mark.parametrize(
    "noise",
    [
        {"request_id": "req-2"},
        {"timestamp": "2026-08-01T10:00:07Z"},
        {"meta": {"traceId": "def", "page": 1}},
        {"meta": {"page": 1.0, "trace-id": "x", "spanId": "y"}},
        {"hits": [{"note": "from the handbook", "score": Decimal("0.50"), "title": "Renewals"}]},
    ],
)
def test_evidence_ignores_volatile_fields_at_every_depth(noise: dict[str, Any]) -> None:
    """A fresh request id, timestamp or nested trace id is the same evidence as before."""
    assert evidence({**SEARCH_RESULT, **noise}) == evidence(SEARCH_RESULT)


@pytest.mark.parametrize(
    "change",
    [
        {"query": "refund policy"},
        {"hits": []},
        {"hits": [{"title": "Renewals", "score": 0.6, "note": "from the handbook"}]},
        {"meta": {"traceId": "abc", "page": 2}},
        {"status": "error"},
    ],
)
def test_evidence_changes_with_the_value(change: dict[str, Any]) -> None:
    """Any change outside the volatile fields is new evidence."""
    assert evidence({**SEARCH_RESULT, **change}) != evidence(SEARCH_RESULT)


def test_evidence_keeps_prose_fields() -> None:
    """In a result, a ``note`` or ``comment`` is data the tool returned, so it counts."""
    assert evidence({"note": "in stock"}) != evidence({"note": "sold out"})
    assert evidence({"reason": "a"}) != evidence({"reason": "b"})


def test_evidence_uses_the_volatile_names_of_the_rules() -> None:
    """Custom rules add volatile names; their prose names are not used on results."""
    rules = FingerprintRules().extend(volatile=["etag"], prose=["summary"])
    assert evidence({"a": 1, "etag": "x"}, rules) == evidence({"a": 1, "etag": "y"}, rules)
    assert evidence({"summary": "x"}, rules) != evidence({"summary": "y"}, rules)
    kept = FingerprintRules().without("request_id")
    assert evidence({"request_id": "1"}, kept) != evidence({"request_id": "2"}, kept)


def test_evidence_is_the_digest_of_the_canonical_form() -> None:
    """For plain data the digest is the SHA-256 of the canonical JSON used for actions."""
    canonical = canonical_action("t", SEARCH_RESULT, FingerprintRules(prose=frozenset()))["args"]
    assert evidence(SEARCH_RESULT) == sha256_hex(canonical)


def test_evidence_is_pinned() -> None:
    """The digest depends on the value only: the same in every process and on every machine."""
    assert evidence(SEARCH_RESULT) == (
        "2260aaa09f46e80564712e772a4147e1fec0d37b560077e3d042797a208782fd"
    )


class _Opaque:
    __slots__ = ()


class _Record:
    def __init__(self, value: Any) -> None:
        self.value = value
        self.timestamp = "now"


class _Broken:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class _BrokenMapping(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("no items")


def _cycle() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"next": [value]}
    return value


_WEIRD = [
    float("nan"),
    float("inf"),
    Decimal("NaN"),
    Decimal("sNaN"),
    Decimal("-Infinity"),
    b"\x00secret",
    bytearray(b"ab"),
    {1, 2, "3"},
    frozenset({(1, 2)}),
    {1: "a", (2, 3): "b", "c": "d"},
    {b"k": 1},
    object(),
    _Opaque(),
    _Record({"x": {1}}),
    _Broken(),
    _BrokenMapping(a=1),
    _cycle(),
    _deep(5_000),
    "\ud800 lone surrogate",
    1 + 2j,
    10**5000,
    datetime.datetime(2026, 8, 1, 10, 0),
    [datetime.date(2026, 8, 1), range(3), None, True],
]


@pytest.mark.parametrize("value", _WEIRD, ids=lambda v: type(v).__name__)
def test_evidence_never_raises(value: Any) -> None:
    """Any Python value gets a SHA-256 hex digest, the same on every call."""
    digest = evidence(value)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert evidence(value) == digest


def test_weird_values_stay_apart() -> None:
    """Tagged forms keep values of different kinds, and different values, apart."""
    digests = {
        evidence(value)
        for value in [
            float("nan"),
            float("inf"),
            float("-inf"),
            b"ab",
            "ab",
            {"ab"},
            ["ab"],
            {1: "a"},
            {"1": "a"},
            _Record(1),
            _Record(2),
            _Opaque(),
            1 + 2j,
        ]
    }
    assert len(digests) == 13


def test_objects_compare_without_memory_addresses() -> None:
    """Two plain objects of one type are the same evidence: addresses never enter a digest."""
    assert evidence({"x": _Opaque()}) == evidence({"x": _Opaque()})
    assert evidence(_Record(1)) == evidence(_Record(1))


def test_evidence_of_sets_ignores_their_order() -> None:
    """Set members are sorted by their canonical text."""
    assert evidence({"tags": {"b", "a", 3}}) == evidence({"tags": {3, "a", "b"}})


def test_cycles_get_a_digest_by_shape() -> None:
    """A container inside itself is written as how many levels up it recurs."""
    first, second = _cycle(), _cycle()
    assert evidence(first) == evidence(second)
    assert evidence(first) != evidence([1, [1]])


@pytest.mark.slow
def test_evidence_digest_is_the_same_in_another_process() -> None:
    """Hash randomisation and addresses play no part: a fresh interpreter agrees."""
    code = (
        "from toolbreaker.core._run.fingerprint import evidence\n"
        "print(evidence([{'b': 1, 'a': {2, 'x', 3.5}}, object(), b'k', {1: 2}, float('nan')]))"
    )
    here = evidence([{"b": 1, "a": {2, "x", 3.5}}, object(), b"k", {1: 2}, float("nan")])
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert out.stdout.strip() == here


@given(args=_ARGS, data=st.data())
def test_property_evidence_ignores_key_order(args: dict[str, Any], data: st.DataObject) -> None:
    """Reordering keys at every depth never changes the evidence digest."""
    assert evidence(_reordered(args, data)) == evidence(args)


@given(value=_VALUES)
def test_property_evidence_matches_the_action_canonical_form(value: Any) -> None:
    """For any value actions accept, the digest is that of their canonical JSON."""
    canonical = canonical_action("t", {"v": value}, FingerprintRules(prose=frozenset()))
    assert evidence({"v": value}) == sha256_hex(canonical["args"])


@given(value=_ANYTHING | st.binary() | st.sets(st.text(max_size=3)) | st.complex_numbers())
def test_property_evidence_is_total(value: Any) -> None:
    """Nothing raises, whatever the value."""
    assert len(evidence(value)) == 64


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(
    st.text(min_size=1, max_size=12).filter(str.strip),
    st.dictionaries(st.text(max_size=8), _JSON_VALUES),
)
def test_the_fingerprint_is_the_digest_of_the_canonical_action(tool, args):
    """The fingerprint is exactly the SHA-256 of the canonical JSON of the canonical action
    (its encoder, made once for speed, writes the bytes ``canonical_json`` writes)."""
    try:
        action = canonical_action(tool, args)
    except ToolbreakerError:
        return
    assert fingerprint(tool, args) == sha256_hex(action)
