"""The pytest plugin: the ``toolbreaker_exercise`` fixture.

Opt in with one line in your ``conftest.py``, ``pytest_plugins =
["toolbreaker.testing.pytest_plugin"]`` (or ``pytest -p toolbreaker.testing.pytest_plugin``);
it is no automatic ``pytest11`` plugin, so a suite that measures toolbreaker's coverage
never imports toolbreaker before coverage starts. A test asks for the fixture and hands
it its agent::

    def test_my_agent_holds_under_faults(toolbreaker_exercise):
        toolbreaker_exercise(my_agent)                 # every shipped scenario
        toolbreaker_exercise(my_agent, ["ci/my-outage.toml"], service=my_service_url)

The fixture runs :func:`toolbreaker.testing.exercise` and fails the test with one line
per promise that failed (``assert_held=False`` returns the report instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from toolbreaker.testing._exercise import ExerciseReport
    from toolbreaker.testing._scenario import Scenario

__all__ = [
    "toolbreaker_exercise",
]


@pytest.fixture
def toolbreaker_exercise() -> Callable[..., ExerciseReport]:
    """Run an agent against fault scenarios and fail the test when a promise failed.

    The fixture is ``run(agent, scenarios=None, *, service=None, assert_held=True)``:
    ``scenarios`` are scenario files or ``Scenario``
    objects (``None``: every shipped one), ``service`` the base URL of your HTTP tool
    service (``None``: the bundled one). It returns the
    :class:`~toolbreaker.testing.ExerciseReport`.
    """
    from toolbreaker.testing._exercise import exercise

    def run(
        agent: Callable[..., Any],
        scenarios: Iterable[Scenario | str | Path] | None = None,
        *,
        service: str | None = None,
        assert_held: bool = True,
    ) -> ExerciseReport:
        report = exercise(scenarios, agent, service=service)
        if assert_held:
            report.assert_held()
        return report

    return run
