"""The gateway's section of a boundary sheet, ``[mcp]``: which MCP servers it fronts.

One sheet configures the breakers (its ``[defaults]`` and ``[SERVER.TOOL]`` rows, read by
:meth:`toolbreaker.Registry.from_dict`, which leaves ``[mcp]`` alone) and the gateway::

    [mcp]
    run = "{client}@{cwd}"              # optional: the run id (see "Runs" in the docs)
    run_guard = true                    # false: breakers only
    hide_open_tools = false             # hide the tools whose breaker is open

    [mcp.budget]                        # the run guard's budget per host session
    max_tool_calls = 200

    [mcp.servers.catalog]               # a stdio server: the command that starts it
    command = ["npx", "-y", "@modelcontextprotocol/server-everything"]
    env = { CATALOG_TOKEN = "..." }
    risk = { create_ticket = "reversible_write" }
    allow = ["delete_ticket"]           # destructive tools the operator allows
    fallbacks = { search = "search_snapshot" }

    [mcp.servers.billing]               # a streamable-HTTP server
    url = "https://billing.example.com/mcp"
    headers = { Authorization = "Bearer ..." }

    [catalog.default]                   # the server's transport breaker
    failure_threshold = 2
    [catalog.search]                    # one of its tools
    timeout_ms = 5000

Everything here is checked at load, with the field (``mcp.servers.catalog.command``)
named, so a sheet file's error names its line. Values of ``env`` and ``headers`` are
secrets: kept out of ``repr`` and never echoed in an error.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from toolbreaker.errors import PolicyError
from toolbreaker.integrations._kit import (
    MCP_TABLE,
    RISK_CLASSES,
    TABLES,
    Budget,
    RiskClass,
    flag,
    known,
    redact_text,
    shown,
    table,
)

__all__ = [
    "ALL_TOOLS",
    "RUN_FIELDS",
    "GatewaySheet",
    "UpstreamSpec",
    "check_name",
    "gateway_sheet",
    "run_template",
]

#: ``allow = "*"``: every destructive tool of the server is allowed.
ALL_TOOLS: Final = "*"
#: The placeholders a run id template may use.
RUN_FIELDS: Final = ("client", "cwd", "server")
#: Server names: they are breaker dependencies and URL path segments (``/mcp/NAME``).
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_GATEWAY_FIELDS: Final = ("run", "run_guard", "hide_open_tools", "budget", "servers")
_SERVER_FIELDS: Final = (
    "command",
    "url",
    "env",
    "cwd",
    "headers",
    "risk",
    "default_risk",
    "allow",
    "fallbacks",
    "hide_open_tools",
)


@dataclasses.dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One MCP server the gateway fronts: how to reach it and how to judge its tools.

    Attributes:
        name: the server's name: its breakers' dependency, its URL path over HTTP.
        command: the argv of a stdio server (``None`` for one reached by ``url``).
        url: the streamable-HTTP endpoint of a remote server.
        env: variables added to the gateway's own environment for a stdio server.
        cwd: the working directory of a stdio server (``None``: the gateway's).
        headers: HTTP headers sent to a remote server (``Authorization`` ...).
        risk: risk classes by tool name; they override the server's annotations.
        default_risk: the risk class of a tool whose annotations give no hint.
        allow: destructive (``irreversible``) tools the operator allows; the others are
            denied. :data:`ALL_TOOLS` in it allows every one.
        fallbacks: the fallback tool by tool name, for tools without a sheet row (a row
            names its own ``fallback``).
        hide_open_tools: leave out of ``tools/list`` the tools whose breaker is open.
    """

    name: str
    command: tuple[str, ...] | None = None
    url: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    cwd: str | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    risk: Mapping[str, RiskClass] = dataclasses.field(default_factory=dict)
    default_risk: RiskClass = "read"
    allow: frozenset[str] = frozenset()
    fallbacks: Mapping[str, str] = dataclasses.field(default_factory=dict)
    hide_open_tools: bool = False

    def __post_init__(self) -> None:
        check_name(self.name, "server")
        if (self.command is None) == (self.url is None):
            raise PolicyError(
                f"server {self.name!r} needs exactly one of command (stdio) or url (HTTP)",
                field="command",
            )
        if self.command is not None and (
            not self.command or not all(isinstance(part, str) and part for part in self.command)
        ):
            raise PolicyError(
                f"server {self.name!r}: command must be a non-empty list of strings",
                field="command",
            )
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise PolicyError(
                    f"server {self.name!r}: url must be an http:// or https:// URL, "
                    f"got {shown(redact_text(self.url))}",
                    field="url",
                )

    def allows(self, tool: str) -> bool:
        """Whether the operator allowed the destructive tool ``tool``."""
        return ALL_TOOLS in self.allow or tool in self.allow


@dataclasses.dataclass(frozen=True, slots=True)
class GatewaySheet:
    """The ``[mcp]`` section, validated.

    Attributes:
        servers: the servers by name, in the sheet's order.
        run: the run id template (placeholders ``{client}``, ``{cwd}``, ``{server}``);
            ``None``: every host session is a run of its own.
        run_guard: whether each host session has a run guard (``false``: breakers only; no
            budgets, idempotency keys, journal or stop packets).
        budget: the run guard's budget of each host session.
        hide_open_tools: the servers' default for ``hide_open_tools``.
    """

    servers: Mapping[str, UpstreamSpec] = dataclasses.field(default_factory=dict)
    run: str | None = None
    run_guard: bool = True
    budget: Budget = dataclasses.field(default_factory=Budget)
    hide_open_tools: bool = False


def check_name(name: object, field: str) -> str:
    """A server name: letters, digits, ``_ . -``, at most 64, not a reserved table name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PolicyError(
            f"{field} name {shown(name)} must be 1 to 64 letters, digits, '_', '.' or '-' "
            "(it is a breaker dependency and a URL path segment)",
            field=field,
        )
    if name in TABLES:  # a sheet's own tables: never a server's
        raise PolicyError(
            f"{field} name {name!r} is reserved in a boundary sheet ([{name}] means something "
            "else)",
            field=field,
        )
    return name


def run_template(text: object, field: str = "run") -> str:
    """A run id template, checked: a non-empty string whose placeholders are known."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(f"{field} must be a non-empty string, got {shown(text)}", field=field)
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise PolicyError(f"{field}: {exc} in {shown(text)}", field=field) from None
    for name in names:
        if name not in RUN_FIELDS:
            raise PolicyError(
                f"{field}: unknown placeholder {{{name}}} in {shown(text)} "
                f"(known: {', '.join('{' + f + '}' for f in RUN_FIELDS)})",
                field=field,
            )
    return text


def gateway_sheet(data: Mapping[str, Any], *, base: Path | None = None) -> GatewaySheet:
    """The ``[mcp]`` table of a decoded sheet, validated (an empty one when absent).

    Args:
        data: the decoded sheet.
        base: the directory relative ``cwd`` paths are taken from (the sheet's own).

    Raises:
        PolicyError: naming the field (``mcp.servers.catalog.url``).
    """
    gateway = table(data.get(MCP_TABLE, {}), MCP_TABLE)
    known(gateway, _GATEWAY_FIELDS, MCP_TABLE, listed=_GATEWAY_FIELDS)
    hide = flag(gateway.get("hide_open_tools", False), f"{MCP_TABLE}.hide_open_tools")
    guarded = flag(gateway.get("run_guard", True), f"{MCP_TABLE}.run_guard")
    run = gateway.get("run")
    if run is not None:
        run = run_template(run, f"{MCP_TABLE}.run")
    budget = Budget()
    if "budget" in gateway:
        where = f"{MCP_TABLE}.budget"
        try:
            budget = Budget.from_dict(table(gateway["budget"], where))
        except PolicyError as exc:
            if exc.field is not None and not exc.field.startswith(where):
                exc.field = f"{where}.{exc.field}"
            raise
    servers: dict[str, UpstreamSpec] = {}
    listed = table(gateway.get("servers", {}), f"{MCP_TABLE}.servers")
    for name, row in listed.items():
        where = f"{MCP_TABLE}.servers.{name}"
        check_name(name, where)
        servers[name] = _server(name, table(row, where), where, base, hide)
    return GatewaySheet(
        servers=servers, run=run, run_guard=guarded, budget=budget, hide_open_tools=hide
    )


def _server(
    name: str, row: Mapping[str, Any], where: str, base: Path | None, hide: bool
) -> UpstreamSpec:
    known(row, _SERVER_FIELDS, where, listed=_SERVER_FIELDS)
    command = row.get("command")
    if command is not None and (
        not isinstance(command, list)
        or not command
        or not all(isinstance(part, str) and part for part in command)
    ):
        raise PolicyError(
            f'{where}.command must be a list of strings, e.g. ["npx", "-y", "@scope/server"]',
            field=f"{where}.command",
        )
    url = row.get("url")
    if url is not None and not isinstance(url, str):
        raise PolicyError(f"{where}.url must be a string", field=f"{where}.url")
    cwd = row.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd:
            raise PolicyError(f"{where}.cwd must be a path", field=f"{where}.cwd")
        if base is not None and not Path(cwd).is_absolute():
            cwd = str(base / cwd)
    if url is not None and (row.get("env") is not None or cwd is not None):
        raise PolicyError(
            f"{where}: env and cwd are for a stdio server (command), not one reached by url",
            field=f"{where}.env" if row.get("env") is not None else f"{where}.cwd",
        )
    if command is not None and row.get("headers") is not None:
        raise PolicyError(
            f"{where}: headers are for a server reached by url, not a stdio command",
            field=f"{where}.headers",
        )
    risk = {
        tool: _risk(value, f"{where}.risk.{tool}")
        for tool, value in table(row.get("risk", {}), f"{where}.risk").items()
    }
    allow = row.get("allow", [])
    if allow == ALL_TOOLS:
        allow = [ALL_TOOLS]
    if not isinstance(allow, list) or not all(isinstance(t, str) and t for t in allow):
        raise PolicyError(
            f'{where}.allow must be a list of tool names, or "*"', field=f"{where}.allow"
        )
    try:
        return UpstreamSpec(
            name=name,
            command=tuple(command) if command is not None else None,
            url=url,
            env=_strings(row.get("env", {}), f"{where}.env"),
            cwd=cwd,
            headers=_strings(row.get("headers", {}), f"{where}.headers"),
            risk=risk,
            default_risk=_risk(row.get("default_risk", "read"), f"{where}.default_risk"),
            allow=frozenset(allow),
            fallbacks=_strings(row.get("fallbacks", {}), f"{where}.fallbacks"),
            hide_open_tools=flag(row.get("hide_open_tools", hide), f"{where}.hide_open_tools"),
        )
    except PolicyError as exc:
        if exc.field is not None and not exc.field.startswith(where):
            exc.field = f"{where}.{exc.field}" if exc.field != "server" else where
        raise


def _risk(value: object, field: str) -> RiskClass:
    for risk in RISK_CLASSES:
        if value == risk:
            return risk
    raise PolicyError(
        f"{field} must be one of {', '.join(RISK_CLASSES)}, got {shown(value)}", field=field
    )


def _strings(value: object, where: str) -> dict[str, str]:
    """A table of strings (its values may be secrets: never echoed)."""
    strings = table(value, where)
    for key, item in strings.items():
        if not isinstance(item, str):
            raise PolicyError(f"{where}.{key} must be a string", field=f"{where}.{key}")
    return strings
