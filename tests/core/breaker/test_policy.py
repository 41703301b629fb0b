"""Policy: validation names the field, TOML loading names the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbreaker import Policy
from toolbreaker.errors import PolicyError


def test_defaults_match_the_documented_table():
    """The defaults are the documented ones."""
    assert Policy().to_dict() == {
        "failure_threshold": 3,
        "window_ms": None,
        "cooldown_ms": 20_000,
        "cooldown_multiplier": 1,
        "cooldown_max_ms": 300_000,
        "probe_limit": 1,
        "success_threshold": 2,
        "lease_ttl_ms": 30_000,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failure_threshold", 0),
        ("failure_threshold", -1),
        ("cooldown_ms", 0),
        ("probe_limit", 1.5),
        ("success_threshold", "2"),
        ("lease_ttl_ms", True),
        ("window_ms", 0),
        ("cooldown_multiplier", 0),
    ],
)
def test_invalid_values_raise_naming_the_field(field, value):
    """Zero, negative, non-integer and boolean values are refused with the field named."""
    with pytest.raises(PolicyError) as info:
        Policy(**{field: value})
    assert info.value.field == field
    assert field in str(info.value)


def test_cooldown_max_below_cooldown_is_refused():
    """cooldown_max_ms < cooldown_ms is an error on cooldown_max_ms."""
    with pytest.raises(PolicyError) as info:
        Policy(cooldown_ms=10_000, cooldown_max_ms=5_000)
    assert info.value.field == "cooldown_max_ms"


def test_unknown_key_is_refused():
    """A typo in a policy key is an error, not a silently ignored setting."""
    with pytest.raises(PolicyError, match="failure_treshold") as info:
        Policy.from_dict({"failure_treshold": 3})
    assert info.value.field == "failure_treshold"


def test_version_changes_with_any_field():
    """The version is a short content hash: equal policies share it, any change alters it."""
    assert Policy().version == Policy().version
    assert len(Policy().version) == 12
    assert Policy().version != Policy(failure_threshold=4).version


def test_growing_cooldown_is_capped():
    """The n-th consecutive opening waits cooldown * multiplier^(n-1), capped."""
    policy = Policy(cooldown_ms=1_000, cooldown_multiplier=2, cooldown_max_ms=5_000)
    assert [policy.cooldown_for(n) for n in range(1, 6)] == [1_000, 2_000, 4_000, 5_000, 5_000]
    assert policy.cooldown_for(10_000) == 5_000


def test_toml_loads_top_level_fields(tmp_path: Path):
    """A TOML file whose top-level keys are fields loads as a policy."""
    path = tmp_path / "p.toml"
    path.write_text("failure_threshold = 5\nwindow_ms = 60000\n")
    assert Policy.from_toml(path) == Policy(failure_threshold=5, window_ms=60_000)


def test_toml_error_names_file_and_line(tmp_path: Path):
    """An invalid value in TOML is reported with the file and the key's line."""
    path = tmp_path / "p.toml"
    path.write_text("# comment\nfailure_threshold = 3\ncooldown_ms = 0\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_toml(path)
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 3, "cooldown_ms")
    assert str(info.value).startswith(f"{path}:3: cooldown_ms")


def test_toml_syntax_error_names_the_line(tmp_path: Path):
    """A TOML syntax error keeps the line tomllib found it on."""
    path = tmp_path / "p.toml"
    path.write_text("failure_threshold = 3\ncooldown_ms = = 4\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_toml(path)
    assert info.value.line == 2


def test_missing_file_is_a_policy_error(tmp_path: Path):
    """A missing file is a PolicyError naming it, not an OSError traceback."""
    with pytest.raises(PolicyError, match="cannot read"):
        Policy.from_toml(tmp_path / "absent.toml")


def test_an_unset_cooldown_max_follows_the_cooldown():
    """A long cooldown is valid on its own: the default cap never makes it invalid."""
    policy = Policy(cooldown_ms=3_600_000)
    assert policy.cooldown_max_ms == 3_600_000
    assert Policy().cooldown_max_ms == 300_000


@pytest.mark.parametrize("field", ["window_ms", "cooldown_ms", "cooldown_max_ms", "lease_ttl_ms"])
def test_durations_have_a_maximum_every_store_holds(field):
    """A duration beyond 30 days is a PolicyError naming the field (Redis PEXPIRE is 64-bit)."""
    value = 30 * 24 * 3600 * 1000 + 1
    fields = {field: value}
    if field == "cooldown_ms":
        fields["cooldown_max_ms"] = value
    with pytest.raises(PolicyError) as info:
        Policy(**fields)
    assert info.value.field == field
    Policy(**{k: v - 1 for k, v in fields.items()})


@pytest.mark.parametrize("value", [10**30, 10**5000], ids=["30-digits", "5000-digits"])
def test_huge_values_are_a_policy_error(value):
    """Huge integers are refused with a short message, not a ValueError from printing them."""
    with pytest.raises(PolicyError) as info:
        Policy(lease_ttl_ms=value)
    assert info.value.field == "lease_ttl_ms"
    assert len(str(info.value)) < 200


def test_counts_have_a_maximum():
    """Thresholds and limits are bounded too."""
    with pytest.raises(PolicyError) as info:
        Policy(failure_threshold=10**7)
    assert info.value.field == "failure_threshold"
