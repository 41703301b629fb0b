"""``toolbreaker import FORMAT FILE... -o OUT``: recorded runs from other formats.

Converts traces, message histories and trajectories (:mod:`toolbreaker.importing`) into
recorded runs that ``toolbreaker check-run`` replays. ``-o`` names a ``.jsonl`` file
(the input then holds exactly one run) or a directory, made if missing, that receives one
``NAME.jsonl`` a run and ``runs.jsonl``: one line a run with its file, its source, what
the source says of it (``outcome``: ``success`` or ``failure`` where known, ``detail``)
and its warnings. Nothing is overwritten. Each run is one line on stdout; what a source
holds that the format cannot say is one ``warning:`` line on stderr, naming the file and
the run. A file that is not of its format is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Final, cast, get_args

from toolbreaker.core._files import printable
from toolbreaker.core._run.budget import RiskClass
from toolbreaker.errors import TraceError

__all__ = ["add_command"]

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")
#: The index of the runs written to a directory.
INDEX: Final = "runs.jsonl"


def add_command(commands: Any) -> None:
    """Register ``import`` on the top-level subparsers."""
    from toolbreaker.importing import FORMATS

    cmd = commands.add_parser(
        "import", help="convert traces, histories or trajectories into recorded runs"
    )
    cmd.add_argument("format", choices=FORMATS, help="what the files are")
    cmd.add_argument("files", nargs="+", metavar="FILE", help="the files to convert")
    cmd.add_argument(
        "-o",
        "--out",
        required=True,
        help="a .jsonl file (one run in all) or a directory (one file a run, and runs.jsonl)",
    )
    cmd.add_argument(
        "--risk",
        action="append",
        default=[],
        metavar="TOOL=CLASS",
        help="a tool's risk class: read, reversible_write or irreversible (repeatable)",
    )
    cmd.add_argument(
        "--trim",
        type=int,
        metavar="CHARS",
        help="keep result texts longer than this as digest, length, head and tail",
    )
    cmd.add_argument(
        "--resolved",
        metavar="REPORT",
        help="a SWE-bench report: its resolved instances succeeded, the others failed",
    )
    cmd.set_defaults(run_command=_run)


def _run(args: argparse.Namespace) -> int:
    from toolbreaker.importing import import_runs, judged, read_resolved

    risks = _risks(args.risk)
    if args.trim is not None and args.trim < 1:
        raise TraceError(f"--trim must be a positive number of characters, got {args.trim}")
    resolved = read_resolved(args.resolved) if args.resolved else None
    runs = []
    for path in args.files:
        for run in import_runs(args.format, path, risks=risks, trim=args.trim):
            runs.append(run if resolved is None else judged(run, *resolved))
    out = Path(args.out)
    if out.suffix == ".jsonl":
        if len(runs) != 1:
            raise TraceError(
                f"the files hold {len(runs)} runs: -o needs a directory for them", file=args.out
            )
        _write({out: runs[0].to_jsonl()})
        written = [(out, runs[0])]
    else:
        written = _directory(out, runs)
    for path, run in written:
        calls = sum(1 for step in run.steps if "tool" in step)
        said = f", {run.outcome}" if run.outcome else ""
        print(printable(f"{path}: {len(run.steps)} steps, {calls} tool calls{said}"))
        for warning in run.warnings:
            print(printable(f"warning: {run.source}: run {run.name}: {warning}"), file=sys.stderr)
    return 0


def _risks(pairs: list[str]) -> dict[str, RiskClass]:
    risks: dict[str, RiskClass] = {}
    known = get_args(RiskClass)
    for pair in pairs:
        tool, _, risk = pair.partition("=")
        if not tool or risk not in known:
            raise TraceError(f"--risk takes TOOL=CLASS, CLASS one of {', '.join(known)}: {pair!r}")
        risks[tool] = cast(RiskClass, risk)  # one of RiskClass's values, checked above
    return risks


def _directory(out: Path, runs: list[Any]) -> list[tuple[Path, Any]]:
    if out.exists() and not out.is_dir():
        raise TraceError("-o names a file that is not .jsonl: give a directory", file=str(out))
    if not out.exists() and not out.parent.is_dir():
        raise TraceError("-o: the parent directory does not exist", file=str(out))
    files: dict[Path, str] = {}
    written = []
    index = []
    for run in runs:
        stem = _UNSAFE.sub("_", run.name).strip("._") or "run"
        path = out / f"{stem}.jsonl"
        number = 1
        while path in files:
            number += 1
            path = out / f"{stem}-{number}.jsonl"
        files[path] = run.to_jsonl()
        written.append((path, run))
        index.append(
            json.dumps(
                {
                    "file": path.name,
                    "source": run.source,
                    "name": run.name,
                    "outcome": run.outcome,
                    "detail": dict(run.detail),
                    "warnings": list(run.warnings),
                },
                ensure_ascii=False,
            )
        )
    files[out / INDEX] = "".join(line + "\n" for line in index)
    _write(files)
    return written


def _write(files: dict[Path, str]) -> None:
    """Write every file, none of which may exist yet (checked before the first is written)."""
    for path in files:
        if path.exists():
            raise TraceError("would overwrite it", file=str(path))
    try:
        for path, text in files.items():
            path.parent.mkdir(exist_ok=True)
            with path.open("x", encoding="utf-8") as handle:
                handle.write(text)
    except OSError as exc:
        raise TraceError(f"cannot write: {exc.strerror or exc}", file=str(exc.filename)) from None
