"""A scenario's faults for an MCP server over stdio: a wrapper process between host and server.

``ctx.mcp_stdio(command)`` gives the command an MCP host launches instead of the server's
own: a small standard-library process that starts the real server and relays JSON-RPC
lines both ways. Each ``tools/call`` is an attempt of the target named by the tool; the
wrapper asks the exercise's fault proxy (its control routes, over 127.0.0.1) which fault
the attempt gets, so the one ``Ledger`` counts it, and carries
the fault out on the wire:

- ``outage``, ``rate-limit``, ``credential``: answered by the wrapper with an ``isError``
  result (``HTTP 503 ...; Retry-After: N``), never forwarded;
- ``slow``: never forwarded, never answered (the host's deadline ends it); the server
  itself still answers everything else, the host's liveness ping included: one slow
  tool, not a dead server;
- ``commit-then-timeout``: forwarded, its answer dropped;
- ``late-success``: forwarded, its answer held for the fault's delay;
- ``malformed``: forwarded, its answer replaced by one of the wrong shape.

A successful call of a tool the server lists without ``readOnlyHint`` is a commit, with
the host's ``_meta`` idempotency key. The child runs from source text (``python -c``), so
it needs nothing importable: MCP hosts start servers with a bare environment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

__all__ = ["CONTROL_PREFIX", "mcp_stdio_command"]

#: The fault proxy's path prefix for the wrapper's questions (never a tool service route).
CONTROL_PREFIX: Final = "/.toolbreaker/"

_WRAPPER: Final = r"""
import json, subprocess, sys, threading, urllib.request

control, meta_key, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
lock = threading.Lock()
pending, listing, reads, writes = {}, set(), set(), set()

def emit(data):
    with lock:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode() + b"\n"
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()

def ask(path, body):
    request = urllib.request.Request(control + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with opener.open(request, timeout=30) as response:
        return json.loads(response.read())

def refused(rule):
    text = "HTTP %d injected %s by fault %r" % (rule["status"], rule["kind"], rule["name"])
    if rule.get("retry_after") is not None:
        text += "; Retry-After: %g" % rule["retry_after"]
    # resultType: what a current server's results carry (older clients ignore it)
    return {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}

def inbound():
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if isinstance(msg, dict) and "id" in msg and msg.get("method") == "tools/list":
            listing.add(msg["id"])
        if isinstance(msg, dict) and "id" in msg and msg.get("method") == "tools/call":
            params = msg.get("params") or {}
            name = str(params.get("name"))
            rule = ask("attempt", {"target": name})["rule"]
            key = (params.get("_meta") or {}).get(meta_key)
            if rule is not None and rule["status"] is not None:
                emit({"jsonrpc": "2.0", "id": msg["id"], "result": refused(rule)})
                continue
            if rule is not None and rule["kind"] == "slow":
                continue
            pending[msg["id"]] = (rule, name, params.get("arguments") or {}, key)
        server.stdin.write(line)
        server.stdin.flush()
    server.stdin.close()

def outbound():
    for line in server.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            emit(line)
            continue
        mid = msg.get("id") if isinstance(msg, dict) else None
        result = msg.get("result") if isinstance(msg, dict) else None
        if mid in listing and isinstance(result, dict):
            listing.discard(mid)
            for tool in result.get("tools") or []:
                hints = tool.get("annotations") or {}
                (reads if hints.get("readOnlyHint") else writes).add(tool.get("name"))
        entry = pending.pop(mid, None)
        if entry is None:
            emit(line)
            continue
        rule, name, args, key = entry
        if isinstance(result, dict) and not result.get("isError") and name in writes:
            ask("commit", {"target": name, "key": key, "args": args})
        kind = None if rule is None else rule["kind"]
        if kind == "commit-then-timeout":
            continue
        if kind == "late-success":
            timer = threading.Timer(rule["delay"], emit, (line,))
            timer.daemon = True
            timer.start()
            continue
        if kind == "malformed" and isinstance(result, dict):
            if rule["malformed"] == "shape":
                wrong = {"content": [{"type": "text", "text": '{"unexpected": true}'}],
                         "structuredContent": {"unexpected": True}}
            else:
                text = json.dumps(result.get("structuredContent") or result)
                wrong = {"content": [{"type": "text", "text": text[: len(text) // 2]}]}
            kept = {k: v for k, v in result.items() if k not in ("content", "structuredContent")}
            msg["result"] = {**kept, **wrong}
            emit(msg)
            continue
        emit(line)

threading.Thread(target=inbound, daemon=True).start()
outbound()
sys.exit(server.wait())
"""


def mcp_stdio_command(control_url: str, meta_key: str, command: Sequence[str]) -> list[str]:
    """The argv of the wrapper around the stdio server ``command``.

    Args:
        control_url: the fault proxy's base URL plus :data:`CONTROL_PREFIX`.
        meta_key: the request ``_meta`` key of the idempotency key.
        command: the real server's argv.
    """
    if not command:
        raise ValueError("mcp_stdio needs the server's command")
    return [sys.executable, "-c", _WRAPPER, control_url, meta_key, *command]
