"""A run's budget under 200 concurrent tool calls: each call's cost is reserved first.

Run: python examples/budget_reservations.py
"""

from __future__ import annotations

import asyncio
import json

from toolbreaker import Budget, ClassLimits, RunGuard, token_cost


async def main() -> None:
    budget = Budget(max_cost="0.50", max_tool_calls=500, classes={"read": ClassLimits()})
    guard = RunGuard("task-42", budget=budget)

    @guard.tool(cost="0.01", actual_cost=lambda result: result["billed"])
    async def search(q: int) -> dict:
        await asyncio.sleep(0.01)  # the provider
        return {"q": q, "billed": "0.008"}

    del search
    step = guard.reserve(token_cost(2048, "10"))  # a model step: max tokens x price
    answers = await asyncio.gather(*(guard.acall("search", {"q": n}) for n in range(200)))
    step.settle("0.004")  # what the response's usage says it cost

    refused = [a for a in answers if a.get("over_budget")]
    counters = guard.stop_packet().counters
    print(f"calls made: {len(answers) - len(refused)}, refused before running: {len(refused)}")
    print(f"spent: {counters['cost']} of max_cost 0.50, still reserved: {counters['reserved']}")
    print(f"what the model read: {json.dumps(refused[0]['instruction'])}")

    guard.extend(max_cost="1", by="ops@example.com", why="the customer approved")
    again = await guard.acall("search", {"q": 0})
    print(f"after the operator raised max_cost to 1: {json.dumps(again)}")


if __name__ == "__main__":
    asyncio.run(main())
