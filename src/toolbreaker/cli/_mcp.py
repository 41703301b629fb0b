"""``toolbreaker mcp``: an MCP server in front of the user's MCP servers (extra: mcp).

::

    toolbreaker mcp --sheet breakers.toml -- npx -y @modelcontextprotocol/server-everything
    toolbreaker mcp --sheet breakers.toml --upstream https://catalog.example.com/mcp
    toolbreaker mcp --sheet breakers.toml --server catalog        # one of [mcp.servers]
    toolbreaker mcp --sheet breakers.toml --http --port 8931      # every server, /mcp/NAME

Over stdio (what a host launches) it serves one server: the command after ``--``, the
``--upstream`` URL, or the sheet's ``[mcp.servers.NAME]`` that ``--server`` names (the
only one without it). Over HTTP it serves every server the sheet names, at
``http://127.0.0.1:PORT/mcp/NAME``; bound to any other address it needs a bearer token
(``--token-env``). ``--store URL`` keeps the breakers, the runs' journals and the event
stream in one shared store, where ``export``, ``advise``, ``dashboard`` and ``run show``
find them. See docs/integrations/mcp-gateway.md.

A bad sheet, a command that cannot run or exits before it answered, a bad URL: one line,
exit 2. Nothing but the protocol is written to stdout; the operator's lines (a breaker
that opened, a run that stopped, a server started again) go to stderr, which hosts keep
in the server's log.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import signal
from typing import Any

from toolbreaker.cli._stores import SHARED_STORES, open_store
from toolbreaker.core._files import shown
from toolbreaker.errors import PolicyError

__all__ = ["add_command"]

_TOKEN_ENV = "TOOLBREAKER_MCP_TOKEN"  # noqa: S105 - the variable's name, not a token
_AD_HOC = "upstream"


def add_command(commands: Any) -> None:
    """Register ``mcp`` on the top-level subparsers."""
    cmd = commands.add_parser(
        "mcp",
        help="serve as an MCP server in front of your MCP servers, with breakers (extra: mcp)",
        description=(
            "An MCP server in front of MCP servers: every tools/call through the breakers "
            "and a run guard, everything else relayed unchanged."
        ),
    )
    cmd.add_argument("--sheet", help="the boundary sheet: breaker rows and [mcp.servers.NAME]")
    cmd.add_argument(
        "--server",
        metavar="NAME",
        help=(
            "the server to serve over stdio (one of the sheet's), or the name of the "
            f"command's or --upstream's server (default {_AD_HOC!r})"
        ),
    )
    cmd.add_argument("--upstream", metavar="URL", help="a streamable-HTTP MCP server to front")
    cmd.add_argument(
        "--store",
        help=f"the breakers, journals and event stream: {SHARED_STORES} (made if missing)",
    )
    cmd.add_argument(
        "--run",
        metavar="ID",
        help=(
            "the run id of each host session, a template of {client}, {cwd}, {server} "
            "(default: the sheet's [mcp] run, else a new run per session)"
        ),
    )
    cmd.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="the deadline of calls no sheet row gives one (default 30)",
    )
    cmd.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    cmd.add_argument("--host", default="127.0.0.1", help="the address to bind with --http")
    cmd.add_argument("--port", type=int, default=8931, help="the port with --http (0: any free)")
    cmd.add_argument(
        "--token-env",
        metavar="VAR",
        default=_TOKEN_ENV,
        help=f"the variable holding the bearer token hosts must send (default {_TOKEN_ENV})",
    )
    cmd.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin allowed besides localhost (repeatable)",
    )
    cmd.add_argument(
        "command", nargs="*", metavar="-- COMMAND", help="the stdio MCP server to front"
    )
    cmd.set_defaults(run_command=_run)


def _run(args: argparse.Namespace) -> int:
    from toolbreaker._extras import require

    try:
        require("mcp", "mcp")
    except ImportError as exc:
        raise PolicyError(str(exc), field="mcp") from None
    from toolbreaker.integrations.mcp_gateway import DEFAULT_TIMEOUT, Gateway
    from toolbreaker.integrations.mcp_gateway._upstream import UpstreamGone

    extra = _ad_hoc(args)
    store = open_store(args.store, create=True) if args.store else None
    observers = []
    if args.store:
        from toolbreaker.instrumentation.stream import StreamPublisher, open_stream

        observers.append(StreamPublisher(open_stream(args.store)))
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    if not 0 < timeout < float("inf"):
        raise PolicyError(f"--timeout must be a positive number, got {args.timeout!r}")
    gateway = Gateway.from_sheet(
        args.sheet,
        servers=extra,
        store=store,
        run=args.run,
        timeout=timeout,
        observers=observers,
    )
    for spec in gateway.servers.values():
        _check_command(spec)
    import anyio

    try:
        if args.http:
            token = _token(args)
            anyio.run(
                lambda: gateway.serve_http(
                    host=args.host,
                    port=args.port,
                    token=token,
                    allowed_origins=args.allow_origin,
                )
            )
        else:
            name = args.server if not extra else extra[0].name
            spec = gateway.spec(name)
            anyio.run(lambda: _until_signalled(gateway.serve_stdio(spec.name)))
    except UpstreamGone as exc:
        raise PolicyError(f"{exc} (before it answered anything)", field="command") from None
    finally:
        gateway.close()
        for observer in observers:
            observer.close()
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return 0


async def _until_signalled(serving: Any) -> None:
    """Serve until the host closes stdin, or stops the gateway (SIGTERM, SIGHUP).

    Stopped by a signal, the gateway stops its servers before it exits: they run in
    sessions of their own, which the host's signal does not reach.
    """
    import anyio

    failed: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        try:
            await serving
        except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
            failed.append(exc)
        tg.cancel_scope.cancel()
    if failed:  # as it came: one line of the command line's, not an exception group
        raise failed[0]


def _ad_hoc(args: argparse.Namespace) -> list[Any]:
    """The server of ``-- COMMAND`` or ``--upstream URL``, if one is given."""
    from toolbreaker.integrations.mcp_gateway import UpstreamSpec

    if args.command and args.upstream:
        raise PolicyError("give a command after -- or --upstream URL, not both", field="upstream")
    if not args.command and not args.upstream:
        return []
    name = args.server or _AD_HOC
    if args.command:
        return [UpstreamSpec(name=name, command=tuple(args.command))]
    return [UpstreamSpec(name=name, url=args.upstream)]


def _check_command(spec: Any) -> None:
    """A stdio server's program exists and may be run: else one line, exit 2."""
    if spec.command is None:
        return
    program = spec.command[0]
    path = (spec.env or {}).get("PATH", os.environ.get("PATH"))
    found = shutil.which(program, path=path)
    if found is None and os.sep in program and spec.cwd:
        found = shutil.which(os.path.join(spec.cwd, program))
    if found is None:
        raise PolicyError(
            f"server {spec.name!r}: cannot run {shown(program)}: not found or not executable",
            field="command",
        )


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: required when the address is not loopback."""
    token = os.environ.get(args.token_env) or None
    if token is not None and len(token) < 16:
        raise PolicyError(
            f"the token in ${args.token_env} is too short: use 16 characters or more",
            field="token",
        )
    if token is None and not _loopback(args.host):
        raise PolicyError(
            f"--host {shown(args.host)} is reachable from other machines: set a bearer token "
            f"in ${args.token_env} (hosts send it as Authorization: Bearer ...)",
            field="token",
        )
    return token


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
