"""Guard two tools against a real flaky service: the breaker opens, the model is told.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import json
from pathlib import Path

from toolbreaker import Registry, system_prompt_line
from toolbreaker.testing import ToolService, request_json

SHEET = Path(__file__).with_name("breakers.toml")


def main() -> None:
    with ToolService() as service:
        breakers = Registry.from_toml(SHEET)
        search = breakers.get("search", "read")

        @search.guard
        def search_catalog(query: str) -> dict:
            return request_json("GET", f"{service.url}/search?q={query}", timeout=4.0)

        service.outage("GET /search", status=503)
        for attempt in range(1, 7):
            result = search_catalog("cable")
            print(f"call {attempt}: {json.dumps(result)[:110]}...")
        print(f"\nrequests that reached the provider: {service.hits['GET /search']}")
        print(f"breaker: {search.state.phase}, stats: {search.stats.to_dict()['failures']}")
        print(f"\nsystem prompt line: {system_prompt_line()}")


if __name__ == "__main__":
    main()
