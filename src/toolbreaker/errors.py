"""The one exception tree of toolbreaker.

Every exception the library raises on purpose derives from :class:`ToolbreakerError`,
so ``except ToolbreakerError`` catches them all and nothing else::

    ToolbreakerError
    ├── PolicyError          invalid policy or configuration (field, line)
    │   └── RowNotFound      a breaker the boundary sheet does not describe as asked (rows)
    ├── TraceError           an event or trace that cannot be replayed (line)
    ├── ReceiptError         a file that is not a toolbreaker receipt
    ├── CircuitOpen          a call rejected locally by an open breaker (retry_after, result)
    │   └── DeploymentsUnavailable   every deployment a model call may use is rejected
    ├── StoreUnavailable     breaker state could not be read or written (fail closed)
    │   ├── StoreWriteUnknown    a write that may have reached the store (its reply was lost)
    │   └── RecordCorrupt        a record the store holds that does not decode (space, key)
    ├── JournalNotDurable    a store that would forget the run journal on a restart
    ├── MissingExtra         an optional dependency that is not installed (also an ImportError)
    ├── RegistryFull         more breakers than the registry's cardinality limit
    ├── PermitError          a permit or step settled twice
    ├── AsyncCallError       a coroutine on a sync path: ``acall`` / the async guard (TypeError)
    ├── NotSent              raised by a write tool: nothing left, the write certainly failed
    ├── ToolReportedError    a failure a tool reported as a result (adapters; never raised)
    ├── RunStopped           a model call of a run the guard stopped, refused unsent (packet)
    ├── RunStateError        a run state that does not load, or an impossible run input
    │   └── WriteTransitionError   a move a write's lifecycle does not allow (status, move)
    └── FingerprintError     a value that cannot be fingerprinted (also a ValueError)
        ├── UnsupportedTypeError   a type the canonical form does not define
        └── BusinessKeyError       a declared business-key field is missing or empty

Errors carry machine-readable fields so callers never parse messages.

Beside the tree, one warning category: :class:`ToolbreakerDeprecationWarning` (a
:class:`DeprecationWarning`), for a spelling that still works and will not for ever; and
two protocols, :class:`StopReport` and :class:`TurnReport`: what :class:`RunStopped`
carries, typed by what it offers, so that this module, which every other one imports,
imports nothing of toolbreaker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = [
    "AsyncCallError",
    "BusinessKeyError",
    "CircuitOpen",
    "DeploymentsUnavailable",
    "FingerprintError",
    "JournalNotDurable",
    "MissingExtra",
    "NotSent",
    "PermitError",
    "PolicyError",
    "ReceiptError",
    "RecordCorrupt",
    "RegistryFull",
    "RowNotFound",
    "RunStateError",
    "RunStopped",
    "StoreUnavailable",
    "StoreWriteUnknown",
    "ToolReportedError",
    "ToolbreakerDeprecationWarning",
    "ToolbreakerError",
    "TraceError",
    "UnsupportedTypeError",
    "WriteTransitionError",
]


def whole_seconds(ms: int | None) -> int:
    """Milliseconds as the whole seconds a model reads: rounded up, at least 1.

    The one formula for every ``retry_after`` a person or a model sees.
    """
    if ms is None or ms <= 1000:
        return 1
    return -(-ms // 1000)


class ToolbreakerError(Exception):
    """Base class of every error toolbreaker raises on purpose."""


class ToolbreakerDeprecationWarning(DeprecationWarning):
    """A deprecated spelling that still works: the message says what to write instead.

    A boundary sheet's durations in seconds (``timeout``, ``max_stale``, ``stale_every``,
    ``health_check.timeout``) are one: each is reported once per sheet load, with the
    file, line and row, and the sheet loads as before. Filter it by this category::

        warnings.filterwarnings("error", category=ToolbreakerDeprecationWarning)
    """


class _Located(ToolbreakerError):
    """An error about user input that can point at a file and a line."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def located(self, file: str | None = None) -> str:
        """Return ``file:line: message`` with whatever location is known."""
        where = self.file or file
        parts = [p for p in (where, str(self.line) if self.line else None) if p]
        return ": ".join([":".join(parts), self.message]) if parts else self.message

    def __str__(self) -> str:
        return self.located()


class PolicyError(_Located):
    """A policy or configuration value is invalid.

    Attributes:
        field: the name of the offending field, when one is to blame.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message, file=file, line=line)
        self.field = field


class RowNotFound(PolicyError):
    """A breaker the boundary sheet does not describe the way it was asked for.

    A dependency the sheet names, asked for with an operation it has no row for (or with
    none, when it has several rows); a name the sheet lacks that closely resembles one of
    its dependencies or tools; any name it lacks, for a strict registry. Never a breaker
    on the sheet's defaults made behind the sheet's back.

    Attributes:
        dependency: the dependency asked for.
        operation: the operation asked for (``None``: none was named).
        rows: the sheet's rows of the dependency (``"orders.read"`` ...), if it has any.
        resembles: the row whose dependency or tool the name closely resembles, if any.
        field: which argument is at fault: ``operation`` (name one of ``rows``) or
            ``dependency`` (a slip of a name, or a name a strict sheet lacks).
    """

    def __init__(
        self,
        message: str,
        *,
        dependency: str,
        operation: str | None,
        rows: tuple[str, ...] = (),
        resembles: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message, field=field)
        self.dependency = dependency
        self.operation = operation
        self.rows = rows
        self.resembles = resembles


class TraceError(_Located):
    """An event, or a line of a trace, cannot be replayed."""


class ReceiptError(_Located):
    """A file handed to ``diff`` is not a ``toolbreaker.receipt/v1`` document."""


class CircuitOpen(ToolbreakerError):
    """A call was rejected locally: the breaker did not let it reach the dependency.

    Attributes:
        dependency: the breaker's key.
        reason: the core's reason (``cooldown``, ``probe-limit``, ``isolated``),
            ``store-unavailable``, ``saturated`` (the bulkhead is full) or ``hung``
            (calls still running past their deadline hold every worker a sync call may
            use).
        retry_after_ms: milliseconds until a call may be admitted again, if known.
    """

    __slots__ = ("_render", "_result", "retry_after_ms")

    def __init__(
        self,
        dependency: str,
        reason: str,
        retry_after_ms: int | None,
        render: Callable[..., dict[str, Any]],
    ) -> None:
        Exception.__init__(self, dependency, reason)
        self.retry_after_ms = retry_after_ms
        self._render = render

    @property
    def dependency(self) -> str:
        """The breaker's key."""
        return str(self.args[0])

    @property
    def reason(self) -> str:
        """Why the call was rejected."""
        return str(self.args[1])

    @property
    def retry_after(self) -> int:
        """Whole seconds until a call may be admitted again, at least 1."""
        return whole_seconds(self.retry_after_ms)

    @property
    def result(self) -> dict[str, Any]:
        """The tool-unavailable result to hand to the model."""
        if getattr(self, "_result", None) is None:
            self._result: dict[str, Any] = self._render(self.reason, self.retry_after_ms)
        return self._result

    def result_for(self, tool: str) -> dict[str, Any]:
        """The tool-unavailable result worded for ``tool``.

        Several tools may share one dependency's breaker.
        """
        result: dict[str, Any] = self._render(self.reason, self.retry_after_ms, tool=tool)
        return result

    def __str__(self) -> str:
        return (
            f"breaker {self.dependency!r} rejected the call locally ({self.reason}); "
            f"retry after {self.retry_after} s"
        )


def circuit_open(
    dependency: str,
    reason: str,
    retry_after_ms: int | None,
    render: Callable[..., dict[str, Any]],
) -> CircuitOpen:
    """A :class:`CircuitOpen` built without a Python-level ``__init__``.

    Rejections are a hot path while a breaker is open; message, seconds and result are
    all computed lazily, so the object only needs its fields.
    """
    exc = CircuitOpen.__new__(CircuitOpen, dependency, reason)
    exc.retry_after_ms = retry_after_ms
    exc._render = render
    return exc


class DeploymentsUnavailable(CircuitOpen):
    """A model call was not sent: every deployment it may use was rejected locally.

    The LiteLLM adapter raises it when the router's deployments and fallbacks were all
    turned away by their breakers (open, probing, isolated, or a store that cannot be
    read), so no request reached a provider. It is a :class:`CircuitOpen` whose
    ``dependency`` is the model group asked for; ``retry_after_ms`` is the soonest any
    of them may be admitted again.

    Attributes:
        model: the model (group) the call asked for.
        rejections: the rejection of each deployment, in the order they were tried.
        deployments: each rejected deployment's breaker key and the milliseconds until
            it may be admitted again (``None``: not before an operator restores it).
    """

    __slots__ = ("rejections",)

    def __init__(
        self,
        model: str,
        rejections: tuple[CircuitOpen, ...],
        render: Callable[..., dict[str, Any]],
    ) -> None:
        waits = [r.retry_after_ms for r in rejections if r.retry_after_ms is not None]
        soonest = min(waits) if waits else None
        first = next((r for r in rejections if r.retry_after_ms == soonest), None)
        super().__init__(model, "unavailable" if first is None else first.reason, soonest, render)
        self.rejections = rejections

    @property
    def model(self) -> str:
        """The model (group) the call asked for."""
        return self.dependency

    @property
    def deployments(self) -> dict[str, int | None]:
        """Each rejected deployment's breaker key and its wait in ms (``None``: unknown)."""
        return {r.dependency: r.retry_after_ms for r in self.rejections}

    def __str__(self) -> str:
        named = ", ".join(
            f"{key} (retry after {whole_seconds(ms)} s)" if ms is not None else key
            for key, ms in self.deployments.items()
        )
        return f"every deployment of model {self.model!r} is unavailable: {named}"


class StoreUnavailable(ToolbreakerError):
    """The store could not read or write breaker state; the call is denied, not waved on.

    Attributes:
        dependency: the breaker key whose state was unreachable, when known.
    """

    def __init__(self, message: str, *, dependency: str | None = None) -> None:
        super().__init__(message)
        self.dependency = dependency


class StoreWriteUnknown(StoreUnavailable):
    """A store write failed after it may have reached the store: it may have been made.

    A timeout waiting for the reply, a connection lost after the request was sent: the
    store may have applied the write and only its answer was lost. The write is
    *unknown*, never *failed*: a queued item may be queued, a journal entry may be
    written. It is a :class:`StoreUnavailable` (a caller that fails closed on one fails
    closed on this too); a write refused before anything was sent (no connection, a
    statement the server rejected) raises a plain :class:`StoreUnavailable`.

    Attributes:
        dependency: the breaker key, task or record space whose write it was, when known.
    """


class RecordCorrupt(StoreUnavailable):
    """A record is in the store but does not decode (its bytes are no JSON object).

    A :class:`StoreUnavailable` (whoever fails closed on one fails closed on this), but
    the store answered: a reader that must tell an outage from a bad record (a follower
    of a published sheet counts a refusal) can, and a writer can replace exactly this
    record by compare-and-set on ``version``.

    Attributes:
        space: the record's space.
        key: the record's key.
        version: the version the store holds it at; ``None`` when that is garbled too.
    """

    def __init__(self, message: str, *, space: str, key: str, version: int | None) -> None:
        super().__init__(message, dependency=space)
        self.space = space
        self.key = key
        self.version = version


class JournalNotDurable(ToolbreakerError):
    """A store was asked to keep a run journal that a restart would silently forget.

    A resumed run skips what its journal says is confirmed; a journal that lost its
    entries makes the run repeat writes that already happened. Stores raise this at the
    first journal use unless they were told to accept the risk (``volatile_journal=True``).
    It is not a :class:`StoreUnavailable`: retrying will not help, the store's
    configuration has to change.

    Attributes:
        store: the store that refused, described without credentials.
        reason: why its journal is not durable.
    """

    def __init__(self, store: str, reason: str) -> None:
        super().__init__(
            f"{store} would lose the run journal on a restart: {reason}. A resumed run "
            "would repeat confirmed writes. Make the store durable, or pass "
            "volatile_journal=True to accept that risk"
        )
        self.store = store
        self.reason = reason


class MissingExtra(ToolbreakerError, ImportError):
    """A part of toolbreaker needs an optional dependency that is not installed.

    Also an :class:`ImportError`, as a failed import is. The message says the one
    command that installs it; a command line prints it as one line, exit 2.

    Attributes:
        module: the module that could not be imported (``"redis"``).
        extra: the toolbreaker extra that provides it (``"redis"``).
    """

    def __init__(self, module: str, extra: str, *, what: str = "this part of toolbreaker") -> None:
        super().__init__(f"{what} needs {module!r}: pip install 'toolbreaker[{extra}]'")
        self.module = module
        self.extra = extra
        self.name = module


class RegistryFull(ToolbreakerError):
    """A registry was asked for more distinct breakers than its cardinality limit."""

    def __init__(self, limit: int, key: str) -> None:
        super().__init__(
            f"registry holds its limit of {limit} breakers; refusing a new one for {key!r} "
            "(is a request id or a user id part of the dependency key?)"
        )
        self.limit = limit
        self.key = key


class AsyncCallError(ToolbreakerError, TypeError):
    """A coroutine function, or a call that returned an awaitable, on a sync path.

    ``breaker.call(async_fn)``, a sync ``guard``-ed function that returns a coroutine,
    ``step.succeeded(coroutine)``, ``RunGuard.call`` of a coroutine tool: the call would
    never run, and nothing it did could be counted. The coroutine is closed (no "never
    awaited" warning), nothing is counted as a success, and the message names the async
    twin to use (``await breaker.acall(...)``, ``await step.asucceeded(...)`` ...). Also
    a :class:`TypeError`: a program's mistake, never a result for the model.
    """


class PermitError(ToolbreakerError):
    """A permit was settled more than once."""


class TurnReport(Protocol):
    """What :class:`RunStopped` tells of the last turn: a :class:`~toolbreaker.SiblingOutcome`.

    A protocol, so that this module imports nothing of toolbreaker (every other module
    imports it); :meth:`StopPacket.final_text <toolbreaker.runtime.StopPacket.final_text>` reads
    a turn through it too.
    """

    @property
    def branches(self) -> tuple[object, ...]:
        """Every call of the turn, in the order they were added."""

    @property
    def completed(self) -> tuple[str, ...]:
        """The names of the calls that completed."""

    @property
    def degraded(self) -> tuple[str, ...]:
        """The names of the calls answered with a tool-unavailable result or rejection."""

    @property
    def failed(self) -> tuple[str, ...]:
        """The names of the calls that failed."""

    @property
    def cancelled(self) -> tuple[str, ...]:
        """The names of the calls cancelled by policy."""

    def to_result(self) -> dict[str, Any]:
        """What the model reads of the turn."""


class StopReport(Protocol):
    """What :class:`RunStopped` carries of the stopped run: a ``StopPacket``.

    A protocol, so that this module imports nothing of toolbreaker; every field is the
    packet's (secrets masked when the packet was built).
    """

    @property
    def task(self) -> str:
        """The task id."""

    @property
    def condition(self) -> str:
        """The exact condition that stopped the run."""

    @property
    def detail(self) -> str:
        """The condition in words, with the numbers."""

    @property
    def confirmed(self) -> tuple[Mapping[str, Any], ...]:
        """Completed steps with their idempotency keys and external ids."""

    @property
    def uncertain(self) -> tuple[Mapping[str, Any], ...]:
        """Writes whose outcome is not settled, each with its journal status."""

    @property
    def attempted(self) -> Mapping[str, Any] | None:
        """The attempted action (tool, fingerprint, idempotency key)."""

    @property
    def counters(self) -> Mapping[str, Any]:
        """The budget counters when the run stopped."""

    @property
    def next_safe_action(self) -> str:
        """What to do now."""

    @property
    def history(self) -> tuple[Mapping[str, Any], ...]:
        """Every condition that stopped the run or blocked its writes, in order."""

    def final_text(self, turn: TurnReport | None = None) -> str:
        """The words every adapter ends a stopped run with."""

    def to_dict(self) -> dict[str, Any]:
        """The packet as a JSON-ready dict."""


class RunStopped(ToolbreakerError):
    """A model call of a run the guard stopped: refused before anything was sent.

    What the other adapters' stopped runs end with, as an exception, where the agent's
    loop is the caller's own (the LiteLLM adapter's ``GuardedRouter``): the router cannot
    end the loop, only refuse to ask the model again. Its message is the words every
    adapter ends a stopped run with (:meth:`StopPacket.final_text
    <toolbreaker.runtime.StopPacket.final_text>`).

    Attributes:
        packet: the guard's stop packet (condition, confirmed work, next safe action): a
            :class:`~toolbreaker.runtime.StopPacket`, typed by what it offers (:class:`StopReport`).
        turn: the last model turn's calls and how each ended (a
            :class:`~toolbreaker.SiblingOutcome`, typed as :class:`TurnReport`; ``None``
            before any turn).
    """

    def __init__(self, packet: StopReport, turn: TurnReport | None = None) -> None:
        super().__init__(packet.final_text(turn))
        self.packet = packet
        self.turn = turn


class RunStateError(ToolbreakerError, ValueError):
    """A run state does not load, or a value meant to be counted into one is invalid.

    Raised by :meth:`RunState.from_dict` on anything that does not validate (a run
    state is operator data: it is never silently defaulted), and by the constructors
    and functions of this module on an impossible input (a negative cost, a float, an
    unknown outcome, a time before the run started).

    Attributes:
        message: the explanation.
        field: where the offending value sits, like ``tallies[3].repeats``, when known.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class WriteTransitionError(RunStateError):
    """A move a write's lifecycle does not allow (see :mod:`toolbreaker.core._run.protocol`).

    An operator saying a confirmed write was not made, a write asked to run again from
    an unknown outcome: the journal is left as it was.

    Attributes:
        status: the write's status before the move (``None``: not journaled).
        move: the move that was refused.
    """

    def __init__(self, message: str, *, status: str | None, move: str) -> None:
        super().__init__(message, field="status")
        self.status = status
        self.move = move


class FingerprintError(ToolbreakerError, ValueError):
    """A value cannot be fingerprinted: NaN, a cycle, a blank tool name, an empty key.

    Attributes:
        message: the explanation, naming the offending path when there is one.
        path: where the offending value sits, like ``args.items[2]``, when known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class UnsupportedTypeError(FingerprintError, TypeError):
    """A value of a type the canonical form does not define (a set, bytes, an object)."""


class BusinessKeyError(FingerprintError, KeyError):
    """A declared business-key field is missing or empty.

    An empty key would give unrelated actions the same idempotency key, and the
    destination would then silently drop the second one, so this is never defaulted.

    Attributes:
        field: the declared field, as given (``recipient.id``).
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, path=field)
        self.field = field


class NotSent(ToolbreakerError):
    """Raised (or raised *from*) by a write tool that knows nothing left this process.

    A write whose outcome may have committed is *unknown* to a run guard: it is never
    replayed and blocks further writes until reconciled. A tool that fails before anything
    was sent (a local argument check, a missing credential, a refused connection) says
    so with ``raise NotSent("why") from exc``: the write is then a certain failure that
    may be retried. Plain ``ValueError`` and ``TypeError`` (argument checks) count the
    same way without it; see ``may_have_committed``.
    """


class ToolReportedError(ToolbreakerError):
    """A failure a tool reported as its result or message, not by raising.

    Adapters build one (an MCP ``is_error`` result, a LangChain error message) to settle a
    call with the evidence the tool gave; it is never raised to a caller. The classifier
    reads ``status_code`` and ``headers`` as it does for an HTTP error; without a status
    it is ignored: a tool's own complaint says nothing about its dependency's health.

    Attributes:
        status_code: the HTTP status the tool reported, if any.
        headers: header-style hints the tool reported (``Retry-After``).
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.headers = dict(headers or {})
