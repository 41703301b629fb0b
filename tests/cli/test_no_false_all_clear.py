"""No false all-clear: a reading command never creates a store, nor reports on one it
could not read (real SQLite files; the servers' side is in tests/stores/test_reading.py).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

import toolbreaker
from toolbreaker import Registry
from toolbreaker.cli import main
from toolbreaker.instrumentation.stream import SQLiteStream, StreamPublisher
from toolbreaker.stores import SQLiteStore

#: Every command that only reads a --store, as its arguments after the URL is known.
READING = {
    "advise": lambda url: ["advise", "--store", url],
    "export": lambda url: ["export", "--store", url],
    "drain --list": lambda url: ["drain", "--list", "--store", url],
    "drain --prune-done --dry-run": lambda url: [
        "drain",
        "--prune-done",
        "7d",
        "--dry-run",
        "--store",
        url,
    ],
    "policy show": lambda url: ["policy", "show", "--store", url],
    "dashboard": lambda url: ["dashboard", "--store", url, "--port", "9"],
}


@pytest.fixture
def no_serving(monkeypatch):
    """The dashboard would serve until interrupted: serving at all is the failure here."""
    import uvicorn

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    return served


def one_error_line(err: str, *names: str) -> None:
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    for name in names:
        assert name in err, err


@pytest.mark.parametrize("command", sorted(READING))
def test_a_mistyped_sqlite_path_is_an_error_and_nothing_is_created(
    command, tmp_path, capsys, no_serving
):
    """advise, export, drain --list, policy show, the dashboard... on a path where no
    file is: one line naming the path, exit 2, no file made, nothing on stdout."""
    path = tmp_path / "breakres.db"
    assert main(READING[command](f"sqlite://{path}")) == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, str(path))
    assert "does not exist" in captured.err
    assert captured.out == ""
    assert not no_serving
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(READING))
def test_a_file_that_is_no_toolbreaker_store_is_an_error_and_stays_unchanged(
    command, tmp_path, capsys, no_serving
):
    """An empty SQLite database, or a file that is no database at all (a trace):
    one line, exit 2, and the file is left byte for byte as it was."""
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"type": "request", "at": 0}\n')
    for path in (empty, trace):
        before = path.read_bytes()
        assert main(READING[command](f"sqlite://{path}")) == 2
        captured = capsys.readouterr()
        one_error_line(captured.err, str(path))
        assert captured.out == ""
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "trace.jsonl"]
    assert not no_serving


def test_the_stream_and_the_store_in_one_file_still_read(tmp_path, capsys):
    """A file that holds both (docs/guide/watching.md's setup) is read by every
    reading command."""
    path = tmp_path / "breakers.db"
    url = f"sqlite://{path}"
    store = SQLiteStore(path)
    stream = SQLiteStream(path)
    breakers = Registry(store=store, default_timeout=1.0, default_enforce="cooperative")
    StreamPublisher(stream).attach(breakers.get("search"))
    breakers.get("search").call(lambda: "ok")
    breakers.close()
    stream.close()
    store.close()
    assert main(["export", "--store", url]) == 0
    assert '"type": "request"' in capsys.readouterr().out
    assert main(["advise", "--store", url]) == 0
    assert "search" in capsys.readouterr().out
    assert main(["drain", "--list", "--store", url]) == 0
    assert capsys.readouterr().out == ""  # a store with an empty queue: nothing to list


def test_a_store_without_a_stream_is_read_through_its_history(tmp_path, capsys):
    """The breakers' store file, where nothing published events, is read through its own
    history: while no breaker changed state, advise says it holds no events, which is not
    an all-clear, and never that there are no findings."""
    path = tmp_path / "breakers.db"
    store = SQLiteStore(path)
    breakers = Registry(store=store, default_timeout=1.0, default_enforce="cooperative")
    breakers.get("search").call(lambda: "ok")
    breakers.close()
    store.close()
    assert main(["advise", "--store", f"sqlite://{path}"]) == 0
    captured = capsys.readouterr()
    assert "holds no breaker events" in captured.out
    assert "not an all-clear" in captured.out
    assert "no findings" not in captured.out + captured.err


def test_a_memory_stream_this_process_never_made_is_refused(capsys, no_serving):
    """memory:// is one process's own: a command of another process would see an empty
    stream, so advise, export and the dashboard refuse it and say why."""
    for command in ("advise", "export", "dashboard"):
        assert main(READING[command]("memory://elsewhere")) == 2
        one_error_line(capsys.readouterr().err, "memory://elsewhere", "this process")
    assert not no_serving


@pytest.mark.slow
def test_the_dashboard_process_refuses_memory(tmp_path):
    """`toolbreaker dashboard --store memory://x` as its own process: one line, exit 2
    (it used to serve an empty board until interrupted)."""
    command = [sys.executable, "-m", "toolbreaker", "dashboard", "--store", "memory://x"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    one_error_line(done.stderr, "memory://x", "another process")
    assert done.stdout == ""


def test_version(capsys):
    """`toolbreaker --version` prints the package's version."""
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"toolbreaker {toolbreaker.__version__}\n"


def test_publishing_may_create_the_store(tmp_path, capsys):
    """policy publish writes: it may make the store the fleet will follow."""
    sheet = tmp_path / "sheet.toml"
    sheet.write_text("[defaults]\ntimeout_ms = 1000\n")
    path = tmp_path / "new.db"
    assert main(["policy", "publish", str(sheet), "--store", f"sqlite://{path}"]) == 0
    assert path.exists()
    assert main(["policy", "show", "--store", f"sqlite://{path}"]) == 0
    assert "revision   1" in capsys.readouterr().out


# -- check-run: a run is reported healthy only when the budget lets all of it run ------------


def _run_file(tmp_path, *lines: dict) -> str:
    import json

    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_check_run_names_a_stopped_tool_and_exits_1(tmp_path, capsys):
    """Issue 33, item 7: a run whose only tool is stopped by max_tool_failures (every later
    call refused) is no run that "completes within the budget": exit 1, and the tool, the
    line and why are named (before: exit 0 and the all-clear)."""
    run = _run_file(
        tmp_path,
        *({"at": i, "tool": "fetch", "args": {"u": i}, "outcome": "failure"} for i in range(5)),
    )
    budget = tmp_path / "budget.toml"
    budget.write_text("max_tool_failures = 3\n")
    assert main(["check-run", run, "--budget", str(budget)]) == 1
    out = capsys.readouterr().out
    assert "completes within the budget" not in out
    assert (
        f"tool fetch would be stopped at {run}:3 (tool-failures: fetch ended in 3 failures" in out
    )
    assert "2 later call(s) refused" in out


@pytest.mark.parametrize("text", ["", "\n\n", "   \n"])
def test_check_run_refuses_an_empty_run(tmp_path, capsys, text):
    """An empty run file (or one of blank lines) is one error line naming the file, exit 2,
    nothing on stdout (before: exit 0, "the run completes within the budget")."""
    path = tmp_path / "run.jsonl"
    path.write_text(text)
    assert main(["check-run", str(path)]) == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, str(path), "no steps")
    assert captured.out == ""
