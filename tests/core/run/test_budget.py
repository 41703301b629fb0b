"""The run budget: its defaults, validation, and loading from dicts and TOML files."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from toolbreaker.core._run.budget import DEFAULT_CLASSES, Budget, ClassLimits
from toolbreaker.errors import PolicyError

# --- Budget: defaults and validation ------------------------------------------------------


def test_defaults_match_the_documented_table():
    """The defaults: reads bounded by the run's calls only, tight reversible writes,
    tighter irreversible ones (calibrated on real runs: docs/guide/recorded-runs.md)."""
    assert Budget().to_dict() == {
        "max_tool_calls": 250,
        "max_repeats": 2,
        "max_cost": None,
        "deadline_ms": None,
        "max_uncertain_side_effects": 0,
        "loop_cycles": 3,
        "max_recovery_calls": 10,
        "classes": {
            "read": {"max_calls": None, "max_repeats": None, "max_cost": None},
            "reversible_write": {"max_calls": 5, "max_repeats": 1, "max_cost": None},
            "irreversible": {"max_calls": 3, "max_repeats": 0, "max_cost": None},
        },
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tool_calls", 0),
        ("max_tool_calls", True),
        ("max_tool_calls", 1.5),
        ("max_tool_calls", "50"),
        ("max_repeats", -1),
        ("max_cost", 0),
        ("max_cost", 0.5),
        ("max_cost", "abc"),
        ("max_cost", "-1"),
        ("max_cost", "NaN"),
        ("max_cost", "Infinity"),
        ("max_cost", "1e18"),
        ("max_cost", "0.0000000000000000001"),
        ("max_cost", True),
        ("deadline_ms", 0),
        ("max_uncertain_side_effects", -1),
        ("loop_cycles", 1),
        ("loop_cycles", 9),
        ("max_recovery_calls", -1),
        ("classes", "read"),
    ],
)
def test_invalid_values_raise_naming_the_field(field, value):
    """Out-of-range, boolean, float and malformed values are refused with the field named."""
    with pytest.raises(PolicyError) as info:
        Budget(**{field: value})
    assert info.value.field == field
    assert field in str(info.value)


def test_a_float_cost_is_refused_with_a_hint():
    """A float cost is an error that says how to write it exactly."""
    with pytest.raises(PolicyError, match=r'"0.1" in quotes') as info:
        Budget(max_cost=0.1)  # type: ignore[arg-type]
    assert info.value.field == "max_cost"


def test_costs_accept_decimal_strings_and_integers():
    """max_cost takes a Decimal, a decimal string or an integer, all exactly."""
    assert Budget(max_cost="2.50").max_cost == Decimal("2.5")  # type: ignore[arg-type]
    assert Budget(max_cost=3).max_cost == Decimal(3)  # type: ignore[arg-type]
    assert Budget(max_cost=Decimal("0.1")).max_cost == Decimal("0.1")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_tool_call": 5}, "max_tool_call"),
        ({"classes": {"write": {}}}, "classes.write"),
        ({"classes": {"read": {"max_call": 5}}}, "classes.read.max_call"),
        ({"classes": {"read": {"max_calls": -1}}}, "classes.read.max_calls"),
        ({"classes": {"irreversible": {"max_repeats": False}}}, "classes.irreversible.max_repeats"),
        ({"classes": {"read": {"max_cost": 1.5}}}, "classes.read.max_cost"),
        ({"classes": {"read": 5}}, "classes.read"),
        ({"classes": []}, "classes"),
    ],
)
def test_from_dict_errors_name_the_dotted_field(data, field):
    """Unknown keys and invalid class limits are errors naming the dotted field."""
    with pytest.raises(PolicyError) as info:
        Budget.from_dict(data)
    assert info.value.field == field
    assert field in str(info.value)


def test_a_class_table_changes_only_the_keys_it_names():
    """From a dict, [classes.X] overrides the named keys and keeps the other defaults."""
    budget = Budget.from_dict({"classes": {"reversible_write": {"max_calls": 10}}})
    assert budget.classes["reversible_write"] == ClassLimits(max_calls=10, max_repeats=1)
    assert budget.classes["read"] == DEFAULT_CLASSES["read"]


def test_classes_left_out_keep_their_defaults():
    """Budget(classes=...) replaces the classes it names; the others keep the defaults."""
    budget = Budget(classes={"read": ClassLimits()})
    assert budget.classes["read"] == ClassLimits()
    assert budget.classes["irreversible"] == DEFAULT_CLASSES["irreversible"]
    assert list(budget.classes) == ["read", "reversible_write", "irreversible"]


def test_version_is_a_content_hash():
    """Equal budgets share a version ("1.50" equals "1.5"); any change alters it."""
    assert len(Budget().version) == 12
    assert Budget(max_cost="1.50").version == Budget(max_cost="1.5").version  # type: ignore[arg-type]
    assert Budget().version != Budget(max_repeats=3).version
    changed = Budget(classes={"irreversible": ClassLimits(max_calls=2)})
    assert Budget().version != changed.version


def test_budget_is_hashable_and_immutable():
    """A budget can key a dict, and its classes cannot be changed in place."""
    assert hash(Budget()) == hash(Budget())
    with pytest.raises(TypeError):
        Budget().classes["read"] = ClassLimits()  # type: ignore[index]


def test_toml_loads_top_level_fields_and_class_tables(tmp_path: Path):
    """Top-level keys are fields and [classes.<risk>] tables are class limits."""
    path = tmp_path / "budget.toml"
    path.write_text(
        'max_tool_calls = 20\nmax_cost = "2.50"\ndeadline_ms = 60000\n'
        "[classes.irreversible]\nmax_calls = 1\n"
    )
    budget = Budget.from_toml(path)
    assert budget.max_tool_calls == 20
    assert budget.max_cost == Decimal("2.5")
    assert budget.deadline_ms == 60_000
    assert budget.classes["irreversible"] == ClassLimits(max_calls=1, max_repeats=0)


def test_toml_error_in_a_class_table_names_file_and_line(tmp_path: Path):
    """An invalid class limit is reported with the file and the line of its key."""
    path = tmp_path / "budget.toml"
    path.write_text("max_tool_calls = 20\n\n[classes.read]\nmax_calls = 10\nmax_repeats = -2\n")
    with pytest.raises(PolicyError) as info:
        Budget.from_toml(path)
    assert (info.value.file, info.value.line) == (str(path), 5)
    assert info.value.field == "classes.read.max_repeats"
    assert str(info.value).startswith(f"{path}:5: classes.read.max_repeats")


def test_toml_float_cost_names_file_and_line(tmp_path: Path):
    """A TOML float cost is refused at its line: binary rounding has no place in money."""
    path = tmp_path / "budget.toml"
    path.write_text("max_tool_calls = 20\nmax_cost = 0.1\n")
    with pytest.raises(PolicyError) as info:
        Budget.from_toml(path)
    assert (info.value.line, info.value.field) == (2, "max_cost")
