"""Recorded runs from what users already have: traces, message histories, trajectories.

``toolbreaker check-run`` replays a recorded run (JSON Lines of tool calls and model
steps, :mod:`toolbreaker.runtime._run._recorded_step`) through a live run guard. This
package converts what agents and their frameworks already write into that format::

    from toolbreaker.importing import import_runs

    for run in import_runs("langchain", "history.json"):
        print(run.name, len(run.steps), run.warnings)
        Path(f"{run.name}.jsonl").write_text(run.to_jsonl())

or ``toolbreaker import FORMAT FILE... -o OUT``. The formats (:data:`FORMATS`):

- ``otel``: OpenTelemetry spans by the GenAI conventions, OTLP JSON
  (:mod:`~toolbreaker.importing._otel`);
- ``openai-agents``: the OpenAI Agents SDK's trace export
  (:mod:`~toolbreaker.importing._openai_agents`);
- ``langchain``: LangChain and LangGraph message histories
  (:mod:`~toolbreaker.importing._langchain`);
- ``swe-agent`` and ``mini-swe-agent``: coding agents' trajectories
  (:mod:`~toolbreaker.importing._swe`);
- ``tau-bench``: tau-bench's trajectories, with each run's reward
  (:mod:`~toolbreaker.importing._tau`).

Each maps the tool, its arguments, the outcome and the failure's error class (in the
classifier's words), the result (and a failure the result reports: an exit status, an
error answer), and the model's steps with their usage and cost where the source keeps
them. What a source holds that the format cannot say is in each run's ``warnings``. A
file that is not of its format raises :class:`~toolbreaker.errors.TraceError` naming the
file (and the line, for JSON Lines). Nothing here decides anything: the lines are the
recorded-run format's, checked by its parser as they are written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from toolbreaker.core._files import loads_json, read_text
from toolbreaker.core._run.budget import RiskClass
from toolbreaker.errors import TraceError
from toolbreaker.importing._common import ImportedRun
from toolbreaker.importing._langchain import read_langchain
from toolbreaker.importing._openai_agents import read_openai_agents
from toolbreaker.importing._otel import read_otel
from toolbreaker.importing._swe import read_mini_swe_agent, read_swe_agent, resolved_ids
from toolbreaker.importing._tau import read_tau_bench

__all__ = [
    "import_runs",
]

#: A reader of one decoded document: the runs it holds.
_Whole = Callable[..., list[ImportedRun]]

#: Formats whose file is one JSON document, and the reader of each.
_DOCUMENTS: Final[dict[str, _Whole]] = {
    "langchain": read_langchain,
    "mini-swe-agent": read_mini_swe_agent,
    "swe-agent": read_swe_agent,
    "tau-bench": read_tau_bench,
}
#: Formats whose file may also be JSON Lines of documents.
_STREAMS: Final[dict[str, _Whole]] = {
    "openai-agents": read_openai_agents,
    "otel": read_otel,
}
#: The formats :func:`import_runs` reads.
FORMATS: Final = tuple(sorted({*_DOCUMENTS, *_STREAMS}))


def import_runs(
    fmt: str,
    path: str | Path,
    *,
    risks: Mapping[str, RiskClass] | None = None,
    trim: int | None = None,
) -> list[ImportedRun]:
    """The runs the file at ``path`` holds, converted from ``fmt``.

    Args:
        fmt: one of :data:`FORMATS`.
        path: the file.
        risks: risk classes by tool name, for tools the source does not describe (every
            other tool is a ``read``; tau-bench's tools have theirs,
            ``toolbreaker.importing._tau.RISKS``, which these override).
        trim: keep result strings longer than this many characters as their digest,
            length, head and tail (equal results stay equal; see
            :mod:`toolbreaker.importing._common`); ``None`` keeps them whole.

    Raises:
        TraceError: an unreadable file, or one that is not of ``fmt``, naming the file
            (and the line of a JSON Lines file) and what is wrong.
        ValueError: ``fmt`` is none of :data:`FORMATS`, or ``trim`` is below 1.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if trim is not None and (type(trim) is not int or trim < 1):
        raise ValueError(f"trim must be a positive number of characters, got {trim!r}")
    source = str(path)
    documents = _documents(source, streams=fmt in _STREAMS)
    options: dict[str, Any] = {"risks": dict(risks or {}), "trim": trim}
    try:
        if fmt in _STREAMS:
            return _STREAMS[fmt](documents, source, **options)
        return _DOCUMENTS[fmt](documents[0][1], source, **options)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"not the {fmt} format: {exc}", file=source) from None


def read_resolved(path: str | Path) -> tuple[set[str], set[str] | None]:
    """The instances a SWE-bench report at ``path`` resolved, and those it did not.

    See :func:`toolbreaker.importing._swe.resolved_ids` for the reports it reads.

    Raises:
        TraceError: an unreadable file, or no SWE-bench report.
    """
    source = str(path)
    data = loads_json(read_text(source, TraceError), TraceError, file=source)
    try:
        return resolved_ids(data)
    except ValueError as exc:
        raise TraceError(str(exc), file=source) from None


def judged(run: ImportedRun, resolved: set[str], unresolved: set[str] | None) -> ImportedRun:
    """``run`` with the outcome a SWE-bench report (:func:`read_resolved`) gives it.

    Its instance (``detail["instance_id"]``, else its name) resolved: ``success``; named
    unresolved, or not resolved by a report that names only the resolved: ``failure``;
    else the run as it was.
    """
    instance = str(run.detail.get("instance_id") or run.name)
    if instance in resolved:
        return dataclasses.replace(run, outcome="success")
    if unresolved is None or instance in unresolved:
        return dataclasses.replace(run, outcome="failure")
    return run


def _documents(source: str, *, streams: bool) -> list[tuple[int | None, Any]]:
    """The file's JSON: one document, or (``streams``) JSON Lines of them."""
    text = read_text(source, TraceError)
    if not text.strip():
        raise TraceError("the file is empty", file=source)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if streams and len(lines) > 1 and lines[0][1].lstrip().startswith("{"):
        try:
            first = loads_json(lines[0][1], TraceError, file=source, line=lines[0][0])
        except TraceError:
            first = None
        if first is not None:  # the first line is a document by itself: JSON Lines
            return [(n, loads_json(line, TraceError, file=source, line=n)) for n, line in lines]
    return [(None, loads_json(text, TraceError, file=source))]
