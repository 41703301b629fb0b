"""Run guards: may this run continue?

A dependency breaker asks whether a remote is healthy enough to call; a :class:`RunGuard`
asks whether *this task* may take its next action. Every tool call of a run goes through
it: fingerprint the intended action, check the budgets (pure counters in
:mod:`toolbreaker.core.run.budget`), journal writes before they run, execute through the
dependency's breaker, verify, and record. Writes follow plan, authorize, execute,
verify, record; an unknown outcome (timeout after the request may have committed,
failed verification, malformed payload) is never replayed: the run's write breaker opens
and a read-only reconcile check decides whether the write happened. Resuming a task with
the same id skips everything its journal confirms.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, Literal

from toolbreaker.core.run import budget as budgets
from toolbreaker.core.run.budget import Action, Budget, RiskClass, RunState, Stop
from toolbreaker.core.run.fingerprint import FingerprintRules, fingerprint, write_key
from toolbreaker.core.run.redact import redact
from toolbreaker.errors import CircuitOpen, PermitError, PolicyError, StoreUnavailable
from toolbreaker.runtime._breaker import Breaker, Permit
from toolbreaker.runtime._classify import Verdict
from toolbreaker.runtime._clock import Clock, monotonic_ms
from toolbreaker.stores._protocol import Journal
from toolbreaker.stores.memory import MemoryStore

__all__ = ["ActionRequest", "GuardStep", "GuardedTool", "RunGuard", "StopPacket"]

#: Verdict details that mean a write may have reached the server before it failed.
_MAYBE_COMMITTED: Final = ("timeout", "late-result", "network")
_WRITES: Final = ("reversible_write", "irreversible")
_RUN_KEY: Final = "__run__"
_MAX_JOURNALED_RESULT: Final = 64 * 1024

Authorizer = Callable[["ActionRequest"], bool]


@dataclasses.dataclass(frozen=True, slots=True)
class ActionRequest:
    """What an authority check (or an approval hook) is asked to approve.

    Attributes:
        task: the run's task id.
        tool: the tool name.
        args: the arguments, secrets masked.
        fingerprint: the semantic fingerprint of the action.
        idempotency_key: the key the write will carry.
        risk: the tool's risk class.
    """

    task: str
    tool: str
    args: Mapping[str, Any]
    fingerprint: str
    idempotency_key: str | None
    risk: RiskClass


@dataclasses.dataclass(frozen=True, slots=True)
class GuardedTool:
    """A tool as the run guard knows it.

    Attributes:
        name: the tool name the model calls.
        fn: the implementation, called with the arguments as keywords.
        risk: ``read``, ``reversible_write`` or ``irreversible``.
        breaker: the dependency breaker the call goes through (and its deadline).
        business_key: argument fields (dotted paths) naming the business action, from
            which a write's idempotency key is derived; default: the whole canonical
            action.
        idempotency_arg: the keyword argument that receives the idempotency key.
        verify: a write's result check; a falsy answer or an exception makes the
            outcome unknown.
        reconcile: a read-only status check, called with the idempotency key and the
            arguments; returns the committed record or ``None``.
        external_id: extracts the external id (ticket number ...) from a result.
        authorize: the authority check every irreversible call must pass.
        required: the run cannot go on without this tool: its breaker opening stops it.
        recovery: a read-only status check that may still run after the run stopped.
    """

    name: str
    fn: Callable[..., Any]
    risk: RiskClass = "read"
    breaker: Breaker | None = None
    business_key: tuple[str, ...] | None = None
    idempotency_arg: str | None = "idempotency_key"
    verify: Callable[[Any], bool] | None = None
    reconcile: Callable[[str, Mapping[str, Any]], Any] | None = None
    external_id: Callable[[Any], str | None] | None = None
    authorize: Authorizer | None = None
    required: bool = False
    recovery: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class StopPacket:
    """What an operator gets instead of "something went wrong". JSON-ready, secrets masked.

    Attributes:
        task: the task id.
        condition: the exact condition that stopped the run.
        detail: the condition in words, with the numbers.
        confirmed: completed steps with their idempotency keys and external ids.
        uncertain: writes whose outcome is unknown or was reconciled.
        attempted: the attempted action (tool, fingerprint, idempotency key).
        counters: the budget counters when the run stopped.
        next_safe_action: what to do now.
    """

    task: str
    condition: str
    detail: str
    confirmed: tuple[Mapping[str, Any], ...]
    uncertain: tuple[Mapping[str, Any], ...]
    attempted: Mapping[str, Any] | None
    counters: Mapping[str, Any]
    next_safe_action: str

    def to_dict(self) -> dict[str, Any]:
        """The packet as a JSON-ready dict, secrets masked."""
        data: dict[str, Any] = redact(
            {
                "schema": "toolbreaker.stop/v1",
                "task": self.task,
                "condition": self.condition,
                "detail": self.detail,
                "confirmed": [dict(x) for x in self.confirmed],
                "uncertain": [dict(x) for x in self.uncertain],
                "attempted": dict(self.attempted) if self.attempted else None,
                "counters": dict(self.counters),
                "next_safe_action": self.next_safe_action,
            }
        )
        return data

    def to_json(self) -> str:
        """The packet as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)


class RunGuard:
    """Budgets, loop detection and safe writes for one run of one task.

    Args:
        task: the task id; a resumed run uses the same id and skips confirmed work.
        budget: the run's limits.
        journal: where completed actions are journaled (a store); shared by resumed runs.
        clock: integer-millisecond monotonic clock.
        rules: fingerprint rules (volatile and prose fields).
    """

    def __init__(
        self,
        task: str,
        *,
        budget: Budget | None = None,
        journal: Journal | None = None,
        clock: Clock = monotonic_ms,
        rules: FingerprintRules | None = None,
    ) -> None:
        if not task:
            raise PolicyError("a run guard needs a task id", field="task")
        self.task = task
        self.budget = budget or Budget()
        self.journal: Journal = journal if journal is not None else MemoryStore()
        self.clock = clock
        self.rules = rules or FingerprintRules.default()
        self._tools: dict[str, GuardedTool] = {}
        self._lock = threading.Lock()
        self._run = budgets.RunState.start(task, clock())
        self._attempted: dict[str, Any] | None = None
        self._write_stop: Stop | None = None

    # -- configuration ------------------------------------------------------------------

    def add_tool(self, tool: GuardedTool) -> GuardedTool:
        """Register a tool; irreversible tools must have an authority check."""
        if tool.risk not in ("read", "reversible_write", "irreversible"):
            raise PolicyError(f"unknown risk class {tool.risk!r}", field=f"{tool.name}.risk")
        if tool.risk == "irreversible" and tool.authorize is None:
            raise PolicyError(
                f"irreversible tool {tool.name!r} needs an authorize callback",
                field=f"{tool.name}.authorize",
            )
        if tool.recovery and tool.risk != "read":
            raise PolicyError(
                f"recovery tool {tool.name!r} must be a read", field=f"{tool.name}.recovery"
            )
        self._tools[tool.name] = tool
        return tool

    def tool(
        self,
        name: str | None = None,
        *,
        risk: RiskClass = "read",
        breaker: Breaker | None = None,
        business_key: Sequence[str] | None = None,
        idempotency_arg: str | None = "idempotency_key",
        verify: Callable[[Any], bool] | None = None,
        reconcile: Callable[[str, Mapping[str, Any]], Any] | None = None,
        external_id: Callable[[Any], str | None] | None = None,
        authorize: Authorizer | None = None,
        required: bool = False,
        recovery: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`add_tool`; the decorated function becomes guarded."""

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            spec = self.add_tool(
                GuardedTool(
                    name=name or fn.__name__,
                    fn=fn,
                    risk=risk,
                    breaker=breaker,
                    business_key=tuple(business_key) if business_key else None,
                    idempotency_arg=idempotency_arg,
                    verify=verify,
                    reconcile=reconcile,
                    external_id=external_id,
                    authorize=authorize,
                    required=required,
                    recovery=recovery,
                )
            )

            def guarded(**kwargs: Any) -> Any:
                return self.call(spec.name, kwargs)

            guarded.__name__ = spec.name
            guarded.__doc__ = fn.__doc__
            return guarded

        return decorate

    # -- inspection -----------------------------------------------------------------------

    @property
    def stopped(self) -> Stop | None:
        """Why the run stopped, or ``None`` while it may continue."""
        return self._run.stopped

    @property
    def writes_blocked(self) -> Stop | None:
        """Why writes are refused for the rest of the run (an unknown write outcome)."""
        return self._write_stop

    @property
    def state(self) -> RunState:
        """The run's budget counters."""
        return self._run

    def stop(self, detail: str = "stopped by an operator") -> StopPacket:
        """Stop the run by hand (condition ``operator``) and return the packet."""
        with self._lock:
            now = self.clock()
            self._run = budgets.stop(self._run, Stop("operator", detail, now, None, None))
        return self.stop_packet()

    def add_cost(self, amount: Decimal | str | int, *, risk: RiskClass | None = None) -> None:
        """Report the cost of a model step (or anything outside a tool call)."""
        with self._lock:
            self._run = budgets.add_cost(self._run, amount, risk=risk)

    def stop_packet(self) -> StopPacket:
        """The operator packet for the run as it is now."""
        stop = self._run.stopped or self._write_stop
        try:
            entries = self.journal.journal_entries(self.task)
        except StoreUnavailable:
            entries = [{"status": "journal-unavailable"}]
        confirmed = tuple(
            _step(e) for e in entries if e.get("status") == "confirmed" and e.get("tool")
        )
        uncertain = tuple(
            _step(e) for e in entries if e.get("status") in ("unknown", "reconciled-absent")
        )
        condition = stop.condition if stop else "running"
        detail = stop.detail if stop else "the run has not stopped"
        return StopPacket(
            task=self.task,
            condition=condition,
            detail=detail,
            confirmed=confirmed,
            uncertain=uncertain,
            attempted=self._attempted,
            counters=self._run.counters(),
            next_safe_action=self._next_safe_action(stop, uncertain),
        )

    # -- running tools --------------------------------------------------------------------

    def call(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        """Run one tool call of this run; returns the tool's result or a result dict.

        Never raises for tool failures: a rejected, failed, unknown or stopped call
        returns a JSON-ready dict the model can act on.
        """
        plan = self._plan(tool, dict(args or {}))
        if plan.answer is not None:
            return plan.answer
        try:
            if plan.spec.breaker is not None:
                result = plan.spec.breaker.call(plan.spec.fn, **plan.args)
            else:
                result = plan.spec.fn(**plan.args)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result
            return self._failed(plan, exc)
        return self._succeeded(plan, result)

    async def acall(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        """The async twin of :meth:`call` for coroutine tools."""
        plan = self._plan(tool, dict(args or {}))
        if plan.answer is not None:
            return plan.answer
        try:
            if plan.spec.breaker is not None:
                result = await plan.spec.breaker.acall(plan.spec.fn, **plan.args)
            else:
                awaitable: Awaitable[Any] = plan.spec.fn(**plan.args)
                result = await awaitable
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result
            return self._failed(plan, exc)
        return self._succeeded(plan, result)

    def begin(self, tool: str, args: Mapping[str, Any] | None = None) -> GuardStep:
        """Two-step form for framework hooks that run the tool themselves.

        If :attr:`GuardStep.answer` is set, do not run the tool: hand the answer to the
        model. Otherwise run it with :attr:`GuardStep.args` (the idempotency key is
        injected there) and settle the step with ``succeeded(result)`` or ``failed(exc)``,
        whose return value is what the model should see. The tool's dependency breaker is
        asked for a permit here and settled there; the framework enforces the deadline.
        """
        plan = self._plan(tool, dict(args or {}))
        if plan.answer is None and plan.spec.breaker is not None:
            permit = plan.spec.breaker.allow()
            if isinstance(permit, Permit):
                plan.permit = permit
            else:
                plan.answer = self._failed(plan, permit.error())
        return GuardStep(self, plan)

    def ensure_tool(self, name: str, **options: Any) -> GuardedTool:
        """The registered tool ``name``, registering it with ``options`` if unknown.

        Adapters use this for tools the user did not declare: they are reads unless the
        options (or the framework's annotations) say otherwise.
        """
        spec = self._tools.get(name)
        if spec is None:
            spec = self.add_tool(GuardedTool(name=name, fn=_not_callable, **options))
        return spec

    # -- plan, authorize --------------------------------------------------------------------

    def _plan(self, tool: str, args: dict[str, Any]) -> _Plan:
        spec = self._tools.get(tool)
        if spec is None:
            raise PolicyError(f"unknown tool {tool!r} for run {self.task!r}", field="tool")
        action_fp = fingerprint(tool, args, self.rules)
        key = None
        if spec.risk in _WRITES:
            key = write_key(tool, args, spec.business_key, task=self.task, rules=self.rules)
        plan = _Plan(spec, args, action_fp, key, key or "")
        self._attempted = {"tool": tool, "fingerprint": action_fp, "idempotency_key": key}
        try:
            done = self.journal.journal_get(self.task, key) if key else None
        except StoreUnavailable:
            plan.answer = _journal_down(tool)
            return plan
        if done is not None and done.get("status") in ("unknown", "pending"):
            plan.answer = self._reconcile(plan, reason="an earlier attempt's outcome is unknown")
            return plan
        confirmed = done is not None and done.get("status") == "confirmed"
        action = Action(tool=tool, fingerprint=action_fp, risk=spec.risk, recovery=spec.recovery)
        with self._lock:
            now = self.clock()
            decision, run = budgets.admit(self._run, action, self.budget, now)
            if (
                confirmed
                and done is not None
                and (
                    decision.allowed
                    or (decision.stop and decision.stop.condition == "uncertain-side-effect")
                )
            ):
                # A confirmed write is never executed again: the journal answers (this is
                # how a resumed task skips its completed steps).
                result = done.get("result", {"ok": True, "deduplicated": True})
                if decision.allowed:
                    self._run = budgets.finish(
                        run, action, "success", now, evidence=_digest(result)
                    )
                plan.answer = result
                return plan
            if not decision.allowed:
                assert decision.stop is not None
                if decision.stop.condition == "uncertain-side-effect":
                    # The run's write breaker: writes are refused, safe work goes on.
                    self._write_stop = self._write_stop or decision.stop
                    plan.answer = self._stopped_result(decision.stop, writes_only=True)
                    return plan
                self._run = budgets.stop(self._run, decision.stop)
                plan.answer = self._stopped_result(decision.stop)
                return plan
            self._run = run
        plan.action = action
        if spec.risk == "irreversible" and not self._authorized(plan):
            self._finish(plan, "ignored")
            plan.answer = {
                "ok": False,
                "tool": tool,
                "denied": True,
                "instruction": f'The authority check refused "{tool}". Do not retry it; '
                "tell the user it needs approval.",
            }
            return plan
        if key is not None:
            if spec.idempotency_arg:
                plan.args = {**args, spec.idempotency_arg: key}
            if not self._journal(plan, "pending"):
                # No record of the attempt, no attempt: a write we could not journal could
                # later be neither skipped nor reconciled.
                self._finish(plan, "ignored")
                plan.answer = _journal_down(tool)
        return plan

    def _authorized(self, plan: _Plan) -> bool:
        assert plan.spec.authorize is not None
        request = ActionRequest(
            task=self.task,
            tool=plan.spec.name,
            args=redact(plan.args),
            fingerprint=plan.fingerprint,
            idempotency_key=plan.key,
            risk=plan.spec.risk,
        )
        try:
            return plan.spec.authorize(request) is True
        except Exception:  # noqa: BLE001 - a failing authority check denies
            return False

    # -- execute, verify, record -------------------------------------------------------------

    def _succeeded(self, plan: _Plan, result: Any) -> Any:
        spec = plan.spec
        if spec.risk in _WRITES:
            ok = False
            try:
                ok = bool(spec.verify(result)) if spec.verify is not None else result is not None
            except Exception:  # noqa: BLE001 - a verifier that crashes proves nothing
                ok = False
            if not ok:
                return self._unknown(
                    plan, "verification failed: the result does not prove the write happened"
                )
        self._finish(plan, "success", evidence=_digest(result))
        if plan.key is not None:
            # The write happened; if the journal is down now, its idempotency key still
            # protects a retry at the provider.
            self._journal(plan, "confirmed", result=result)
        return result

    def _failed(self, plan: _Plan, exc: Exception) -> Any:
        spec = plan.spec
        if isinstance(exc, CircuitOpen):
            self._finish(plan, "ignored")
            self._forget(plan)
            return self._dependency_down(
                plan, exc.result_for(spec.name), exc.retry_after, exc.reason
            )
        verdict = self._classify(spec, exc)
        maybe_committed = verdict.detail.startswith(_MAYBE_COMMITTED) or isinstance(exc, ValueError)
        if spec.risk in _WRITES and maybe_committed:
            return self._unknown(plan, f"{type(exc).__name__}: the write may have committed")
        self._finish(plan, "failure" if verdict.kind == "failure" else "ignored")
        self._forget(plan)
        if spec.breaker is None:
            return {
                "ok": False,
                "tool": spec.name,
                "error": f"{type(exc).__name__}: {exc}"[:500],
                "retryable": verdict.kind == "failure",
            }
        result = spec.breaker.failure_result(spec.name, exc)
        if result.get("tool_unavailable"):
            # This failure opened the dependency's breaker.
            return self._dependency_down(plan, result, result["retry_after_seconds"], "opened")
        return result

    def _dependency_down(
        self, plan: _Plan, result: dict[str, Any], retry_after: int, reason: str
    ) -> dict[str, Any]:
        """A dependency is out: the model hears so; a required one also stops the run."""
        if not plan.spec.required:
            return result
        stop = Stop(
            "dependency-open",
            f"required tool {plan.spec.name!r} is unavailable ({reason}); "
            f"retry after {retry_after} s",
            self.clock(),
            plan.spec.risk,
            plan.fingerprint,
        )
        with self._lock:
            self._run = budgets.stop(self._run, stop)
        return {**result, **self._stopped_result(stop)}

    def _unknown(self, plan: _Plan, why: str) -> dict[str, Any]:
        """An unknown write outcome: never replay, open the run's write breaker, reconcile."""
        self._finish(plan, "unknown")
        if self._run.uncertain > self.budget.max_uncertain_side_effects:
            self._write_stop = self._write_stop or Stop(
                "uncertain-side-effect",
                f"the outcome of {plan.spec.name} ({plan.key}) is unknown: {why}",
                self.clock(),
                plan.spec.risk,
                plan.fingerprint,
            )
        self._journal(plan, "unknown")
        return self._reconcile(plan, reason=why)

    def _reconcile(self, plan: _Plan, *, reason: str) -> dict[str, Any]:
        spec = plan.spec
        found: Any = None
        checked = False
        if spec.reconcile is not None and plan.key is not None:
            try:
                found = spec.reconcile(plan.key, plan.args)
                checked = True
            except Exception:  # noqa: BLE001 - an unreachable status check proves nothing
                checked = False
        if checked and found:
            self._journal(plan, "confirmed", result=found)
            state = "the status check found the write: it DID happen"
        elif checked:
            self._journal(plan, "reconciled-absent")
            state = "the status check did not find the write"
        else:
            state = "the status check could not be made"
        return {
            "ok": False,
            "tool": spec.name,
            "outcome_unknown": True,
            "idempotency_key": plan.key,
            "reconciled": found if checked and found else None,
            "instruction": f'The outcome of "{spec.name}" is uncertain ({reason}); {state}. '
            "Do not repeat this action or any other write in this run. Report what is "
            "confirmed and that an operator will reconcile the rest.",
        }

    def _classify(self, spec: GuardedTool, exc: Exception) -> Verdict:
        if isinstance(exc, TimeoutError):
            return Verdict("failure", "timeout")
        if spec.breaker is not None:
            return spec.breaker.classify(exc)
        from toolbreaker.runtime._classify import classify_exception

        return classify_exception(exc)

    def _finish(
        self,
        plan: _Plan,
        outcome: Literal["success", "failure", "unknown", "ignored"],
        *,
        evidence: str | None = None,
    ) -> None:
        if plan.action is None:
            return
        with self._lock:
            self._run = budgets.finish(
                self._run, plan.action, outcome, self.clock(), evidence=evidence
            )

    def _forget(self, plan: _Plan) -> None:
        """A write that certainly did not happen leaves no pending entry behind."""
        if plan.key is not None:
            self._journal(plan, "failed")

    def _journal(self, plan: _Plan, status: str, *, result: Any = None) -> bool:
        """Journal the write's status; ``False`` when the store is unavailable."""
        try:
            self.journal.journal_put(
                self.task, plan.journal_key, self._entry(plan, status, result=result)
            )
        except StoreUnavailable:
            return False
        return True

    def _entry(self, plan: _Plan, status: str, *, result: Any = None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "tool": plan.spec.name,
            "risk": plan.spec.risk,
            "fingerprint": plan.fingerprint,
            "idempotency_key": plan.key,
            "status": status,
            "at": self.clock(),
        }
        if result is not None:
            if plan.spec.external_id is not None:
                try:
                    entry["external_id"] = plan.spec.external_id(result)
                except Exception:  # noqa: BLE001 - an id we cannot read is just absent
                    entry["external_id"] = None
            encoded = json.dumps(result, default=str)
            if len(encoded) <= _MAX_JOURNALED_RESULT:
                entry["result"] = json.loads(encoded)
        return entry

    def _stopped_result(self, stop: Stop, *, writes_only: bool = False) -> dict[str, Any]:
        what = "Writes are blocked" if writes_only else "This run was stopped by a guard"
        return {
            "ok": False,
            "run_stopped": not writes_only,
            "writes_blocked": True,
            "condition": stop.condition,
            "detail": stop.detail,
            "instruction": f"{what}: {stop.detail}. Do not call tools that change anything "
            "again in this run. You may summarise what was done, call read-only status checks "
            "and draft a recovery plan. Do not invent results.",
        }

    def _next_safe_action(self, stop: Stop | None, uncertain: tuple[Mapping[str, Any], ...]) -> str:
        if stop is None:
            return "continue the run"
        condition = stop.condition
        if condition == "uncertain-side-effect" or uncertain:
            keys = ", ".join(str(u.get("idempotency_key")) for u in uncertain) or "the last write"
            return (
                f"reconcile {keys} with a read-only status check before any new write; "
                f"then resume task {self.task!r}: confirmed steps are skipped"
            )
        if condition == "dependency-open":
            return (
                f"wait for the dependency to recover ({stop.detail}), then resume task "
                f"{self.task!r}: the confirmed steps will not be repeated"
            )
        if condition in ("repeated-action", "loop"):
            return (
                "stop calling tools; summarise what is known and ask the user or an "
                "operator how to proceed (the plan is looping)"
            )
        if condition == "operator":
            return "wait for the operator's decision"
        return f"summarise progress; an operator may raise the budget and resume task {self.task!r}"


@dataclasses.dataclass(slots=True)
class _Plan:
    spec: GuardedTool
    args: dict[str, Any]
    fingerprint: str
    key: str | None
    journal_key: str
    action: Action | None = None
    answer: Any = None
    permit: Permit | None = None


class GuardStep:
    """One tool call in flight through :meth:`RunGuard.begin`; settle it exactly once.

    Attributes:
        tool: the tool name.
        args: the arguments to run the tool with (with the idempotency key, for writes).
        idempotency_key: the write's idempotency key, if it is a write.
        fingerprint: the action's semantic fingerprint.
        answer: when not ``None``, the tool must not run; give this to the model.
    """

    __slots__ = ("_guard", "_plan", "_settled")

    def __init__(self, guard: RunGuard, plan: _Plan) -> None:
        self._guard = guard
        self._plan = plan
        self._settled = plan.answer is not None

    @property
    def tool(self) -> str:
        """The tool name."""
        return self._plan.spec.name

    @property
    def args(self) -> dict[str, Any]:
        """The arguments to run the tool with."""
        return dict(self._plan.args)

    @property
    def idempotency_key(self) -> str | None:
        """The write's idempotency key."""
        return self._plan.key

    @property
    def fingerprint(self) -> str:
        """The action's semantic fingerprint."""
        return self._plan.fingerprint

    @property
    def answer(self) -> Any:
        """The answer to give instead of running the tool, or ``None``."""
        return self._plan.answer

    def succeeded(self, result: Any) -> Any:
        """Record a result; returns what the model should see.

        That is the result itself, or an outcome-unknown answer when a write's
        verification fails.
        """
        self._settle()
        permit = self._plan.permit
        if permit is not None:
            self._plan.spec.breaker.record_result(permit, result)  # type: ignore[union-attr]
        return self._guard._succeeded(self._plan, result)

    def failed(self, exc: BaseException) -> Any:
        """Record a failure; returns the result dict the model should see."""
        self._settle()
        if self._plan.permit is not None:
            self._plan.permit.record(exc)
        if not isinstance(exc, Exception):
            raise exc
        return self._guard._failed(self._plan, exc)

    def _settle(self) -> None:
        if self._settled:
            raise PermitError(f"guard step for {self.tool!r} settled twice or not runnable")
        self._settled = True


def _not_callable(**_kwargs: Any) -> Any:
    raise PolicyError("this tool is run by its framework, not by RunGuard.call()")


def _journal_down(tool: str) -> dict[str, Any]:
    return {
        "ok": False,
        "tool": tool,
        "reason": "store-unavailable",
        "instruction": f'"{tool}" was not called: its run journal cannot be reached, so the '
        "write could not be made safely (this is not a provider failure). Do not retry it "
        "now; say that the action is pending.",
    }


def _step(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: entry.get(k)
        for k in ("tool", "idempotency_key", "external_id", "status", "fingerprint", "at")
        if entry.get(k) is not None
    }


def _digest(result: Any) -> str:
    try:
        text = json.dumps(result, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(result)
    return hashlib.sha256(text.encode()).hexdigest()
