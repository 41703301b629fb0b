"""One rule for units in the boundary sheet: every duration is in milliseconds, by name.

The old spellings in seconds still load, with a deprecation warning: these are the
tests that use them on purpose (every other test, example and doc uses the new ones).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from toolbreaker import Registry, publish_policy
from toolbreaker.cli import main
from toolbreaker.errors import PolicyError, ToolbreakerDeprecationWarning
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock

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


def load_old(tmp_path: Path, text: str, name: str = "old.toml") -> Registry:
    """A sheet with old spellings: it loads, with a deprecation warning."""
    with pytest.warns(ToolbreakerDeprecationWarning):
        return load(tmp_path, text, name)


def test_durations_in_ms_load_as_the_old_spellings_in_seconds(tmp_path):
    """timeout_ms, max_stale_ms, stale_every_ms and health_check.timeout_ms are the same
    rows as timeout, max_stale, stale_every and health_check.timeout in seconds."""
    new, old = load(tmp_path, NEW, "new.toml"), load_old(tmp_path, OLD)
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
    registry = load_old(tmp_path, "[defaults]\ntimeout = 4.0\n\n[a.read]\ntimeout_ms = 250\n")
    assert registry.boundaries()[("a", "read")].timeout == 0.25
    registry = load_old(tmp_path, "[defaults]\ntimeout_ms = 250\n\n[a.read]\ntimeout = 2.0\n")
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


def test_an_old_spelling_warns_once_per_field_naming_file_line_row_and_new_name(tmp_path):
    """One ToolbreakerDeprecationWarning (a DeprecationWarning) per old field per load:
    the file and line of its first use, its table, the new spelling with the value in
    milliseconds, and the other tables that use it; attributed to the caller's line."""
    path = tmp_path / "old.toml"
    path.write_text(OLD, encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Registry.from_toml(path)
    assert all(w.category is ToolbreakerDeprecationWarning for w in caught)
    assert issubclass(ToolbreakerDeprecationWarning, DeprecationWarning)
    assert [str(w.message) for w in caught] == [
        f"{path}:2: [defaults] timeout = 4.0 (seconds) is deprecated: write timeout_ms = 4000"
        "; timeout is also in [billing.write]",
        f"{path}:7: [search.read] max_stale = 900 (seconds) is deprecated: "
        "write max_stale_ms = 900000",
        f"{path}:8: [search.read] stale_every = 5 (seconds) is deprecated: "
        "write stale_every_ms = 5000",
        f"{path}:9: [search.read] health_check.timeout = 1.5 (seconds) is deprecated: "
        "write health_check.timeout_ms = 1500",
    ]
    assert {w.filename for w in caught} == {__file__}  # the user's call, not ours


def test_a_table_in_code_warns_naming_the_table(tmp_path):
    """Registry.from_dict has no file: the warning names the table, and many tables
    using one old field are one warning."""
    rows = {f"dep{i}": {"read": {"timeout": 2}} for i in range(6)}
    with pytest.warns(ToolbreakerDeprecationWarning) as caught:
        registry = Registry.from_dict(rows)
    (only,) = caught
    assert str(only.message) == (
        "[dep0.read] timeout = 2 (seconds) is deprecated: write timeout_ms = 2000; timeout is "
        "also in [dep1.read], [dep2.read], [dep3.read] and 2 more"
    )
    assert only.filename == __file__
    assert registry.boundaries()[("dep5", "read")].timeout == 2.0


def test_the_cli_prints_an_old_spelling_as_one_line_and_carries_on(tmp_path, capsys):
    """A command that loads a sheet with old spellings prints one ``warning:`` line per
    field on stderr (no traceback, even with warnings as errors) and gives the same
    output as with the new spellings."""
    old, new = tmp_path / "old.toml", tmp_path / "new.toml"
    old.write_text(OLD, encoding="utf-8")
    new.write_text(NEW, encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"at": 0, "dependency": "search:read", "type": "request"}\n')
    assert main(["replay", str(trace), "--policy", str(new)]) == 0
    expected = capsys.readouterr()
    assert expected.err == ""
    assert main(["replay", str(trace), "--policy", str(old)]) == 0
    got = capsys.readouterr()
    assert got.out == expected.out
    lines = got.err.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith(f"warning: {old}:2: [defaults] timeout = 4.0 (seconds)")
    assert all(line.startswith(f"warning: {old}:") for line in lines)
    assert "Traceback" not in got.err


def test_a_published_sheet_with_old_spellings_is_adopted_and_logged_per_revision(tmp_path, caplog):
    """policy publish warns and publishes (never refuses); a follower adopts the revision
    and logs its old spellings once for that revision, not on every poll."""
    store = MemoryStore()
    publish_policy(store, _write(tmp_path, NEW))
    registry = Registry.from_store(store, follow=False, clock=FakeClock())
    breaker = registry.get("billing", "write")
    with pytest.warns(ToolbreakerDeprecationWarning) as published:
        publish_policy(store, _write(tmp_path, OLD.replace("10.0", "12.0"), "old.toml"))
    assert len(published) == 4
    assert str(published[0].message).startswith(f"{tmp_path / 'old.toml'}:2: [defaults] timeout")
    assert registry.follower is not None
    with caplog.at_level(logging.WARNING, logger="toolbreaker"):
        assert registry.follower.refresh()
        assert not registry.follower.refresh()
    assert breaker.boundary.timeout == 12.0
    assert registry.follower.refused == 0
    notes = [r.getMessage() for r in caplog.records if "old spelling" in r.getMessage()]
    assert len(notes) == 4
    assert notes[0].startswith(
        "toolbreaker: published sheet 'default' revision 2 uses an old spelling: default@2:2: "
    )
    registry.close()


def _write(tmp_path: Path, text: str, name: str = "sheet.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path
