"""The OpenAI Agents SDK's trace export.

A file holds what the SDK's exporter sends: ``{"data": [...]}``, a list of items, or JSON
Lines of items (or of ``{"data": [...]}`` batches). An item is a trace (``"object":
"trace"``) or a span (``"object": "trace.span"``, with ``trace_id``, ``started_at``,
``ended_at``, ``span_data`` and ``error``), as ``Trace.export()`` and ``Span.export()``
make them. Every trace is one run, its steps in the order its spans started, ``at``
counted from its first span.

- a ``function`` span is a tool call: its ``name``, the JSON ``input`` as arguments, the
  ``output`` as result (the SDK exports ``str()`` of what the tool returned; JSON text is
  decoded). A span with an ``error`` failed; the export
  keeps its message but not its exception's class, so the class is
  ``unknown-exception:Exception`` (a write's outcome is then unknown), with a warning;
- a ``generation`` span is a model step with its ``model`` and ``usage``; a ``response``
  span one with its ``usage`` (the export names no model there: the usage is left out,
  with a warning); without either, each of the SDK's ``turn`` spans is a model step;
- the SDK exports no cost; agent, handoff, guardrail and other spans are no steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from toolbreaker.core._run.budget import RiskClass
from toolbreaker.importing._common import UNNAMED, ImportedRun, RunBuilder, decoded

__all__ = ["read_openai_agents"]

_MODEL_SPANS: Final = ("generation", "response")


def read_openai_agents(
    documents: list[tuple[int | None, Any]],
    source: str,
    *,
    risks: Mapping[str, RiskClass],
    trim: int | None,
) -> list[ImportedRun]:
    """The runs (one a trace) of the decoded documents of an export.

    Raises:
        ValueError: naming the item that is wrong.
    """
    spans: dict[str, list[tuple[datetime, int, Mapping[str, Any]]]] = {}
    names: dict[str, str] = {}
    order = 0
    for line, document in documents:
        items = document.get("data") if isinstance(document, dict) else document
        if isinstance(document, dict) and document.get("object") in ("trace", "trace.span"):
            items = [document]
        if not isinstance(items, list):
            raise TypeError(_where(line, "an export is a list of traces and spans"))
        for item in items:
            if not isinstance(item, dict):
                raise TypeError(_where(line, "an item of the export is not an object"))
            kind = item.get("object")
            if kind == "trace" and isinstance(item.get("id"), str):
                names[item["id"]] = str(item.get("workflow_name") or item["id"])
            elif kind == "trace.span":
                trace = item.get("trace_id")
                if not isinstance(trace, str) or not isinstance(item.get("span_data"), dict):
                    raise ValueError(_where(line, "a span without its trace_id or span_data"))
                started = _time(item.get("started_at"), line)
                order += 1
                spans.setdefault(trace, []).append((started, order, item))
    runs = []
    for trace, found in spans.items():
        found.sort(key=lambda entry: (entry[0], entry[1]))
        builder = RunBuilder(trace, source, risks=risks, trim=trim)
        _trace(builder, found)
        runs.append(builder.build(None, {"workflow": names.get(trace)}))
    return runs


def _trace(builder: RunBuilder, spans: list[tuple[datetime, int, Mapping[str, Any]]]) -> None:
    start = spans[0][0]
    models = any(item["span_data"].get("type") in _MODEL_SPANS for _, _, item in spans)
    for started, _, item in spans:
        at = int((started - start).total_seconds() * 1000)
        data = item["span_data"]
        kind = data.get("type")
        if kind == "function":
            _function(builder, at, data, item.get("error"))
        elif kind in _MODEL_SPANS:
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
            model = data.get("model") if isinstance(data.get("model"), str) else None
            builder.model(
                at,
                model,
                input_tokens=_count(usage.get("input_tokens", usage.get("prompt_tokens"))),
                output_tokens=_count(usage.get("output_tokens", usage.get("completion_tokens"))),
            )
        elif kind == "custom" and data.get("name") == "turn" and not models:
            # Without model spans, the SDK's turn spans are the model's turns.
            inner = data.get("data") if isinstance(data.get("data"), dict) else {}
            if inner.get("usage"):
                builder.warn("the export names no model for a turn's usage: it is left out")
            builder.model(at)


def _function(builder: RunBuilder, at: int, data: Mapping[str, Any], error: Any) -> None:
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a function span without the tool's name")
    raw = data.get("input")
    args = decoded(raw) if raw not in (None, "") else {}
    if not isinstance(args, dict):
        builder.warn("a call whose input is not a JSON object keeps it as args.input")
        args = {"input": raw}
    if error:
        builder.warn(
            "the export keeps a failed call's message, not its exception's class: "
            f"it reads as {UNNAMED}"
        )
        builder.tool(at, name, args, error=UNNAMED)
        return
    builder.tool(at, name, args, result=decoded(data.get("output")))


def _time(value: Any, line: int | None) -> datetime:
    if not isinstance(value, str):
        raise TypeError(_where(line, "a span without started_at"))
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(_where(line, f"started_at is not an ISO time: {value[:40]!r}")) from None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _where(line: int | None, message: str) -> str:
    return message if line is None else f"line {line}: {message}"
