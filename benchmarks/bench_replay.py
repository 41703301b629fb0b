"""Replay of big traces: events per second and peak memory of ``toolbreaker replay``.

Run ``python benchmarks/bench_replay.py`` (a few minutes; ``--sizes 1 20`` for fewer MB).
For each size it writes a generated trace to a temporary directory, runs
``toolbreaker replay`` in a fresh process with the receipt going to a temporary file,
and prints the events per second (wall clock, and per CPU-second of the child, which a
busy machine disturbs less) and the child's peak RSS (``ru_maxrss``). The trace: 200
dependencies, each request settled by an explicit outcome, failures in bursts so every
breaker opens, rejects and probes.

Targets (issue 11): a 200 MB trace under 200 MB of peak RSS, at 150,000 events/s or more
on a 2-core machine with CPython 3.11.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

DEPENDENCIES = 200


def write_trace(path: Path, megabytes: int) -> int:
    """Write about ``megabytes`` MB of trace; return the number of events."""
    target = megabytes * 1024 * 1024
    deps = [f"tool-{i:03d}" for i in range(DEPENDENCIES)]
    size = events = 0
    step = 0
    with path.open("w", encoding="utf-8") as out:
        while size < target:
            lines = []
            for _ in range(1000):
                dep = deps[step % DEPENDENCIES]
                at = step * 7
                call = f"c{step}"
                # Each dependency fails 4 times in 10 rounds: it opens, rejects, probes.
                kind = "failure" if (step // DEPENDENCIES) % 10 < 4 else "success"
                lines.append(
                    f'{{"at":{at},"dependency":"{dep}","type":"request","call":"{call}"}}\n'
                )
                lines.append(
                    f'{{"at":{at + 3},"dependency":"{dep}","type":"{kind}","call":"{call}"}}\n'
                )
                step += 1
            chunk = "".join(lines)
            out.write(chunk)
            size += len(chunk)
            events += len(lines)
    return events


def measure(trace: Path, events: int, extra: list[str]) -> tuple[float, float, float, int]:
    """Replay in a child process: (events/s wall, events/CPU-s, peak RSS MB, receipt bytes)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as receipt:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        before, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "toolbreaker", "replay", str(trace), *extra],
            stdout=receipt,
            check=True,
        )
        elapsed = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu
        size = os.fstat(receipt.fileno()).st_size
    if peak <= before:
        print("  (peak RSS not above an earlier child's; run one size at a time)")
    return events / elapsed, events / cpu, peak / 1024, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 20, 200], help="MB")
    parser.add_argument("--summary", action="store_true", help="replay with --summary")
    args = parser.parse_args()
    extra = ["--summary"] if args.summary else []
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    calibration = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(
        f"load average {os.getloadavg()[0]:.1f}; sum(range(1000)) takes {calibration:.1f} us "
        "(compare it with an idle machine to judge how busy this one is)"
    )
    print(
        f"{'trace':>8} {'events':>11} {'events/s':>10} {'per CPU-s':>10} {'peak RSS':>9} "
        f"{'receipt':>10}"
    )
    with tempfile.TemporaryDirectory() as folder:
        # Largest last: ru_maxrss of children is a high-water mark over all of them.
        for megabytes in sorted(args.sizes):
            trace = Path(folder) / f"trace-{megabytes}.jsonl"
            events = write_trace(trace, megabytes)
            rate, cpu_rate, peak, size = measure(trace, events, extra)
            print(
                f"{megabytes:>6}MB {events:>11,} {rate:>10,.0f} {cpu_rate:>10,.0f} "
                f"{peak:>7.0f}MB {size / 1024 / 1024:>8.0f}MB"
            )
            trace.unlink()


if __name__ == "__main__":
    main()
