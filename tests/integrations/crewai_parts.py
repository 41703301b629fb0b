"""The CrewAI classes of the CrewAI adapter's tests: a scripted LLM and real HTTP tools.

A module of its own, imported by the tests that run them (``frameworks``): defining them
imports CrewAI, which the suite's collection does not.
"""

from __future__ import annotations

import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

from crewai.llms.base_llm import BaseLLM
from crewai.tools import BaseTool
from pydantic import BaseModel
from test_crewai import act, answer

import toolbreaker
from adapter_registry import TIMEOUT
from exercise_checks import result_of
from toolbreaker.testing import next_call, request_json

if TYPE_CHECKING:
    from test_crewai import Script


class ScriptedLLM(BaseLLM):
    """CrewAI's own LLM interface, answered by a script; counts tokens like a provider."""

    def __init__(self, script: Script, model: str = "scripted-1") -> None:
        super().__init__(model=model)
        self.script = script

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        script = self.script
        script.steps += 1
        script.threads.add(threading.get_ident())
        assert script.steps < 20, "the guard should have stopped this run long ago"
        last = messages[-1]
        if last["role"] == "assistant" and "\nObservation:" in last["content"]:
            # CrewAI appends the observation (one line here; every few calls a reminder of
            # its format follows) to the model's own last message
            seen = last["content"].split("\nObservation:", 1)[1].strip()
            script.observations.append(seen.splitlines()[0])
        self._track_token_usage_internal({"prompt_tokens": 1_000, "completion_tokens": 100})
        return script.policy(script)

    def supports_function_calling(self) -> bool:
        return False


class Query(BaseModel):
    q: str


class SearchTool(BaseTool):
    name: str = "search"
    description: str = "Search the live catalog."
    args_schema: type[BaseModel] = Query
    url: str
    ran: Any  # Any: pydantic would copy a Counter field

    def _run(self, q: str) -> Any:
        self.ran[self.name] += 1
        path = f"{self.url}/{self.name}?q={urllib.parse.quote(q)}"
        return request_json("GET", path, timeout=TIMEOUT)


class OrderQuery(BaseModel):
    order_id: str


class OrderTool(BaseTool):
    name: str = "order_status"
    description: str = "Look an order up."
    args_schema: type[BaseModel] = OrderQuery
    url: str
    ran: Any  # Any: pydantic would copy a Counter field

    def _run(self, order_id: str) -> Any:
        self.ran[self.name] += 1
        return request_json("GET", f"{self.url}/orders/{order_id}", timeout=TIMEOUT)


class Lookup(BaseTool):
    name: str = "lookup"
    description: str = "A read that always answers the same."
    args_schema: type[BaseModel] = Query
    ran: Any  # Any: pydantic would copy a Counter field

    def _run(self, q: str) -> Any:
        self.ran[self.name] += 1
        return {"q": q, "hits": 0}


class Ticket(BaseModel):
    customer: str
    title: str
    idempotency_key: str = ""


class TicketTool(BaseTool):
    name: str = "create_ticket"
    description: str = "Open a support ticket."
    args_schema: type[BaseModel] = Ticket
    url: str
    keys: Any  # Any: pydantic would copy a list field

    def _run(self, customer: str, title: str, idempotency_key: str = "") -> Any:

        assert idempotency_key == toolbreaker.idempotency_key()  # both routes agree
        self.keys.append(idempotency_key)
        body = {"title": title, "body": f"for {customer}"}
        headers = {"Idempotency-Key": idempotency_key}
        return request_json(
            "POST", f"{self.url}/tickets", body=body, headers=headers, timeout=TIMEOUT
        )


def observed(text: str) -> Any:
    """An observation as the model read it: toolbreaker's JSON, CrewAI's ``str()`` of a
    tool's dict, or CrewAI's own words (its format reminder, after a blank line, dropped)."""
    return result_of(text.strip().split("\n\n", 1)[0].strip())


class Following(BaseLLM):
    """CrewAI's LLM interface, answered by the scripted model's plan for ``behaviour``."""

    def __init__(self, behaviour: str) -> None:
        super().__init__(model="scripted-1")
        self.behaviour = behaviour

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        # CrewAI appends each observation to the model's own message that asked for it.
        seen = [
            observed(message["content"].split("\nObservation:", 1)[1])
            for message in messages
            if message["role"] == "assistant" and "\nObservation:" in message["content"]
        ]
        call = next_call(self.behaviour, seen)
        if call is None:
            return answer("Done.")
        name, args = call
        return act(name, **args)

    def supports_function_calling(self) -> bool:
        return False
