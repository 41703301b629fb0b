"""Streaming replay: byte-identical receipts, bounded memory, --summary."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker._replaying import StreamingReplay
from toolbreaker.cli import main
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import Replay, dump_receipt
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.core._breaker.trace import parse_event
from toolbreaker.errors import TraceError

SEED_HASH = "e327b64931b7ec9421d574fe55eabb6ed810d9708bd4732e33553f723f44dbfc"
NAMES = ["search", "billing", "é\u202e", 'q"uote\\', "\x1b[2J", "z" * 30, "日本"]
OUTCOMES = ["success", "failure", "ignored", "ambiguous"]


def generated(seed: int, n: int, deps: list[str]) -> list[dict]:
    """A plausible trace: requests and outcomes interleaved across dependencies."""
    rng = random.Random(seed)
    at = dict.fromkeys(deps, 0)
    open_calls: dict[str, list[str]] = {d: [] for d in deps}
    events = []
    for i in range(n):
        dep = rng.choice(deps)
        at[dep] += rng.choice([0, 1, 5, 50, 5_000, 30_000])
        if open_calls[dep] and rng.random() < 0.5:
            call = open_calls[dep].pop(rng.randrange(len(open_calls[dep])))
            kind = rng.choice(OUTCOMES)
            event = {"at": at[dep], "dependency": dep, "type": kind}
            if rng.random() < 0.8:
                event["call"] = call
            if kind == "failure" and rng.random() < 0.2:
                event["retry_after_ms"] = rng.randrange(0, 60_000)
        else:
            call = f"c{i}"
            open_calls[dep].append(call)
            event = {"at": at[dep], "dependency": dep, "type": "request", "call": call}
        events.append(event)
    return events


def both(events: list[dict], policy: Policy, initial=None) -> tuple[str, str]:
    """The in-memory receipt as dump_receipt prints it, and the streamed one."""
    old, new = Replay(policy, initial), StreamingReplay(policy, initial)
    for data in events:
        event = parse_event(data)
        try:
            old.feed(event)
        except TraceError:
            with pytest.raises(TraceError):
                new.feed(event)
            new.close()
            return "error", "error"
        new.feed(event)
    out = io.StringIO()
    with new:
        new.write(out)
    return dump_receipt(old.receipt()), out.getvalue()


def test_the_seed_fixture_hash(seed_trace, seed_policy, capsys):
    """The streamed seed receipt has the published hash."""
    assert main(["replay", str(seed_trace), "--policy", str(seed_policy)]) == 0
    assert json.loads(capsys.readouterr().out)["receipt_hash"] == SEED_HASH


@pytest.mark.parametrize("seed", range(12))
def test_streamed_receipts_are_byte_identical(seed):
    """Generated traces give the same bytes streamed as built in memory."""
    rng = random.Random(seed)
    policy = Policy(
        failure_threshold=rng.randint(1, 4),
        window_ms=rng.choice([None, 10_000]),
        cooldown_ms=rng.choice([1_000, 20_000]),
        cooldown_multiplier=rng.choice([1, 2]),
        probe_limit=rng.randint(1, 3),
        success_threshold=rng.randint(1, 3),
        lease_ttl_ms=rng.choice([1_000, 30_000]),
    )
    deps = rng.sample(NAMES, rng.randint(1, len(NAMES)))
    initial = None
    if seed % 3 == 0:
        initial = {
            deps[0]: BreakerState.from_dict({"state": "sideways"}, policy),
            "idle": BreakerState(),
        }
    old, new = both(generated(seed, 3_000, deps), policy, initial)
    assert new == old


def test_empty_trace_is_byte_identical():
    """No events at all: an empty dependencies table, the same bytes."""
    old, new = both([], Policy())
    assert new == old


def test_spill_in_many_chunks(monkeypatch):
    """Receipts stay identical when the spill flushes every few records."""
    monkeypatch.setattr("toolbreaker._replaying._spill._FLUSH_BYTES", 300)
    old, new = both(generated(7, 2_000, NAMES), Policy(failure_threshold=2))
    assert new == old


@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAMES[:3]),
            st.sampled_from(["request", *OUTCOMES]),
            st.integers(0, 40_000),
        ),
        max_size=60,
    )
)
def test_property_streamed_equals_in_memory(steps):
    """Any sequence of events (valid or not) streams to the same bytes or the same error."""
    at: dict[str, int] = {}
    events = []
    for dep, kind, gap in steps:
        at[dep] = at.get(dep, 0) + gap
        events.append({"at": at[dep], "dependency": dep, "type": kind})
    old, new = both(events, Policy(failure_threshold=2, cooldown_ms=10_000, lease_ttl_ms=5_000))
    assert new == old


def test_duplicate_call_ids_are_still_refused(tmp_path, capsys):
    """The compact id set still refuses a reused call id, naming the line."""
    trace = tmp_path / "t.jsonl"
    lines = [{"at": 0, "dependency": "s", "type": "request", "call": f"c{i}"} for i in range(5000)]
    lines.append({"at": 1, "dependency": "s", "type": "request", "call": "c17"})
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["replay", str(trace)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {trace}:5001: duplicate call id")


def test_summary(seed_trace, seed_policy, capsys):
    """--summary prints the counts per dependency without the transitions."""
    assert main(["replay", str(seed_trace), "--policy", str(seed_policy), "--summary"]) == 0
    summary = json.loads(capsys.readouterr().out)
    search = summary["dependencies"]["search"]
    assert search == {
        "transitions": 11,
        "remote_attempts": 5,
        "local_rejections": 1,
        "opens": 1,
        "final_state": "closed",
        "recovered_from_corruption": False,
    }


BIG = """
import resource, sys
cap = int(sys.argv[1]) * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from toolbreaker.cli import main
sys.exit(main(sys.argv[2:]))
"""


def write_big(path: Path, events: int) -> None:
    deps = [f"dep-{i}" for i in range(20)]
    with path.open("w") as out:
        for i in range(events // 2):
            dep = deps[i % 20]
            out.write(f'{{"at":{i},"dependency":"{dep}","type":"request","call":"c{i}"}}\n')
            kind = "failure" if (i // 20) % 7 < 3 else "success"
            out.write(f'{{"at":{i},"dependency":"{dep}","type":"{kind}","call":"c{i}"}}\n')


def test_a_big_trace_replays_under_a_memory_cap(tmp_path):
    """400,000 events (about 30 MB) replay within 250 MB of address space.

    Before streaming, a trace this size needed about 1.5 GB; a regression fails here
    with MemoryError instead of swapping.
    """
    trace = tmp_path / "big.jsonl"
    write_big(trace, 400_000)
    with (tmp_path / "out.json").open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-c", BIG, "250", "replay", str(trace)],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with (tmp_path / "out.json").open() as receipt:
        tail = receipt.read()[-200:]
    assert '"schema": "toolbreaker.receipt/v1"' in tail


@pytest.mark.parametrize(
    "policy",
    [
        Policy(mode="shadow", failure_threshold=2),
        Policy(
            failure_rate_permille=400,
            minimum_calls=5,
            window_calls=10,
            slow_call_ms=1000,
            slow_call_rate_permille=500,
        ),
        Policy(force="closed"),
    ],
    ids=["shadow", "rates", "forced-closed"],
)
def test_streamed_receipts_of_the_newer_modes_are_byte_identical(policy: Policy) -> None:
    """Durations, operator reasons and would-be rejections stream to the same bytes."""
    rng = random.Random(7)
    lines: list[dict] = []
    at = 0
    for i in range(300):
        at += rng.randint(0, 400)
        dep = rng.choice(["a", "b"])
        lines.append({"at": at, "dependency": dep, "type": "request", "call": f"c{i}"})
        kind = rng.choice(["success", "failure", "success"])
        outcome = {"at": at + 10, "dependency": dep, "type": kind, "call": f"c{i}"}
        if kind == "success":
            outcome["duration_ms"] = rng.randint(1, 3000)
        lines.append(outcome)
        at += 10
    lines.append({"at": at + 1, "dependency": "a", "type": "isolate", "reason": "INC-1"})
    expected = Replay(policy)
    streamed = StreamingReplay(policy)
    for data in lines:
        expected.feed(parse_event(data))
        streamed.feed(parse_event(data))
    out = io.StringIO()
    with streamed:
        streamed.write(out)
    assert out.getvalue() == dump_receipt(expected.receipt())
