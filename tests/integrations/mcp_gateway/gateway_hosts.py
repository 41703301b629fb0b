"""What the gateway's tests share: how a host launches ``toolbreaker mcp``, and a raw host.

The SDK's own client is the host of most tests (``Client(gateway_params(...))``); for
byte-for-byte comparisons, :class:`RawHost` writes JSON lines to a process's stdin and
reads its stdout as it is, the gateway's or the server's own.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters
from mcp.types import TextContent

import toolbreaker

SRC = Path(toolbreaker.__file__).resolve().parents[1]
UPSTREAM = Path(__file__).with_name("gateway_upstream.py")
#: How long a test waits for a process to answer before it fails (the machine is noisy).
PATIENCE = 60.0


def host_env(**extra: str) -> dict[str, str]:
    """What a host gives the gateway: a bare environment (PATH, HOME) and this tree."""
    env = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    env["PYTHONPATH"] = str(SRC)
    env.update(extra)
    return env


def upstream_argv(*args: str) -> list[str]:
    """The Python test server's command."""
    return [sys.executable, str(UPSTREAM), *args]


def gateway_argv(*args: str) -> list[str]:
    """``toolbreaker mcp ARGS`` as a host runs it."""
    return [sys.executable, "-m", "toolbreaker", "mcp", *args]


def gateway_params(*args: str, **env: str) -> StdioServerParameters:
    """The host configuration entry of ``toolbreaker mcp ARGS``."""
    argv = gateway_argv(*args)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=host_env(**env))


def write_sheet(path: Path, text: str, upstream: list[str] | None = None) -> str:
    """A sheet at ``path`` with ``text``, whose ``{upstream}`` is ``upstream`` (a command
    that launches the test server; by default its own process)."""
    command = json.dumps(upstream if upstream is not None else upstream_argv())
    path.write_text(text.replace("{upstream}", command), encoding="utf-8")
    return str(path)


def text_of(result: Any) -> str:
    """The text blocks of a tool result."""
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


def payload(result: Any) -> dict[str, Any]:
    """The JSON a synthesized result carries (the guard's answer)."""
    data: dict[str, Any] = json.loads(text_of(result))
    return data


class RawHost:
    """A host that speaks JSON lines to a process and keeps every line it reads, as bytes."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env if env is not None else host_env(),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.notes: list[bytes] = []
        self.stderr = b""
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")  # the end: nothing more will come

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: object, method: str, params: dict[str, Any] | None = None) -> bytes:
        """Send a request; the bytes of its response (other lines are kept in ``notes``)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        while True:
            line = self.lines.get(timeout=PATIENCE)
            if not line:
                self.proc.wait(timeout=PATIENCE)
                raise AssertionError(f"the process ended: {self.stderr.decode()[-2000:]}")
            decoded = json.loads(line)
            if decoded.get("id") == rid and "method" not in decoded:
                return line
            self.notes.append(line)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def close(self) -> int:
        """Close the process's stdin (how a host ends a stdio session); its exit code."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=PATIENCE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for reader in self._readers:
                reader.join(PATIENCE)
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()

    def __enter__(self) -> RawHost:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "raw-host", "version": "1"},
}
