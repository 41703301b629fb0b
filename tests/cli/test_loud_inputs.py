"""Inputs that must fail, loudly: one line naming what is wrong, exit 2, never a pass.

A file with nothing to judge is no green light for CI; a missing extra or an option out
of range is one line naming what to do, never a traceback or a silent default.
"""

from __future__ import annotations

import pytest

from toolbreaker.cli import main
from toolbreaker.testing import shipped_scenarios

SHIPPED = {p.stem: str(p) for p in shipped_scenarios()}
GUARDED = "toolbreaker.testing:scripted_agent"


def one_error_line(err: str, *words: str) -> None:
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    for word in words:
        assert word in err, err


# -- a file with nothing to judge (issue 34, item 6) -----------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n", 'name = "empty"\nbehaviour = "insist"\n'])
def test_exercising_a_scenario_without_a_fault_is_an_error(text, tmp_path, capsys):
    """`toolbreaker exercise empty.toml` used to print "1 of 1 scenario(s) held every
    promise", exit 0: CI went green having exercised nothing. A scenario that scripts no
    fault is one line naming the file, exit 2, and nothing runs."""
    path = tmp_path / "empty.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["exercise", str(path), "--agent", GUARDED]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_error_line(err, f"{path}:", "no fault", "nothing to exercise")


@pytest.mark.parametrize("text", ["", "\n", "  \n\n\t\n"])
@pytest.mark.parametrize(
    "command",
    [
        ["replay"],
        ["replay", "--summary"],
        ["tune"],
        ["tune", "--vary", "failure_threshold=2,3"],
    ],
)
def test_replaying_or_tuning_a_trace_without_an_event_is_an_error(command, text, tmp_path, capsys):
    """`replay` and `tune` on an empty (or blank) trace exited 0 with a receipt or a table
    of zeros. A trace with no event is one line naming the file, exit 2."""
    path = tmp_path / "empty.jsonl"
    path.write_text(text, encoding="utf-8")
    assert main([*command[:1], str(path), *command[1:]]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_error_line(err, f"{path}:", "no event", "nothing to")


def test_verifying_against_a_trace_without_an_event_is_an_error(seed_trace, tmp_path, capsys):
    """`verify` replays the trace the same way: no event, one line, exit 2."""
    receipt = tmp_path / "receipt.json"
    assert main(["replay", str(seed_trace)]) == 0
    receipt.write_text(capsys.readouterr().out, encoding="utf-8")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert main(["verify", str(receipt), str(empty)]) == 2
    one_error_line(capsys.readouterr().err, f"{empty}:", "no event")


def test_simulating_a_trace_without_an_event_is_an_error(tmp_path, capsys):
    """`simulate` drew a figure of zeros from an empty trace: one line, exit 2, no file."""
    pytest.importorskip("matplotlib")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    figure = tmp_path / "f.svg"
    assert main(["simulate", str(empty), "--out", str(figure)]) == 2
    one_error_line(capsys.readouterr().err, f"{empty}:", "no event")
    assert not figure.exists()
