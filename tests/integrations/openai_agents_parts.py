"""The OpenAI Agents SDK parts of its adapter's tests: an agent's own hooks.

A module of its own, imported by the tests that use them (``frameworks``): defining them
imports the SDK, which the suite's collection does not.
"""

from __future__ import annotations

from typing import Any

from agents import (
    AgentHooks,
)


class Recorder(AgentHooks[Any]):
    """An agent's own hooks: protect() keeps them, in order, around its own rule."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_start(self, context: Any, agent: Any) -> None:
        self.seen.append("start")

    async def on_llm_start(self, context: Any, agent: Any, prompt: Any, items: Any) -> None:
        self.seen.append("llm_start")

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.seen.append("llm_end")

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen.append(f"tool_start:{tool.name}")

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.seen.append(f"tool_end:{tool.name}")

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        self.seen.append("end")
