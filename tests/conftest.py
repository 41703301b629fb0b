"""Shared fixtures: paths to the bundled seed fixture."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest


@pytest.fixture
def seed_trace() -> Path:
    return Path(str(resources.files("toolbreaker") / "fixtures" / "seed_trace.jsonl"))


@pytest.fixture
def seed_policy() -> Path:
    return Path(str(resources.files("toolbreaker") / "fixtures" / "seed_policy.toml"))
