"""The LangChain parts of its trace import's tests: a fake chat model that takes tools,
and two tools.

A module of its own, imported by the tests that use them (``frameworks``): defining them
imports LangChain, which the suite's collection does not.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.tools import StructuredTool, ToolException, tool


class ToolModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to take tools."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolModel:
        return self


@tool
def lookup(order: str) -> dict:
    """Look an order up."""
    return {"order": order, "status": "shipped"}


def _refund(order: str) -> str:
    raise ToolException(f"order {order} was refunded already")


refund = StructuredTool.from_function(
    _refund, name="refund", description="Refund an order.", handle_tool_error=True
)
