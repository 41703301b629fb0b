"""The LlamaIndex parts of its adapter's tests: a mock LLM that reports usage.

A module of its own, imported by the tests that use them (``frameworks``): defining them
imports LlamaIndex, which the suite's collection does not.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatResponse
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.llms.callbacks import llm_chat_callback


class MeteredLLM(MockFunctionCallingLLM):
    """LlamaIndex's mock, reporting usage as its OpenAI integration does: the provider's
    response (model, usage) as ``raw`` and the token counts in ``additional_kwargs``."""

    reported_model: str = "gpt-4o-mini-2024-07-18"

    @llm_chat_callback()
    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        message = self._get_response_generator()(messages, **kwargs)
        usage = {"prompt_tokens": 2_000, "completion_tokens": 1_000, "total_tokens": 3_000}

        async def stream() -> Any:
            yield ChatResponse(
                message=message,
                delta=message.content or "",
                raw={"model": self.reported_model, "usage": usage},
                additional_kwargs=usage,
            )

        return stream()
