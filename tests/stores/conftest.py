"""Fixtures of the store tests: real redis-server processes on free loopback ports.

No fake Redis. The Debian package is installed when ``redis-server`` is missing (CI runs
as root on a fresh Debian machine); each server listens on 127.0.0.1 only, keeps nothing
on disk, and is stopped when its fixture ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _redis_server_binary() -> str:
    found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")
    if found:
        return found
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
            subprocess.run(command, env=env, check=False, capture_output=True, timeout=600)
        found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
        if found:
            return found
    pytest.fail(
        "redis-server is not installed and could not be installed "
        "(apt-get install redis-server, as root)"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process on 127.0.0.1; ``stop()`` and ``start()`` keep the port.

    ``options`` are extra command-line options (``"--appendonly", "yes"``); later ones
    win over the defaults.
    """

    def __init__(self, binary: str, directory: Path, *options: str) -> None:
        self.binary = binary
        self.directory = directory
        self.options = options
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ping():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not answer PING on port {self.port}")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """Send one command in the inline protocol and return the raw reply (tests only)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
            conn.sendall(" ".join(args).encode() + b"\r\n")
            return conn.recv(65536)

    def kill(self) -> None:
        """SIGKILL the server: no shutdown, no last save, as in a crash."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait(5)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture(scope="session")
def redis_binary() -> str:
    return _redis_server_binary()


@pytest.fixture(scope="session")
def redis_server(
    redis_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """One server for the whole session; tests keep apart by unique keys."""
    server = RedisServer(redis_binary, tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def private_redis(redis_binary: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, which the test may stop and start again."""
    server = RedisServer(redis_binary, tmp_path)
    server.start()
    yield server
    with contextlib.suppress(Exception):
        server.stop()
