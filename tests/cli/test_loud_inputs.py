"""Inputs that must fail, loudly: one line naming what is wrong, exit 2, never a pass.

A file with nothing to judge is no green light for CI; a missing extra or an option out
of range is one line naming what to do, never a traceback or a silent default.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from toolbreaker.cli import main
from toolbreaker.instrumentation.stream import open_stream
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


# -- a missing extra, a number out of range (issue 34, item 7) -------------------------------

#: Installed as ``sitecustomize`` in a subprocess: the modules named in ``TB_BLOCK`` cannot
#: be imported, as on a machine where their extra was never installed.
BLOCKER = """
import os
import sys


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        for blocked in os.environ.get("TB_BLOCK", "").split(","):
            if blocked and (name == blocked or name.startswith(blocked + ".")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def run_without(
    blocked: str, argv: list[str], tmp_path, *, module: bool = True
) -> subprocess.CompletedProcess[str]:
    """``toolbreaker ARGV`` as its own process, with ``blocked`` not installed."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *sys.path])
    env["TB_BLOCK"] = blocked
    return subprocess.run(
        [sys.executable, *(["-m", "toolbreaker"] if module else []), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )


def test_the_blocker_blocks(tmp_path):
    """The simulated missing extra is missing (so the tests below test something)."""
    done = run_without("redis", ["-c", "import redis"], tmp_path, module=False)
    assert done.returncode == 1
    assert "No module named 'redis'" in done.stderr


REDIS_NOWHERE = "redis://127.0.0.1:1"
POSTGRES_NOWHERE = "postgresql://tb@127.0.0.1:1/tb"


@pytest.mark.parametrize(
    ("blocked", "extra", "argv"),
    [
        ("redis", "redis", ["advise", "--store", REDIS_NOWHERE]),
        ("redis", "redis", ["export", "--store", REDIS_NOWHERE]),
        ("redis", "redis", ["drain", "--list", "--store", REDIS_NOWHERE]),
        ("redis", "redis", ["policy", "show", "--store", REDIS_NOWHERE]),
        ("redis", "redis", ["run", "show", "t-1", "--store", REDIS_NOWHERE]),
        ("redis", "redis", ["dashboard", "--store", REDIS_NOWHERE]),
        ("psycopg", "postgres", ["advise", "--store", POSTGRES_NOWHERE]),
        ("psycopg", "postgres", ["drain", "--list", "--store", POSTGRES_NOWHERE]),
        ("psycopg", "postgres", ["policy", "show", "--store", POSTGRES_NOWHERE]),
    ],
)
def test_a_missing_store_extra_is_one_line_naming_it(blocked, extra, argv, tmp_path):
    """`advise --store redis://...` without the redis extra printed a 36-line
    ModuleNotFoundError: it is one line naming the extra to install, exit 2."""
    done = run_without(blocked, argv, tmp_path)
    assert done.returncode == 2, done.stderr
    one_error_line(done.stderr, f"toolbreaker[{extra}]", "pip install")
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("port", ["99999", "-1", "0", "65536", "http", "80.5"])
def test_a_dashboard_port_out_of_range_is_one_line(port, tmp_path, capsys):
    """`dashboard --port 99999` (or -1) was a 68-line OverflowError: one line, exit 2,
    before anything is opened."""
    assert main(["dashboard", "--store", f"sqlite://{tmp_path / 'x.db'}", "--port", port]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_error_line(err, "--port", "1 to 65535", repr(port))
    assert not (tmp_path / "x.db").exists()


def test_a_dashboard_port_in_use_is_one_line(tmp_path):
    """A port another program listens on: one line naming it, exit 2, not uvicorn's log."""
    pytest.importorskip("uvicorn")
    url = f"sqlite://{tmp_path / 'events.db'}"
    open_stream(url).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "toolbreaker", "dashboard", "--store", url, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    one_error_line(done.stderr, f"127.0.0.1:{port}", "--port")


# -- values a command ignored or took wrong (issue 34, item 8) --------------------------------


EXTEND = ["run", "extend", "t-1", "--store", "STORE", "--by", "me", "--why", "x"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["advise", "--store", "STORE", "--since", "yesterday"], ["--since", "'yesterday'"]),
        (["advise", "TRACE", "--since", "yesterday"], ["--since", "'yesterday'"]),
        (["advise", "TRACE", "--since", "15m"], ["--since", "--store"]),
        (["export", "--store", "STORE", "--since", "tomorrow"], ["--since", "'tomorrow'"]),
        (["export", "--store", "STORE", "--since=-5m"], ["--since", "'-5m'"]),
        (["drain", "--list", "--store", "STORE", "--lease-ms", "-1"], ["--lease-ms", "'-1'"]),
        (["drain", "--list", "--store", "STORE", "--lease-ms", "0"], ["--lease-ms", "'0'"]),
        (["drain", "--list", "--store", "STORE", "--lease-ms", "5000"], ["--lease-ms", "--list"]),
        (["drain", "--store", "STORE", "--prune-done", "soon"], ["--prune-done", "'soon'"]),
        (["simulate", "--out", "OUT", "--retries", "-1"], ["--retries", "'-1'"]),
        (["simulate", "--out", "OUT", "--backoff-ms", "1e9"], ["--backoff-ms", "'1e9'"]),
        (["replay", "TRACE", "--jobs", "0"], ["--jobs", "'0'"]),
        (["tune", "TRACE", "--write", "zero", "--to", "OUT"], ["--write", "'zero'"]),
        ([*EXTEND, "--max-tool-calls", "-5"], ["--max-tool-calls", "'-5'"]),
        ([*EXTEND, "--deadline-ms", "soon"], ["--deadline-ms", "'soon'"]),
    ],
)
def test_a_bad_value_is_refused_in_one_line(argv, words, tmp_path, seed_trace, capsys):
    """`advise --since yesterday` and `drain --list --lease-ms -1` exited 0 ignoring the
    value: every duration, time and number an option takes is checked where the command
    line is read, one line naming the option and the value, exit 2, nothing opened."""
    store = tmp_path / "none.db"
    names = {
        "STORE": f"sqlite://{store}",
        "TRACE": str(seed_trace),
        "OUT": str(tmp_path / "out.svg"),
    }
    assert main([names.get(arg, arg) for arg in argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_error_line(err, *words)
    assert not store.exists()
    assert not (tmp_path / "out.svg").exists()


def test_a_usage_mistake_is_one_line_too(capsys):
    """A missing or unknown argument is one line naming the command (no usage block)."""
    assert main(["replay"]) == 2
    one_error_line(capsys.readouterr().err, "toolbreaker replay", "trace")
    assert main(["replay", "t.jsonl", "--jobz", "2"]) == 2
    one_error_line(capsys.readouterr().err, "--jobz")


@pytest.mark.parametrize("since", ["30s", "15m", "2h", "1d", "2026-01-02T03:04:05", "2026-01-02"])
def test_good_since_values_still_pass(since, tmp_path, capsys):
    """Ages and ISO times are what --since always took."""
    store = tmp_path / "none.db"
    assert main(["export", "--store", f"sqlite://{store}", "--since", since]) == 2
    one_error_line(capsys.readouterr().err, "does not exist")  # the store, not --since


def test_verify_with_its_arguments_swapped_says_so(seed_trace, tmp_path, capsys):
    """`verify TRACE RECEIPT` said "malformed JSON" of the receipt read as a trace: it says
    which file looks like what and the order the command takes them in."""
    receipt = tmp_path / "receipt.json"
    assert main(["replay", str(seed_trace)]) == 0
    receipt.write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["verify", str(seed_trace), str(receipt)]) == 2
    err = capsys.readouterr().err
    one_error_line(err, str(receipt), "a receipt", str(seed_trace), "a trace", "RECEIPT TRACE")
    assert "malformed JSON" not in err
    # A receipt given where the trace goes (and another receipt first): said of that file.
    assert main(["verify", str(receipt), str(receipt)]) == 2
    one_error_line(capsys.readouterr().err, str(receipt), "a receipt, not a trace")
    # A trace given where the receipt goes.
    assert main(["verify", str(seed_trace), str(seed_trace)]) == 2
    one_error_line(capsys.readouterr().err, str(seed_trace), "a trace, not a receipt")
    assert main(["verify", str(receipt), str(seed_trace)]) == 0
