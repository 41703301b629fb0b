"""A run's state as its shell keeps it: quiet calls counted in place, the rest by the machine.

Most calls of a run are *quiet*: a read no limit can stop, that ends without a cost or
an error. The run machine (:func:`~toolbreaker.core._run.machine.apply`) would let each
one run and count it, and building a new frozen :class:`RunState` for each of its two
events was most of what a guarded call cost. A :class:`RunCell` holds the state for its
shell: :meth:`RunCell.feed` gives an event to the run machine, except an event it can
tell is quiet, which it counts in place (the same counts, the same records, in the same
order as the machine's transition); :attr:`RunCell.state` is the state as the machine
would have left it, built once when asked for.

Which calls are quiet is worked out once per state the machine made, by
:func:`~toolbreaker.core._run.limits.quiet`, beside the limits themselves; what a quiet
call changes is what :func:`~toolbreaker.core._run.limits.begin` and
:func:`~toolbreaker.core._run.limits.finish` change for it. ``tests/core/run/test_cell.py``
holds a cell to the run machine over any sequence of events: the same decisions, the
same state after each.

Pure: no clock (times arrive as arguments), no I/O, and no lock: the shell holds its own
around every method, as around :func:`~toolbreaker.core._run.machine.apply`.
"""

from __future__ import annotations

from typing import Final

from toolbreaker.core._run import protocol
from toolbreaker.core._run._state_parts import attempt_of, tally_of
from toolbreaker.core._run._values import WRITES, Recent, RiskClass, RiskMap
from toolbreaker.core._run.budget import Action, Budget, RunState, Stop
from toolbreaker.core._run.limits import Quiet, may_loop, quiet, repeat_of, result_digest
from toolbreaker.core._run.machine import RunDecision, RunEvent, apply
from toolbreaker.core._run.state import (
    EVIDENCE_LIMIT,
    HISTORY_LIMIT,
    OUTCOMES,
    TALLY_LIMIT,
    Attempt,
    Tally,
    changed,
)

__all__ = ["RunCell", "ran"]

#: Whether a read's request is run by its journal status (a read has none): the write
#: protocol's answer, asked once.
_READS_RUN: Final = protocol.on_request(None) == "run"


class RunCell:
    """A run's state and budget, fed events; quiet ones are counted in place (see the module).

    Not thread-safe: its shell holds a lock around every method and property.

    Args:
        state: the run's state.
        budget: its limits.
    """

    __slots__ = (
        "_base",
        "_budget",
        "_calls",
        "_class_calls",
        "_digests",
        "_dirty",
        "_evidence",
        "_history",
        "_quiet",
        "_steps",
        "_tallies",
        "_turn_calls",
    )
    _base: RunState
    _budget: Budget
    _quiet: Quiet | None
    _dirty: bool
    # The counts changed in place, while _dirty: the held state's, and the quiet calls'.
    _steps: int
    _calls: int
    _class_calls: dict[RiskClass, int]
    _history: list[Attempt]  # oldest first, at most HISTORY_LIMIT
    _tallies: dict[str, Tally] | None  # None: the held state's, unchanged
    _digests: dict[str, str] | None
    _evidence: int
    _turn_calls: int

    def __init__(self, state: RunState, budget: Budget) -> None:
        self.reset(state, budget)

    def reset(self, state: RunState, budget: Budget) -> None:
        """Hold ``state`` and ``budget`` from now on (what the machine or a store made)."""
        self._base = state
        self._budget = budget
        self._quiet = None  # worked out on the first quiet call
        self._dirty = False

    # -- the state, as the run machine would have left it -----------------------------------

    @property
    def state(self) -> RunState:
        """The run's state: built from the counts made in place, once, when asked for."""
        if self._dirty:
            self._dirty = False  # the dicts now belong to the state: copied before a change
            base = self._base
            tallies, digests = self._tallies, self._digests
            if self._steps == base.steps and digests is None:
                return base  # opened, and nothing changed (a request that was not quiet)
            self._base = changed(
                base,
                steps=self._steps,
                calls=self._calls,
                class_calls=RiskMap(self._class_calls),
                history=tuple(self._history),
                tallies=base.tallies if tallies is None else Recent.of_dict(tallies),
                digests=base.digests if digests is None else Recent.of_dict(digests),
                evidence=self._evidence,
                turn_calls=self._turn_calls,
            )
        return self._base

    @property
    def budget(self) -> Budget:
        """The run's limits."""
        return self._budget

    @property
    def steps(self) -> int:
        """The tool requests the run was asked about (``RunState.steps``)."""
        return self._steps if self._dirty else self._base.steps

    @property
    def stopped(self) -> Stop | None:
        """Why the run stopped (``RunState.stopped``): a quiet call never changes it."""
        return self._base.stopped

    @property
    def writes_blocked(self) -> Stop | None:
        """Why writes are refused (``RunState.writes_blocked``): a quiet call never changes it."""
        return self._base.writes_blocked

    # -- events --------------------------------------------------------------------------

    def feed(self, event: RunEvent) -> RunDecision:
        """What :func:`~toolbreaker.core._run.machine.apply` decides, the state moved on.

        A quiet request or outcome is counted in place; any other event is the run
        machine's. Raises what ``apply`` raises (the state unchanged).
        """
        action = event.action
        kind = event.type
        if action is not None:
            if kind == "request" and event.reserve is None:
                begun = self.request(action, event.at)
                if begun is not None:
                    return ran(begun)
            elif (
                kind == "outcome"
                and event.outcome is not None
                and event.reservation == 0
                and event.cost is None
                and event.error is None
                and self.outcome(action, event.outcome, event.evidence, event.at)
            ):
                return _RECORDED
        state, decision = apply(self.state, event, self._budget)
        self.reset(state, self._budget)
        return decision

    def request(self, action: Action, at: int) -> tuple[int, int] | None:
        """Begin ``action`` in place if its request is quiet: its step and repeat number.

        ``None``: the request is not quiet; nothing changed (feed it to the machine). A
        request that declares a cost to hold is never quiet: do not ask for one.
        """
        window = self._quiet
        if window is None:
            window = self._quiet = quiet(self._base, self._budget)
        limits = window.classes.get(action.risk)
        base = self._base
        if (
            limits is None
            or not _READS_RUN
            or type(at) is not int
            or at < base.started_at
            or (window.before is not None and at >= window.before)
            or action.tool in window.tools_stopped
        ):
            return None
        if not self._dirty:
            self._open()
        risk, fingerprint = action.risk, action.fingerprint
        class_limit, repeat_limit = limits
        turn_limit = window.turn_calls
        history = self._history
        if (
            self._calls >= window.calls
            or (class_limit is not None and self._class_calls[risk] >= class_limit)
            or (turn_limit is not None and self._turn_calls >= turn_limit)
            or may_loop(history, fingerprint)
        ):
            return None
        tallies = self._tallies
        known = base.tallies.get(fingerprint) if tallies is None else tallies.get(fingerprint)
        evidence = self._evidence
        repeat = repeat_of(evidence, known)
        if repeat > repeat_limit:
            return None
        # What limits.begin counts, and the turn's call (the machine's request does).
        if tallies is None:
            tallies = self._tallies = base.tallies.as_dict()
        tallies.pop(fingerprint, None)
        tallies[fingerprint] = tally_of(
            fingerprint, 1 if known is None else known.occurrences + 1, evidence, repeat
        )
        if len(tallies) > TALLY_LIMIT:
            del tallies[next(iter(tallies))]
        history.append(attempt_of(action.tool, fingerprint, evidence))
        if len(history) > HISTORY_LIMIT:
            del history[0]
        self._calls += 1
        self._class_calls[risk] += 1
        if turn_limit is not None:
            self._turn_calls += 1
        self._steps += 1
        return self._steps, repeat

    def outcome(self, action: Action, outcome: str, evidence: str | None, at: int) -> bool:
        """Record how a begun ``action`` ended, in place if that is quiet; whether it was.

        Quiet: a read's outcome that settles no reservation and reports no cost and no
        error (the caller asks only for such); ``False``: nothing changed.
        """
        base = self._base
        if (
            action.risk in WRITES
            or outcome not in OUTCOMES
            or type(at) is not int
            or at < base.started_at
            or (evidence is not None and type(evidence) is not str)
        ):
            return False
        window = self._quiet
        if window is None:
            window = self._quiet = quiet(base, self._budget)
        if window.leases_end is not None and at >= window.leases_end:
            return False
        if evidence is None:
            return True
        # What limits.finish changes for a read: the evidence its result brings.
        digest = result_digest(evidence)
        digests = self._digests if self._dirty else None
        if digests is None:
            if base.digests.newest() == digest:
                return True  # the result seen last (most calls): nothing changes
            if not self._dirty:
                self._open()
            digests = self._digests = base.digests.as_dict()
        elif next(reversed(digests), None) == digest:
            return True
        if digest in digests:
            del digests[digest]  # seen again: the newest now
        else:
            self._evidence += 1
        digests[digest] = digest
        if len(digests) > EVIDENCE_LIMIT:
            del digests[next(iter(digests))]
        return True

    def _open(self) -> None:
        """Take the counts of the held state, to change them in place."""
        base = self._base
        self._steps = base.steps
        self._calls = base.calls
        self._class_calls = dict(base.class_calls)
        self._history = list(base.history)
        self._tallies = None  # the state's own until the first change: copied then
        self._digests = None
        self._evidence = base.evidence
        self._turn_calls = base.turn_calls
        self._dirty = True


def ran(begun: tuple[int, int]) -> RunDecision:
    """The run machine's decision for a request :meth:`RunCell.request` began in place.

    ``begun`` is what it returned: the step and the repeat number.
    """
    step, repeat = begun
    return RunDecision("run", repeat=repeat, step=step)


_RECORDED: Final = RunDecision("recorded")
