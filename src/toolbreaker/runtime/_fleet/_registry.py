"""The registry: one breaker per (dependency, operation class), loaded from a boundary sheet.

A boundary sheet is TOML. ``[defaults]`` applies to every breaker; every other table is a
dependency whose sub-tables are operation classes::

    [defaults]
    timeout_ms = 4000             # every call needs a deadline; durations are in ms
    cooldown_ms = 30000

    [tools]
    local = ["search_catalog_snapshot"]   # fallbacks that need no breaker

    [search.read]
    tool = "search_catalog"       # the name the model sees
    fallback = "search_catalog_snapshot"
    fallback_note = "say in your answer that prices may be out of date"
    owner = "catalog-team"
    retryable = true
    failure_threshold = 4         # any Policy field
    window_ms = 60000

    [billing.write]
    tool = "charge_card"
    timeout_ms = 10000
    retryable = false
    failure_threshold = 6

A payment mutation never shares state or retry policy with a catalog read: each entry is
its own breaker. ``[mcp]`` is the MCP gateway's table, read by ``toolbreaker mcp``; the
registry leaves it alone. Invalid sheets fail at load with the field and line named: the
one parser of a sheet is :mod:`toolbreaker.runtime._sheet`, and the registry is built
from the :class:`~toolbreaker.runtime._sheet.Sheet` it returns.

Which row a breaker takes is one rule (:meth:`Registry.resolve`): the row asked for; a
dependency asked for without an operation takes its one row; an operation the sheet has no
row for (``exact=True`` for a key of its own), several rows and no operation, and a name
close to one the sheet has (``inventroy``) are refused with
:class:`~toolbreaker.errors.RowNotFound`; any other name runs on ``[defaults]`` and says
so (a log line, ``stats.on_defaults``). ``[defaults] unlisted = ["research"]`` names
dependencies left out on purpose.

Every duration names its unit, milliseconds (``timeout_ms``,
``max_stale_ms``, ``stale_every_ms``, ``health_check.timeout_ms``); the old spellings in
seconds (``timeout``...) still load, with a
:class:`~toolbreaker.errors.ToolbreakerDeprecationWarning` per field and load. The keyword
arguments of code (``Breaker(timeout=2.0)``, ``registry.get(..., timeout=...)``) are not
sheet fields: they stay in seconds, like every deadline a Python call takes.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from toolbreaker.core._breaker.keys import breaker_key
from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.sheet import Resolution, resolve
from toolbreaker.core._config import MAX_CONFIG_BYTES, build_toml, load_toml
from toolbreaker.core._files import printable, read_text
from toolbreaker.core._run.redact import redact_text
from toolbreaker.errors import PolicyError, RegistryFull
from toolbreaker.runtime._breaker._boundary import Boundary, BreakerOptions, Enforce, HealthCheck
from toolbreaker.runtime._breaker._breaker import Breaker, clock_of
from toolbreaker.runtime._breaker._degrade import check_store
from toolbreaker.runtime._breaker._watch import BreakerWatch, Watcher
from toolbreaker.runtime._clock import Clock
from toolbreaker.runtime._log import log
from toolbreaker.runtime._sheet import (
    Sheet,
    check_fallbacks,
    check_key,
    deadline,
    enforce,
    names,
    parse_sheet,
    warn_old_spellings,
)
from toolbreaker.stores._memory import MemoryStore
from toolbreaker.stores._protocol import Records, Store

if TYPE_CHECKING:  # typing on Python 3.10 has no Unpack; the annotation stays a string
    from pathlib import Path

    from typing_extensions import Unpack

    from toolbreaker.runtime._fleet._health import HealthChecker
    from toolbreaker.runtime._fleet._published import PolicyFollower, PublishedSheet
    from toolbreaker.runtime._run._guard import RunGuard

__all__ = ["Boundary", "Registry", "Resolution", "publish_policy"]


class Registry:
    """Hands out the same :class:`Breaker` for the same key, bounded in number.

    Args:
        default_policy: the policy of breakers the sheet does not describe.
        store: where every breaker's state lives (shared by all of them).
        clock: integer-millisecond monotonic clock; by default the store's own (Redis:
            the server's time), else this host's.
        default_timeout: deadline in seconds for breakers without one.
        boundaries: sheet rows, keyed by ``(dependency, operation)``.
        local_tools: tool names that may be fallbacks without a breaker of their own.
        max_breakers: the cardinality limit; past it :meth:`get` raises
            :class:`~toolbreaker.errors.RegistryFull`.
        strict: refuse keys the sheet does not describe instead of using the defaults.
        unlisted: dependencies the sheet leaves out on purpose: they run on the defaults
            even when their name closely resembles a row's (``[defaults] unlisted`` in a
            sheet).

    A registry is never empty in a boolean sense (``registry or Registry.from_toml(...)``
    keeps a registry that holds no breaker yet); ``len()`` counts its breakers.
    """

    def __init__(
        self,
        default_policy: Policy | None = None,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        default_timeout: float | None = None,
        default_enforce: Enforce = "thread",
        boundaries: Mapping[tuple[str, str], Boundary] | None = None,
        local_tools: frozenset[str] | set[str] | tuple[str, ...] = (),
        max_breakers: int = 10_000,
        strict: bool = False,
        unlisted: frozenset[str] | set[str] | tuple[str, ...] = (),
    ) -> None:
        if type(max_breakers) is not int or max_breakers <= 0:
            raise PolicyError("max_breakers must be a positive integer", field="max_breakers")
        self._unlisted = names(unlisted, "unlisted")
        self.default_policy = default_policy or Policy()
        self.store: Store = store if store is not None else MemoryStore()
        self.clock: Clock = clock or clock_of(self.store)
        # The defaults make a row of every key the sheet has none for: checked as a row's.
        self.default_timeout = (
            None
            if default_timeout is None
            else deadline(default_timeout, self.default_policy, "default_timeout")
        )
        self.default_enforce: Enforce = enforce(default_enforce, "default_enforce")
        self.max_breakers = max_breakers
        self.strict = strict
        self._boundaries = dict(boundaries or {})
        #: Whether a sheet configures this registry (rows, or a sheet of defaults alone):
        #: a breaker on the defaults is then worth a line.
        self.from_sheet = bool(self._boundaries)
        # (dependency, operation asked for) -> the row's key it resolved to, when another.
        self._aliases: dict[tuple[str, str | None], tuple[str, str]] = {}
        self._local_tools = frozenset(local_tools)
        self._breakers: dict[tuple[str, str], Breaker] = {}
        self._options: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._callables: dict[str, Callable[..., Any]] = {}
        self.follower: PolicyFollower | None = None
        self.health_checker: HealthChecker | None = None
        self._checks: dict[tuple[str, str], Callable[[], Any]] = {}
        # The observers of every breaker made here, now and later (see watch_breakers).
        self._watch = BreakerWatch()
        # The run guards adapters made for this registry's tools (held weakly: a task's
        # guard lives as long as its adapter keeps it), and who hears them (adopt_guard).
        self._guards: weakref.WeakSet[RunGuard] = weakref.WeakSet()
        self._guard_watchers: list[Callable[[RunGuard], None]] = []
        #: Where the rows came from, for people (each breaker carries it as
        #: ``Breaker.sheet``): the sheet file's name (:meth:`from_toml`), ``NAME rev. N``
        #: of a published sheet; ``None`` for a registry built in code.
        self.sheet: str | None = None
        # One line per old spelling of the sheet this registry was built from.
        self._notes: tuple[str, ...] = ()
        check_fallbacks(
            {
                key: (row.tool or row.dependency, row.fallback)
                for key, row in self._boundaries.items()
            },
            self._local_tools,
        )
        check_store(self._boundaries, self.store)

    @classmethod
    def from_toml(
        cls,
        path: str | Path,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> Registry:
        """Load a boundary sheet; errors name the file, the line and the field.

        A duration in its old spelling, in seconds (``timeout``...), loads as before
        and is reported once per field with its file, line and the new spelling, as a
        :class:`~toolbreaker.errors.ToolbreakerDeprecationWarning`.
        """
        registry: Registry = load_toml(
            path,
            lambda data: cls._of(
                parse_sheet(data),
                store=store,
                clock=clock,
                max_breakers=max_breakers,
                strict=strict,
            ),
        )
        warn_old_spellings(registry._notes)
        from pathlib import Path  # a sheet read from a file: pathlib loads with it

        registry.sheet = Path(path).name
        return registry

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> Registry:
        """Build a registry from a decoded boundary sheet.

        Old spellings warn as in :meth:`from_toml`, naming the table (no file).
        """
        registry = cls._of(
            parse_sheet(data), store=store, clock=clock, max_breakers=max_breakers, strict=strict
        )
        warn_old_spellings(registry._notes)
        return registry

    @classmethod
    def _of(
        cls,
        sheet: Sheet,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> Registry:
        """A registry of a validated sheet (its old spellings' notes kept, not warned)."""
        registry = cls(
            sheet.policy,
            store=store,
            clock=clock,
            default_timeout=sheet.timeout,
            default_enforce=sheet.enforce,
            boundaries={key: Boundary(*key, **row) for key, row in sheet.rows.items()},
            local_tools=sheet.local_tools,
            max_breakers=max_breakers,
            strict=strict,
            unlisted=sheet.unlisted,
        )
        registry.from_sheet = True
        registry._notes = sheet.notes
        return registry

    @classmethod
    def from_store(
        cls,
        store: Store,
        *,
        name: str = "default",
        follow: bool = True,
        poll: float = 5.0,
        clock: Clock | None = None,
        max_breakers: int = 10_000,
        strict: bool = False,
    ) -> Registry:
        """Build a registry from the sheet published in ``store``, and keep following it.

        The sheet is what ``toolbreaker policy publish`` (or :func:`publish_policy`)
        wrote; with ``follow`` (the default) the registry polls it (see :meth:`follow`).

        Raises:
            PolicyError: nothing is published under ``name``, or the published revision
                does not validate (a process never starts on a sheet it cannot check).
            StoreUnavailable: the store could not be read.
        """
        from toolbreaker.runtime._fleet._published import read_published

        records = _records(store)
        sheet = read_published(records, name)
        if sheet is None:
            raise PolicyError(
                f"no boundary sheet is published under {name!r} "
                "(toolbreaker policy publish SHEET.toml --store URL)",
                field="store",
            )
        registry = _build_text(
            cls,
            sheet.text,
            _origin(sheet),
            store=store,
            clock=clock,
            max_breakers=max_breakers,
            strict=strict,
        )
        warn_old_spellings(registry._notes)
        registry.sheet = _label(sheet)
        registry._follower(records, name, poll, sheet)
        if follow:
            registry.follow(poll=poll, name=name)
        return registry

    def follow(
        self, store: Store | None = None, *, name: str = "default", poll: float = 5.0
    ) -> PolicyFollower:
        """Follow the sheet published under ``name``: poll it every ``poll`` seconds.

        Polling runs on a daemon thread (jittered by up to a fifth either way), never on
        an event loop. Each new revision is validated here exactly as
        :meth:`from_toml` validates a file, then every live breaker takes its new row
        between calls (:meth:`Breaker.adopt`: the state stays; a call already admitted
        settles under the policy it was admitted under). A revision that does not
        validate is refused and counted; a store that cannot be read is counted; either
        way the registry keeps the last revision it validated. :meth:`close` stops it.

        Returns the follower (``refresh()`` polls at once; ``current``, ``adopted``,
        ``refused``, ``read_errors``).
        """
        records = _records(store if store is not None else self.store)
        follower = self.follower
        if follower is None or follower.store is not records or follower.name != name:
            if follower is not None:
                follower.stop()
            follower = self._follower(records, name, poll, None)
        if follower.poll != poll:
            follower.poll = _poll(follower, poll)
        for breaker in self:
            breaker.stamp_policy_version()
        follower.refresh()
        follower.start()
        return follower

    def _follower(
        self, records: Records, name: str, poll: float, current: PublishedSheet | None
    ) -> PolicyFollower:
        from toolbreaker.runtime._fleet._published import PolicyFollower

        self.follower = PolicyFollower(
            records, self._adopt_sheet, name=name, poll=poll, current=current
        )
        return self.follower

    @property
    def published(self) -> PublishedSheet | None:
        """The published revision this registry runs, if it follows one."""
        return None if self.follower is None else self.follower.current

    def _adopt_sheet(self, sheet: PublishedSheet) -> None:
        """Validate a published revision and give every live breaker its new row.

        Raises:
            PolicyError: the revision does not validate (nothing changed).
        """
        new = _build_text(
            type(self),
            sheet.text,
            _origin(sheet),
            store=self.store,
            clock=self.clock,
            max_breakers=self.max_breakers,
            strict=self.strict,
        )
        with self._lock:
            new._checks = self._checks  # checks registered in code outlive any sheet
            rows: dict[tuple[str, str], Boundary] = {}
            for key, breaker in self._breakers.items():
                row = new._row(key, self._options.get(key, {}), keep=breaker.boundary)
                if row.fallback is not None and row.fallback not in new.tool_names() | {
                    b.tool for b in self._breakers.values()
                }:
                    raise PolicyError(
                        f"fallback {row.fallback!r} of {key[0]}.{key[1]} is not a registered tool",
                        field=f"{key[0]}.{key[1]}.fallback",
                    )
                rows[key] = row
            # Validated as a whole: now swap, each breaker between two of its calls.
            self.default_policy = new.default_policy
            self.default_timeout = new.default_timeout
            self.default_enforce = new.default_enforce
            self._boundaries = new._boundaries
            self._unlisted = new._unlisted
            self._aliases.clear()
            self._local_tools = new._local_tools
            self.sheet = _label(sheet)
            for key, row in rows.items():
                self._breakers[key].sheet = self.sheet
                self._breakers[key].adopt(row)
        # Adopted, never refused for a spelling; a poll runs on the follower's thread,
        # where a warning would reach no one: the log says it, once per revision.
        for note in new._notes:
            log.warning(
                f"toolbreaker: published sheet {sheet.name!r} revision {sheet.revision} uses "
                f"an old spelling: {note}"
            )

    def _row(
        self, key: tuple[str, str], options: Mapping[str, Any], *, keep: Boundary | None = None
    ) -> Boundary:
        """The row of ``key`` (the defaults when the sheet has none), with ``options``."""
        dependency, operation = key
        row = self._boundaries.get(key)
        if row is None:
            if self.strict and keep is not None:
                return keep  # a strict sheet that dropped a live row: it keeps its last one
            row = Boundary(
                dependency,
                operation,
                self.default_policy,
                timeout=self.default_timeout,
                enforce=self.default_enforce,
                defaults=True,
            )
        row = row.with_options(options) if options else row
        check = self._checks.get(key)
        if check is not None:
            given = row.health_check or HealthCheck()
            row = row.with_options(
                {"health_check": dataclasses.replace(given, check=check, url=None)}
            )
        return row

    def health_check(
        self, dependency: str, check: Callable[[], Any], *, operation: str = "default"
    ) -> None:
        """Register the health check of ``(dependency, operation)`` in code.

        ``check`` is a callable or coroutine function of no arguments: it passes unless
        it raises or returns ``False``. The row's ``health_check`` table (interval,
        timeout) applies; a row without one gets the defaults (every 2 s, 1 s deadline).
        A check registered here replaces the row's ``url``. From now on only the checker
        probes this breaker; the registry's checker (:meth:`start_health_checks`) runs
        it. A live breaker takes the new row at once.

        Raises:
            PolicyError: ``check`` is not callable, or the row cannot hold it.
        """
        check_key(dependency, "dependency")
        check_key(operation, "operation")
        if not callable(check):
            raise PolicyError("a health check must be callable", field="health_check")
        key = (dependency, operation)
        with self._lock:
            self._checks[key] = check
            breaker = self._breakers.get(key)
            if breaker is not None:
                breaker.adopt(self._row(key, self._options.get(key, {})))
        if breaker is not None:
            self._ensure_checker()

    def start_health_checks(self, *, on_loop: bool = False) -> HealthChecker:
        """Start the registry's health checker (once) and return it.

        By default it runs on a daemon thread (async checks on that thread's own loop).
        With ``on_loop`` it runs as a task on the running event loop (call it from a
        coroutine): async checks are awaited there, store I/O goes to worker threads.
        :meth:`get` starts the thread flavour by itself when it creates a breaker whose
        row has a health check, unless a checker was started before. :meth:`close`
        stops it.
        """
        with self._lock:
            checker = self.health_checker
            if checker is None:
                from toolbreaker.runtime._fleet._health import HealthChecker

                checker = self.health_checker = HealthChecker(lambda: tuple(self))
            else:
                return checker
        if on_loop:
            checker.start_task()
        else:
            checker.start()
        return checker

    def _ensure_checker(self) -> None:
        if self.health_checker is None:
            self.start_health_checks()

    def resolve(
        self, dependency: str, operation: str | None = None, *, exact: bool = False
    ) -> Resolution:
        """Where the breaker of ``(dependency, operation)`` takes its configuration.

        The one rule :meth:`get`, and through it every adapter, follows (see
        :func:`~toolbreaker.core._breaker.sheet.resolve`, and the module docs). Makes no
        breaker.

        Raises:
            RowNotFound: the sheet does not describe the key as asked (see above), or the
                registry is ``strict`` and has no row for it.
            PolicyError: ``dependency`` or ``operation`` is not a valid name.
        """
        check_key(dependency, "dependency")
        if operation is not None:
            check_key(operation, "operation")
        return resolve(
            {key: row.tool for key, row in self._boundaries.items()},
            dependency,
            operation,
            exact=exact,
            strict=self.strict,
            unlisted=self._unlisted,
        )

    def get(
        self,
        dependency: str,
        operation: str | None = None,
        *,
        exact: bool = False,
        **options: Unpack[BreakerOptions],
    ) -> Breaker:
        """The breaker of ``(dependency, operation)``, created on first use.

        Its row is :meth:`resolve`'s answer: ``get("inventory")`` on a sheet whose one
        inventory row is ``[inventory.read]`` is that row's breaker. ``options`` (the
        breaker's own, ``BreakerOptions``) apply only when the
        breaker is created, over its row.

        Raises:
            RegistryFull: the registry already holds ``max_breakers`` breakers.
            RowNotFound: the sheet does not describe the key as asked (:meth:`resolve`).
            PolicyError: an option is invalid.
        """
        breaker = self._breakers.get((dependency, operation or "default"))
        if breaker is not None:
            return breaker
        alias = self._aliases.get((dependency, operation))
        if alias is not None:
            return self._breakers[alias]
        found = self.resolve(dependency, operation, exact=exact)
        key = (found.dependency, found.operation)
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                if len(self._breakers) >= self.max_breakers:
                    raise RegistryFull(self.max_breakers, breaker_key(*key))
                breaker = self._create(*key, options)
                breaker.sheet = self.sheet
                # Observers attach before anyone can call it: recorded from its first call.
                self._watch.tell(breaker)
                self._breakers[key] = breaker
                if options:
                    self._options[key] = dict(options)
                if self.follower is not None:
                    breaker.stamp_policy_version()
            if key != (dependency, operation or "default"):
                self._aliases[(dependency, operation)] = key
        if breaker.boundary.health_check is not None and self.health_checker is None:
            self._ensure_checker()
        return breaker

    def _create(self, dependency: str, operation: str, options: Mapping[str, Any]) -> Breaker:
        row = self._row((dependency, operation), options)
        if row.fallback is not None and row.fallback not in self.tool_names():
            raise PolicyError(
                f"fallback {row.fallback!r} of {dependency}.{operation} is not a registered tool",
                field=f"{dependency}.{operation}.fallback",
            )
        breaker = Breaker(dependency, store=self.store, clock=self.clock, boundary=row)
        breaker.degradation.tools = self._callables
        if row.defaults and self.from_sheet:
            # Once per breaker: it is made once. Names are configuration, yet a name
            # built from a URL can carry a credential.
            log.warning(
                printable(
                    redact_text(
                        f"toolbreaker: breaker {breaker.key!r} runs on the boundary sheet's "
                        f"[defaults]: the sheet has no [{dependency}.{operation}] row"
                    )
                )
            )
        return breaker

    def watch_breakers(self, fn: Watcher) -> Callable[[], None]:
        """Call ``fn(breaker)`` for every breaker this registry holds, now and later.

        ``fn`` hears each breaker the registry has, then each one :meth:`get` makes, before
        that breaker is handed out (so what ``fn`` attaches hears its first call); each
        exactly once. It runs under the registry's lock: it must be quick and must not
        call back into the registry. One that raises is counted in the breaker's
        ``stats.listener_errors`` and logged; the breaker is made all the same. A scoped
        row's tenant breakers are not told apart: they hear the row's listeners
        (:meth:`Breaker.family` lists them). Returns a remover.

        Observers use this through :class:`~toolbreaker.runtime.Attachment`
        (``TraceRecorder.attach(registry)`` and the like).
        """
        with self._lock:
            remove = self._watch.watch(fn, tuple(self._breakers.values()))

        def unwatch() -> None:
            with self._lock:
                remove()

        return unwatch

    def adopt_guard(self, guard: RunGuard) -> None:
        """Count ``guard`` among this registry's: observers attached to it hear its stops.

        What an adapter calls for each run guard it makes (one per task, as LangChain's
        middleware does): an event stream, a recorder or OpenTelemetry attached to the
        registry then hears the guard's stops and notices as it hears the breakers, now
        and later, without knowing the task. The registry holds it weakly.
        """
        with self._lock:
            if guard in self._guards:
                return
            self._guards.add(guard)
            watchers = tuple(self._guard_watchers)
            for fn in watchers:  # under the lock, as watch_breakers tells its watchers
                fn(guard)

    def watch_guards(self, fn: Callable[[RunGuard], None]) -> Callable[[], None]:
        """Call ``fn(guard)`` for every run guard adopted here, now and later; a remover.

        As :meth:`watch_breakers`: under the registry's lock, so ``fn`` must be quick.
        Observers use this through :class:`~toolbreaker.runtime.Attachment`.
        """
        with self._lock:
            self._guard_watchers.append(fn)
            for guard in tuple(self._guards):
                fn(guard)

        def unwatch() -> None:
            with self._lock:
                if fn in self._guard_watchers:
                    self._guard_watchers.remove(fn)

        return unwatch

    def register_local(self, name: str, fn: Callable[..., Any]) -> None:
        """Register the code of a local tool, run by rows whose ``degrade`` names ``degraded``.

        ``name`` must be a tool the registry knows (``[tools] local`` or a row's tool): a
        row with ``fallback = name`` and ``degrade = ["degraded", ...]`` then answers with
        ``fn(**args)`` (labelled degraded) while its own tool is unavailable.

        Raises:
            PolicyError: ``name`` is not a known tool, or ``fn`` is not callable.
        """
        if name not in self.tool_names():
            raise PolicyError(f"{name!r} is not a registered tool", field="tools.local")
        if not callable(fn):
            raise PolicyError(f"the local tool {name!r} must be callable", field="tools.local")
        self._callables[name] = fn

    def tool_names(self) -> frozenset[str]:
        """Every tool name the registry knows: sheet rows, live breakers, local tools."""
        names = {row.tool or row.dependency for row in self._boundaries.values()}
        names.update(b.tool for b in self._breakers.values())
        return frozenset(names) | self._local_tools

    def for_tool(self, tool: str) -> Breaker:
        """The breaker of the sheet row whose ``tool`` is ``tool``.

        Raises:
            KeyError: no sheet row or live breaker has that tool name.
        """
        for breaker in tuple(self._breakers.values()):
            if breaker.tool == tool:
                return breaker
        for (dependency, operation), row in self._boundaries.items():
            if (row.tool or dependency) == tool:
                return self.get(dependency, operation)
        raise KeyError(tool)

    def boundaries(self) -> dict[tuple[str, str], Boundary]:
        """The sheet rows, keyed by ``(dependency, operation)``."""
        return dict(self._boundaries)

    def __iter__(self) -> Iterator[Breaker]:
        return iter(tuple(self._breakers.values()))

    def __len__(self) -> int:
        return len(self._breakers)

    def __bool__(self) -> bool:
        """Always true: a registry with no breaker yet is a registry, not nothing."""
        return True

    def close(self) -> None:
        """Stop following a published sheet and release every breaker's worker threads."""
        if self.follower is not None:
            self.follower.stop()
        if self.health_checker is not None:
            self.health_checker.stop()
        for breaker in self:
            breaker.close()


def publish_policy(
    store: Store,
    sheet: str | Path,
    *,
    name: str = "default",
    note: str | None = None,
    by: str | None = None,
    over_corrupt: str | None = None,
) -> PublishedSheet:
    """Validate the boundary sheet file ``sheet`` and publish it to ``store``.

    Validation is :meth:`Registry.from_toml`'s (the same errors, with file and line);
    the sheet becomes the next revision of ``name``, by compare-and-set, so concurrent
    publishers never lose one another's revision. Every registry following ``name``
    (:meth:`Registry.follow`, :meth:`Registry.from_store`) picks it up at its next poll.
    A published record that does not decode is replaced only with ``over_corrupt``, the
    operator's reason, which the new record keeps (see :func:`write_published`).

    Raises:
        PolicyError: the sheet does not validate (nothing is published), or the record
            does not decode and ``over_corrupt`` is not given.
        StoreUnavailable: the store could not be reached.
    """
    where = str(sheet)
    text = read_text(sheet, PolicyError, limit=MAX_CONFIG_BYTES)
    warn_old_spellings(
        _build_text(Registry, text, where)._notes
    )  # published as written: a follower logs them per revision
    from toolbreaker.runtime._fleet._published import write_published

    return write_published(
        _records(store), text, name=name, note=note, by=by, over_corrupt=over_corrupt
    )


def _build_text(cls: type[Registry], text: str, where: str, **kwargs: Any) -> Registry:
    """A registry from sheet text, validated and located exactly as from_toml does.

    Its old spellings' notes are kept, not yet warned.
    """
    registry: Registry = build_toml(text, where, lambda data: cls._of(parse_sheet(data), **kwargs))
    return registry


def _origin(sheet: PublishedSheet) -> str:
    return f"{sheet.name}@{sheet.revision}"


def _label(sheet: PublishedSheet) -> str:
    """A published revision as people name it (``Breaker.sheet``)."""
    return f"{sheet.name} rev. {sheet.revision}"


def _records(store: Store) -> Records:
    if not isinstance(store, Records):
        raise PolicyError(
            f"{type(store).__name__} keeps no records: published sheets need a store with "
            "records (memory, SQLite, Redis, PostgreSQL)",
            field="store",
        )
    return store


def _poll(follower: PolicyFollower, poll: float) -> float:
    from toolbreaker.runtime._fleet._published import PolicyFollower

    PolicyFollower(follower.store, lambda _: None, poll=poll)  # validates poll
    return float(poll)
