"""Build one source of the real-runs corpus: public agent runs, as recorded runs, compressed.

Converts files of one format with :func:`toolbreaker.importing.import_runs` (the same
code as ``toolbreaker import``) and writes ``OUT/SOURCE.jsonl.gz``: one run a line,
``{"run", "outcome", "detail", "warnings", "steps"}``, each step a line of the
recorded-run format. Every run needs a known outcome: from the source itself (tau-bench's
reward) or from a SWE-bench report (``--resolved``); a run without one is an error.

    python benchmarks/build_real_runs.py --format tau-bench --source tau-bench-airline \\
        --out DIR gpt-4o-airline.json
    python benchmarks/build_real_runs.py --format mini-swe-agent --source mini-swe-agent \\
        --resolved report.json --out DIR trajs/*.traj.json

Results longer than ``--trim`` characters (default 1000) keep their digest, length, head
and tail: equal results stay equal and different ones different, so repeats and new
evidence are judged as on the whole results (see :mod:`toolbreaker.importing._common`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from toolbreaker.importing import FORMATS, import_runs, judged, read_resolved
from toolbreaker.importing._common import ImportedRun


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--source", required=True, help="the corpus file's name")
    parser.add_argument("--out", required=True, type=Path, help="the corpus directory")
    parser.add_argument("--resolved", type=Path, help="a SWE-bench report of the runs")
    parser.add_argument("--trim", type=int, default=1000)
    args = parser.parse_args(argv)
    resolved = read_resolved(args.resolved) if args.resolved else None
    runs: list[ImportedRun] = []
    for path in sorted(args.files):
        for imported in import_runs(args.format, path, trim=args.trim):
            run = imported if resolved is None else judged(imported, *resolved)
            if run.outcome is None:
                print(f"{path}: run {run.name} has no known outcome", file=sys.stderr)
                return 2
            runs.append(run)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{args.source}.jsonl.gz"
    # mtime=0: the same runs give the same bytes.
    with target.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        for run in runs:
            line = {
                "run": run.name,
                "outcome": run.outcome,
                "detail": dict(run.detail),
                "warnings": list(run.warnings),
                "steps": list(run.steps),
            }
            out.write((json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n").encode())
    successes = sum(1 for run in runs if run.outcome == "success")
    print(
        f"{target}: {len(runs)} runs ({successes} successful), "
        f"{sum(len(r.steps) for r in runs)} steps, {target.stat().st_size:,} bytes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
