"""The fast replay of a trace file against the reference, byte for byte and error for error.

``StreamingReplay.feed_trace`` (plain lines past the JSON decoder, the core's
``plain_step``, templates for the receipt text) must print exactly what the in-memory
replay of ``iter_trace`` prints through ``dump_receipt``, or fail with the same message
at the same line, for any trace: the shapes writers produce and everything else.
"""

from __future__ import annotations

import io
import json
import os
import random
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbreaker._replaying import StreamingReplay
from toolbreaker.cli import main
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import Replay, dump_receipt
from toolbreaker.core._breaker.state import CORRUPT, BreakerState
from toolbreaker.core._breaker.trace import iter_trace, no_events
from toolbreaker.errors import TraceError

OUTCOMES = ["success", "failure", "ignored", "ambiguous"]
NAMES = ["search", "a b", "é\u202e", 'q"uote\\', "日本", "\x1b[2J", "tool-001"]
CALLS = ["c", "c d", "ç", 'c"', "c\\", "\u2028"]


def reference(path: str, policy: Policy, initial: dict[str, BreakerState] | None) -> str:
    """The receipt as the in-memory replay prints it, or the error it stops with.

    A trace without an event is refused (``no_events``): it has nothing to judge.
    """
    driver = Replay(policy, initial)
    try:
        fed = False
        for line, event in iter_trace(path):
            fed = True
            try:
                driver.feed(event)
            except TraceError as exc:
                exc.file, exc.line = path, line
                raise
        if not fed:
            raise no_events(path)
    except TraceError as exc:
        return f"error: {exc}"
    return dump_receipt(driver.receipt())


def fast(path: str, policy: Policy, initial: dict[str, BreakerState] | None) -> str:
    """The receipt as ``toolbreaker replay`` streams it, or the error it stops with."""
    out = io.StringIO()
    with StreamingReplay(policy, initial) as driver:
        try:
            driver.feed_trace(path)
        except TraceError as exc:
            return f"error: {exc}"
        driver.write(out)
    return out.getvalue()


def render(data: dict[str, object], style: str, rng: random.Random) -> str:
    """One trace line as some writer might format it."""
    if style == "documented":
        keys = [k for k in ("at", "dependency", "type", "call") if k in data]
        keys += [k for k in data if k not in keys]
        return (
            "{" + ",".join(f'"{k}":{json.dumps(data[k], ensure_ascii=False)}' for k in keys) + "}"
        )
    if style == "recorder":
        return json.dumps(data, sort_keys=True)
    if style == "escaped":
        name = "".join(f"\\u{ord(c):04x}" for c in str(data["dependency"]))
        return json.dumps({**data, "dependency": "\x00"}).replace('"\\u0000"', f'"{name}"')
    if style == "spaced":
        return "  " + json.dumps(data, indent=None, separators=(" , ", " : ")) + " \r"
    if style == "duplicate":
        text = json.dumps(data)
        return text[:-1] + ', "at": 0}'
    if style == "unknown":
        return json.dumps({**data, "extra": 1})
    if style == "bigint":
        return json.dumps({**data, "at": rng.choice([2**53, 10**25, -1, 2**53 - 1])})
    return json.dumps(data, ensure_ascii=False)


def make_trace(seed: int, events: int, styles: list[str], *, odd: bool = False) -> list[str]:
    """Requests and outcomes over a few dependencies, valid unless ``odd``.

    An odd trace has outcomes without a call id (which settle the oldest call, so a later
    outcome may settle nothing) and times that go backwards.
    """
    rng = random.Random(seed)
    deps = rng.sample(NAMES, rng.randint(1, 4))
    at = dict.fromkeys(deps, 0)
    issued: dict[str, list[str]] = {d: [] for d in deps}
    out = []
    for n in range(events):
        dep = rng.choice(deps)
        at[dep] += rng.choice([0, 1, 3, 40, 400, 5_000])
        if issued[dep] and rng.random() < 0.5:
            index = rng.randrange(len(issued[dep])) if rng.random() < 0.3 else 0
            data: dict[str, object] = {
                "at": at[dep],
                "dependency": dep,
                "type": rng.choice(OUTCOMES),
                "call": issued[dep].pop(index),
            }
            if data["type"] == "failure" and rng.random() < 0.1:
                data["retry_after_ms"] = rng.randrange(60_000)
            if odd and rng.random() < 0.05:
                del data["call"]
        else:
            call = f"{rng.choice(CALLS)}{n}" if rng.random() < 0.2 else f"c{n}"
            issued[dep].append(call)
            data = {"at": at[dep], "dependency": dep, "type": "request", "call": call}
        if odd and rng.random() < 0.003:
            data["at"] = max(0, int(data["at"]) - 50)  # type: ignore[call-overload]
        style = rng.choice(styles)
        out.append(render(data, style, rng))
        if rng.random() < 0.01:
            out.append(rng.choice(["", "   ", "\r"]))
    return out


POLICIES = [
    Policy(),
    Policy(failure_threshold=1, cooldown_ms=50, lease_ttl_ms=30, success_threshold=2),
    Policy(failure_threshold=2, window_ms=500, cooldown_ms=400, probe_limit=2),
    Policy(failure_threshold=3, cooldown_ms=100, cooldown_multiplier=2, cooldown_max_ms=900),
    Policy(mode="shadow", failure_threshold=2),
    Policy(failure_rate_permille=400, minimum_calls=4, window_calls=10),
    Policy(probes="health-check", failure_threshold=1, cooldown_ms=100),
]
CLEAN = ["documented", "documented", "recorder", "plain"]
MIXED = [*CLEAN, "spaced", "escaped"]


def compare(lines: list[str], policy: Policy, initial=None) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    try:
        expected = reference(f.name, policy, initial)
        got = fast(f.name, policy, initial)
    finally:
        os.unlink(f.name)
    assert got == expected
    return got


@pytest.mark.parametrize("policy", POLICIES, ids=range(len(POLICIES)))
@pytest.mark.parametrize("seed", range(3))
def test_fast_replay_is_the_reference(policy, seed):
    """Valid traces in every writer's shape: the same receipt, byte for byte."""
    got = compare(make_trace(seed, 1_500, CLEAN if seed else MIXED), policy)
    assert got.startswith("{")


@pytest.mark.parametrize("policy", POLICIES[:4], ids=range(4))
def test_fast_replay_of_odd_traces_is_the_reference(policy):
    """Outcomes without call ids, times that go backwards: the same bytes or error."""
    for seed in range(4):
        compare(make_trace(seed, 1_000, MIXED, odd=True), policy)


@pytest.mark.parametrize(
    "style", ["duplicate", "unknown", "bigint", "spaced", "escaped", "recorder"]
)
def test_fast_replay_reports_the_same_error(style):
    """A bad line among plain ones: the same message at the same line."""
    lines = make_trace(5, 400, ["documented"])
    data = json.loads(lines[0])
    lines.insert(200, render({**data, "at": 10**6}, style, random.Random(1)))
    compare(lines, Policy(failure_threshold=2, cooldown_ms=100))


def test_fast_replay_with_initial_states():
    """Initial states (a corrupt one, an open one, forced closed) replay the same."""
    policy = Policy(failure_threshold=2, cooldown_ms=100, lease_ttl_ms=50)
    lines = make_trace(11, 1_000, CLEAN)
    deps = {json.loads(line)["dependency"] for line in lines if line.strip()}
    states = [
        CORRUPT,
        BreakerState(phase="open", generation=3, open_until=500, opens=1),
        BreakerState(forced_closed=True, generation=1),
        BreakerState(phase="open", isolated=True, generation=2),
    ]
    initial = {dep: states[i % len(states)] for i, dep in enumerate(sorted(deps))}
    compare(lines, policy, initial)


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "a b"]),
            st.sampled_from(["request", "request", *OUTCOMES]),
            st.integers(0, 300),
            st.integers(0, 12),
            st.sampled_from([*MIXED, "duplicate", "unknown", "bigint"]),
        ),
        max_size=80,
    ),
    st.sampled_from(POLICIES),
)
def test_property_fast_replay_is_the_reference(steps, policy):
    """Any events, valid or not, in any shape: the same bytes or the same error."""
    at: dict[str, int] = {}
    lines = []
    rng = random.Random(0)
    for dep, kind, gap, call, style in steps:
        at[dep] = at.get(dep, 0) + gap
        data = {"at": at[dep], "dependency": dep, "type": kind, "call": f"c{call}"}
        lines.append(render(data, style, rng))
    compare(lines, policy)


def test_cli_replay_prints_the_reference(tmp_path, capsys):
    """``toolbreaker replay`` on a file prints the reference receipt."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(make_trace(3, 2_000, CLEAN)) + "\n", encoding="utf-8")
    policy = Policy(failure_threshold=2, cooldown_ms=300)
    (tmp_path / "p.toml").write_text("failure_threshold = 2\ncooldown_ms = 300\n")
    assert main(["replay", str(trace), "--policy", str(tmp_path / "p.toml")]) == 0
    assert capsys.readouterr().out == reference(str(trace), policy, None)


def test_spill_in_many_chunks_on_the_fast_path(monkeypatch):
    """Tiny flushes (records with spaces in their call ids among them): same bytes."""
    monkeypatch.setattr("toolbreaker._replaying._spill._FLUSH_BYTES", 500)
    compare(make_trace(9, 1_500, CLEAN), Policy(failure_threshold=1, cooldown_ms=30))


def test_the_fast_path_takes_most_plain_lines(tmp_path, monkeypatch):
    """The comparisons above exercise the fast path: it takes most lines of a clean trace."""
    taken = []
    original = StreamingReplay._keep_plain

    def counting(self, *args):
        taken.append(True)
        return original(self, *args)

    monkeypatch.setattr(StreamingReplay, "_keep_plain", counting)
    lines = make_trace(2, 2_000, ["documented", "recorder"])
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    policy = Policy(failure_threshold=1, cooldown_ms=50, lease_ttl_ms=30)
    fast(str(trace), policy, None)
    assert sum(taken) > 0.6 * len(lines)
