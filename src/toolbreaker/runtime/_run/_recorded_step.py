"""One step of a recorded run: the line format ``toolbreaker check-run`` reads, validated.

A recorded run is JSON Lines, one step a line: a tool call, or a model step (a line
without ``tool``). This module is the one home of what a line may say and what it means;
:mod:`toolbreaker.runtime._run._recorded` replays the steps through a live guard.

A tool call::

    {"at": 0, "tool": "search", "args": {"q": "cable"}, "outcome": "success", "result": {...}}

- ``at``: milliseconds since the run started, never going backwards (a source without a
  clock records every step at 0);
- ``risk`` (``read``, the default, ``reversible_write`` or ``irreversible``), ``recovery``
  and ``business_key`` describe the tool: every step of one tool describes it the same;
- ``outcome``: ``success`` (the call returned ``result``), ``failure`` (the dependency
  failed and nothing was made), ``unknown`` (a write may have been made: a timeout), or
  ``ignored`` (the tool refused the call itself: its own argument check);
- ``error``: the class of a failure, in the classifier's words
  (:mod:`toolbreaker.runtime._breaker._classify`): ``timeout``, ``network:<CODE>``
  (``network:ECONNRESET``, ``network:ENOTFOUND``, ``network:ConnectError``),
  ``http-<status>``, ``validation`` or ``unknown-exception:<Name>``. It must agree with
  the outcome: ``failure`` is a failure of the dependency (a timeout, a network error, a
  5xx or 429), ``ignored`` is none (a 4xx, a validation error, the tool's own exception),
  and a write's ``failure`` or ``ignored`` certainly made nothing while its ``unknown``
  may have. Without it a ``failure`` is a refused connection
  (``network:ECONNREFUSED``), an ``unknown`` a timeout and an ``ignored`` a
  ``ValueError``, as before the field existed;
- ``result_error``: the call succeeded and its result says the work failed: ``exit-<N>``
  (a command that exited non-zero), ``http-<status>`` (a 4xx or 5xx the tool returned as
  data) or ``tool-error`` (an MCP ``isError`` result, a tool's ``Error: ...`` answer).
  That is never a failure of the dependency: a read returns its result as any other; a
  write whose result says it failed made nothing, and replays as the tool's own refusal
  (:class:`~toolbreaker.errors.ToolReportedError`, as the adapters settle an error
  answer), so it may be made again;
- ``changes_state``: this call changed (``true``) or did not change (``false``) the world
  the agent works on, whatever its tool's risk class: ``sed -i`` through a generic
  ``bash`` tool does, ``cat`` does not. Kept on the step for the guard's per-call risk;
  the replay does not read it yet;
- ``cost``: what the call spent (a decimal string), spent only when it ran.

A model step (a model turn, with or without tool calls after it)::

    {"at": 950, "model": "gpt-4o", "input_tokens": 1200, "output_tokens": 80, "cost": "0.004"}

Its ``cost`` counts toward ``max_cost``; ``input_tokens`` and ``output_tokens`` (which
need ``model``) are the turn's usage, counted as :meth:`~toolbreaker.RunGuard.add_usage`
counts a live model's. When the budget's ``prices`` price the model, the priced usage is
its cost and the recorded ``cost`` is not spent again.
"""

from __future__ import annotations

import builtins
import dataclasses
import errno
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, get_args

from toolbreaker.core._breaker.state import MAX_TIME_MS
from toolbreaker.core._files import iter_lines, loads_json, shown
from toolbreaker.core._run._values import as_amount, decimal_text
from toolbreaker.core._run.budget import OUTCOMES, WRITES, Outcome, RiskClass
from toolbreaker.errors import ToolReportedError, TraceError
from toolbreaker.runtime._breaker._classify import classify_exception
from toolbreaker.runtime._breaker._commit import may_have_committed

__all__ = [
    "ERROR_FORMS",
    "FIELDS",
    "RESULT_ERROR_FORMS",
    "HTTPStatusError",
    "NetworkError",
    "RecordedStep",
    "error_exception",
    "error_of_type",
    "outcome_for",
    "parse_step",
    "raised_for",
    "read_recorded_run",
]

#: The forms an ``error`` takes: the classes of the classifier a recorded tool reproduces.
ERROR_FORMS: Final = (
    "timeout",
    "network:<CODE>",
    "http-<status>",
    "validation",
    "unknown-exception:<Name>",
)
#: The forms a ``result_error`` takes.
RESULT_ERROR_FORMS: Final = ("exit-<N>", "http-<status>", "tool-error")

_RESULT_ERROR: Final = re.compile(r"exit--?[1-9][0-9]{0,9}|http-[45][0-9][0-9]|tool-error")
_HTTP: Final = re.compile(r"http-([1-5][0-9][0-9])")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_MODEL_FIELDS: Final = ("model", "input_tokens", "output_tokens")
_TOOL_FIELDS: Final = ("error", "result_error", "changes_state")


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedStep:
    """One step of a recorded run, validated (see the module for what each field means).

    Attributes:
        at: milliseconds since the run started (the guard's clock at this step).
        tool: the tool called; ``None`` for a model step.
        args: the call's arguments.
        risk: the call's risk class (one tool's calls may differ: a shell's).
        recovery: the tool is a read-only status check that may run after a stop.
        business_key: argument fields naming a write's business action.
        outcome: how the call ended when it ran.
        result: what it returned (``None`` when the step has none).
        cost: what it spent (a decimal string or an integer), if anything.
        error: the class of a failure (the classifier's), if the step names one.
        result_error: what failure the result of a successful call reports, if any.
        changes_state: the call changed the world (``None``: not recorded).
        model: a model step's model.
        input_tokens: a model step's input (prompt) tokens.
        output_tokens: a model step's output (completion) tokens.

    Raises:
        ValueError: a field out of its range, an ``error`` the classifier does not give
            or that contradicts the outcome, a model's usage on a tool call, a tool's
            outcome fields on a model step.
        TypeError: a field of the wrong type.
    """

    at: int
    tool: str | None = None
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    risk: RiskClass = "read"
    recovery: bool = False
    business_key: tuple[str, ...] | None = None
    outcome: Outcome = "success"
    result: Any = None
    cost: str | int | Decimal | None = None
    error: str | None = None
    result_error: str | None = None
    changes_state: bool | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.cost is not None:
            # Checked here: a cost the guard refuses inside the call would read as the
            # tool failing.
            try:
                as_amount(self.cost)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"cost {exc}") from None
        if self.tool is None:
            self._check_model_step()
        else:
            self._check_tool_step()

    @property
    def usage(self) -> bool:
        """The step reports a model's token usage."""
        return self.input_tokens is not None or self.output_tokens is not None

    def _check_model_step(self) -> None:
        for name in _TOOL_FIELDS:
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{name} belongs on a tool call; a line without tool is a model step"
                )
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 0 <= value <= MAX_TIME_MS):
                raise ValueError(f"{name} must be a non-negative integer, got {shown(value)}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ValueError(f"model must be a model's name, got {shown(self.model)}")
        if self.usage and self.model is None:
            raise ValueError("input_tokens and output_tokens need the model they were spent on")

    def _check_tool_step(self) -> None:
        for name in _MODEL_FIELDS:
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{name} belongs on a model step (a line without tool), not on a tool call"
                )
        if self.changes_state is not None and type(self.changes_state) is not bool:
            raise TypeError(f"changes_state must be true or false, got {shown(self.changes_state)}")
        if self.result_error is not None:
            if not isinstance(self.result_error, str) or not _RESULT_ERROR.fullmatch(
                self.result_error
            ):
                raise ValueError(
                    f"result_error must be one of {', '.join(RESULT_ERROR_FORMS)}, "
                    f"got {shown(self.result_error)}"
                )
            if self.outcome != "success":
                raise ValueError(
                    "result_error is what the result of a call that returned says: "
                    f"its outcome is success, not {self.outcome}"
                )
        if self.error is not None:
            _check_error(self.error, self.outcome, write=self.risk in WRITES)


def _check_error(error: object, outcome: str, *, write: bool) -> None:
    """``error`` is a class the classifier gives, and it agrees with ``outcome``."""
    if outcome == "success":
        raise ValueError("error names how a call failed; this one's outcome is success")
    if not isinstance(error, str):
        raise TypeError(f"error must be text, got {shown(error)}")
    exc = error_exception(error)
    verdict = classify_exception(exc)
    committed = may_have_committed(exc, verdict)
    if write and outcome in ("failure", "ignored") and committed:
        raise ValueError(f"a write that failed with {error} may have been made: it is unknown")
    if write and outcome == "unknown" and not committed:
        raise ValueError(
            f"a write that failed with {error} certainly was not made: "
            f"it is {'failure' if verdict.kind == 'failure' else 'ignored'}, not unknown"
        )
    if outcome == "failure" and verdict.kind != "failure":
        raise ValueError(
            f"error {error} is no failure of the dependency: its outcome is ignored, not failure"
        )
    if outcome == "ignored" and verdict.kind != "ignored":
        raise ValueError(
            f"error {error} is a failure of the dependency: its outcome is failure, not ignored"
        )
    if outcome == "unknown" and not write and verdict.kind != "failure":
        raise ValueError(
            f"error {error} is no failure of the dependency: a read that failed so is ignored"
        )


class HTTPStatusError(Exception):
    """A recorded HTTP error: its status, as an HTTP client's exception carries it."""

    def __init__(self, status: int) -> None:
        super().__init__(f"recorded HTTP {status}")
        self.status_code = status


class NetworkError(Exception):
    """A recorded network error by its code (``ECONNRESET``, ``ENOTFOUND``), no errno.

    The classifier reads the code wherever a client carries one as text; an ``OSError``
    made from the errno would not always do (``ETIMEDOUT`` makes a ``TimeoutError``).
    """

    def __init__(self, code: str) -> None:
        super().__init__(f"recorded {code}")
        self.code = code


#: A validation error as the classifier knows one (pydantic's, by class name and module).
_ValidationError: Final[type[ValueError]] = type(
    "ValidationError", (ValueError,), {"__module__": "pydantic_core"}
)


def error_exception(error: str) -> Exception:
    """An exception the classifier reads as ``error`` (one of :data:`ERROR_FORMS`).

    Raises:
        ValueError: ``error`` has none of those forms, or names an exception the
            classifier reads as another class (``unknown-exception:TimeoutError`` is a
            ``timeout``).
    """
    kind, _, name = error.partition(":")
    if error == "timeout":
        return TimeoutError("recorded timeout")
    if error == "validation":
        return _ValidationError("recorded validation error")
    if _HTTP.fullmatch(error):
        return HTTPStatusError(int(error[5:]))
    if kind == "network" and _NAME.fullmatch(name):
        if name == "ECONNREFUSED":  # what a recorded failure always raised
            return ConnectionRefusedError(errno.ECONNREFUSED, "recorded failure")
        number = getattr(errno, name, None) if name.startswith("E") else None
        if isinstance(number, int):
            raised = OSError(number, f"recorded {name}")  # the errno's subclass, as raised
            if classify_exception(raised).detail == error:
                return raised
        coded = NetworkError(name)  # a Node-style code, or an errno no OSError keeps
        if classify_exception(coded).detail == error:
            return coded
        # A client's connection error, by its class name (httpx's ConnectError).
        client: type[Exception] = type(name, (ConnectionError,), {"__module__": "recorded"})
        return client(f"recorded {name}")
    if kind == "unknown-exception" and _NAME.fullmatch(name):
        exc = _named_exception(name)
        detail = classify_exception(exc).detail
        if detail != error:
            raise ValueError(f"error {error} is not what the classifier says of {name}: {detail}")
        return exc
    raise ValueError(f"error must be one of {', '.join(ERROR_FORMS)}, got {shown(error)}")


def outcome_for(error: str, *, write: bool) -> Outcome:
    """The outcome of a call that failed with ``error``, as a live guard settles it.

    A write that may have been made is ``unknown``; otherwise a failure of the dependency
    is ``failure`` and anything else ``ignored``.

    Raises:
        ValueError: ``error`` is none of :data:`ERROR_FORMS`.
    """
    exc = error_exception(error)
    verdict = classify_exception(exc)
    if write and may_have_committed(exc, verdict):
        return "unknown"
    return "failure" if verdict.kind == "failure" else "ignored"


def error_of_type(name: str) -> str:
    """The class the classifier gives an exception of type ``name``, by name alone.

    ``name`` is a type name as traces record it (OpenTelemetry's ``error.type``): a
    builtin (``TimeoutError``), a qualified name (``httpx.ConnectTimeout``,
    ``pydantic_core._pydantic_core.ValidationError``) or an HTTP status (``"503"``).
    Third-party classes are known by their name and top-level module, as the classifier
    knows them (it never imports them); a name it does not know is
    ``unknown-exception:<Name>``. Always a class :func:`error_exception` reproduces.
    """
    text = name.strip()
    if len(text) == 3 and text.isdigit() and 100 <= int(text) <= 599:
        return f"http-{text}"
    module, _, short = text.rpartition(".")
    if not _NAME.fullmatch(short):
        return "unknown-exception:Exception"
    if not module:
        found = getattr(builtins, short, None)
        if isinstance(found, type) and issubclass(found, Exception):
            exc = _named_exception(short)
            return _reproducible(classify_exception(exc).detail, short)
    stand_in: type[Exception] = type(short, (Exception,), {"__module__": module or "recorded"})
    return _reproducible(classify_exception(stand_in()).detail, short)


def _reproducible(detail: str, name: str) -> str:
    try:
        error_exception(detail)
    except ValueError:
        return f"unknown-exception:{name}"
    return detail


def _named_exception(name: str) -> Exception:
    if name == ToolReportedError.__name__:
        return ToolReportedError("recorded tool error")
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Exception):
        try:
            return found(f"recorded {name}")
        except TypeError:  # an exception that needs more arguments: its stand-in below
            pass
    stand_in: type[Exception] = type(name, (Exception,), {"__module__": "recorded"})
    return stand_in(f"recorded {name}")


def raised_for(
    outcome: str,
    error: str | None = None,
    *,
    result_error: str | None = None,
    risk: RiskClass = "read",
) -> Exception | None:
    """The exception a live tool raises to end as recorded (``None``: it returns).

    ``failure``: ``error``'s exception, by default a refused connection (nothing was
    sent); ``unknown``: a timeout (a write may have committed); ``ignored``: the tool's
    own argument check. A write's ``success`` whose result reports an error: the tool's
    own refusal (nothing was made).
    """
    if outcome == "success":
        if result_error is not None and risk in WRITES:
            return ToolReportedError(f"the result reports {result_error}")
        return None
    if error is not None:
        return error_exception(error)
    if outcome == "failure":
        return ConnectionRefusedError(111, "recorded failure")
    if outcome == "unknown":
        return TimeoutError("recorded unknown outcome")
    if outcome == "ignored":
        return ValueError("recorded ignored outcome")
    return None


#: Every field a line may have.
FIELDS: Final = frozenset(f.name for f in dataclasses.fields(RecordedStep))


def parse_step(data: Mapping[str, Any], after: int | None = None) -> RecordedStep:
    """A decoded line as a recorded step; every error names the field that is wrong.

    Args:
        data: the line's JSON object (numbers with a fraction as :class:`~decimal.Decimal`).
        after: the ``at`` of the step before it (``at`` never goes backwards).

    Raises:
        ValueError: what is wrong with the line, in the user's terms (``TypeError``
            for a field of the wrong type).
    """
    unknown = set(data) - FIELDS
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(shown(k) for k in sorted(unknown))}")
    at = _at(data.get("at"))
    if after is not None and at < after:
        raise ValueError(f"time went backwards: {at} after {after}")
    if "tool" not in data:
        return RecordedStep(
            at=at,
            cost=data.get("cost", "0"),
            model=data.get("model"),
            input_tokens=data.get("input_tokens"),
            output_tokens=data.get("output_tokens"),
            **{name: data[name] for name in _TOOL_FIELDS if name in data},
        )
    tool, args = data["tool"], data.get("args", {})
    if not isinstance(tool, str) or not tool.strip():
        raise ValueError(f"tool must name the tool that was called, got {shown(tool)}")
    if not isinstance(args, Mapping):
        raise TypeError(f"args must be an object of the call's arguments, got {shown(args)}")
    risk: RiskClass = data.get("risk", "read")
    if risk not in get_args(RiskClass):
        raise ValueError(f"risk must be one of {', '.join(get_args(RiskClass))}, got {shown(risk)}")
    recovery = data.get("recovery", False)
    if type(recovery) is not bool:
        raise ValueError(f"recovery must be true or false, got {shown(recovery)}")
    outcome = data.get("outcome", "success")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {shown(outcome)}")
    fields = data.get("business_key")
    if fields is not None and (
        not isinstance(fields, list) or not all(isinstance(k, str) for k in fields)
    ):
        raise ValueError(f"business_key must be a list of strings, got {shown(fields)}")
    return RecordedStep(
        at=at,
        tool=tool,
        args=args,
        risk=risk,
        recovery=recovery,
        business_key=tuple(fields) if fields else None,
        outcome=outcome,
        result=data.get("result"),
        cost=data.get("cost"),
        error=data.get("error"),
        result_error=data.get("result_error"),
        changes_state=data.get("changes_state"),
        **{name: data[name] for name in _MODEL_FIELDS if name in data},
    )


def _at(value: object) -> int:
    """A line's ``at``: whole milliseconds since the run started, however it is written.

    ``1500`` and ``1500.0`` are taken; a fraction such as ``0.5`` (most often a time in
    seconds) is refused.
    """
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise TypeError(f"at must be a number of milliseconds, got {shown(value)}")
    if isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value():
            text = format(value, "f") if value.is_finite() else str(value)
            seconds = f" (seconds? {text} s is {decimal_text(value * 1000)} ms)"
            raise ValueError(
                f"at is whole milliseconds since the run started, got {text}"
                + (seconds if value.is_finite() and abs(value) < 10**9 else "")
            )
        value = int(value)
    if not 0 <= value <= MAX_TIME_MS:
        raise ValueError(
            f"at must be a non-negative integer of at most {MAX_TIME_MS}, got {shown(value)}"
        )
    return value


def read_recorded_run(path: str | Path) -> Iterator[tuple[int, RecordedStep]]:
    """Stream a recorded run's steps with their line numbers, each validated.

    Blank lines are skipped. A bad line stops the stream with its error.

    Raises:
        TraceError: naming the file and the line: an unreadable file, a line that is not
            a JSON object, or what :func:`parse_step` refuses.
    """
    file = str(path)
    last = None
    for number, raw in iter_lines(path, TraceError):
        if not raw.strip():
            continue
        data = loads_json(raw, TraceError, file=file, line=number, parse_float=Decimal)
        if not isinstance(data, dict):
            raise TraceError("a run step must be a JSON object", file=file, line=number)
        try:
            step = parse_step(data, last)
        except (TypeError, ValueError) as exc:
            raise TraceError(str(exc), file=file, line=number) from None
        last = step.at
        yield number, step
