"""Active health checks: recovery that spends no user call.

While a breaker whose row has a ``HealthCheck`` is open and its cooldown
has elapsed (or it is half-open with a free probe slot), a health checker runs the check
and feeds its result to the core as a **probe**: it asks for a probe with an event marked
``health_check`` (the same lease, the same success quorum, the same receipts as a user's
probe) and settles it with the check's outcome. The row's policy says ``probes =
"health-check"``, so the core never admits a user's call as a probe: real traffic is not
used to find out whether a dead dependency is back.

Bounded:

- one checker per breaker key across every process sharing the store: a lease in the
  store's records (space ``toolbreaker.health``), renewed at every check and taken over
  once its holder has stopped renewing it (``3 * interval + timeout``);
- jittered intervals (a fifth either way);
- the check has its own deadline; a check that raises, returns ``False``, runs past its
  deadline or hangs is a failed probe, never a crash of the checker; a hung sync check
  keeps its thread, and its breaker gets no new check until that thread returns
  (counted as ``hung``).

Two flavours: a daemon thread (:meth:`HealthChecker.start`; async checks run on the
thread's own event loop), or a task on the running loop (:meth:`HealthChecker.run`, with
store I/O in worker threads and async checks awaited on that loop).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from toolbreaker.core._breaker.predicates import check_due
from toolbreaker.core._breaker.state import BreakerState
from toolbreaker.errors import StoreUnavailable
from toolbreaker.runtime._breaker._boundary import HealthCheck
from toolbreaker.runtime._breaker._breaker import Breaker, Permit
from toolbreaker.runtime._breaker._classify import SUCCESS, Verdict
from toolbreaker.runtime._log import hook_failed, log
from toolbreaker.stores._protocol import Records
from toolbreaker.stores._records import acquire_lease, release_lease

if TYPE_CHECKING:
    import asyncio

__all__ = ["HEALTH_SPACE", "HealthChecker", "HealthStats"]

#: The record space of health checkers' leases.
HEALTH_SPACE: Final = "toolbreaker.health"
_FAILED: Final = Verdict("failure", "health-check-failed")
_RAISED: Final = Verdict("failure", "health-check-error")
_TIMEOUT: Final = Verdict("failure", "timeout")


@dataclasses.dataclass
class HealthStats:
    """What a health checker did.

    Attributes:
        checks: checks run (each one a probe the core admitted).
        passed: checks that passed.
        failed: checks that failed (raised, returned ``False``, a non-2xx status).
        timeouts: checks that ran past their deadline.
        hung: due checks skipped because the previous one's thread has not returned.
        not_held: due checks left to the process that holds the key's lease.
        lease_errors: leases that could not be asked for (the store was unavailable).
        errors: faults of the checker itself around a check (counted, logged masked).
    """

    checks: int = 0
    passed: int = 0
    failed: int = 0
    timeouts: int = 0
    hung: int = 0
    not_held: int = 0
    lease_errors: int = 0
    errors: int = 0


class HealthChecker:
    """Runs the health checks of a set of breakers (see the module docstring).

    Args:
        breakers: returns the breakers to look after (called at every pass; a
            registry passes its live breakers).
        holder: this checker's name in leases; unique per checker by default.
        tick: seconds between passes; by default a fifth of the shortest interval,
            between 0.02 and 1.
    """

    def __init__(
        self,
        breakers: Callable[[], Iterable[Breaker]],
        *,
        holder: str | None = None,
        tick: float | None = None,
    ) -> None:
        self.breakers = breakers
        import socket  # a checker's: no registry loads socket for this

        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.stats = HealthStats()
        self._tick = tick
        self._next: dict[str, float] = {}
        self._busy: dict[str, threading.Thread] = {}
        self._held: dict[str, Records] = {}
        import random  # a checker's: random loads with the first, not with a registry

        self._jitter = random.Random()  # noqa: S311 - jitter, not secrets
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()

    # -- one pass ---------------------------------------------------------------------

    def check_once(self) -> int:
        """One pass: run every due check, in this thread; returns how many ran."""
        ran = 0
        for breaker, check in self._due():
            permit = self._probe(breaker)
            if permit is None:
                continue
            verdict = self._run_sync(breaker.key, check)
            self._settle(permit, verdict)
            ran += 1
        return ran

    async def acheck_once(self) -> int:
        """One pass on the running loop: store I/O in threads, async checks awaited here."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        ran = 0
        for breaker, check in await asyncio.to_thread(self._due):
            permit = await asyncio.to_thread(self._probe, breaker)
            if permit is None:
                continue
            verdict = await self._run_async(breaker.key, check)
            await asyncio.to_thread(self._settle, permit, verdict)
            ran += 1
        return ran

    def _due(self) -> list[tuple[Breaker, HealthCheck]]:
        """The breakers whose check is due now and whose lease this checker holds."""
        due = []
        now = time.monotonic()
        for breaker in self._all():
            try:
                check = breaker.boundary.health_check
                if check is None or (check.check is None and check.url is None):
                    continue
                key = breaker.key
                need = self._need(breaker)
                if need != "due":
                    if need == "idle":
                        # Healthy (or held by an operator): the lease goes back. While
                        # cooling down between checks it is kept, so one process checks.
                        self._next.pop(key, None)
                        self._release(key)
                    continue
                if now < self._next.get(key, 0.0):
                    continue
                busy = self._busy.get(key)
                if busy is not None and busy.is_alive():
                    self.stats.hung += 1
                    self._next[key] = now + self._interval(check)
                    continue
                if not self._lease(breaker, check):
                    self._next[key] = now + self._interval(check)
                    continue
                self._next[key] = now + self._interval(check)
                due.append((breaker, check))
            except Exception as exc:  # noqa: BLE001 - the checker never dies of one breaker
                self.stats.errors += 1
                hook_failed(f"health checker failed looking at {breaker.key}", exc)
        return due

    def _all(self) -> list[Breaker]:
        found = []
        for breaker in self.breakers():
            found.append(breaker)
            found.extend(breaker.scopes().values())
        return found

    @staticmethod
    def _need(breaker: Breaker) -> str:
        """``due`` (a probe now), ``wait`` (unhealthy, not yet) or ``idle`` (no checks).

        Read from the store, not the view: another process may have opened it.
        """
        state: BreakerState = breaker.store.load(breaker.key, breaker.policy)
        return check_due(state, breaker.clock(), breaker.policy)

    def _interval(self, check: HealthCheck) -> float:
        return check.interval_ms / 1000 * self._jitter.uniform(0.8, 1.2)

    def _lease(self, breaker: Breaker, check: HealthCheck) -> bool:
        store = breaker.store
        if not isinstance(store, Records):
            return True  # a store without records is one process's: nobody to share with
        ttl = 3 * check.interval_ms + round(check.timeout * 1000)
        try:
            held = acquire_lease(
                store,
                HEALTH_SPACE,
                breaker.key,
                self.holder,
                ttl_ms=ttl,
                now_ms=round(time.time() * 1000),
            )
        except StoreUnavailable:
            self.stats.lease_errors += 1
            return False
        if held:
            self._held[breaker.key] = store
        else:
            self.stats.not_held += 1
        return held

    def _release(self, key: str) -> None:
        store = self._held.pop(key, None)
        if store is not None:
            try:
                release_lease(store, HEALTH_SPACE, key, self.holder)
            except StoreUnavailable:
                self.stats.lease_errors += 1  # it runs out by itself

    def _probe(self, breaker: Breaker) -> Permit | None:
        try:
            permit = breaker.health_probe()
        except Exception as exc:  # noqa: BLE001 - never crash the checker
            self.stats.errors += 1
            hook_failed(f"health probe of {breaker.key} could not be asked for", exc)
            return None
        return permit if isinstance(permit, Permit) else None

    def _settle(self, permit: Permit, verdict: Verdict) -> None:
        self.stats.checks += 1
        if verdict is SUCCESS:
            self.stats.passed += 1
        elif verdict is _TIMEOUT:
            self.stats.timeouts += 1
        else:
            self.stats.failed += 1
        try:
            permit.record(verdict)
        except Exception as exc:  # noqa: BLE001 - the outcome is lost, never a success
            self.stats.errors += 1
            hook_failed(f"health probe of {permit.breaker.key} could not be settled", exc)

    # -- running one check -------------------------------------------------------------

    def _run_sync(self, key: str, check: HealthCheck) -> Verdict:
        """Run the check in its own thread, waiting at most its deadline."""
        box: list[Verdict] = []
        thread = threading.Thread(
            target=lambda: box.append(_verdict_of(check)),
            name=f"toolbreaker-health-{key}",
            daemon=True,
        )
        self._busy[key] = thread
        thread.start()
        thread.join(check.timeout)
        if thread.is_alive() or not box:
            return _TIMEOUT
        return box[0]

    async def _run_async(self, key: str, check: HealthCheck) -> Verdict:
        import asyncio  # the event loop's own: a sync program never loads asyncio

        fn = check.check
        if fn is not None and inspect.iscoroutinefunction(fn):
            try:
                result = await asyncio.wait_for(fn(), check.timeout)
            except TimeoutError:
                return _TIMEOUT
            except Exception:  # noqa: BLE001 - a raising check is a failed probe
                return _RAISED
            return _FAILED if result is False else SUCCESS
        return await asyncio.to_thread(self._run_sync, key, check)

    # -- flavours ----------------------------------------------------------------------

    def _pause(self) -> float:
        if self._tick is not None:
            return self._tick
        intervals = [
            b.boundary.health_check.interval_ms
            for b in self.breakers()
            if b.boundary.health_check is not None
        ]
        return min(1.0, max(0.02, min(intervals, default=1000) / 5000))

    def start(self) -> HealthChecker:
        """Check on a daemon thread until :meth:`stop`; returns the checker."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="toolbreaker-health", daemon=True
                )
                self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._pause()):
            try:
                self.check_once()
            except Exception as exc:  # noqa: BLE001 - the thread lives on
                self.stats.errors += 1
                hook_failed("health checker pass failed", exc)

    async def run(self) -> None:
        """Check on the running loop until :meth:`stop` (``asyncio.create_task(...)``)."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        while not self._stop.is_set():
            await asyncio.sleep(self._pause())
            try:
                await self.acheck_once()
            except Exception as exc:  # noqa: BLE001 - the task lives on
                self.stats.errors += 1
                hook_failed("health checker pass failed", exc)

    def start_task(self) -> asyncio.Task[None]:
        """:meth:`run` as a task on the running loop; returns the task."""
        import asyncio  # the event loop's own: a sync program never loads asyncio

        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())
        return self._task

    def stop(self) -> None:
        """Stop checking and give up every lease this checker holds."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        if self._task is not None:
            self._task.cancel()
        for key in tuple(self._held):
            self._release(key)
        log.debug("toolbreaker: health checker %s stopped", self.holder)


def _verdict_of(check: HealthCheck) -> Verdict:
    """Run ``check`` here and now (any exception a failed check)."""
    import asyncio  # the event loop's own: a sync program never loads asyncio

    try:
        if check.url is not None:
            return _get(check.url, check.timeout)
        fn = check.check
        if fn is None:
            return _FAILED
        result: Any = fn()
        if inspect.isawaitable(result):
            result = asyncio.run(_bounded(result, check.timeout))
    except TimeoutError:
        return _TIMEOUT
    except Exception:  # noqa: BLE001 - a raising check is a failed probe
        return _RAISED
    return _FAILED if result is False else SUCCESS


async def _bounded(awaitable: Any, timeout: float) -> Any:
    import asyncio  # the event loop's own: a sync program never loads asyncio

    return await asyncio.wait_for(awaitable, timeout)


def _get(url: str, timeout: float) -> Verdict:
    import urllib.error  # an HTTP check's own: a registry without one never loads urllib
    import urllib.request

    request = urllib.request.Request(url, method="GET")  # noqa: S310 - http(s) checked by HealthCheck
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310
            status = reply.status
            reply.read(65536)
    except urllib.error.HTTPError as exc:
        return Verdict("failure", f"http-{exc.code}", status=exc.code)
    except TimeoutError:
        return _TIMEOUT
    except OSError:
        return _RAISED
    return SUCCESS if 200 <= status < 300 else Verdict("failure", f"http-{status}", status=status)
