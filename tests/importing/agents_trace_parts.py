"""The OpenAI Agents SDK parts of its trace import's tests: a trace collector, a traced
scripted model and two tools.

A module of its own, imported by the tests that use them (``frameworks``): defining them
imports the SDK, which the suite's collection does not.
"""

from __future__ import annotations

from typing import Any

from agents import Model, function_tool
from agents.testing import ScriptedModel
from agents.tracing import TracingProcessor, generation_span


class Collector(TracingProcessor):
    """Keeps what the SDK's exporter would send."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def on_trace_start(self, trace: Any) -> None:
        pass

    def on_trace_end(self, trace: Any) -> None:
        self.items.append(trace.export())

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        self.items.append(span.export())

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


class TracedModel(Model):
    """The scripted model, recording its generation as a provider's model does."""

    def __init__(self, script: ScriptedModel, name: str) -> None:
        self.script = script
        self.name = name

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        with generation_span(model=self.name) as span:
            response = await self.script.get_response(*args, **kwargs)
            usage = response.usage
            span.span_data.usage = {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            }
            return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def lookup(order: str) -> dict:
    """Look an order up."""
    return {"order": order, "status": "shipped"}


@function_tool
def refund(order: str) -> str:
    """Refund an order."""
    raise RuntimeError("the payment service is down")
