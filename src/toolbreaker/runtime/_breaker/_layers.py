"""Nested retry layers, found at setup: retries belong to one chosen layer.

A tool guarded by a breaker that retries, or called by a model that re-issues failed
calls, must not hide a client that retries on its own: the attempts multiply (3 client
attempts x 3 framework tries x 3 model calls = 27 remote calls for one question). This
module looks, without importing anything, at what a tool function can reach (a bound
``self``, its closure, the globals it names, its default arguments) for clients that
retry by themselves, and says how to turn each off:

- OpenAI and Anthropic SDK clients with ``max_retries`` above 0 (their default is 2);
- ``httpx.Client`` / ``AsyncClient`` whose transport retries (``HTTPTransport(retries=)``);
- ``requests.Session`` with a mounted adapter whose ``max_retries`` allows retries.

What it cannot see (a client built inside the function at each call, LangChain's
``ToolRetryMiddleware``, Pydantic AI's tool retries) is for the adapters and the docs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Final

from toolbreaker.runtime._log import log as _log

__all__ = ["NestedRetry", "nested_retries", "warn_nested_retries"]

_SDKS: Final = ("openai", "anthropic")
_MAX_OBJECTS: Final = 64


@dataclasses.dataclass(frozen=True, slots=True)
class NestedRetry:
    """A client inside a tool that retries by itself.

    Attributes:
        where: how the tool reaches it (``closure 'client'``, ``global 'session'`` ...).
        layer: what retries (``openai.OpenAI``, ``httpx.Client``, ``requests.Session``).
        retries: how many times it retries a failed request.
        fix: how to turn it off so that one layer retries.
    """

    where: str
    layer: str
    retries: int
    fix: str


def nested_retries(fn: Callable[..., Any]) -> list[NestedRetry]:
    """The self-retrying clients ``fn`` can reach; empty when none is visible. Never raises."""
    found: list[NestedRetry] = []
    seen: set[int] = set()
    try:
        for where, obj in _reachable(fn):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            hit = _retrying(where, obj)
            if hit is not None:
                found.append(hit)
    except Exception:  # noqa: BLE001 - a best-effort look must never break setup
        _log.debug("toolbreaker: could not inspect %r for nested retries", fn, exc_info=True)
    return found


def warn_nested_retries(fn: Callable[..., Any], tool: str, chosen: str) -> list[NestedRetry]:
    """Log a warning per nested retry layer of ``fn``; returns them.

    ``chosen`` names the layer that retries instead (``the breaker's retry policy``).
    """
    found = nested_retries(fn)
    for hit in found:
        _log.warning(
            "toolbreaker: tool %r reaches %s (%s) that retries %d times on its own, and %s "
            "retries too: attempts multiply. Fix: %s",
            tool,
            hit.layer,
            hit.where,
            hit.retries,
            chosen,
            hit.fix,
        )
    return found


def _reachable(fn: Callable[..., Any]) -> Iterator[tuple[str, object]]:
    target = getattr(fn, "__wrapped__", fn)
    owner = getattr(target, "__self__", None)
    if owner is not None:
        yield "bound self", owner
        yield from _attributes(owner, "self")
    func = getattr(target, "__func__", target)
    code = getattr(func, "__code__", None)
    closure = getattr(func, "__closure__", None) or ()
    if code is not None:
        for name, cell in zip(code.co_freevars, closure, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            yield f"closure {name!r}", value
        names = getattr(func, "__globals__", {})
        for name in code.co_names[:_MAX_OBJECTS]:
            if name in names:
                yield f"global {name!r}", names[name]
    for i, value in enumerate(getattr(func, "__defaults__", None) or ()):
        yield f"default #{i}", value
    if not callable(getattr(target, "__code__", None)) and owner is None:
        # A callable object: its attributes.
        yield from _attributes(target, "tool")


def _attributes(obj: object, prefix: str) -> Iterator[tuple[str, object]]:
    values = getattr(obj, "__dict__", None)
    if isinstance(values, dict):
        for name, value in list(values.items())[:_MAX_OBJECTS]:
            yield f"{prefix}.{name}", value


def _root(obj: object) -> str:
    return type(obj).__module__.partition(".")[0]


def _retrying(where: str, obj: object) -> NestedRetry | None:
    root = _root(obj)
    name = type(obj).__name__
    if root in _SDKS:
        retries = getattr(obj, "max_retries", None)
        if type(retries) is int and retries > 0:
            return NestedRetry(
                where,
                f"{root}.{name}",
                retries,
                f"build it with {name}(max_retries=0) or use client.with_options(max_retries=0)",
            )
        return None
    if root == "httpx" and name in ("Client", "AsyncClient"):
        pool = getattr(getattr(obj, "_transport", None), "_pool", None)
        retries = getattr(pool, "_retries", 0)
        if type(retries) is int and retries > 0:
            return NestedRetry(
                where,
                f"httpx.{name}",
                retries,
                "give it a transport without retries (HTTPTransport(retries=0))",
            )
        return None
    if root == "requests" and name == "Session":
        adapters = getattr(obj, "adapters", {})
        worst = 0
        for adapter in getattr(adapters, "values", list)():
            total = getattr(getattr(adapter, "max_retries", None), "total", 0)
            if type(total) is int:
                worst = max(worst, total)
        if worst > 0:
            return NestedRetry(
                where,
                "requests.Session",
                worst,
                "mount an HTTPAdapter(max_retries=0)",
            )
    return None
