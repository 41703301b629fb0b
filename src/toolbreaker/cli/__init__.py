"""The ``toolbreaker`` command line.

User mistakes become one line on stderr, ``error: FILE:LINE: what is wrong``, and exit
code 2; never a traceback. ``diff`` exits 0 when receipts are equal and 1 when not;
``exercise`` exits 1 when a promise failed.

Untrusted text (dependency names, call ids, tool names, values echoed in errors) is
printed with control and bidi characters escaped; JSON output stays exact. A reader that
stops early (``| head``) ends the command quietly with exit 141, like a tool killed by
SIGPIPE; output that cannot be written (``> /dev/full``) is one error line and exit 2.
A deprecated spelling in an input (a sheet's ``timeout`` in seconds) is one line,
``warning: FILE:LINE: ...``, and the command carries on.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from toolbreaker.core._breaker.receipt import diff, dump_receipt, load_receipt
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.core._files import DUPLICATE_KEY, loads_json, printable, read_text
from toolbreaker.errors import (
    PolicyError,
    ToolbreakerDeprecationWarning,
    ToolbreakerError,
    TraceError,
)

__all__ = [
    "main",
]

EXIT_USAGE = 2
EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader went away


class _OutputError(ToolbreakerError):
    """Standard output could not be written (a full disk, ``/dev/full``)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
        try:
            with warnings.catch_warnings():
                _deprecations_as_lines()
                code: int = args.run_command(args)
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            if exc.filename is not None:  # pragma: no cover - every read is located already
                raise TraceError(f"{exc.strerror or exc}", file=str(exc.filename)) from None
            raise _OutputError(f"cannot write output: {exc.strerror or exc}") from None
    except ToolbreakerError as exc:
        located = getattr(exc, "located", None)
        message = located() if located else str(exc)
        if isinstance(exc, _OutputError):
            _silence_stdout()
        print(f"error: {printable(message)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE
    return code


def _deprecations_as_lines() -> None:
    """Print a deprecated spelling (an old sheet field) as one ``warning:`` line.

    Always, on stderr, and the command carries on; every other warning goes where it went.
    """
    shown_before = warnings.showwarning

    def show(  # noqa: PLR0917 - warnings.showwarning's signature
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, ToolbreakerDeprecationWarning):
            print(f"warning: {printable(str(message))}", file=sys.stderr)
            return
        shown_before(message, category, filename, lineno, file, line)

    warnings.filterwarnings("always", category=ToolbreakerDeprecationWarning)
    warnings.showwarning = show


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout is not a file
        pass


class _Escaping:
    """A text stream that escapes control and bidi characters in everything but newlines."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write("\n".join(printable(part) for part in text.split("\n")))

    def flush(self) -> None:
        self._out.flush()


def _parser() -> argparse.ArgumentParser:
    from toolbreaker.cli._options import Parser

    parser = Parser(
        prog="toolbreaker",
        description="Circuit breakers around the tools an AI agent calls.",
    )
    from toolbreaker import __version__

    parser.add_argument("--version", action="version", version=f"toolbreaker {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cmd = commands.add_parser("replay", help="replay a JSONL trace and print its receipt")
    cmd.add_argument("trace", help="JSON Lines, one event per line")
    cmd.add_argument(
        "--policy",
        help="boundary sheet or flat policy TOML (default: built-in defaults)",
    )
    cmd.add_argument("--initial-state", help="JSON object: dependency -> persisted state")
    cmd.add_argument(
        "--summary",
        action="store_true",
        help="print the counts and final state per dependency, without the transitions",
    )
    _add_jobs(cmd)
    cmd.set_defaults(run_command=_run_replay)

    cmd = commands.add_parser(
        "verify",
        help="replay a trace and check a receipt is exactly what it produces (exit 1 if not)",
    )
    cmd.add_argument("receipt", help="the receipt to check")
    cmd.add_argument("trace", help="the trace it claims to be the receipt of")
    cmd.add_argument(
        "--policy",
        help="boundary sheet or flat policy TOML (default: built-in defaults)",
    )
    cmd.add_argument("--initial-state", help="JSON object: dependency -> persisted state")
    _add_jobs(cmd)
    cmd.set_defaults(run_command=_run_verify)

    cmd = commands.add_parser("diff", help="compare two receipts (exit 1 when they differ)")
    cmd.add_argument("a")
    cmd.add_argument("b")
    cmd.set_defaults(run_command=_run_diff)

    _add_check_run(commands)

    cmd = commands.add_parser(
        "demo", help="a scripted agent against a flaky local tool service, live"
    )
    cmd.add_argument("--retry-only", action="store_true", help="the same agent without a breaker")
    cmd.add_argument(
        "--fixture", action="store_true", help="replay the bundled example trace instead"
    )
    cmd.add_argument(
        "--save", metavar="DIR", help="write trace.jsonl, policy.toml and receipt.json here"
    )
    cmd.set_defaults(run_command=_run_demo)

    from toolbreaker.cli._observe import add_commands
    from toolbreaker.cli._policy import add_commands as add_policy_commands

    add_commands(commands)
    add_policy_commands(commands)

    from toolbreaker.cli._drain import add_command as add_drain
    from toolbreaker.cli._exercise import add_command as add_exercise
    from toolbreaker.cli._import import add_command as add_import
    from toolbreaker.cli._mcp import add_command as add_mcp
    from toolbreaker.cli._runs import add_command as add_runs
    from toolbreaker.cli._simulate import add_command as add_simulate
    from toolbreaker.cli._tune import add_command as add_tune

    add_drain(commands)
    add_import(commands)
    add_runs(commands)
    add_exercise(commands)
    add_mcp(commands)
    add_simulate(commands)
    add_tune(commands)
    return parser


def _add_check_run(commands: Any) -> None:
    """``toolbreaker check-run``: its arguments."""
    cmd = commands.add_parser(
        "check-run", help="replay a recorded agent run through a budget: where would it stop?"
    )
    cmd.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="JSON Lines of tool calls and outcomes; several (or a directory of them): "
        "a table per condition over all of them",
    )
    cmd.add_argument("--budget", help="budget TOML (default: built-in defaults)")
    cmd.add_argument("--task", default="recorded-run", help="task id shown in the packet")
    cmd.add_argument(
        "--outcomes",
        metavar="FILE",
        help="each run's outcome: JSON Lines of {file, outcome: success|failure|null} "
        "(the runs.jsonl toolbreaker import writes)",
    )
    cmd.add_argument(
        "--suggest",
        action="store_true",
        help="propose the tightest budget that stops at most --max-false-stops of the "
        "successful runs",
    )
    cmd.add_argument(
        "--max-false-stops",
        metavar="RATE",
        help="with --suggest: the share of successful runs it may stop (0.01 or 1%%)",
    )
    cmd.add_argument("--to", metavar="FILE", help="with --suggest: write the budget TOML here")
    cmd.set_defaults(run_command=_run_check)


def _add_jobs(cmd: argparse.ArgumentParser) -> None:
    from toolbreaker.cli._options import whole

    cmd.add_argument(
        "--jobs",
        type=whole(1, 64),
        metavar="N",
        help=(
            "processes to split a trace of 8 MB or more across, by dependency "
            "(default: one per usable CPU, at most 4; 1 replays in one process)"
        ),
    )


def _run_replay(args: argparse.Namespace) -> int:
    from toolbreaker._replaying import replay_trace
    from toolbreaker.cli._sheet import load_sheet

    policy = load_sheet(args.policy)
    initial = _initial_states(args.initial_state, policy) if args.initial_state else None
    with replay_trace(
        policy, initial, args.trace, jobs=args.jobs, transitions=not args.summary
    ) as driver:
        if args.summary:
            sys.stdout.write(dump_receipt(driver.summary()))
        else:
            driver.write(sys.stdout)
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from toolbreaker._replaying import check_files, replay_trace, verify
    from toolbreaker.cli._sheet import load_sheet

    policy = load_sheet(args.policy)
    check_files(args.receipt, args.trace)
    initial = _initial_states(args.initial_state, policy) if args.initial_state else None
    with replay_trace(policy, initial, args.trace, jobs=args.jobs) as driver:
        return verify(args.receipt, driver, args.trace, sys.stdout)


def _initial_states(path: str, policy: PolicySheet) -> dict[str, BreakerState]:
    text = read_text(path, TraceError)
    data = loads_json(text, TraceError, file=path, mark_duplicates=True)
    if not isinstance(data, dict):
        raise TraceError("initial state must be a JSON object: dependency -> state", file=path)
    if DUPLICATE_KEY in data:
        raise TraceError("a dependency is named twice", file=path)
    # Each state fails closed on its own: a corrupt one (a duplicate key included) loads as
    # open, it does not abort.
    return {
        str(dep): BreakerState.from_dict(state, policy.of(str(dep))) for dep, state in data.items()
    }


def _run_check(args: argparse.Namespace) -> int:
    from toolbreaker.cli._calibrate import calibrate, false_stop_rate
    from toolbreaker.cli._run import check_run
    from toolbreaker.core._run.budget import Budget

    if args.suggest != (args.max_false_stops is not None):
        raise PolicyError("--suggest and --max-false-stops RATE go together", field="suggest")
    if args.to is not None and not args.suggest:
        raise PolicyError("--to writes the budget --suggest proposes", field="to")
    rate = None if args.max_false_stops is None else false_stop_rate(args.max_false_stops)
    budget = Budget.from_toml(args.budget) if args.budget else Budget()
    out: Any = _Escaping(sys.stdout)
    single = len(args.runs) == 1 and not Path(args.runs[0]).is_dir()
    if single and args.outcomes is None and rate is None:
        return check_run(args.runs[0], budget, args.task, out)
    name = f"{args.budget}" if args.budget else "the built-in defaults"
    return calibrate(
        args.runs, budget, out, outcomes=args.outcomes, rate=rate, to=args.to, budget_name=name
    )


def _run_diff(args: argparse.Namespace) -> int:
    a, b = load_receipt(args.a), load_receipt(args.b)
    lines = diff(a, b)
    if not lines:
        print("receipts are equal")
        return 0
    print("\n".join(printable(line) for line in lines))
    return 1


_SAVED = ("trace.jsonl", "policy.toml", "receipt.json")


def _save_target(path: str) -> Path:
    """Check ``--save DIR`` before anything runs: nothing is overwritten, the parent exists."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise TraceError("--save needs a directory, and this is a file", file=path)
    if not folder.exists() and not folder.parent.is_dir():
        raise TraceError("--save: the parent directory does not exist", file=path)
    for name in _SAVED:
        if (folder / name).exists():
            raise TraceError(f"--save would overwrite {name}", file=path)
    return folder


def _write_saved(folder: Path, files: dict[str, str]) -> None:
    try:
        folder.mkdir(exist_ok=True)
        for name, text in files.items():
            with (folder / name).open("x", encoding="utf-8") as handle:
                handle.write(text)
    except OSError as exc:
        raise TraceError(f"cannot save: {exc.strerror or exc}", file=str(folder)) from None


def _run_demo(args: argparse.Namespace) -> int:
    save = _save_target(args.save) if args.save else None
    if not args.fixture:
        from toolbreaker.cli._live import run_live

        return run_live(
            sys.stdout,
            retry_only=args.retry_only,
            save=(lambda files: _write_saved(save, files)) if save else None,
            save_name=save,
        )
    from toolbreaker.cli._demo import run_fixture

    fixtures = resources.files("toolbreaker") / "fixtures"
    policy_text = (fixtures / "seed_policy.toml").read_text(encoding="utf-8")
    trace_text = (fixtures / "seed_trace.jsonl").read_text(encoding="utf-8")
    code, receipt = run_fixture(policy_text, trace_text, sys.stdout)
    if save is not None:
        _write_saved(
            save,
            {
                "trace.jsonl": trace_text,
                "policy.toml": policy_text,
                "receipt.json": dump_receipt(receipt),
            },
        )
        print(f"saved {', '.join(_SAVED)} in {printable(str(save))}")
    return code
