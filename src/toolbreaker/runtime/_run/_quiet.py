"""The quiet path of ``RunGuard.call``: a plain read counted in place by the run cell.

A read with no dependency breaker, no risk function and no declared cost (a
:class:`~toolbreaker.runtime._run._shell.QuietTool`, made by :func:`quiet_tool` when the
tool is added) is fingerprinted and handed to the run cell
(:class:`~toolbreaker.core._run.cell.RunCell`), which decides whether its request is
quiet: no limit can stop it. When it is not, the guard's direct path takes the call from
its plan on, with the fingerprint and the time read here. A quiet call makes no step, no
call record and no event: the tool runs in a block with no step (so no idempotency key),
with the openings of breakers inside it watched, and its result is counted in place; a
tool that raises gets its step and record then, and the one settle flow
(:meth:`~toolbreaker.runtime._run._settle.Settle.settle_failure`) settles it.
``tests/runtime/run/test_quiet_call.py`` and ``tests/runtime/run/test_direct_call.py``
hold it to the general flow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from toolbreaker.core._run._state_parts import action_for
from toolbreaker.core._run.budget import Action
from toolbreaker.core._run.cell import ran
from toolbreaker.core._run.fingerprint import fingerprint
from toolbreaker.errors import AsyncCallError, FingerprintError, RunStateError
from toolbreaker.runtime._breaker._breaker import Breaker, watch_openings
from toolbreaker.runtime._flow import drive
from toolbreaker.runtime._run._begin import Begin
from toolbreaker.runtime._run._driver import returned
from toolbreaker.runtime._run._settle import Settle
from toolbreaker.runtime._run._shell import CallRecord, QuietTool, RunShell
from toolbreaker.runtime._run._tools import GuardedTool, evidence_digest, may_write
from toolbreaker.runtime._step import no_step

__all__ = ["Direct", "QuietCalls", "quiet_tool"]

#: The guard's direct path: a tool, the call's arguments, and its fingerprint and the
#: time of its request when they were read already.
Direct: TypeAlias = Callable[[GuardedTool, dict[str, Any], "tuple[str, int] | None"], Any]


class QuietCalls:
    """The quiet path of a run guard's ``call`` (see the module).

    A part of a :class:`~toolbreaker.RunGuard`.

    Args:
        shell: the run's state and journal.
        begin: the begin flow (a failed call's step is its).
        settle: the settle flow (a failure's, and the retry ledger).
        direct: the guard's direct path, for a call that is not quiet.
    """

    def __init__(self, shell: RunShell, begin: Begin, settle: Settle, direct: Direct) -> None:
        self.shell = shell
        self.begin = begin
        self.settle = settle
        self.direct = direct

    def call(self, quiet: QuietTool, args: dict[str, Any]) -> Any:
        """``RunGuard.call`` of a quiet tool's read: its answer (see the module).

        ``args`` is the caller's dict, a copy of its own.
        """
        shell = self.shell
        spec = quiet.spec
        name = spec.name
        try:
            digest = fingerprint(name, args, shell.rules)
        except (FingerprintError, RecursionError):
            return self.direct(spec, args, None)  # refused there, before anything is counted
        action = action_for(quiet.action, digest)
        shell.attempted = {"tool": name, "fingerprint": digest, "idempotency_key": None}
        at = shell.clock()
        cell = shell.cell
        with shell.lock:
            begun = cell.request(action, at)
        if begun is None:
            return self.direct(spec, args, (digest, at))
        opened = watch_openings()  # breakers inside the tool that open while it runs
        try:
            with no_step():
                result = returned(name, spec.fn(**args))
        except Exception as exc:
            call = _ran(spec, action, args, begun, opened)
            step = self.begin.ran(call, args, ran(begun))
            with step.current():
                step.claim()
                answer = drive(self.settle.settle_failure(step, exc))
                if isinstance(exc, AsyncCallError):
                    raise  # settled as not counted; the program's mistake, not a result
                return answer
        evidence = evidence_digest(result, shell.rules)
        at = shell.clock()
        with shell.lock:
            counted = cell.outcome(action, "success", evidence, at)
        if not counted:
            shell.finish(
                _ran(spec, action, args, begun, opened), "success", evidence=evidence, at=at
            )
        self.settle.observed(digest, result)
        return result


def quiet_tool(tool: GuardedTool, *, coroutine: bool, shared: bool) -> QuietTool | None:
    """``tool`` as a quiet tool when its calls may take the quiet path, else ``None``.

    A read of a fixed class with no dependency breaker and no declared cost, not a
    coroutine function (``coroutine``), of a run that is not ``shared``, whose name the
    run machine accepts (checked here once: a call of a tool it refuses takes the direct
    path, which raises).
    """
    if (
        coroutine
        or shared
        or tool.breaker is not None
        or may_write(tool)
        or callable(tool.risk)
        or tool.cost is not None
    ):
        return None
    try:
        return QuietTool(tool, Action(tool.name, "0" * 64, tool.risk, tool.recovery))
    except RunStateError:
        return None


def _ran(
    spec: GuardedTool,
    action: Action,
    args: dict[str, Any],
    begun: tuple[int, int],
    opened: list[Breaker],
) -> CallRecord:
    """The record of a call the run cell began in place, made when it is needed."""
    return CallRecord(
        spec,
        action.fingerprint,
        None,
        args,
        action=action,
        step=begun[0],
        begun=True,
        opened=opened,
        risk=action.risk,
    )
