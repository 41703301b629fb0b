"""One rule for units in the boundary sheet: every duration is in milliseconds, by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbreaker import PolicyError, Registry
from toolbreaker.cli import main

NEW = """\
[defaults]
timeout_ms = 4000
cooldown_ms = 30000

[search.read]
degrade = "stale"
max_stale_ms = 900000
stale_every_ms = 5000
health_check = { url = "http://search.internal/health", interval_ms = 2000, timeout_ms = 1500 }

[billing.write]
timeout_ms = 10000
"""

OLD = """\
[defaults]
timeout = 4.0
cooldown_ms = 30000

[search.read]
degrade = "stale"
max_stale = 900
stale_every = 5
health_check = { url = "http://search.internal/health", interval_ms = 2000, timeout = 1.5 }

[billing.write]
timeout = 10.0
"""


def load(tmp_path: Path, text: str, name: str = "sheet.toml") -> Registry:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return Registry.from_toml(path)


def test_durations_in_ms_load_as_the_old_spellings_in_seconds(tmp_path):
    """timeout_ms, max_stale_ms, stale_every_ms and health_check.timeout_ms are the same
    rows as timeout, max_stale, stale_every and health_check.timeout in seconds."""
    new, old = load(tmp_path, NEW, "new.toml"), load(tmp_path, OLD, "old.toml")
    assert new.boundaries() == old.boundaries()
    assert new.default_timeout == old.default_timeout == 4.0
    read = new.boundaries()[("search", "read")]
    assert read.timeout == 4.0  # the defaults' timeout_ms, inherited
    assert read.max_stale_ms == 900_000
    assert read.stale_every == 5.0
    assert read.health_check is not None
    assert read.health_check.timeout == 1.5
    assert new.boundaries()[("billing", "write")].timeout == 10.0


def test_a_row_in_ms_overrides_defaults_in_seconds(tmp_path):
    """Old and new spellings mix across tables: the row's own value wins, whichever."""
    registry = load(tmp_path, "[defaults]\ntimeout = 4.0\n\n[a.read]\ntimeout_ms = 250\n")
    assert registry.boundaries()[("a", "read")].timeout == 0.25
    registry = load(tmp_path, "[defaults]\ntimeout_ms = 250\n\n[a.read]\ntimeout = 2.0\n")
    assert registry.boundaries()[("a", "read")].timeout == 2.0


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[a.read]\ntimeout = 1.0\ntimeout_ms = 1000\n", 3, "a.read: timeout (in seconds) and"),
        ("[defaults]\ntimeout_ms = 1.5\n", 2, "defaults.timeout_ms must be a whole number"),
        ("[defaults]\ntimeout_ms = 0\n", 2, "defaults.timeout_ms must be a whole number"),
        ("[a.read]\ntimeout_ms = 1000\nmax_stale_ms = true\n", 3, "a.read.max_stale_ms must"),
        ("[a.read]\ntimeout_ms = 1000\nstale_every_ms = -1\n", 3, "a.read.stale_every_ms must"),
        (
            '[a.read]\ntimeout_ms = 1000\nhealth_check = { url = "http://h/", timeout_ms = "1" }\n',
            3,
            "a.read.health_check.timeout_ms must be a whole number",
        ),
    ],
)
def test_a_bad_duration_is_one_located_line(tmp_path, capsys, text, line, message):
    """Both spellings, a fraction of a millisecond, out of range: the file, line and field."""
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError, match=r"must|name one field"):
        Registry.from_toml(path)
    assert main(["replay", str(path), "--policy", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}:{line}: ")
    assert message in err


def test_a_row_without_a_timeout_names_the_new_spelling(tmp_path):
    """The error for a row with no deadline says what to write."""
    with pytest.raises(PolicyError, match="set timeout_ms in the row or in"):
        load(tmp_path, "[a.read]\nfailure_threshold = 3\n")
