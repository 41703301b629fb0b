"""The model counts (issue 23): a guard prices each response's usage into the run's cost,
holds a model request's most before it is sent, and its stop packet shows the split."""

from __future__ import annotations

import json
from decimal import Decimal

from toolbreaker import Budget, ModelPrice, RunGuard

PRICES = {"gpt-4o*": ModelPrice("2.50", "10")}


def test_usage_counts_against_max_cost_and_the_packet_shows_the_models_part():
    guard = RunGuard("t", budget=Budget(max_cost="0.02", prices=PRICES))

    @guard.tool("search")
    def search(q: str) -> dict[str, str]:
        return {"hits": q}

    search(q="a")
    guard.add_cost("0.005")  # a tool's cost, after the fact
    guard.add_usage("gpt-4o-mini", input_tokens=2_000, output_tokens=1_000)  # 0.015
    answer = search(q="b")
    assert guard.stopped is not None
    assert guard.stopped.condition == "max-cost"
    assert answer["run_stopped"] is True
    assert answer["condition"] == "max-cost"
    packet = json.loads(guard.stop_packet().to_json())
    counters = packet["counters"]
    assert counters["cost"] == "0.02"
    assert counters["model_cost"] == "0.015"
    assert counters["usage"] == [
        {
            "model": "gpt-4o-mini",
            "input_tokens": 2000,
            "output_tokens": 1000,
            "requests": 1,
            "cost": "0.015",
        }
    ]


def test_a_model_request_reserves_its_most_and_settles_at_its_usage():
    guard = RunGuard("t", budget=Budget(max_cost="0.05", prices=PRICES))
    held = guard.reserve_model("gpt-4o", max_output_tokens=4_000, input_tokens=1_000)
    assert held.admitted
    assert held.amount == Decimal("0.0425")
    # The request's most is held: a second one cannot fit beside it.
    refused = guard.reserve_model("gpt-4o", max_output_tokens=4_000, input_tokens=1_000)
    assert not refused.admitted
    assert refused.answer is not None
    guard.add_usage("gpt-4o", input_tokens=1_000, output_tokens=200, reservation=held)
    assert guard.state.cost == Decimal("0.0045")
    assert guard.state.reserved() == 0
    held.settle()  # settled once already: nothing changes
    assert guard.state.cost == Decimal("0.0045")


def test_an_unpriced_model_stops_a_run_whose_cost_limit_it_would_escape():
    guard = RunGuard("t", budget=Budget(max_cost="1", prices=PRICES))
    guard.add_usage("claude-x", input_tokens=10, output_tokens=10)
    assert guard.stopped is not None
    assert "claude-x" in guard.stop_packet().detail
