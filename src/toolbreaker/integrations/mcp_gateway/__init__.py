"""The MCP gateway: breakers for any MCP host, with no code (``toolbreaker mcp``).

An MCP server that stands in front of the user's MCP servers. A host (Claude Desktop,
Claude Code, Cursor, VS Code, Goose, an agent in any language) launches it, or connects
to it over streamable HTTP, as it would the server itself; the gateway relays every
message both ways, unchanged, and puts each ``tools/call`` through the same breakers
and run guard as :class:`~toolbreaker.integrations.mcp.GuardedClient`::

    gateway = Gateway.from_sheet("breakers.toml")        # [mcp.servers.NAME] tables
    await gateway.serve_stdio("catalog")                  # what a host launches
    await gateway.serve_http(port=8931)                   # /mcp/NAME for each server

- **Fidelity.** Names, schemas, annotations, resources, prompts, completions, progress,
  cancellation, logging, and the server's sampling and elicitation requests pass through
  as they came; a healthy call's answer is the server's bytes. Each host session speaks
  to one server (one host entry per server, or one URL per server over HTTP): nothing
  is renamed or merged.
- **Breakers.** One per tool and one per server for its transport (the sheet's
  ``[NAME.TOOL]`` and ``[NAME.default]`` rows); the model reads the tool-unavailable
  result as an ``isError`` result; ``hide_open_tools`` hides open tools and announces
  ``notifications/tools/list_changed``.
- **Runs.** A run guard per host session (budgets, repeats, loops, the write protocol);
  writes carry an idempotency key in ``_meta``; a stopped run answers with its stop
  result, and its packet is kept (the event stream, ``toolbreaker run show``). Which
  host sessions are one run: ``run``, a template (``{client}``, ``{cwd}``, ``{server}``);
  without it every host session is a run of its own.
- **Dead servers.** A server that goes away is started again with a backoff while its
  breaker is open; every request has a deadline, so a host never waits for one that is
  gone or hung.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import toolbreaker.integrations._kit as kit
from toolbreaker._extras import require
from toolbreaker.errors import PolicyError
from toolbreaker.integrations._kit import (
    Breaker,
    Budget,
    Journal,
    Records,
    Registry,
    Store,
    Transition,
    load_toml,
    may_start_rejecting,
    printable,
    with_deadline,
)
from toolbreaker.runtime import Attachment, StopPacket

require("mcp", "mcp")

import anyio  # noqa: E402 - after require(), which words the missing-extra error

from toolbreaker.integrations.mcp_gateway._session import (  # noqa: E402
    HostSession,
    SessionPlan,
    ToHost,
)
from toolbreaker.integrations.mcp_gateway._sheet import (  # noqa: E402
    GatewaySheet,
    UpstreamSpec,
    check_name,
    gateway_sheet,
    run_template,
)
from toolbreaker.integrations.mcp_gateway._upstream import (  # noqa: E402
    DEFAULT_RESTART_BACKOFF,
    Connection,
    StdioConnection,
)
from toolbreaker.integrations.mcp_gateway._wire import (  # noqa: E402
    Frame,
    StdioPipes,
    lines_of,
    stderr_line,
)

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        RunGuard,
    )


__all__ = [
    "Gateway",
    "UpstreamSpec",
]

#: Seconds: the deadline of calls and requests that no sheet row (nor ``[defaults]``)
#: gives one.
DEFAULT_TIMEOUT: Final = 30.0


class Observer(Protocol):
    """What watches the gateway's breakers and runs (a ``StreamPublisher``, a recorder)."""

    def attach(self, *targets: Any) -> Callable[[], None]:
        """Watch ``targets`` (a registry, a run guard); returns ``detach``."""


class Gateway:
    """MCP servers behind breakers and run guards; see the module doc.

    Args:
        servers: the servers, by name (or a list of them).
        registry: the breakers (a private one when omitted).
        journal: where runs journal their writes (a private memory store when omitted);
            give a shared store so a restarted host resumes without repeating a write.
        budget: each run's budget.
        run: the run id template (``{client}``, ``{cwd}``, ``{server}``); ``None``: every
            host session is a run of its own.
        guarded: give each host session a run guard (``False``: breakers only).
        shared: keep each run's counters and stop in the journal's store (``toolbreaker
            run show``/``extend`` see it; every session of one run id shares its budget).
        timeout: seconds: the deadline of calls and requests without a row's.
        observers: attached to the registry and to every run guard made.
        run_guard: makes a session's run guard from ``(server, client)``, instead of
            the one built from ``journal``, ``budget`` and ``run`` (``None`` returned:
            breakers only).
        restart_backoff: seconds before a gone server is first started again.
    """

    def __init__(
        self,
        servers: Mapping[str, UpstreamSpec] | Iterable[UpstreamSpec],
        *,
        registry: Registry | None = None,
        journal: Journal | None = None,
        budget: Budget | None = None,
        run: str | None = None,
        guarded: bool = True,
        shared: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        observers: Iterable[Observer] = (),
        run_guard: Callable[[str, str], RunGuard | None] | None = None,
        restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    ) -> None:
        listed = list(servers.values()) if isinstance(servers, Mapping) else list(servers)
        self.servers: dict[str, UpstreamSpec] = {}
        for spec in listed:
            if spec.name in self.servers:
                raise PolicyError(f"two servers are named {spec.name!r}", field="servers")
            self.servers[spec.name] = spec
        if not self.servers:
            raise PolicyError(
                "the gateway has no server: give a command (toolbreaker mcp -- CMD ...), "
                "--upstream URL, or [mcp.servers.NAME] tables in the sheet",
                field="servers",
            )
        if not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
            raise PolicyError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.registry = registry if registry is not None else Registry()
        self.journal = journal
        self.budget = budget or Budget()
        self.run = run_template(run) if run is not None else None
        self.guarded = guarded
        if shared and not isinstance(journal, Records):
            raise PolicyError(
                "shared runs keep their budget in the journal's store: give a journal store "
                "with records (SQLite, Redis, PostgreSQL)",
                field="shared",
            )
        self.shared = shared
        self.timeout = float(timeout)
        self.observers = tuple(observers)
        self.restart_backoff = restart_backoff
        self._make_guard = run_guard
        #: The run guards of the host sessions being served, oldest first; a session that
        #: ended takes its guard (and its observers) with it.
        self.guards: list[RunGuard] = []
        self._guard_detach: dict[int, list[Callable[[], None]]] = {}
        self._detach: list[Callable[[], None]] = [
            observer.attach(self.registry) for observer in self.observers
        ]
        self._detach.append(Attachment(transition=_breaker_line).attach(self.registry))

    @classmethod
    def from_sheet(
        cls,
        path: str | Path | None,
        *,
        servers: Iterable[UpstreamSpec] = (),
        store: Store | None = None,
        run: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        **options: Any,
    ) -> Gateway:
        """A gateway from a boundary sheet: its breaker rows and its ``[mcp]`` table.

        ``servers`` are added to the sheet's (the command line's upstream); ``store``
        holds the breakers and the journal (shared runs when it keeps records); ``run``
        overrides the sheet's template; ``timeout`` is the sheet's ``[defaults]``
        deadline when it gives none (a row without one takes it).

        Raises:
            PolicyError: the sheet is invalid (its file and line named), a server is named
                twice, or there is none.
        """
        sheet = GatewaySheet()
        registry: Registry
        if path is not None:
            base = Path(path).resolve().parent

            def build(table: dict[str, Any]) -> tuple[GatewaySheet, Registry]:
                found = gateway_sheet(table, base=base)
                return found, Registry.from_dict(with_deadline(table, timeout), store=store)

            sheet, registry = load_toml(path, build)
        else:
            registry = Registry(store=store, default_timeout=timeout)
        specs = list(sheet.servers.values())
        for spec in servers:
            if spec.name in sheet.servers:
                raise PolicyError(
                    f"the server {spec.name!r} is in the sheet already: name the command's "
                    "server otherwise (--server NAME)",
                    field="server",
                )
            specs.append(spec)
        return cls(
            specs,
            registry=registry,
            journal=cast("Journal | None", store),
            budget=sheet.budget,
            run=run if run is not None else sheet.run,
            guarded=sheet.run_guard,
            shared=isinstance(store, Records),
            timeout=timeout,
            **options,
        )

    # -- sessions -----------------------------------------------------------------------

    def spec(self, name: str | None) -> UpstreamSpec:
        """The server ``name`` (``None``: the only one).

        Raises:
            PolicyError: no server has that name, or ``None`` while there are several.
        """
        if name is None:
            if len(self.servers) == 1:
                return next(iter(self.servers.values()))
            raise PolicyError(
                f"the gateway fronts {len(self.servers)} servers "
                f"({', '.join(sorted(self.servers))}): name the one to serve (--server NAME); "
                "a host adds one entry per server",
                field="server",
            )
        check_name(name, "server")
        found = self.servers.get(name)
        if found is None:
            raise PolicyError(
                f"no server {name!r} (known: {', '.join(sorted(self.servers))})", field="server"
            )
        return found

    def plan(self, name: str) -> SessionPlan:
        """How a host session of the server ``name`` is built."""
        spec = self.spec(name)

        def connect(deliver: Any) -> Connection:
            if spec.command is not None:
                return StdioConnection(spec, deliver, restart_backoff=self.restart_backoff)
            from toolbreaker.integrations.mcp_gateway._upstream_http import HttpConnection

            return HttpConnection(spec, deliver, restart_backoff=self.restart_backoff)

        return SessionPlan(
            spec=spec,
            registry=self.registry,
            timeout=self.timeout,
            run_guard=lambda client: self.run_guard(spec.name, client),
            release=self.release,
            connect=connect,
        )

    def run_id(self, server: str, client: str) -> str:
        """The run id of a host session of ``server`` by ``client`` (see ``run``)."""
        fields = {"server": server, "client": _label(client), "cwd": _cwd_label()}
        if self.run is not None:
            return self.run.format(**fields)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        return f"{server}-{fields['client']}-{stamp}-{secrets.token_hex(3)}"

    def run_guard(self, server: str, client: str) -> RunGuard | None:
        """The run guard of a new host session (``None``: breakers only)."""
        if not self.guarded:
            return None
        if self._make_guard is not None:
            guard = self._make_guard(server, client)
        else:
            guard = kit.RunGuard(
                self.run_id(server, client),
                budget=self.budget,
                journal=self.journal,
                shared=self.shared,
            )
        if guard is None:
            return None
        self.guards.append(guard)
        detach = [observer.attach(guard) for observer in self.observers]
        detach.append(Attachment(stop=self._stop_line).attach(guard))
        self._guard_detach[id(guard)] = detach
        return guard

    def release(self, guard: RunGuard) -> None:
        """A host session ended: detach its run guard's observers and forget it."""
        for fn in self._guard_detach.pop(id(guard), ()):
            fn()
        if guard in self.guards:
            self.guards.remove(guard)

    def _stop_line(self, packet: StopPacket, guard: RunGuard) -> None:
        data = packet.to_dict()
        hint = f"; toolbreaker run show {guard.task} --store URL" if self.shared else ""
        stderr_line(
            printable(
                f"toolbreaker mcp: run {guard.task} stopped ({data.get('condition')}): "
                f"{data.get('detail')}{hint}"
            )
        )

    async def serve_lines(
        self,
        server: str | None,
        receive: Callable[[], Any],
        send: Callable[[bytes], Any],
    ) -> None:
        """Serve one host session over a byte stream of JSON lines (what stdio carries).

        ``receive()`` returns the next bytes (``b""`` at the end); ``send(data)`` writes.
        Returns when the host's stream ends.

        Raises:
            UpstreamGone: the server went away before it ever answered.
        """
        plan = self.plan(self.spec(server).name)

        async def to_host(frame: Frame, _related: object | None) -> None:
            await send(frame.raw)

        session = HostSession(plan, to_host)

        async def frames() -> Any:
            async for line in lines_of(receive):
                yield Frame.read(line)

        await session.run(frames())

    async def serve_stdio(
        self, server: str | None = None, *, stdin: int = 0, stdout: int = 1
    ) -> None:
        """Serve the host that launched this process, on its stdin and stdout.

        Raises:
            UpstreamGone: the server went away before it ever answered.
        """
        pipes = StdioPipes(stdin, stdout)
        await pipes.open()
        try:
            await self.serve_lines(server, pipes.receive, pipes.send)
        finally:
            pipes.close()

    async def serve_http(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        allowed_origins: Iterable[str] = (),
        task_status: Any = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve every server over streamable HTTP, at ``/mcp/NAME``.

        ``task_status.started(port)`` once it listens (``port=0``: a free port). Bound to
        loopback unless ``host`` says otherwise; a foreign ``Origin`` is answered 403, on
        loopback a foreign ``Host`` 421, and with ``token`` (required on any other
        address) a request without ``Authorization: Bearer TOKEN`` 401.

        Raises:
            PolicyError: bound to an address other than loopback without a ``token``.
        """
        from toolbreaker.integrations.mcp_gateway._http import serve_http

        await serve_http(
            self,
            host=host,
            port=port,
            token=token,
            allowed_origins=tuple(allowed_origins),
            task_status=task_status,
        )

    def close(self) -> None:
        """Detach the observers from the registry and every run guard."""
        for guard in list(self.guards):
            self.release(guard)
        detach, self._detach = self._detach, []
        for fn in detach:
            fn()

    def session(self, server: str, to_host: ToHost) -> HostSession:
        """A host session of ``server`` writing to ``to_host`` (for a transport of yours)."""
        return HostSession(self.plan(server), to_host)


def _breaker_line(record: Transition, breaker: Breaker) -> None:
    """One line for the operator when a breaker starts rejecting calls."""
    if may_start_rejecting(record):
        stderr_line(
            printable(
                f"toolbreaker mcp: breaker {breaker.key} opened ({record.reason}): "
                "its calls are answered as unavailable"
            )
        )


def _label(text: str) -> str:
    """A client's name as part of a run id: printable, at most 64 characters."""
    cleaned = "".join(ch if ch.isprintable() and not ch.isspace() else "-" for ch in text)
    return cleaned[:64] or "host"


def _cwd_label() -> str:
    """The working directory as part of a run id: its name and a short hash of its path."""
    cwd = os.getcwd()
    digest = hashlib.sha256(cwd.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{_label(Path(cwd).name or 'root')}-{digest}"
