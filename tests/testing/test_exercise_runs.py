"""exercise(): a user's agent run twice against each scenario, measured at the service.

The agents here are real agents over real HTTP (the fault proxy in front of the bundled
tool service): the demo's scripted model with toolbreaker, the same model without it,
and variations that each break one promise, so every promise is seen to fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolbreaker import Policy
from toolbreaker.errors import PolicyError
from toolbreaker.testing import ExerciseContext, exercise, service_tools, shipped_scenarios
from toolbreaker.testing._agents import scripted_agent, unprotected_agent
from toolbreaker.testing._scenario import parse_scenario

SHIPPED = shipped_scenarios()
WRITES = {"commit-then-timeout", "late-success", "malformed-write", "reword"}


def _one(path: Path | Any, agent) -> Any:
    (report,) = exercise([path], agent).scenarios
    return report


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_the_guarded_scripted_agent_holds_every_promise(path):
    """The demo's scripted model with breakers per dependency and a run guard: no attempt
    after an opening, no duplicate, a valid packet naming every committed write, and a
    resumed run that repeats nothing, in every shipped scenario."""
    report = _one(path, scripted_agent)
    assert report.held, report.to_dict()
    assert report.judgement.unmet == ()
    assert report.measured.packet is not None
    counts = {t.target: t for t in report.measured.targets}
    for target in report.scenario.targets:
        assert counts[target].failed >= 1  # the fault was really met
        assert counts[target].after_open == counts[target].duplicates == 0
    if report.scenario.name in WRITES:
        assert len(report.measured.committed_keys) == 1
        assert report.measured.resumed_actions == ()


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_the_unprotected_agent_fails_the_report(path):
    """The same model without toolbreaker fails every shipped scenario: no packet, and a
    write committed twice or a failing route hit more often than the scenario allows."""
    report = _one(path, unprotected_agent)
    assert not report.held
    before, understandable, _resumption = report.judgement.promises
    assert not before.held
    assert not understandable.held
    counts = {t.target: t for t in report.measured.targets}
    if report.scenario.name in WRITES:
        assert counts["POST /tickets"].duplicates >= 1
    else:
        worst = max(counts[t].failed for t in report.scenario.targets)
        assert worst > report.scenario.max_failed_attempts


ALTERNATE = next(p for p in SHIPPED if p.stem == "alternate")


def test_what_the_model_did_once_told_is_reported():
    """The insisting model calls search again after being told it is unavailable: the
    calls are counted, none reached the service, and the run guard stopped the run."""
    report = _one(next(p for p in SHIPPED if p.stem == "insist"), scripted_agent)
    assert report.measured.opened == ("catalog:read",)
    assert report.measured.called_again >= 1
    assert report.measured.targets[0].after_open == 0
    assert report.judgement.after_unavailable.endswith("the run stopped (repeated-action)")


def insisting_on_new_queries(told: list[int]) -> Any:
    """An agent built the documented way (breakers in ``ctx.registry``, ``ctx.run_guard()``:
    both watch the one breaker) whose model keeps searching, each time with a new query
    (no loop to stop), after it is told search is unavailable. ``told`` gets, from the
    model's side, the calls it made after being told and how many were refused."""

    def agent(ctx: ExerciseContext) -> Any:
        raw = service_tools(ctx)
        guard = ctx.run_guard()
        breaker = ctx.registry.get("catalog", "read", policy=Policy(failure_threshold=2))
        guard.tool("search_catalog", breaker=breaker)(raw["search_catalog"])
        again = refused = 0
        unavailable = False
        for n in range(8):
            result = guard.call("search_catalog", {"query": f"cable {n}"})
            if unavailable and not ctx.resumed:
                again += 1
                refused += result.get("tool_unavailable") is True
            unavailable = unavailable or result.get("tool_unavailable") is True
        if not ctx.resumed:
            told.extend((again, refused))
        return guard

    return agent


def test_each_call_after_an_opening_is_counted_once():
    """The registry and the run guard both watch the breaker: a call the model makes after
    it was told is still one call, and one refusal (they were counted twice)."""
    told: list[int] = []
    report = _one(parse_scenario(OUTAGE, "outage.toml"), insisting_on_new_queries(told))
    again, refused = told
    assert again == refused == 6  # calls 3 to 8: the second failure opened the breaker
    assert report.measured.called_again == again
    assert report.measured.refused_locally == refused
    assert f"called again {again} time(s): {refused} refused by a breaker" in (
        report.judgement.after_unavailable
    )


def test_the_shipped_alternating_model_is_counted_once():
    """The shipped ``alternate`` scenario with the shipped ``scripted_agent``: the third
    failure opens the catalog breaker and tells the model; its one next call is stopped
    as a loop. One call again (it read "2 time(s)"), none refused by the breaker."""
    report = _one(ALTERNATE, scripted_agent)
    assert report.measured.called_again == 1
    assert report.measured.refused_locally == 0
    assert "called again 1 time(s): 0 refused by a breaker" in report.judgement.after_unavailable


OUTAGE = """
timeout = 0.3
[faults.down]
route = "GET /search"
kind = "outage"
"""


def per_tool_breakers(ctx: ExerciseContext) -> Any:
    """Guarded, but each catalog tool has its own breaker: when search's opens, refine
    still reaches the failing provider (the queries differ, so no loop is detected)."""
    raw = service_tools(ctx)
    guard = ctx.run_guard()
    for name in ("search_catalog", "refine_search"):
        breaker = ctx.registry.get(name, policy=Policy(failure_threshold=1))
        guard.tool(name, breaker=breaker)(raw[name])
    for n in range(4):
        guard.call(("search_catalog", "refine_search")[n % 2], {"query": f"cable {n}"})
    return guard


def test_a_breaker_per_tool_lets_an_alternating_model_reach_the_dead_provider():
    """The seed's alternating model: with one breaker per tool, the second tool keeps
    hitting the provider the first tool's breaker opened on; counted at the service."""
    report = _one(ALTERNATE, per_tool_breakers)
    before = report.judgement.promises[0]
    assert not before.held
    (search,) = report.measured.targets
    assert search.after_open >= 1
    assert "attempt(s) after a breaker opened" in before.detail
    assert set(report.measured.opened) == {"search_catalog", "refine_search"}


REFUNDS = """
name = "refunds"
timeout = 0.3
[faults.lost]
tool = "refund"
kind = "commit-then-timeout"
steps = [1]
[business_key]
refund = ["order"]
"""


def refunding(guarded: bool):
    """A plain Python write tool, wrapped with the scenario's faults by ctx.wrap."""

    def agent(ctx: ExerciseContext) -> Any:
        ledger: list[str] = []
        refund = ctx.wrap(
            "refund",
            lambda order, idempotency_key="": ledger.append(order) or {"refund": f"R-{order}"},
            write=True,
        )
        if not guarded:
            for _ in range(3):
                try:
                    return refund(order="A-1001")
                except TimeoutError:
                    continue
            return None
        guard = ctx.run_guard()
        breaker = ctx.registry.get("refunds", "write", timeout=1.0)
        guard.tool(
            "refund",
            risk="reversible_write",
            breaker=breaker,
            business_key=["order"],
            verify=lambda r: "refund" in r,
        )(refund)
        for _ in range(3):
            guard.call("refund", {"order": "A-1001"})
        return None

    return agent


def test_plain_python_tools_get_the_same_faults():
    """A refund tool that commits then times out: the guarded agent journals it unknown and
    refuses to repeat it; the unguarded one refunds twice."""
    scenario = parse_scenario(REFUNDS, "refunds.toml")
    (guarded,) = exercise([scenario], refunding(True)).scenarios
    (naive,) = exercise([scenario], refunding(False)).scenarios
    assert guarded.measured.targets[0].commits == 1
    assert guarded.judgement.promises[0].held
    assert guarded.measured.packet["condition"] in ("running", "uncertain-side-effect")
    assert naive.measured.targets[0].duplicates == 1
    assert not naive.held


def test_an_agent_that_raises_is_a_finding_not_a_crash():
    """The exception is reported as the reason the run is not understandable."""

    def broken(ctx: ExerciseContext) -> None:
        ctx.run_guard()
        raise RuntimeError("model provider down")

    report = _one(next(p for p in SHIPPED if p.stem == "outage"), broken)
    understandable = report.judgement.promises[1]
    assert not understandable.held
    assert "RuntimeError: model provider down" in understandable.detail
    assert report.measured.resume_error == "RuntimeError: model provider down"


def test_a_stop_packet_holder_is_read_from_what_the_agent_returns():
    """An adapter with stop_packet(task) (the middleware's shape) is asked for the task's
    packet; the report serialises to JSON."""
    import json

    class Adapter:
        def __init__(self, guard):
            self.guard = guard

        def stop_packet(self, task):
            assert task == self.guard.task
            return self.guard.stop_packet()

    def agent(ctx: ExerciseContext) -> Adapter:
        guard = scripted_agent(ctx)
        ctx.guard = None
        return Adapter(guard)

    report = exercise([next(p for p in SHIPPED if p.stem == "rate-limit")], agent)
    assert report.held
    entry = json.loads(json.dumps(report.to_dict()))["scenarios"][0]
    assert entry["packet"]["schema"] == "toolbreaker.stop/v1"
    assert [p["name"] for p in entry["promises"]] == [
        "before-damage",
        "understandable",
        "resumption",
    ]


def test_the_proxy_fronts_the_users_own_service():
    """service= puts the fault proxy in front of a service the user runs: the faults are
    injected there and the writes land in it, once."""
    from toolbreaker.testing import ToolService

    path = next(p for p in SHIPPED if p.stem == "commit-then-timeout")
    with ToolService() as own:
        (report,) = exercise([path], scripted_agent, service=own.url).scenarios
        created = own.created("tickets")
        hits = own.hits
    assert report.held, report.to_dict()
    assert len(created) == 1
    assert created[0]["idempotency_key"] == report.measured.committed_keys[0]
    assert hits["POST /tickets"] == 1  # the resumed run answered it from the journal


@pytest.mark.parametrize("timeout", [0.5, 15, 20, 600])
def test_every_timeout_a_scenario_takes_is_a_deadline_its_breakers_take(timeout):
    """A scenario's ``timeout`` becomes its breakers' deadline (twice it, cooperative):
    the scenario either refuses it at its line, or the exercise's registry hands out a
    breaker with it. The scenario used to take up to 600 s while a breaker takes at most
    its probe lease, so a 20 s scenario loaded and then broke every agent's first call."""
    text = f"timeout = {timeout}\n[faults.down]\ntool = 'lookup'\nkind = 'outage'\n"
    try:
        scenario = parse_scenario(text, "long.toml")
    except PolicyError as exc:
        located = exc.located()
        assert located.startswith("long.toml:1: timeout must be"), located
        assert timeout > 15
        return
    made: list[Any] = []

    def agent(ctx: ExerciseContext) -> None:
        made.append(ctx.registry.get("lookup"))

    (report,) = exercise([scenario], agent).scenarios
    assert report.measured.agent_error is None, report.measured.agent_error
    assert len(made) == 2
    assert made[0].timeout == scenario.timeout * 2
