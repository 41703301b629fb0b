"""Which row a breaker asked for by name takes: the sheet's row, or a loud refusal.

A registry loaded from a boundary sheet never quietly makes a breaker on the sheet's
defaults for a name the sheet describes another way: a dependency asked for without an
operation takes its one row, one asked for with an operation it has no row for is refused
with its rows listed, and a name the sheet lacks but closely resembles one it has is
refused naming that row. A breaker that does run on the defaults says so: a log line once,
``stats.on_defaults``.
"""

from __future__ import annotations

import logging

import pytest

from toolbreaker import Policy, Registry
from toolbreaker.errors import PolicyError, RowNotFound

SHEET = {
    "defaults": {"timeout_ms": 4000},
    "inventory": {
        "read": {
            "tool": "check_stock",
            "owner": "stock-team",
            "failure_threshold": 2,
            "timeout_ms": 1500,
        }
    },
    "orders": {
        "read": {"owner": "fulfilment"},
        "write": {"owner": "fulfilment", "timeout_ms": 9000},
    },
    "search": {"default": {"owner": "catalog-team"}, "read": {"failure_threshold": 3}},
}


@pytest.fixture
def registry() -> Registry:
    return Registry.from_dict(SHEET)


def test_a_dependency_asked_for_without_an_operation_takes_its_one_row(registry):
    """get("inventory") on a sheet whose only inventory row is [inventory.read] is that
    row's breaker: its threshold, deadline and owner apply, never the defaults."""
    breaker = registry.get("inventory")
    assert breaker.key == "inventory:read"
    assert breaker.owner == "stock-team"
    assert breaker.policy.failure_threshold == 2
    assert breaker.timeout == 1.5
    assert breaker.stats.on_defaults is False
    assert registry.get("inventory") is registry.get("inventory", "read")
    # "default" names no operation class either: the same one row.
    assert registry.get("inventory", "default") is breaker


def test_a_default_row_is_what_no_operation_names(registry):
    """A dependency with a [search.default] row: get("search") is that row."""
    assert registry.get("search").key == "search"
    assert registry.get("search").owner == "catalog-team"


def test_several_rows_and_no_operation_is_refused_listing_them(registry):
    """get("orders") when the sheet has [orders.read] and [orders.write]: which one is a
    decision the code must make, so it is refused, with the rows."""
    with pytest.raises(RowNotFound) as info:
        registry.get("orders")
    error = info.value
    assert isinstance(error, PolicyError)
    assert error.rows == ("orders.read", "orders.write")
    assert error.resembles is None
    assert "[orders.read]" in str(error)
    assert "[orders.write]" in str(error)
    assert len(registry) == 0


def test_an_operation_the_sheet_has_no_row_for_is_refused_listing_its_rows(registry):
    """get("inventory", "write") with only [inventory.read]: never the read row (a write
    must not share a read's breaker and retries), never the defaults: refused."""
    with pytest.raises(RowNotFound) as info:
        registry.get("inventory", "write")
    assert info.value.rows == ("inventory.read",)
    assert "inventory.write" in str(info.value)
    assert len(registry) == 0


def test_a_name_close_to_a_rows_is_refused_naming_the_row(registry):
    """get("inventroy", "read"), a typo the sheet lacks: refused, naming [inventory.read]."""
    with pytest.raises(RowNotFound) as info:
        registry.get("inventroy", "read")
    assert info.value.resembles == "inventory.read"
    assert "inventory.read" in str(info.value)
    assert "unlisted" in str(info.value)  # the way out, when the name is meant
    with pytest.raises(RowNotFound, match="inventory"):
        registry.get("Inventory")


def test_a_tool_name_asked_for_as_a_dependency_is_refused_naming_its_row(registry):
    """get("check_stock"): the tool of [inventory.read], not a dependency of its own."""
    with pytest.raises(RowNotFound) as info:
        registry.get("check_stock")
    assert info.value.resembles == "inventory.read"
    assert "check_stock" in str(info.value)


def test_unlisted_names_run_on_the_defaults_on_purpose():
    """[defaults] unlisted names dependencies the sheet leaves out on purpose: one close to
    a row's name then runs on the defaults (and says so)."""
    sheet = {**SHEET, "defaults": {"timeout_ms": 4000, "unlisted": ["inventories"]}}
    registry = Registry.from_dict(sheet)
    breaker = registry.get("inventories")
    assert breaker.key == "inventories"
    assert breaker.stats.on_defaults is True
    with pytest.raises(RowNotFound):
        registry.get("inventroy")
    code = Registry(boundaries=Registry.from_dict(SHEET).boundaries(), unlisted={"inventroy"})
    assert code.get("inventroy").stats.on_defaults is True


@pytest.mark.parametrize(
    ("unlisted", "field"),
    [("inventory", "defaults.unlisted"), ([""], "defaults.unlisted"), ([3], "defaults.unlisted")],
)
def test_unlisted_must_be_a_list_of_names(unlisted, field):
    with pytest.raises(PolicyError) as info:
        Registry.from_dict({**SHEET, "defaults": {"timeout_ms": 4000, "unlisted": unlisted}})
    assert info.value.field == field


def test_exact_takes_the_key_as_given(registry):
    """exact=True (an adapter that keys breakers by tool, as MCP does): the key's row, else
    a breaker of its own on the defaults, never another row of the dependency."""
    breaker = registry.get("orders", "refund", exact=True)
    assert breaker.key == "orders:refund"
    assert breaker.stats.on_defaults is True
    assert breaker.timeout == 4.0
    assert registry.get("orders", "read", exact=True).owner == "fulfilment"
    with pytest.raises(RowNotFound):  # a typo of the dependency is still one
        registry.get("ordres", "read", exact=True)


def test_a_breaker_on_the_defaults_says_so_once(registry, caplog):
    """A name the sheet does not describe runs on [defaults]: one log line per breaker,
    stats.on_defaults, and in stats.to_dict()."""
    with caplog.at_level(logging.WARNING, logger="toolbreaker"):
        weather = registry.get("weather")
        registry.get("weather")
        registry.get("inventory")
    assert weather.stats.on_defaults is True
    assert weather.stats.to_dict()["on_defaults"] is True
    assert "on_defaults" not in registry.get("inventory").stats.to_dict()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "weather" in lines[0]
    assert "defaults" in lines[0]


def test_a_registry_without_a_sheet_marks_but_does_not_warn(caplog):
    """Registry() has no sheet: every breaker runs on its default policy, as built in code;
    stats say so, and no line warns about a sheet there is none of."""
    registry = Registry(Policy(failure_threshold=3), default_timeout=2.0)
    with caplog.at_level(logging.WARNING, logger="toolbreaker"):
        breaker = registry.get("search", "read")
    assert breaker.stats.on_defaults is True
    assert caplog.records == []
    assert registry.get("search", "write") is not breaker  # no rows: nothing to refuse


def test_strict_still_refuses_every_key_the_sheet_lacks():
    registry = Registry.from_dict(SHEET, strict=True)
    with pytest.raises(RowNotFound, match="strict"):
        registry.get("weather")
    assert registry.get("inventory").key == "inventory:read"


def test_resolve_says_where_a_breaker_would_come_from(registry):
    """resolve() answers without making a breaker: the key and whether it is a row."""
    found = registry.resolve("inventory")
    assert (found.dependency, found.operation, found.row) == ("inventory", "read", True)
    found = registry.resolve("weather")
    assert (found.dependency, found.operation, found.row) == ("weather", "default", False)
    assert len(registry) == 0
