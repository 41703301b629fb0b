"""A model's own usage in the run's budget: priced from the user's table (issue 23)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._run.budget import Action, Budget, ModelPrice, RunState
from toolbreaker.core._run.costs import OTHER_MODELS, price_of, usage_cost
from toolbreaker.core._run.holds import USAGE_LIMIT
from toolbreaker.core._run.machine import RunEvent, apply
from toolbreaker.errors import PolicyError, RunStateError

PRICES = {
    "gpt-4o": ModelPrice("2.50", "10"),
    "gpt-4o*": ModelPrice("5", "15"),
    "gpt-*": ModelPrice("1", "1"),
    "local": ModelPrice(0, 0),
}


def usage(model: str, tokens_in: int, tokens_out: int, *, at: int = 1, **extra) -> RunEvent:
    return RunEvent(
        "usage", at, model=model, input_tokens=tokens_in, output_tokens=tokens_out, **extra
    )


def test_usage_is_priced_per_million_tokens_and_kept_apart_per_model():
    budget = Budget(max_cost="1", prices=PRICES)
    run = RunState.start("t", 0)
    run, decision = apply(run, usage("gpt-4o", 1_000, 500), budget)
    run, _ = apply(run, usage("gpt-4o", 2_000, 0), budget)
    run, _ = apply(run, usage("local", 10**6, 10**6), budget)
    assert decision.verdict == "recorded"
    # 3,000 in at 2.50 and 500 out at 10 per million; the local model is free.
    assert run.cost == Decimal("0.0125")
    counters = run.counters()
    assert counters["model_cost"] == "0.0125"
    assert counters["usage"] == [
        {
            "model": "gpt-4o",
            "input_tokens": 3000,
            "output_tokens": 500,
            "requests": 2,
            "cost": "0.0125",
        },
        {
            "model": "local",
            "input_tokens": 10**6,
            "output_tokens": 10**6,
            "requests": 1,
            "cost": "0",
        },
    ]
    assert RunState.from_dict(run.to_dict()) == run


def test_the_exact_name_wins_then_the_longest_pattern():
    budget = Budget(prices=PRICES)
    assert price_of(budget, "gpt-4o") == PRICES["gpt-4o"]
    assert price_of(budget, "gpt-4o-2024-08-06") == PRICES["gpt-4o*"]
    assert price_of(budget, "gpt-3.5") == PRICES["gpt-*"]
    assert price_of(budget, "claude") is None


def test_the_model_cost_and_the_tools_cost_add_up_and_the_budget_stops_the_next_call():
    """Usage counts against max_cost like a tool's cost: the next call is refused."""
    budget = Budget(max_cost="0.01", prices=PRICES)
    run = RunState.start("t", 0)
    run, _ = apply(run, RunEvent("cost", 1, cost="0.004"), budget)
    run, _ = apply(run, usage("gpt-4o", 0, 1_000), budget)  # 0.01
    assert run.cost == Decimal("0.014")
    assert run.counters()["model_cost"] == "0.01"
    run, decision = apply(run, RunEvent("request", 2, Action("search", "fp")), budget)
    assert decision.verdict == "stopped"
    assert decision.stop is not None
    assert decision.stop.condition == "max-cost"


def test_without_a_price_table_tokens_are_counted_and_cost_nothing():
    budget = Budget(max_cost="1")
    run, decision = apply(RunState.start("t", 0), usage("any-model", 10, 20), budget)
    assert decision.verdict == "recorded"
    assert run.cost == 0
    assert run.stopped is None
    assert run.usage[0].cost is None
    assert run.usage[0].output_tokens == 20


def test_a_model_the_table_does_not_price_stops_a_run_with_a_max_cost():
    """An unknown cost under a cost limit is not free: the run stops, naming the model."""
    budget = Budget(max_cost="1", prices={"gpt-4o": ModelPrice(1, 1)})
    run, decision = apply(RunState.start("t", 0), usage("mystery", 10, 20), budget)
    assert decision.verdict == "stopped"
    assert run.stopped is not None
    assert run.stopped.condition == "max-cost"
    assert "mystery" in run.stopped.detail
    assert "no price" in run.stopped.detail
    assert run.usage[0].model == "mystery"
    assert run.usage[0].cost is None
    # Without a max_cost, nothing needs the price: the run goes on.
    run, decision = apply(RunState.start("t", 0), usage("mystery", 10, 20), Budget(prices=PRICES))
    assert decision.verdict == "recorded"
    assert run.stopped is None


def test_usage_settles_a_model_steps_reservation_at_its_priced_cost():
    budget = Budget(max_cost="1", prices=PRICES)
    run = RunState.start("t", 0)
    held = usage_cost(PRICES["gpt-4o"], 1_000, 4_000)
    run, decision = apply(run, RunEvent("reserve", 1, reserve=held), budget)
    assert run.reserved() == held
    run, _ = apply(
        run, usage("gpt-4o", 1_000, 100, reservation=decision.reservation, reserve=held), budget
    )
    assert run.reserved() == 0
    assert run.cost == usage_cost(PRICES["gpt-4o"], 1_000, 100) == Decimal("0.0035")


def test_the_usage_of_many_models_is_bounded_and_forgets_no_token():
    budget = Budget(prices={"*": ModelPrice(1, 1)})
    run = RunState.start("t", 0)
    for n in range(USAGE_LIMIT + 5):
        run, _ = apply(run, usage(f"m{n}", 1, 1), budget)
    assert len(run.usage) == USAGE_LIMIT
    assert run.usage[0].model == OTHER_MODELS
    assert sum(u.input_tokens for u in run.usage) == USAGE_LIMIT + 5
    assert run.model_cost() == run.cost == Decimal(2 * (USAGE_LIMIT + 5)) / 10**6


@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)), max_size=20))
def test_the_cost_is_the_exact_sum_of_every_response(responses):
    budget = Budget(prices={"m": ModelPrice("0.15", "0.6")})
    run = RunState.start("t", 0)
    for tokens_in, tokens_out in responses:
        run, _ = apply(run, usage("m", tokens_in, tokens_out), budget)
    expected = sum(
        (Decimal(i) * Decimal("0.15") + Decimal(o) * Decimal("0.6")) / 10**6 for i, o in responses
    )
    assert run.cost == expected


def test_bad_prices_and_usage_are_typed_errors():
    with pytest.raises(PolicyError, match=r"prices\.m\.input_per_million"):
        Budget.from_dict({"prices": {"m": {"input_per_million": 1.5, "output_per_million": 1}}})
    with pytest.raises(PolicyError, match="per million"):
        Budget.from_dict({"prices": {"m": {"input": "1"}}})
    with pytest.raises(PolicyError, match="prices"):
        Budget(prices={"m": "1"})  # type: ignore[dict-item]
    with pytest.raises(RunStateError, match="model"):
        RunEvent("usage", 1)
    with pytest.raises(RunStateError, match="output_tokens"):
        apply(RunState.start("t", 0), usage("m", 1, -1), Budget())


def test_a_budget_with_prices_has_its_own_version_and_loads_from_toml(tmp_path):
    path = tmp_path / "budget.toml"
    path.write_text(
        'max_cost = "5"\n[prices."gpt-4o*"]\ninput_per_million = "2.50"\n'
        'output_per_million = "10"\n'
    )
    budget = Budget.from_toml(path)
    assert budget.prices == {"gpt-4o*": ModelPrice("2.50", "10")}
    assert budget.version != Budget(max_cost="5").version
    assert Budget(max_cost="5").to_dict().get("prices") is None  # old versions kept
    assert hash(budget) == hash(Budget.from_toml(path))
