"""toolbreaker tune: every number checked against an independent replay of the same trace."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from toolbreaker.cli import _plot, main
from toolbreaker.cli._simulate import trace_inputs
from toolbreaker.cli._tune import MAX_CANDIDATES, receipt_diff
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import Replay, diff, replay
from toolbreaker.core._breaker.state import HALF_OPEN, OPEN
from toolbreaker.core._breaker.trace import read_trace

RECORDED_UNDER = Policy(failure_threshold=3, cooldown_ms=5_000, success_threshold=2)


def record(path: Path, policy: Policy = RECORDED_UNDER) -> Path:
    """A trace as a breaker under ``policy`` records it: rejected calls have no outcome.

    Two dependencies, a request each every 100 ms for two minutes, each admitted call
    answered 20 ms later. ``search`` is down from 10 s to 40 s (every seventh call still
    succeeds) and from 70 s to 75 s, answers one ambiguous outcome and some non-qualifying
    ones; ``billing`` is healthy. The core decides what the recording breaker admits.
    """
    driver = Replay(policy)
    out = []
    for tick, t in enumerate(range(0, 120_000, 100)):
        answered = []
        for dep in ("search", "billing"):
            call = f"{dep}-{tick}"
            event = {"at": t, "dependency": dep, "type": "request", "call": call}
            out.append(event)
            ((_, parsed),) = read_lines([event])
            if driver.feed(parsed)[-1].attempted:
                answered.append((dep, call, outcome(dep, tick, t)))
        for dep, call, kind in answered:
            event = {"at": t + 20, "dependency": dep, "type": kind, "call": call}
            out.append(event)
            ((_, parsed),) = read_lines([event])
            driver.feed(parsed)
    path.write_text("".join(json.dumps(e) + "\n" for e in out), encoding="utf-8")
    return path


def read_lines(events):
    from toolbreaker.core._breaker.trace import parse_lines

    return list(parse_lines(json.dumps(e) for e in events))


def outcome(dep: str, tick: int, t: int) -> str:
    if dep == "billing":
        return "success"
    if t == 5_000:
        return "ambiguous"
    if tick % 11 == 0:
        return "ignored"
    down = (10_000 <= t < 40_000 and tick % 7) or 70_000 <= t < 75_000
    return "failure" if down else "success"


def independent(trace: Path, policy: Policy) -> dict[str, int]:
    """The tune numbers from a plain in-memory replay, matched by call id."""
    events = [e for _, e in read_trace(trace)]
    outcomes = {(e.dependency, e.call): e.type for e in events if e.type != "request"}
    failing = {dep for (dep, _), kind in outcomes.items() if kind in ("failure", "ambiguous")}
    receipt = replay(events, policy)
    numbers = dict.fromkeys(
        (
            "remote_failing",
            "rejected_succeeded",
            "unknown",
            "opens",
            "time_open_ms",
            "half_opens",
            "reopens",
            "remote",
            "rejected",
        ),
        0,
    )
    for dep, body in receipt["dependencies"].items():
        numbers["remote"] += body["remote_attempts"]
        numbers["rejected"] += body["local_rejections"]
        numbers["opens"] += body["opens"]
        if dep in failing:
            numbers["remote_failing"] += body["remote_attempts"]
        opened_at = None
        for record in body["transitions"]:
            event = record["event"]
            if event["type"] == "request":
                known = outcomes.get((dep, event["call"]))
                if record["rejected"] and known == "success":
                    numbers["rejected_succeeded"] += 1
                if record["attempted"] and known is None:
                    numbers["unknown"] += 1
            if record["from"] != record["to"]:
                if record["from"] == OPEN:
                    numbers["time_open_ms"] += event["at"] - opened_at
                if record["to"] == OPEN:
                    opened_at = event["at"]
                    numbers["reopens"] += record["from"] == HALF_OPEN
                if record["to"] == HALF_OPEN:
                    numbers["half_opens"] += 1
        if body["final_state"]["state"] == OPEN:
            numbers["time_open_ms"] += body["transitions"][-1]["event"]["at"] - opened_at
    return numbers


def policy_file(tmp_path: Path, policy: Policy, name: str = "current.toml") -> Path:
    path = tmp_path / name
    fields = policy.to_dict().items()
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields if v is not None))
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("tune") / "trace.jsonl")


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_row_matches_an_independent_replay(trace, tmp_path, capsys):
    """Each candidate's numbers are those of its own replay of the trace, computed apart."""
    current = policy_file(tmp_path, RECORDED_UNDER)
    table = tmp_path / "t.csv"
    args = ["tune", str(trace), "--policy", str(current), "--out", str(table)]
    args += ["--vary", "failure_threshold=2,3,5", "--vary", "cooldown_ms=1000,5000,20000"]
    args += ["--vary", "success_threshold=1,2,3"]
    assert main(args) == 0
    capsys.readouterr()
    rows = read_csv(table)
    assert len(rows) == 27
    seen_unknown = seen_price = 0
    for row in rows:
        policy = Policy.from_dict(
            {
                **RECORDED_UNDER.to_dict(),
                "failure_threshold": int(row["failure_threshold"]),
                "cooldown_ms": int(row["cooldown_ms"]),
                "success_threshold": int(row["success_threshold"]),
            }
        )
        assert row["policy_version"] == policy.version
        want = independent(trace, policy)
        got = {
            "remote_failing": row["remote_attempts_failing"],
            "rejected_succeeded": row["rejected_succeeded"],
            "unknown": row["unknown_outcome"],
            "opens": row["opens"],
            "time_open_ms": row["time_open_ms"],
            "half_opens": row["half_opens"],
            "reopens": row["reopens"],
            "remote": row["remote_attempts"],
            "rejected": row["local_rejections"],
        }
        assert {k: int(v) for k, v in got.items()} == want, row["row"]
        assert row["current"] == str(int(policy == RECORDED_UNDER))
        seen_unknown += want["unknown"]
        seen_price += want["rejected_succeeded"]
    # the grid really exercises both honest columns
    assert seen_unknown > 0
    assert seen_price > 0


def test_the_recording_policy_has_no_unknown_outcome(trace, tmp_path, capsys):
    """Under the policy it was recorded with, every admitted call has its outcome."""
    current = policy_file(tmp_path, RECORDED_UNDER)
    table = tmp_path / "t.csv"
    assert main(["tune", str(trace), "--policy", str(current), "--out", str(table)]) == 0
    capsys.readouterr()
    (row,) = read_csv(table)
    assert row["current"] == "1"
    assert row["unknown_outcome"] == "0"
    assert row["rejected_succeeded"] == "0"


def table_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#"))
    end = lines.index("", start)
    return [line.split() for line in lines[start + 1 : end]]


def test_current_row_is_marked_and_added_when_missing(trace, tmp_path, capsys):
    """The current policy is marked; outside the grid it is added as row 1."""
    current = policy_file(tmp_path, RECORDED_UNDER)
    args = ["tune", str(trace), "--policy", str(current), "--vary", "failure_threshold=2,3,5"]
    assert main(args) == 0
    rows = table_rows(capsys.readouterr().out)
    assert [r[0] for r in rows] == ["1", "*2", "3"]
    assert rows[1][1] == "3"
    args[-1] = "failure_threshold=4,5"
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert [r[0] for r in rows] == ["*1", "2", "3"]
    assert rows[0][-1] == RECORDED_UNDER.version
    assert "* the current policy" in out


def test_write_gives_a_loadable_policy_and_the_receipt_diff(trace, tmp_path, capsys):
    """--write N --to FILE writes row N's policy; replay loads it and prints the row's
    numbers; the printed diff is toolbreaker diff's."""
    current = policy_file(tmp_path, RECORDED_UNDER)
    table, written = tmp_path / "t.csv", tmp_path / "row.toml"
    args = ["tune", str(trace), "--policy", str(current), "--vary", "failure_threshold=2,5"]
    args += ["--vary", "cooldown_ms=1000,20000", "--out", str(table)]
    args += ["--write", "4", "--to", str(written)]
    assert main(args) == 0
    out = capsys.readouterr().out
    # row 1 is the current policy (outside the grid), then the grid in order
    row = read_csv(table)[3]
    assert row["row"] == "4"
    loaded = Policy.from_toml(written)
    assert loaded.version == row["policy_version"] != RECORDED_UNDER.version
    assert (loaded.failure_threshold, loaded.cooldown_ms) == (5, 1000)
    assert f"wrote row 4 (policy {loaded.version})" in out

    assert main(["replay", str(trace), "--policy", str(written), "--summary"]) == 0
    deps = json.loads(capsys.readouterr().out)["dependencies"].values()
    assert sum(d["remote_attempts"] for d in deps) == int(row["remote_attempts"])
    assert sum(d["local_rejections"] for d in deps) == int(row["local_rejections"])

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["replay", str(trace), "--policy", str(current)]) == 0
    a.write_text(capsys.readouterr().out)
    assert main(["replay", str(trace), "--policy", str(written)]) == 0
    b.write_text(capsys.readouterr().out)
    assert main(["diff", str(a), str(b)]) == 1
    expected = capsys.readouterr().out
    assert "policy.failure_threshold: 3 -> 5" in expected
    assert expected in out

    again = [a if a != str(table) else str(tmp_path / "u.csv") for a in args]
    assert main(again) == 2
    assert capsys.readouterr().err == f"error: {written}: --to would overwrite an existing file\n"


def test_write_of_the_current_row_says_equal(tmp_path, capsys, seed_trace, seed_policy):
    """Writing the current policy's row: the receipts are equal."""
    written = tmp_path / "same.toml"
    args = ["tune", str(seed_trace), "--policy", str(seed_policy), "--write", "1"]
    assert main([*args, "--to", str(written)]) == 0
    assert capsys.readouterr().out.endswith("receipts are equal\n")
    assert Policy.from_toml(written) == Policy.from_toml(seed_policy)


def test_recorded_live_demo_trace(tmp_path, capsys):
    """On a trace recorded by the real runtime against the real tool service, the rows
    match independent replays too."""
    folder = tmp_path / "run"
    assert main(["demo", "--save", str(folder)]) == 0
    capsys.readouterr()
    trace, policy = folder / "trace.jsonl", folder / "policy.toml"
    table = tmp_path / "t.csv"
    args = ["tune", str(trace), "--policy", str(policy), "--out", str(table)]
    assert main([*args, "--vary", "failure_threshold=1,3,6"]) == 0
    capsys.readouterr()
    base = Policy.from_toml(policy)
    for row in read_csv(table):
        candidate = Policy.from_dict(
            {**base.to_dict(), "failure_threshold": int(row["failure_threshold"])}
        )
        want = independent(trace, candidate)
        assert int(row["remote_attempts_failing"]) == want["remote_failing"]
        assert int(row["rejected_succeeded"]) == want["rejected_succeeded"]
        assert int(row["unknown_outcome"]) == want["unknown"]
        assert int(row["opens"]) == want["opens"]
        assert int(row["time_open_ms"]) == want["time_open_ms"]


def test_figure_marks_the_current_policy(trace, tmp_path, capsys):
    """--out FILE.svg draws the trade-off, deterministic, with the current policy marked."""
    current = policy_file(tmp_path, RECORDED_UNDER)
    figures = [tmp_path / "a.svg", tmp_path / "b.svg"]
    for figure in figures:
        args = ["tune", str(trace), "--policy", str(current), "--out", str(figure)]
        assert main([*args, "--vary", "cooldown_ms=1000,5000,20000"]) == 0
    capsys.readouterr()
    text = figures[0].read_text(encoding="utf-8")
    ET.fromstring(text)
    assert "current policy" in text
    assert "remote attempts on failing dependencies" in text
    assert figures[0].read_bytes() == figures[1].read_bytes()


def test_figure_needs_the_extra_but_the_table_does_not(trace, tmp_path, monkeypatch, capsys):
    """Without matplotlib a figure is one line naming the extra; a CSV still works."""

    def missing(module: str, extra: str):
        raise ImportError(module)

    monkeypatch.setattr(_plot, "require", missing)
    figure = tmp_path / "f.png"
    assert main(["tune", str(trace), "--out", str(figure)]) == 2
    assert capsys.readouterr().err == (
        "error: drawing a figure needs matplotlib: pip install 'toolbreaker[plot]'\n"
    )
    assert not figure.exists()
    assert main(["tune", str(trace), "--out", str(tmp_path / "t.csv")]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vary", "nope=1,2"], "--vary: unknown policy field 'nope' (known: failure_threshold"),
        (["--vary", "failure_threshold"], "--vary needs FIELD=V1,V2,..., got 'failure_threshold'"),
        (["--vary", "=1"], "--vary needs FIELD=V1,V2,..., got '=1'"),
        (
            ["--vary", "failure_threshold=1", "--vary", "failure_threshold=2"],
            "--vary: failure_threshold is varied twice",
        ),
        (
            ["--vary", "failure_threshold=3,0"],
            "--vary: the candidate failure_threshold=0: failure_threshold must be positive",
        ),
        (
            ["--vary", "cooldown_ms=abc"],
            "--vary: the candidate cooldown_ms='abc': cooldown_ms must be an integer",
        ),
        (
            ["--vary", "mode=enforce,loud"],
            "--vary: the candidate mode='loud': mode must be 'enforce' or 'shadow'",
        ),
        (
            [
                "--vary",
                "failure_threshold=1,2,3,4,5,6,7,8,9,10,11",
                "--vary",
                "cooldown_ms=1,2,3,4,5,6,7,8,9,10",
            ],
            f"--vary makes 110 candidate policies, at most {MAX_CANDIDATES}",
        ),
        (
            ["--vary", "failure_threshold=1,2", "--write", "4", "--to", "X.toml"],
            "--write: there are rows 1 to 3, not 4",
        ),
        (["--write", "1"], "--write ROW and --to FILE go together"),
        (["--to", "X.toml"], "--write ROW and --to FILE go together"),
        (["--out", "X.pdf"], "--out: the file name must end in .csv or .svg or .png"),
        (["--write", "1", "--to", "X.json"], "--to: the file name must end in .toml"),
        (["--out", "X.csv", "--out", "X.csv"], "--out names the same file twice"),
    ],
)
def test_bad_options_are_one_line(args, message, trace, tmp_path, capsys):
    """Every mistake in the options: one line on stderr, exit 2, nothing written."""
    args = [a.replace("X.", f"{tmp_path}/x.") for a in args]
    assert main(["tune", str(trace), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert message.replace("X.", f"{tmp_path}/x.") in err
    assert list(tmp_path.iterdir()) == []


def test_hostile_field_name_is_escaped(trace, capsys):
    """A field name with terminal escapes is shown escaped."""
    assert main(["tune", str(trace), "--vary", "\x1b[2Jevil\u202e=1"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\u202e" not in err
    assert "\\x1b[2Jevil\\u202e" in err


def test_bad_trace_and_policy_are_located(tmp_path, capsys):
    """A broken trace line and a bad policy name their file and line."""
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"at": 0, "dependency": "a", "type": "request"}\n{"at": -1}\n')
    assert main(["tune", str(bad), "--vary", "failure_threshold=2,3"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}:2: ")
    policy = tmp_path / "p.toml"
    policy.write_text("cooldown_ms = 5000\nprobe_limit = -2\n")
    assert main(["tune", str(bad), "--policy", str(policy)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {policy}:2: probe_limit")
    assert main(["tune", str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'missing.jsonl'}")


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"failure_threshold": 2},
        {"failure_threshold": 8},
        {"cooldown_ms": 1000},
        {"cooldown_ms": 60_000, "success_threshold": 1},
        {"lease_ttl_ms": 50, "probe_limit": 3},
        {"mode": "shadow"},
    ],
)
def test_streaming_diff_is_diff_of_the_two_receipts(changes, trace, seed_trace):
    """receipt_diff (one streaming pass, no receipts kept) prints what diff prints for
    the two full receipts."""
    for path, base in ((trace, RECORDED_UNDER), (seed_trace, Policy())):
        other = Policy.from_dict({**base.to_dict(), **changes})
        events = [e for _, e in read_trace(path)]
        want = diff(replay(events, base), replay(events, other))
        assert receipt_diff(trace_inputs(str(path), base), base, other) == want
        assert receipt_diff(trace_inputs(str(path), base), other, base) == diff(
            replay(events, other), replay(events, base)
        )


def test_every_line_shape_counts_as_an_independent_replay(tmp_path):
    """Lines off the fast path (extra fields, no call id, spaces, an operator's isolate)
    and lines on it: the row of the file (the core's fast path) is the row of the same
    events fed one by one, and an in-memory replay's numbers."""
    from toolbreaker.cli._simulate import Inputs
    from toolbreaker.cli._simulate import trace_inputs as inputs_of
    from toolbreaker.cli._tune import evaluate

    events: list[dict] = []
    for i in range(3000):
        dep = ("sé✓", "b")[i % 2]
        call = f"c {i}" if i % 7 == 0 else f"c{i}"
        events.append({"at": i * 40, "dependency": dep, "type": "request", "call": call})
        kind = ("failure", "success", "failure", "ignored", "ambiguous")[i % 5]
        extra = {"failure": {"retry_after_ms": 5}, "success": {"duration_ms": 7}}.get(kind, {})
        outcome = {"at": i * 40 + 3, "dependency": dep, "type": kind, **extra}
        if i % 11:
            outcome["call"] = call
        events.append(outcome)
        if i == 1500:
            events.append(
                {"at": i * 40 + 4, "dependency": "b", "type": "isolate", "reason": "op ✓"}
            )
        if i == 1700:
            events.append({"at": i * 40 + 4, "dependency": "b", "type": "release"})
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    policy = Policy(failure_threshold=2, cooldown_ms=300, success_threshold=1)
    row = evaluate(inputs_of(str(path), policy), policy, 1, True)
    text = path.read_text(encoding="utf-8")
    assert row == evaluate(Inputs(str(path), False, policy, text), policy, 1, True)
    want = independent(path, policy)
    # The helper matches outcomes to requests by call id; 1 outcome in 11 here has none.
    del want["rejected_succeeded"], want["unknown"]
    assert {name: getattr(row, name) for name in want} == want
    assert row.opens > 0
    assert row.half_opens > 0


def test_impossible_trace_is_located(tmp_path, capsys):
    """An outcome the core's replay cannot settle names its file and line."""
    bad = tmp_path / "t.jsonl"
    bad.write_text(
        '{"at": 0, "dependency": "a", "type": "request", "call": "1"}\n'
        '{"at": 1, "dependency": "a", "type": "success", "call": "2"}\n'
    )
    assert main(["tune", str(bad), "--vary", "failure_threshold=2,3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: {bad}:2: success outcome for "a" settles no admitted call')
