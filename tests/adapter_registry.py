"""The registry the framework adapters' tests run their scripted agents against: two
dependencies of the bundled tool service (``search`` with a local fallback, ``orders``),
cooperative deadlines (the frameworks run sync tools in threads of their own)."""

from __future__ import annotations

from toolbreaker import Policy, Registry

TIMEOUT = 1.0
"""Each tool call's deadline, and the tests' own HTTP timeout to the tool service."""


def make_registry(threshold: int = 2) -> Registry:
    """``search`` (fallback ``search_snapshot``, a local tool) and ``orders``
    (``order_status``), each opening after ``threshold`` qualifying failures."""
    registry = Registry(
        Policy(failure_threshold=threshold),
        default_timeout=TIMEOUT,
        default_enforce="cooperative",
        local_tools={"search_snapshot"},
    )
    registry.get("search", tool="search", fallback="search_snapshot")
    registry.get("orders", tool="order_status")
    return registry
