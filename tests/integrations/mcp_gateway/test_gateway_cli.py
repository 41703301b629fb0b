"""``toolbreaker mcp``'s mistakes: one line on stderr, naming what is wrong, exit 2.

A bad sheet, a program that does not exist, a server that exits before it answered, a
URL nothing answers at, a public address without a token: never a traceback, and never
a gateway that sits there serving nothing.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from gateway_hosts import INITIALIZE, PATIENCE, RawHost, gateway_argv, host_env, upstream_argv

from toolbreaker.cli import main


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    ("sheet", "words"),
    [
        (
            '[mcp.servers.a]\ncommand = ["x"]\ncolour = 3\n',
            "breakers.toml:3: unknown field 'colour'",
        ),
        ("[mcp.servers.a]\n", "breakers.toml:1: server 'a' needs exactly one of command"),
        (
            '[mcp.servers.a]\ncommand = ["x"]\n[a.search]\nfailure_threshold = -1\n',
            "breakers.toml:4:",
        ),
        ("[mcp\n", "breakers.toml:1: invalid TOML"),
    ],
)
def test_a_bad_sheet_is_one_line_and_exit_2(tmp_path, capsys, sheet, words):
    """The sheet's file and line, and what is wrong."""
    path = tmp_path / "breakers.toml"
    path.write_text(sheet, encoding="utf-8")
    assert main(["mcp", "--sheet", str(path)]) == 2
    assert words in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--", "no-such-program-anywhere", "--flag"], "cannot run 'no-such-program-anywhere'"),
        ([], "the gateway has no server"),
        (["--upstream", "ftp://example.com/mcp", "--"], "http:// or https://"),
        (["--upstream", "http://127.0.0.1:9/mcp", "--", "x"], "not both"),
        (["--http", "--host", "0.0.0.0", "--", "true"], "set a bearer token"),
        (["--timeout", "0", "--", "true"], "--timeout must be a positive number"),
        (["--run", "{nobody}", "--", "true"], "unknown placeholder {nobody}"),
        (["--store", "memory://", "--", "true"], "memory:// is one process's memory"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(capsys, monkeypatch, args, words):
    """A program that cannot run, nothing to serve, a bad URL, a public address without
    a token, a bad timeout, run template or store: one line, before anything runs."""
    monkeypatch.delenv("TOOLBREAKER_MCP_TOKEN", raising=False)
    assert main(["mcp", *args]) == 2
    assert words in one_error_line(capsys.readouterr().err)


def test_several_servers_over_stdio_without_a_name_is_one_line(tmp_path, capsys):
    """stdio serves one server: the sheet's several need --server."""
    path = tmp_path / "breakers.toml"
    path.write_text('[mcp.servers.a]\ncommand = ["true"]\n[mcp.servers.b]\ncommand = ["true"]\n')
    assert main(["mcp", "--sheet", str(path)]) == 2
    assert "name the one to serve (--server NAME)" in one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_a_server_that_exits_before_it_answers_is_one_line_and_exit_2():
    """The command runs but exits at once (a package that is not there, a crash): the
    host's request is answered with the reason, and the gateway exits 2 with one line."""
    with RawHost(gateway_argv("--", sys.executable, "-c", "import sys; sys.exit(3)")) as host:
        answer = host.request(1, "initialize", INITIALIZE)
        code = host.proc.wait(timeout=PATIENCE)
    assert b'"error"' in answer
    assert b"exited with code 3" in answer
    assert code == 2
    assert "exited with code 3" in one_error_line(host.stderr.decode())


@pytest.mark.slow
def test_an_upstream_url_nothing_answers_at_is_one_line_and_exit_2():
    """Nothing listens at the URL: the first request finds out, the host is told, and
    the gateway exits 2 with one line; the URL's password is masked in both."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    url = f"http://me:hunter2-secret@127.0.0.1:{port}/mcp"
    with RawHost(gateway_argv("--upstream", url)) as host:
        answer = host.request(1, "initialize", INITIALIZE)
        code = host.proc.wait(timeout=PATIENCE)
    assert b'"error"' in answer
    assert code == 2
    line = one_error_line(host.stderr.decode())
    assert "ConnectError" in line
    assert b"hunter2" not in answer + host.stderr


@pytest.mark.slow
def test_help_names_the_command():
    """``toolbreaker mcp --help`` works without starting anything."""
    done = subprocess.run(
        [*gateway_argv("--help")],
        capture_output=True,
        text=True,
        env=host_env(),
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode == 0
    assert "--upstream" in done.stdout


def test_the_sheet_path_is_named_when_it_does_not_exist(tmp_path, capsys):
    """A missing sheet is one line naming it."""
    missing = Path(tmp_path / "nope.toml")
    assert main(["mcp", "--sheet", str(missing), "--", "true"]) == 2
    assert "nope.toml" in one_error_line(capsys.readouterr().err)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie of a dead parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


@pytest.mark.slow
def test_a_stopped_gateway_stops_its_server():
    """A host stops the gateway with SIGTERM: its server, in a session of its own which
    the signal does not reach, is stopped too, even one that outlives its stdin (here a
    shell that sleeps on after the server exits), and the gateway exits 0."""
    python, script = upstream_argv()
    command = ["/bin/sh", "-c", f'"{python}" "{script}"; exec sleep 600']
    with RawHost(gateway_argv("--", *command)) as host:
        host.request(1, "initialize", INITIALIZE)
        host.notify("notifications/initialized")
        child = _child_of(host.proc.pid)
        host.proc.send_signal(signal.SIGTERM)
        code = host.proc.wait(timeout=PATIENCE)
        deadline = time.monotonic() + PATIENCE
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert code == 0
    assert _gone(child)


def _child_of(pid: int) -> int:
    """The first child process of ``pid``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        if children:
            return int(children[0])
    raise AssertionError(f"process {pid} has no child")
