"""The agent frameworks the adapters' tests run: imported by the tests, never at collection.

Every worker of the suite collects every test module; a framework a module imports at its
top is imported by every worker (LiteLLM alone costs seconds of CPU), though only the
worker that runs its tests needs it. So these modules say at their top only that they
need the framework (:func:`needs`: skipped, as ``pytest.importorskip`` would, when it is
not installed, without importing it) and import it inside the fixtures and tests that
use it (``tests/test_suite_shape.py`` keeps it so). :func:`imported` imports them before the
module's first test, so that no test's own timing includes the import.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

import pytest

#: The frameworks no test module imports at its top (nor their adapters).
HEAVY = (
    "agents",
    "crewai",
    "google.adk",
    "google.genai",
    "langchain",
    "langchain_core",
    "langgraph",
    "litellm",
    "llama_index",
    "openai",
    "pydantic_ai",
)


def installed(name: str) -> bool:
    """Whether the module ``name`` is installed, without importing it.

    Only the module's spec is looked up (its parent packages are imported: a namespace
    package for ``google.adk``); the framework itself is not imported.
    """
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def needs(name: str, reason: str) -> None:
    """Skip the calling test module at collection when ``name`` is not :func:`installed`."""
    if not installed(name):
        pytest.skip(reason, allow_module_level=True)


def imported(*names: str) -> Callable[[], None]:
    """An autouse fixture (assign it to a name in the module) that imports ``names`` once,
    before the module's first test runs: no test's own timing includes the import."""

    @pytest.fixture(autouse=True, scope="module")
    def frameworks_imported() -> None:
        for name in names:
            importlib.import_module(name)

    return frameworks_imported
