"""One tool call between its admission and its outcome: the step every shell drives.

:meth:`Breaker.begin() <toolbreaker.Breaker.begin>` and :meth:`RunGuard.begin()
<toolbreaker.RunGuard.begin>` both return a :class:`Step`, and every framework adapter
does the same three things with it::

    step = guard.begin("create_ticket", args)      # or breaker.begin(tool=..., args=...)
    if step.answer is not None:
        return step.answer                         # do not run the tool
    try:
        result = run_tool(**step.args)             # within step.deadline seconds
    except Exception as exc:
        return step.failed(exc)                    # what the model reads
    return step.succeeded(result)                  # the result, or the guard's verdict

``asucceeded`` / ``afailed`` are the same for code on an event loop: the store round trip
they may need is awaited, never blocking the loop. A step settles exactly once.
"""

from __future__ import annotations

from typing import Any, Protocol

from toolbreaker.errors import PermitError, PolicyError

__all__ = ["Step", "no_deadline"]


class _Owner(Protocol):
    """What settles a step: a breaker or a run guard."""

    def _step_succeeded(self, step: Step, result: Any) -> Any: ...

    def _step_failed(self, step: Step, exc: BaseException) -> Any: ...

    async def _step_asucceeded(self, step: Step, result: Any) -> Any: ...

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any: ...


class Step:
    """One tool call in flight; settle it exactly once.

    Attributes:
        tool: the tool name the model called.
        args: the arguments to run the tool with (a write's idempotency key filled in).
        idempotency_key: a write's idempotency key, else ``None``.
        fingerprint: the action's semantic fingerprint (run-guard steps), else ``None``.
        answer: when not ``None``, do not run the tool: give this to the model.
        deadline: seconds the tool may take (the breaker's timeout), ``None`` if unset.
        permit: the dependency breaker's permit, when one was granted.
        decision: the run machine's decision (run-guard steps), else ``None``.
    """

    __slots__ = (
        "_owner",
        "_settled",
        "answer",
        "args",
        "deadline",
        "decision",
        "fingerprint",
        "idempotency_key",
        "permit",
        "plan",
        "tool",
    )

    def __init__(
        self,
        owner: _Owner,
        tool: str,
        args: dict[str, Any],
        *,
        answer: Any = None,
        deadline: float | None = None,
        permit: Any = None,
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
        decision: Any = None,
        plan: Any = None,
    ) -> None:
        self._owner = owner
        self.tool = tool
        self.args = args
        self.answer = answer
        self.deadline = deadline
        self.permit = permit
        self.idempotency_key = idempotency_key
        self.fingerprint = fingerprint
        self.decision = decision
        self.plan = plan
        self._settled = answer is not None

    @property
    def settled(self) -> bool:
        """Whether the step was settled (or never runnable: it carried an answer)."""
        return self._settled

    def succeeded(self, result: Any) -> Any:
        """Record a result; returns what the model should read (usually ``result``).

        Raises:
            PermitError: the step was settled already, or carried an answer.
        """
        self.claim()
        return self._owner._step_succeeded(self, result)

    def failed(self, exc: BaseException) -> Any:
        """Record a failure; returns the result dict the model should read.

        A cancellation (anything not an ``Exception``) is recorded, then raised again.

        Raises:
            PermitError: the step was settled already, or carried an answer.
        """
        self.claim()
        return self._owner._step_failed(self, exc)

    async def asucceeded(self, result: Any) -> Any:
        """:meth:`succeeded` for the event loop: never blocks it on the store."""
        self.claim()
        return await self._owner._step_asucceeded(self, result)

    async def afailed(self, exc: BaseException) -> Any:
        """:meth:`failed` for the event loop: never blocks it on the store."""
        self.claim()
        return await self._owner._step_afailed(self, exc)

    def give(self, answer: Any) -> Step:
        """The owner's answer instead of a run: the step carries ``answer`` and is settled.

        For the step's owner (a breaker or run guard) while it decides; returns the step.
        """
        self.answer = answer
        self._settled = True
        return self

    def claim(self) -> None:
        """Mark the step settled, before settling it.

        What :meth:`succeeded`, :meth:`failed` (and their async twins) do first, and what
        an owner does when it settles a step itself (a call its turn cancelled by policy).

        Raises:
            PermitError: the step was settled already, or carried an answer.
        """
        if self._settled:
            raise PermitError(f"step for {self.tool!r} settled twice or not runnable")
        self._settled = True

    def __repr__(self) -> str:
        what = "answered" if self.answer is not None else "running"
        return f"<Step {self.tool!r} {what}>"


def no_deadline(key: str) -> PolicyError:
    """The error for a call without a deadline: every call needs one."""
    return PolicyError(
        f"no deadline for {key!r}: pass timeout= or set timeout in the boundary sheet "
        "(a hung call must become a failure)",
        field="timeout",
    )
