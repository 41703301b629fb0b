"""Boundary sheets and registry keys from untrusted sources: typed errors, never guesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbreaker import Registry
from toolbreaker.errors import PolicyError


def sheet(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sheet.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_deep_nesting_is_a_policy_error(tmp_path):
    """A sheet nested 1,000 levels deep is a PolicyError, not a RecursionError."""
    path = sheet(tmp_path, "x = " + "[" * 1_000 + "]" * 1_000 + "\n")
    with pytest.raises(PolicyError):
        Registry.from_toml(path)


def test_a_5000_digit_integer_is_a_policy_error(tmp_path):
    """A 5,000-digit integer is a PolicyError, not a ValueError."""
    path = sheet(
        tmp_path, "[defaults]\ntimeout_ms = 1000\n[s.read]\ncooldown_ms = " + "9" * 5000 + "\n"
    )
    with pytest.raises(PolicyError):
        Registry.from_toml(path)


def test_a_row_without_a_timeout_is_an_error_at_load(tmp_path):
    """Every call needs a deadline: a row without a timeout and no default fails at load."""
    path = sheet(tmp_path, '[search.read]\ntool = "search"\n')
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert info.value.field == "search.read.timeout"
    assert info.value.line == 1


@pytest.mark.parametrize("timeout", ["inf", "nan", "1e30"])
def test_a_timeout_must_be_finite_and_bounded(tmp_path, timeout):
    """inf, nan and absurd timeouts are PolicyErrors naming the field."""
    path = sheet(tmp_path, f"[search.read]\ntimeout = {timeout}\n")
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert info.value.field == "search.read.timeout"


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("wait {seconds:>999999999} s", "format spec"),
        ("wait {seconds!r} s", "conversion"),
        ("call {tool.__class__}", "placeholder"),
        ("wait {minutes}", "placeholder"),
    ],
)
def test_instruction_templates_are_checked_at_load(tmp_path, template, why):
    """Templates use known placeholders only, with no format spec or conversion."""
    path = sheet(
        tmp_path, f"[s.read]\ntimeout_ms = 1000\n[s.read.instructions]\nopen = {template!r}\n"
    )
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert why in str(info.value)
    assert info.value.line == 4


def test_unknown_instruction_reasons_are_an_error(tmp_path):
    """An instruction for a reason that does not exist is not silently ignored."""
    path = sheet(tmp_path, "[s.read]\ntimeout_ms = 1000\n[s.read.instructions]\nsideways = 'x'\n")
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert info.value.field == "s.read.instructions.sideways"


def test_dotted_keys_keep_their_line(tmp_path):
    """A row written with dotted keys still has its error located on its line."""
    path = sheet(tmp_path, '[search]\nread.timeout_ms = 1000\nread.fallback = "nope"\n')
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert str(info.value).startswith(f"{path}:3:")


def test_inline_tables_keep_their_line(tmp_path):
    """A row written as an inline table still has its error located on its line."""
    path = sheet(tmp_path, '[search]\n\nread = { timeout_ms = 1000, fallback = "nope" }\n')
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert str(info.value).startswith(f"{path}:3:")


@pytest.mark.parametrize("key", [5, b"x", "\ud800", "", "x" * 1_000])
def test_registry_keys_are_checked(key):
    """Registry.get refuses non-strings, lone surrogates, empty and overlong names."""
    registry = Registry(default_timeout=1.0)
    with pytest.raises(PolicyError):
        registry.get(key)
    with pytest.raises(PolicyError):
        registry.get("ok", key)
    assert len(registry) == 0
