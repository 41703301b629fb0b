"""A LiteLLM Router behind toolbreaker, offline: two local model servers, no API key.

Each deployment is the local tool service answering OpenAI chat completions on 127.0.0.1
(LiteLLM's own OpenAI provider reaches it through ``api_base``). The primary deployment
fails with real HTTP 503s: its breaker opens, and LiteLLM's own fallback chain serves the
next calls from the backup group without one more request reaching the primary. Then the
backup goes down too, and the caller gets one typed answer naming both deployments and
how long each is out. Every answer's usage is priced into a run guard's budget.

Run: python examples/litellm_router.py
"""

from __future__ import annotations

import json
import logging
import os
import warnings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost-map download
warnings.filterwarnings("ignore", module="pydantic")  # LiteLLM's types, as pydantic builds them
logging.getLogger("LiteLLM Router").setLevel(logging.CRITICAL)  # its fallback tracebacks

# LiteLLM is imported by the adapter, after the settings above.
from toolbreaker import Budget, ModelPrice, Policy, Registry, RunGuard  # noqa: E402
from toolbreaker.errors import DeploymentsUnavailable  # noqa: E402
from toolbreaker.integrations.litellm import GuardedRouter  # noqa: E402
from toolbreaker.testing import CHAT_ROUTE, ToolService  # noqa: E402

ASK = [{"role": "user", "content": "Which cable fits a USB-C laptop charger?"}]


def deployment(name: str, model: str, server: ToolService) -> dict[str, object]:
    return {
        "model_name": name,
        "litellm_params": {
            "model": f"openai/{model}",
            "api_base": f"{server.url}/v1",
            "api_key": "sk-local-example",
        },
    }


def main() -> None:
    with ToolService() as primary, ToolService() as backup:
        guard = RunGuard(
            "support-42",
            budget=Budget(max_cost="1.00", prices={"gpt-backup*": ModelPrice("0.15", "0.60")}),
        )
        router = GuardedRouter(
            registry=Registry(Policy(failure_threshold=2, cooldown_ms=30_000)),
            guard=guard,
            model_list=[
                deployment("primary", "gpt-primary", primary),
                deployment("backup", "gpt-backup", backup),
            ],
            fallbacks=[{"primary": ["backup"]}],
            num_retries=0,
        )

        print("1. the primary answers 503 to everything; LiteLLM falls back, the breaker counts")
        primary.outage(CHAT_ROUTE, 503)
        for n in range(5):
            answer = router.completion(model="primary", messages=ASK)
            breaker = router.breaker_for(deployment("primary", "gpt-primary", primary))
            print(
                f"   call {n + 1}: answered by {answer.model}; primary breaker "
                f"{breaker.state.phase}; requests that reached the primary: "
                f"{primary.hits.get(CHAT_ROUTE, 0)}"
            )

        print("2. the backup goes down too: its 503s open its breaker, then nothing is sent")
        backup.outage(CHAT_ROUTE, 503)
        for _ in range(2):
            try:
                router.completion(model="primary", messages=ASK)
            except Exception as exc:  # noqa: BLE001 - shown: LiteLLM re-raises the first group's
                print(f"   {type(exc).__name__}; backup requests: {backup.hits[CHAT_ROUTE]}")
        try:
            router.completion(model="primary", messages=ASK)
        except DeploymentsUnavailable as unavailable:
            print(f"   {unavailable}")
            print("   what a model may read:", json.dumps(unavailable.result)[:300], "...")

        counters = guard.stop_packet().to_dict()["counters"]
        print("3. the run's model cost:", counters["model_cost"], counters["usage"])


if __name__ == "__main__":
    main()
