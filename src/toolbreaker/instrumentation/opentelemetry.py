"""OpenTelemetry: tool-call spans by the GenAI conventions, transitions as span events, a metric.

Usage::

    from toolbreaker.instrumentation.opentelemetry import instrument

    instrument(registry)        # every breaker it holds, now and later
    instrument(guard)           # a run guard: every tool call of the run, and its breakers

A registry is followed: the breakers it makes after ``instrument`` (every adapter's, on a
tool's first call; a tenant's scoped breaker) are traced from their first call. A run
guard (its tools' breakers) and breakers made outside a registry can be instrumented too.

What is emitted:

- **one span per tool call** a breaker (:meth:`~toolbreaker.Breaker.begin`) or a run guard
  (:meth:`~toolbreaker.RunGuard.begin`, :meth:`~toolbreaker.RunGuard.call`) decides, so
  every adapter's calls, by the OpenTelemetry GenAI semantic conventions for tool
  execution: name ``execute_tool {gen_ai.tool.name}``, kind ``INTERNAL``,
  ``gen_ai.operation.name`` ``execute_tool``, ``gen_ai.tool.name``, and, when the
  adapter knows them (every adapter does), ``gen_ai.tool.call.id``, ``gen_ai.tool.type``
  (``function``, ``extension`` or ``datastore``) and ``gen_ai.tool.description``. A call
  that ended in an error has status ``ERROR`` and ``error.type``:

  - the tool ran and failed: the exception's qualified type name (``TimeoutError``,
    ``urllib.error.HTTPError``); ``tool_error`` for a failure the tool reported as its
    result (:class:`~toolbreaker.errors.ToolReportedError`, a result the breaker's
    ``result_is_failure`` counts as a failure); ``toolbreaker.unverified`` for a write
    whose result does not prove it happened (its outcome is unknown);
    ``toolbreaker.cancelled`` for a call its model turn cancelled by policy (a required
    dependency opened while it ran);
  - the call was rejected locally and the tool never ran (an open breaker, a spent retry
    budget, a stopped run ...): ``toolbreaker.rejected``, with the reason in
    ``toolbreaker.reason``.

  Beside them, toolbreaker's own: ``toolbreaker.outcome`` (``success``, ``failure``,
  ``unknown``, ``rejected``, ``cancelled``, ``answered`` for an answer that stands for the
  result, a confirmed write's journaled one say), ``toolbreaker.reason``,
  ``toolbreaker.dependency``, ``toolbreaker.operation``, ``toolbreaker.breaker.state`` (the
  phase after the call, as the breaker's last transition left it) and
  ``toolbreaker.policy_version``. Nothing the call carried (arguments, results, exception
  messages) is recorded: they may hold secrets. Names are masked: a breaker's as it was
  built (:attr:`toolbreaker.Breaker.shown`, so a breaker named after a URL with a
  password reads ``https://ops:[REDACTED]@crm.internal`` in spans, events and metric
  labels alike), the tool's as the span is.
- every transition of an instrumented breaker as a ``toolbreaker.transition`` event on
  the span current when it happens: the tool-call span while the breaker works on the
  call, else the caller's;
- the counter ``toolbreaker.transitions`` with the dependency, operation, reason and the
  phases it moved between.

The tool-call span is current while toolbreaker works on the call, and while the tool runs
when toolbreaker runs it (:meth:`RunGuard.call`, :meth:`RunGuard.run_step`, which the
LangChain and Pydantic AI adapters use): spans the tool makes (an HTTP client's) are its
children there. Attaching a listener routes every request of that breaker through the
core (see :meth:`toolbreaker.Breaker.add_listener`): instrument breakers whose calls you
want traced, and use the Prometheus collector for plain counters.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Final

from toolbreaker import Breaker, Transition
from toolbreaker._extras import require
from toolbreaker.core import changed_phase
from toolbreaker.errors import ToolReportedError
from toolbreaker.instrumentation._kit import StepStart, Target, redact_text
from toolbreaker.runtime import Attachment, Step

__all__ = [
    "instrument",
]

#: ``error.type`` of a call rejected locally: the tool never ran.
REJECTED: Final = "toolbreaker.rejected"
#: ``error.type`` of a failure the tool reported as its result.
_TOOL_ERROR: Final = "tool_error"
#: A step that settled without an exception but did not succeed (``Step.failure``): its
#: ``toolbreaker.outcome`` and ``error.type``.
_FAILURES: Final = {
    "result": ("failure", _TOOL_ERROR),
    "unverified": ("unknown", "toolbreaker.unverified"),
    "cancelled-by-policy": ("cancelled", "toolbreaker.cancelled"),
}

# The tool-call span toolbreaker is working on in this context (transitions land on it).
_WORKING: ContextVar[_ToolSpan | None] = ContextVar("toolbreaker_tool_span", default=None)


def instrument(
    breakers: Target,
    *more: Target,
    meter_provider: Any = None,
    tracer_provider: Any = None,
    state_changes_only: bool = False,
    spans: bool = True,
) -> Callable[[], None]:
    """Trace every tool call and count the transitions of every breaker the targets hold.

    Returns a function that undoes it (from the breakers and run guards there were, and
    stops following the targets).

    Args:
        breakers: a registry (every breaker it holds, now and later), a run guard (every
            call of the run, its tools' breakers now and later), a breaker or breakers.
        more: more targets of the same kinds (one breaker reached twice is traced once;
            a run guard's call through an instrumented breaker makes one span).
        meter_provider: an OpenTelemetry ``MeterProvider``; the global one by default.
        tracer_provider: an OpenTelemetry ``TracerProvider``; the global one by default.
        state_changes_only: record only transitions that change the phase (events and
            the counter; a tool-call span is made either way).
        spans: make a span per tool call (``False``: transition events and the counter).

    Raises:
        PolicyError: a target is none of these.
    """
    trace = require("opentelemetry.trace", "opentelemetry")
    metrics = require("opentelemetry.metrics", "opentelemetry")
    context = require("opentelemetry.context", "opentelemetry")
    meter = (
        meter_provider.get_meter("toolbreaker")
        if meter_provider is not None
        else metrics.get_meter("toolbreaker")
    )
    tracer = (
        tracer_provider.get_tracer("toolbreaker")
        if tracer_provider is not None
        else trace.get_tracer("toolbreaker")
    )
    counter = meter.create_counter(
        "toolbreaker.transitions", unit="1", description="Transitions of toolbreaker breakers."
    )

    def listener(record: Transition, breaker: Breaker) -> None:
        working = _WORKING.get()
        if working is not None:
            working.heard(record, breaker)
        if state_changes_only and not changed_phase(record):
            return
        shown = breaker.shown  # the names masked where the breaker was built
        attributes = {
            "toolbreaker.dependency": shown.dependency,
            "toolbreaker.operation": shown.operation,
            "toolbreaker.tool": shown.tool,
            "toolbreaker.reason": record.reason,
            "toolbreaker.from": record.from_phase,
            "toolbreaker.to": record.to_phase,
        }
        counter.add(1, attributes)
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(
                "toolbreaker.transition",
                {
                    **attributes,
                    "toolbreaker.attempted": record.attempted,
                    "toolbreaker.rejected": record.rejected,
                    "toolbreaker.generation": record.generation,
                    "toolbreaker.policy_version": record.policy_version or breaker.policy.version,
                },
            )

    def observer(start: StepStart) -> _ToolSpan:
        tool = redact_text(start.tool)  # a tool's name, like a breaker's, may carry a secret
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
        }
        if start.call_id:
            attributes["gen_ai.tool.call.id"] = start.call_id
        if start.tool_type is not None:
            attributes["gen_ai.tool.type"] = start.tool_type
        if start.description:
            attributes["gen_ai.tool.description"] = redact_text(start.description)
        breaker = start.breaker
        if isinstance(breaker, Breaker):
            shown = breaker.shown  # the names masked where the breaker was built
            attributes["toolbreaker.dependency"] = shown.dependency
            attributes["toolbreaker.operation"] = shown.operation
            attributes["toolbreaker.policy_version"] = breaker.policy.version
        span = tracer.start_span(
            f"execute_tool {tool}", kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        return _ToolSpan(span, breaker if isinstance(breaker, Breaker) else None, trace, context)

    return Attachment(transition=listener, step=observer if spans else None).attach(breakers, *more)


class _ToolSpan:
    """One tool call's span, from the call's start to its end (a step watch)."""

    __slots__ = ("breaker", "context", "last", "span", "trace")

    def __init__(self, span: Any, breaker: Breaker | None, trace: Any, context: Any) -> None:
        self.span = span
        self.breaker = breaker
        self.trace = trace
        self.context = context
        self.last: Transition | None = None

    def enter(self) -> object:
        ours = _WORKING.set(self)
        theirs = self.context.attach(self.trace.set_span_in_context(self.span))
        return ours, theirs

    def exit(self, token: object) -> None:
        ours: Token[_ToolSpan | None]
        theirs: object
        ours, theirs = token  # type: ignore[misc] # enter's own pair
        self.context.detach(theirs)
        _WORKING.reset(ours)

    def heard(self, record: Transition, breaker: Breaker) -> None:
        """A transition heard while toolbreaker worked on the call: kept if it is its own.

        Its own: its breaker's (a scoped row's breakers share the row's step observers).
        """
        own = self.breaker
        if own is None or breaker is own or breaker.step_observers is own.step_observers:
            self.last = record

    def end(self, step: Step | None, error: BaseException | None) -> None:
        span = self.span
        last = self.last
        attributes: dict[str, Any] = {}
        if last is not None:
            attributes["toolbreaker.breaker.state"] = last.to_phase
            attributes["toolbreaker.reason"] = last.reason
            if last.policy_version:
                attributes["toolbreaker.policy_version"] = last.policy_version
        if error is not None:
            kind = _TOOL_ERROR if isinstance(error, ToolReportedError) else _type_name(error)
            outcome = "failure" if isinstance(error, Exception) else "cancelled"
            attributes["toolbreaker.outcome"] = outcome
            attributes["error.type"] = kind
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, kind))
        elif step is not None and step.failure is not None:
            outcome, kind = _FAILURES.get(step.failure, ("failure", "_OTHER"))
            attributes["toolbreaker.outcome"] = outcome
            attributes["error.type"] = kind
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, kind))
        elif step is not None and (step.answer is not None or step.refused):
            if step.reason is not None:
                attributes["toolbreaker.reason"] = step.reason
            if step.refused:
                attributes["toolbreaker.outcome"] = "rejected"
                attributes["error.type"] = REJECTED
                why = f"rejected locally: {step.reason or 'refused'}"
                span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, why))
            else:
                attributes["toolbreaker.outcome"] = "answered"
        else:
            attributes["toolbreaker.outcome"] = "success"
        span.set_attributes(attributes)
        span.end()


def _type_name(exc: BaseException) -> str:
    """The exception's qualified type name (a builtin's without its module)."""
    kind = type(exc)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
