"""Hostile input: every bad file is one located line and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from process_helpers import read_then_close
from toolbreaker.cli import main
from toolbreaker.core._canonical import sha256_hex

DEEP = "[" * 100_000
HUGE = "9" * 4_400
REQ = {"at": 0, "dependency": "search", "type": "request"}


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def lines(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def one_error(capsys: pytest.CaptureFixture[str], code: int, where: str) -> str:
    """The command exited 2 with exactly one ``error: FILE:LINE: ...`` line."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {where}"), err
    return err


def resealed(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "receipt_hash"}
    return json.dumps({**body, "receipt_hash": sha256_hex(body)})


@pytest.fixture
def receipt(tmp_path, capsys) -> dict:
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    main(["replay", trace])
    return json.loads(capsys.readouterr().out)


# -- deep nesting ------------------------------------------------------------------


def test_deep_nesting_in_a_trace_line(tmp_path, capsys):
    """100,000 levels of ``[`` in a trace line are one error naming line 2."""
    trace = write(tmp_path, "t.jsonl", lines(REQ) + DEEP + "\n")
    one_error(capsys, main(["replay", trace]), f"{trace}:2: ")


def test_deep_nesting_in_an_initial_state(tmp_path, capsys):
    """A deeply nested initial state is one error."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    state = write(tmp_path, "s.json", '{"search": ' + DEEP)
    one_error(capsys, main(["replay", trace, "--initial-state", state]), f"{state}")


def test_deep_nesting_in_a_receipt(tmp_path, capsys):
    """A deeply nested receipt is one error."""
    bad = write(tmp_path, "r.json", DEEP)
    one_error(capsys, main(["diff", bad, bad]), bad)


def test_deep_nesting_in_a_policy(tmp_path, capsys):
    """A policy nested 1,000 levels deep is one error."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    policy = write(tmp_path, "p.toml", "x = " + "[" * 1_000 + "]" * 1_000 + "\n")
    one_error(capsys, main(["replay", trace, "--policy", policy]), policy)


def test_deep_nesting_in_check_run_arguments(tmp_path, capsys):
    """check-run arguments nested 900 levels deep are one error naming the line."""
    args = '{"q": ' + "[" * 900 + "]" * 900 + "}"
    run = write(tmp_path, "r.jsonl", '{"at": 0, "tool": "search", "args": ' + args + "}\n")
    one_error(capsys, main(["check-run", run]), f"{run}:1: ")


# -- huge integers -------------------------------------------------------------------


def test_huge_integer_time_in_a_trace(tmp_path, capsys):
    """A 4,400-digit ``at`` is one error naming the line."""
    trace = write(tmp_path, "t.jsonl", f'{{"at": {HUGE}, "dependency": "s", "type": "request"}}\n')
    one_error(capsys, main(["replay", trace]), f"{trace}:1: ")


def test_a_time_beyond_the_bound_is_refused(tmp_path, capsys):
    """A time that is a valid JSON integer but beyond 2**53 ms is refused, not replayed."""
    at = 2**53
    trace = write(tmp_path, "t.jsonl", lines({**REQ, "at": at}))
    err = one_error(capsys, main(["replay", trace]), f"{trace}:1: ")
    assert "time" in err


def test_huge_integer_in_a_policy(tmp_path, capsys):
    """A 4,400-digit policy value is one error."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    policy = write(tmp_path, "p.toml", f"cooldown_ms = {HUGE}\n")
    one_error(capsys, main(["replay", trace, "--policy", policy]), policy)


def test_huge_integer_in_a_state(tmp_path, capsys):
    """A 4,400-digit number in an initial state is one error."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    state = write(tmp_path, "s.json", f'{{"search": {{"state": "closed", "generation": {HUGE}}}}}')
    one_error(capsys, main(["replay", trace, "--initial-state", state]), state)


def test_huge_integer_in_a_check_run_record(tmp_path, capsys):
    """A 4,400-digit ``at`` in a run record is one error naming the line."""
    run = write(tmp_path, "r.jsonl", f'{{"at": {HUGE}, "tool": "search"}}\n')
    one_error(capsys, main(["check-run", run]), f"{run}:1: ")


# -- lone surrogates -------------------------------------------------------------------


def test_lone_surrogate_dependency(tmp_path, capsys):
    """A dependency named with a lone surrogate is one error, not a UnicodeEncodeError."""
    trace = write(tmp_path, "t.jsonl", '{"type":"request","at":0,"dependency":"\\ud800"}\n')
    one_error(capsys, main(["replay", trace]), f"{trace}:1: ")


def test_lone_surrogate_state_key(tmp_path, capsys):
    """An initial-state key with a lone surrogate is one error."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    state = write(tmp_path, "s.json", '{"\\ud800": {"state": "closed"}}')
    one_error(capsys, main(["replay", trace, "--initial-state", state]), state)


def test_a_recorded_trace_of_an_undecodable_name_replays(tmp_path, capsys):
    """A breaker named with os.fsdecode(b"search-\\xff") records a trace that replays."""
    from toolbreaker import Breaker, TraceRecorder

    path = tmp_path / "t.jsonl"
    breaker = Breaker(os.fsdecode(b"search-\xff"), timeout=1.0)
    with TraceRecorder(path) as recorder:
        recorder.attach(breaker)
        breaker.call(lambda: None)
    breaker.close()
    assert main(["replay", str(path)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert list(receipt["dependencies"]) == ["search-\\udcff"]


# -- receipts of the wrong shape ---------------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.__setitem__("dependencies", {"s": 5}),
        lambda d: d.__setitem__("policy", "x"),
        lambda d: d["dependencies"]["search"].__setitem__("transitions", 7),
        lambda d: d["dependencies"]["search"].__setitem__("final_state", []),
        lambda d: d["dependencies"]["search"]["transitions"].__setitem__(0, "x"),
    ],
)
def test_diff_on_a_resealed_receipt_of_the_wrong_shape(receipt, edit, tmp_path, capsys):
    """diff on a receipt resealed after a shape-breaking edit is one error."""
    edit(receipt)
    bad = write(tmp_path, "bad.json", resealed(receipt))
    one_error(capsys, main(["diff", bad, bad]), bad)


def test_diff_on_a_receipt_with_nan(receipt, tmp_path, capsys):
    """NaN in a receipt is one error."""
    text = json.dumps(receipt).replace('"opens": 0', '"opens": NaN')
    bad = write(tmp_path, "bad.json", text)
    one_error(capsys, main(["diff", bad, bad]), bad)


def test_duplicate_keys_in_a_trace_are_an_error(tmp_path, capsys):
    """The last of two equal keys does not silently win."""
    trace = write(
        tmp_path, "t.jsonl", '{"at": 0, "dependency": "a", "dependency": "b", "type": "request"}\n'
    )
    err = one_error(capsys, main(["replay", trace]), f"{trace}:1: ")
    assert "duplicate key" in err


def test_duplicate_keys_in_a_state_load_it_as_corrupt(tmp_path, capsys):
    """A persisted state with two ``state`` keys loads as corrupt (open, flagged)."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    state = write(tmp_path, "s.json", '{"search": {"state": "open", "state": "closed"}}')
    assert main(["replay", trace, "--initial-state", state]) == 0
    dep = json.loads(capsys.readouterr().out)["dependencies"]["search"]
    assert dep["recovered_from_corruption"] is True


# -- endless input -------------------------------------------------------------------


MEMORY_CAP = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (512 * 1024 * 1024, 512 * 1024 * 1024))
from toolbreaker.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "/dev/zero"],
        ["replay", "T", "--policy", "/dev/zero"],
        ["replay", "T", "--initial-state", "/dev/zero"],
        ["diff", "/dev/zero", "/dev/zero"],
        ["check-run", "/dev/zero"],
        ["check-run", "T", "--budget", "/dev/zero"],
    ],
)
def test_endless_input_is_one_error_under_a_memory_cap(argv, tmp_path):
    """/dev/zero as any file argument is one error, within 512 MB of address space."""
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    argv = [trace if a == "T" else a for a in argv]
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_CAP, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: /dev/zero"), proc.stderr


# -- untrusted text on the terminal ------------------------------------------------------

HOSTILE = "x\x1b]0;pwned\x07\x1b[2J\r\nerror: forged\u202e\x9b1A"


def clean(text: str) -> None:
    for char in ("\x1b", "\x07", "\r", "\u202e", "\x9b"):
        assert char not in text, repr(text)


def test_diff_escapes_dependency_names(tmp_path, capsys):
    """Names with ESC, OSC, CR, LF, U+202E and U+009B are printed escaped."""
    a = write(tmp_path, "a.jsonl", lines({**REQ, "dependency": HOSTILE}))
    b = write(tmp_path, "b.jsonl", lines({**REQ, "dependency": HOSTILE, "call": "c\x1b"}))
    main(["replay", a])
    ra = write(tmp_path, "a.json", capsys.readouterr().out)
    main(["replay", b])
    rb = write(tmp_path, "b.json", capsys.readouterr().out)
    assert main(["diff", ra, rb]) == 1
    out = capsys.readouterr().out
    clean(out)
    assert "\\x1b" in out
    assert not any(line.startswith("error:") for line in out.splitlines())


def test_replay_json_keeps_names_exact(tmp_path, capsys):
    """JSON output is exact: the receipt holds the name as it was."""
    trace = write(tmp_path, "t.jsonl", lines({**REQ, "dependency": HOSTILE}))
    assert main(["replay", trace]) == 0
    assert list(json.loads(capsys.readouterr().out)["dependencies"]) == [HOSTILE]


def test_check_run_escapes_tool_names(tmp_path, capsys):
    """check-run prints hostile tool names escaped."""
    run = write(tmp_path, "r.jsonl", json.dumps({"at": 0, "tool": HOSTILE}) + "\n")
    assert main(["check-run", run]) == 0
    clean(capsys.readouterr().out)


def test_error_messages_are_escaped(tmp_path, capsys):
    """An error that echoes a hostile value prints it escaped, still on one line."""
    trace = write(tmp_path, "t.jsonl", lines({**REQ, "type": HOSTILE}))
    err = one_error(capsys, main(["replay", trace]), f"{trace}:1: ")
    clean(err)


def test_registry_errors_escape_table_names(tmp_path):
    """Registry.from_toml errors do not echo raw ESC or newlines from quoted table names."""
    from toolbreaker import Registry
    from toolbreaker.errors import PolicyError

    sheet = write(tmp_path, "s.toml", '["a\\u001b[2J\\nerror: x".read]\nbogus = 1\n')
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(sheet)
    clean(str(info.value))
    assert "\n" not in str(info.value)


# -- demo --save -----------------------------------------------------------------------


def test_demo_save_onto_an_existing_file_fails_first(tmp_path, capsys):
    """demo --save onto a file is one error before anything runs."""
    target = write(tmp_path, "f", "")
    one_error(capsys, main(["demo", "--save", target]), target)
    assert capsys.readouterr().out == ""


def test_demo_save_into_a_missing_parent_fails_first(tmp_path, capsys):
    """demo --save into a missing parent is one error before anything runs."""
    target = str(tmp_path / "no" / "such")
    one_error(capsys, main(["demo", "--save", target]), target)


def test_demo_fixture_save_writes_the_files(tmp_path, capsys):
    """demo --fixture --save DIR writes the trace, policy and receipt it replayed."""
    target = tmp_path / "out"
    assert main(["demo", "--fixture", "--save", str(target)]) == 0
    capsys.readouterr()
    assert (
        main(["replay", str(target / "trace.jsonl"), "--policy", str(target / "policy.toml")]) == 0
    )
    replayed = capsys.readouterr().out
    assert replayed == (target / "receipt.json").read_text(encoding="utf-8")


# -- output ------------------------------------------------------------------------------


def test_output_to_dev_full_is_one_error(tmp_path):
    """Writing to /dev/full is one error and exit 2."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    trace = write(tmp_path, "t.jsonl", lines(REQ))
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "toolbreaker", "replay", trace],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_output_to_a_closed_pipe_is_quiet(tmp_path):
    """A reader that stops early (``| head``) ends the command quietly."""
    trace = write(tmp_path, "t.jsonl", lines(*({**REQ, "call": f"c{i}"} for i in range(5000))))
    code, err = read_then_close([sys.executable, "-m", "toolbreaker", "replay", trace])
    assert "Traceback" not in err, err
    assert code in (0, 141), err


@pytest.mark.slow  # 300,000 steps: about 15 s of CPU, and nothing in it depends on the interpreter
def test_check_run_streams_a_long_run(tmp_path):
    """check-run reads the run as a stream: 300,000 steps fit under a 120 MB cap (main: 196 MB)."""
    run = tmp_path / "r.jsonl"
    with run.open("w") as out:
        for i in range(300_000):
            out.write(f'{{"at": {i}, "cost": "0"}}\n')
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_CAP.replace("512", "120"), "check-run", str(run)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
