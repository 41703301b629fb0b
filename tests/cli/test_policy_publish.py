"""``toolbreaker policy publish`` and ``policy show`` against a real SQLite store file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolbreaker.cli import main
from toolbreaker.stores import SQLiteStore

SHEET = """\
[defaults]
timeout_ms = 1000

[search.read]
failure_threshold = 2
"""


@pytest.fixture
def url(tmp_path: Path) -> str:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    try:
        store.record_get("toolbreaker.probe", "x")
    except NotImplementedError:
        pytest.skip("SQLiteStore keeps no records yet")
    finally:
        store.close()
    return f"sqlite://{path}"


def write(tmp_path: Path, text: str, name: str = "sheet.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_publish_then_show(tmp_path, url, capsys):
    """publish prints the revision and digest; show prints revision, digest, when, note."""
    sheet = write(tmp_path, SHEET)
    assert main(["policy", "publish", sheet, "--store", url, "--note", "first cut"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("published default revision 1 sha256 ")
    assert main(["policy", "show", "--store", url]) == 0
    shown = capsys.readouterr().out
    assert "revision   1" in shown
    assert "note       first cut" in shown
    assert main(["policy", "publish", sheet, "--store", url]) == 0
    capsys.readouterr()
    assert main(["policy", "show", "--store", url, "--json", "--text"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["revision"] == 2
    assert doc["note"] is None
    assert doc["text"] == SHEET
    assert len(doc["sha256"]) == 64
    assert doc["published_at"].endswith("+00:00")


def test_a_bad_sheet_is_one_located_line_and_exit_2(tmp_path, url, capsys):
    """The same error as Registry.from_toml's, file and line; nothing is published."""
    sheet = write(tmp_path, SHEET + "cooldown_ms = -5\n")
    assert main(["policy", "publish", sheet, "--store", url]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {sheet}:6: search.read.cooldown_ms must be positive, got -5\n"
    assert main(["policy", "show", "--store", url]) == 2
    assert "no sheet is published" in capsys.readouterr().err


def test_unusable_stores_are_errors_not_tracebacks(tmp_path, capsys):
    """memory:// and unknown schemes: one line, exit 2."""
    sheet = write(tmp_path, SHEET)
    assert main(["policy", "publish", sheet, "--store", "memory://x"]) == 2
    assert "memory:// is one process's memory" in capsys.readouterr().err
    assert main(["policy", "show", "--store", "ftp://u:secret@h/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown store URL")
    assert "secret" not in err


def test_terminal_output_escapes_the_note(tmp_path, url, capsys):
    """A note with control characters reaches the terminal escaped."""
    sheet = write(tmp_path, SHEET)
    assert main(["policy", "publish", sheet, "--store", url, "--note", "a\x1b[31mred"]) == 0
    capsys.readouterr()
    assert main(["policy", "show", "--store", url]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_concurrent_publishers_each_get_a_revision(tmp_path, url, capsys):
    """Four `policy publish` processes at once: revisions 1 to 4, none lost."""
    sheet = write(tmp_path, SHEET)
    command = [sys.executable, "-m", "toolbreaker", "policy", "publish", sheet, "--store", url]
    running = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)
    ]
    outputs = [process.communicate(timeout=120) for process in running]
    assert [process.returncode for process in running] == [0, 0, 0, 0], outputs
    revisions = sorted(int(out.split()[3]) for out, _ in outputs)
    assert revisions == [1, 2, 3, 4]
    assert main(["policy", "show", "--store", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] == 4
