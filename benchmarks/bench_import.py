"""How long does ``import toolbreaker`` take, and how many modules does it load?

Run ``python benchmarks/bench_import.py`` (under a minute; ``--runs N`` fresh interpreters
per row, 15 by default; ``--where STATEMENT`` adds the ten slowest modules of one
statement, from ``python -X importtime``; ``--src DIR`` times another checkout's ``src``,
an older commit's for instance, exported with ``git archive``; ``--before DIR`` times
another ``src`` in the same runs, interleaved, and prints the two side by side).

Each row is one import statement, run in N fresh interpreters one after the other
(interleaved with the other rows, so a busy moment of the machine spreads over all of
them). In each interpreter the statement is timed with ``time.perf_counter`` around its
``exec`` (the interpreter's own start-up is not counted, nor the ``site`` modules it
loaded before), wall clock and the process's CPU time (which a busy machine's waits for a
core do not inflate), and the modules it added to ``sys.modules`` are counted. A row
prints the best and the median of each time, and the modules loaded (``toolbreaker``'s
own / all).

The peers (pybreaker, circuitbreaker, aiobreaker, purgatory, tenacity) are timed the same
way when they are installed, and ``import asyncio`` as a reference: a breaker's async
paths need it, so ``from toolbreaker import Breaker`` cannot be cheaper than it.

Two more rows make a figure comparable across machines. The *floor* is what a typed,
thread-safe core of frozen dataclasses cannot avoid loading from the standard library
(``dataclasses`` brings ``re``, ``inspect``, ``ast``; ``enum`` the phases; ``typing`` the
protocols and typed dicts; ``threading`` the locks): on a machine where ``import asyncio``
takes 50 ms it is not 3 ms. The *first call* row imports ``Registry`` and makes a
registry, a breaker and one call, so that what the import leaves for later is counted
too. The summary prints ``from toolbreaker import Registry`` as floor + toolbreaker's own
cost, the ratio to the floor, and the first call beyond the import (best and median, all
from the same interleaved runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

SRC = Path(__file__).resolve().parents[1] / "src"

ROWS = (
    "import toolbreaker",
    "from toolbreaker import Policy",
    "from toolbreaker import Breaker",
    "from toolbreaker import Registry",
    "from toolbreaker import RunGuard",
    "from toolbreaker import *",
)
PEERS = {
    "pybreaker": "import pybreaker",
    "circuitbreaker": "import circuitbreaker",
    "aiobreaker": "import aiobreaker",
    "purgatory": "import purgatory",
    "tenacity": "import tenacity",
}
REFERENCE = "import asyncio"
#: What a core of frozen dataclasses, typed and thread-safe, cannot avoid importing.
FLOOR = "import dataclasses, enum, threading, typing"
#: The statement whose cost is reported against the floor.
MEASURED = "from toolbreaker import Registry"
#: The import, then a registry, a breaker and one call: what the import left for later.
FIRST_CALL = 'from toolbreaker import Registry; Registry().get("bench").call(int, timeout=5)'

#: What runs in each fresh interpreter: the statement, timed (wall clock and the
#: process's CPU time), and what it loaded.
CHILD = """
import sys, time
before = set(sys.modules)
start, cpu = time.perf_counter(), time.process_time()
exec(compile(STATEMENT, "<bench>", "exec"), {})
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
added = set(sys.modules) - before
own = sum(1 for name in added if name == "toolbreaker" or name.startswith("toolbreaker."))
print(elapsed * 1000, cpu * 1000, own, len(added))
"""


class Sample(NamedTuple):
    """One statement in one fresh interpreter."""

    ms: float  # wall clock
    cpu_ms: float  # the process's CPU time: what a busy machine's waits do not inflate
    own: int  # toolbreaker's modules it loaded
    added: int  # all the modules it loaded


def environment(src: Path = SRC) -> dict[str, str]:
    """This checkout's toolbreaker first on the path, whatever is installed, and its
    bytecode cached as an installed package's is (``PYTHONDONTWRITEBYTECODE`` would time
    the compiler)."""
    path = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def once(statement: str, src: Path = SRC) -> Sample:
    code = CHILD.replace("STATEMENT", repr(statement))
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=environment(src),
    )
    ms, cpu_ms, own, added = done.stdout.split()
    return Sample(float(ms), float(cpu_ms), int(own), int(added))


def slowest(statement: str, src: Path = SRC, count: int = 10) -> list[tuple[int, int, str]]:
    """The modules of ``statement`` with the most time of their own (``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        env=environment(src),
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, total, name = (part.strip() for part in line[len("import time:") :].split("|"))
        rows.append((int(own), int(total), name.strip()))
    return sorted(rows, reverse=True)[:count]


def against_floor(samples: dict[str, list[Sample]]) -> list[str]:
    """``MEASURED`` as the floor plus toolbreaker's own cost, its ratio to the floor, and
    what the first call adds to the import; by best and by median of the same runs, in
    wall-clock and in CPU milliseconds."""
    lines = [f"{MEASURED!r} against the floor {FLOOR!r}:"]
    for clock in ("ms", "cpu_ms"):
        for name, pick in (("best", min), ("median", statistics.median)):
            floor = pick(getattr(x, clock) for x in samples[FLOOR])
            measured = pick(getattr(x, clock) for x in samples[MEASURED])
            first = pick(getattr(x, clock) for x in samples[FIRST_CALL])
            lines.append(
                f"  {'wall' if clock == 'ms' else 'cpu':<4} {name:<6} {measured:6.1f} ms"
                f" = floor {floor:5.1f} + own {measured - floor:5.1f}"
                f" ({measured / floor:.2f}x the floor); the first call adds {first - measured:5.1f}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters per row")
    parser.add_argument("--json", type=Path, help="also write the raw samples here")
    parser.add_argument("--where", action="append", default=[], help="a statement to explain")
    parser.add_argument("--src", type=Path, default=SRC, help="the src folder to time")
    parser.add_argument("--before", type=Path, help="another src folder, timed in the same runs")
    args = parser.parse_args()

    rows = list(ROWS)
    missing = []
    for name, statement in PEERS.items():
        if importlib.util.find_spec(name) is None:
            missing.append(name)
        else:
            rows.append(statement)
    rows += [REFERENCE, FLOOR, FIRST_CALL]

    srcs = [args.src] if args.before is None else [args.before, args.src]
    for src in srcs:
        for row in rows:  # once untimed: writes the bytecode cache
            once(row, src)
    runs: dict[Path, dict[str, list[Sample]]] = {src: {row: [] for row in rows} for src in srcs}
    for _ in range(args.runs):
        for row in rows:
            for src in srcs:
                runs[src][row].append(once(row, src))

    print(f"Python {sys.version.split()[0]}")
    for src in srcs:
        samples = runs[src]
        print(f"\n{src}: best and median of {args.runs} fresh interpreters")
        print(
            f"{'statement':<44} {'best ms':>8} {'median ms':>10} {'cpu best':>9}"
            f" {'cpu median':>11} {'modules (own/all)':>18}"
        )
        for row in rows:
            times = [x.ms for x in samples[row]]
            cpu = [x.cpu_ms for x in samples[row]]
            last = samples[row][-1]
            shown = "first call (import, Registry(), get, call)" if row == FIRST_CALL else row
            print(
                f"{shown:<44} {min(times):8.1f} {statistics.median(times):10.1f}"
                f" {min(cpu):9.1f} {statistics.median(cpu):11.1f} {last.own:>8}/{last.added}"
            )
        print()
        for line in against_floor(samples):
            print(line)
    if args.before is not None:
        print(f"\nbefore ({args.before}) and after ({args.src}), the same runs:")
        for row in (MEASURED, FIRST_CALL):
            for clock in ("ms", "cpu_ms"):
                before = [getattr(x, clock) for x in runs[args.before][row]]
                after = [getattr(x, clock) for x in runs[args.src][row]]
                shown = "first call" if row == FIRST_CALL else row
                print(
                    f"  {shown:<34} {'wall' if clock == 'ms' else 'cpu':<4}"
                    f" best {min(before):6.1f} -> {min(after):6.1f} ms,"
                    f" median {statistics.median(before):6.1f} -> {statistics.median(after):6.1f}"
                    f" ms ({statistics.median(after) / statistics.median(before):.2f}x)"
                )
    if missing:
        print(f"not installed (pip install -e '.[bench]'): {', '.join(missing)}")
    for statement in args.where:
        print(f"\nslowest modules of {statement!r} (self us, cumulative us):")
        for own_us, total_us, name in slowest(statement, args.src):
            print(f"  {own_us:>7} {total_us:>8}  {name}")
    if args.json:
        raw = {
            str(src): {row: [x._asdict() for x in xs] for row, xs in samples.items()}
            for src, samples in runs.items()
        }
        args.json.write_text(json.dumps(raw, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
