"""One attach mechanism for every observer: listeners on every breaker a target holds.

The trace recorder, the event stream, OpenTelemetry and ``capture_transitions`` each
used to walk a registry's breakers once, when they attached, and so missed every breaker
made later: the ones every adapter makes on a tool's first call. Now each builds one
:class:`Attachment` of its listeners and attaches it to its targets:

- a :class:`~toolbreaker.Registry`: every breaker it holds and every one it makes
  later, wired before its first call (:meth:`Registry.watch_breakers`), and the stops
  and notices of every run guard an adapter made for it (:meth:`Registry.adopt_guard`:
  one per task, held weakly, heard until the target is detached);
- a :class:`~toolbreaker.RunGuard`: its tools' breakers, now and as tools are added
  (:meth:`RunGuard.watch_breakers`), and the guard's own stops and notices;
- a :class:`~toolbreaker.Breaker` (one made outside a registry), or any iterable of them.

A scoped row's tenant breakers share the row's listener lists, so wiring the row wires
them all, made before or after. One breaker reached through several targets (a registry
and a run guard whose tools use its breakers) is wired once, and stays wired until the
last target that reached it is detached. :func:`breakers_of` is the same list read at
one moment, for exporters that read counters instead of listening (Prometheus).

Listeners only watch: a breaker counts a listener that raises in
``stats.listener_errors`` and logs it; the call's outcome stands.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from toolbreaker.errors import PolicyError
from toolbreaker.runtime._breaker._breaker import Breaker, Listener, RetryListener
from toolbreaker.runtime._fleet._registry import Registry
from toolbreaker.runtime._run._guard import RunGuard, StopPacket
from toolbreaker.runtime._step import StepObserver

__all__ = ["Attachment", "Target", "breakers_of"]

#: What observers attach to: a registry, a run guard, a breaker, or breakers.
Target: TypeAlias = "Breaker | Registry | RunGuard | Iterable[Breaker]"

#: A notice listener: degradation choices and saturated answers of breakers, deferred
#: calls of run guards (JSON-ready records).
NoticeListener = Callable[[Mapping[str, Any]], None]
#: A stop listener: the masked packet of a run that stopped or blocked writes.
StopListener = Callable[[StopPacket, RunGuard], None]


def breakers_of(*targets: Target, scopes: bool = True) -> tuple[Breaker, ...]:
    """Every breaker the targets hold now, each once, scoped ones included.

    A registry's breakers, a run guard's tools' breakers, the breakers given; each
    followed by the live breakers of its scopes (:meth:`Breaker.family`). With
    ``scopes=False``, the rows alone: a scoped row stands for its breakers (what an
    exporter reads, with :meth:`Breaker.family_stats`).

    Raises:
        PolicyError: a target is none of these.
    """
    found: dict[int, Breaker] = {}
    for target in targets:
        for breaker in _held(target):
            for member in breaker.family() if scopes else (breaker,):
                found.setdefault(id(member), member)
    return tuple(found.values())


def _held(target: object) -> tuple[Breaker, ...]:
    if isinstance(target, Breaker):
        return (target,)
    if isinstance(target, RunGuard):
        return target.breakers()
    if isinstance(target, Registry):
        return tuple(target)
    if isinstance(target, Iterable) and not isinstance(target, (str, bytes, Mapping)):
        items = tuple(target)
        if all(isinstance(item, Breaker) for item in items):
            return items
    raise PolicyError(
        f"cannot attach to {type(target).__name__}: attach to a Registry, a RunGuard, "
        "a Breaker or breakers",
        field="target",
    )


class _Wired:
    """One breaker or run guard with this attachment's listeners on it."""

    __slots__ = ("links", "removers")

    def __init__(self, removers: list[Callable[[], None]]) -> None:
        self.removers = removers
        self.links = 0


class _Link:
    """One attached target: what it reached, and how to stop following it."""

    __slots__ = ("closed", "reached", "unwatch")

    def __init__(self) -> None:
        self.reached: dict[int, object] = {}
        self.unwatch: list[Callable[[], None]] = []
        self.closed = False


class Attachment:
    """Listeners attached to registries, run guards and breakers: every breaker, once.

    Example::

        seen = Attachment(transition=lambda record, breaker: print(record.reason))
        detach = seen.attach(registry, guard)     # every breaker, now and later
        ...
        detach()                                  # or seen.close(): every target

    Args:
        transition: called as ``transition(record, breaker)`` for every transition
            record of every breaker reached (:meth:`Breaker.add_listener`; a listener
            makes every request of that breaker go through the core, so it sees
            ``call-admitted`` and ``cooldown`` records too).
        retry: called with every retry decision (:meth:`Breaker.add_retry_listener`).
        notice: called with every degradation choice and saturated answer of a breaker
            (:meth:`Degradation.add_listener`) and every deferred call of a run guard.
        stop: called as ``stop(packet, guard)`` when an attached run guard stops or
            blocks writes (:meth:`RunGuard.add_stop_listener`).
        step: told of every tool call begun by a breaker or run guard reached
            (:meth:`Breaker.add_step_observer`, :meth:`RunGuard.add_step_observer`); a
            run guard's call reached through both it and its tool's breaker is told once.
    """

    def __init__(
        self,
        *,
        transition: Listener | None = None,
        retry: RetryListener | None = None,
        notice: NoticeListener | None = None,
        stop: StopListener | None = None,
        step: StepObserver | None = None,
    ) -> None:
        self.transition = transition
        self.retry = retry
        self.notice = notice
        self.stop = stop
        self.step = step
        self._lock = threading.Lock()
        self._wired: dict[int, _Wired] = {}
        self._objects: dict[int, Breaker | RunGuard] = {}
        self._links: list[_Link] = []
        # Run guards heard through a registry (adopted): weakly, each once.
        self._adopted: weakref.WeakSet[RunGuard] = weakref.WeakSet()

    def attach(self, *targets: Target) -> Callable[[], None]:
        """Attach to every breaker the targets hold, now and later; returns ``detach``.

        A registry and a run guard are followed: a breaker they get later is attached
        before its first call. ``detach()`` removes the listeners from every breaker
        these targets reached (a breaker another attached target also reached keeps
        them) and stops following the targets; calling it again does nothing.

        Raises:
            PolicyError: no target, or a target is not a registry, a run guard, a
                breaker or breakers (nothing is attached then).
        """
        if not targets:
            raise PolicyError(
                "attach needs a Registry, a RunGuard or a Breaker: attached to nothing, "
                "nothing would be observed",
                field="target",
            )
        # Breakers given as such are read once, and a wrong target refused before
        # anything is attached.
        resolved = [t if isinstance(t, (Registry, RunGuard)) else _held(t) for t in targets]
        link = _Link()
        with self._lock:
            self._links.append(link)

        def reached(breaker: Breaker) -> None:
            self._reach(link, breaker)

        for target in resolved:
            if isinstance(target, Registry):
                # Under the registry's lock: its breakers now, then each new one.
                link.unwatch.append(target.watch_breakers(reached))

                def adopted(guard: RunGuard, link: _Link = link) -> None:
                    self._adopt(link, guard)

                link.unwatch.append(target.watch_guards(adopted))
            elif isinstance(target, RunGuard):
                self._reach(link, target)
                link.unwatch.append(target.watch_breakers(reached))
            else:
                for breaker in target:
                    self._reach(link, breaker)

        def detach() -> None:
            self._detach(link)

        return detach

    def breakers(self) -> tuple[Breaker, ...]:
        """Every breaker this attachment hears now, each once (scoped ones included)."""
        with self._lock:
            wired = [o for o in self._objects.values() if isinstance(o, Breaker)]
        return breakers_of(wired)

    @property
    def attached(self) -> bool:
        """Whether a target is attached now.

        ``False`` before :meth:`attach` and once every target was detached.
        """
        with self._lock:
            return any(not link.closed for link in self._links)

    def close(self) -> None:
        """Detach from every target."""
        with self._lock:
            links = list(self._links)
        for link in links:
            self._detach(link)

    # -- internals ------------------------------------------------------------------------

    def _reach(self, link: _Link, thing: Breaker | RunGuard) -> None:
        """``link`` reached ``thing``: wire it unless this attachment already has."""
        with self._lock:
            key = id(thing)
            if link.closed or key in link.reached:
                return
            link.reached[key] = thing
            wired = self._wired.get(key)
            if wired is None:
                wired = self._wired[key] = _Wired(self._wire(thing))
                self._objects[key] = thing
            wired.links += 1

    def _adopt(self, link: _Link, guard: RunGuard) -> None:
        """Hear a run guard a registry adopted: its stops and notices, while ``link`` lasts.

        The guard holds the listeners, not the attachment the guard (a task's guard goes
        when its adapter lets it go). Its calls are heard through its tools' breakers.
        A guard this attachment also reached on its own is heard that way only.
        """
        with self._lock:
            if link.closed or guard in self._adopted:
                return
            self._adopted.add(guard)
        key = id(guard)

        def hearing() -> bool:
            return not link.closed and key not in self._wired

        stop, notice = self.stop, self.notice
        if stop is not None:

            def on_stop(packet: StopPacket, guard: RunGuard) -> None:
                if hearing():
                    stop(packet, guard)

            guard.add_stop_listener(on_stop)
        if notice is not None:

            def on_notice(record: Mapping[str, Any]) -> None:
                if hearing():
                    notice(record)

            guard.notices.add_listener(on_notice)

    def _wire(self, thing: Breaker | RunGuard) -> list[Callable[[], None]]:
        removers: list[Callable[[], None]] = []
        if isinstance(thing, RunGuard):
            if self.stop is not None:
                removers.append(thing.add_stop_listener(self.stop))
            if self.notice is not None:
                removers.append(thing.notices.add_listener(self.notice))
            if self.step is not None:
                removers.append(thing.add_step_observer(self.step))
            return removers
        if self.transition is not None:
            removers.append(thing.add_listener(self.transition))
        if self.retry is not None:
            removers.append(thing.add_retry_listener(self.retry))
        if self.notice is not None:
            removers.append(thing.degradation.add_listener(self.notice))
        if self.step is not None:
            removers.append(thing.add_step_observer(self.step))
        return removers

    def _detach(self, link: _Link) -> None:
        removers: list[Callable[[], None]] = []
        with self._lock:
            if link.closed:
                return
            link.closed = True
            self._links.remove(link)
            for key in link.reached:
                wired = self._wired[key]
                wired.links -= 1
                if wired.links == 0:
                    removers.extend(wired.removers)
                    del self._wired[key]
                    del self._objects[key]
            link.reached.clear()
        for remove in removers:
            remove()
        # Outside this lock: a holder calls _reach under its own lock (that order only).
        for unwatch in link.unwatch:
            unwatch()
