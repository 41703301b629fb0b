"""What the shared event stream costs a guarded call, and how fast it is read back.

Run ``python benchmarks/bench_stream.py`` (under a minute; ``--calls N`` per sample). It
starts its own redis-server on a free loopback port (``--save '' --appendonly no``) and
stops it at the end.

Rows, each the median of 5 interleaved samples of ``--calls`` guarded no-op calls
(``enforce="cooperative"``, a memory breaker store; each call appends two entries,
request and success):

- ``no listener``: the quiet fast path, for reference;
- ``listener (no-op)``: the price of routing every request through the core, which any
  listener pays;
- ``stream memory://``, ``stream sqlite://``, ``stream redis://``: the publisher
  appending to each backend.

Then reading back: entries per second through ``toolbreaker export`` (trace lines) and
through the dashboard's board (fold plus calibration), and the size of the dashboard's
first snapshot for 1,000 breakers.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from toolbreaker import Breaker, Registry
from toolbreaker.cli._dashboard import Board
from toolbreaker.cli._observe import export_trace
from toolbreaker.instrumentation.stream import (
    MemoryStream,
    RedisStream,
    SQLiteStream,
    StreamPublisher,
    iter_entries,
)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is needed (apt-get install redis-server)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--appendonly", "no", "--dir", directory]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        try:
            for _ in range(200):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(5)


def sample(build: Callable[[], Breaker], calls: int) -> float:
    breaker = build()
    for _ in range(300):
        breaker.call(int)
    gc.collect()
    start = time.perf_counter_ns()
    for _ in range(calls):
        breaker.call(int)
    return (time.perf_counter_ns() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5_000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp())
    with redis_server() as url:
        redis_stream = RedisStream(url, key="bench:events")
        sqlite_stream = SQLiteStream(directory / "events.db")
        memory_stream = MemoryStream()

        def breaker(listener: object = None) -> Callable[[], Breaker]:
            def build() -> Breaker:
                made = Breaker("search", timeout=1.0, enforce="cooperative")
                if listener is not None:
                    made.add_listener(listener)  # type: ignore[arg-type]
                return made

            return build

        rows = {
            "no listener": breaker(),
            "listener (no-op)": breaker(lambda record, b: None),
            "stream memory://": breaker(StreamPublisher(memory_stream)),
            "stream sqlite://": breaker(StreamPublisher(sqlite_stream)),
            "stream redis://": breaker(StreamPublisher(redis_stream)),
        }
        samples: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(5):
            for name, build in rows.items():
                samples[name].append(sample(build, args.calls))
        base = statistics.median(samples["no listener"])
        print(f"{'row':<20} {'ns/call':>10} {'x quiet':>8}")
        for name, values in samples.items():
            median = statistics.median(values)
            print(f"{name:<20} {median:>10.0f} {median / base:>8.1f}")

        entries = [entry for _, entry in iter_entries(sqlite_stream)]
        start = time.perf_counter()
        written, _ = export_trace(entries, io.StringIO())
        elapsed = time.perf_counter() - start
        print(f"\nexport: {written / elapsed:,.0f} entries/s ({written:,} entries)")
        start = time.perf_counter()
        Board().feed(entries)
        elapsed = time.perf_counter() - start
        print(f"dashboard board: {len(entries) / elapsed:,.0f} entries/s (fold + calibration)")

        stream = MemoryStream()
        publisher = StreamPublisher(stream)
        many = Registry(default_timeout=1.0, default_enforce="cooperative")
        for n in range(1_000):
            one = many.get(f"service-{n:04d}")
            publisher.attach(one)
            one.call(int)
        board = Board()
        board.feed(entry for _, entry in stream.read())
        size = len(json.dumps(board.snapshot()))
        print(f"first snapshot, 1,000 breakers: {size / 1024:,.0f} KiB")
        redis_stream.close()
        sqlite_stream.close()
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
