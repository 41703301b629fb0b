"""Receipts: deterministic, replayable records of what the breakers did.

A receipt (schema ``toolbreaker.receipt/v1``) holds the policy and its version and, per
dependency, every transition, the counts of remote attempts, local rejections and
openings (and, under shadow mode or a forced close, of requests that would have been
rejected), and the final state. ``receipt_hash`` is the SHA-256 of the canonical JSON of
everything else, so the same trace and policy give byte-identical receipts on every
machine, and one changed event gives another hash and a non-empty :func:`diff`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from toolbreaker.core.breaker.machine import apply
from toolbreaker.core.breaker.policy import Policy
from toolbreaker.core.breaker.state import OPEN, OUTCOME_TYPES, BreakerState, Event, Transition
from toolbreaker.core.canonical import sha256_hex
from toolbreaker.errors import ReceiptError, TraceError

__all__ = [
    "RECEIPT_SCHEMA",
    "Replay",
    "diff",
    "dump_receipt",
    "load_receipt",
    "replay",
    "summarise",
]

RECEIPT_SCHEMA: Final = "toolbreaker.receipt/v1"


@dataclasses.dataclass(slots=True)
class _Ledger:
    """The calls of one dependency: who was admitted in which generation."""

    state: BreakerState
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
    every decision.
    """

    def __init__(self, policy: Policy, initial: Mapping[str, BreakerState] | None = None) -> None:
        self.policy = policy
        self._ledgers = {dep: _Ledger(state) for dep, state in (initial or {}).items()}

    def feed(self, event: Event) -> tuple[Transition, ...]:
        """Apply one trace event; raises :class:`TraceError` for impossible input."""
        dep = event.dependency
        ledger = self._ledgers.get(dep)
        if ledger is None:
            ledger = self._ledgers[dep] = _Ledger(BreakerState())
        if event.at < ledger.last_at:
            raise TraceError(
                f"time went backwards for dependency {json.dumps(dep)}: "
                f"{event.at} after {ledger.last_at}"
            )
        if event.type == "request":
            ledger.requests += 1
            call = event.call or f"#{ledger.requests}"
            if call in ledger.seen:
                raise TraceError(f"duplicate call id {json.dumps(call)} for {json.dumps(dep)}")
            ledger.seen.add(call)
            event = Event("request", event.at, dep, call)
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
        ledger.state, records = apply(ledger.state, event, self.policy)
        ledger.last_at = event.at
        ledger.transitions.extend(records)
        if event.type == "request" and event.call is not None:
            if records[-1].attempted:
                ledger.unsettled[event.call] = records[-1].generation
            else:
                ledger.rejected[event.call] = None
        return records

    def receipt(self) -> dict[str, Any]:
        """The receipt of everything fed so far, with its hash."""
        return summarise(
            self.policy,
            {dep: (ledger.transitions, ledger.state) for dep, ledger in self._ledgers.items()},
        )


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


def summarise(
    policy: Policy,
    dependencies: Mapping[str, tuple[Iterable[Transition], BreakerState]],
) -> dict[str, Any]:
    """Build a receipt from per-dependency transitions and final states."""
    deps: dict[str, Any] = {}
    for name, (transitions, final) in dependencies.items():
        records = list(transitions)
        deps[name] = {
            "transitions": [record.to_dict() for record in records],
            "remote_attempts": sum(record.attempted for record in records),
            "local_rejections": sum(record.rejected for record in records),
            "opens": sum(r.to_phase == OPEN and r.from_phase != OPEN for r in records),
            "final_state": final.to_dict(),
            "recovered_from_corruption": final.recovered_from_corruption,
        }
        if policy.admits_all or any(record.would_reject for record in records):
            # Only under shadow mode or a forced close, so other receipts keep their bytes.
            deps[name]["would_reject"] = sum(record.would_reject for record in records)
    body: dict[str, Any] = {
        "schema": RECEIPT_SCHEMA,
        "policy": policy.to_dict(),
        "policy_version": policy.version,
        "dependencies": deps,
    }
    return {**body, "receipt_hash": sha256_hex(body)}


def dump_receipt(receipt: Mapping[str, Any]) -> str:
    """The printed form of a receipt: sorted keys, two-space indent, trailing newline."""
    return json.dumps(receipt, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load_receipt(path: str | Path) -> dict[str, Any]:
    """Read a receipt file and check its schema and hash."""
    name = str(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReceiptError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise ReceiptError(f"not a JSON receipt ({exc})", file=name, line=line) from None
    if not isinstance(doc, dict) or doc.get("schema") != RECEIPT_SCHEMA:
        raise ReceiptError(f"not a {RECEIPT_SCHEMA} document", file=name)
    if not isinstance(doc.get("dependencies"), dict):
        raise ReceiptError("receipt has no dependencies table", file=name)
    body = {key: value for key, value in doc.items() if key != "receipt_hash"}
    if sha256_hex(body) != doc.get("receipt_hash"):
        raise ReceiptError("receipt_hash does not match its content (edited?)", file=name)
    return doc


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
