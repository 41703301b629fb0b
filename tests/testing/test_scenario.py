"""Scenario files and the judgement: toolbreaker.testing._scenario, pure."""

from __future__ import annotations

import dataclasses

import pytest

from toolbreaker.errors import PolicyError
from toolbreaker.testing import shipped_scenarios
from toolbreaker.testing._scenario import (
    BEHAVIOURS,
    FAULT_KINDS,
    Measured,
    TargetCount,
    action_of,
    fault_at,
    judge,
    load_scenario,
    packet_problems,
    parse_scenario,
    route_key,
)

SCENARIO = """\
name = "mixed"
timeout = 0.2

[faults.search-late]
route = "GET /search"
kind = "outage"
after = 2

[faults.first-ticket]
route = "POST /tickets"
kind = "commit-then-timeout"
steps = [1, 3]

[faults.tool]
tool = "lookup"
kind = "rate-limit"
retry_after = 2.5

[expect]
max_failed_attempts = 4
conditions = ["loop", "running"]

[business_key]
"POST /tickets" = ["title"]
"""


def test_a_scenario_parses_into_typed_rules_with_defaults():
    """Every table becomes a FaultRule with the defaults of its kind filled in."""
    scenario = parse_scenario(SCENARIO, "mixed.toml")
    assert scenario.name == "mixed"
    assert scenario.task == "exercise-mixed"
    assert scenario.targets == ("GET /search", "POST /tickets", "lookup")
    outage, commit, tool = scenario.faults
    assert (outage.status, outage.after, outage.steps) == (503, 2, ())
    assert commit.delay == pytest.approx(0.6)  # three times the timeout, past the deadline
    assert commit.carried_out
    assert not commit.answers_status
    assert (tool.status, tool.retry_after) == (429, 2.5)
    assert scenario.max_failed_attempts == 4
    assert scenario.conditions == ("loop", "running")
    assert scenario.business_key == {"POST /tickets": ("title",)}


def test_fault_at_counts_attempts_per_target():
    """``after`` lets the first attempts through; ``steps`` picks attempts; other targets
    get nothing."""
    scenario = parse_scenario(SCENARIO, "mixed.toml")
    search = [fault_at(scenario, "GET /search", n) for n in range(1, 6)]
    assert [rule is not None for rule in search] == [False, False, True, True, True]
    tickets = [fault_at(scenario, "POST /tickets", n) for n in range(1, 5)]
    assert [rule is not None for rule in tickets] == [True, False, True, False]
    assert fault_at(scenario, "GET /orders", 1) is None


def test_route_keys_and_business_actions():
    """A request's route key is its method and first segment; reworded arguments of one
    business action have one action, a different action another."""
    assert route_key("get", "/orders/A-1001?x=1") == "GET /orders"
    assert route_key("POST", "/tickets") == "POST /tickets"
    fields = ("title",)
    same = action_of("POST /tickets", {"title": "Broken  Cable", "body": "a"}, fields)
    assert same == action_of("POST /tickets", {"title": "broken cable", "body": "b"}, fields)
    assert same != action_of("POST /tickets", {"title": "late parcel"}, fields)


def test_every_fault_and_behaviour_is_shipped():
    """The shipped scenarios load, and between them cover every fault kind, an outage
    after N good steps and every model behaviour."""
    scenarios = [load_scenario(path) for path in shipped_scenarios()]
    kinds = {rule.kind for s in scenarios for rule in s.faults}
    assert kinds == set(FAULT_KINDS)
    assert {s.behaviour for s in scenarios} == set(BEHAVIOURS)
    assert any(rule.after == 9 for s in scenarios for rule in s.faults)
    assert len({s.name for s in scenarios}) == len(scenarios)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('name = "x"\nbogus = 1\n', 2, "unknown scenario field 'bogus'"),
        ("[faults.a]\nroute = 'GET /search'\nkind = 'explode'\n", 3, "faults.a.kind"),
        ("[faults.a]\nroute = 'search'\nkind = 'outage'\n", 2, "METHOD /first-segment"),
        ("[faults.a]\nkind = 'outage'\n", 1, "exactly one of route and tool"),
        ("timeout = 0.5\n[faults.a]\ntool = 't'\nkind = 'slow'\ndelay = 0.4\n", 5, "past the"),
        ("[faults.a]\ntool = 't'\nkind = 'outage'\nstatus = 404\n", 4, "500-599"),
        ("[faults.a]\ntool = 't'\nkind = 'credential'\nstatus = 500\n", 4, "401 or 403"),
        ("[faults.a]\ntool = 't'\nkind = 'outage'\nretry_after = 1\n", 4, "does not apply"),
        ("[faults.a]\ntool = 't'\nkind = 'outage'\nsteps = [0]\n", 4, "steps"),
        ("[faults.a]\ntool = 't'\nkind = 'outage'\nsteps = [1]\nafter = 2\n", 5, "not both"),
        ("behaviour = 'panic'\n", 1, "behaviour must be one of"),
        ("[expect]\nconditions = ['tired']\n", 2, "unknown stop condition"),
        ('[business_key]\n"POST /x" = []\n', 2, "non-empty list"),
        ("name = \n", 1, "invalid TOML"),
    ],
)
def test_a_bad_scenario_is_one_error_at_its_file_and_line(tmp_path, text, line, words):
    """Every mistake is a PolicyError located at the file and the line of its key."""
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_scenario(path)
    located = info.value.located()
    assert located.startswith(f"{path}:{line}: "), located
    assert words in located
    assert "\n" not in located


PACKET = {
    "schema": "toolbreaker.stop/v1",
    "condition": "running",
    "next_safe_action": "continue",
    "counters": {"calls": 3},
    "confirmed": [{"idempotency_key": "k1"}],
    "uncertain": [],
}


def test_packet_problems_name_what_is_missing():
    """A valid packet has no problem; one without a committed write's key, with an
    unknown condition, without counters, or whose history does not hold its condition
    has one each; no packet at all is one too."""
    assert packet_problems(PACKET, ["k1"]) == []
    assert packet_problems(PACKET, ["k1"], ("loop",)) == [
        "condition 'running', expected one of loop"
    ]
    assert packet_problems(PACKET, ["k1", "k2"]) == ["1 committed write(s) missing from the packet"]
    broken = {**PACKET, "condition": "tired", "counters": None, "schema": "x"}
    assert len(packet_problems(broken, [])) == 3
    stopped = {**PACKET, "condition": "loop", "history": [{"condition": "max-cost"}]}
    assert packet_problems(stopped, ["k1"]) == ["condition 'loop' is missing from the history"]
    stopped["history"] = [{"condition": "loop"}, {"condition": "bored"}]
    assert packet_problems(stopped, ["k1"]) == ["the history names an unknown condition 'bored'"]
    assert packet_problems(None, []) == ["no stop packet: the agent ran without a run guard"]


def test_judge_fails_each_promise_on_its_own_evidence():
    """Attempts after an opening, a duplicate, too many failures, a bad packet and a
    repeated write each fail their promise; clean counts hold all three."""
    scenario = parse_scenario(SCENARIO, "mixed.toml")
    clean = Measured(
        targets=(TargetCount("GET /search", attempts=5, failed=3),),
        packet=PACKET,
        committed_keys=("k1",),
        committed_actions=("a1",),
        resumed_actions=(),
        opened=("catalog:read",),
        refused_locally=2,
        called_again=3,
    )
    assert judge(scenario, clean).held
    assert judge(scenario, clean).unmet == ("search-late", "first-ticket", "tool")
    met = dataclasses.replace(clean, faults_met=("search-late", "tool"))
    assert judge(scenario, met).unmet == ("first-ticket",)
    told = judge(scenario, clean).after_unavailable
    assert told == (
        "told catalog:read unavailable; called again 3 time(s): 2 refused by a breaker, "
        "0 reached the service"
    )

    leaked = Measured(
        targets=(TargetCount("GET /search", attempts=9, failed=7, after_open=2, duplicates=1),),
        packet=None,
        committed_actions=("a1",),
        resumed_actions=("a1",),
    )
    before, understandable, resumption = judge(scenario, leaked).promises
    assert not before.held
    assert "2 attempt(s) after a breaker opened" in before.detail
    assert "1 duplicate(s)" in before.detail
    assert "GET /search: 7 failed attempts (at most 4)" in before.detail
    assert not understandable.held
    assert not resumption.held
    assert resumption.detail == "1 completed write(s) repeated of 1 committed"
