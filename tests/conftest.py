"""Shared fixtures: the bundled tool service, and paths to the bundled seed fixture."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from toolbreaker.testing import ToolService

# Machines here are shared and noisy: a slow draw is not a failing property, and timing
# belongs in benchmarks/, not in tests.
settings.register_profile(
    "toolbreaker",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("toolbreaker")

# Container images often set PYTHONDONTWRITEBYTECODE (this machine's does). Then every
# worker rewrites the asserts of every test module it collects again (about 10 s of CPU a
# worker), and every subprocess a test starts compiles the package's modules again (0.4 s
# for the gateway's). The suite writes its bytecode caches, as Python does by default:
# from here on (test modules are imported after this file) and in the subprocesses.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# CrewAI and LiteLLM, wherever a test imports them (their adapters' tests, the exercise
# of their scripted agents, their docs pages; CrewAI imports LiteLLM): nothing sent to
# their servers, which this machine has no route to (CrewAI's telemetry exporter retries
# for seconds, LiteLLM fetches its cost map on import), and no CrewAI first-run tracing
# prompt (it saves a preference file in the home directory). Never OpenTelemetry's own
# switch: other tests trace.
os.environ.update(
    CREWAI_DISABLE_TELEMETRY="true",
    CREWAI_TESTING="true",
    CREWAI_TRACING_ENABLED="false",
    LITELLM_LOCAL_MODEL_COST_MAP="True",
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core (PYTEST_XDIST_AUTO_NUM_WORKERS overrides it).

    Most of the suite's wall time is spent waiting: on servers, on subprocesses that import
    a framework, on a browser, on a tool service's answer. Two workers a core keep the
    cores busy while one waits; more only add each worker's collection and the framework
    imports of the tests it draws (no test module imports a framework at its top:
    ``tests/test_suite_shape.py``).
    """
    cores = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    return 2 * len(cores)


@pytest.fixture(autouse=True)
def _no_event_loop_left_behind() -> Iterator[None]:
    """Close an event loop a test left set on its thread, not running.

    A framework's sync entry point that calls ``asyncio.get_event_loop()`` creates and sets
    a loop that nobody closes; the next ``asyncio.run()`` drops it, and the garbage
    collector reports it (``unclosed event loop``) in whichever test it happens to run,
    on whichever worker: an unrelated test failed so. Closed here, in the test that left it.
    """
    yield
    local = getattr(asyncio.get_event_loop_policy(), "_local", None)
    loop = getattr(local, "_loop", None)
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def seed_trace() -> Path:
    return Path(str(resources.files("toolbreaker") / "fixtures" / "seed_trace.jsonl"))


@pytest.fixture
def seed_policy() -> Path:
    return Path(str(resources.files("toolbreaker") / "fixtures" / "seed_policy.toml"))


@pytest.fixture
def service() -> Iterator[ToolService]:
    """The bundled tool service on 127.0.0.1; a handler's own exception fails the test."""
    with ToolService() as running:
        yield running
        assert running.errors == ()
