"""How long does ``import toolbreaker`` take, and how many modules does it load?

Run ``python benchmarks/bench_import.py`` (under a minute; ``--runs N`` fresh interpreters
per row, 15 by default; ``--where STATEMENT`` adds the ten slowest modules of one
statement, from ``python -X importtime``; ``--src DIR`` times another checkout's ``src``,
an older commit's for instance, exported with ``git archive``).

Each row is one import statement, run in N fresh interpreters one after the other
(interleaved with the other rows, so a busy moment of the machine spreads over all of
them). In each interpreter the statement is timed with ``time.perf_counter`` around its
``exec`` (the interpreter's own start-up is not counted, nor the ``site`` modules it
loaded before), and the modules it added to ``sys.modules`` are counted. A row prints the
best and the median time, and the modules loaded (``toolbreaker``'s own / all).

The peers (pybreaker, circuitbreaker, aiobreaker, purgatory, tenacity) are timed the same
way when they are installed, and ``import asyncio`` as a reference: a breaker's async
paths need it, so ``from toolbreaker import Breaker`` cannot be cheaper than it.
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

#: What runs in each fresh interpreter: the statement, timed, and what it loaded.
CHILD = """
import sys, time
before = set(sys.modules)
start = time.perf_counter()
exec(compile(STATEMENT, "<bench>", "exec"), {})
elapsed = time.perf_counter() - start
added = set(sys.modules) - before
own = sum(1 for name in added if name == "toolbreaker" or name.startswith("toolbreaker."))
print(elapsed * 1000, own, len(added))
"""


def environment(src: Path = SRC) -> dict[str, str]:
    """This checkout's toolbreaker first on the path, whatever is installed, and its
    bytecode cached as an installed package's is (``PYTHONDONTWRITEBYTECODE`` would time
    the compiler)."""
    path = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def once(statement: str, src: Path = SRC) -> tuple[float, int, int]:
    code = CHILD.replace("STATEMENT", repr(statement))
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=environment(src),
    )
    ms, own, added = done.stdout.split()
    return float(ms), int(own), int(added)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters per row")
    parser.add_argument("--json", type=Path, help="also write the raw samples here")
    parser.add_argument("--where", action="append", default=[], help="a statement to explain")
    parser.add_argument("--src", type=Path, default=SRC, help="the src folder to time")
    args = parser.parse_args()

    rows = list(ROWS)
    missing = []
    for name, statement in PEERS.items():
        if importlib.util.find_spec(name) is None:
            missing.append(name)
        else:
            rows.append(statement)
    rows.append(REFERENCE)

    for row in rows:  # once untimed: writes the bytecode cache
        once(row, args.src)
    samples: dict[str, list[tuple[float, int, int]]] = {row: [] for row in rows}
    for _ in range(args.runs):
        for row in rows:
            samples[row].append(once(row, args.src))

    print(f"Python {sys.version.split()[0]}, {args.src}")
    print(f"best and median of {args.runs} fresh interpreters")
    print(f"{'statement':<36} {'best ms':>8} {'median ms':>10} {'modules (own/all)':>18}")
    for row in rows:
        times = [ms for ms, _, _ in samples[row]]
        _, own, added = samples[row][-1]
        print(f"{row:<36} {min(times):8.1f} {statistics.median(times):10.1f} {own:>8}/{added}")
    if missing:
        print(f"not installed (pip install -e '.[bench]'): {', '.join(missing)}")
    for statement in args.where:
        print(f"\nslowest modules of {statement!r} (self us, cumulative us):")
        for own_us, total_us, name in slowest(statement, args.src):
            print(f"  {own_us:>7} {total_us:>8}  {name}")
    if args.json:
        args.json.write_text(json.dumps(samples, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
