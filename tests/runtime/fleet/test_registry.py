"""The registry and its boundary sheet."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from toolbreaker import Policy, Registry
from toolbreaker.errors import PolicyError, RegistryFull

SHEET = """\
[defaults]
timeout_ms = 4000
cooldown_ms = 30000

[tools]
local = ["search_catalog_snapshot"]

[search.read]
tool = "search_catalog"
fallback = "search_catalog_snapshot"
fallback_note = "say in your answer that prices may be out of date"
owner = "catalog-team"
failure_threshold = 4

[billing.write]
tool = "charge_card"
timeout_ms = 10000
retryable = false
failure_threshold = 6
"""


def sheet(tmp_path: Path, text: str = SHEET) -> Path:
    path = tmp_path / "breakers.toml"
    path.write_text(text)
    return path


def test_same_key_same_breaker(tmp_path):
    """get() hands out one breaker per (dependency, operation), even under concurrency."""
    registry = Registry.from_toml(sheet(tmp_path))
    seen = []
    threads = [
        threading.Thread(target=lambda: seen.append(registry.get("search", "read")))
        for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(b) for b in seen}) == 1
    assert registry.get("search", "read") is not registry.get("search", "write", exact=True)


def test_sheet_rows_configure_breakers(tmp_path):
    """Each row carries its policy, deadline, fallback, owner and retryability."""
    registry = Registry.from_toml(sheet(tmp_path))
    search = registry.get("search", "read")
    billing = registry.get("billing", "write")
    assert search.policy == Policy(failure_threshold=4, cooldown_ms=30_000)
    assert (search.tool, search.fallback, search.owner, search.timeout) == (
        "search_catalog",
        "search_catalog_snapshot",
        "catalog-team",
        4.0,
    )
    assert billing.policy.failure_threshold == 6
    assert (billing.timeout, billing.retryable) == (10.0, False)
    assert registry.for_tool("charge_card") is billing


def test_payment_mutation_does_not_share_state_with_catalog_read(tmp_path):
    """Opening one breaker leaves the other dependency alone."""
    registry = Registry.from_toml(sheet(tmp_path))
    search = registry.get("search", "read")
    search.isolate()
    assert registry.get("billing", "write").state.phase == "closed"
    assert search.state.phase == "open"


def test_cardinality_limit():
    """Past max_breakers, get() raises instead of growing without bound."""
    registry = Registry(max_breakers=3, default_timeout=1.0)
    for n in range(3):
        registry.get(f"host-{n}")
    with pytest.raises(RegistryFull, match="limit of 3"):
        registry.get("host-3")
    assert registry.get("host-0") is registry.get("host-0")


def test_strict_registry_refuses_unknown_keys(tmp_path):
    """A strict registry only hands out breakers the sheet describes."""
    registry = Registry.from_toml(sheet(tmp_path), strict=True)
    with pytest.raises(PolicyError, match=r"no \[search.write\]"):
        registry.get("search", "write")


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        (
            SHEET.replace("failure_threshold = 4", "failure_threshold = 0"),
            "search.read.failure_threshold",
            13,
        ),
        (
            SHEET.replace('fallback = "search_catalog_snapshot"', 'fallback = "nope"'),
            "search.read.fallback",
            10,
        ),
        (SHEET.replace("owner =", "ownr ="), "search.read.ownr", 12),
        (SHEET.replace("timeout_ms = 10000", "timeout_ms = 60000"), "billing.write.timeout_ms", 17),
        (SHEET.replace("retryable = false", 'retryable = "no"'), "billing.write.retryable", 18),
        (SHEET.replace("timeout_ms = 4000", "timeout_ms = -1"), "defaults.timeout_ms", 2),
    ],
)
def test_invalid_sheets_name_the_field_and_line(tmp_path, text, field, line):
    """Invalid sheets fail at load with the field and its line."""
    path = sheet(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert info.value.field == field
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_fallback_must_be_registered_for_dynamic_breakers():
    """A fallback named at get() time must be a known tool."""
    registry = Registry(default_timeout=1.0)
    with pytest.raises(PolicyError, match="not a registered tool"):
        registry.get("search", fallback="ghost")
    registry.get("snapshot")
    assert registry.get("search", fallback="snapshot").fallback == "snapshot"


def test_defaults_apply_to_unlisted_dependencies(tmp_path):
    """A dependency the sheet does not list gets the [defaults] policy and deadline."""
    registry = Registry.from_toml(sheet(tmp_path))
    other = registry.get("weather")
    assert other.policy.cooldown_ms == 30_000
    assert other.timeout == 4.0


def test_get_takes_a_classifier_and_a_result_predicate(tmp_path):
    """Per-dependency classifiers and result predicates are given in code at get()."""
    from toolbreaker import Verdict

    registry = Registry.from_toml(sheet(tmp_path))
    breaker = registry.get(
        "weather",
        classifier=lambda exc: Verdict("failure", "custom"),
        result_is_failure=lambda r: r == "bad",
    )
    assert breaker.classify(ValueError()).detail == "custom"
    assert breaker.result_is_failure is not None
    assert breaker.result_is_failure("bad")


def test_unknown_get_option_is_a_policy_error():
    """A misspelt option at get() names itself instead of raising a TypeError."""
    with pytest.raises(PolicyError, match="fallbak") as info:
        Registry(default_timeout=1.0).get("x", fallbak="y")
    assert info.value.field == "fallbak"


def test_every_breaker_option_is_validated_once_by_boundary():
    """Breaker, a sheet row and Registry.get options all go through Boundary's checks."""
    from toolbreaker import Boundary, Breaker, Registry
    from toolbreaker.errors import PolicyError

    for bad in (float("inf"), float("nan"), -1, True, "3"):
        with pytest.raises(PolicyError, match="timeout"):
            Breaker("x", timeout=bad)
        with pytest.raises(PolicyError, match="timeout"):
            Boundary("x", timeout=bad)
        with pytest.raises(PolicyError, match="timeout"):
            Registry().get("x", timeout=bad)
    with pytest.raises(PolicyError, match=r"search\.read\.timeout"):
        Registry.from_dict({"search": {"read": {"timeout": float("inf")}}})
    breaker = Breaker("x", timeout=1.5, owner="team")
    assert breaker.boundary == Boundary("x", timeout=1.5, owner="team")
