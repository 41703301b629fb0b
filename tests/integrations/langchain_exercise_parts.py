"""The LangChain parts of its exercise test: the scripted chat model that follows a scenario's plan.

A module of its own, imported by the tests that use them (``frameworks``): defining them
imports LangChain, which the suite's collection does not.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from pydantic import Field


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to take tools; records every prompt it gets."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
