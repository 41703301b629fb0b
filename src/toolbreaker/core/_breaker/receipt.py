"""Receipts: deterministic, replayable records of what the breakers did.

A receipt (schema ``toolbreaker.receipt/v1``) holds the policy and its version and, per
dependency, every transition, the counts of remote attempts, local rejections and
openings (and, under shadow mode or a forced close, of requests that would have been
rejected), and the final state. ``receipt_hash`` is the SHA-256 of the canonical JSON of
everything else, so the same trace and policy give byte-identical receipts on every
machine, and one changed event gives another hash and a non-empty :func:`diff`.

What the hash proves: integrity against accidents (a truncated copy, a hand edit). It is
an unkeyed checksum, so anyone who edits a receipt can recompute it; :func:`load_receipt`
and ``toolbreaker diff`` accept such a resealed receipt. Only ``toolbreaker verify``, which
replays the trace under the policy and compares byte for byte, proves a receipt is what
that trace and policy produce.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, NoReturn

from toolbreaker.core._breaker.machine import (
    ADMITTED,
    PlainStep,
    apply,
    plain_record,
    plain_step,
)
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.sheet import PolicySheet
from toolbreaker.core._breaker.state import (
    MAX_TIME_MS,
    OUTCOME_TYPES,
    BreakerState,
    Event,
    Transition,
    opened,
)
from toolbreaker.core._breaker.trace import PLAIN_LINE, no_events, parse_line
from toolbreaker.core._canonical import sha256_hex
from toolbreaker.core._files import iter_line_blocks, loads_json, read_text, shown
from toolbreaker.errors import PolicyError, ReceiptError, TraceError

__all__ = [
    "RECEIPT_SCHEMA",
    "Counts",
    "Replay",
    "dependency_entry",
    "diff",
    "dump_receipt",
    "load_receipt",
    "receipt_body",
    "replay",
    "summarise",
]

RECEIPT_SCHEMA: Final = "toolbreaker.receipt/v1"


@dataclasses.dataclass(slots=True)
class Ledger:
    """The calls of one dependency: who was admitted in which generation."""

    state: BreakerState
    policy: Policy = dataclasses.field(default_factory=Policy)
    # plain_step(policy): the fast path's decision for this dependency, if it has one.
    quick: PlainStep | None = None
    last_at: int = 0
    requests: int = 0
    seen: set[str] = dataclasses.field(default_factory=set)
    unsettled: dict[str, int] = dataclasses.field(default_factory=dict)
    # Calls this policy rejected: a trace recorded under another policy may hold their
    # outcomes, which then settle nothing (``not-admitted``).
    rejected: dict[str, None] = dataclasses.field(default_factory=dict)
    transitions: list[Transition] = dataclasses.field(default_factory=list)


class Replay:
    """Feeds trace events through the core, resolving which call each outcome settles.

    This is the trace driver only: it keeps the ledger of admitted calls (to find an
    outcome's generation and to reject impossible traces) and asks :func:`apply` for
    every decision. ``policy`` is one policy for every dependency, or a
    :class:`~toolbreaker.core._breaker.sheet.PolicySheet`: each dependency under its
    row's policy, the sheet's defaults for the rest (:attr:`policy` is the defaults).
    """

    def __init__(
        self, policy: Policy | PolicySheet, initial: Mapping[str, BreakerState] | None = None
    ) -> None:
        self.sheet = policy if isinstance(policy, PolicySheet) else PolicySheet(policy)
        self._quicks: dict[int, tuple[Policy, PlainStep | None]] = {}
        self._ledgers = {dep: self._ledger(dep, state) for dep, state in (initial or {}).items()}

    @property
    def policy(self) -> Policy:
        """The policy of every dependency the sheet has no row for (the receipt's)."""
        return self.sheet.defaults

    @policy.setter
    def policy(self, policy: Policy) -> None:
        """A new default policy, from the next event on (an operator's change mid-trace)."""
        old = self.sheet.defaults
        self.sheet = PolicySheet(policy, self.sheet.rows)
        for ledger in self._ledgers.values():
            if ledger.policy is old:
                ledger.policy, ledger.quick = policy, self._quick(policy)

    def _quick(self, policy: Policy) -> PlainStep | None:
        """``plain_step(policy)``, made once per policy."""
        found = self._quicks.get(id(policy))
        if found is None:  # the policy is kept with it, so its id is never reused
            found = self._quicks[id(policy)] = (policy, plain_step(policy))
        return found[1]

    def _ledger(self, dependency: str, state: BreakerState) -> Ledger:
        """A new ledger of ``dependency``, under its policy."""
        policy = self.sheet.of(dependency)
        return Ledger(state, policy, self._quick(policy))

    def feed(self, event: Event) -> tuple[Transition, ...]:
        """Apply one trace event; raises :class:`TraceError` for impossible input."""
        dep = event.dependency
        ledger = self._ledgers.get(dep)
        if ledger is None:
            ledger = self._ledgers[dep] = self._ledger(dep, BreakerState())
        if event.at < ledger.last_at:
            raise TraceError(
                f"time went backwards for dependency {json.dumps(dep)}: "
                f"{event.at} after {ledger.last_at}"
            )
        if event.type == "request":
            ledger.requests += 1
            call = event.call or f"#{ledger.requests}"
            if self._seen(ledger, dep, call):
                _duplicate(dep, call)
            event = Event("request", event.at, dep, call, health_check=event.health_check)
        elif event.type in OUTCOME_TYPES:
            settles = event.call
            if settles is None:
                settles = next(iter(ledger.unsettled), None) or next(iter(ledger.rejected), None)
            generation: int | None
            if settles is not None and settles in ledger.unsettled:
                generation = ledger.unsettled.pop(settles)
            elif settles is not None and settles in ledger.rejected:
                del ledger.rejected[settles]
                generation = None
            else:
                what = f"call {json.dumps(settles)}" if settles is not None else "any call"
                raise TraceError(
                    f"{event.type} outcome for {json.dumps(dep)} settles no admitted call "
                    f"({what} is not admitted and unsettled)"
                )
            event = Event(
                event.type,
                event.at,
                dep,
                settles,
                generation,
                event.retry_after_ms,
                event.duration_ms,
            )
        ledger.state, records = apply(ledger.state, event, ledger.policy)
        ledger.last_at = event.at
        self._keep(ledger, dep, records)
        if event.type == "request" and event.call is not None:
            if records[-1].attempted:
                ledger.unsettled[event.call] = records[-1].generation
            else:
                ledger.rejected[event.call] = None
        return records

    def feed_trace(  # noqa: PLR0915 - the hot loop stays in one frame
        self,
        path: str,
        *,
        skip: Callable[[str], bool] | None = None,
        blocks: Iterable[tuple[int, list[str]]] | None = None,
    ) -> None:
        """Feed every event of a trace file, streaming; errors carry the file and line.

        The same as feeding each event of ``iter_trace(path)`` in order, faster: a line in
        a plain shape (:data:`~toolbreaker.core._breaker.trace.PLAIN_LINE`, what trace
        writers produce for a request or an outcome with a call id) skips the JSON
        decoder, and the core's :func:`~toolbreaker.core._breaker.machine.plain_step`
        decides it without building an event or a record; its one record goes to
        :meth:`_keep_plain`. Every other line (and any line ``plain_step`` leaves, the
        dependency's first, or one that is an error) is parsed by
        :func:`~toolbreaker.core._breaker.trace.parse_line` and fed by :meth:`feed`.

        ``skip``, when given, names the dependencies whose events are not fed: a replay
        split across processes by dependency gives each its share. A line of a skipped
        dependency in a plain shape is not checked further (the replay it belongs to
        checks it); any other line is, so a line no process can place raises in each.
        ``blocks``, when given, are the lines of ``path`` as
        :func:`~toolbreaker.core._files.iter_line_blocks` gives them (a reader that bounds
        or stops the reading).

        Raises:
            TraceError: a line that cannot be replayed (with its file and line), or a
                trace without a single event (:func:`~toolbreaker.core._breaker.trace.no_events`).
        """
        match = PLAIN_LINE.fullmatch
        ledgers = self._ledgers
        seen = self._seen_check()
        keep = self._keep_plain
        feed = self.feed
        if blocks is None:
            blocks = iter_line_blocks(path, TraceError)
        anything = False  # a line that is not blank: an event, or an error
        for first, lines in blocks:
            number = first - 1
            if not anything:
                anything = any(not line.isspace() and line for line in lines)
            try:
                for line in lines:
                    number += 1
                    found = match(line)
                    if found is not None:
                        text, dep, kind, call, call2, dep2, kind2 = found.groups()
                        if dep is None:
                            dep, kind, call = dep2, kind2, call2
                        ledger = ledgers.get(dep)
                        if ledger is None and skip is not None and skip(dep):
                            continue  # its own replay takes the line, and any error in it
                        at = int(text)
                        # What feed() does with Event(kind, at, dep, call) when quick answers.
                        if (
                            ledger is not None
                            and (quick := ledger.quick) is not None
                            and ledger.last_at <= at <= MAX_TIME_MS
                        ):
                            state = ledger.state
                            if kind == "request":
                                result = quick(state, kind, at, dep, call, None)
                                if result is not None:
                                    ledger.requests += 1
                                    if seen(ledger, dep, call):
                                        _duplicate(dep, call)
                                    new, reason = result
                                    if reason in ADMITTED:
                                        ledger.unsettled[call] = new.generation
                                    else:
                                        ledger.rejected[call] = None
                                    ledger.state, ledger.last_at = new, at
                                    keep(dep, kind, at, call, None, state, new, reason)
                                    continue
                            elif call in ledger.unsettled or call in ledger.rejected:
                                generation = ledger.unsettled.get(call)
                                result = quick(state, kind, at, dep, call, generation)
                                if result is not None:
                                    if generation is None:
                                        del ledger.rejected[call]
                                    else:
                                        del ledger.unsettled[call]
                                    new, reason = result
                                    ledger.state, ledger.last_at = new, at
                                    keep(dep, kind, at, call, generation, state, new, reason)
                                    continue
                        if at <= MAX_TIME_MS:  # otherwise parse_line() says what is wrong
                            feed(Event(kind, at, dep, call))
                            continue
                    event = parse_line(line, path, number)
                    if event is not None and not (skip is not None and skip(event.dependency)):
                        feed(event)
            except TraceError as exc:
                exc.file, exc.line = path, number
                raise
        if not anything:
            raise no_events(path)

    def _seen_check(self) -> Callable[[Ledger, str, str], bool]:
        """The function :meth:`feed_trace` asks whether a call id was requested before."""
        return self._seen

    def _seen(self, ledger: Ledger, dependency: str, call: str) -> bool:
        """Whether ``call`` was requested before for ``dependency`` (and remember it)."""
        if call in ledger.seen:
            return True
        ledger.seen.add(call)
        return False

    def _keep(self, ledger: Ledger, dependency: str, records: tuple[Transition, ...]) -> None:
        """Keep the records of one event (a streaming replay spills them instead)."""
        ledger.transitions.extend(records)

    def _keep_plain(  # noqa: PLR0917 - called once per event by feed_trace
        self,
        dependency: str,
        kind: str,
        at: int,
        call: str,
        generation: int | None,
        before: BreakerState,
        after: BreakerState,
        reason: str,
    ) -> None:
        """Keep the one record of an event :meth:`feed_trace` decided on its fast path."""
        record = plain_record(dependency, kind, at, call, generation, before, after, reason)
        self._keep(self._ledgers[dependency], dependency, (record,))

    def ledgers(self) -> Mapping[str, Ledger]:
        """Per dependency: its final state and what the replay kept."""
        return self._ledgers

    def receipt(self) -> dict[str, Any]:
        """The receipt of everything fed so far, with its hash."""
        return summarise(
            self.sheet,
            {dep: (ledger.transitions, ledger.state) for dep, ledger in self._ledgers.items()},
        )


def _duplicate(dependency: str, call: str) -> NoReturn:
    raise TraceError(f"duplicate call id {json.dumps(call)} for {json.dumps(dependency)}")


def replay(
    events: Iterable[Event],
    policy: Policy,
    initial: Mapping[str, BreakerState] | None = None,
) -> dict[str, Any]:
    """Replay events in order and return the receipt."""
    driver = Replay(policy, initial)
    for event in events:
        driver.feed(event)
    return driver.receipt()


@dataclasses.dataclass(slots=True)
class Counts:
    """What a receipt counts of one dependency's transitions.

    Attributes:
        transitions: records.
        remote: ``remote_attempts``: calls that reached the dependency.
        rejected: ``local_rejections``: requests rejected without a call.
        opens: records that moved the breaker to open from another phase.
        would_reject: admitted although enforcement would reject them (shadow mode, a
            forced close).
    """

    transitions: int = 0
    remote: int = 0
    rejected: int = 0
    opens: int = 0
    would_reject: int = 0

    def add(self, record: Transition) -> None:
        """Count one record."""
        self.transitions += 1
        self.remote += record.attempted
        self.rejected += record.rejected
        self.would_reject += record.would_reject
        self.opens += opened(record)


def dependency_entry(
    transitions: object,
    counts: Counts,
    final: BreakerState,
    policy: Policy,
    defaults: Policy | None = None,
) -> dict[str, Any]:
    """One dependency's entry of a receipt, around its ``transitions`` (as given).

    ``transitions`` is the list of record dicts, or whatever stands for it in a receipt
    that is written as it streams (:mod:`toolbreaker._replaying`). ``policy`` is the
    dependency's own; when it is not the receipt's (``defaults``, a boundary sheet's
    row), the entry holds it and its version, so other receipts keep their bytes.
    """
    entry: dict[str, Any] = {
        "transitions": transitions,
        "remote_attempts": counts.remote,
        "local_rejections": counts.rejected,
        "opens": counts.opens,
        "final_state": final.to_dict(),
        "recovered_from_corruption": final.recovered_from_corruption,
    }
    if policy.admits_all or counts.would_reject:
        # Only under shadow mode or a forced close, so other receipts keep their bytes.
        entry["would_reject"] = counts.would_reject
    if defaults is not None and policy is not defaults and policy.version != defaults.version:
        entry["policy"] = policy.to_dict()
        entry["policy_version"] = policy.version
    return entry


def receipt_body(policy: Policy, dependencies: Mapping[str, Any]) -> dict[str, Any]:
    """A receipt without its hash: the policy and the entries (:func:`dependency_entry`)."""
    return {
        "schema": RECEIPT_SCHEMA,
        "policy": policy.to_dict(),
        "policy_version": policy.version,
        "dependencies": dependencies,
    }


def summarise(
    policy: Policy | PolicySheet,
    dependencies: Mapping[str, tuple[Iterable[Transition], BreakerState]],
) -> dict[str, Any]:
    """Build a receipt from per-dependency transitions and final states.

    Under a :class:`~toolbreaker.core._breaker.sheet.PolicySheet`, the receipt's policy is
    the sheet's defaults and a dependency under a row of its own holds that row's policy.
    """
    sheet = policy if isinstance(policy, PolicySheet) else PolicySheet(policy)
    policy = sheet.defaults
    deps: dict[str, Any] = {}
    for name, (transitions, final) in dependencies.items():
        counts = Counts()
        records = []
        for record in transitions:
            counts.add(record)
            records.append(record.to_dict())
        deps[name] = dependency_entry(records, counts, final, sheet.of(name), policy)
    body = receipt_body(policy, deps)
    return {**body, "receipt_hash": sha256_hex(body)}


def dump_receipt(receipt: Mapping[str, Any]) -> str:
    """The printed form of a receipt: sorted keys, two-space indent, trailing newline."""
    return json.dumps(receipt, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load_receipt(path: str | Path) -> dict[str, Any]:
    """Read a receipt file and check its schema, its shape and its hash.

    The hash is an unkeyed checksum: it catches accidents (a truncated copy, a hand edit),
    not a forger, who can recompute it. Only ``toolbreaker verify`` (replaying the trace)
    proves a receipt is what a trace and policy produce.
    """
    name = str(path)
    doc = loads_json(read_text(path, ReceiptError), ReceiptError, file=name, max_depth=16)
    if not isinstance(doc, dict) or doc.get("schema") != RECEIPT_SCHEMA:
        raise ReceiptError(f"not a {RECEIPT_SCHEMA} document", file=name)
    if not isinstance(doc.get("dependencies"), dict):
        raise ReceiptError("receipt has no dependencies table", file=name)
    try:
        _check_shape(doc)
    except ReceiptError as exc:
        exc.file = name
        raise
    body = {key: value for key, value in doc.items() if key != "receipt_hash"}
    if sha256_hex(body) != doc.get("receipt_hash"):
        raise ReceiptError("receipt_hash does not match its content (edited?)", file=name)
    return doc


def _expect(value: object, kind: type | tuple[type, ...], where: str) -> None:
    if isinstance(value, bool) and kind is int:
        raise ReceiptError(f"{where} must be an integer, got a boolean")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ReceiptError(f"{where} must be a {_JSON_NAMES.get(names, names)}")


_JSON_NAMES: Final = {
    "dict": "JSON object",
    "list": "JSON array",
    "str": "string",
    "int": "integer",
}
_RECEIPT_KEYS: Final = frozenset(
    {"schema", "policy", "policy_version", "dependencies", "receipt_hash"}
)
#: The fields a receipt gives every dependency (as :func:`dependency_entry` writes them)
#: and every transition record (as ``Transition.to_dict`` does); ``would_reject`` is in
#: both only under shadow mode or a forced close.
_DEPENDENCY_KEYS: Final = frozenset(dependency_entry([], Counts(), BreakerState(), Policy()))
_TRANSITION_KEYS: Final = frozenset(
    {"event", "from", "to", "attempted", "rejected", "reason", "generation", "open_until"}
)
_SHADOW_KEY: Final = "would_reject"
#: The fields of a dependency under a boundary sheet's row of its own (both or neither).
_ROW_KEYS: Final = frozenset({"policy", "policy_version"})


def _check_fields(
    found: Mapping[str, Any], required: frozenset[str], where: str, rows: bool = False
) -> None:
    optional = {_SHADOW_KEY} | (_ROW_KEYS if rows else set())
    if set(found) - optional != required or (rows and 0 < len(_ROW_KEYS & set(found)) < 2):
        extra = f" (and {_SHADOW_KEY} under shadow mode or a forced close"
        extra += ", policy and policy_version under a row of a boundary sheet)" if rows else ")"
        raise ReceiptError(f"{where} must have the fields {', '.join(sorted(required))}{extra}")


def _check_policy(doc: Mapping[str, Any], where: str) -> None:
    policy = doc.get("policy")
    if not isinstance(policy, dict):
        raise ReceiptError(f"{where}policy must be a JSON object")
    try:
        Policy.from_dict(policy)
    except PolicyError as exc:
        raise ReceiptError(f"{where}policy: {exc.message}") from None
    _expect(doc.get("policy_version"), str, f"{where}policy_version")


def _check_shape(doc: Mapping[str, Any]) -> None:
    """Every field :func:`diff` reads has the type a receipt gives it."""
    unknown = set(doc) - _RECEIPT_KEYS
    if unknown:
        raise ReceiptError(f"unknown receipt field {shown(sorted(unknown)[0])}")
    _check_policy(doc, "")
    _expect(doc.get("receipt_hash"), str, "receipt_hash")
    for name, dep in doc["dependencies"].items():
        where = f"dependencies[{shown(name)}]"
        _expect(dep, dict, where)
        _check_fields(dep, _DEPENDENCY_KEYS, where, rows=True)
        if "policy" in dep:
            _check_policy(dep, f"{where}.")
        for key in ("remote_attempts", "local_rejections", "opens", _SHADOW_KEY):
            if key in dep:
                _expect(dep[key], int, f"{where}.{key}")
        _expect(dep["recovered_from_corruption"], bool, f"{where}.recovered_from_corruption")
        _expect(dep["final_state"], dict, f"{where}.final_state")
        _expect(dep["final_state"].get("state"), str, f"{where}.final_state.state")
        _expect(dep["transitions"], list, f"{where}.transitions")
        for index, record in enumerate(dep["transitions"]):
            at = f"{where}.transitions[{index}]"
            _expect(record, dict, at)
            _check_fields(record, _TRANSITION_KEYS, at)
            if _SHADOW_KEY in record and record[_SHADOW_KEY] is not True:
                raise ReceiptError(f"{at}.{_SHADOW_KEY} must be true when it is there")
            event = record["event"]
            _expect(event, dict, f"{at}.event")
            _expect(event.get("type"), str, f"{at}.event.type")
            _expect(event.get("at"), int, f"{at}.event.at")
            if "call" in event:
                _expect(event["call"], str, f"{at}.event.call")
            for key in ("from", "to", "reason"):
                _expect(record[key], str, f"{at}.{key}")


def diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two receipts; empty when they are equal.

    Per dependency it shows the first differing transition and every changed count.
    """
    lines: list[str] = []
    if a.get("policy") != b.get("policy"):
        pa, pb = a.get("policy") or {}, b.get("policy") or {}
        for key in sorted(set(pa) | set(pb)):
            if pa.get(key) != pb.get(key):
                lines.append(f"policy.{key}: {pa.get(key)} -> {pb.get(key)}")
    da, db = a["dependencies"], b["dependencies"]
    for name in sorted(set(da) | set(db)):
        if name not in da or name not in db:
            side = "only in B" if name not in da else "only in A"
            lines.append(f"[{name}] {side}")
            continue
        lines.extend(_diff_dependency(name, da[name], db[name]))
    return lines


def _diff_dependency(name: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    ta, tb = a.get("transitions", []), b.get("transitions", [])
    for index in range(max(len(ta), len(tb))):
        left = ta[index] if index < len(ta) else None
        right = tb[index] if index < len(tb) else None
        if left != right:
            lines.append(f"[{name}] first differing transition #{index + 1}:")
            lines.append(f"  A: {_describe(left)}")
            lines.append(f"  B: {_describe(right)}")
            break
    pa, pb = a.get("policy"), b.get("policy")
    if pa != pb:  # its own row of a boundary sheet (none: the receipt's policy)
        if isinstance(pa, Mapping) and isinstance(pb, Mapping):
            for key in sorted(set(pa) | set(pb)):
                if pa.get(key) != pb.get(key):
                    lines.append(f"[{name}] policy.{key}: {pa.get(key)} -> {pb.get(key)}")
        else:
            shown_a, shown_b = (
                f"row policy {side.get('policy_version')}" if "policy" in side else "the defaults"
                for side in (a, b)
            )
            lines.append(f"[{name}] policy: {shown_a} -> {shown_b}")
    for key in ("remote_attempts", "local_rejections", "opens"):
        if a.get(key) != b.get(key):
            lines.append(f"[{name}] {key}: {a.get(key)} -> {b.get(key)}")
    sa, sb = a.get("final_state") or {}, b.get("final_state") or {}
    if sa.get("state") != sb.get("state"):
        lines.append(f"[{name}] final state: {sa.get('state')} -> {sb.get('state')}")
    return lines


def _describe(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "(no transition)"
    event = record.get("event", {})
    call = f" {event['call']}" if "call" in event else ""
    return (
        f"at={event.get('at')} {event.get('type')}{call}: "
        f"{record.get('from')} -> {record.get('to')} ({record.get('reason')})"
    )
