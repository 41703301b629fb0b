"""Sheets and tools the degradation matrix's tests share, against the real ToolService."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from toolbreaker.testing import ToolService, request_json


def sheet(**rows: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "defaults": {"timeout_ms": 2000, "failure_threshold": 1, "cooldown_ms": 30_000},
        "tools": {"local": ["search_snapshot"]},
    }
    for name, row in rows.items():
        dependency, operation = name.split("__")
        data.setdefault(dependency, {})[operation] = row
    return data


def search_tool(service: ToolService) -> Callable[..., Any]:
    def search(q: str) -> Any:
        query = urllib.parse.quote(q)
        return request_json("GET", f"{service.url}/search?q={query}", timeout=2)

    return search


def ticket_tool(service: ToolService) -> Callable[..., Any]:
    def create_ticket(title: str, body: str, idempotency_key: str) -> Any:
        return request_json(
            "POST",
            f"{service.url}/tickets",
            body={"title": title, "body": body},
            headers={"Idempotency-Key": idempotency_key},
            timeout=2,
        )

    return create_ticket
