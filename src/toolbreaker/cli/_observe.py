"""``export``, ``advise`` and ``dashboard``: the event stream as a trace, findings, a page."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

from toolbreaker._tuning._signals import (
    Compliance,
    Signals,
    calibrate,
    compliance,
    count_class,
    covered_by,
    findings,
    opens_rate,
)
from toolbreaker.cli._options import Since, port, since
from toolbreaker.cli._sheet import load_sheet_data, sheet_coverage
from toolbreaker.core._breaker.keys import row_of
from toolbreaker.core._breaker.receipt import Replay
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import Transition
from toolbreaker.core._breaker.trace import read_trace, trace_event
from toolbreaker.errors import PolicyError, StoreUnavailable, TraceError

__all__ = ["add_commands", "export_trace", "stream_coverage", "stream_signals"]

_STREAM_HELP = (
    "the breakers' store (its history) and the event stream: sqlite:///PATH, redis://... "
    "(?cluster=1 for a Redis Cluster) or postgresql://... (read, never created)"
)


def add_commands(commands: Any) -> None:
    """Register ``export``, ``advise`` and ``dashboard`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "export", help="write the shared event stream as a trace that replay accepts"
    )
    cmd.add_argument("--store", required=True, help=_STREAM_HELP)
    cmd.add_argument(
        "--since", type=since, help="ISO time (UTC unless it says) or an age: 30s, 15m, 2h, 1d"
    )
    cmd.add_argument("--dependency", help="only this dependency (or breaker key)")
    cmd.add_argument("--out", help="write here instead of stdout")
    cmd.set_defaults(run_command=_run_export)

    cmd = commands.add_parser(
        "advise", help="calibration findings from a trace or the event stream"
    )
    cmd.add_argument("trace", nargs="?", help="a JSON Lines trace (or use --store)")
    cmd.add_argument("--store", help="read the shared event stream instead of a trace")
    cmd.add_argument(
        "--policy",
        help="the boundary sheet (or a flat policy) to replay a trace under (default: defaults)",
    )
    cmd.add_argument(
        "--since",
        type=since,
        help="with --store: only entries this recent (ISO time or an age: 30s, 15m, 2h, 1d)",
    )
    cmd.add_argument("--json", action="store_true", help="print signals and findings as JSON")
    cmd.set_defaults(run_command=_run_advise)

    cmd = commands.add_parser(
        "dashboard", help="serve a live breaker dashboard on 127.0.0.1 (extra: dashboard)"
    )
    cmd.add_argument("--store", required=True, help=_STREAM_HELP)
    cmd.add_argument("--port", type=port, default=8765, help="the port on 127.0.0.1 (default 8765)")
    cmd.add_argument(
        "--allow-actions",
        action="store_true",
        help="allow isolate/release from the page; prints a token the page must send",
    )
    cmd.set_defaults(run_command=_run_dashboard)


def _entries(
    url: str, window: Since | None, *, ordered: bool, unplaced: list[int] | None = None
) -> list[Mapping[str, Any]]:
    """What ``url`` holds: the store's history of its breakers and the event stream.

    A breaker whose store keeps a history has its transitions from one of the two:
    ``ordered`` (export, which needs the store's order) takes the history's, where the
    requests a replay needs are written in (:func:`replayable`); otherwise (advise,
    which counts what each process saw, local rejections included) the stream's, and
    the history's only for a breaker the stream never saw. Entries of other kinds come
    from the stream. A URL that opens neither is an error (the stream's, or for a
    PostgreSQL URL, the store's).
    """
    from toolbreaker.core._breaker.history import replayable
    from toolbreaker.instrumentation.stream import iter_entries, open_stream

    streamed: list[dict[str, Any]] | None = None
    failed: Exception | None = None
    try:
        stream = open_stream(url, create=False)  # a reader never makes what it reads
    except (PolicyError, StoreUnavailable) as exc:
        failed = exc
    else:
        try:
            streamed = [entry for _, entry in iter_entries(stream)]
        finally:
            stream.close()
    history = _history(url, failed)
    if streamed is None and history is None:
        assert failed is not None
        raise failed
    streamed, history = streamed or [], history or []
    kept = {str(e.get("key")) for e in history}
    if not ordered:
        seen = {str(e.get("key")) for e in streamed if e.get("kind") == "transition"}
        kept -= seen
        history = [e for e in history if str(e.get("key")) in kept]
    entries: list[Mapping[str, Any]] = [
        e for e in streamed if e.get("kind") != "transition" or str(e.get("key")) not in kept
    ]
    entries.extend(replayable(history, unplaced=unplaced) if ordered else history)
    if window is not None:
        cutoff = window.cutoff(time.time())
        entries = [e for e in entries if _wall(e) >= cutoff]
    return entries


#: URL schemes whose store's error, not the stream's, is the one to report.
_STORE_FIRST = ("postgres", "postgresql")


def _history(url: str, failed: Exception | None) -> list[dict[str, Any]] | None:
    """The history of the breaker store ``url`` names, or ``None`` if it names none.

    ``failed``: why the URL opened no stream, raised if the store does not answer either
    (what the command said before stores kept a history). A URL that names no store
    (``memory://``, an SQLite file that holds only a stream, a stream named by its
    ``?key=`` without a ``?prefix=``) gives ``None``.
    """
    from toolbreaker.cli._stores import open_store

    parts = urlsplit(url)
    postgres = parts.scheme in _STORE_FIRST
    named = parse_qs(parts.query)
    if "key" in named and "prefix" not in named:
        return None  # the URL names a stream by its key: that stream, and no store
    try:
        store = open_store(url, stream_url=True)  # never created
    except (PolicyError, StoreUnavailable):
        if postgres and failed is not None:
            raise  # neither a stream nor a store: the store's reason
        return None
    try:
        found: list[dict[str, Any]] = store.history()
    except StoreUnavailable:
        if postgres and failed is None:
            return None  # the database answered with a stream: it holds no store's tables
        if failed is not None:
            raise failed from None
        raise
    finally:
        store.close()
    return found


def _wall(entry: Mapping[str, Any]) -> float:
    wall = entry.get("wall")
    return float(wall) if isinstance(wall, (int, float)) else 0.0


def export_trace(
    entries: Iterable[Mapping[str, Any]],
    out: TextIO,
    *,
    dependency: str | None = None,
    late: list[int] | None = None,
) -> tuple[int, int]:
    """Write ``entries``' input events as trace lines; returns ``(written, dropped)``.

    Outcomes whose request is not in the window (``--since`` cut it off, or the stream
    trimmed it) are dropped: a replay could not tell what they settle. Times never
    decrease per key: an event that reached the store (or the stream) after a later one
    of its breaker is written at that later time, and ``late``, when given, gets how
    many milliseconds each such event moved.
    """
    from toolbreaker.core._breaker.history import record_of

    written = dropped = 0
    last: dict[str, int] = {}
    requested: dict[str, set[str]] = {}
    for entry in entries:
        if dependency is not None and dependency not in (entry.get("dependency"), entry.get("key")):
            continue
        record = record_of(entry)
        line = trace_event(record) if record is not None else None
        if record is None or line is None:
            continue
        event, key = record.event, record.dependency
        calls = requested.setdefault(key, set())
        if event.type == "request":
            if event.call is not None:
                calls.add(event.call)
        elif event.type not in ("isolate", "release"):
            if event.call is None or event.call not in calls:
                dropped += 1
                continue
            calls.discard(event.call)
        before = last.get(key, 0)
        if late is not None and event.at < before:
            late.append(before - event.at)
        line["at"] = last[key] = max(event.at, before)
        out.write(json.dumps(line, sort_keys=True) + "\n")
        written += 1
    return written, dropped


_PUBLISH_HINT = (
    "Publish to it with StreamPublisher(open_stream(URL)).attach(registry): every breaker "
    "the registry holds, now and later."
)
_RECORD_HINT = (
    "Record one with TraceRecorder(PATH).attach(registry): every breaker the registry "
    "holds, now and later."
)


def _nothing(source: str, others: int, window: Since | None, hint: str) -> str:
    """What to say when there was nothing to judge: never an all-clear (no findings)."""
    since_text = f" since {window}" if window is not None else ""
    other = f" (only {others} entries of other kinds)" if others else ""
    return (
        f"{source} holds no breaker events{since_text}{other}: nothing to advise on, which is "
        f"not an all-clear. {hint}"
    )


def _run_export(args: argparse.Namespace) -> int:
    from toolbreaker.instrumentation.stream import masked_url

    unplaced: list[int] = []
    entries = _entries(args.store, args.since, ordered=True, unplaced=unplaced)
    late: list[int] = []
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            written, dropped = export_trace(entries, handle, dependency=args.dependency, late=late)
    else:
        written, dropped = export_trace(entries, sys.stdout, dependency=args.dependency, late=late)
    note = f"; {dropped} outcomes of calls requested before the window dropped" if dropped else ""
    print(f"exported {written} events{note}", file=sys.stderr)
    if unplaced:
        print(
            f"{sum(unplaced)} quiet calls could not be placed: the history no longer holds "
            "the state they met (trimmed), so a replay counts fewer calls than were made",
            file=sys.stderr,
        )
    if late:
        # Never a silent approximation: say where the replay may part from the store.
        print(
            f"{len(late)} events reached the store after a later event of their breaker (by "
            f"at most {max(late)} ms) and are written at that later time: a replay differs "
            "from the store only where such a shift moved a deadline",
            file=sys.stderr,
        )
    if written == 0 and not dropped and args.dependency is None:
        others = len(entries)
        print(_nothing(masked_url(args.store), others, args.since, _PUBLISH_HINT), file=sys.stderr)
    return 0


def stream_signals(
    entries: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, Signals], dict[str, str], list[Compliance]]:
    """Signals per key, tool per key and model compliance per wording, from stream entries."""
    from toolbreaker.core._breaker.history import record_of

    records: list[Transition] = []
    labelled: list[tuple[str, str, Transition]] = []
    classes: dict[str, dict[str, int]] = {}
    unclassified: dict[str, dict[str, int]] = {}
    tools: dict[str, str] = {}
    for entry in entries:
        record = record_of(entry)
        if record is None:
            continue
        records.append(record)
        tools[record.dependency] = tool = str(entry.get("tool") or record.dependency)
        labelled.append((tool, str(entry.get("instructions_version") or "?"), record))
        name = entry.get("class")
        count_class(classes, unclassified, record, name if isinstance(name, str) else None)
    signals = calibrate(records, classes, unclassified=unclassified)
    return signals, tools, compliance(labelled)


def stream_coverage(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Per breaker key, what the model already had instead of the tool, from the stream.

    The fallback its breaker offers (a transition entry's ``fallback``) and the degraded
    answers it was served (``degrade`` notices), said by
    :func:`~toolbreaker._tuning._signals.covered_by`.
    """
    fallbacks: dict[str, str] = {}
    served: dict[str, dict[str, int]] = {}
    for entry in entries:
        kind = entry.get("kind")
        if kind == "transition":
            key, fallback = entry.get("key"), entry.get("fallback")
            if isinstance(key, str) and isinstance(fallback, str) and fallback:
                fallbacks[key] = fallback
        elif kind == "degrade":
            notice = entry.get("notice")
            key = notice.get("breaker") if isinstance(notice, dict) else None
            if isinstance(notice, dict) and isinstance(key, str):
                mode = notice.get("mode")
                name = mode if isinstance(mode, str) else "plain"
                per = served.setdefault(key, {})
                per[name] = per.get(name, 0) + 1
    out: dict[str, str] = {}
    for key in fallbacks.keys() | served.keys():
        has = covered_by(fallbacks.get(key), (), served.get(key))
        if has is not None:
            out[key] = has
    return out


def _trace_signals(path: str, sheet: PolicySheet) -> dict[str, Signals]:
    driver = Replay(sheet)
    records: list[Transition] = []
    for line, event in read_trace(path):
        try:
            records.extend(driver.feed(event))
        except TraceError as exc:
            exc.file, exc.line = path, line
            raise
    return calibrate(records)


def _run_advise(args: argparse.Namespace) -> int:
    if (args.trace is None) == (args.store is None):
        raise PolicyError("advise needs a TRACE or --store URL (one of them)", field="advise")
    if args.since is not None and args.store is None:
        # A trace's times are a monotonic clock's, not the wall's: --since cannot cut it.
        raise PolicyError(
            "--since goes with --store (the stream's entries carry wall times; a trace's "
            "do not): leave it out, or cut the trace before",
            field="since",
        )
    from toolbreaker.instrumentation.stream import masked_url

    tools: dict[str, str] = {}
    obeyed: list[Compliance] = []
    if args.store:
        entries = _entries(args.store, args.since, ordered=False)
        signals, tools, obeyed = stream_signals(entries)
        covered = stream_coverage(entries)
        nothing = _nothing(masked_url(args.store), len(entries), args.since, _PUBLISH_HINT)
    else:
        data, sheet = load_sheet_data(args.policy)
        signals = _trace_signals(args.trace, sheet)
        rows = sheet_coverage(data)
        # A scoped breaker (llm[tenant=acme]:read) has its row's fallback and chain.
        covered = {k: rows[row_of(k)] for k in signals if row_of(k) in rows}
        nothing = _nothing(args.trace, 0, None, _RECORD_HINT)
    found = findings(signals, covered)
    if args.json:
        doc = {
            "signals": [signals[k].to_dict() | {"tool": tools.get(k, k)} for k in sorted(signals)],
            "findings": [f.to_dict() for f in found],
            "compliance": [c.to_dict() for c in obeyed],
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
        if not signals:
            print(nothing, file=sys.stderr)
        return 0
    if not signals:
        print(nothing)
        return 0
    print(f"{'breaker':<28} {'opens':<32} {'open':>6} {'reopen':>7} {'re-calls':>9}  failures")
    for key in sorted(signals):
        s = signals[key]
        classes = ", ".join(f"{c}:{n}" for c, n in sorted(s.failures_by_class.items())) or "-"
        print(
            f"{key:<28} {opens_rate(s.opens, s.span_ms):<32} {s.open_share:>6.0%} "
            f"{s.reopen_ratio:>7.0%} {s.early_recalls:>9}  {classes}"
        )
    if any(c.open_episodes or c.early_recalls for c in obeyed):
        print("\nmodel compliance (re-calls before the retry time it was told)")
        print(f"{'tool':<28} {'wording':<9} {'opens':>6} {'re-calls':>9} {'share':>9}")
        for c in obeyed:
            print(
                f"{c.tool:<28} {c.instructions_version:<9} {c.open_episodes:>6} "
                f"{c.early_recalls:>9} {c.recall_share:>9.0%}"
            )
    print()
    if not found:
        print("no findings: nothing crosses a rule of thumb")
    for finding in found:
        tool = tools.get(finding.key)
        named = f"{finding.key} (tool {tool})" if tool and tool != finding.key else finding.key
        print(f"[{finding.rule}] {named}: {finding.message}\n  -> {finding.advice}")
    return 0


def _run_dashboard(args: argparse.Namespace) -> int:
    from toolbreaker.cli._dashboard import serve

    return serve(args.store, port=args.port, allow_actions=args.allow_actions)
