"""replay, verify and diff under a boundary sheet: each breaker under its own row's policy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from toolbreaker.cli import main
from toolbreaker.core._breaker.receipt import load_receipt
from toolbreaker.core._canonical import sha256_hex

SHEET = """\
[defaults]
timeout_ms = 4000
failure_threshold = 3
cooldown_ms = 20000

[tools]
local = ["search_snapshot"]

[search.read]
tool = "search_catalog"
fallback = "search_snapshot"
failure_threshold = 1
cooldown_ms = 5000

[billing.default]
timeout_ms = 10000
failure_threshold = 2
"""

ROW = "failure_threshold = 1\ncooldown_ms = 5000\n"
DEFAULTS = "failure_threshold = 3\ncooldown_ms = 20000\n"


def request(dep: str, at: int, call: str) -> dict:
    return {"at": at, "dependency": dep, "type": "request", "call": call}


def failure(dep: str, at: int, call: str) -> dict:
    return {"at": at, "dependency": dep, "type": "failure", "call": call}


def calls(dep: str, count: int) -> list[dict]:
    """``count`` failing calls of ``dep``, one every 10 ms, then a request."""
    events = []
    for i in range(count):
        events += [request(dep, 10 * i, f"{dep}-{i}"), failure(dep, 10 * i + 1, f"{dep}-{i}")]
    return [*events, request(dep, 10 * count, f"{dep}-last")]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    events = [
        *calls("search:read", 2),
        *calls("search:read[tenant=acme]", 2),  # a scoped breaker of the same row
        *calls("billing", 2),
        *calls("other", 2),
    ]
    events.sort(key=lambda event: event["at"])
    paths = {
        "trace": tmp_path / "incident.jsonl",
        "sheet": tmp_path / "sheet.toml",
        "row": tmp_path / "row.toml",
        "defaults": tmp_path / "defaults.toml",
    }
    paths["trace"].write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    paths["sheet"].write_text(SHEET, encoding="utf-8")
    paths["row"].write_text(ROW, encoding="utf-8")
    paths["defaults"].write_text(DEFAULTS, encoding="utf-8")
    return paths


def replayed(capsys, *args: str) -> dict:
    assert main(["replay", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_breaker_replays_under_its_own_row(files, capsys):
    """A sheet's row decides its breaker (and its scoped ones); the defaults the rest."""
    sheet = replayed(capsys, files["trace"], "--policy", files["sheet"])
    under_row = replayed(capsys, files["trace"], "--policy", files["row"])
    under_defaults = replayed(capsys, files["trace"], "--policy", files["defaults"])
    deps = sheet["dependencies"]
    for name in ("search:read", "search:read[tenant=acme]"):
        assert deps[name]["transitions"] == under_row["dependencies"][name]["transitions"]
        assert deps[name]["opens"] == 1
        assert deps[name]["policy"]["failure_threshold"] == 1
    assert deps["other"] == under_defaults["dependencies"]["other"]  # no row: the defaults
    assert deps["billing"]["policy"]["failure_threshold"] == 2
    assert deps["billing"]["opens"] == 1
    assert sheet["policy"] == under_defaults["policy"]
    assert under_defaults["dependencies"]["billing"]["opens"] == 0


def test_a_flat_policy_receipt_keeps_its_bytes(seed_trace, seed_policy, capsys):
    """A flat policy is a sheet of defaults alone: the seed receipt's bytes are unchanged."""
    assert main(["replay", str(seed_trace), "--policy", str(seed_policy)]) == 0
    printed = capsys.readouterr().out.encode("utf-8")
    assert hashlib.sha256(printed).hexdigest() == (
        "f6eb338dfeaa8a47435735bc96487de02341ee5cafd891581618cc2fca991008"
    )
    assert b'"policy": {' not in printed.split(b'"dependencies"', 1)[1].split(b"\n  },")[0]


def test_a_sheet_with_only_defaults_gives_the_flat_receipt(files, tmp_path, capsys):
    """``[defaults]`` alone replays exactly as the same fields in a flat file."""
    only = tmp_path / "only.toml"
    only.write_text("[defaults]\n" + DEFAULTS, encoding="utf-8")
    assert main(["replay", str(files["trace"]), "--policy", str(only)]) == 0
    sheet = capsys.readouterr().out
    assert main(["replay", str(files["trace"]), "--policy", str(files["defaults"])]) == 0
    assert capsys.readouterr().out == sheet


def test_a_sheet_receipt_verifies_and_loads(files, tmp_path, capsys):
    """verify replays under the same sheet (exit 0), not under its defaults (exit 1)."""
    receipt = tmp_path / "r.json"
    assert main(["replay", str(files["trace"]), "--policy", str(files["sheet"])]) == 0
    receipt.write_text(capsys.readouterr().out, encoding="utf-8")
    load_receipt(receipt)  # the shape and the hash hold
    args = ["verify", str(receipt), str(files["trace"]), "--policy"]
    assert main([*args, str(files["sheet"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verified:")
    assert "and the 2 rows of its boundary sheet" in out
    assert main([*args, str(files["defaults"])]) == 1
    assert "differs" in capsys.readouterr().out


def test_diff_names_a_row_policy(files, tmp_path, capsys):
    """diff of the defaults' receipt and the sheet's says which breaker took a row's policy."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path, policy in ((a, files["defaults"]), (b, files["sheet"])):
        assert main(["replay", str(files["trace"]), "--policy", str(policy)]) == 0
        path.write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "[billing] policy: the defaults -> row policy " in out
    assert "[other]" not in out


def test_a_dependency_policy_without_its_version_is_refused(files, tmp_path, capsys):
    """load_receipt holds a row's ``policy`` and ``policy_version`` together."""
    assert main(["replay", str(files["trace"]), "--policy", str(files["sheet"])]) == 0
    doc = json.loads(capsys.readouterr().out)
    del doc["dependencies"]["billing"]["policy_version"]
    body = {k: v for k, v in doc.items() if k != "receipt_hash"}
    doc["receipt_hash"] = sha256_hex(body)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert main(["diff", str(path), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "policy and policy_version under a row of a boundary sheet" in err


def test_summary_names_a_row_policy(files, capsys):
    """--summary gives a breaker under a row of its own that row's policy version."""
    summary = replayed(capsys, files["trace"], "--policy", files["sheet"], "--summary")
    full = replayed(capsys, files["trace"], "--policy", files["sheet"])
    for name, dep in full["dependencies"].items():
        assert summary["dependencies"][name].get("policy_version") == dep.get("policy_version")
    assert "policy_version" not in summary["dependencies"]["other"]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[defaults]\nfailure_threshold = 0\n", 2, "defaults.failure_threshold"),
        ("[defaults]\ncooldown_ms = 1\n\n[search.read]\nbogus = 1\n", 5, "'bogus'"),
        ("[search.read]\ntimeout_ms = 1000\nfallback = 'nowhere'\n", 3, "not a registered tool"),
    ],
)
def test_a_bad_sheet_is_one_located_line(files, tmp_path, capsys, text, line, message):
    """The sheet's own parser refuses it: ``error: FILE:LINE: ...``, exit 2."""
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    for command in (["replay"], ["verify", str(files["trace"])]):
        assert main([*command, str(files["trace"]), "--policy", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith(f"error: {bad}:{line}: ")
        assert message in err
