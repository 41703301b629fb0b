"""Replay of big traces: events per second and peak memory of ``toolbreaker replay``.

Run ``python benchmarks/bench_replay.py`` (a few minutes; ``--sizes 1 20`` for fewer MB).
For each size it writes a generated trace to a temporary directory, runs
``toolbreaker replay`` in a fresh process with the receipt going to a temporary file,
and prints the events per second (wall clock, and per CPU-second of the child and the
processes it starts, which a busy machine disturbs less) and their peak RSS, summed
over the processes. Each size runs twice: with the defaults (a trace of 8 MB or more
is split by dependency across one process per usable CPU) and with ``--jobs 1`` (one
process). With ``--repeat N`` each row is the median of N runs (and the highest peak).
The trace: 200 dependencies, each request settled by an explicit outcome, failures in
bursts so every breaker opens, rejects and probes.

Targets (issue 11): a 200 MB trace under 200 MB of peak RSS, at 150,000 events/s or more
on a 2-core machine with CPython 3.11.

``--breakdown`` also replays the 20 MB trace in this process, stage by stage (reading,
matching plain lines, the core's decisions, the call-id set, keeping records, spilling,
writing the receipt), and prints the CPU time per event each stage adds: where the time
of one event goes.
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
from collections.abc import Callable
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


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    todo.extend(int(child) for child in children.read().split())
        except OSError:
            pass
    return found


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(trace: Path, events: int, extra: list[str]) -> tuple[float, float, float, int]:
    """Replay in a child process: (events/s wall, events/CPU-s, peak RSS MB, receipt bytes).

    The peak RSS is the highest sum of the resident sets of the child and the processes
    it starts, sampled every 10 ms (shared pages count once per process, so a replay
    split across forked processes is overcounted, never under).
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as receipt:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "toolbreaker", "replay", str(trace), *extra],
            stdout=receipt,
        )
        peak = 0
        while child.poll() is None:
            peak = max(peak, sum(_rss_kb(pid) for pid in _tree(child.pid)))
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
        if child.returncode:
            raise SystemExit(f"replay failed with exit code {child.returncode}")
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime - cpu
        size = os.fstat(receipt.fileno()).st_size
    return events / elapsed, events / cpu, peak / 1024, size


def breakdown(trace: Path, events: int) -> None:
    """CPU microseconds per event that each stage of the replay adds (best of three)."""
    from toolbreaker._replaying import StreamingReplay, _spill
    from toolbreaker.core._breaker.policy import Policy
    from toolbreaker.core._breaker.trace import PLAIN_LINE
    from toolbreaker.core._files import iter_line_blocks
    from toolbreaker.errors import TraceError

    path = str(trace)

    def read() -> None:
        for _ in iter_line_blocks(path, TraceError):
            pass

    def match() -> None:
        for _, lines in iter_line_blocks(path, TraceError):
            for line in lines:
                found = PLAIN_LINE.fullmatch(line)
                if found is not None:
                    int(found.group(1))

    class NoKeep(StreamingReplay):
        def _keep_plain(self, *args: object) -> None:  # type: ignore[override]
            pass

    class NoIds(NoKeep):
        def _seen_check(self):  # type: ignore[no-untyped-def]
            return lambda ledger, dependency, call: False

    def replay(kind: type[StreamingReplay]) -> StreamingReplay:
        driver = kind(Policy())
        driver.feed_trace(path)
        return driver

    def unflushed() -> None:
        limit = _spill._FLUSH_BYTES
        _spill._FLUSH_BYTES = 1 << 40  # type: ignore[misc]
        try:
            replay(StreamingReplay).close()
        finally:
            _spill._FLUSH_BYTES = limit  # type: ignore[misc]

    def write() -> float:
        driver = replay(StreamingReplay)
        with tempfile.TemporaryFile("w", encoding="utf-8") as out:
            start = time.process_time()
            driver.write(out)
            spent = time.process_time() - start
        driver.close()
        return spent

    def best(stage: Callable[[], object]) -> float:
        runs = []
        for _ in range(3):
            start = time.process_time()
            stage()
            runs.append(time.process_time() - start)
        return min(runs) / events * 1e6

    stages = [
        ("read lines (1 MB blocks, decode, split)", best(read)),
        ("+ match the plain shape, int()", best(match)),
        ("+ ledger and the core's plain_step", best(lambda: replay(NoIds).close())),
        ("+ call-id set", best(lambda: replay(NoKeep).close())),
        ("+ keep records (template and fields)", best(unflushed)),
        ("+ spill (marshal, counts)", best(lambda: replay(StreamingReplay).close())),
    ]
    print(f"\nwhere one event's CPU time goes ({events:,} events, best of 3):")
    before = 0.0
    for name, total in stages:
        print(f"  {name:44} {total - before:5.2f} us")
        before = total
    writing = min(write() for _ in range(3)) / events * 1e6
    print(f"  {'write the receipt (format, hash, output)':44} {writing:5.2f} us")
    total = before + writing
    print(f"  {'total':44} {total:5.2f} us = {1e6 / total:,.0f} events per CPU-second")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 20, 200], help="MB")
    parser.add_argument("--summary", action="store_true", help="replay with --summary")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per size and mode: the median is shown"
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="CPU time per event, stage by stage (20 MB)"
    )
    args = parser.parse_args()
    extra = ["--summary"] if args.summary else []
    modes = [("default", []), ("--jobs 1", ["--jobs", "1"])]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    calibration = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(
        f"load average {os.getloadavg()[0]:.1f}; sum(range(1000)) takes {calibration:.1f} us "
        "(compare it with an idle machine to judge how busy this one is)"
    )
    print(
        f"{'trace':>8} {'mode':>9} {'events':>11} {'events/s':>10} {'per CPU-s':>10} "
        f"{'peak RSS':>9} {'receipt':>10}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for megabytes in sorted(args.sizes):
            trace = Path(folder) / f"trace-{megabytes}.jsonl"
            events = write_trace(trace, megabytes)
            for mode, flags in modes:
                runs = sorted(measure(trace, events, extra + flags) for _ in range(args.repeat))
                rate, cpu_rate, _, size = runs[len(runs) // 2]  # the median by events/s
                peak = max(run[2] for run in runs)
                print(
                    f"{megabytes:>6}MB {mode:>9} {events:>11,} {rate:>10,.0f} "
                    f"{cpu_rate:>10,.0f} {peak:>7.0f}MB {size / 1024 / 1024:>8.0f}MB"
                )
            trace.unlink()
        if args.breakdown:
            trace = Path(folder) / "trace-breakdown.jsonl"
            breakdown(trace, write_trace(trace, 20))


if __name__ == "__main__":
    main()
