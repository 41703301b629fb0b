"""A scoped row's breakers: one per scope value (a tenant, an API key), made on first use.

One part of :class:`~toolbreaker.Breaker` (only a scoped row's has it), built with what
it uses: the scope's name, the bound, and how to make a scoped breaker. At most
``max_scopes`` live in a process; the oldest closed one is forgotten to make room (its
state stays in the store, its counters in :attr:`Scopes.forgotten`), and when none can
be, calls share one overflow breaker. Every scoped breaker shares the row's listeners
(the row's breaker wires that up when it makes one).
"""

from __future__ import annotations

import collections
import hashlib
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar

from toolbreaker.core._breaker.predicates import is_evictable
from toolbreaker.core._run.redact import redact_text
from toolbreaker.runtime._breaker._stats import BreakerStats
from toolbreaker.runtime._log import log

if TYPE_CHECKING:
    from toolbreaker.core._breaker.state import BreakerState

__all__ = ["Member", "Scopes"]


class Member(Protocol):
    """What the scopes need of a scoped breaker.

    Its state (may it be let go of?), its counters (kept in the row's) and closing it
    (when it is let go of).
    """

    @property
    def state(self) -> BreakerState:
        """Its state as this process sees it."""
        ...

    @property
    def stats(self) -> BreakerStats:
        """Its counters."""
        ...

    def close(self) -> None:
        """Let go of what it holds."""
        ...


#: The scoped breakers' type (a breaker's are breakers: this part does not import it).
MemberT = TypeVar("MemberT", bound=Member)

_PLAIN_SCOPE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


class Scopes(Generic[MemberT]):
    """A scoped row's breakers, one per scope value, made on first use (LRU-bounded).

    Args:
        key: the row's key (named in the warning when the bound is reached).
        name: the scope's name (``tenant``).
        max_scopes: the most scoped breakers kept in this process.
        make: makes the breaker of a label (``tenant=acme``), sharing the row's listeners.
        stats: the row's counters (``scope_overflows`` is counted there).
    """

    __slots__ = (
        "_children",
        "_key",
        "_lock",
        "_make",
        "_max",
        "_stats",
        "forgotten",
        "name",
        "overflow",
    )

    def __init__(
        self,
        key: str,
        name: str,
        max_scopes: int,
        make: Callable[[str], MemberT],
        stats: BreakerStats,
    ) -> None:
        self._key = key
        self.name = name
        self._max = max_scopes
        self._make = make
        self._stats = stats
        self._children: collections.OrderedDict[str, MemberT] = collections.OrderedDict()
        self._lock = threading.Lock()
        #: The breaker calls share when every live one is open or held by an operator.
        self.overflow: MemberT | None = None
        #: The counters of the scoped breakers let go of, summed.
        self.forgotten = BreakerStats()

    def get(self, value: str) -> MemberT:
        """The breaker of scope value ``value``, made (or the overflow one) on first use."""
        children = self._children
        with self._lock:
            child = children.get(value)
            if child is not None:
                children.move_to_end(value)
                return child
            return self._new(value)

    def live(self) -> dict[str, MemberT]:
        """The live scoped breakers, by scope value (oldest use first)."""
        with self._lock:
            return dict(self._children)

    def members(self) -> tuple[MemberT, ...]:
        """Every live scoped breaker, the shared overflow one last."""
        with self._lock:
            children = tuple(self._children.values())
        overflow = self.overflow
        return (*children, *(() if overflow is None else (overflow,)))

    def sum_into(self, total: BreakerStats, row: BreakerStats) -> None:
        """Add the row's counters (``row``) and every scoped breaker's, forgotten ones too."""
        with self._lock:
            # The forgotten ones' sum and the live ones in one look: one forgotten after
            # it is summed here, as a live one, and never twice.
            total.add(self.forgotten)
            children = tuple(self._children.values())
        total.add(row)
        overflow = self.overflow
        for member in (*children, *(() if overflow is None else (overflow,))):
            total.add(member.stats)

    def _new(self, value: str) -> MemberT:
        children = self._children
        if len(children) >= self._max:
            for old, breaker in children.items():
                if is_evictable(breaker.state):
                    # Its state stays in the store: a later call for ``old`` reloads it.
                    # Its counters stay in the row's (a call still settling on it after
                    # this is not counted: a total never goes back).
                    del children[old]
                    self.forgotten.add(breaker.stats)
                    breaker.close()
                    break
            else:
                # Every live one is open or operator-held: never drop one to make room.
                self._stats.scope_overflows += 1
                # The value is masked: a scope may be keyed by an API key.
                log.warning(
                    redact_text(
                        f"toolbreaker: {self._key} holds {len(children)} scoped breakers, "
                        f"none closed; {self.name}={value!r} shares the overflow breaker"
                    )
                )
                if self.overflow is None:
                    self.overflow = self._make(f"{self.name}=*")
                return self.overflow
        label = value if _PLAIN_SCOPE.fullmatch(value) else _digest(value)
        child = children[value] = self._make(f"{self.name}={label}")
        return child


def _digest(value: str) -> str:
    """A scope value that is not a short plain name (an API key, say) as a digest."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
