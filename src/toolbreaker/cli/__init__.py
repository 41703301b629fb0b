"""The ``toolbreaker`` command line.

User mistakes become one line on stderr, ``error: FILE:LINE: what is wrong``, and exit
code 2; never a traceback. ``diff`` exits 0 when receipts are equal and 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.receipt import Replay, diff, dump_receipt, load_receipt
from toolbreaker.core.breaker.state import BreakerState, Event
from toolbreaker.core.breaker.trace import read_trace
from toolbreaker.errors import ToolbreakerError, TraceError

__all__ = ["main"]

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run_command(args)
    except ToolbreakerError as exc:
        located = getattr(exc, "located", None)
        print(f"error: {located() if located else exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        return 130
    except BrokenPipeError:  # pragma: no cover - `toolbreaker demo | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbreaker",
        description="Circuit breakers around the tools an AI agent calls.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cmd = commands.add_parser("replay", help="replay a JSONL trace and print its receipt")
    cmd.add_argument("trace", help="JSON Lines, one event per line")
    cmd.add_argument("--policy", help="policy TOML (default: built-in defaults)")
    cmd.add_argument("--initial-state", help="JSON object: dependency -> persisted state")
    cmd.set_defaults(run_command=_run_replay)

    cmd = commands.add_parser("diff", help="compare two receipts (exit 1 when they differ)")
    cmd.add_argument("a")
    cmd.add_argument("b")
    cmd.set_defaults(run_command=_run_diff)

    cmd = commands.add_parser(
        "check-run", help="replay a recorded agent run through a budget: where would it stop?"
    )
    cmd.add_argument("run", help="JSON Lines of tool calls and outcomes")
    cmd.add_argument("--budget", help="budget TOML (default: built-in defaults)")
    cmd.add_argument("--task", default="recorded-run", help="task id shown in the packet")
    cmd.set_defaults(run_command=_run_check)

    cmd = commands.add_parser(
        "demo", help="a scripted agent against a flaky local tool service, live"
    )
    cmd.add_argument("--retry-only", action="store_true", help="the same agent without a breaker")
    cmd.add_argument(
        "--fixture", action="store_true", help="replay the seed article's fixture instead"
    )
    cmd.add_argument("--save", metavar="DIR", help="write the trace, policy and receipt here")
    cmd.set_defaults(run_command=_run_demo)

    from toolbreaker.cli._observe import add_commands

    add_commands(commands)
    return parser


def _run_replay(args: argparse.Namespace) -> int:
    policy = Policy.from_toml(args.policy) if args.policy else Policy()
    initial = _initial_states(args.initial_state, policy) if args.initial_state else None
    events = read_trace(args.trace)
    receipt = _replay_located(events, policy, initial, args.trace)
    sys.stdout.write(dump_receipt(receipt))
    return 0


def _replay_located(
    events: list[tuple[int, Event]],
    policy: Policy,
    initial: dict[str, BreakerState] | None,
    name: str,
) -> dict[str, object]:
    driver = Replay(policy, initial)
    for line, event in events:
        try:
            driver.feed(event)
        except TraceError as exc:
            exc.file, exc.line = name, line
            raise
    return driver.receipt()


def _initial_states(path: str, policy: Policy) -> dict[str, BreakerState]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", file=path) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(
            f"malformed JSON: {exc}", file=path, line=getattr(exc, "lineno", None)
        ) from None
    if not isinstance(data, dict):
        raise TraceError("initial state must be a JSON object: dependency -> state", file=path)
    # Each state fails closed on its own: a corrupt one loads as open, it does not abort.
    return {str(dep): BreakerState.from_dict(state, policy) for dep, state in data.items()}


def _run_check(args: argparse.Namespace) -> int:
    from toolbreaker.cli._run import check_run
    from toolbreaker.core.run.budget import Budget

    budget = Budget.from_toml(args.budget) if args.budget else Budget()
    return check_run(args.run, budget, args.task, sys.stdout)


def _run_diff(args: argparse.Namespace) -> int:
    a, b = load_receipt(args.a), load_receipt(args.b)
    lines = diff(a, b)
    if not lines:
        print("receipts are equal")
        return 0
    print("\n".join(lines))
    return 1


def _run_demo(args: argparse.Namespace) -> int:
    if not args.fixture:
        from toolbreaker.cli._live import run_live

        return run_live(
            sys.stdout, retry_only=args.retry_only, save=Path(args.save) if args.save else None
        )
    from toolbreaker.cli._demo import run_fixture

    fixtures = resources.files("toolbreaker") / "fixtures"
    policy_text = (fixtures / "seed_policy.toml").read_text(encoding="utf-8")
    trace_text = (fixtures / "seed_trace.jsonl").read_text(encoding="utf-8")
    return run_fixture(policy_text, trace_text, sys.stdout)
