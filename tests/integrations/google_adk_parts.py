"""The Google ADK parts of its adapter's tests: scripted offline models.

A module of its own, imported by the tests that use them (``frameworks``): defining them
imports ADK, which the suite's collection does not.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import ConfigDict

from toolbreaker.testing import next_call


class ScriptedModel(BaseLlm):
    """ADK's model interface, answered by a :class:`Script` offline."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        yield self.script.respond(llm_request)


class Following(BaseLlm):
    """ADK's model interface, answered offline by the scripted model's plan.

    ``behaviour`` is the scenario's; each request's function responses (all the model has
    read, in order) are replayed into a fresh plan, whose next call is the answer.
    """

    behaviour: str = "plain"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        results = [
            dict(part.function_response.response or {})
            for content in llm_request.contents
            for part in content.parts or ()
            if part.function_response is not None
        ]
        call = next_call(self.behaviour, results)
        if call is None:
            parts = [types.Part(text="Done.")]
        else:
            name, args = call
            parts = [types.Part(function_call=types.FunctionCall(name=name, args=args))]
        # Token counts, as a real model reports them (the plugin hands them to the run).
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=100, candidates_token_count=20
        )
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)
