"""Draining queued work: run what the ``queue`` mode saved, once its breaker closes.

Exactly once per idempotency key, across every drainer sharing the store. An item moves
by compare-and-set on its record (``Records``), and the core
decides what a drainer does with it (:func:`toolbreaker.core._degrade.queue_action`):

1. *claim*: ``queued`` → ``claimed`` with this drainer as holder and a lease (``until``);
2. ask the item's breaker; still open → back to ``queued``, and the breaker is not asked
   again in this drain;
3. *start*: ``claimed`` → ``running`` (compare-and-set, lease renewed) just before the
   tool is called: from here on the work may have happened;
4. record the outcome: ``done`` (with the masked result), back to ``queued`` when the
   failure certainly made nothing (a refused connection, a 503) and may be retried,
   ``failed`` when no retry can help (a 4xx), ``unknown`` when it may have committed.

Each move is the queued item's lifecycle (:data:`toolbreaker.core._degrade.QUEUE_TRANSITIONS`):
the drainer holds no list of statuses. An item handed to a person (``handed-off``) is
never run. A drainer killed between 1 and 3 leaves a ``claimed`` item whose lease runs
out: another drainer claims it again (it never started). A drainer killed after 3 leaves
a ``running`` item: the write protocol's rule for an unknown outcome applies, it is never
replayed. It goes to reconcile: the tool's read-only status check (by idempotency key)
says whether the work happened (``done``) or not (it stays ``unknown`` for a person to
decide). The lease is longer than the tool's deadline, so a live drainer always records
its outcome before its lease runs out.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from toolbreaker.core._degrade import (
    attempt_move,
    is_done,
    prunable,
    queue_action,
    queue_after,
    settled,
)
from toolbreaker.core._run import protocol
from toolbreaker.core._run.redact import redact, redact_text
from toolbreaker.errors import CircuitOpen, PolicyError, StoreUnavailable, StoreWriteUnknown
from toolbreaker.runtime._breaker._boundary import Boundary
from toolbreaker.runtime._breaker._breaker import Breaker
from toolbreaker.runtime._breaker._commit import may_have_committed
from toolbreaker.runtime._breaker._degrade import QUEUE_SCHEMA, QUEUE_SPACE
from toolbreaker.runtime._clock import wall_ms
from toolbreaker.runtime._fleet._registry import Registry
from toolbreaker.runtime._log import hook_failed, log
from toolbreaker.stores._protocol import Journal, Records, Store

__all__ = ["DrainReport", "PruneReport", "drain", "prune_done", "queued_items"]

#: How much longer than the tool's deadline a drainer's lease lasts.
LEASE_MARGIN_MS: Final = 10_000
_MAX_RESULT: Final = 64 * 1024
#: The longest prune bound: ten years, in seconds.
_MAX_PRUNE_S: Final = 10 * 366 * 86400
_PRUNE_FIELDS: Final = ("dependency", "operation", "tool", "idempotency_key", "finished_at")

Reconcile = Callable[[str, Mapping[str, Any]], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class DrainReport:
    """What one drain did, by queue id.

    Attributes:
        done: items run to completion now.
        reconciled: items whose outcome was unknown and the status check found made.
        unknown: items whose outcome is unknown (never replayed; a person decides).
        failed: items that failed in a way no retry can help.
        requeued: items that failed without effect and wait for a later drain.
        waiting: items left queued because their breaker is still open.
        skipped: items held by another drainer, or with no tool registered here.
    """

    done: tuple[str, ...] = ()
    reconciled: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        """JSON-ready."""
        return {f.name: list(getattr(self, f.name)) for f in dataclasses.fields(self)}


def queued_items(store: Records, *, dependency: str | None = None) -> list[dict[str, Any]]:
    """Every queued item in ``store`` (optionally of one dependency), oldest first.

    Arguments are masked: this is for showing, not for running.
    """
    items = [
        redact(value)
        for _, value, _ in store.record_list(QUEUE_SPACE)
        if value.get("schema") == QUEUE_SCHEMA
        and (dependency is None or value.get("dependency") == dependency)
    ]
    return sorted(items, key=lambda v: (v.get("queued_at", 0), v.get("id", "")))


@dataclasses.dataclass(frozen=True, slots=True)
class PruneReport:
    """What one prune did (or, in a dry run, would do).

    Attributes:
        pruned: the items deleted, oldest first: ``id``, ``dependency``, ``operation``,
            ``tool``, ``idempotency_key``, ``finished_at`` and ``reconciled`` (masked).
        kept: done items not old enough yet (still dedupe markers).
        dry_run: nothing was deleted.
    """

    pruned: tuple[Mapping[str, Any], ...] = ()
    kept: int = 0
    dry_run: bool = False


def prune_done(
    store: Records,
    *,
    older_than: float,
    dependency: str | None = None,
    dry_run: bool = False,
    wall_clock: Callable[[], int] = wall_ms,
) -> PruneReport:
    """Delete the done work that finished more than ``older_than`` seconds ago.

    A done item is the queue's dedupe marker: while it is kept, the same idempotency key
    is answered "already queued" and never queued again. Pruning ends that window: a key
    pruned can be queued (and drained) again, so keep done work longer than a caller
    may retry the same work (a run guard's journal still answers its own run). Only
    ``done`` items are deleted (:func:`toolbreaker.core._degrade.prunable`): pending,
    claimed, running, failed and unknown items never are. Each deletion is a
    compare-and-set on the version read, so an item that changed meanwhile stays.

    Args:
        store: the store the work was queued in.
        older_than: seconds since the item finished (0: every done item).
        dependency: only this dependency's items.
        dry_run: report what would be deleted; delete nothing.
        wall_clock: wall-clock milliseconds (finish times compare across hosts).

    Raises:
        PolicyError: ``older_than`` is not a number of seconds from 0 (field
            ``older_than``).
        StoreUnavailable: the queue could not be listed.
    """
    if (
        isinstance(older_than, bool)
        or not isinstance(older_than, (int, float))
        or not 0 <= older_than <= _MAX_PRUNE_S
    ):
        raise PolicyError(
            f"older_than must be seconds from 0 to {_MAX_PRUNE_S}, got {older_than!r}",
            field="older_than",
        )
    bound_ms = round(older_than * 1000)
    now = wall_clock()
    pruned: list[tuple[int, Mapping[str, Any]]] = []
    kept = 0
    for key, item, version in store.record_list(QUEUE_SPACE):
        if item.get("schema") != QUEUE_SCHEMA or not is_done(item):
            continue
        if dependency is not None and item.get("dependency") != dependency:
            continue
        if not prunable(item, now, bound_ms):
            kept += 1
            continue
        if not dry_run and not store.record_delete(QUEUE_SPACE, key, version=version):
            continue  # changed meanwhile: not this prune's to delete
        summary = {name: item.get(name) for name in _PRUNE_FIELDS}
        summary["id"] = key
        summary["reconciled"] = item.get("reconciled") is True
        pruned.append((int(item["finished_at"]), redact(summary)))
        if not dry_run:
            log.info("toolbreaker: pruned the done queue item %s", key)
    pruned.sort(key=lambda p: (p[0], str(p[1]["id"])))
    return PruneReport(tuple(s for _, s in pruned), kept, dry_run)


def drain(
    store: Records,
    tools: Mapping[str, Callable[..., Any]],
    *,
    reconcile: Mapping[str, Reconcile] | None = None,
    dependency: str | None = None,
    registry: Registry | None = None,
    holder: str | None = None,
    lease_ms: int | None = None,
    wall_clock: Callable[[], int] = wall_ms,
) -> DrainReport:
    """Run the queued work in ``store`` whose breaker is closed, exactly once per key.

    Args:
        store: the store the work was queued in (it keeps records; shared by the fleet).
        tools: the tool callables by name, called with the queued arguments as keywords.
        reconcile: read-only status checks by tool name, called with the idempotency key
            and the arguments; a truthy answer means the work was made.
        dependency: only this dependency's items.
        registry: where the items' breakers come from (their sheet rows); by default a
            breaker per dependency with the default policy and the queued deadline.
        holder: this drainer's name in leases (default: host process id and random).
        lease_ms: how long a claim holds; at least the tool's deadline plus one second
            (default: the deadline plus ten seconds).
        wall_clock: wall-clock milliseconds (leases compare across hosts).

    Raises:
        StoreUnavailable: the queue could not be listed.
    """
    me = holder or f"{os.uname().nodename}.{os.getpid()}.{os.urandom(3).hex()}"
    drainer = _Drainer(store, tools, reconcile or {}, registry, me, lease_ms, wall_clock)
    try:
        for key, item, version in store.record_list(QUEUE_SPACE):
            if item.get("schema") != QUEUE_SCHEMA:
                continue
            if dependency is not None and item.get("dependency") != dependency:
                continue
            drainer.one(key, item, version)
    finally:
        for breaker in drainer.breakers.values():
            breaker.close()
    return drainer.report()


class _Drainer:
    def __init__(  # noqa: PLR0917 - built by drain() only
        self,
        store: Records,
        tools: Mapping[str, Callable[..., Any]],
        reconcile: Mapping[str, Reconcile],
        registry: Registry | None,
        holder: str,
        lease_ms: int | None,
        wall_clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.tools = tools
        self.reconcile = reconcile
        self.registry = registry
        self.holder = holder
        self.lease_ms = lease_ms
        self.wall = wall_clock
        self.breakers: dict[str, Breaker] = {}
        self.closed_out: set[str] = set()  # breakers that refused in this drain
        self.out: dict[str, list[str]] = {f.name: [] for f in dataclasses.fields(DrainReport)}

    def report(self) -> DrainReport:
        return DrainReport(**{k: tuple(v) for k, v in self.out.items()})

    def one(self, key: str, item: dict[str, Any], version: int) -> None:
        action = queue_action(item, self.wall())
        if action == "reconcile":
            self._reconcile(key, item, version)
            return
        if action == "skip":
            if not settled(item):  # held by a live drainer, or an item that does not validate
                self.out["skipped"].append(key)
            return
        tool = item.get("tool")
        fn = self.tools.get(tool) if isinstance(tool, str) else None
        args = item.get("args")
        if fn is None or not isinstance(args, dict) or item.get("breaker") in self.closed_out:
            self.out["waiting" if fn is not None else "skipped"].append(key)
            return
        breaker = self._breaker(item)
        lease = self._lease_ms(breaker)
        claimed = {
            **item,
            "status": queue_after(item.get("status"), "claim"),
            "holder": self.holder,
            "until": self.wall() + lease,
        }
        version_after = self._put(key, claimed, version)
        if version_after is None:
            self.out["skipped"].append(key)  # another drainer was first
            return
        step = breaker.begin(str(tool), args)
        if step.answer is not None:
            self.closed_out.add(str(item.get("breaker")))
            self._put(
                key, {**item, "status": queue_after(claimed["status"], "release")}, version_after
            )
            self.out["waiting"].append(key)
            return
        started = {**claimed, "status": queue_after(claimed["status"], "start")}
        started["until"] = self.wall() + lease
        started["started_at"] = self.wall()
        version_after = self._put(key, started, version_after)
        if version_after is None:
            # The lease ran out before the start and another drainer has the item now.
            step.permit.record("ignored")
            self.out["skipped"].append(key)
            return
        log.info("toolbreaker: draining %s (%s)", key, tool)
        try:
            result = breaker.run(step, fn, **args)
        except CircuitOpen:
            # Hung calls hold the workers (reason "hung"): the call never started.
            step.permit.record("ignored")
            self._put(
                key, {**item, "status": queue_after(started["status"], "release")}, version_after
            )
            self.out["waiting"].append(key)
            return
        except Exception as exc:  # noqa: BLE001 - every failure is recorded on the item
            self._failed(key, started, version_after, breaker, step, exc)
            return
        step.succeeded(result)
        done = {**started, "status": queue_after(started["status"], "finish")}
        done.update(finished_at=self.wall(), result=_kept(result))
        if self._put(key, done, version_after) is None:
            # It stays running: once its lease runs out a drainer reconciles it, never
            # runs it again.
            log.error("toolbreaker: %s was done but could not be recorded as done", key)
        self._journal(done)
        self.out["done"].append(key)

    def _failed(  # noqa: PLR0917 - the pieces of one failed item
        self,
        key: str,
        started: dict[str, Any],
        version: int,
        breaker: Breaker,
        step: Any,
        exc: Exception,
    ) -> None:
        verdict = breaker.verdict_of(exc)
        step.failed(exc)
        error = redact_text(f"{type(exc).__name__}: {exc}")[:300]
        # Certainly not made and retryable: a later drain; not retryable: failed; may have
        # been made: unknown, never replayed (reconciled below).
        move = attempt_move(
            may_have_committed=may_have_committed(exc, verdict),
            retryable=verdict.kind == "failure",
        )
        update = {k: v for k, v in started.items() if k not in ("holder", "until")}
        update.update(
            status=queue_after(started["status"], move),
            error=error,
            attempts=int(started.get("attempts", 0)) + 1,
        )
        self._put(key, update, version)
        self.out[_BUCKETS[move]].append(key)
        if move == "lose":
            self._reconcile(key, update, version + 1)

    def _reconcile(self, key: str, item: dict[str, Any], version: int) -> None:
        """An item that may have been made: ask the status check, never run it again."""
        check = self.reconcile.get(str(item.get("tool")))
        unknown = {k: v for k, v in item.items() if k not in ("holder", "until")}
        unknown["status"] = queue_after(item.get("status"), "not-found")
        found: Any = None
        if check is not None:
            try:
                found = check(str(item.get("idempotency_key")), dict(item.get("args") or {}))
            except Exception as exc:  # noqa: BLE001 - an unreachable check proves nothing
                hook_failed(f"the reconcile check of {item.get('tool')} raised", exc)
        if found:
            done = {**unknown, "status": queue_after(item.get("status"), "found")}
            done.update(reconciled=True, result=_kept(found), finished_at=self.wall())
            if self._put(key, done, version) is not None:
                self._journal(done)
                if key in self.out["unknown"]:
                    self.out["unknown"].remove(key)
                self.out["reconciled"].append(key)
                return
        elif unknown["status"] != item.get("status"):
            self._put(key, unknown, version)
        if key not in self.out["unknown"]:
            self.out["unknown"].append(key)

    def _journal(self, item: Mapping[str, Any]) -> None:
        """Work a run guard queued is confirmed in its run's journal: a resumed run skips it.

        The write protocol's ``drained`` move: whatever the entry said (queued, maybe
        queued, unknown ...), the drainer made it.
        """
        task, key = item.get("task"), item.get("idempotency_key")
        journal = self.store
        if not isinstance(task, str) or not isinstance(key, str):
            return
        if not isinstance(journal, Journal):
            return
        try:
            before = journal.journal_get(task, key)
            entry = {
                **(before or {}),
                "tool": item.get("tool"),
                "idempotency_key": key,
                "status": protocol.after(protocol.read(before), "drained"),
                "queue_id": item.get("id"),
                "result": item.get("result"),
            }
            journal.journal_put(task, key, redact(entry))
        except Exception as exc:  # noqa: BLE001 - the work is done; the journal is a note
            hook_failed(f"journaling the drained {item.get('id')} in task {task!r}", exc)

    def _breaker(self, item: Mapping[str, Any]) -> Breaker:
        name = str(item.get("breaker"))
        breaker = self.breakers.get(name)
        if breaker is None:
            dependency = str(item.get("dependency"))
            operation = str(item.get("operation") or "default")
            if self.registry is not None:
                # The key a breaker had when it queued the item: as given.
                row = self.registry.get(dependency, operation, exact=True).boundary
            else:
                timeout = item.get("timeout")
                row = Boundary(
                    dependency,
                    operation,
                    timeout=timeout if isinstance(timeout, (int, float)) else 30.0,
                )
            # The drainer's breaker decides and records; it never degrades (no re-queue).
            row = dataclasses.replace(row, degrade=(), max_stale=None)
            clock = self.registry.clock if self.registry is not None else None
            breaker = Breaker(dependency, store=cast(Store, self.store), clock=clock, boundary=row)
            self.breakers[name] = breaker
        return breaker

    def _lease_ms(self, breaker: Breaker) -> int:
        deadline = round((breaker.timeout or 30.0) * 1000)
        if self.lease_ms is None:
            return deadline + LEASE_MARGIN_MS
        if self.lease_ms < deadline + 1000:
            raise PolicyError(
                f"lease_ms ({self.lease_ms}) must be at least the deadline of {breaker.key} "
                f"plus one second ({deadline + 1000})",
                field="lease_ms",
            )
        return self.lease_ms

    def _put(self, key: str, value: Mapping[str, Any], version: int) -> int | None:
        """Move the item by compare-and-set; ``None`` unless the store confirmed it.

        A move whose answer was lost may have been made: the drainer goes on as if it was
        not (it never runs work it did not confirm it holds), and a move it did make is
        found later by its lease running out (claimed: claimed again; running: reconciled).
        """
        try:
            return self.store.record_put(QUEUE_SPACE, key, value, version=version)
        except StoreWriteUnknown as exc:
            hook_failed(f"the queue record {key} may have been written (no answer)", exc)
            return None
        except StoreUnavailable as exc:
            hook_failed(f"the queue record {key} could not be written", exc)
            return None


#: The report's bucket of each way a started item's failed attempt ends.
_BUCKETS: Final = {"lose": "unknown", "requeue": "requeued", "fail": "failed"}


def _kept(result: Any) -> Any:
    """A result as the queue keeps it: JSON, masked, at most 64 KiB (else a note)."""
    try:
        text = json.dumps(redact(result), default=str)
    except (TypeError, ValueError, RecursionError):
        return {"kept": False}
    return json.loads(text) if len(text) <= _MAX_RESULT else {"kept": False}
