"""toolbreaker simulate: the cascade figure, its numbers from the core, its error paths."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from toolbreaker.cli import _plot, main
from toolbreaker.cli._simulate import BINS, RetryOnly, Timeline, fixture_inputs, simulate
from toolbreaker.core._breaker.trace import parse_lines

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def lines(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def summary_totals(capsys, trace: str, policy: str | None) -> tuple[int, int]:
    """remote attempts and local rejections of `toolbreaker replay --summary`, summed."""
    args = ["replay", trace, "--summary"] + (["--policy", policy] if policy else [])
    assert main(args) == 0
    deps = json.loads(capsys.readouterr().out)["dependencies"].values()
    return sum(d["remote_attempts"] for d in deps), sum(d["local_rejections"] for d in deps)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A trace recorded by the live demo: a real breaker in front of the real tool service."""
    folder = tmp_path_factory.mktemp("recorded") / "run"
    assert main(["demo", "--save", str(folder)]) == 0
    return folder


def test_fixture_svg_shows_both_sides_with_core_totals(tmp_path, capsys, seed_trace, seed_policy):
    """By default simulate draws the seed fixture; the breaker's totals are replay's, and
    the figure says the input is synthetic."""
    out = tmp_path / "cascade.svg"
    assert main(["simulate", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    remote, rejected = summary_totals(capsys, str(seed_trace), str(seed_policy))
    assert (remote, rejected) == (6, 1)
    text = out.read_text(encoding="utf-8")
    ET.fromstring(text)  # well-formed XML
    assert f"remote attempts: {remote}" in text
    assert f"local rejections: {rejected}" in text
    # retry-only: 7 requests; the 3 failures retried twice each (the id-less successes
    # settle the oldest waiting requests, so the last request is the one without an outcome,
    # after a success: not retried)
    assert "remote attempts: 13" in text
    assert "local rejections: 0" in text
    assert "synthetic" in text
    assert "<dc:date>" not in text
    assert "retry-only: 13 remote attempts (7 requests + 6 retries)" in printed
    assert "breaker:    6 remote attempts, 1 local rejection" in printed


def test_svg_is_byte_identical_across_runs(tmp_path, capsys):
    """Two runs with the same input give the same SVG bytes (salted ids, no date)."""
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    assert main(["simulate", "--out", str(a)]) == 0
    assert main(["simulate", "--out", str(b)]) == 0
    capsys.readouterr()
    assert a.read_bytes() == b.read_bytes()


def test_png_has_the_png_magic(tmp_path, capsys):
    """--out FILE.png writes a PNG."""
    out = tmp_path / "cascade.png"
    assert main(["simulate", "--out", str(out)]) == 0
    capsys.readouterr()
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_recorded_trace_is_not_labelled_synthetic(recorded, tmp_path, capsys):
    """On a trace the live demo recorded, the breaker side is the trace's own receipt
    counts and the figure does not say synthetic."""
    trace, policy = str(recorded / "trace.jsonl"), str(recorded / "policy.toml")
    receipt = json.loads((recorded / "receipt.json").read_text())
    out = tmp_path / "recorded.svg"
    assert main(["simulate", trace, "--policy", policy, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    deps = receipt["dependencies"].values()
    remote = sum(d["remote_attempts"] for d in deps)
    rejected = sum(d["local_rejections"] for d in deps)
    assert rejected > 0
    text = out.read_text(encoding="utf-8")
    ET.fromstring(text)
    assert f"remote attempts: {remote}" in text
    assert f"local rejections: {rejected}" in text
    assert "synthetic" not in text
    assert f"breaker:    {remote} remote attempts" in printed


def test_another_policy_changes_the_breaker_side_only(tmp_path, capsys, seed_trace):
    """--policy on the fixture replays it under that policy; the retry-only side is the same."""
    policy = tmp_path / "p.toml"
    policy.write_text("failure_threshold = 5\n")
    out = tmp_path / "f.svg"
    assert main(["simulate", "--policy", str(policy), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert summary_totals(capsys, str(seed_trace), str(policy)) == (7, 0)
    assert "breaker:    7 remote attempts, 0 local rejections" in printed
    assert "retry-only: 13 remote attempts (7 requests + 6 retries)" in printed


def test_retry_only_model():
    """Each failed or ambiguous call is retried N times; an ignored outcome is not; a request
    without a recorded outcome takes its dependency's latest outcome."""
    trace = lines(
        {"at": 0, "dependency": "a", "type": "request", "call": "1"},
        {"at": 1, "dependency": "a", "type": "failure", "call": "1"},
        {"at": 2, "dependency": "a", "type": "request", "call": "2"},
        {"at": 3, "dependency": "a", "type": "ambiguous", "call": "2"},
        {"at": 4, "dependency": "a", "type": "request", "call": "3"},  # no outcome: failing
        {"at": 5, "dependency": "b", "type": "request", "call": "1"},
        {"at": 6, "dependency": "b", "type": "ignored", "call": "1"},
        {"at": 7, "dependency": "b", "type": "request", "call": "2"},  # no outcome: not failing
    )
    from toolbreaker.cli._simulate import Inputs
    from toolbreaker.core._breaker.policy import Policy

    inputs = Inputs("t.jsonl", False, Policy(failure_threshold=10), trace)
    cascade, timeline = simulate(inputs, retries=3, backoff_ms=10)
    assert cascade.requests == 5
    assert cascade.retries == 3 * 3
    assert cascade.retry_remote == 5 + 9
    assert timeline.total("retry_remote") == cascade.retry_remote
    assert (cascade.breaker_remote, cascade.breaker_rejected) == (5, 0)


def test_retry_only_retries_come_after_the_failure():
    """The k-th retry is backoff * 2**(k-1) after the failure (the model is deterministic)."""
    timeline = Timeline(["retry_remote"])
    model = RetryOnly(3, 100, timeline)
    for _, event in parse_lines(
        lines(
            {"at": 0, "dependency": "a", "type": "request", "call": "1"},
            {"at": 10, "dependency": "a", "type": "failure", "call": "1"},
        ).splitlines()
    ):
        model.feed(event)
    model.finish()
    xs, ys = timeline.cumulative("retry_remote")
    assert ys[-1] == 4
    assert xs[-1] == pytest.approx(0.41)  # the last retry at 10 + 400 ms


def test_timeline_stays_bounded_over_a_long_span():
    """Instants days apart keep at most BINS bins and every count."""
    timeline = Timeline(["x"])
    instants = range(0, 10 * 86_400_000, 86_400_000 // 7)
    for at in instants:
        timeline.add("x", at)
    assert len(timeline.counts["x"]) == BINS
    assert timeline.total("x") == len(instants)
    assert timeline.cumulative("x")[1][-1] == len(instants)
    assert timeline.cumulative("x")[0][-1] == instants[-1] / 1000


def test_fixture_is_the_bundled_seed(seed_policy):
    """The default input is the bundled fixture under its own policy."""
    from toolbreaker.core._breaker.policy import Policy

    inputs = fixture_inputs()
    assert inputs.synthetic
    assert inputs.policy == Policy.from_toml(seed_policy)


def test_missing_extra_is_one_line(tmp_path, monkeypatch, capsys):
    """Without matplotlib: one line naming the extra, exit 2, no file."""

    def missing(module: str, extra: str):
        raise ImportError(f"no {module}")

    monkeypatch.setattr(_plot, "require", missing)
    out = tmp_path / "f.svg"
    assert main(["simulate", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == "error: drawing a figure needs matplotlib: pip install 'toolbreaker[plot]'\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("figure.pdf", "--out: the file name must end in .svg or .png"),
        ("figure", "--out: the file name must end in .svg or .png"),
        ("missing/figure.svg", "--out: the parent directory does not exist"),
    ],
)
def test_bad_out_is_one_line(name, message, tmp_path, capsys):
    """A wrong suffix or a missing folder: one line naming the file, exit 2."""
    out = tmp_path / name
    assert main(["simulate", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {out}: {message}\n"
    assert not out.exists()


def test_existing_out_is_never_overwritten(tmp_path, capsys):
    """An existing file is an error before any work, and is left as it was."""
    out = tmp_path / "f.svg"
    out.write_text("mine")
    assert main(["simulate", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"error: {out}: --out would overwrite an existing file\n"
    assert out.read_text() == "mine"


def test_hostile_out_name_is_escaped(tmp_path, capsys):
    """A file name with terminal escapes is printed escaped."""
    out = tmp_path / "\x1b[31mred.pdf"
    assert main(["simulate", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\\x1b[31mred.pdf" in err


def test_bad_trace_line_is_located(tmp_path, capsys):
    """A trace that cannot be replayed: error FILE:LINE, exit 2, no figure."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(lines({"at": 0, "dependency": "a", "type": "request"}) + "{nope\n")
    out = tmp_path / "f.svg"
    assert main(["simulate", str(trace), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {trace}:2: malformed JSON")
    assert not out.exists()


def test_impossible_trace_is_located(tmp_path, capsys):
    """An outcome that settles nothing is the core replay's error, located."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(lines({"at": 0, "dependency": "a", "type": "success"}))
    assert main(["simulate", str(trace), "--out", str(tmp_path / "f.svg")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {trace}:1: success outcome")


def test_bad_policy_and_retries(tmp_path, capsys):
    """An invalid policy names its file and line; --retries out of range is one line."""
    policy = tmp_path / "p.toml"
    policy.write_text("failure_threshold = 0\n")
    assert main(["simulate", "--policy", str(policy), "--out", str(tmp_path / "f.svg")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {policy}:1: failure_threshold")
    assert main(["simulate", "--retries", "-1", "--out", str(tmp_path / "f.svg")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: toolbreaker simulate: argument --retries: must be a whole ")
    assert "from 0 to 10, got '-1'" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "f.svg").exists()


def test_a_boundary_sheet_gives_each_dependency_its_row(tmp_path, capsys, seed_trace):
    """simulate --policy SHEET: the breaker side is replay's totals under the same sheet."""
    sheet = tmp_path / "sheet.toml"
    sheet.write_text(
        "[defaults]\ntimeout_ms = 2000\nfailure_threshold = 5\n\n"
        "[search.default]\nfailure_threshold = 1\ncooldown_ms = 60000\n"
    )
    out = tmp_path / "f.svg"
    assert main(["simulate", "--policy", str(sheet), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    remote, rejected = summary_totals(capsys, str(seed_trace), str(sheet))
    assert rejected > 0  # the row's threshold of 1 opens search; the defaults' 5 would not
    assert summary_totals(capsys, str(seed_trace), None) != (remote, rejected)
    assert f"breaker:    {remote} remote attempts, {rejected} local rejection" in printed


def retried_by_model(*events: dict) -> int:
    """How many retries the retry-only model makes of these events (2 per retried call)."""
    model = RetryOnly(2, 10, Timeline(["retry_remote"]))
    for _, event in parse_lines(lines(*events).splitlines()):
        model.feed(event)
    model.finish()
    return model.retried // 2


def request(at: int, call: str) -> dict:
    return {"at": at, "dependency": "a", "type": "request", "call": call}


def outcome(at: int, kind: str, call: str) -> dict:
    return {"at": at, "dependency": "a", "type": kind, "call": call}


@pytest.mark.parametrize(
    ("events", "retried"),
    [
        # docs/lab.md: a request without an outcome takes the latest outcome before it;
        # after failure then ignored, the latest is ignored, which is not retried.
        (
            [
                request(0, "1"),
                outcome(1, "failure", "1"),
                request(2, "2"),
                outcome(3, "ignored", "2"),
                request(4, "3"),
            ],
            1,
        ),
        (
            [
                request(0, "1"),
                outcome(1, "ignored", "1"),
                request(2, "2"),
                outcome(3, "failure", "2"),
                request(4, "3"),
            ],
            2,
        ),
        (
            [
                request(0, "1"),
                outcome(1, "ambiguous", "1"),
                request(2, "2"),
                outcome(3, "ignored", "2"),
                request(4, "3"),
                outcome(5, "failure", "3"),
                request(6, "4"),
            ],
            3,
        ),
        ([request(0, "1")], 0),  # no outcome before it at all: nothing says it failed
        ([request(0, "1"), outcome(1, "ignored", "1")], 0),
        # taken at the time of the request: a later failure does not reach back
        ([request(0, "1"), request(1, "2"), outcome(2, "failure", "2")], 1),
        (
            [
                request(0, "1"),
                outcome(1, "failure", "1"),
                request(2, "2"),
                outcome(3, "success", "2"),
                request(4, "3"),
            ],
            1,
        ),
    ],
    ids=["failure-ignored", "ignored-failure", "mixed", "first", "ignored", "later", "success"],
)
def test_retry_only_takes_the_latest_outcome_even_ignored(events, retried):
    """An unanswered request takes its dependency's latest outcome, ``ignored`` included:
    after an ignored outcome it is not retried, whatever failed before (docs/lab.md)."""
    assert retried_by_model(*events) == retried
