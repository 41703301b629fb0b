"""What a run guard keeps in its journal, and what it shows of it: masked, bounded.

The journal's statuses and their meaning are the write protocol's
(:mod:`toolbreaker.core._run.protocol`); this module only shapes the documents: an entry
as it is stored, a result as it is kept, a step as a stop packet lists it, and what an
operator does first about the run's unresolved writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from toolbreaker.core._run import protocol
from toolbreaker.core._run.redact import redact

__all__ = [
    "MAX_JOURNALED_RESULT",
    "budget_extension",
    "entry_for",
    "journaled",
    "packet_steps",
    "settle_first",
    "step_of",
]

#: The largest result a journal entry keeps, in bytes of JSON.
MAX_JOURNALED_RESULT: Final = 64 * 1024
_STEP_FIELDS: Final = (
    "tool",
    "idempotency_key",
    "external_id",
    "status",
    "fingerprint",
    "at",
    "queue_id",
    "reconciliation_id",
)


def entry_for(
    fields: Mapping[str, Any],
    result: Any,
    *,
    external_id: Callable[[Any], str | None] | None = None,
) -> dict[str, Any]:
    """A journal entry: ``fields``, plus the result's external id and the result itself.

    Masked: the journal keeps what resume and reconcile need, with secrets masked.
    """
    entry = dict(fields)
    if result is not None:
        if external_id is not None:
            try:
                entry["external_id"] = external_id(result)
            except Exception:  # noqa: BLE001 - an id we cannot read is just absent
                entry["external_id"] = None
        kept = journaled(result)
        if kept is not None:
            entry["result"] = kept
    masked: dict[str, Any] = redact(entry)
    return masked


def budget_extension(
    *, by: str, why: str, changed: Mapping[str, Any], stopped: str | None, at: int
) -> dict[str, Any]:
    """The journal's record of an operator raising a run's budget (``RunGuard.extend``).

    Not a write: it names no tool and its status is ``confirmed`` (the act is done), so
    a resume counts it as nothing unresolved and a stop packet lists no step for it.
    Masked.
    """
    entry = {
        "kind": "budget-extension",
        "status": protocol.after(None, "operator-made"),
        "by": by,
        "why": why,
        "changed": dict(changed),
        "stopped": stopped,
        "at": at,
    }
    masked: dict[str, Any] = redact(entry)
    return masked


def journaled(result: Any) -> Any:
    """A result as the journal keeps it (JSON, at most 64 KiB), else ``None``."""
    try:
        encoded = json.dumps(result, default=str)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(encoded) > MAX_JOURNALED_RESULT:
        return None
    return json.loads(encoded)


def step_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry as a stop packet lists it (old entries kept their ids in the result)."""
    step = {k: entry.get(k) for k in _STEP_FIELDS if entry.get(k) is not None}
    ids = {
        "queue_id": protocol.queue_id(entry),
        "reconciliation_id": protocol.reconciliation_id(entry),
    }
    step.update({name: found for name, found in ids.items() if found is not None})
    return step


def packet_steps(
    entries: Iterable[Mapping[str, Any]],
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """The packet's ``(confirmed, uncertain)`` steps: made writes, and unresolved ones."""
    read = [(protocol.read(e), e) for e in entries]
    confirmed = tuple(step_of(e) for s, e in read if protocol.made(s) and e.get("tool"))
    uncertain = tuple(step_of(e) for s, e in read if protocol.unresolved(s))
    return confirmed, uncertain


def settle_first(task: str, unresolved: tuple[Mapping[str, Any], ...]) -> str:
    """What an operator does first about the run's unresolved writes, by who settles them."""
    checks, queued, people = [], [], []
    for entry in unresolved:
        status = protocol.read(entry)
        key = str(entry.get("idempotency_key"))
        owner = protocol.settled_by(status)
        if owner == "drain":
            where = entry.get("queue_id") or "the queue"
            maybe = " (it may not be queued: look first)" if protocol.uncertain(status) else ""
            queued.append(f"{key} as {where}{maybe}")
        elif owner == "person":
            people.append(f"{key} ({entry.get('reconciliation_id')})")
        else:
            checks.append(key)
    steps = []
    if checks or not (queued or people):
        keys = ", ".join(checks) or "the last write"
        steps.append(
            f"reconcile {keys} with a read-only status check before any new write "
            "(RunGuard.resolve records the answer)"
        )
    if queued:
        steps.append(
            f"{', '.join(queued)} will be made by a drain (toolbreaker drain --list shows "
            "the queue): do not carry them out by hand"
        )
    if people:
        steps.append(f"{', '.join(people)} are a person's to carry out or drop")
    return "; ".join(steps) + f"; then resume task {task!r}: confirmed steps are skipped"
