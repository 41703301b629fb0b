"""``toolbreaker tune``: a policy lab on recorded traffic.

A recorded trace is replayed through the core once per candidate policy (the cartesian
product of the ``--vary`` values over the current policy or boundary sheet), each replay
streaming the file in bounded memory on the core's fast path, about the cost of one
``replay --summary`` (:class:`~toolbreaker.cli._tuning.TuneReplay`); progress goes to
stderr.
Per candidate, in the table, the CSV and the figure:

- ``remote@failing``: remote attempts on the dependencies that failed at least once in
  the recording (``failure`` or ``ambiguous``): the load the breaker is there to take off;
- ``rejected-ok``: calls the candidate rejects locally whose recorded outcome is a
  success: the price of the breaker;
- ``unknown``: calls the candidate admits whose outcome the recording does not hold (the
  recording's breaker rejected them, or they were still running when it ended). Nothing
  is guessed for them: a probe among them counts as failed when its lease expires, as
  the core decides for any unsettled probe, so such a candidate looks no better than it is;
- ``opens``, ``time open`` and ``reopen`` (half-open episodes that ended open again), as
  ``toolbreaker advise`` computes them (:func:`~toolbreaker._tuning._signals.calibrate`).

The current policy (``--policy``, or the defaults) is marked, and added as the first
row when the grid does not hold it. ``--write N --to FILE`` writes row ``N``'s policy as
a TOML file that ``replay --policy`` loads, and prints the receipt diff of the trace
under it against the current policy (``toolbreaker diff``'s lines, from one more
streaming pass: the receipts are never held in memory).
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import itertools
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO, overload

from toolbreaker.cli._options import whole
from toolbreaker.cli._plot import FIGURE_SUFFIXES, MISSING, check_output, draw, load_matplotlib
from toolbreaker.cli._sheet import (
    is_sheet,
    load_sheet_data,
    sheet_of,
    sheet_toml,
    sheet_value,
    split_field,
    with_values,
)
from toolbreaker.cli._simulate import (
    CountingReplay,
    EventSource,
    Inputs,
    replay_records,
    trace_inputs,
)
from toolbreaker.cli._tuning import TuneReplay
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import diff
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import Transition, opened
from toolbreaker.core._files import printable, shown
from toolbreaker.errors import PolicyError, TraceError

__all__ = [
    "MAX_CANDIDATES",
    "Row",
    "add_command",
    "candidates",
    "evaluate",
    "parse_vary",
    "receipt_diff",
    "tune",
]

#: The most candidate policies one ``tune`` replays.
MAX_CANDIDATES: Final = 100
_MAX_VALUES: Final = 50
_INT: Final = re.compile(r"^[+-]?\d{1,30}$")
_FIELDS: Final = tuple(f.name for f in dataclasses.fields(Policy))


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One candidate policy and what the core did with the recorded trace under it.

    Attributes:
        number: the row number (from 1), what ``--write`` takes.
        policy: the candidate (a flat policy is a sheet of defaults alone).
        current: whether it is the current policy.
        remote_failing: remote attempts on dependencies that failed in the recording.
        remote: remote attempts on every dependency.
        rejected: local rejections.
        rejected_succeeded: rejected calls whose recorded outcome is a success.
        unknown: admitted calls whose outcome the recording does not hold.
        opens: openings.
        time_open_ms: time spent open, summed over dependencies.
        half_opens: half-open episodes.
        reopens: half-open episodes that ended open again.
    """

    number: int
    policy: PolicySheet
    current: bool
    remote_failing: int
    remote: int
    rejected: int
    rejected_succeeded: int
    unknown: int
    opens: int
    time_open_ms: int
    half_opens: int
    reopens: int

    @property
    def reopen_ratio(self) -> float | None:
        """Share of half-open episodes that reopened; ``None`` without any."""
        return self.reopens / self.half_opens if self.half_opens else None


def _value(text: str) -> int | str | None:
    text = text.strip()
    if _INT.match(text):
        return int(text)
    if text.lower() in ("none", "null", ""):
        return None
    return text


def parse_vary(texts: Sequence[str]) -> list[tuple[str, list[int | str | None]]]:
    """``FIELD=V1,V2,...`` options as (field, values); values are checked by :class:`Policy`.

    ``FIELD`` is a policy field (of a boundary sheet's ``[defaults]``, which the rows
    without a value of their own inherit) or ``DEPENDENCY.OPERATION.FIELD``: one row's.
    """
    varied: list[tuple[str, list[int | str | None]]] = []
    for text in texts:
        name, sep, values = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise PolicyError(f"--vary needs FIELD=V1,V2,..., got {shown(text)}", field="vary")
        if split_field(name)[2] not in _FIELDS:
            raise PolicyError(
                f"--vary: unknown policy field {shown(name)} (known: {', '.join(_FIELDS)})",
                field="vary",
            )
        if any(name == seen for seen, _ in varied):
            raise PolicyError(f"--vary: {name} is varied twice", field="vary")
        parsed = list(dict.fromkeys(_value(v) for v in values.split(",")))
        if len(parsed) > _MAX_VALUES:
            raise PolicyError(
                f"--vary {name}: {len(parsed)} values, at most {_MAX_VALUES}", field="vary"
            )
        varied.append((name, parsed))
    return varied


def candidates(
    data: Mapping[str, Any], varied: Sequence[tuple[str, Sequence[int | str | None]]]
) -> list[tuple[dict[str, Any], PolicySheet]]:
    """The cartesian product of the varied values over the decoded policy file ``data``.

    Each candidate is ``data`` with its values (:func:`~toolbreaker.cli._sheet.with_values`)
    and its policies, validated by the one parser of sheets and policies.
    """
    count = math.prod(len(values) for _, values in varied)
    if count > MAX_CANDIDATES:
        raise PolicyError(
            f"--vary makes {count} candidate policies, at most {MAX_CANDIDATES}: "
            "vary fewer fields or fewer values",
            field="vary",
        )
    out: list[tuple[dict[str, Any], PolicySheet]] = []
    names = [name for name, _ in varied]
    for combination in itertools.product(*(values for _, values in varied)):
        changes = dict(zip(names, combination, strict=True))
        try:
            candidate = with_values(data, changes)
            out.append((candidate, sheet_of(candidate)))
        except PolicyError as exc:
            what = ", ".join(f"{k}={shown(v)}" for k, v in changes.items())
            raise PolicyError(
                f"--vary: the candidate {what}: {exc.message}", field="vary"
            ) from None
    return out


def evaluate(inputs: EventSource, policy: Policy | PolicySheet, number: int, current: bool) -> Row:
    """Replay ``inputs`` once under ``policy`` through the core and count (streaming).

    A trace file is fed by the core's fast path (:class:`~toolbreaker.cli._tuning.TuneReplay`,
    about one ``replay --summary``); other inputs (the fixture's text) event by event.
    """
    driver = TuneReplay(policy)
    with driver:
        if isinstance(inputs, Inputs) and inputs.text is None:
            driver.feed_trace(inputs.name)
        else:
            for _ in replay_records(driver, inputs):
                pass
        signals = driver.signals().values()
        unknown = sum(len(ledger.unsettled) for ledger in driver.ledgers().values())
        remote = driver.remote
        return Row(
            number=number,
            policy=policy if isinstance(policy, PolicySheet) else PolicySheet(policy),
            current=current,
            remote_failing=sum(n for dep, n in remote.items() if dep in driver.failing),
            remote=sum(remote.values()),
            rejected=driver.rejected,
            rejected_succeeded=driver.rejected_succeeded,
            unknown=unknown,
            opens=sum(s.opens for s in signals),
            time_open_ms=sum(s.time_open_ms for s in signals),
            half_opens=sum(s.half_opens for s in signals),
            reopens=sum(s.reopens for s in signals),
        )


def _grid(
    data: Mapping[str, Any],
    current: PolicySheet,
    varied: Sequence[tuple[str, Sequence[int | str | None]]],
) -> list[tuple[dict[str, Any], PolicySheet]]:
    """The rows' files and policies: the current one first when the grid does not hold it."""
    grid = candidates(data, varied)
    if all(sheet.version != current.version for _, sheet in grid):
        grid.insert(0, (dict(data), current))
    return grid


def tune(
    inputs: EventSource,
    grid: Sequence[PolicySheet],
    current: PolicySheet,
    progress: TextIO | None = None,
) -> list[Row]:
    """One row per policy of ``grid``, each from its own replay of ``inputs``.

    ``progress``, when given, hears a line per candidate replayed (stderr).
    """
    rows = []
    for number, policy in enumerate(grid, start=1):
        rows.append(evaluate(inputs, policy, number, policy.version == current.version))
        if progress is not None:
            progress.write(f"tune: replayed candidate {number} of {len(grid)}\n")
            progress.flush()
    return rows


def add_command(commands: Any) -> None:
    """Register ``tune`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "tune", help="replay a recorded trace under candidate policies and compare them"
    )
    cmd.add_argument("trace", help="a recorded JSON Lines trace")
    cmd.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="FIELD=V1,V2",
        help=(
            "a policy field and its candidate values (repeat for a grid); "
            "DEPENDENCY.OPERATION.FIELD varies one row of a boundary sheet"
        ),
    )
    cmd.add_argument(
        "--policy",
        help="the current boundary sheet or flat policy TOML (default: built-in defaults)",
    )
    cmd.add_argument(
        "--out",
        action="append",
        default=[],
        metavar="FILE",
        help="also write the table (FILE.csv) or the trade-off figure (FILE.svg, FILE.png)",
    )
    cmd.add_argument(
        "--write",
        type=whole(1, MAX_CANDIDATES + 1),
        metavar="ROW",
        help="write this row's policy ...",
    )
    cmd.add_argument("--to", metavar="FILE", help="... to this new policy TOML file")
    cmd.set_defaults(run_command=run_tune)


def _varied_names(varied: Sequence[tuple[str, Sequence[object]]]) -> list[str]:
    return [name for name, _ in varied]


def _cell(value: object) -> str:
    return "-" if value is None else printable(str(value))


def _table(rows: Sequence[Row], names: Sequence[str]) -> list[list[str]]:
    header = [
        "#",
        *names,
        "remote@failing",
        "rejected-ok",
        "unknown",
        "opens",
        "time open",
        "reopen",
        "remote",
        "rejected",
        "policy",
    ]
    table = [header]
    for row in rows:
        ratio = row.reopen_ratio
        table.append(
            [
                f"{'*' if row.current else ' '}{row.number}",
                *(_cell(sheet_value(row.policy, name)) for name in names),
                str(row.remote_failing),
                str(row.rejected_succeeded),
                str(row.unknown),
                str(row.opens),
                f"{row.time_open_ms / 1000:.1f} s",
                "-" if ratio is None else f"{ratio:.0%}",
                str(row.remote),
                str(row.rejected),
                row.policy.version,
            ]
        )
    return table


def _print_table(rows: Sequence[Row], names: Sequence[str], trace: str) -> None:
    table = _table(rows, names)
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    print(f"tune {printable(trace)}: {len(rows)} policies, the trace replayed once under each")
    for line in table:
        cells = [
            cell.ljust(width) if index < 1 + len(names) else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
    print(
        "\n* the current policy\n"
        "remote@failing  remote attempts on dependencies that failed in the recording\n"
        "rejected-ok     calls rejected locally that succeeded in the recording (the price)\n"
        "unknown         calls admitted whose outcome the recording does not hold (it rejected\n"
        "                them or they were running at its end); an unsettled probe counts as\n"
        "                failed when its lease expires\n"
        "reopen          half-open episodes that ended open again"
    )


def _write_csv(rows: Sequence[Row], names: Sequence[str], target: Path) -> None:
    try:
        with target.open("x", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                [
                    "row",
                    "current",
                    *names,
                    "policy_version",
                    "remote_attempts_failing",
                    "rejected_succeeded",
                    "unknown_outcome",
                    "opens",
                    "time_open_ms",
                    "half_opens",
                    "reopens",
                    "remote_attempts",
                    "local_rejections",
                ]
            )
            for row in rows:
                writer.writerow(
                    [
                        row.number,
                        int(row.current),
                        *(
                            "" if sheet_value(row.policy, n) is None else sheet_value(row.policy, n)
                            for n in names
                        ),
                        row.policy.version,
                        row.remote_failing,
                        row.rejected_succeeded,
                        row.unknown,
                        row.opens,
                        row.time_open_ms,
                        row.half_opens,
                        row.reopens,
                        row.remote,
                        row.rejected,
                    ]
                )
    except OSError as exc:
        raise TraceError(f"cannot write: {exc.strerror or exc}", file=str(target)) from None


def _figure(rows: Sequence[Row], names: Sequence[str], trace: str) -> Any:
    def build(figure: Any) -> None:
        axes = figure.subplots()
        places: dict[tuple[int, int], list[Row]] = {}
        for row in rows:
            places.setdefault((row.rejected_succeeded, row.remote_failing), []).append(row)
        others = [r for r in rows if not r.current]
        axes.scatter(
            [r.rejected_succeeded for r in others],
            [r.remote_failing for r in others],
            s=40,
            color="#2471a3",
            alpha=0.8,
            label="candidate",
            zorder=3,
        )
        mine = [r for r in rows if r.current]
        axes.scatter(
            [r.rejected_succeeded for r in mine],
            [r.remote_failing for r in mine],
            s=160,
            marker="*",
            color="#c0392b",
            label="current policy",
            zorder=4,
        )
        for (x, y), here in sorted(places.items()):
            label = _ranges([r.number for r in here])
            unknown = max(r.unknown for r in here)
            if unknown:
                label += f" ({unknown} unknown)"
            axes.annotate(label, (x, y), xytext=(6, 4), textcoords="offset points", fontsize=7)
        axes.set_xlabel("calls rejected that succeeded in the recording (the price)")
        axes.set_ylabel("remote attempts on failing dependencies")
        axes.set_title(
            f"tune {printable(Path(trace).name)}: {len(rows)} policies\n"
            f"varying {', '.join(names) or 'nothing'}; labels are row numbers",
            fontsize=9,
        )
        axes.locator_params(integer=True)
        axes.grid(alpha=0.3)
        axes.margins(0.15)
        axes.legend(loc="best", frameon=False)

    return build


def _ranges(numbers: Sequence[int]) -> str:
    """``1,2,3,5`` as ``1-3,5``."""
    parts: list[str] = []
    start = prev = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if number is not None:
            start = prev = number
    return ",".join(parts)


def _policy_toml(policy: Policy) -> str:
    return "".join(
        f"{key} = {json.dumps(value)}\n"
        for key, value in policy.to_dict().items()
        if value is not None
    )


def _check_outputs(args: argparse.Namespace) -> tuple[list[Path], Path | None]:
    outs = [check_output(path, "--out", (".csv", *FIGURE_SUFFIXES)) for path in args.out]
    if len({p.resolve() for p in outs}) != len(outs):
        raise PolicyError("--out names the same file twice", field="out")
    if (args.write is None) != (args.to is None):
        raise PolicyError("--write ROW and --to FILE go together", field="write")
    to = check_output(args.to, "--to", (".toml",)) if args.to else None
    if to is not None and any(to.resolve() == p.resolve() for p in outs):
        raise PolicyError("--to names a file --out writes too", field="to")
    return outs, to


def run_tune(args: argparse.Namespace) -> int:
    """``toolbreaker tune``: check everything, replay once per candidate, report."""
    outs, to = _check_outputs(args)
    matplotlib = None
    if any(p.suffix.lower() in FIGURE_SUFFIXES for p in outs):
        try:
            matplotlib = load_matplotlib()
        except ImportError:
            print(f"error: {MISSING}", file=sys.stderr)
            return 2
    data, current = load_sheet_data(args.policy)
    varied = parse_vary(args.vary)
    grid = _grid(data, current, varied)
    if args.write is not None and not 1 <= args.write <= len(grid):
        raise PolicyError(
            f"--write: there are rows 1 to {len(grid)}, not {args.write}", field="write"
        )
    inputs = trace_inputs(args.trace, current)
    rows = tune(inputs, [sheet for _, sheet in grid], current, sys.stderr)
    names = _varied_names(varied)
    _print_table(rows, names, args.trace)
    for target in outs:
        if target.suffix.lower() == ".csv":
            _write_csv(rows, names, target)
        else:
            draw(matplotlib, target, _figure(rows, names, args.trace), (6.4, 4.6))
        print(f"wrote {printable(str(target))}")
    if to is not None and args.write is not None:
        _write_policy(rows[args.write - 1], grid[args.write - 1][0], current, inputs, to)
    return 0


class _Prefix(Sequence[Any]):
    """A stand-in for a receipt's transitions in :func:`diff`: equal up to ``index``.

    Holds the one transition that differs (or none), not the list: :func:`diff` walks
    the two lists until their first difference and reads their lengths, nothing else.
    """

    _SAME: Final[dict[str, Any]] = {}

    def __init__(self, length: int, index: int, record: dict[str, Any] | None) -> None:
        self._length, self._index, self._record = length, index, record

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):  # pragma: no cover - diff never slices
            raise TypeError("a transition prefix cannot be sliced")
        if not 0 <= index < self._length:
            raise IndexError(index)
        return self._record if index == self._index else self._SAME


@dataclasses.dataclass(slots=True)
class _Side:
    length: int = 0
    remote: int = 0
    rejected: int = 0
    opens: int = 0
    queue: collections.deque[dict[str, Any]] = dataclasses.field(default_factory=collections.deque)

    def add(self, record: Transition, tracking: bool) -> None:
        self.length += 1
        self.remote += record.attempted
        self.rejected += record.rejected
        self.opens += opened(record)
        if tracking:
            self.queue.append(record.to_dict())


@dataclasses.dataclass(slots=True)
class _Pair:
    a: _Side = dataclasses.field(default_factory=_Side)
    b: _Side = dataclasses.field(default_factory=_Side)
    matched: int = 0
    differ: tuple[dict[str, Any] | None, dict[str, Any] | None] | None = None

    def compare(self, final: bool = False) -> None:
        qa, qb = self.a.queue, self.b.queue
        while self.differ is None and qa and qb:
            left, right = qa.popleft(), qb.popleft()
            if left == right:
                self.matched += 1
            else:
                self.differ = (left, right)
        if self.differ is None and final and (qa or qb):
            self.differ = (qa[0] if qa else None, qb[0] if qb else None)
        if self.differ is not None:
            qa.clear()
            qb.clear()


def receipt_diff(
    inputs: EventSource, a: Policy | PolicySheet, b: Policy | PolicySheet
) -> list[str]:
    """``toolbreaker diff``'s lines for the receipts of ``inputs`` under ``a`` and ``b``.

    One streaming pass with both policies side by side: per dependency, the counts, the
    final state and the first transition that differs, which is all :func:`diff` reads,
    so the receipts are never built (bounded memory on a trace of any size).
    """
    pairs: dict[str, _Pair] = {}
    with CountingReplay(a) as left, CountingReplay(b) as right:
        for line, event in inputs.events():
            try:
                records = (left.feed(event), right.feed(event))
            except TraceError as exc:  # pragma: no cover - tune replayed the trace already
                exc.file, exc.line = inputs.name, line
                raise
            pair = pairs.get(event.dependency)
            if pair is None:
                pair = pairs[event.dependency] = _Pair()
            for side, produced in zip((pair.a, pair.b), records, strict=True):
                for record in produced:
                    side.add(record, pair.differ is None)
            pair.compare()
        states = {name: (left.ledgers()[name].state, right.ledgers()[name].state) for name in pairs}
    sheets = tuple(p if isinstance(p, PolicySheet) else PolicySheet(p) for p in (a, b))
    docs: tuple[dict[str, Any], dict[str, Any]] = (
        {"policy": sheets[0].defaults.to_dict(), "dependencies": {}},
        {"policy": sheets[1].defaults.to_dict(), "dependencies": {}},
    )
    for name, pair in pairs.items():
        pair.compare(final=True)
        index = pair.matched if pair.differ is not None else -1
        for which, (doc, side) in enumerate(zip(docs, (pair.a, pair.b), strict=True)):
            first = pair.differ[which] if pair.differ is not None else None
            doc["dependencies"][name] = {
                "transitions": _Prefix(side.length, index, first),
                "remote_attempts": side.remote,
                "local_rejections": side.rejected,
                "opens": side.opens,
                "final_state": states[name][which].to_dict(),
            }
            own = sheets[which].of(name)
            if own.version != sheets[which].defaults.version:  # a row's, as the receipt has
                doc["dependencies"][name]["policy"] = own.to_dict()
                doc["dependencies"][name]["policy_version"] = own.version
    return diff(*docs)


def _write_policy(
    row: Row, data: Mapping[str, Any], current: PolicySheet, inputs: EventSource, to: Path
) -> None:
    trace = inputs.name
    text = sheet_toml(data) if is_sheet(data) else _policy_toml(row.policy.defaults)
    try:
        with to.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise TraceError(f"cannot write: {exc.strerror or exc}", file=str(to)) from None
    print(f"\nwrote row {row.number} (policy {row.policy.version}) to {printable(str(to))}")
    lines = receipt_diff(inputs, current, row.policy)
    print(
        f"receipt diff of {printable(trace)}, current policy {current.version} -> row {row.number}:"
    )
    print("\n".join(printable(line) for line in lines) if lines else "receipts are equal")
