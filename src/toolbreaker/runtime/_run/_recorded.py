"""A recorded run, replayed through a live run guard: the one run driver check-run uses.

``toolbreaker check-run`` decides nothing itself. It builds a real
:class:`~toolbreaker.RunGuard` (an in-memory journal, a clock set from each step's ``at``)
and replays every recorded step through it, as an adapter would: ``begin``, run a tool
that reproduces the recorded outcome, result and cost, settle. So a recorded run stops
at the step, for the condition, with the counters and the packet a live guard gives
when its tools behave as recorded; a test replays generated runs through both and
compares them.

What a recorded step means, as a live tool (the format is
:mod:`toolbreaker.runtime._run._recorded_step`):

- ``outcome`` ``success``: the tool returns ``result`` (``None`` when the step has none);
  a write's ``success`` is a verified one (its ``verify`` passes), unless its
  ``result_error`` says the write failed: then the tool refuses the call itself (a
  :class:`~toolbreaker.errors.ToolReportedError`, nothing made);
- ``failure``, ``unknown``, ``ignored``: the tool raises the exception the classifier
  reads as the step's ``error`` (:func:`raised_for`); without one, a refused connection
  (nothing was sent: a write that failed so may be made again), a timeout (a write's
  outcome is unknown, never replayed, and counts against
  ``max_uncertain_side_effects``; a read failed) and a ``ValueError`` of the tool's own
  argument check;
- ``cost``: what the call spent, against the tool's risk class, spent only when the call
  ran: a step the guard refused (or answered from the journal) did not run and spends
  nothing. A step without a tool is a model step: its usage is counted
  (:meth:`~toolbreaker.RunGuard.add_usage`) and its cost counts toward ``max_cost`` and
  no class, unless the budget prices its model (then the priced usage is its cost);
- an irreversible tool's authority check approved it (the recorded call ran).

A step's ``risk`` is its call's class. A tool whose steps all give one class is
replayed as a tool of that class; one whose steps give it two (a shell tool: ``cat``
reads, ``sed -i`` writes) as a tool whose risk is a function of its arguments, from its
first step of another class on (a live ``risk=shell_risk_of("command")``). A tool keeps
the business key of its first write and its recovery flag: a run whose steps give one
tool two business keys, or make a recovery read write, is refused (a live guard knows a
tool once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from toolbreaker.core._run.budget import WRITES, Action, Budget, RiskClass
from toolbreaker.core._run.costs import price_of
from toolbreaker.core._run.machine import RunDecision
from toolbreaker.runtime._packet import StopPacket
from toolbreaker.runtime._run._guard import GuardedTool, RunGuard
from toolbreaker.runtime._run._recorded_step import RecordedStep, raised_for
from toolbreaker.runtime._run._shell import call_of
from toolbreaker.stores._memory import MemoryStore

__all__ = ["RecordedRun", "RecordedStep", "Replayed", "raised_for"]


@dataclasses.dataclass(frozen=True, slots=True)
class Replayed:
    """What the live guard did with one recorded step.

    Attributes:
        step: the recorded step.
        decision: the run machine's decision for its request (``None``: a model step).
        answer: what the model read (the tool's result, or the guard's answer).
        ran: the tool ran (so the step's cost was spent).
        action: the action as the run machine saw it (``None``: a model step).
    """

    step: RecordedStep
    decision: RunDecision | None
    answer: Any
    ran: bool
    action: Action | None = None


class _Clock:
    """The guard's clock: each recorded step sets it to the step's ``at``."""

    __slots__ = ("now",)

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class RecordedRun:
    """A live run guard fed a recorded run, one step at a time.

    Args:
        task: the task id the run had (write idempotency keys derive from it).
        budget: the budget to replay the run under.
    """

    def __init__(self, task: str, budget: Budget) -> None:
        self.task = task
        self.budget = budget
        self._clock: _Clock | None = None
        self._guard: RunGuard | None = None
        self._current: RecordedStep | None = None
        #: per tool: its class (``None`` once its calls differ) and its recovery flag.
        self._tools: dict[str, tuple[RiskClass | None, bool]] = {}
        #: per tool, the business key of its first write.
        self._keys: dict[str, tuple[str, ...] | None] = {}
        #: The packet as the run stopped (after the step that stopped it), once it did.
        self.stopped_packet: StopPacket | None = None

    @property
    def guard(self) -> RunGuard | None:
        """The live guard (``None`` before the first step)."""
        return self._guard

    def replay(self, step: RecordedStep) -> Replayed:
        """Feed one recorded step to the guard; what it decided and what the model read.

        Raises:
            ValueError: the step gives a tool another business key than its first write
                did, makes a recovery read write, or has arguments the guard cannot check
                (they cannot be fingerprinted).
        """
        guard = self._guard_at(step.at)
        if step.tool is None:
            self._model_step(guard, step)
            return Replayed(step, None, None, ran=False)
        self._ensure(guard, step)
        self._current = step
        ran = False
        begun = guard.begin(step.tool, dict(step.args))
        if begun.decision is None:
            # The guard refused to fingerprint the arguments (no request was made).
            raise ValueError(f"the arguments cannot be checked: {_error_of(begun.answer)}")
        if begun.answer is not None:
            answer = begun.answer
        else:
            ran = True
            try:
                result = self._call(**begun.args)
            except Exception as exc:  # noqa: BLE001 - the guard classifies it, as live
                answer = begun.failed(exc)
            else:
                answer = begun.succeeded(result)
        if self.stopped_packet is None and guard.stopped is not None:
            self.stopped_packet = guard.stop_packet()
        call = call_of(begun)
        action = None if call is None else call.action
        return Replayed(step, begun.decision, answer, ran=ran, action=action)

    def packet(self) -> StopPacket | None:
        """The operator's packet: as the run stopped, else as it ends; ``None`` before any step."""
        if self.stopped_packet is not None:
            return self.stopped_packet
        return None if self._guard is None else self._guard.stop_packet()

    def _model_step(self, guard: RunGuard, step: RecordedStep) -> None:
        """A model turn: its usage is counted; its cost spent unless the budget prices it."""
        priced = False
        if step.usage:
            assert step.model is not None
            guard.add_usage(
                step.model,
                input_tokens=step.input_tokens or 0,
                output_tokens=step.output_tokens or 0,
            )
            priced = price_of(self.budget, step.model) is not None
        if step.cost is not None and not priced:
            guard.add_cost(step.cost)  # toward max_cost, no class

    def _guard_at(self, at: int) -> RunGuard:
        if self._guard is None:
            self._clock = _Clock(at)
            self._guard = RunGuard(
                self.task, budget=self.budget, journal=MemoryStore(), clock=self._clock
            )
        assert self._clock is not None
        self._clock.now = at
        return self._guard

    def _ensure(self, guard: RunGuard, step: RecordedStep) -> None:
        """Register the step's tool on first sight; later steps must describe it the same.

        A step of another class than the tool's makes it a tool whose risk is a function
        of its arguments (the current step's class) from then on.
        """
        tool = step.tool
        assert tool is not None
        write = step.risk in WRITES
        known = self._tools.get(tool)
        recovery = known[1] if known is not None else step.recovery and not write
        if known is not None and (
            (write and recovery) or (not write and step.recovery != recovery)
        ):
            was = "a recovery read" if recovery else "no recovery read"
            raise ValueError(
                f"tool {tool!r} was recorded as {was} before, as "
                f"{'a recovery read' if step.recovery else step.risk} here: a tool is a "
                "recovery read or not, and a recovery read never writes"
            )
        if write and tool not in self._keys:
            self._keys[tool] = step.business_key  # a write's business key: its first write's
        elif write and self._keys[tool] != step.business_key:
            raise ValueError(
                f"tool {tool!r} was recorded with {_key_text(self._keys[tool])} before, "
                f"with {_key_text(step.business_key)} here: a tool's writes have one"
            )
        if known is None:
            self._register(guard, tool, step.risk, self._keys.get(tool), recovery)
        elif known[0] is not None and known[0] != step.risk:
            self._register(guard, tool, None, self._keys.get(tool), recovery)

    def _register(
        self,
        guard: RunGuard,
        tool: str,
        risk: RiskClass | None,
        business_key: tuple[str, ...] | None,
        recovery: bool,
    ) -> None:
        """The tool as a live guard knows it (``risk`` ``None``: each call's own)."""
        guard.add_tool(
            GuardedTool(
                name=tool,
                fn=self._call,
                risk=self._risk_of if risk is None else risk,
                business_key=business_key,
                verify=self._verified if risk is None or risk in WRITES else None,
                authorize=_approved if risk is None or risk == "irreversible" else None,
                recovery=recovery,
            )
        )
        self._tools[tool] = (risk, recovery)

    def _risk_of(self, _args: Any) -> RiskClass:
        """A tool whose recorded calls differ: the current step's class."""
        assert self._current is not None
        return self._current.risk

    def _call(self, **_args: Any) -> Any:
        """The recorded tool: spends the step's cost, then ends as recorded."""
        step = self._current
        assert step is not None
        assert self._guard is not None
        if step.cost is not None:
            self._guard.add_cost(step.cost, risk=step.risk)  # spent: the call ran
        raised = raised_for(
            step.outcome, step.error, result_error=step.result_error, risk=step.risk
        )
        if raised is not None:
            raise raised
        return step.result

    def _verified(self, _result: Any) -> bool:
        """A recorded write's ``success`` is a verified one.

        One whose result reports an error never returns (it is the tool's refusal).
        """
        return self._current is not None and self._current.outcome == "success"


def _approved(_request: Any) -> bool:
    return True  # the recorded irreversible call ran: its authority check approved it


def _key_text(business_key: Sequence[str] | None) -> str:
    return "no business key" if business_key is None else f"business key {list(business_key)}"


def _error_of(answer: Any) -> str:
    if isinstance(answer, Mapping):
        return str(answer.get("error") or answer)
    return str(answer)
