"""``toolbreaker simulate``: one set of input events, a retry-only agent against the breaker.

The cascade figure: the same input events sent by an agent that only
retries, and through the breaker, as remote attempts and local rejections over time,
side by side, with the totals.

The breaker side is the core's replay of the events, nothing else: its totals are the
``remote_attempts`` and ``local_rejections`` of ``toolbreaker replay EVENTS --policy P``.

The retry-only side is a model, deterministic and stated in the figure:

- every request is a remote attempt at its time (there is no breaker to stop it);
- a call whose recorded outcome is a qualifying failure (``failure`` or ``ambiguous``)
  is retried ``retries`` times, the k-th retry ``backoff_ms * 2**(k-1)`` after the
  failure, and every retry fails as well (the input says the dependency was failing
  then; a retrying agent learns nothing from it);
- a request the input holds no outcome for (the recording's breaker rejected it, or it
  was still running when the recording ended) gets the outcome of the latest outcome of
  its dependency before it: retried as above after a failure, not after a success or an
  ``ignored`` outcome (whatever failed before it);
- an outcome without a call id settles the oldest request of its dependency still
  waiting for one (this agent sent every request), so the model does not depend on the
  breaker's policy.

Time is kept in at most :data:`BINS` bins whose width doubles as the span grows, so a
recorded trace of any length is drawn in bounded memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Final, Protocol

from toolbreaker._replaying import StreamingReplay
from toolbreaker.cli._options import whole
from toolbreaker.cli._plot import MISSING, check_output, draw, load_matplotlib
from toolbreaker.cli._sheet import load_sheet
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import FAILED_OUTCOMES, Event, Transition
from toolbreaker.core._breaker.trace import iter_trace, no_events, parse_lines
from toolbreaker.core._config import loads_toml
from toolbreaker.core._files import printable
from toolbreaker.errors import TraceError

__all__ = [
    "BINS",
    "FIXTURE_NAME",
    "Cascade",
    "CountingReplay",
    "EventSource",
    "Inputs",
    "RetryOnly",
    "Timeline",
    "add_command",
    "fixture_inputs",
    "replay_records",
    "run_simulate",
    "simulate",
    "trace_inputs",
]

#: The most time bins a series keeps.
BINS: Final = 1024
#: What the figure and errors call the bundled fixture.
FIXTURE_NAME: Final = "example trace"
#: The most retries (``--retries``) and the longest first backoff (``--backoff-ms``).
MAX_RETRIES: Final = 10
MAX_BACKOFF_MS: Final = 3_600_000
_SETTLES: Final = frozenset({"success", "failure", "ignored", "ambiguous"})


class CountingReplay(StreamingReplay):
    """A streaming replay that keeps no transitions: the caller reads what ``feed`` returns.

    Memory holds what :class:`StreamingReplay` holds without its spill files: the ledgers,
    the calls in flight and an 8-byte digest per call id.
    """

    def _keep(self, ledger: Any, dependency: str, records: tuple[Transition, ...]) -> None:
        return


@dataclasses.dataclass(frozen=True, slots=True)
class Inputs:
    """Where the events come from: a trace file or the bundled fixture.

    Attributes:
        name: the file name, or :data:`FIXTURE_NAME`.
        synthetic: whether the events are made up (the fixture) rather than recorded.
        policy: the policy or boundary sheet given, or the fixture's own for the fixture,
            or the defaults.
        text: the fixture's lines; ``None`` for a file (read lazily, streaming).
    """

    name: str
    synthetic: bool
    policy: Policy | PolicySheet
    text: str | None = None

    def events(self) -> Iterator[tuple[int, Event]]:
        """``(line, event)`` pairs, read as they are needed; errors name file and line."""
        if self.text is None:
            return iter_trace(self.name)
        return parse_lines(self.text.splitlines())


def _fixture_text(name: str) -> str:
    return (resources.files("toolbreaker") / "fixtures" / name).read_text(encoding="utf-8")


def fixture_inputs(policy: Policy | PolicySheet | None = None) -> Inputs:
    """The bundled example trace, under its own policy unless another is given."""
    if policy is None:
        policy = Policy.from_dict(loads_toml(_fixture_text("seed_policy.toml")))
    return Inputs(FIXTURE_NAME, True, policy, _fixture_text("seed_trace.jsonl"))


def trace_inputs(path: str, policy: Policy | PolicySheet | None = None) -> Inputs:
    """A recorded trace, under ``policy`` (the built-in defaults when ``None``)."""
    return Inputs(path, False, policy or Policy())


class EventSource(Protocol):
    """Anything with a name (for errors) and a fresh stream of numbered events."""

    @property
    def name(self) -> str:
        """The file name errors point at."""
        ...  # pragma: no cover - a protocol

    def events(self) -> Iterator[tuple[int, Event]]:
        """``(line, event)`` pairs from the start."""
        ...  # pragma: no cover - a protocol


def replay_records(driver: StreamingReplay, inputs: EventSource) -> Iterator[Transition]:
    """Feed every event of ``inputs`` to ``driver``; yield the core's records in order."""
    for line, event in inputs.events():
        try:
            records = driver.feed(event)
        except TraceError as exc:
            exc.file, exc.line = inputs.name, line
            raise
        yield from records


class Timeline:
    """Counts per named series in at most :data:`BINS` time bins from the first instant.

    The bin width starts at 1 ms and doubles (merging neighbours) whenever an instant
    falls past the last bin, so memory stays bounded whatever the span.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.origin: int | None = None
        self.width = 1
        self.end = 0
        self.counts = {name: [0] * BINS for name in names}

    def add(self, name: str, at: int, count: int = 1) -> None:
        """Count ``count`` at instant ``at`` (before the first instant: in the first bin)."""
        if self.origin is None:
            self.origin = at
        offset = max(0, at - self.origin)
        self.end = max(self.end, offset)
        while offset // self.width >= BINS:
            self._merge()
        self.counts[name][offset // self.width] += count

    def _merge(self) -> None:
        for series in self.counts.values():
            series[:] = [
                *(series[i] + series[i + 1] for i in range(0, BINS, 2)),
                *[0] * (BINS // 2),
            ]
        self.width *= 2

    def cumulative(self, name: str) -> tuple[list[float], list[int]]:
        """Seconds from the first instant and the running total at each, for a step plot."""
        xs: list[float] = [0.0]
        ys: list[int] = [0]
        total = 0
        last_bin = self.end // self.width
        for index in range(last_bin + 1):
            total += self.counts[name][index]
            xs.append(min(self.end, (index + 1) * self.width) / 1000)
            ys.append(total)
        return xs, ys

    def total(self, name: str) -> int:
        """Everything counted in a series."""
        return sum(self.counts[name])


@dataclasses.dataclass(slots=True)
class _Pending:
    at: int
    failing: bool


@dataclasses.dataclass(slots=True)
class RetryOnly:
    """The retry-only model's state, fed the same events as the breaker (see the module)."""

    retries: int
    backoff_ms: int
    timeline: Timeline
    requests: int = 0
    retried: int = 0
    _pending: dict[str, dict[str, _Pending]] = dataclasses.field(default_factory=dict)
    _failing: dict[str, bool] = dataclasses.field(default_factory=dict)
    _numbered: int = 0

    def feed(self, event: Event) -> None:
        """One input event (already accepted by the breaker's replay, so well formed)."""
        pending = self._pending.setdefault(event.dependency, {})
        if event.type == "request":
            failing = self._failing.get(event.dependency, False)
            self._numbered += 1
            pending[event.call or f"#{self._numbered}"] = _Pending(event.at, failing)
            self.requests += 1
            self.timeline.add("retry_remote", event.at)
        elif event.type in _SETTLES:
            # This agent sent every request, so an outcome without a call id settles
            # the oldest one still waiting, whatever the breaker made of it.
            call = event.call if event.call is not None else next(iter(pending), None)
            pending.pop(call or "", None)
            failed = event.type in FAILED_OUTCOMES
            # The latest outcome, ``ignored`` included: the dependency answered, and a
            # request left without an outcome after it is not retried (docs/lab.md).
            self._failing[event.dependency] = failed
            if failed:
                self._retry(event.at)

    def finish(self) -> None:
        """Requests without a recorded outcome take their dependency's latest one."""
        for pending in self._pending.values():
            for call in pending.values():
                if call.failing:
                    self._retry(call.at)
            pending.clear()

    def _retry(self, at: int) -> None:
        for k in range(self.retries):
            self.timeline.add("retry_remote", at + self.backoff_ms * 2**k)
        self.retried += self.retries


def add_command(commands: Any) -> None:
    """Register ``simulate`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "simulate",
        help="draw a retry-only agent against the breaker on the same events (extra: plot)",
    )
    cmd.add_argument(
        "events", nargs="?", help="a JSON Lines trace (default: the bundled example trace)"
    )
    cmd.add_argument(
        "--policy",
        help=(
            "boundary sheet or flat policy TOML "
            "(default: the fixture's own, or the built-in defaults)"
        ),
    )
    cmd.add_argument("--out", required=True, help="the figure to write: FILE.svg or FILE.png")
    cmd.add_argument(
        "--retries",
        type=whole(0, MAX_RETRIES),
        default=2,
        help="retries the retry-only agent stacks on a failed call (default 2)",
    )
    cmd.add_argument(
        "--backoff-ms",
        type=whole(0, MAX_BACKOFF_MS, unit="ms"),
        default=100,
        help="its first backoff, doubling on each retry (default 100)",
    )
    cmd.set_defaults(run_command=run_simulate)


@dataclasses.dataclass(frozen=True, slots=True)
class Cascade:
    """What ``simulate`` counted.

    Attributes:
        requests: requests in the input.
        retry_remote: remote attempts of the retry-only agent (requests and retries).
        retries: the retries among them.
        breaker_remote: remote attempts through the breaker (the core's count).
        breaker_rejected: local rejections by the breaker (the core's count).
    """

    requests: int
    retry_remote: int
    retries: int
    breaker_remote: int
    breaker_rejected: int


def simulate(inputs: Inputs, retries: int, backoff_ms: int) -> tuple[Cascade, Timeline]:
    """Run the input events through the retry-only model and the core's replay."""
    timeline = Timeline(("retry_remote", "breaker_remote", "breaker_rejected"))
    model = RetryOnly(retries, backoff_ms, timeline)
    remote = rejected = events = 0
    with CountingReplay(inputs.policy) as driver:
        for line, event in inputs.events():
            events += 1
            try:
                records = driver.feed(event)
            except TraceError as exc:
                exc.file, exc.line = inputs.name, line
                raise
            for record in records:
                if record.attempted:
                    remote += 1
                    timeline.add("breaker_remote", record.event.at)
                elif record.rejected:
                    rejected += 1
                    timeline.add("breaker_rejected", record.event.at)
            model.feed(event)
    if not events:
        raise no_events(inputs.name)  # a figure of nothing would read as an all-clear
    model.finish()
    cascade = Cascade(
        requests=model.requests,
        retry_remote=timeline.total("retry_remote"),
        retries=model.retried,
        breaker_remote=remote,
        breaker_rejected=rejected,
    )
    return cascade, timeline


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _figure(
    cascade: Cascade, timeline: Timeline, inputs: Inputs, retries: int, backoff_ms: int
) -> Any:
    def build(figure: Any) -> None:
        left, right = figure.subplots(1, 2, sharey=True)
        source = f"{inputs.name} (synthetic)" if inputs.synthetic else inputs.name
        figure.suptitle(
            f"Same input events, two agents: {printable(Path(source).name)}",
            fontweight="bold",
        )
        panels = (
            (
                left,
                "retry-only agent (no breaker)",
                (("retry_remote", "remote attempts", "#c0392b"),),
                {"retry_remote": cascade.retry_remote},
                0,
            ),
            (
                right,
                f"breaker (policy {inputs.policy.version})",
                (
                    ("breaker_remote", "remote attempts", "#c0392b"),
                    ("breaker_rejected", "local rejections", "#2471a3"),
                ),
                {
                    "breaker_remote": cascade.breaker_remote,
                    "breaker_rejected": cascade.breaker_rejected,
                },
                None,
            ),
        )
        for axes, title, series, totals, zero_rejections in panels:
            for name, label, colour in series:
                xs, ys = timeline.cumulative(name)
                axes.step(
                    xs,
                    ys,
                    where="post",
                    color=colour,
                    linewidth=2,
                    label=f"{label}: {totals[name]}",
                )
            if zero_rejections is not None:
                xs, _ = timeline.cumulative("retry_remote")
                axes.step(
                    xs,
                    [0] * len(xs),
                    where="post",
                    color="#2471a3",
                    linewidth=2,
                    label="local rejections: 0",
                )
            axes.set_title(title)
            axes.set_xlabel("time since the first event (s)")
            axes.grid(alpha=0.3)
            axes.legend(loc="upper left", frameon=False)
        left.set_ylabel("cumulative calls")
        note = (
            f"{cascade.requests} requests in. Retry-only (a model): every request reaches the "
            f"dependency; each failed call is retried {retries}x (backoff {backoff_ms} ms, "
            f"doubling) and the retries fail too: {cascade.retries} retries.\n"
            "Breaker: the core's replay of the same events (toolbreaker replay), "
            "nothing modelled."
        )
        if inputs.synthetic:
            note += " Synthetic input: the bundled example trace, not production telemetry."
        figure.supxlabel(note, fontsize=7.5, color="#444444")

    return build


def run_simulate(args: argparse.Namespace) -> int:
    """``toolbreaker simulate``: check the output, load the inputs, draw, print the totals."""
    target = check_output(args.out, "--out")
    try:
        matplotlib = load_matplotlib()
    except ImportError:
        print(f"error: {MISSING}", file=sys.stderr)
        return 2
    policy = load_sheet(args.policy) if args.policy else None
    inputs = trace_inputs(args.events, policy) if args.events else fixture_inputs(policy)
    cascade, timeline = simulate(inputs, args.retries, args.backoff_ms)
    draw(
        matplotlib,
        target,
        _figure(cascade, timeline, inputs, args.retries, args.backoff_ms),
        (10.0, 4.6),
    )
    label = " (synthetic)" if inputs.synthetic else ""
    print(
        f"{printable(str(target))}: {printable(inputs.name)}{label}, "
        f"policy {inputs.policy.version}\n"
        f"  retry-only: {_plural(cascade.retry_remote, 'remote attempt')} "
        f"({cascade.requests} requests + {cascade.retries} retries), 0 local rejections\n"
        f"  breaker:    {_plural(cascade.breaker_remote, 'remote attempt')}, "
        f"{_plural(cascade.breaker_rejected, 'local rejection')}"
    )
    return 0
