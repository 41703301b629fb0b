"""The demo's receipt hash: the same every run, and how to get it again."""

from __future__ import annotations

from toolbreaker.cli import main


def test_the_live_demo_hash_is_the_same_every_run(capsys, tmp_path):
    """The live demo's breaker runs on the turns' clock, so its receipt hash is the same every
    run: the line says so and names the saved trace's replay, which gives it again."""
    assert main(["demo"]) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if "receipt_hash" in line]
    assert main(["demo", "--save", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "receipt_hash" in line]
    assert [line] == first
    assert "the same every run" in line
    assert "--save" in line
    digest = line.split("receipt_hash", 1)[1].split()[0]
    assert (
        main(["replay", str(tmp_path / "trace.jsonl"), "--policy", str(tmp_path / "policy.toml")])
        == 0
    )
    assert f'"receipt_hash": "{digest}"' in capsys.readouterr().out


def test_the_fixture_demo_hash_is_the_same_every_run(capsys):
    """demo --fixture replays a fixed trace: its hash is stable, and the line says so."""
    assert main(["demo", "--fixture"]) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if "receipt_hash" in line]
    assert main(["demo", "--fixture"]) == 0
    again = [line for line in capsys.readouterr().out.splitlines() if "receipt_hash" in line]
    assert first == again
    assert "the same every run" in first[0]


def test_the_live_demo_hash_is_the_same_in_another_process():
    """The hash is the same in every process, not only twice in one: a call id holds the
    process's token (its pid and random digits), which the receipt must not depend on."""
    import subprocess
    import sys

    hashes = set()
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "toolbreaker", "demo"],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        (line,) = [line for line in done.stdout.splitlines() if "receipt_hash" in line]
        hashes.add(line.split("receipt_hash", 1)[1].split()[0])
    assert len(hashes) == 1, hashes
