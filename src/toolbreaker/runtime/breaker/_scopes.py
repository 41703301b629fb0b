"""A scoped row's breakers: one per scope value (a tenant, an API key), made on first use.

At most ``max_scopes`` live in a process; the oldest closed one is forgotten to make
room (its state stays in the store, its counters in the row's sum), and when none can
be, calls share one overflow breaker. Every scoped breaker shares the row's listeners;
:meth:`Scopes.family_stats` sums what they all counted.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
from typing import TYPE_CHECKING, Final, cast

from toolbreaker.core.breaker.keys import scoped_dependency
from toolbreaker.core.breaker.predicates import is_evictable
from toolbreaker.core.run.redact import redact_text
from toolbreaker.runtime._log import log
from toolbreaker.runtime.breaker._admission import Admission
from toolbreaker.runtime.breaker._scope import current_scope
from toolbreaker.runtime.breaker._stats import BreakerStats

if TYPE_CHECKING:
    from toolbreaker.runtime.breaker._breaker import Breaker

__all__ = ["Scopes"]

_PLAIN_SCOPE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


class Scopes(Admission):
    """A scoped row's breakers, one per scope value, made on first use (LRU-bounded)."""

    def for_scope(self, value: str | None = None) -> Breaker:
        """The breaker of one scope value.

        ``value`` defaults to the current context's (see :func:`toolbreaker.scope`); this
        breaker itself when the row is not scoped or no value is set.
        """
        name = self.boundary.scope
        children = self._scoped
        if name is None or children is None:
            return cast("Breaker", self)
        if value is None:
            value = current_scope(name)
            if value is None:
                return cast("Breaker", self)
        with self._scopes_lock:
            child = children.get(value)
            if child is not None:
                children.move_to_end(value)
                return child
            return self._new_scope(name, value, children)

    def scopes(self) -> dict[str, Breaker]:
        """The live scoped breakers of this row, by scope value (oldest use first)."""
        with self._scopes_lock:
            return dict(self._scoped or {})

    def family(self) -> tuple[Breaker, ...]:
        """This breaker and every live breaker of its scopes, the shared overflow one last.

        What an exporter reads to see every breaker a row holds: a scoped row's calls are
        counted by its tenants' breakers, not by the row's own. They hear the row's
        listeners (see :meth:`add_listener`).
        """
        with self._scopes_lock:
            children = tuple((self._scoped or {}).values())
        overflow = self._overflow
        return (self, *children, *(() if overflow is None else (overflow,)))

    def family_stats(self) -> BreakerStats:
        """The counters of this breaker and of every breaker its scopes had here, summed.

        A scoped row's calls are counted by its tenants' breakers, not by the row's own:
        this is what the row did, the breakers it has forgotten to make room included
        (their counters are added to the row's when they go), so every total only grows.
        What an exporter reads for the row (see
        :class:`~toolbreaker.instrumentation.prometheus.BreakerCollector`). A new object,
        read without stopping the calls; its ``pinned_workers`` is 0.
        """
        total = BreakerStats()
        total.on_defaults = self.boundary.defaults
        with self._scopes_lock:
            # The forgotten ones' sum and the live ones in one look: one forgotten after
            # it is summed here, as a live one, and never twice.
            total.add(self._forgotten)
            children = tuple((self._scoped or {}).values())
        overflow = self._overflow
        for member in (self, *children, *(() if overflow is None else (overflow,))):
            total.add(member.stats)
        return total

    def _new_scope(
        self, name: str, value: str, children: collections.OrderedDict[str, Breaker]
    ) -> Breaker:
        if len(children) >= self.boundary.max_scopes:
            for old, breaker in children.items():
                if is_evictable(breaker.state):
                    # Its state stays in the store: a later call for ``old`` reloads it.
                    # Its counters stay in the row's (a call still settling on it after
                    # this is not counted: a total never goes back).
                    del children[old]
                    self._forgotten.add(breaker.stats)
                    breaker.close()
                    break
            else:
                # Every live one is open or operator-held: never drop one to make room.
                self.stats.scope_overflows += 1
                # The value is masked: a scope may be keyed by an API key.
                log.warning(
                    redact_text(
                        f"toolbreaker: {self.key} holds {len(children)} scoped breakers, none "
                        f"closed; {name}={value!r} shares the overflow breaker"
                    )
                )
                if self._overflow is None:
                    self._overflow = self._child(f"{name}=*")
                return self._overflow
        label = value if _PLAIN_SCOPE.fullmatch(value) else _digest(value)
        child = children[value] = self._child(f"{name}={label}")
        return child

    def _child(self, label: str) -> Breaker:
        row = dataclasses.replace(
            self.boundary,
            dependency=scoped_dependency(self.dependency, label),
            tool=self.tool,
            scope=None,
        )
        from toolbreaker.runtime.breaker._breaker import Breaker  # the class above this layer

        child = Breaker(
            row.dependency,
            store=self.store,
            clock=self.clock,
            boundary=row,
            max_workers=self._max_workers,
        )
        child._hear_as(self)
        return child

    def _hear_as(self, row: Scopes) -> None:
        """A scoped breaker shares its row's listeners (transitions, retries, notices).

        One list for the row and its scoped breakers: whatever attaches to the row hears
        every tenant's breaker, made before or after it attached, and detaching from the
        row detaches from all.
        """
        self._listeners = row._listeners
        self._retry_listeners = row._retry_listeners
        self.step_observers = row.step_observers
        self.degradation.notices.follow(row.degradation.notices)
        self.degradation.tools = row.degradation.tools
        self._stamp = row._stamp


def _digest(value: str) -> str:
    """A scope value that is not a short plain name (an API key, say) as a digest."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
