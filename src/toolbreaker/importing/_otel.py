"""OpenTelemetry spans by the GenAI semantic conventions, exported as OTLP JSON.

A file is one OTLP ``ExportTraceServiceRequest`` as JSON (``{"resourceSpans": [...]}``,
as OTLP/HTTP sends it) or JSON Lines of them (as the collector's file exporter writes).
Every trace is one run, its steps in the order its spans started, ``at`` counted from
its first span. Span ids and times may be in either of OTLP JSON's spellings.

- an ``execute_tool`` span (``gen_ai.operation.name``) is a tool call:
  ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments`` (an object, or JSON text) and
  ``gen_ai.tool.call.result``. Both are opt-in in the conventions: a call without
  arguments reads as ``{}`` (so calls of one tool look alike) and one without a result
  as returning nothing, each with a warning;
- a tool span whose status is ``ERROR`` failed: its ``error.type`` (an exception's type
  name, or an HTTP status) is read as the classifier reads that class
  (:func:`~toolbreaker.runtime._run._recorded_step.error_of_type`); ``tool_error`` is a
  result that reports a failure; without ``error.type`` the class is
  ``unknown-exception:Exception``. toolbreaker's own tool spans say more: a call
  ``toolbreaker.rejected``, cancelled or answered from the journal never ran and is left
  out (with a warning), a write ``toolbreaker.unverified`` has an unknown outcome;
- a model span (``chat``, ``text_completion``, ``generate_content``, or any span with
  ``gen_ai.usage.*``) is a model step: ``gen_ai.response.model`` (else
  ``gen_ai.request.model``), ``gen_ai.usage.input_tokens`` and ``output_tokens`` (or the
  older ``prompt_tokens`` and ``completion_tokens``). The conventions carry no cost.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.core._run.budget import RiskClass
from toolbreaker.importing._common import UNNAMED, ImportedRun, RunBuilder, decoded, obj
from toolbreaker.runtime._run._recorded_step import error_of_type

__all__ = ["read_otel"]

_MODEL_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
_ERROR_STATUS: Final = (2, "STATUS_CODE_ERROR")
#: toolbreaker's ``error.type`` of calls that never ran.
_NOT_RUN: Final = frozenset({"toolbreaker.rejected", "toolbreaker.cancelled"})


def read_otel(
    documents: list[tuple[int | None, Any]],
    source: str,
    *,
    risks: Mapping[str, RiskClass],
    trim: int | None,
) -> list[ImportedRun]:
    """The runs (one a trace) of the decoded OTLP documents.

    Raises:
        ValueError: naming the line (for JSON Lines) and what is wrong.
    """
    traces: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    order = 0
    for line, document in documents:
        for span in _spans(document, line):
            trace = _id(span.get("traceId"))
            start = _nanos(span.get("startTimeUnixNano"), line)
            order += 1
            traces.setdefault(trace, []).append((start, order, span))
    runs = []
    for trace, spans in traces.items():
        spans.sort(key=lambda entry: (entry[0], entry[1]))
        builder = RunBuilder(trace, source, risks=risks, trim=trim)
        first = spans[0][0]
        for start, _, span in spans:
            _span(builder, (start - first) // 1_000_000, span)
        runs.append(builder.build())
    return runs


def _spans(document: Any, line: int | None) -> list[dict[str, Any]]:
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
        raise TypeError(_where(line, "an OTLP export has resourceSpans"))
    found = []
    for resource in document["resourceSpans"]:
        scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans"))
        if not isinstance(scopes, list):
            raise TypeError(_where(line, "resourceSpans without scopeSpans"))
        for scope in scopes:
            spans = scope.get("spans") if isinstance(scope, dict) else None
            if not isinstance(spans, list) or not all(isinstance(s, dict) for s in spans):
                raise ValueError(_where(line, "scopeSpans without a list of spans"))
            found.extend(spans)
    return found


def _span(builder: RunBuilder, at: int, span: Mapping[str, Any]) -> None:
    attributes = _attributes(span.get("attributes"))
    operation = attributes.get("gen_ai.operation.name")
    if operation == "execute_tool":
        _tool(builder, at, span, attributes)
    elif operation in _MODEL_OPERATIONS or any(k.startswith("gen_ai.usage.") for k in attributes):
        model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
        builder.model(
            at,
            model if isinstance(model, str) and model.strip() else None,
            input_tokens=_count(attributes, "input_tokens", "prompt_tokens"),
            output_tokens=_count(attributes, "output_tokens", "completion_tokens"),
        )


def _tool(
    builder: RunBuilder, at: int, span: Mapping[str, Any], attributes: dict[str, Any]
) -> None:
    name = attributes.get("gen_ai.tool.name")
    if not isinstance(name, str) or not name:
        spelled = str(span.get("name") or "")
        name = spelled.removeprefix("execute_tool").strip()
    if not name:
        raise ValueError("an execute_tool span without gen_ai.tool.name")
    error_type = attributes.get("error.type")
    if error_type in _NOT_RUN or attributes.get("toolbreaker.outcome") == "answered":
        builder.warn(
            "a call the guard refused or answered when it was recorded never ran: left out"
        )
        return
    if "gen_ai.tool.call.arguments" in attributes:
        args = decoded(attributes["gen_ai.tool.call.arguments"])
        if not isinstance(args, dict):
            builder.warn("arguments that are no JSON object are kept as args.arguments")
            args = {"arguments": args}
    else:
        builder.warn(
            "a call without gen_ai.tool.call.arguments (opt-in) reads as {}: "
            "calls of one tool look alike"
        )
        args = {}
    status = obj(span.get("status"))
    failed = status.get("code") in _ERROR_STATUS or error_type is not None
    if error_type == "tool_error":
        builder.tool(at, name, args, result=_result(builder, attributes), result_error="tool-error")
    elif error_type == "toolbreaker.unverified":
        builder.tool(at, name, args, unknown=True)
    elif failed:
        if not isinstance(error_type, str) or not error_type.strip():
            builder.warn(f"a failed call without error.type reads as {UNNAMED}")
            error = UNNAMED
        else:
            error = error_of_type(error_type)
        builder.tool(at, name, args, error=error)
    else:
        builder.tool(at, name, args, result=_result(builder, attributes))


def _result(builder: RunBuilder, attributes: Mapping[str, Any]) -> Any:
    if "gen_ai.tool.call.result" not in attributes:
        builder.warn(
            "a call without gen_ai.tool.call.result (opt-in) returned nothing: "
            "its results never differ"
        )
        return None
    return decoded(attributes["gen_ai.tool.call.result"])


def _attributes(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise TypeError("a span's attributes are not a list")
    out = {}
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise TypeError("an attribute without a key")
        out[entry["key"]] = _value(entry.get("value"))
    return out


def _value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as the plain value it holds."""
    if not isinstance(value, dict) or not value:
        return None
    kind, inner = next(iter(value.items()))
    if kind == "intValue":
        return int(inner)
    if kind == "doubleValue":
        return float(inner)
    if kind == "arrayValue":
        return [_value(v) for v in (inner or {}).get("values", [])]
    if kind == "kvlistValue":
        return {e.get("key"): _value(e.get("value")) for e in (inner or {}).get("values", [])}
    return inner  # stringValue, boolValue, bytesValue (base64 text)


def _id(value: Any) -> str:
    """A trace id as hex, whether the export wrote hex or (protobuf's JSON) base64."""
    if not isinstance(value, str) or not value:
        raise ValueError("a span without its traceId")
    if len(value) == 32 and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        return base64.b64decode(value, validate=True).hex()
    except ValueError:
        return value


def _nanos(value: Any, line: int | None) -> int:
    try:
        nanos = int(value)
    except (TypeError, ValueError):
        raise ValueError(_where(line, "a span without startTimeUnixNano")) from None
    if nanos < 0:
        raise ValueError(_where(line, "a span started before 1970"))
    return nanos


def _count(attributes: Mapping[str, Any], name: str, older: str) -> int | None:
    value = attributes.get(f"gen_ai.usage.{name}", attributes.get(f"gen_ai.usage.{older}"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _where(line: int | None, message: str) -> str:
    return message if line is None else f"line {line}: {message}"
