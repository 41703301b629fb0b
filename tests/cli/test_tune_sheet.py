"""toolbreaker tune under a boundary sheet: candidates vary the defaults or one row."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_tune import independent, read_csv, record

from toolbreaker import Registry
from toolbreaker.cli import main
from toolbreaker.cli._sheet import load_sheet

SHEET = """\
[defaults]
timeout_ms = 2000
failure_threshold = 3
cooldown_ms = 5000
success_threshold = 2

[search.default]
tool = "search_catalog"
owner = "catalog-team"
failure_threshold = 4

[billing.default]
retryable = false
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("tune-sheet") / "trace.jsonl")


@pytest.fixture
def sheet(tmp_path: Path) -> Path:
    path = tmp_path / "sheet.toml"
    path.write_text(SHEET, encoding="utf-8")
    return path


def test_a_row_is_varied_and_every_row_matches_a_replay(trace, sheet, tmp_path, capsys):
    """--vary search.default.failure_threshold: each candidate is the sheet with that row
    changed; its numbers are an independent replay's under the same sheet."""
    table = tmp_path / "t.csv"
    args = ["tune", str(trace), "--policy", str(sheet), "--out", str(table)]
    assert main([*args, "--vary", "search.default.failure_threshold=2,4,8"]) == 0
    captured = capsys.readouterr()
    rows = read_csv(table)
    assert [row["search.default.failure_threshold"] for row in rows] == ["2", "4", "8"]
    assert [row["current"] for row in rows] == ["0", "1", "0"]  # the sheet's own value
    current = load_sheet(str(sheet))
    for row, threshold in zip(rows, (2, 4, 8), strict=True):
        candidate = tmp_path / f"c{threshold}.toml"
        candidate.write_text(
            SHEET.replace("failure_threshold = 4", f"failure_threshold = {threshold}")
        )
        expected = independent(trace, load_sheet(str(candidate)))
        assert int(row["opens"]) == expected["opens"]
        assert int(row["remote_attempts"]) == expected["remote"]
        assert int(row["local_rejections"]) == expected["rejected"]
        assert int(row["rejected_succeeded"]) == expected["rejected_succeeded"]
    assert len({row["opens"] for row in rows}) > 1  # the row's value matters
    assert current.rows["search"].failure_threshold == 4
    assert captured.err.splitlines() == [f"tune: replayed candidate {n} of 3" for n in (1, 2, 3)]


def test_a_bare_field_varies_the_defaults_rows_keep_their_own(trace, sheet, tmp_path, capsys):
    """A bare FIELD goes in [defaults]: billing inherits it, search keeps its own 4."""
    table = tmp_path / "t.csv"
    args = ["tune", str(trace), "--policy", str(sheet), "--out", str(table)]
    args += ["--vary", "failure_threshold=1,2", "--write", "2", "--to", str(tmp_path / "w.toml")]
    assert main(args) == 0
    capsys.readouterr()
    written = Registry.from_toml(tmp_path / "w.toml")
    rows = written.boundaries()
    assert written.default_policy.failure_threshold == 1
    assert rows[("billing", "default")].policy.failure_threshold == 1
    assert rows[("search", "default")].policy.failure_threshold == 4
    # Everything else the sheet says survives the round trip.
    assert rows[("search", "default")].tool == "search_catalog"
    assert rows[("search", "default")].owner == "catalog-team"
    assert rows[("billing", "default")].retryable is False
    assert written.default_timeout == 2.0
    assert [row["current"] for row in read_csv(table)] == ["1", "0", "0"]  # added first


def test_write_of_a_row_gives_the_receipt_diff_of_that_row(trace, sheet, tmp_path, capsys):
    """--write of a row candidate prints the diff: only the varied row's breaker changes."""
    to = tmp_path / "w.toml"
    args = ["tune", str(trace), "--policy", str(sheet)]
    args += ["--vary", "search.default.failure_threshold=1", "--write", "2", "--to", str(to)]
    assert main(args) == 0
    out = capsys.readouterr().out
    diff = out.split("receipt diff of", 1)[1]
    assert "[search] policy.failure_threshold: 4 -> 1" in diff
    assert "[billing]" not in diff
    receipts = []
    for policy in (sheet, to):
        assert main(["replay", str(trace), "--policy", str(policy)]) == 0
        receipts.append(tmp_path / f"{len(receipts)}.json")
        receipts[-1].write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["diff", *map(str, receipts)]) == 1
    assert capsys.readouterr().out.strip() == diff.split("\n", 1)[1].strip()


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("nowhere.read.failure_threshold=2", "the policy has no row [nowhere.read] to vary"),
        ("search.default.nope=2", "--vary: unknown policy field 'search.default.nope'"),
        ("search.default.failure_threshold=0", "search.default.failure_threshold must be"),
    ],
)
def test_a_bad_row_vary_is_one_line(trace, sheet, capsys, vary, message):
    """A row the sheet lacks, a field no policy has, a bad value: one line, exit 2."""
    assert main(["tune", str(trace), "--policy", str(sheet), "--vary", vary]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert message in err
