"""toolbreaker exercise against an agent built on LiteLLM, in every shipped scenario.

The agent is what a LiteLLM user writes: a tool-calling loop over
``GuardedRouter.completion`` (the conversation in, the answer's ``tool_calls`` out, each
call's result back as a ``tool`` message), every tool call run by the exercise's run
guard, whose tools call the fault proxy over real HTTP with breakers from
``ctx.registry``. The model is a deployment of the router: a LiteLLM custom provider
(``litellm.custom_provider_map``) that reads the tool messages it is sent, replays them
into the scripted model (``next_call``) and answers with its next call. Once
the guard has stopped the run the router refuses the next model call (``RunStopped``)
and the loop ends there: the model is never asked again. Nothing leaves the machine. Its
report holds in every scenario; the same loop without toolbreaker fails.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from exercise_checks import (
    IDS,
    SHIPPED,
    UNGUARDED,
    fails_without_toolbreaker,
    holds_every_promise,
)
from frameworks import imported, needs
from toolbreaker import RunGuard
from toolbreaker.errors import RunStopped
from toolbreaker.testing import ExerciseContext, next_call, service_tools
from toolbreaker.testing._agents import ticket_options, unguarded

needs("litellm", reason="the litellm extra is not installed")
frameworks_imported = imported("litellm", "toolbreaker.integrations.litellm")

MAX_STEPS = 100  # a user's loop has a bound; the scripted model never comes near it
PROVIDER = "scripted"

# LiteLLM's own: its types warn while pydantic builds their schemas, and its sync path
# leaves the sockets of the event loops it runs internally to the collector.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _function(name: str, doc: str, **parameters: str) -> dict[str, Any]:
    properties = {p: {"type": "string", "description": d} for p, d in parameters.items()}
    schema = {"type": "object", "properties": properties, "required": list(parameters)}
    function = {"name": name, "description": doc, "parameters": schema}
    return {"type": "function", "function": function}


#: The tools as the model is told of them (OpenAI's function-calling schema).
TOOLS = [
    _function("search_catalog", "Search the live catalog.", query="what to look for"),
    _function("refine_search", "Refine a catalog search.", query="what to look for"),
    _function("search_catalog_snapshot", "Search yesterday's snapshot.", query="what"),
    _function("get_order", "Track an order.", order_id="the order's id"),
    _function("create_ticket", "Open a support ticket.", customer="who", title="about what"),
]


def _read(content: Any) -> Any:
    """A tool message's content as the model reads it: the JSON it carries, else the text."""
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)


@functools.cache
def scripted_model_class() -> type[Any]:
    """``ScriptedModel``, a LiteLLM custom provider (defined once LiteLLM is imported)."""
    import litellm

    class ScriptedModel(litellm.CustomLLM):
        """The model behind the router: the scripted model's next call, from what it was sent.

        The behaviour is the deployment's model name (``scripted/alternate``). Each request's
        tool messages are read, in order, by the scripted model (``next_call``); its next call is
        the answer, or a final text once the plan is done. ``requests`` counts what reached it;
        ``after_stop`` the requests that carried a result saying the run had stopped.
        """

        def __init__(self) -> None:
            super().__init__()
            self.requests = 0
            self.after_stop = 0

        def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            self.requests += 1
            results = [_read(_field(m, "content")) for m in messages if _field(m, "role") == "tool"]
            if any(isinstance(r, Mapping) and r.get("run_stopped") for r in results):
                self.after_stop += 1
            found = next_call(model, results)
            if found is None:
                message: dict[str, Any] = {"role": "assistant", "content": "Done."}
                finish = "stop"
            else:
                name, arguments = found
                call = {
                    "id": f"call-{self.requests}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            return litellm.ModelResponse(
                model=model,
                choices=[{"index": 0, "message": message, "finish_reason": finish}],
                usage={
                    "prompt_tokens": len(messages),
                    "completion_tokens": 1,
                    "total_tokens": len(messages) + 1,
                },
            )

    return ScriptedModel


@pytest.fixture(autouse=True)
def collect_litellm_loops() -> Iterator[None]:
    """Collect the event loops LiteLLM's sync path left behind now, not after the session:
    collected there, out of every test, their ResourceWarnings fail the run."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(autouse=True)
def model(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The scripted provider, known to LiteLLM for this test only."""
    import litellm

    scripted = scripted_model_class()()
    entry = {"provider": PROVIDER, "custom_handler": scripted}
    monkeypatch.setattr(litellm, "custom_provider_map", [*litellm.custom_provider_map, entry])
    return scripted


def router_for(ctx: ExerciseContext, guard: RunGuard | None = None) -> Any:
    """The user's router: one deployment, the scripted model following the scenario."""
    deployment = {
        "model_name": "agent",
        "litellm_params": {"model": f"{PROVIDER}/{ctx.scenario.behaviour}"},
    }
    import litellm

    from toolbreaker.integrations.litellm import GuardedRouter

    if guard is None:
        return litellm.Router(model_list=[deployment], num_retries=0)
    return GuardedRouter(registry=ctx.registry, guard=guard, model_list=[deployment], num_retries=0)


def run_loop(router: Any, prompt: str, call: Callable[[str, dict[str, Any]], Any]) -> str:
    """The tool-calling loop a LiteLLM user writes: ask, run the calls, answer, ask again.

    Returns the model's final text.
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(MAX_STEPS):
        response = router.completion(model="agent", messages=messages, tools=TOOLS)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return str(message.content or "")
        for tool_call in message.tool_calls:
            result = call(tool_call.function.name, json.loads(tool_call.function.arguments))
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": tool_call.id,
                    "name": tool_call.function.name,
                    "content": json.dumps(result),
                }
            )
    raise RuntimeError(f"the agent took more than {MAX_STEPS} steps")


def guarded_tools(ctx: ExerciseContext) -> RunGuard:
    """The exercise's run guard with the tools registered: ``scripted_agent``'s layout.

    Both catalog tools share one ``catalog`` breaker (whichever the model picks, the
    dependency is one) whose fallback is the snapshot; the ticket write has a business
    key, verification and a read-only reconcile check, so a timeout after its commit is
    settled, never repeated.
    """
    raw = service_tools(ctx)
    registry = ctx.registry
    registry.get("catalog-snapshot", "read", tool="search_catalog_snapshot")
    catalog = registry.get(
        "catalog",
        "read",
        tool="search_catalog",
        fallback="search_catalog_snapshot",
        fallback_note="say in your answer that prices may be out of date",
    )
    guard = ctx.run_guard()
    for name in ("search_catalog", "refine_search"):
        guard.tool(name, breaker=catalog)(raw[name])
    guard.tool("search_catalog_snapshot", breaker=registry.get("catalog-snapshot", "read"))(
        raw["search_catalog_snapshot"]
    )
    guard.tool("get_order", breaker=registry.get("orders", "read"))(raw["get_order"])
    tickets = registry.get("tickets", "write")
    guard.tool("create_ticket", breaker=tickets, **ticket_options(ctx))(raw["create_ticket"])
    return guard


def litellm_agent(ctx: ExerciseContext) -> RunGuard:
    """The user's LiteLLM agent under toolbreaker: the router counts the model's usage
    into the run guard, which runs every tool call the model makes; once the guard has
    stopped the run the router refuses to ask the model again, and the loop ends."""
    guard = guarded_tools(ctx)
    with contextlib.suppress(RunStopped):  # the stop packet is the guard's, returned below
        run_loop(router_for(ctx, guard), ctx.scenario.prompt, guard.call)
    return guard


def bare_litellm_agent(ctx: ExerciseContext) -> None:
    """The same loop on LiteLLM's own router, without toolbreaker: a failing tool's error
    goes back to the model as an error it may retry."""
    tools = {name: unguarded(fn) for name, fn in service_tools(ctx).items()}
    run_loop(router_for(ctx), ctx.scenario.prompt, lambda name, args: tools[name](**args))


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_a_guarded_litellm_agent_holds_every_promise(path, model):
    """GuardedRouter and a run guard: every shipped scenario's three promises hold,
    measured at the service, and every fault was really met."""
    holds_every_promise(path, litellm_agent)
    assert model.requests > 0  # the calls came from the model behind the router
    assert model.after_stop == 0  # a stopped run never asked the model again


@pytest.mark.parametrize("name", UNGUARDED)
def test_the_same_litellm_agent_without_toolbreaker_fails(name):
    """Without toolbreaker the report fails: no packet, and the provider hit too often or
    a ticket opened twice."""
    fails_without_toolbreaker(name, bare_litellm_agent)
