"""``toolbreaker exercise``: run the user's own agent against fault scenarios, report.

``toolbreaker exercise SCENARIO... --agent module:function`` imports the agent (from the
current directory too, as ``python -m`` would), runs it against each scenario through
:func:`toolbreaker.testing.exercise`, and prints per scenario the three promises, measured
at the service: no attempt after a breaker opened and no duplicate side effect, a valid
stop packet that accounts for every committed write, and a resumed run that repeats no
completed write; plus what the model did once told a tool was unavailable. ``--json``
prints the report as JSON instead; ``--junit PATH`` also writes JUnit XML for CI.

Exit 0 when every promise held, 1 when one failed, 2 for bad input (one line, with the
file and line of a bad scenario).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from toolbreaker.core._files import printable, shown
from toolbreaker.errors import PolicyError, TraceError
from toolbreaker.testing._scenario import PROMISES, load_scenario

__all__ = ["add_command", "junit_xml", "load_agent", "run_exercise", "table"]

_HEADERS: Final = ("scenario", *PROMISES, 'after "unavailable"')


def add_command(commands: Any) -> None:
    """Register ``exercise`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "exercise",
        help="run your agent against fault scenarios and report whether its breakers held",
    )
    cmd.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenario TOML files")
    cmd.add_argument(
        "--shipped", action="store_true", help="also run every scenario shipped with toolbreaker"
    )
    cmd.add_argument(
        "--agent",
        required=True,
        metavar="MODULE:FUNCTION",
        help="the agent: a function taking an ExerciseContext (toolbreaker.testing)",
    )
    cmd.add_argument(
        "--service",
        metavar="URL",
        help="your HTTP tool service's base URL (default: the bundled tool service)",
    )
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    cmd.add_argument("--junit", metavar="PATH", help="also write the report as JUnit XML")
    cmd.set_defaults(run_command=run_exercise)


def load_agent(spec: str) -> Callable[..., Any]:
    """The function ``module:function`` names; the current directory is importable.

    Raises:
        PolicyError: the spec is malformed, the module cannot be imported, or the name
            is not a function.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise PolicyError(f"--agent must be MODULE:FUNCTION, got {shown(spec)}", field="agent")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise PolicyError(f"--agent: no module named {shown(exc.name)}", field="agent") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failing to import is one line
        raise PolicyError(
            f"--agent: importing {shown(module_name)} raised {type(exc).__name__}: {exc}",
            field="agent",
        ) from None
    found: Any = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise PolicyError(
            f"--agent: {shown(module_name)} has no function {shown(attribute)}", field="agent"
        )
    agent: Callable[..., Any] = found
    return agent


def _junit_target(path: str) -> Path:
    target = Path(path)
    if target.is_dir():
        raise TraceError("--junit needs a file, and this is a directory", file=path)
    if not target.parent.is_dir():
        raise TraceError("--junit: the directory does not exist", file=path)
    return target


def run_exercise(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from toolbreaker.testing import exercise, shipped_scenarios

    paths = [*args.scenarios, *(shipped_scenarios() if args.shipped else ())]
    if not paths:
        raise PolicyError("exercise needs a SCENARIO file or --shipped", field="scenarios")
    if args.service is not None:
        split = urllib.parse.urlsplit(args.service)
        if split.scheme != "http" or not split.hostname:
            raise PolicyError(
                f"--service must be an http:// URL, got {shown(args.service)}", field="service"
            )
    junit = _junit_target(args.junit) if args.junit else None
    scenarios = [load_scenario(path) for path in paths]  # every file checked before a run
    agent = load_agent(args.agent)
    report = exercise(scenarios, agent, service=args.service)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(table(report.to_dict()))
    if junit is not None:
        try:
            junit.write_text(junit_xml(report.to_dict()), encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"cannot write: {exc.strerror or exc}", file=str(junit)) from None
    return 0 if report.held else 1


def table(report: dict[str, Any]) -> str:
    """The report as a terminal table, every cell escaped, with a line per failure."""
    rows: list[tuple[str, ...]] = [_HEADERS]
    failures = []
    for entry in report["scenarios"]:
        name = printable(entry["scenario"]["name"])
        cells = [name]
        for promise in entry["promises"]:
            cells.append("held" if promise["held"] else "FAILED")
            if not promise["held"]:
                failures.append(f"  {name}: {promise['name']}: {printable(promise['detail'])}")
        cells.append(printable(entry["after_unavailable"]))
        rows.append(tuple(cells))
        for fault in entry.get("unmet_faults", ()):
            failures.append(
                f"  warning: {name}: no attempt got the fault {printable(fault)!s}: "
                "the promises say nothing about it"
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[-1]
        for row in rows
    ]
    held = sum(1 for entry in report["scenarios"] if entry["held"])
    total = len(report["scenarios"])
    lines.append("")
    lines.extend(failures)
    if failures:
        lines.append("")
    lines.append(f"{held} of {total} scenario(s) held every promise")
    return "\n".join(lines) + "\n"


def junit_xml(report: dict[str, Any]) -> str:
    """The report as JUnit XML: a test case per scenario and promise, escaped."""
    cases = [(entry, promise) for entry in report["scenarios"] for promise in entry["promises"]]
    failed = sum(1 for _, promise in cases if not promise["held"])
    suites = ET.Element("testsuites", tests=str(len(cases)), failures=str(failed))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="toolbreaker exercise",
        tests=str(len(cases)),
        failures=str(failed),
        errors="0",
    )
    for entry, promise in cases:
        name = printable(entry["scenario"]["name"])
        case = ET.SubElement(suite, "testcase", classname=f"exercise.{name}", name=promise["name"])
        if not promise["held"]:
            failure = ET.SubElement(case, "failure", message=printable(promise["detail"]))
            failure.text = printable(promise["detail"])
        out = ET.SubElement(case, "system-out")
        out.text = printable(f"after unavailable: {entry['after_unavailable']}")
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )
