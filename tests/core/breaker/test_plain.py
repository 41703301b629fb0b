"""The replay fast path, piece by piece, against the reference it must equal exactly.

``plain_step`` against ``apply``; ``plain_fields`` against the strict parser;
``iter_line_blocks`` against ``iter_lines``. The whole fast replay against the reference
replay is in ``tests/cli/test_stream_plain.py``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker.core._breaker.machine import apply, plain_record, plain_step, record_flags
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.state import CORRUPT, BreakerState, Event, Transition
from toolbreaker.core._breaker.trace import parse_line, plain_fields
from toolbreaker.core._files import iter_line_blocks, iter_lines
from toolbreaker.errors import TraceError

ADMITTED = {"call-admitted", "probe-admitted"}
OUTCOMES = ["success", "failure", "ignored", "ambiguous"]


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    """Plain policies mostly; shadow, forced, rate and health-check ones too."""
    fields = {
        "failure_threshold": draw(st.integers(1, 4)),
        "window_ms": draw(st.one_of(st.none(), st.integers(1, 200))),
        "cooldown_ms": draw(st.integers(1, 100)),
        "cooldown_multiplier": draw(st.integers(1, 3)),
        "cooldown_max_ms": 400,
        "probe_limit": draw(st.integers(1, 3)),
        "success_threshold": draw(st.integers(1, 3)),
        "lease_ttl_ms": draw(st.integers(1, 150)),
        "mode": draw(st.sampled_from(["enforce", "enforce", "shadow"])),
        "force": draw(st.sampled_from([None, None, None, "open", "closed"])),
        "probes": draw(st.sampled_from(["calls", "calls", "health-check"])),
    }
    if draw(st.integers(0, 3)) == 0:
        fields.update(failure_rate_permille=500, minimum_calls=2, window_calls=4, window_ms=None)
    return Policy(**fields)


def is_plain(policy: Policy) -> bool:
    return (
        policy.force is None
        and policy.mode == "enforce"
        and not policy.uses_rates
        and policy.probes == "calls"
    )


@settings(max_examples=400)
@given(
    policies(),
    st.sampled_from([BreakerState(), CORRUPT]),
    st.lists(
        st.tuples(
            st.sampled_from(
                ["request"] * 4 + OUTCOMES * 2 + ["isolate", "force-closed", "release"]
            ),
            st.integers(0, 80),
            st.sampled_from(["settle", "rejected", "older", "newer", "new"]),
        ),
        max_size=80,
    ),
)
def test_plain_step_is_apply(policy, start, steps):
    """Wherever plain_step answers, it answers what apply decides, record for record; the
    record plain_record builds from its answer is apply's; every record's attempted and
    rejected flags are record_flags' (shadow mode and forced states included)."""
    quick = plain_step(policy)
    assert (quick is None) == (not is_plain(policy))
    state, at, issued = start, 0, []
    for n, (kind, gap, which) in enumerate(steps):
        at += gap
        call: str | None = f"c{n}"
        generation: int | None = None
        if kind in OUTCOMES:
            if which == "settle" and issued:
                call, generation = issued.pop(0)
            elif which == "older":
                generation = max(state.generation - 1, 0)
            elif which == "newer":
                generation = state.generation + 1
            elif which == "new":
                generation = state.generation
        if kind in ("isolate", "force-closed", "release"):
            call = None
        event = Event(kind, at, "dep", call, generation)
        new, records = apply(state, event, policy)
        for made in records:  # step() inlines the record-from-reason rule: it is the rule
            assert (made.attempted, made.rejected) == record_flags(
                made.event.type, made.reason, made.would_reject
            )
        if quick is not None and kind not in ("isolate", "force-closed", "release"):
            answer = quick(state, kind, at, "dep", call, generation)
            if answer is not None:
                assert len(records) == 1
                fast, reason = answer
                attempted = reason in ADMITTED
                assert fast == new
                assert records[0] == Transition(
                    "dep",
                    event,
                    state.phase,
                    fast.phase,
                    attempted,
                    kind == "request" and not attempted,
                    reason,
                    fast.generation,
                    fast.open_until,
                )
                # The core's own record-from-reason rule gives the same record.
                assert (
                    plain_record("dep", kind, at, call, generation, state, fast, reason)
                    == (records[0])
                )
        if kind == "request" and records[-1].attempted and call is not None:
            issued.append((call, records[-1].generation))
        state = new


def test_plain_step_answers_the_common_pairs_itself():
    """A request while closed and one while cooling down: answered, state unchanged."""
    policy = Policy(failure_threshold=1, cooldown_ms=100)
    quick = plain_step(policy)
    assert quick is not None
    closed = BreakerState()
    assert quick(closed, "request", 5, "d", "c1", None) == (closed, "call-admitted")
    opened, _ = apply(closed, Event("failure", 5, "d", "c1", 0), policy)
    assert quick(opened, "request", 50, "d", "c2", None) == (opened, "cooldown")
    assert quick(opened, "success", 50, "d", "c2", None) == (opened, "not-admitted")


# Pieces of trace lines: every one of them is valid JSON text, most are valid events.
KEYS = ["at", "dependency", "type", "call"]
texts = st.one_of(
    st.sampled_from(["search", "c1", "tool-001", "a b", "日本", "x" * 40, ""]),
    st.text(max_size=8),
    st.text(st.characters(max_codepoint=0x7F), max_size=6),
)
values = {
    "at": st.one_of(
        st.integers(0, 10**6),
        st.integers(2**53 - 3, 10**16 + 5),
        st.integers(-5, -1),
        st.sampled_from([2**53 - 1, 2**53, 10**19, 10**20, 0]),
    ),
    "dependency": texts,
    "type": st.sampled_from(["request", "success", "failure", "ignored", "ambiguous", "nope"]),
    "call": texts,
}


def render(value: object, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def lines(draw: st.DrawFn) -> str:
    """A trace line as some writer might format it: orders, spacing, escapes, extras."""
    fields = {key: draw(values[key]) for key in KEYS}
    shape = draw(st.sampled_from(["documented", "sorted", "any"]))
    if shape == "documented":
        order = KEYS
    elif shape == "sorted":
        order = sorted(KEYS)
    else:
        order = draw(st.permutations(KEYS))[: draw(st.integers(2, 4))]
    pairs = [(key, render(fields[key], draw(st.booleans()))) for key in order]
    odd = shape == "any" or draw(st.integers(0, 3)) == 0
    if odd and draw(st.integers(0, 4)) == 0:
        pairs.append((draw(st.sampled_from([*KEYS, "retry_after_ms", "extra"])), "1"))
    if odd and draw(st.integers(0, 4)) == 0:
        index = draw(st.integers(0, len(pairs) - 1))
        key, _ = pairs[index]
        pairs[index] = (key, draw(st.sampled_from(['"\\u0063"', "01", "1.0", "1e3", "null"])))
    colon = draw(st.sampled_from([":", ": "] + ([":  ", " :"] if odd else [])))
    comma = draw(st.sampled_from([",", ", "] + ([" ,", ",\t"] if odd else [])))
    body = comma.join(f'"{key}"{colon}{value}' for key, value in pairs)
    line = "{" + body + "}"
    if not odd:
        return line
    return (
        draw(st.sampled_from(["", " ", "\r", "\x1c"]))
        + line
        + draw(st.sampled_from(["", "", " ", "\r", "\u2028"]))
    )


def parsed(line: str) -> Event | str | None:
    try:
        return parse_line(line)
    except TraceError as exc:
        return f"error: {exc.message}"


@settings(max_examples=1500)
@given(lines())
def test_plain_fields_agree_with_the_parser(line):
    """A line plain_fields reads is the event the strict parser reads, field for field."""
    fields = plain_fields(line)
    if fields is not None:
        kind, at, dependency, call = fields
        assert parsed(line) == Event(kind, at, dependency, call)


@settings(max_examples=500)
@given(st.text(st.sampled_from('{}":, atdependcyplrqusf0129\\\x00é'), max_size=90))
def test_plain_fields_on_any_text(line):
    """Arbitrary text: plain_fields reads nothing the strict parser reads differently."""
    fields = plain_fields(line)
    if fields is not None:
        kind, at, dependency, call = fields
        assert parsed(line) == Event(kind, at, dependency, call)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"at":0,"dependency":"d","type":"request","call":"c"}', ("request", 0, "d", "c")),
        (
            '{"at": 5, "call": "c1", "dependency": "search", "type": "failure"}',
            ("failure", 5, "search", "c1"),
        ),
        ('{"at":01,"dependency":"d","type":"request","call":"c"}', None),
        ('{"at":0,"dependency":"\\u0064","type":"request","call":"c"}', None),
        ('{"at":9007199254740992,"dependency":"d","type":"request","call":"c"}', None),
        ('{"at":0,"dependency":"d","type":"request","call":"c","call":"c"}', None),
        ('{"at":0,"dependency":"d","type":"request"}', None),
        ('{"at":0,"dependency":"d","type":"isolate","call":"c"}', None),
    ],
)
def test_plain_shapes(line, expected):
    """The documented and the recorder's shapes are plain; anything unusual is not."""
    assert plain_fields(line) == expected


def run_lines(data: bytes, reader: str, limit: int, block: int) -> list[object]:
    """What a reader yields for a file holding ``data``: its lines, then its error."""
    with tempfile.NamedTemporaryFile(delete=False) as handle:
        handle.write(data)
    out: list[object] = []
    try:
        if reader == "lines":
            for number, raw in iter_lines(handle.name, TraceError, limit=limit):
                assert raw.endswith("\n") or not raw.count("\n")
                out.append((number, raw.removesuffix("\n")))
        else:
            blocks: Iterator[tuple[int, list[str]]] = iter_line_blocks(
                handle.name, TraceError, limit=limit, block=block
            )
            for first, got in blocks:
                out.extend(enumerate(got, start=first))
    except TraceError as exc:
        out.append(("error", exc.message, exc.line))
    finally:
        os.unlink(handle.name)
    return out


@settings(max_examples=400)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=12),
            st.text(max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass")),
            st.sampled_from([b"\n", b"\r\n", b"\xff", b"\xe6\x97", b"x" * 20]),
        ),
        max_size=30,
    ).map(b"".join),
    st.integers(1, 24),
    st.integers(1, 40),
)
def test_line_blocks_are_iter_lines(data, limit, block):
    """Blocks hold the same lines, and fail at the same line with the same message."""
    assert run_lines(data, "blocks", limit, block) == run_lines(data, "lines", limit, block)


def test_line_blocks_stop_an_endless_line(tmp_path):
    """A line without end (/dev/zero) is refused once it passes the limit."""
    with pytest.raises(TraceError, match="line is longer than 1,000 bytes") as caught:
        for _ in iter_line_blocks("/dev/zero", TraceError, limit=1_000, block=64):
            pass
    assert caught.value.line == 1
