"""toolbreaker verify: a receipt is exactly what its trace and policy produce, or not."""

from __future__ import annotations

import json
from pathlib import Path

from toolbreaker.cli import main
from toolbreaker.core._canonical import sha256_hex


def seed_receipt(seed_trace: Path, seed_policy: Path, tmp_path: Path, capsys) -> Path:
    main(["replay", str(seed_trace), "--policy", str(seed_policy)])
    path = tmp_path / "receipt.json"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    return path


def test_a_true_receipt_verifies(seed_trace, seed_policy, tmp_path, capsys):
    """The receipt replay printed verifies against the same trace and policy: exit 0."""
    receipt = seed_receipt(seed_trace, seed_policy, tmp_path, capsys)
    assert main(["verify", str(receipt), str(seed_trace), "--policy", str(seed_policy)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("verified:")


def test_a_resealed_edit_is_caught(seed_trace, seed_policy, tmp_path, capsys):
    """An edit with a recomputed hash passes diff's checksum but not verify: exit 1, where."""
    receipt = seed_receipt(seed_trace, seed_policy, tmp_path, capsys)
    doc = json.loads(receipt.read_text(encoding="utf-8"))
    doc["dependencies"]["search"]["transitions"][6]["reason"] = "probe-limit"
    body = {k: v for k, v in doc.items() if k != "receipt_hash"}
    doc["receipt_hash"] = sha256_hex(body)
    receipt.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert main(["diff", str(receipt), str(receipt)]) == 0  # the checksum alone is fooled
    capsys.readouterr()
    assert main(["verify", str(receipt), str(seed_trace), "--policy", str(seed_policy)]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert f"{receipt}:" in out
    assert '"search" transition #7' in out
    assert "probe-limit" in out


def test_another_policy_does_not_verify(seed_trace, seed_policy, tmp_path, capsys):
    """A receipt verified against another policy differs, and says so."""
    receipt = seed_receipt(seed_trace, seed_policy, tmp_path, capsys)
    other = tmp_path / "p.toml"
    other.write_text("failure_threshold = 4\n", encoding="utf-8")
    assert main(["verify", str(receipt), str(seed_trace), "--policy", str(other)]) == 1
    assert "differs" in capsys.readouterr().out


def test_a_truncated_receipt_does_not_verify(seed_trace, seed_policy, tmp_path, capsys):
    """A receipt cut short differs where it ends."""
    receipt = seed_receipt(seed_trace, seed_policy, tmp_path, capsys)
    text = receipt.read_text(encoding="utf-8")
    receipt.write_text(text[: len(text) // 2], encoding="utf-8")
    assert main(["verify", str(receipt), str(seed_trace), "--policy", str(seed_policy)]) == 1
    assert "ends early" in capsys.readouterr().out


def test_a_missing_receipt_is_a_usage_error(seed_trace, tmp_path, capsys):
    """An unreadable receipt is one error line and exit 2."""
    missing = tmp_path / "nope.json"
    assert main(["verify", str(missing), str(seed_trace)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {missing}: cannot read")
