"""What ``toolbreaker mcp`` adds to a healthy ``tools/call``: latency (p50, p99) and calls/s.

Run ``python benchmarks/bench_mcp_gateway.py`` (about a minute; ``--calls N`` per sample,
``--rounds N``). A host in this process sends ``tools/call`` after ``tools/call``, one at
a time, and times each round trip, to the server directly and through the gateway:

- **stdio**: the server is a tiny standard-library MCP server that answers in
  microseconds (``ECHO``), so what the gateway adds is not hidden by the server's own
  time; the gateway is ``toolbreaker mcp --sheet S -- python -c ECHO``, a process of its
  own, as a host launches it. Two gateway configurations: the default (the tool's
  breaker, the server's transport breaker and a run guard per session, with a budget
  large enough never to stop the run) and ``[mcp] run_guard = false`` (breakers only);
- **HTTP**: the server is the MCP SDK's ``MCPServer`` over streamable HTTP (JSON
  responses); the gateway is ``toolbreaker mcp --http`` with that URL as its upstream,
  so both arms cross the same server stack and the gateway adds one HTTP hop.

The host speaks raw JSON-RPC (JSON lines on stdio, POSTs over one keep-alive HTTP
connection) so its own cost is the same, and small, in every arm. Arms are sampled
interleaved, round by round; every round opens fresh processes and warms them up first.
Printed per arm: p50 and p99 of the round trip in microseconds (medians over rounds),
calls per second, and for each gateway arm what it adds over its direct arm at p50 and
p99. The target: under 500 µs added at p50 over stdio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

ECHO = r"""
import json, sys
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    message = json.loads(line)
    if "id" not in message:
        continue
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-11-25"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}
    elif method == "tools/list":
        schema = {"type": "object", "properties": {"i": {"type": "integer"}}}
        result = {"tools": [{"name": "echo", "annotations": {"readOnlyHint": True},
                             "inputSchema": schema}]}
    elif method == "tools/call":
        text = json.dumps(params.get("arguments"))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        result = {}
    answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    out.write(json.dumps(answer).encode() + b"\n")
    out.flush()
"""

HTTP_SERVER = r"""
import sys
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
server = MCPServer("echo")

@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(i: int) -> str:
    return str(i)

server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=True)
"""

SHEET = """
[defaults]
timeout_ms = 10000

[mcp]
run_guard = {guard}

[mcp.budget]
max_tool_calls = 100000000
max_repeats = 100000000
[mcp.budget.classes.read]
max_calls = 100000000
"""

INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"},
}
SRC = Path(__file__).resolve().parents[1] / "src"


def env() -> dict[str, str]:
    found = dict(os.environ)
    found["PYTHONPATH"] = str(SRC) + os.pathsep + found.get("PYTHONPATH", "")
    return found


def gateway(*args: str) -> list[str]:
    return [sys.executable, "-m", "toolbreaker", "mcp", *args]


# -- the host -----------------------------------------------------------------------------


class StdioHost:
    """Raw JSON lines to a process; one request at a time."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env(),
        )
        self.ids = 0
        self.call("initialize", INITIALIZE)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.call("tools/list", {})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
            if answer.get("id") == self.ids:
                return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class HttpHost:
    """Raw JSON-RPC POSTs over one keep-alive connection; one request at a time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx2.Client(timeout=30)
        self.headers = {"accept": "application/json, text/event-stream"}
        self.ids = 0
        opened = self._post(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE}
        )
        self.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = "2025-11-25"
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _post(self, message: dict[str, Any]) -> Any:
        return self.client.post(self.url, json=message, headers=self.headers)

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        answer = self._post({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        text = answer.text
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        found: dict[str, Any] = json.loads(text)
        return found

    def close(self) -> None:
        self.client.delete(self.url, headers=self.headers)
        self.client.close()


def sample(host: Any, calls: int, warmup: int) -> tuple[list[float], float]:
    """Round trips in microseconds, and calls per second, of ``calls`` echo calls."""
    for i in range(warmup):
        host.call("tools/call", {"name": "echo", "arguments": {"i": -i - 1}})
    times = []
    start = time.perf_counter()
    for i in range(calls):
        began = time.perf_counter_ns()
        answer = host.call("tools/call", {"name": "echo", "arguments": {"i": i}})
        times.append((time.perf_counter_ns() - began) / 1000)
        if answer["result"].get("isError"):
            raise SystemExit(f"call {i} failed: {answer}")
    return times, calls / (time.perf_counter() - start)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.05)
        else:
            return
    raise SystemExit(f"nothing listens on {port}")


# -- the arms -----------------------------------------------------------------------------


def arms(workdir: Path) -> dict[str, Callable[[], tuple[Any, Callable[[], None]]]]:
    """Per arm: open a host (and its processes); returns it and how to close it all."""
    sheets = {}
    for guard in ("true", "false"):
        path = workdir / f"bench-{guard}.toml"
        path.write_text(SHEET.replace("{guard}", guard), encoding="utf-8")
        sheets[guard] = str(path)
    echo = [sys.executable, "-c", ECHO]

    def stdio(argv: list[str]) -> Callable[[], tuple[Any, Callable[[], None]]]:
        def open_arm() -> tuple[Any, Callable[[], None]]:
            host = StdioHost(argv)
            return host, host.close

        return open_arm

    def http(through_gateway: bool) -> Callable[[], tuple[Any, Callable[[], None]]]:
        def open_arm() -> tuple[Any, Callable[[], None]]:
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, "-c", HTTP_SERVER, str(port)],
                env=env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs = [server]
            wait_for(port)
            url = f"http://127.0.0.1:{port}/mcp"
            if through_gateway:
                front = free_port()
                procs.append(
                    subprocess.Popen(
                        gateway(
                            "--sheet",
                            sheets["true"],
                            "--http",
                            "--port",
                            str(front),
                            "--upstream",
                            url,
                        ),
                        env=env(),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                wait_for(front)
                url = f"http://127.0.0.1:{front}/mcp/upstream"
            host = HttpHost(url)

            def close() -> None:
                host.close()
                for proc in reversed(procs):
                    proc.terminate()
                    proc.wait(timeout=30)

            return host, close

        return open_arm

    return {
        "stdio direct": stdio(echo),
        "stdio gateway": stdio(gateway("--sheet", sheets["true"], "--", *echo)),
        "stdio gateway, breakers only": stdio(gateway("--sheet", sheets["false"], "--", *echo)),
        "HTTP direct": http(through_gateway=False),
        "HTTP gateway": http(through_gateway=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per sample")
    parser.add_argument("--rounds", type=int, default=3, help="samples per arm, interleaved")
    parser.add_argument("--warmup", type=int, default=300, help="untimed calls per sample")
    parser.add_argument("--json", metavar="PATH", help="also write the samples here")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        table = arms(Path(tmp))
        for _ in range(args.rounds):
            for name, open_arm in table.items():
                host, close = open_arm()
                try:
                    times, rate = sample(host, args.calls, args.warmup)
                finally:
                    close()
                times.sort()
                p50 = times[len(times) // 2]
                p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
                results.setdefault(name, []).append((p50, p99, rate))
    print(f"# tools/call round trips, {args.calls} calls x {args.rounds} rounds per arm")
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'arm':32} {'p50 us':>9} {'p99 us':>9} {'calls/s':>9} {'added p50':>10} {'added p99':>10}"
    )
    medians = {
        name: tuple(statistics.median(r[i] for r in rows) for i in range(3))
        for name, rows in results.items()
    }
    for name, (p50, p99, rate) in medians.items():
        base = "stdio direct" if name.startswith("stdio") else "HTTP direct"
        added = ""
        if name != base:
            added = f"{p50 - medians[base][0]:>10.0f} {p99 - medians[base][1]:>10.0f}"
        print(f"{name:32} {p50:>9.0f} {p99:>9.0f} {rate:>9.0f} {added}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
