"""Fixtures of the store tests: real redis-server and PostgreSQL servers on loopback ports.

No fake Redis, no fake PostgreSQL. The Debian packages are installed when ``redis-server``
or ``initdb`` is missing (CI runs as root on a fresh Debian machine; PostgreSQL then runs
as the ``postgres`` user); each server listens on 127.0.0.1 only and is stopped when its
fixture ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ports import free_port
from store_kinds import kinds


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


class _LocalServer:
    """A server process of the tests' own on 127.0.0.1, started on a port picked free."""

    port: int
    started: bool
    new_port: Callable[[], int]
    what: str  # what fails to answer, for the failure message

    def start(self) -> None:
        """Start the server; a first start that lost its port to another process (two
        suites at once on one machine) retries on a new one, a restart keeps its port."""
        tries = 0
        while tries < 5:
            tries += 1
            if self._launch():
                self.started = True
                return
            if self.started:
                break
            self.port = self.new_port()
        pytest.fail(f"{self.what} on port {self.port} ({tries} tries)")

    def _launch(self) -> bool:
        raise NotImplementedError


class RedisServer(_LocalServer):
    """One redis-server process on 127.0.0.1; ``stop()`` and ``start()`` keep the port.

    ``options`` are extra command-line options (``"--appendonly", "yes"``); later ones
    win over the defaults.
    """

    what = "redis-server did not answer PING"

    def __init__(self, binary: str, directory: Path, *options: str) -> None:
        self.binary = binary
        self.directory = directory
        self.options = options
        self.new_port: Callable[[], int] = free_port
        self.port = self.new_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _launch(self) -> bool:
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
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.ping():
                return True
            if self.process.poll() is not None:
                break  # it exited: most likely its port was taken meanwhile
            time.sleep(0.02)
        self.stop()
        return False

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

    def freeze(self) -> None:
        """SIGSTOP the server: its kernel still holds the connections open and acknowledges
        data, but nothing answers (a hung server, a host cut off)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the server."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

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


# -- PostgreSQL -------------------------------------------------------------------------


def _postgres_bindir() -> Path:
    """The directory of initdb and postgres; Debian's package is installed when missing."""

    def find() -> Path | None:
        found = shutil.which("initdb")
        if found:
            return Path(found).resolve().parent
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        return candidates[-1].parent if candidates else None

    bindir = find()
    if bindir is None and os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
            subprocess.run(command, env=env, check=False, capture_output=True, timeout=900)
        bindir = find()
    if bindir is None:
        pytest.fail(
            "PostgreSQL (initdb, postgres) is not installed and could not be installed "
            "(apt-get install postgresql, as root)"
        )
    return bindir


def _server_user() -> str | None:
    """postgres refuses to run as root: run it as the ``postgres`` user then."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "postgres"], check=True, timeout=60
        )
    return "postgres"


class PostgresServer(_LocalServer):
    """One PostgreSQL server on 127.0.0.1 in a fresh data directory.

    ``stop()`` shuts it down, ``kill()`` SIGKILLs every process of it (a crash), and
    ``start()`` brings it back on the same port with the same data.
    """

    what = "postgres did not accept connections"

    def __init__(self, bindir: Path, *options: str) -> None:
        self.bindir = bindir
        self.user = _server_user()
        # Not under pytest's tmp_path: its root-only parents would hide it from the user.
        self.directory = Path(tempfile.mkdtemp(prefix="toolbreaker-pg-"))
        self.data = self.directory / "data"
        self.options = options
        self.new_port: Callable[[], int] = free_port
        self.port = self.new_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False
        if self.user is not None:
            shutil.chown(self.directory, self.user)
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
             "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, timeout=120, user=self.user,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _launch(self) -> bool:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-h", "127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=200",
             *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=self.user,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.ready():
                return True
            if self.process.poll() is not None:
                break  # it exited: most likely its port was taken meanwhile
            time.sleep(0.05)
        self.kill()
        return False

    def ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend: a crash, no shutdown checkpoint."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 10
        while (self.data / "postmaster.pid").exists() and time.monotonic() < deadline:
            # Orphaned backends exit once they notice; the next start needs them gone.
            if not _any_process_in_group(process.pid):
                break
            time.sleep(0.05)

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every backend: the kernel still accepts connections
        and acknowledges data, but nothing answers (a hung server)."""
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT every process of the server."""
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def _processes(self) -> list[int]:
        """The postmaster and its children (each backend leads a process group of its own)."""
        assert self.process is not None
        postmaster = self.process.pid
        found = [postmaster]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat = (entry / "stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                        found.append(int(entry.name))
        return found

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGINT)  # fast shutdown
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def _any_process_in_group(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def postgres_bindir() -> Path:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    return _postgres_bindir()


@pytest.fixture(scope="session")
def postgres_server(postgres_bindir: Path) -> Iterator[PostgresServer]:
    """One server for the whole session; tests keep apart by unique keys and prefixes."""
    server = PostgresServer(postgres_bindir)
    server.start()
    yield server
    server.remove()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.url


@pytest.fixture
def private_postgres(postgres_bindir: Path) -> Iterator[PostgresServer]:
    """A server of the test's own, which the test may stop, kill and start again."""
    server = PostgresServer(postgres_bindir)
    server.start()
    yield server
    server.remove()


# -- Redis Cluster ----------------------------------------------------------------------


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free and valid too."""
    for _ in range(200):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    pytest.fail("no free pair of ports for a cluster node")


class RedisCluster:
    """Three masters and three replicas on 127.0.0.1, each a redis-server of its own."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.created = False
        self.nodes: list[RedisServer] = []
        for n in range(6):
            node_dir = directory / f"node{n}"
            node_dir.mkdir()
            node = RedisServer(binary, node_dir)
            node.new_port = _cluster_port
            node.port = _cluster_port()
            node.options = (
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(node_dir / "nodes.conf"),
                "--cluster-node-timeout", "1000",
                "--cluster-replica-validity-factor", "0",
            )  # fmt: skip
            self.nodes.append(node)

    @property
    def url(self) -> str:
        return self.nodes[0].url.removesuffix("/0")

    def start(self) -> None:
        """Start every node; the first time, join them into a cluster (later: they rejoin)."""
        for node in self.nodes:
            node.start()
        if self.created:
            self.wait_ok()
            return
        cli = shutil.which("redis-cli") or shutil.which("redis-cli", path="/usr/bin")
        if cli is None:
            pytest.fail("redis-cli is not installed (apt-get install redis-tools)")
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.created = True
        self.wait_ok()

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every running node says the cluster is ok and covers every slot."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [n for n in self.nodes if n.process is not None]
            if all(b"cluster_state:ok" in n.command("CLUSTER", "INFO") for n in running):
                return
            time.sleep(0.1)
        pytest.fail("the Redis cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()


@pytest.fixture(scope="session")
def redis_cluster(
    redis_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisCluster]:
    """One cluster for the session's conformance tests (nothing in it is killed)."""
    cluster = RedisCluster(redis_binary, tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def private_cluster(redis_binary: str, tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster of the test's own, whose masters the test may kill."""
    cluster = RedisCluster(redis_binary, tmp_path)
    cluster.start()
    yield cluster
    cluster.stop()


# -- a store other processes reach -------------------------------------------------------


@pytest.fixture(params=kinds(shared=True))
def kind(request: pytest.FixtureRequest) -> str:
    """Each kind of store other processes reach (a test module may narrow it by capability)."""
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the store of ``kind`` is: a file for SQLite, the session server's URL else."""
    if kind == "sqlite":
        return str(tmp_path / "shared.db")
    if kind == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    if kind == "redis-cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return str(request.getfixturevalue("redis_url"))
