"""Receipts: the seed fixture as a contract, determinism, and diffs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolbreaker import Policy
from toolbreaker.core import Event, diff, read_trace, replay
from toolbreaker.core._breaker.receipt import dump_receipt
from toolbreaker.core._canonical import sha256_hex


def seed_receipt(seed_trace: Path, seed_policy: Path) -> dict:
    return replay([e for _, e in read_trace(seed_trace)], Policy.from_toml(seed_policy))


def test_seed_fixture_contract(seed_trace, seed_policy):
    """Search opens on the third failure, rejects early, probes at the deadline, closes on two
    successes; billing stays closed."""
    receipt = seed_receipt(seed_trace, seed_policy)
    search = receipt["dependencies"]["search"]
    reasons = [t["reason"] for t in search["transitions"]]
    assert reasons == [
        "call-admitted",
        "qualifying-failure",
        "call-admitted",
        "qualifying-failure",
        "call-admitted",
        "qualifying-failure",
        "cooldown",
        "probe-admitted",
        "probe-success",
        "probe-admitted",
        "probe-quorum",
    ]
    opened = search["transitions"][5]
    assert (opened["from"], opened["to"], opened["event"]["at"]) == ("closed", "open", 25)
    assert search["transitions"][7]["event"]["at"] == 20_025
    assert (search["remote_attempts"], search["local_rejections"], search["opens"]) == (5, 1, 1)
    assert search["final_state"]["state"] == "closed"
    billing = receipt["dependencies"]["billing"]
    assert billing["final_state"]["state"] == "closed"
    assert (billing["remote_attempts"], billing["local_rejections"], billing["opens"]) == (1, 0, 0)


def test_receipt_names_schema_policy_and_version(seed_trace, seed_policy):
    """A receipt carries its schema, the policy and the policy version."""
    receipt = seed_receipt(seed_trace, seed_policy)
    policy = Policy.from_toml(seed_policy)
    assert receipt["schema"] == "toolbreaker.receipt/v1"
    assert receipt["policy"] == policy.to_dict()
    assert receipt["policy_version"] == policy.version


def test_hash_covers_everything_else(seed_trace, seed_policy):
    """receipt_hash is the SHA-256 of the canonical JSON of the rest of the receipt."""
    receipt = seed_receipt(seed_trace, seed_policy)
    body = {k: v for k, v in receipt.items() if k != "receipt_hash"}
    assert receipt["receipt_hash"] == sha256_hex(body)


def test_byte_identical_across_processes(seed_trace, seed_policy, tmp_path):
    """Two separate processes print byte-identical receipts for the same input."""
    command = [
        sys.executable,
        "-m",
        "toolbreaker",
        "replay",
        str(seed_trace),
        "--policy",
        str(seed_policy),
    ]
    env = {"PYTHONHASHSEED": "1", "PATH": ""}
    first = subprocess.run(command, capture_output=True, check=True, env=env).stdout
    second = subprocess.run(
        command, capture_output=True, check=True, env={**env, "PYTHONHASHSEED": "2"}
    ).stdout
    assert first == second
    assert first == dump_receipt(seed_receipt(seed_trace, seed_policy)).encode()


def test_one_changed_event_changes_hash_and_diff(seed_trace, seed_policy):
    """Turning the third failure into a success gives another hash and a non-empty diff."""
    policy = Policy.from_toml(seed_policy)
    events = [e for _, e in read_trace(seed_trace)]
    changed = [
        Event("success", e.at, e.dependency) if (e.dependency, e.at) == ("search", 25) else e
        for e in events
    ]
    a, b = replay(events, policy), replay(changed, policy)
    assert a["receipt_hash"] != b["receipt_hash"]
    lines = diff(a, b)
    assert lines[0] == "[search] first differing transition #6:"
    assert "qualifying-failure" in lines[1]
    assert "success" in lines[2]
    assert any(line.startswith("[search] opens: 1 -> 0") for line in lines)


def test_threshold_change_shows_as_transition_diff(seed_trace, seed_policy):
    """A policy change is reviewed as a transition diff before deployment."""
    events = [e for _, e in read_trace(seed_trace)]
    a = replay(events, Policy.from_toml(seed_policy))
    b = replay(events, Policy(failure_threshold=4, cooldown_ms=20_000))
    lines = diff(a, b)
    assert "policy.failure_threshold: 3 -> 4" in lines
    assert "[search] final state: closed -> closed" not in lines
    assert any("first differing transition" in line for line in lines)


def test_equal_receipts_have_no_diff(seed_trace, seed_policy):
    """diff of a receipt with itself is empty."""
    receipt = seed_receipt(seed_trace, seed_policy)
    assert diff(receipt, receipt) == []


def test_trace_without_retry_after_is_unchanged_by_the_field():
    """Events without retry_after_ms serialise exactly as before the field existed."""
    assert Event("failure", 1, "d", call="c").to_dict() == {"type": "failure", "at": 1, "call": "c"}


def test_stricter_policy_replays_outcomes_of_rejected_calls_as_not_admitted(
    seed_trace, seed_policy
):
    """Under a lower threshold the third request is rejected; the trace's outcome for it
    settles nothing (not-admitted) and the diff shows the earlier opening."""
    events = [e for _, e in read_trace(seed_trace)]
    base = replay(events, Policy.from_toml(seed_policy))
    strict = replay(events, Policy(failure_threshold=2))
    search = strict["dependencies"]["search"]
    reasons = [t["reason"] for t in search["transitions"]]
    assert reasons[3] == "qualifying-failure"
    assert search["transitions"][3]["to"] == "open"
    assert reasons[4:6] == ["cooldown", "not-admitted"]
    assert (search["remote_attempts"], search["local_rejections"]) == (4, 2)
    assert "[search] first differing transition #4:" in diff(base, strict)


def test_named_outcome_of_a_rejected_call_is_not_admitted():
    """An outcome naming a call this policy rejected changes nothing."""
    events = [
        Event("request", 0, "d", call="a"),
        Event("failure", 1, "d", call="a"),
        Event("request", 2, "d", call="b"),
        Event("success", 3, "d", call="b"),
    ]
    receipt = replay(events, Policy(failure_threshold=1))
    last = receipt["dependencies"]["d"]["transitions"][-1]
    assert (last["reason"], last["from"], last["to"]) == ("not-admitted", "open", "open")


def three_calls(dependency: str) -> list[Event]:
    """A call that fails, and one more: with a threshold of 1 the second would be rejected."""
    return [
        Event("request", 1, dependency, "a"),
        Event("failure", 2, dependency, "a"),
        Event("request", 3, dependency, "b"),
    ]


def test_receipts_of_shadow_mode_and_forced_closes_load_and_diff(tmp_path):
    """A receipt toolbreaker wrote under shadow mode or an operator's forced close (its
    records and counts carry would_reject) loads and diffs like any other; it was refused
    as having fields a receipt does not have."""
    from toolbreaker.core._breaker.receipt import load_receipt

    shadow = replay(three_calls("s"), Policy(mode="shadow", failure_threshold=1))
    closed = Event("force-closed", 0, "f", reason="operator")
    forced = replay([closed, *three_calls("f")], Policy(failure_threshold=1))
    for name, receipt in (("shadow", shadow), ("forced", forced)):
        assert "would_reject" in next(iter(receipt["dependencies"].values())), name
        path = tmp_path / f"{name}.json"
        path.write_text(dump_receipt(receipt), encoding="utf-8")
        assert load_receipt(path) == receipt
        done = subprocess.run(
            [sys.executable, "-m", "toolbreaker", "diff", str(path), str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "receipts are equal\n", "")


def test_a_receipt_with_a_field_no_receipt_has_is_refused(tmp_path):
    """Only the fields a receipt is written with load (would_reject only as a count on a
    dependency and as true on a record), even when the hash was made again."""
    from toolbreaker.core._breaker.receipt import load_receipt
    from toolbreaker.errors import ReceiptError

    receipt = replay(three_calls("s"), Policy(mode="shadow", failure_threshold=1))
    for field, value, where in (
        ("extra", 1, "entry"),
        ("would_reject", "many", "entry"),
        ("would_reject", False, "record"),
        ("extra", 1, "record"),
    ):
        edited = json.loads(json.dumps(receipt))
        entry = edited["dependencies"]["s"]
        (entry if where == "entry" else entry["transitions"][-1])[field] = value
        body = {key: value for key, value in edited.items() if key != "receipt_hash"}
        edited["receipt_hash"] = sha256_hex(body)
        path = tmp_path / "edited.json"
        path.write_text(dump_receipt(edited), encoding="utf-8")
        with pytest.raises(ReceiptError):
            load_receipt(path)
