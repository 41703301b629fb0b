"""What every adapter's exercise test checks, in one place (nine adapters, one list).

Each adapter's test builds its agent inside the real framework; these run it against the
shipped scenarios and check the report: the guarded agent holds every promise and met
every fault; the same agent without toolbreaker fails, so the report can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolbreaker.testing import ScenarioReport, exercise, shipped_scenarios

SHIPPED = shipped_scenarios()
IDS = [p.stem for p in SHIPPED]
#: What an agent without toolbreaker is run against: one read outage, one lost write
#: answer, one loop a simple identical-call detector misses.
UNGUARDED = ("outage", "commit-then-timeout", "alternate")


def shipped(name: str) -> Path:
    """The shipped scenario file called ``name``."""
    return next(p for p in SHIPPED if p.stem == name)


def holds_every_promise(path: Path, agent: Callable[[Any], Any]) -> ScenarioReport:
    """``agent`` against the scenario ``path``: every promise held, measured at the
    service; every fault was really met; a looping model was stopped as a loop."""
    (report,) = exercise([path], agent).scenarios
    assert report.held, report.to_dict()
    assert report.measured.agent_error is None
    counts = {t.target: t for t in report.measured.targets}
    for target in report.scenario.targets:
        assert counts[target].failed >= 1
    if report.scenario.behaviour in ("alternate", "insist"):
        assert report.measured.packet is not None
        assert report.measured.packet["condition"] in ("loop", "repeated-action")
    return report


def fails_without_toolbreaker(name: str, agent: Callable[[Any], Any]) -> ScenarioReport:
    """The same agent without toolbreaker against the shipped scenario ``name``: it ran
    to its end, and the report fails: no packet, and a failing route hit too often or a
    write committed twice."""
    (report,) = exercise([shipped(name)], agent).scenarios
    assert report.measured.agent_error is None  # the failure is its own, not a crash
    assert not report.held
    before, understandable, _ = report.judgement.promises
    assert not before.held
    assert not understandable.held
    return report
