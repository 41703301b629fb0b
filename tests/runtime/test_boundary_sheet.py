"""The boundary sheet's one parser (runtime/_sheet.py): one set of rules for every row.

A row written in a sheet and the same row given in code are checked by the same rules and
are the same row; ``[defaults]`` is checked as a row is; every table's unknown fields are
refused by one check, located at their line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbreaker import Breaker, Registry, RetryPolicy
from toolbreaker.errors import PolicyError
from toolbreaker.integrations.mcp_gateway._sheet import check_name
from toolbreaker.runtime._breaker._boundary import BREAKER_OPTIONS
from toolbreaker.runtime._sheet import (
    ROW_OPTIONS,
    SHEET_OPTIONS,
    TABLES,
    HealthCheck,
    parse_sheet,
    row_values,
)
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import FakeClock


def _load(tmp_path: Path, text: str) -> Registry:
    path = tmp_path / "sheet.toml"
    path.write_text(text, encoding="utf-8")
    return Registry.from_toml(path)


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(PolicyError) as info:
        _load(tmp_path, text)
    located = info.value.located()
    assert "\n" not in located
    return located


def test_the_sheets_options_are_the_boundarys_fields():
    """The sheet's table of a row's options and Boundary's fields are one list."""
    assert ROW_OPTIONS == BREAKER_OPTIONS
    assert BREAKER_OPTIONS - {"policy", "classifier", "result_is_failure"} == SHEET_OPTIONS


def test_a_row_in_code_and_the_same_row_in_a_sheet_are_one_row():
    """Tables, modes and seconds given in code become what the sheet's row holds."""
    in_code = Breaker(
        "search",
        operation="read",
        timeout=2,
        retry={"max_attempts": 2},
        degrade="stale",
        max_stale=900,
        health_check={"url": "http://search.internal/health", "timeout": 1.5},
    ).boundary
    sheet = {
        "search": {
            "read": {
                "timeout_ms": 2000,
                "retry": {"max_attempts": 2},
                "degrade": "stale",
                "max_stale_ms": 900_000,
                "health_check": {"url": "http://search.internal/health", "timeout_ms": 1500},
            }
        }
    }
    from_sheet = Registry.from_dict(sheet, store=MemoryStore()).get("search", "read").boundary
    assert from_sheet == in_code
    assert in_code.retry == RetryPolicy(max_attempts=2)
    assert in_code.degrade == ("stale",)
    assert in_code.policy.probes == "health-check"
    assert isinstance(in_code.health_check, HealthCheck)


def test_checking_a_checked_row_again_changes_nothing():
    """What the rules return is what a row holds: checked again, it is the same."""
    given = {
        "dependency": "search",
        "operation": "read",
        "policy": None,
        "timeout": 2,
        "retry": {"max_attempts": 2},
        "degrade": "stale",
        "max_stale": 900,
        "instructions": None,
        "health_check": lambda: True,
    }
    checked = row_values(given)
    assert checked != given
    assert row_values(checked) == checked


def test_the_sheet_is_parsed_whole_into_validated_values():
    """parse_sheet hands the registry checked values: defaults, rows, tools, notes."""
    sheet = parse_sheet(
        {
            "defaults": {"timeout_ms": 4000, "cooldown_ms": 30_000, "unlisted": ["research"]},
            "tools": {"local": ["search_snapshot"]},
            "search": {"read": {"fallback": "search_snapshot", "timeout": 2.0}},
            "mcp": {"servers": {}},
        }
    )
    assert sheet.timeout == 4.0
    assert sheet.policy.cooldown_ms == 30_000
    assert sheet.unlisted == frozenset({"research"})
    assert sheet.local_tools == frozenset({"search_snapshot"})
    row = sheet.rows[("search", "read")]
    assert row["timeout"] == 2.0
    assert row["policy"].cooldown_ms == 30_000
    assert len(sheet.notes) == 1
    assert "timeout = 2.0 (seconds) is deprecated: write timeout_ms = 2000" in sheet.notes[0]


def test_the_defaults_are_checked_as_a_row_is(tmp_path):
    """A [defaults] deadline its own lease cannot outlive is refused at its line: every
    breaker the sheet has no row for would take it (it used to load, and fail at get())."""
    located = _refused(tmp_path, "[defaults]\ncooldown_ms = 1000\ntimeout_ms = 40000\n")
    assert located.startswith(f"{tmp_path / 'sheet.toml'}:3: defaults.timeout_ms (40.0 s)")
    assert "exceeds lease_ttl_ms (30000)" in located
    fits = _load(tmp_path, "[defaults]\ntimeout_ms = 40000\nlease_ttl_ms = 60000\n")
    assert fits.get("weather").timeout == 40.0


def test_a_registry_refuses_defaults_no_breaker_could_take():
    """Registry(default_timeout=..., default_enforce=...) is checked when it is built,
    by the rules of a row, not at the first get() of a key without a row."""
    with pytest.raises(PolicyError, match="exceeds lease_ttl_ms") as info:
        Registry(default_timeout=40)
    assert info.value.field == "default_timeout"
    with pytest.raises(PolicyError, match="positive number of seconds"):
        Registry(default_timeout=float("nan"))
    with pytest.raises(PolicyError, match="'thread' or 'cooperative'") as info:
        Registry(default_enforce="threads")  # type: ignore[arg-type]
    assert info.value.field == "default_enforce"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[defaults]\ntimeout_ms = 1000\ncolour = 1\n", 3, "unknown field 'colour' in [defaults]"),
        (
            "[search.read]\ntimeout_ms = 1000\ncolour = 1\n",
            3,
            "unknown field 'colour' in [search.read]",
        ),
        (
            "[search.read]\ntimeout_ms = 1000\nhealth_check = { colour = 1 }\n",
            3,
            "unknown field 'colour' in [health_check] (known: interval_ms, timeout_ms, url)",
        ),
        (
            "[search.read]\ntimeout_ms = 1000\n[search.read.instructions]\nsideways = 'x'\n",
            4,
            "unknown instruction reason 'sideways'",
        ),
        ("[search.read]\ntimeout_ms = 1000\nretryable = 1\n", 3, "search.read.retryable must be"),
        ("[tools]\nlocal = ['a']\ncolour = 1\n", 2, "[tools] takes one key"),
        ("defaults = 3\n", 1, "[defaults] must be a table, got 3"),
    ],
)
def test_every_tables_unknown_fields_are_one_check(tmp_path, text, line, words):
    """[defaults], a row, a row's health check and [tools]: one check, located."""
    located = _refused(tmp_path, text)
    assert located.startswith(f"{tmp_path / 'sheet.toml'}:{line}: "), located
    assert words in located


def test_the_sheets_own_tables_are_never_a_server_or_a_dependency():
    """The gateway refuses a server named like a table of the sheet; the registry reads
    no dependency from one."""
    assert {"defaults", "tools", "mcp"} == TABLES
    for name in TABLES:
        with pytest.raises(PolicyError, match="reserved"):
            check_name(name, "server")
    assert parse_sheet({"mcp": {"read": {"timeout": 1.0}}}).rows == {}


def test_a_sheets_cooldown_is_the_cooldown_the_machine_decides(tmp_path):
    """The walk of ``cooldown_ms``: sheet file -> parse_sheet -> the row's Policy ->
    Boundary -> Breaker.policy -> the store's apply() -> the machine's opening, whose
    cooldown is the row's (its [defaults] for a key without a row)."""
    clock = FakeClock()
    path = tmp_path / "sheet.toml"
    path.write_text(
        "[defaults]\ntimeout_ms = 1000\nfailure_threshold = 1\ncooldown_ms = 7000\n"
        "[search.read]\ncooldown_ms = 3000\n",
        encoding="utf-8",
    )
    registry = Registry.from_toml(path, clock=clock)
    for key, cooldown in ((("search", "read"), 3000), (("weather", None), 7000)):
        breaker = registry.get(*key)
        assert breaker.policy.cooldown_ms == cooldown
        with pytest.raises(ConnectionError, match="down"):
            breaker.call(_failing)
        assert breaker.retry_after_ms() == cooldown


def _failing() -> None:
    raise ConnectionError("down")
