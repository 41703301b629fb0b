"""What the model reads: every structured, LLM-readable tool result is built here.

A local rejection is never worded as a remote failure: the model is told which tool is
out of service, for how many whole seconds, that retrying is pointless and why, which
fallback to use, and not to invent the data. The shapes, one builder each:

- :func:`unavailable_result`: the dependency's breaker rejected the call (or this failure
  opened it), the store cannot be read, the tool is saturated, or its earlier calls hang
  past their deadline and hold every worker this call could use; or the tool is unavailable
  for the rest of the run (``rate-limited`` beyond ``max_retry_after_ms``,
  ``quota-exhausted``, ``retry-budget`` spent), with no wait to count down;
  :func:`server_unavailable_result` adds the server that serves the tool, when it is the
  server's breaker (every tool of one server) that is open;
  :func:`deployments_unavailable_result` gathers the results of every deployment of one
  model call (LiteLLM's router) when all of them were rejected;
- :func:`error_result`: a failure while closed, retryable or not;
- :func:`denied_result`: the authority check refused the call;
- :func:`unknown_result`: a write's outcome is unknown (never replayed; reconcile);
- :func:`stopped_result`: the run guard stopped the run, or blocks its writes;
- :func:`journal_down_result`: the run journal cannot be reached, so no write is made;
- the degradation matrix (:mod:`toolbreaker.core._degrade`), one builder per mode:
  :func:`omitted_result`, :func:`stale_result`, :func:`degraded_result`,
  :func:`queued_result`, :func:`handoff_result` and :func:`dependency_stop_result`. Each
  carries ``"degradation": MODE`` and a ``user_message`` to show a person.
- :func:`siblings_result`: parallel sibling calls as a bounded partial outcome: what
  came in, and which branches degraded, failed or were cancelled by policy, and why;
- :func:`cancelled_result`: one call of a model turn, cancelled by policy because a
  required dependency it needs opened while it ran (a write's outcome is then unknown);
- :func:`deferred_result`: the model turn already started ``max_calls_per_turn`` calls:
  this one was not made (nor queued); the model may issue it again next turn;
- :func:`over_budget_result`: the run's budget cannot cover the call's reserved cost: it
  was not made, and the model reads how much is left;
- :func:`tool_stopped_result`: the tool failed too often with one error class in this
  run, whatever its arguments: it is not called again in the run.

Every text that may carry data from outside (exception messages, stop details) is masked
with :func:`~toolbreaker.core._run.redact.redact_text` here, where it is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._run.redact import redact, redact_text
from toolbreaker.errors import PolicyError, whole_seconds

if TYPE_CHECKING:
    from toolbreaker.core._run.budget import Stop

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "SYSTEM_PROMPT_LINE",
    "cancelled_result",
    "deferred_result",
    "degraded_result",
    "denied_result",
    "dependency_stop_result",
    "deployments_unavailable_result",
    "error_result",
    "handoff_result",
    "hidden_tools_line",
    "journal_down_result",
    "omitted_result",
    "over_budget_result",
    "queued_result",
    "retry_after_seconds",
    "server_unavailable_result",
    "siblings_result",
    "stale_result",
    "stopped_result",
    "system_prompt_line",
    "tool_stopped_result",
    "unavailable_result",
    "unknown_result",
    "validate_template",
]

#: Model-facing reason per local rejection.
_REASONS: Final = {
    "cooldown": "open",
    "opened": "open",
    "probe-limit": "recovering",
    "isolated": "isolated",
    "forced-open": "isolated",
    "store-unavailable": "store-unavailable",
    "rate-limited": "rate-limited",
    "quota-exhausted": "quota-exhausted",
    "retry-budget": "retry-budget",
    "saturated": "saturated",
    "hung": "hung",
}
#: Reasons that hold for the rest of the run: no wait the model could count down.
_FOR_THE_RUN: Final = frozenset({"isolated", "rate-limited", "quota-exhausted", "retry-budget"})

_NO_REPEAT: Final = (
    "Do not call it again for {seconds} seconds: every call will be rejected without "
    "reaching the provider."
)

#: Instruction templates per model-facing reason. Placeholders: ``{tool}``, ``{seconds}``,
#: ``{fallback_sentence}``.
DEFAULT_INSTRUCTIONS: Final = {
    "open": 'The tool "{tool}" is out of service after repeated provider failures. '
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
    "recovering": 'The tool "{tool}" is being tested after an outage and has no free slot. '
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
    "isolated": 'The tool "{tool}" was taken out of service by an operator. '
    "Do not call it again in this run. {fallback_sentence} Do not estimate or invent the data.",
    "store-unavailable": 'The tool "{tool}" cannot be checked for health right now, so it '
    "is not being called (this is not a provider failure). "
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
    "rate-limited": 'The tool "{tool}" is rate limited for longer than this run can wait. '
    "Do not call it again in this run. {fallback_sentence} Do not estimate or invent the data.",
    "quota-exhausted": 'The tool "{tool}" has used up its provider quota; waiting will not '
    "help. Do not call it again in this run. {fallback_sentence} Do not estimate or invent "
    "the data.",
    "retry-budget": 'The tool "{tool}" keeps failing and its retry budget is spent: '
    "retrying (by anyone, you included) only adds load. Do not call it again in this run. "
    "{fallback_sentence} Do not estimate or invent the data.",
    # Not a provider failure either: every worker (or bulkhead slot) is busy with earlier
    # calls, so this one was refused at once instead of waiting behind them past its deadline.
    "saturated": 'The tool "{tool}" is saturated: as many calls as it may run at once are '
    "in progress, so this call was not made (this is not a provider failure). Resubmit it after "
    "{seconds} seconds. {fallback_sentence} Do not estimate or invent the data.",
    # The provider stopped answering: earlier calls still run long past their deadline
    # and hold every worker this call could have used. Nothing was sent.
    "hung": 'The tool "{tool}" is not responding: earlier calls to it are still running past '
    "their deadline, so this call was not made. "
    + _NO_REPEAT
    + " {fallback_sentence} Do not estimate or invent the data.",
}

_FIELDS: Final = frozenset({"tool", "seconds", "fallback_sentence", "fallback"})

#: The one line to add to a system prompt so the model knows the protocol.
SYSTEM_PROMPT_LINE: Final = (
    'If a tool result contains "tool_unavailable": true, that tool is out of service: do not '
    'call it again before "retry_after_seconds" have passed, follow its "instruction", use '
    "the fallback tool it names if there is one, and tell the user which data is unavailable "
    "instead of estimating or inventing it."
)


def system_prompt_line() -> str:
    """The system-prompt sentence that explains tool-unavailable results to the model."""
    return SYSTEM_PROMPT_LINE


def hidden_tools_line(hidden: Mapping[str, int | None]) -> str:
    """The system-prompt line naming the tools hidden from the model, and until when.

    ``hidden`` maps a tool name to the milliseconds until it may be called again
    (``None``: until an operator restores it). Empty when nothing is hidden.
    """
    if not hidden:
        return ""
    parts = []
    for tool in sorted(hidden):
        ms = hidden[tool]
        when = (
            "until an operator restores it"
            if ms is None
            else f"for about {whole_seconds(ms)} more seconds"
        )
        parts.append(f'"{tool}" ({when})')
    return (
        "These tools are out of service and hidden from you: "
        + ", ".join(parts)
        + ". Do not try to call them; tell the user which data is unavailable instead of "
        "estimating or inventing it."
    )


def retry_after_seconds(ms: int | None) -> int:
    """Whole seconds, rounded up, and at least 1 (the one formula; see ``whole_seconds``)."""
    return whole_seconds(ms)


def validate_template(template: str, *, where: str = "instruction") -> str:
    """Check an instruction template: known placeholders only, no format spec or conversion.

    Raises:
        PolicyError: naming ``where``.
    """
    import string  # a template checked: string loads with the first

    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise PolicyError(f"{where}: malformed template ({exc})", field=where) from None
    names = set()
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if spec or conversion:
            raise PolicyError(
                f"{where}: no format spec or conversion allowed in {{{name}}}", field=where
            )
        names.add(name)
    unknown = names - _FIELDS
    if unknown:
        raise PolicyError(
            f"{where}: unknown placeholder(s) {sorted(unknown)}; use {sorted(_FIELDS)}",
            field=where,
        )
    return template


def unavailable_result(
    *,
    tool: str,
    reason: str,
    retry_after_ms: int | None,
    fallback: str | None = None,
    fallback_note: str = "",
    templates: Mapping[str, str] | None = None,
    operator_reason: str | None = None,
) -> dict[str, Any]:
    """The tool-unavailable result for a local rejection (or the failure that opened it).

    ``operator_reason`` (a row forced open, with its reason) is masked and shown to the
    model as ``operator_reason`` and in the instruction.
    """
    public = _REASONS.get(reason, "open")
    seconds = whole_seconds(retry_after_ms)
    if fallback:
        note = f" and {fallback_note.strip().rstrip('.')}" if fallback_note.strip() else ""
        fallback_sentence = f'Use "{fallback}" instead{note}.'
    else:
        fallback_sentence = "There is no substitute tool: tell the user this data is unavailable."
    template = (templates or {}).get(public) or DEFAULT_INSTRUCTIONS[public]
    instruction = template.format(
        tool=tool, seconds=seconds, fallback_sentence=fallback_sentence, fallback=fallback or ""
    )
    result: dict[str, Any] = {
        "ok": False,
        "tool_unavailable": True,
        "tool": tool,
        # An operator's isolation has no end the model could wait for: no number that
        # would contradict "do not call it again in this run".
        "retry_after_seconds": None if public in _FOR_THE_RUN else seconds,
        "reason": public,
        "instruction": " ".join(instruction.split()),
    }
    if public in _FOR_THE_RUN and public != "isolated":
        result["retryable"] = False
    if fallback:
        result["fallback"] = fallback
    if operator_reason:
        note = redact_text(" ".join(operator_reason.split()))
        result["operator_reason"] = note
        result["instruction"] += f" The operator's reason: {note.rstrip('.')}."
    return result


def server_unavailable_result(result: Mapping[str, Any], server: str) -> dict[str, Any]:
    """A tool-unavailable ``result`` of a tool whose *server* is out of service.

    The server's breaker (shared by every tool it serves) rejected the call, or this
    failure opened it: the result names the server (``"server"``) and tells the model
    that the server's other tools are out of service too, so it does not try them one
    by one. Any other result is returned unchanged (as a copy).
    """
    named = dict(result)
    if not named.get("tool_unavailable"):
        return named
    named["server"] = server
    named["instruction"] = (
        f'{named.get("instruction", "")} The tool\'s server "{server}" is out of service: '
        "so is every other tool it serves."
    ).strip()
    return named


def deployments_unavailable_result(
    model: str, results: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A model call that was sent nowhere: every deployment it may use is out of service.

    ``results`` are the deployments' own tool-unavailable results (each names its
    deployment as ``tool``, with its ``retry_after_seconds`` and ``reason``); they are
    kept under ``"deployments"``. ``retry_after_seconds`` is the soonest of them
    (``None`` when none will come back on its own).
    """
    waits = [r["retry_after_seconds"] for r in results if r.get("retry_after_seconds")]
    soonest = min(waits) if waits else None
    names = ", ".join(
        f'"{r.get("tool")}" (for {r["retry_after_seconds"]} s)'
        if r.get("retry_after_seconds")
        else f'"{r.get("tool")}"'
        for r in results
    )
    again = (
        f"Do not ask it again for {soonest} seconds: every request will be rejected without "
        "reaching a provider."
        if soonest is not None
        else "Do not ask it again in this run."
    )
    reasons = sorted({str(r.get("reason")) for r in results})
    return {
        "ok": False,
        "tool_unavailable": True,
        "tool": model,
        "retry_after_seconds": soonest,
        "reason": reasons[0] if len(reasons) == 1 else "unavailable",
        "deployments": [dict(r) for r in results],
        "instruction": f'Every deployment of the model "{model}" is out of service: {names}. '
        f"{again} Tell the user the answer is unavailable instead of estimating or inventing it.",
    }


def _exception_text(exc: BaseException) -> str:
    try:
        message = str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the answer
        message = type(exc).__name__
    # Masked before it is cut, so a cut can never expose the middle of a secret.
    return redact_text(f"{type(exc).__name__}: {message}")[:500]


def error_result(tool: str, exc: BaseException, *, retryable: bool) -> dict[str, Any]:
    """A failure the model may act on: a transient error (retryable) or a bad request.

    The exception text is masked (bearer tokens, API keys ...) and cut to 500 characters.
    """
    return {
        "ok": False,
        "tool": tool,
        "error": _exception_text(exc),
        "retryable": retryable,
    }


def denied_result(tool: str) -> dict[str, Any]:
    """The authority check refused an irreversible call; it never ran."""
    return {
        "ok": False,
        "tool": tool,
        "denied": True,
        "retryable": False,
        "instruction": f'The authority check refused "{tool}". Do not retry it; '
        "tell the user it needs approval.",
    }


def unknown_result(
    tool: str,
    idempotency_key: str | None,
    *,
    why: str,
    found: Any = None,
    checked: bool = False,
    writes_blocked: bool = True,
) -> dict[str, Any]:
    """A write whose outcome is unknown: never replayed; the reconcile check's finding.

    Args:
        tool: the write tool.
        idempotency_key: the write's key, for the operator and the status check.
        why: why the outcome is unknown (masked here).
        found: what the read-only status check found (a record when the write happened).
        checked: whether the status check could be made at all.
        writes_blocked: whether the run's other writes are refused now.
    """
    if checked and found:
        state = "the status check found the write: it DID happen, do not repeat it"
    elif checked:
        state = "the status check did not find the write (it may still appear)"
    else:
        state = "the status check could not be made"
    rest = (
        "Do not repeat this action or any other write in this run. Report what is "
        "confirmed and that an operator will reconcile the rest."
        if writes_blocked
        else "Do not repeat this action."
    )
    return {
        "ok": False,
        "tool": tool,
        "outcome_unknown": True,
        "retryable": False,
        "idempotency_key": idempotency_key,
        "reconciled": redact(found) if checked and found else None,
        "instruction": redact_text(
            f'The outcome of "{tool}" is uncertain ({why}); {state}. {rest}'
        ),
    }


def stopped_result(
    stop: Stop, *, writes_blocked: bool, writes_only: bool = False
) -> dict[str, Any]:
    """The run guard stopped the run (or, ``writes_only``, refuses its writes).

    Args:
        stop: why.
        writes_blocked: whether the run's writes are blocked (its write breaker: writes
            with an unknown outcome), said only when they are; a stop of a run whose
            writes were never blocked says ``run_stopped`` alone. ``writes_only``
            implies it.
        writes_only: the run goes on with reads; only its writes are refused.
    """
    what = "Writes are blocked" if writes_only else "This run was stopped by a guard"
    detail = redact_text(stop.detail)
    return {
        "ok": False,
        "run_stopped": not writes_only,
        "writes_blocked": writes_blocked or writes_only,
        "retryable": False,
        "condition": stop.condition,
        "detail": detail,
        "instruction": f"{what}: {detail}. Do not call tools that change anything "
        "again in this run. You may summarise what was done, call read-only status checks "
        "and draft a recovery plan. Do not invent results.",
    }


def journal_down_result(tool: str) -> dict[str, Any]:
    """A write not made because its journal cannot be reached (fail closed)."""
    return {
        "ok": False,
        "tool": tool,
        "reason": "store-unavailable",
        "retryable": False,
        "instruction": f'"{tool}" was not called: its run journal cannot be reached, so the '
        "write could not be made safely (this is not a provider failure). Do not retry it "
        "now; say that the action is pending.",
    }


# -- the degradation matrix ------------------------------------------------------------


def _missing(tool: str, args: Mapping[str, Any]) -> str:
    """Which data is missing, in words: the tool and its arguments (masked, bounded)."""
    if not args:
        return f'the data "{tool}" would have returned'
    import json  # a missing data's words: json loads with the first

    try:
        shown_args = json.dumps(redact(dict(args)), sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        shown_args = "(arguments not shown)"
    if len(shown_args) > 200:
        shown_args = shown_args[:197] + "..."
    return f'the data "{tool}" would have returned for {shown_args}'


def omitted_result(tool: str, args: Mapping[str, Any], *, reason: str) -> dict[str, Any]:
    """``omit``: go on without the data, and say which data is missing."""
    missing = _missing(tool, args)
    return {
        "ok": False,
        "tool_unavailable": True,
        "tool": tool,
        "reason": reason,
        "degradation": "omit",
        "retryable": False,
        "missing": missing,
        "instruction": f'The tool "{tool}" is out of service ({reason}). Go on without it: '
        f"in your answer, say that {missing} is missing. Do not call it again in this run, "
        "and do not estimate or invent the data.",
        "user_message": f"Some data is unavailable right now: {missing}. This answer was "
        "made without it.",
    }


def stale_result(
    tool: str, result: Any, *, label: str, as_of: str, age_seconds: int
) -> dict[str, Any]:
    """``stale``: the last good result, labelled with its time and age.

    Args:
        tool: the tool whose live answer is unavailable.
        result: the kept result (as it was kept: masked).
        label: ``"as of 14:02 UTC, 7 minutes old"``.
        as_of: the time the result was kept, ISO 8601 in UTC.
        age_seconds: its age in whole seconds.
    """
    return {
        "ok": True,
        "stale": True,
        "tool": tool,
        "degradation": "stale",
        "as_of": as_of,
        "age_seconds": age_seconds,
        "result": result,
        "instruction": f'The tool "{tool}" is out of service. This is its last good answer, '
        f"{label}: it is STALE. Say in your answer that this data is {label} and may have "
        "changed; do not present it as current.",
        "user_message": f"Showing the last known data from {tool}, {label}: the live "
        "source is unavailable right now.",
    }


def degraded_result(tool: str, fallback: str, result: Any, *, note: str = "") -> dict[str, Any]:
    """``degraded``: the answer of the row's local substitute tool, labelled as such."""
    extra = f" In your answer, {note.strip().rstrip('.')}." if note.strip() else ""
    return {
        "ok": True,
        "degraded": True,
        "tool": tool,
        "degradation": "degraded",
        "served_by": fallback,
        "result": result,
        "instruction": f'The tool "{tool}" is out of service; this answer comes from the '
        f'local substitute "{fallback}", which may be less complete or less current.{extra}',
        "user_message": f"{tool} is unavailable right now; this answer comes from a "
        "simpler local substitute.",
    }


def queued_result(
    tool: str, queue_id: str, idempotency_key: str, *, already: bool = False, maybe: bool = False
) -> dict[str, Any]:
    """``queue``: the work is saved and will be made later; it has NOT happened yet.

    ``maybe``: the store did not confirm the queued item (its answer was lost): the work
    may be queued or not, so ``queued`` is ``None`` and ``outcome_unknown`` is set. It is
    never handed to a person as well: a drain would make it too.
    """
    if maybe:
        return {
            "ok": False,
            "queued": None,
            "outcome_unknown": True,
            "done": False,
            "tool": tool,
            "degradation": "queue",
            "retryable": False,
            "queue_id": queue_id,
            "idempotency_key": idempotency_key,
            "instruction": redact_text(
                f'"{tool}" could not be made now (its service is out). The request may '
                f"already be queued as {queue_id}: the queue did not confirm it. If it is "
                "queued, it will be made once the service recovers. It has NOT happened "
                "yet: do not tell the user it is done, and do not call it again."
            ),
            "user_message": redact_text(
                f"Your request ({tool}) may be queued as {queue_id}; it has not been "
                "carried out yet, and an operator will check that it is."
            ),
        }
    when = "was already queued" if already else "is queued"
    return {
        "ok": False,
        "queued": True,
        "done": False,
        "tool": tool,
        "degradation": "queue",
        "retryable": False,
        "queue_id": queue_id,
        "idempotency_key": idempotency_key,
        "instruction": f'"{tool}" could not be made now (its service is out). The request '
        f"{when} as {queue_id} and will be made once the service recovers. It has NOT "
        "happened yet: do not tell the user it is done, and do not call it again.",
        "user_message": f"Your request ({tool}) is queued as {queue_id}; it has not been "
        "carried out yet and will be once the service is back.",
    }


def handoff_result(tool: str, reconciliation_id: str, packet: Mapping[str, Any]) -> dict[str, Any]:
    """``handoff``: a person takes the request over; the packet is what they get (masked)."""
    return {
        "ok": False,
        "handoff": True,
        "tool": tool,
        "degradation": "handoff",
        "retryable": False,
        "reconciliation_id": reconciliation_id,
        "packet": redact(dict(packet)),
        "instruction": f'The tool "{tool}" is out of service and this request was handed '
        f"to a person (reference {reconciliation_id}). Do not call it again in this run; "
        f"tell the user a person will follow up with reference {reconciliation_id}.",
        "user_message": f"A person will follow up on this request (reference {reconciliation_id}).",
    }


def dependency_stop_result(
    tool: str, reconciliation_id: str, packet: Mapping[str, Any]
) -> dict[str, Any]:
    """``stop``: the run stops because a required dependency is out; with its packet."""
    detail = redact_text(str(packet.get("detail", f"required tool {tool!r} is unavailable")))
    counters = packet.get("counters")
    blocked = isinstance(counters, Mapping) and counters.get("writes_blocked") is not None
    return {
        "ok": False,
        "run_stopped": True,
        "writes_blocked": blocked,
        "tool": tool,
        "degradation": "stop",
        "retryable": False,
        "condition": "dependency-open",
        "detail": detail,
        "reconciliation_id": reconciliation_id,
        "packet": redact(dict(packet)),
        "instruction": f"This run was stopped: {detail}. Do not call tools that change "
        "anything again in this run. You may summarise what was done and tell the user "
        f"that an operator will resume it (reference {reconciliation_id}). Do not invent "
        "results.",
        "user_message": f"This task was stopped because a service it needs is down; an "
        f"operator will pick it up (reference {reconciliation_id}).",
    }


def deferred_result(tool: str, *, limit: int) -> dict[str, Any]:
    """A call over the per-turn limit: not made, not queued; resubmit next turn."""
    calls = "1 tool call" if limit == 1 else f"{limit} tool calls"
    return {
        "ok": False,
        "tool": tool,
        "deferred": True,
        "reason": "turn-limit",
        "resubmit": "next-turn",
        "retryable": True,
        "max_calls_per_turn": limit,
        "instruction": f'"{tool}" was not called: this turn already started {calls}, the '
        "most one turn may start. It was not queued either. Read the results you have; if "
        "you still need it, call it again in your next turn (this is not a provider failure).",
    }


def over_budget_result(tool: str | None, stop: Stop, *, left: str) -> dict[str, Any]:
    """A call (or, ``tool=None``, a model step) whose reserved cost the budget cannot cover.

    Not made; the run is not stopped (a cheaper call may fit). ``left``: what the binding
    cost limit leaves, exact text.
    """
    what = f'another call of "{tool}"' if tool is not None else "another model step"
    return {
        "ok": False,
        "tool": tool,
        "over_budget": True,
        "run_stopped": False,
        "retryable": False,
        "condition": stop.condition,
        "budget_left": left,
        "detail": redact_text(stop.detail),
        "instruction": f"The budget for this run cannot cover {what}; {left} left. It was "
        "not called (this is not a provider failure). Answer with the results you have, or "
        "use a cheaper tool. Do not invent results.",
    }


def tool_stopped_result(tool: str, stop: Stop) -> dict[str, Any]:
    """A tool the run no longer calls: it kept failing with one error class."""
    return {
        "ok": False,
        "tool": tool,
        "tool_stopped": True,
        "run_stopped": False,
        "retryable": False,
        "condition": stop.condition,
        "detail": redact_text(stop.detail),
        "instruction": f'"{tool}" was not called: it kept failing with the same kind of '
        "error in this run, whatever its arguments, so it is not called again in this run. "
        "Do not call it again or rewrite its arguments to try once more; continue with other "
        "tools, or tell the user what failed. Do not invent results.",
    }


def cancelled_result(
    tool: str, dependency: str, *, unknown: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A call cancelled by policy: a required dependency it needs opened while it ran.

    Args:
        tool: the cancelled tool.
        dependency: the required dependency (breaker key) that opened.
        unknown: for a write that may have started, its :func:`unknown_result`: the
            outcome is unknown, never replayed, reconciled.
    """
    why = redact_text(f"required dependency {dependency!r} opened")
    text = (
        f'"{tool}" was cancelled by policy: {why} while it ran, so its result is '
        "missing. Do not call it again in this run; do not estimate or invent its data."
    )
    if unknown is not None:
        return {
            **unknown,
            "cancelled": True,
            "reason": "required-dependency-opened",
            "dependency": redact_text(dependency),
            "instruction": f"{text} {unknown.get('instruction', '')}".strip(),
        }
    return {
        "ok": False,
        "tool": tool,
        "cancelled": True,
        "reason": "required-dependency-opened",
        "dependency": redact_text(dependency),
        "retryable": False,
        "instruction": text,
    }


def siblings_result(branches: list[tuple[str, str, str | None, Any]]) -> dict[str, Any]:
    """Parallel sibling calls as one bounded partial outcome the model can act on.

    ``branches`` are ``(name, status, reason, result)``; status is ``completed``,
    ``degraded``, ``failed`` or ``cancelled``. Completed results are given as they are;
    for the others the reason is masked here.
    """
    results = {name: result for name, status, _, result in branches if status == "completed"}
    missing = [
        {"branch": name, "status": status, "reason": redact_text(str(reason or status))}
        for name, status, reason, _ in branches
        if status != "completed"
    ]
    if not missing:
        return {"ok": True, "partial": False, "results": results}
    names = ", ".join(f'"{m["branch"]}" ({m["status"]}: {m["reason"]})' for m in missing)
    return {
        "ok": False,
        "partial": True,
        "results": results,
        "missing": missing,
        "instruction": f"Only part of the parallel calls finished. Missing: {names}. "
        "Answer from the results you have and tell the user which data is unavailable "
        "and why; do not estimate or invent the missing data.",
    }
