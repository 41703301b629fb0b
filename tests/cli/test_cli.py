"""The command line: replay, diff, demo, and one-line errors with file and line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolbreaker.cli import main


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def lines(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


REQ = {"at": 0, "dependency": "search", "type": "request"}


def test_replay_prints_the_receipt(seed_trace, seed_policy, capsys):
    """replay prints a receipt with a hash to stdout and exits 0."""
    assert main(["replay", str(seed_trace), "--policy", str(seed_policy)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["schema"] == "toolbreaker.receipt/v1"
    assert len(receipt["receipt_hash"]) == 64


def test_diff_exit_codes(seed_trace, seed_policy, tmp_path, capsys):
    """diff exits 0 for equal receipts and 1 for different ones, printing the changes."""
    main(["replay", str(seed_trace), "--policy", str(seed_policy)])
    a = write(tmp_path, "a.json", capsys.readouterr().out)
    stricter = write(tmp_path, "p.toml", "failure_threshold = 4\n")
    main(["replay", str(seed_trace), "--policy", stricter])
    b = write(tmp_path, "b.json", capsys.readouterr().out)
    assert main(["diff", a, a]) == 0
    assert "equal" in capsys.readouterr().out
    assert main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert "policy.failure_threshold: 3 -> 4" in out
    assert "[search] first differing transition #6:" in out


def test_diff_refuses_an_edited_receipt(seed_trace, tmp_path, capsys):
    """A receipt whose content no longer matches its hash is a usage error."""
    main(["replay", str(seed_trace)])
    doc = json.loads(capsys.readouterr().out)
    doc["dependencies"]["search"]["opens"] = 0
    edited = write(tmp_path, "e.json", json.dumps(doc))
    assert main(["diff", edited, edited]) == 2
    assert "receipt_hash does not match" in capsys.readouterr().err


def test_demo_replays_the_seed_fixture(capsys):
    """demo --fixture prints the transitions and the receipt hash."""
    assert main(["demo", "--fixture"]) == 0
    out = capsys.readouterr().out
    assert "probe-quorum" in out
    assert "REJECTED locally" in out
    assert "receipt_hash" in out


def test_initial_state_can_be_corrupt(tmp_path, capsys):
    """A corrupt initial state loads open and is flagged, it does not abort the replay."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    state = write(tmp_path, "s.json", json.dumps({"search": {"state": "sideways"}}))
    assert main(["replay", trace, "--initial-state", state]) == 0
    dep = json.loads(capsys.readouterr().out)["dependencies"]["search"]
    assert dep["recovered_from_corruption"] is True
    assert dep["transitions"][0]["reason"] == "cooldown"


HOSTILE = [
    ("{not json\n", 1, "malformed JSON"),
    (lines(REQ) + "[1, 2]\n", 2, "must be a JSON object"),
    (lines({**REQ, "type": "explode"}), 1, "unknown event type 'explode'"),
    (lines({"at": 0, "type": "request"}), 1, "missing field 'dependency'"),
    (lines({**REQ, "at": 1.5}), 1, "integer number of milliseconds"),
    (lines({**REQ, "at": "5"}), 1, "integer number of milliseconds"),
    (lines({**REQ, "at": -3}), 1, "must not be negative"),
    (lines({**REQ, "at": 10}, REQ), 2, 'time went backwards for dependency "search"'),
    (lines({**REQ, "type": "success"}), 1, "settles no admitted call"),
    (lines({**REQ, "call": "a"}, {**REQ, "call": "a"}), 2, 'duplicate call id "a"'),
    (
        lines({**REQ, "call": "a"}, {**REQ, "type": "failure", "call": "b"}),
        2,
        "settles no admitted call",
    ),
    (lines({**REQ, "color": "red"}), 1, "unknown field 'color'"),
    (lines({**REQ, "retry_after_ms": 5}), 1, "failure events only"),
    ("\n\n" + lines({**REQ, "dependency": ""}), 3, "non-empty string"),
]


@pytest.mark.parametrize(("text", "line", "message"), HOSTILE)
def test_hostile_traces_give_one_line_errors(text, line, message, tmp_path, capsys):
    """Every bad trace gives exit 2 and `error: FILE:LINE: message` on stderr."""
    trace = write(tmp_path, "trace.jsonl", text)
    assert main(["replay", trace]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {trace}:{line}: ")
    assert message in err
    assert err.count("\n") == 1


def test_invalid_policy_names_file_and_line(tmp_path, capsys):
    """An invalid policy is exit 2 with the file, the key's line and the field."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    policy = write(tmp_path, "p.toml", "failure_threshold = 3\nprobe_limit = 0\n")
    assert main(["replay", trace, "--policy", policy]) == 2
    assert capsys.readouterr().err == (f"error: {policy}:2: probe_limit must be positive, got 0\n")


def test_missing_trace_file(tmp_path, capsys):
    """A missing file is a one-line error."""
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_no_traceback_from_the_real_executable(tmp_path):
    """The installed command prints no traceback for user mistakes."""
    trace = write(tmp_path, "t.jsonl", "{oops\n")
    done = subprocess.run(
        [sys.executable, "-m", "toolbreaker", "replay", trace],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {trace}:1: malformed JSON")


def test_live_demo_shows_local_rejections_and_recovery(capsys, tmp_path):
    """The live demo opens on the failing tool, rejects locally, recovers, and saves a
    trace that replays to the same receipt."""
    assert main(["demo", "--save", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "OUT OF SERVICE (local, nothing sent)" in out
    assert "final state: closed" in out
    assert "search_catalog_snapshot" in out
    saved = (tmp_path / "receipt.json").read_text()
    assert (
        main(["replay", str(tmp_path / "trace.jsonl"), "--policy", str(tmp_path / "policy.toml")])
        == 0
    )
    assert capsys.readouterr().out == saved


def test_a_loaded_machine_tells_the_demo_the_same_story(capsys, monkeypatch):
    """The demo's breaker runs on the turns' clock, not the wall's: every request slowed
    by a quarter of a second (a busy machine) still opens on turn 1, rejects locally
    through turn 4 and closes on turn 5, with the same receipt hash as an unhurried run."""
    from toolbreaker.cli import _live

    assert main(["demo"]) == 0
    quick = capsys.readouterr().out
    fast = _live.request_json

    def slow(*args: object, **kwargs: object) -> object:
        time.sleep(0.25)
        return fast(*args, **kwargs)

    monkeypatch.setattr(_live, "request_json", slow)
    assert main(["demo"]) == 0
    loaded = capsys.readouterr().out
    assert "final state: closed" in loaded
    assert loaded.count("OUT OF SERVICE (local, nothing sent)") == 3

    def table(out: str) -> list[str]:  # the turns' rows and the receipt's hash
        return [
            line
            for line in out.splitlines()
            if "receipt_hash" in line or line[:6].strip().isdigit()
        ]

    assert table(loaded) == table(quick)


def test_retry_only_demo_sends_more_remote_attempts(capsys):
    """Without the breaker the same turns hit the failing provider far more often."""
    assert main(["demo", "--retry-only"]) == 0
    out = capsys.readouterr().out
    attempts = int(out.split("remote attempts on the failing search provider:")[1].split()[0])
    assert attempts >= 16
    assert "gave up" in out


def test_fixture_demo(capsys):
    """demo --fixture replays the seed article's fixture."""
    assert main(["demo", "--fixture"]) == 0
    assert "probe-quorum" in capsys.readouterr().out
