"""Exercise a user's agent against scenarios: run it twice, count at the service, judge.

The contract with the agent is one function, ``agent(ctx)``, called twice per scenario
with an :class:`ExerciseContext`: once with the faults on, then (``ctx.resumed``) once
more as a new process would, with the same task id and journal and the faults gone. It
points its HTTP tools at ``ctx.base_url`` (the fault proxy), wraps its plain Python tools
with ``ctx.wrap(...)``, launches its stdio MCP servers through ``ctx.mcp_stdio(...)``,
makes its breakers in ``ctx.registry`` (or its own registry, handed to ``ctx.watch``),
gives its run guard ``ctx.task`` and ``ctx.journal`` (or uses ``ctx.run_guard()``), and
returns what holds its stop packet: a ``RunGuard``, an adapter with ``stop_packet(task)``
(``ToolbreakerMiddleware``...), a ``StopPacket``, or nothing when it used
``ctx.run_guard()``.

The judgement is the core's (:func:`toolbreaker.testing._scenario.judge`); this module only
runs and counts.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from toolbreaker.core._breaker.predicates import may_start_rejecting
from toolbreaker.core._breaker.state import Transition
from toolbreaker.core._files import printable
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._fleet._attach import Attachment, Target
from toolbreaker.runtime._fleet._registry import Registry
from toolbreaker.runtime._packet import StopPacket
from toolbreaker.runtime._run._guard import RunGuard
from toolbreaker.runtime._step import StepStart
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.testing._fault_proxy import FaultProxy, Ledger, wrap_tool
from toolbreaker.testing._mcp_faults import CONTROL_PREFIX, mcp_stdio_command
from toolbreaker.testing._scenario import (
    DEADLINE_FACTOR,
    Judgement,
    Measured,
    Scenario,
    judge,
    load_scenario,
)
from toolbreaker.testing._service import ToolService

__all__ = [
    "Agent",
    "ExerciseContext",
    "ExerciseReport",
    "ScenarioReport",
    "exercise",
    "shipped_scenarios",
]

#: ``agent(ctx)``: the user's agent, run once per scenario and once more resumed.
Agent = Callable[["ExerciseContext"], Any]


class ExerciseContext:
    """What the agent gets: where its tools are, what to guard them with, which run.

    Attributes:
        scenario: the scenario being run (a scripted model follows its ``behaviour``; a
            real model is given its ``prompt``).
        base_url: the fault proxy's base URL: point the agent's HTTP tools here.
        task: the task id of both runs; give it to the run guard.
        journal: the store both runs journal into; give it to the run guard.
        registry: a registry whose breakers are watched (default policy; tool deadline
            twice the scenario's ``timeout``, cooperative).
        timeout: seconds: the deadline the agent's tools must use (their HTTP timeout).
        resumed: ``True`` in the second run, which resumes the first.
    """

    def __init__(
        self, scenario: Scenario, base_url: str, journal: MemoryStore, ledger: Ledger, resumed: bool
    ) -> None:
        self.scenario = scenario
        self.base_url = base_url
        self.task = scenario.task
        self.journal = journal
        self.timeout = scenario.timeout
        self.resumed = resumed
        self.registry = Registry(
            default_timeout=scenario.timeout * DEADLINE_FACTOR, default_enforce="cooperative"
        )
        self.guard: RunGuard | None = None
        self._ledger = ledger
        self._lock = threading.Lock()
        self._opened: list[str] = []
        self._refused = 0
        self._open: list[Breaker] = []
        self._again = 0
        # One attachment for everything watched: a breaker reached through the registry
        # and through a run guard (the documented agent) is wired once, so each of its
        # transitions and tool calls is counted once.
        self._watching = Attachment(transition=self._heard, step=self._step)
        self.watch(self.registry)

    def watch(self, *targets: Target) -> None:
        """Watch the breakers of a registry, a run guard or breakers the agent made itself.

        A breaker watched through several targets (``ctx.registry`` and the run guard
        whose tools use it) is counted once.
        """
        self._watching.attach(*targets)

    def wrap(self, name: str, fn: Callable[..., Any], *, write: bool = False) -> Callable[..., Any]:
        """A plain Python tool with the scenario's faults for ``tool = name``, counted.

        ``write``: the tool has side effects; a call that returns has committed.
        """
        return wrap_tool(self._ledger, name, fn, write=write)

    def mcp_stdio(self, command: Sequence[str], *, meta_key: str | None = None) -> list[str]:
        """The command to launch instead of a stdio MCP server's: the server, with faults.

        The scenario's faults for ``tool = NAME`` apply to the server's ``tools/call``
        requests (see :mod:`toolbreaker.testing._mcp_faults`), counted with the rest.

        Args:
            command: the real server's argv (``[sys.executable, "server.py"]``).
            meta_key: the request ``_meta`` key holding a write's idempotency key
                (``toolbreaker.integrations.mcp.IDEMPOTENCY_META_KEY`` for
                ``GuardedClient``); ``None``: keys are not read.
        """
        return mcp_stdio_command(self.base_url + CONTROL_PREFIX, meta_key or "", command)

    def run_guard(self, **options: Any) -> RunGuard:
        """A run guard for this run (``ctx.task``, ``ctx.journal``); its packet is reported.

        ``options`` go to :class:`~toolbreaker.RunGuard` (``budget=``, ``rules=``).
        """
        guard = RunGuard(self.task, journal=self.journal, **options)
        self.guard = guard
        self.watch(guard)
        return guard

    def _heard(self, record: Transition, breaker: Breaker) -> None:
        if may_start_rejecting(record):
            self._ledger.opened(breaker)
            with self._lock:
                if breaker.key not in self._opened:
                    self._opened.append(breaker.key)
                    self._open.append(breaker)
        if record.rejected:
            with self._lock:
                self._refused += 1

    def _step(self, start: StepStart) -> None:
        """A tool call begins: one the model makes through a breaker that opened counts."""
        with self._lock:
            if any(start.breaker is breaker for breaker in self._open):
                self._again += 1

    def _close(self) -> None:
        self._watching.close()
        self.registry.close()


@dataclasses.dataclass(frozen=True, slots=True)
class ScenarioReport:
    """One scenario's outcomes: what was measured and what the core made of it."""

    scenario: Scenario
    measured: Measured
    judgement: Judgement

    @property
    def held(self) -> bool:
        """Whether every promise held."""
        return self.judgement.held

    def to_dict(self) -> dict[str, Any]:
        """As a JSON-ready dict (``toolbreaker exercise --json``'s entries)."""
        m = self.measured
        return {
            "scenario": self.scenario.to_dict(),
            "held": self.held,
            "promises": [p.to_dict() for p in self.judgement.promises],
            "after_unavailable": self.judgement.after_unavailable,
            "unmet_faults": list(self.judgement.unmet),
            "targets": [t.to_dict() for t in m.targets],
            "opened": list(m.opened),
            "refused_locally": m.refused_locally,
            "called_again": m.called_again,
            "packet": None if m.packet is None else dict(m.packet),
            "agent_error": m.agent_error,
            "resume_error": m.resume_error,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ExerciseReport:
    """Every scenario's report, in the order run."""

    scenarios: tuple[ScenarioReport, ...]

    @property
    def held(self) -> bool:
        """Whether every promise of every scenario held."""
        return all(s.held for s in self.scenarios)

    def failures(self) -> list[str]:
        """One printable line per promise that failed: ``scenario: promise: detail``."""
        return [
            printable(f"{s.scenario.name}: {p.name}: {p.detail}")
            for s in self.scenarios
            for p in s.judgement.promises
            if not p.held
        ]

    def assert_held(self) -> None:
        """Raise ``AssertionError`` listing every promise that failed, one per line."""
        failures = self.failures()
        if failures:
            raise AssertionError(
                f"{len(failures)} promise(s) failed under toolbreaker exercise:\n"
                + "\n".join(failures)
            )

    def to_dict(self) -> dict[str, Any]:
        """As a JSON-ready dict (``toolbreaker exercise --json``)."""
        return {
            "schema": "toolbreaker.exercise/v1",
            "held": self.held,
            "scenarios": [s.to_dict() for s in self.scenarios],
        }


def shipped_scenarios() -> tuple[Path, ...]:
    """The scenario files shipped in the package, sorted by name."""
    folder = resources.files("toolbreaker.testing") / "scenarios"
    return tuple(sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml")))


def _packet_of(returned: Any, ctx: ExerciseContext) -> Mapping[str, Any] | None:
    holder = returned if returned is not None else ctx.guard
    if holder is None:
        return None
    if isinstance(holder, StopPacket):
        return holder.to_dict()
    if isinstance(holder, Mapping):
        return holder
    if isinstance(holder, RunGuard):
        return holder.stop_packet().to_dict()
    stop_packet = getattr(holder, "stop_packet", None)
    if callable(stop_packet):
        packet = stop_packet(ctx.task)
        return packet.to_dict() if isinstance(packet, StopPacket) else None
    return None


def _failure(exc: BaseException) -> str:
    return printable(f"{type(exc).__name__}: {exc}")[:300]


def exercise_one(scenario: Scenario, agent: Agent, *, service: str | None = None) -> ScenarioReport:
    """Run ``agent`` against one scenario (twice: faults on, then resumed); the report.

    Args:
        scenario: the scenario.
        agent: ``agent(ctx)`` (see :class:`ExerciseContext`).
        service: the base URL of the user's HTTP tool service; ``None`` starts the
            bundled :class:`~toolbreaker.testing.ToolService` for the scenario.
    """
    ledger = Ledger(scenario)
    bundled = ToolService().start() if service is None else None
    upstream = bundled.url if bundled is not None else str(service)
    journal = MemoryStore()
    agent_error = resume_error = None
    try:
        with FaultProxy(ledger, upstream) as proxy:
            first = ExerciseContext(scenario, proxy.url, journal, ledger, resumed=False)
            try:
                returned = agent(first)
            except Exception as exc:  # noqa: BLE001 - an agent that raises is a finding
                returned, agent_error = None, _failure(exc)
            finally:
                first._close()
            packet = _packet_of(returned, first)
            ledger.resume()
            again = ExerciseContext(scenario, proxy.url, journal, ledger, resumed=True)
            try:
                agent(again)
            except Exception as exc:  # noqa: BLE001 - as above
                resume_error = _failure(exc)
            finally:
                again._close()
    finally:
        if bundled is not None:
            bundled.stop()
    measured = Measured(
        targets=ledger.counts(),
        packet=packet,
        committed_keys=tuple(ledger.committed_keys),
        committed_actions=tuple(ledger.committed_actions),
        resumed_actions=tuple(ledger.resumed_actions),
        resume_error=resume_error,
        opened=tuple(first._opened),
        refused_locally=first._refused,
        called_again=first._again,
        faults_met=tuple(sorted(ledger.faults_met)),
        agent_error=agent_error,
    )
    return ScenarioReport(scenario, measured, judge(scenario, measured))


def exercise(
    scenarios: Iterable[Scenario | str | Path] | None,
    agent: Agent,
    *,
    service: str | None = None,
) -> ExerciseReport:
    """Run ``agent`` against each scenario; the report of all of them.

    Args:
        scenarios: scenarios, or paths of scenario files; ``None``: every shipped one.
        agent: ``agent(ctx)`` (see :class:`ExerciseContext`).
        service: the user's HTTP tool service's base URL; ``None``: the bundled one.

    Raises:
        PolicyError: a scenario file is invalid (located by file and line).
    """
    chosen: Sequence[Scenario | str | Path] = (
        shipped_scenarios() if scenarios is None else tuple(scenarios)
    )
    loaded = [s if isinstance(s, Scenario) else load_scenario(s) for s in chosen]
    return ExerciseReport(tuple(exercise_one(s, agent, service=service) for s in loaded))
