"""The LiteLLM adapter, inside LiteLLM's real Router, against a real local model server.

Each deployment is a :class:`~toolbreaker.testing.ToolService` answering OpenAI chat
completions on 127.0.0.1 (``POST /v1/chat/completions``), reached by LiteLLM's own
OpenAI provider through ``api_base``: every attempt crosses a real socket, and the
service counts the requests that reached it. Faults (503 outages, 429 with Retry-After,
400s, hangs) are scripted on the service. Nothing leaves the machine: LiteLLM reads its
bundled cost map (``LITELLM_LOCAL_MODEL_COST_MAP``, set by tests/conftest.py) and has no
other lookups here.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import warnings
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from toolbreaker.integrations.litellm import GuardedRouter


from frameworks import imported, needs
from loop_helpers import LoopSpy
from toolbreaker import Budget, ModelPrice, Policy, Registry, RunGuard
from toolbreaker.errors import CircuitOpen, DeploymentsUnavailable, RunStopped
from toolbreaker.stores import SQLiteStore
from toolbreaker.testing import CHAT_ROUTE, FakeClock, Fault, ToolService
from toolbreaker.testing._chat import openai_error

needs("litellm", reason="the litellm extra is not installed")
frameworks_imported = imported(
    "litellm", "litellm.router", "litellm.router_config", "toolbreaker.integrations.litellm"
)

HI = [{"role": "user", "content": "hello there"}]

# LiteLLM's own: its types warn while pydantic builds their schemas, and its sync path
# leaves the sockets of the event loops it runs internally to the collector.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def collect_litellm_loops() -> Iterator[None]:
    """Collect the event loops LiteLLM's sync path left behind now, not after the session:
    collected there, out of every test, their ResourceWarnings fail the run."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def primary() -> Iterator[ToolService]:
    with ToolService() as running:
        yield running


@pytest.fixture
def backup() -> Iterator[ToolService]:
    with ToolService() as running:
        yield running


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def deployment(name: str, model: str, service: ToolService, **params: Any) -> dict[str, Any]:
    """One model-list entry: LiteLLM's OpenAI provider pointed at the local service."""
    return {
        "model_name": name,
        "litellm_params": {
            "model": f"openai/{model}",
            "api_base": f"{service.url}/v1",
            "api_key": "sk-local-test",
            **params,
        },
    }


def make_router(
    primary: ToolService,
    backup: ToolService | None = None,
    *,
    registry: Registry,
    **arguments: Any,
) -> GuardedRouter:
    """``primary`` with ``backup`` as its fallback group; LiteLLM's own retries off."""
    from toolbreaker.integrations.litellm import GuardedRouter

    models = [deployment("primary", "gpt-a", primary)]
    if backup is not None:
        models.append(deployment("backup", "gpt-b", backup))
        arguments.setdefault("fallbacks", [{"primary": ["backup"]}])
    return GuardedRouter(registry=registry, model_list=models, num_retries=0, **arguments)


def breaker_of(router: GuardedRouter, service: ToolService, model: str = "gpt-a") -> Any:
    return router.breaker_for(deployment("any", model, service))


def test_repeated_503s_open_the_deployment_and_the_fallback_serves_without_touching_it(
    primary, backup
):
    """Two 503s open the primary's breaker; the next calls go to the backup group through
    LiteLLM's own fallbacks, and no request reaches the primary any more."""
    primary.outage(CHAT_ROUTE, 503)
    router = make_router(primary, backup, registry=Registry(Policy(failure_threshold=2)))
    for _ in range(2):
        answer = router.completion(model="primary", messages=HI)
        assert answer.model == "gpt-b"
    assert breaker_of(router, primary).state.phase == "open"
    assert primary.hits == {CHAT_ROUTE: 2}

    for _ in range(3):
        answer = router.completion(model="primary", messages=HI)
        assert answer.choices[0].message.content == "echo: hello there"
    assert primary.hits == {CHAT_ROUTE: 2}  # the dead deployment was never asked again
    assert backup.hits == {CHAT_ROUTE: 5}
    assert breaker_of(router, backup, "gpt-b").state.phase == "closed"


def test_a_400_never_opens_the_deployment(primary):
    """Bad requests (a context window exceeded) are the caller's: the breaker stays closed."""
    import litellm

    body = openai_error(
        "This model's maximum context length is 8 tokens", kind="invalid_request_error"
    )
    primary.inject(CHAT_ROUTE, *[Fault(status=400, body=body)] * 4)
    router = make_router(primary, registry=Registry(Policy(failure_threshold=2)))
    for _ in range(4):
        with pytest.raises(litellm.BadRequestError):
            router.completion(model="primary", messages=HI)
    assert breaker_of(router, primary).state.phase == "closed"
    assert router.completion(model="primary", messages=HI).model == "gpt-a"
    assert primary.hits == {CHAT_ROUTE: 5}


def test_a_429_with_retry_after_opens_for_at_least_that_long(primary, clock):
    """A rate limit counts against the deployment and its Retry-After sets the cooldown."""
    import litellm

    primary.inject(CHAT_ROUTE, Fault(status=429, retry_after=90))
    registry = Registry(Policy(failure_threshold=1, cooldown_ms=1_000), clock=clock)
    router = make_router(primary, registry=registry)
    with pytest.raises(litellm.RateLimitError):
        router.completion(model="primary", messages=HI)
    breaker = breaker_of(router, primary)
    assert breaker.state.phase == "open"
    clock.advance(60_000)  # past the policy's cooldown, not the provider's
    with pytest.raises(DeploymentsUnavailable) as caught:
        router.completion(model="primary", messages=HI)
    assert 29_000 <= caught.value.retry_after_ms <= 30_000
    assert primary.hits == {CHAT_ROUTE: 1}


def test_a_hang_past_the_deployments_timeout_counts_as_a_failure(primary):
    """A provider that does not answer: LiteLLM's Timeout opens the breaker, then rejects."""
    import litellm

    from toolbreaker.integrations.litellm import GuardedRouter

    primary.inject(CHAT_ROUTE, Fault(delay=30))
    models = [deployment("primary", "gpt-a", primary, timeout=0.3)]
    router = GuardedRouter(
        registry=Registry(Policy(failure_threshold=1)), model_list=models, num_retries=0
    )
    with pytest.raises(litellm.Timeout):
        router.completion(model="primary", messages=HI)
    assert router.breaker_for(models[0]).state.phase == "open"
    with pytest.raises(DeploymentsUnavailable):
        router.completion(model="primary", messages=HI)
    assert primary.hits == {CHAT_ROUTE: 1}


def test_after_the_cooldown_one_probe_recovers_the_deployment(primary, backup, clock):
    """Open, then cooled down: the next call probes the primary, its success closes it."""
    primary.outage(CHAT_ROUTE, 503)
    policy = Policy(failure_threshold=2, cooldown_ms=5_000, success_threshold=1)
    router = make_router(primary, backup, registry=Registry(policy, clock=clock))
    for _ in range(3):
        router.completion(model="primary", messages=HI)
    assert primary.hits == {CHAT_ROUTE: 2}
    primary.recover(CHAT_ROUTE)
    clock.advance(5_001)
    assert router.completion(model="primary", messages=HI).model == "gpt-a"  # the probe
    assert breaker_of(router, primary).state.phase == "closed"
    assert router.completion(model="primary", messages=HI).model == "gpt-a"
    assert primary.hits == {CHAT_ROUTE: 4}
    assert backup.hits == {CHAT_ROUTE: 3}


def test_every_deployment_open_gives_a_typed_error_naming_each_and_its_wait(primary, backup):
    """Both groups open: nothing is sent, and the caller reads which deployments are out
    and for how long, in the same tool-unavailable shape a model reads everywhere."""
    import litellm

    primary.outage(CHAT_ROUTE, 503)
    backup.outage(CHAT_ROUTE, 503)
    registry = Registry(Policy(failure_threshold=1, cooldown_ms=20_000))
    router = make_router(primary, backup, registry=registry)
    with pytest.raises(litellm.ServiceUnavailableError):
        router.completion(model="primary", messages=HI)
    hits = (primary.hits, backup.hits)

    with pytest.raises(DeploymentsUnavailable) as caught:
        router.completion(model="primary", messages=HI)
    error = caught.value
    assert isinstance(error, CircuitOpen)
    assert error.model == "primary"
    assert set(error.deployments) == {
        breaker_of(router, primary).key,
        breaker_of(router, backup, "gpt-b").key,
    }
    assert all(0 < wait <= 20_000 for wait in error.deployments.values())
    result = error.result
    assert result["tool_unavailable"] is True
    assert result["tool"] == "primary"
    assert result["retry_after_seconds"] == 20
    assert [d["reason"] for d in result["deployments"]] == ["open", "open"]
    assert "primary" in result["instruction"]

    async def asked() -> DeploymentsUnavailable:
        with pytest.raises(DeploymentsUnavailable) as caught:
            await router.acompletion(model="primary", messages=HI)
        return caught.value

    assert set(asyncio.run(asked()).deployments) == set(error.deployments)  # async says the same
    assert (primary.hits, backup.hits) == hits


def test_two_routers_share_one_breaker_through_a_sqlite_store(tmp_path, primary, backup):
    """Two routers (two processes' view) on one SQLite file: what one learns, the other
    obeys; the second router never sends its first call to the dead deployment."""
    path = tmp_path / "breakers.db"
    primary.outage(CHAT_ROUTE, 503)
    with SQLiteStore(path) as one_store, SQLiteStore(path) as other_store:
        one = make_router(
            primary, backup, registry=Registry(Policy(failure_threshold=2), store=one_store)
        )
        other = make_router(
            primary, backup, registry=Registry(Policy(failure_threshold=2), store=other_store)
        )
        assert breaker_of(one, primary).key == breaker_of(other, primary).key
        for _ in range(2):
            one.completion(model="primary", messages=HI)
        assert primary.hits == {CHAT_ROUTE: 2}
        assert other.completion(model="primary", messages=HI).model == "gpt-b"
        assert primary.hits == {CHAT_ROUTE: 2}
        assert backup.hits == {CHAT_ROUTE: 3}


def test_a_store_that_is_down_denies_every_deployment(tmp_path, primary, backup):
    """The breakers' store cannot be read (its file is locked): fail closed, nothing is sent."""
    path = tmp_path / "breakers.db"
    with SQLiteStore(path, timeout=0.05, backoff=0) as store:
        router = make_router(primary, backup, registry=Registry(store=store))
        locker = sqlite3.connect(path, isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            with pytest.raises(DeploymentsUnavailable) as caught:
                router.completion(model="primary", messages=HI)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
    assert caught.value.reason == "store-unavailable"
    assert caught.value.result["reason"] == "store-unavailable"
    assert primary.hits == {}
    assert backup.hits == {}


def test_the_async_path_awaits_the_store_and_leaves_the_loop_free(tmp_path, primary, backup):
    """acompletion with a shared store whose views are never trusted: every admission and
    settling is a store round trip, none of them on the loop's thread; the fallback serves."""
    primary.outage(CHAT_ROUTE, 503)
    with SQLiteStore(tmp_path / "fleet.db", poll_interval=3600) as store:
        router = make_router(
            primary, backup, registry=Registry(Policy(failure_threshold=2), store=store)
        )
        spy = LoopSpy(store)
        # aapply runs the store's round trip in a worker thread: watch the round trip too.
        store._round_trip = spy._watched("_round_trip", "SQLiteStore", store._round_trip)

        async def calls() -> list[str]:
            return [
                (await router.acompletion(model="primary", messages=HI)).model for _ in range(4)
            ]

        assert asyncio.run(calls()) == ["gpt-b"] * 4
    assert primary.hits == {CHAT_ROUTE: 2}
    assert spy.called("_round_trip") >= 4  # admissions and settlings went to the file
    assert spy.on_loop == [], spy.on_loop


def test_the_async_path_keeps_the_loop_running_while_a_provider_hangs(primary):
    """A heartbeat on the same loop keeps beating while the attempt waits on a hung
    provider; the timeout that ends the wait counts against the deployment."""
    import litellm

    from toolbreaker.integrations.litellm import GuardedRouter

    primary.inject(CHAT_ROUTE, Fault(delay=30))
    models = [deployment("primary", "gpt-a", primary, timeout=0.5)]
    router = GuardedRouter(
        registry=Registry(Policy(failure_threshold=1)), model_list=models, num_retries=0
    )
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            await asyncio.sleep(0.01)
            beats += 1

    async def main() -> BaseException | None:
        beating = asyncio.create_task(heartbeat())
        try:
            await router.acompletion(model="primary", messages=HI)
        except litellm.Timeout as exc:
            return exc
        finally:
            beating.cancel()
        return None

    assert isinstance(asyncio.run(main()), litellm.Timeout)
    assert beats > 1
    assert router.breaker_for(models[0]).state.phase == "open"


def test_each_responses_usage_goes_into_the_run_budget(primary, backup):
    """Given a run guard, each answer's tokens are priced into the run's cost; the stop
    packet shows the model's cost and usage (the failed attempts had none)."""
    primary.outage(CHAT_ROUTE, 503)
    prices = {"gpt-b*": ModelPrice("1000", "2000")}  # per million tokens
    guard = RunGuard("t-1", budget=Budget(max_cost="1", prices=prices))
    router = make_router(
        primary, backup, registry=Registry(Policy(failure_threshold=2)), guard=guard
    )
    for _ in range(3):
        router.completion(model="primary", messages=HI)  # 2 prompt + 3 completion tokens
    assert guard.state.cost == Decimal("0.024")
    counters = json.loads(guard.stop_packet().to_json())["counters"]
    assert counters["model_cost"] == "0.024"
    assert counters["usage"] == [
        {"model": "gpt-b", "input_tokens": 6, "output_tokens": 9, "requests": 3, "cost": "0.024"}
    ]


def test_a_run_the_guard_stopped_sends_no_more_model_calls(primary, backup):
    """Once the run guard stopped the run, a model call is refused before any deployment
    is asked (the fallback neither): the caller gets the stop packet, in the words every
    adapter ends a stopped run with, and nothing reaches a provider."""
    guard = RunGuard("t-1")
    router = make_router(primary, backup, registry=Registry(), guard=guard)
    router.completion(model="primary", messages=HI)
    guard.stop("the operator ended the task")

    with pytest.raises(RunStopped) as caught:
        router.completion(model="primary", messages=HI)
    stopped = caught.value
    assert stopped.packet.condition == "operator"
    assert stopped.packet.task == "t-1"
    assert str(stopped).startswith("Run stopped by toolbreaker (operator): ")
    assert stopped.packet.next_safe_action in str(stopped)

    async def asked() -> RunStopped:
        with pytest.raises(RunStopped) as caught:
            await router.acompletion(model="primary", messages=HI)
        return caught.value

    assert asyncio.run(asked()).packet.condition == "operator"  # async says the same
    assert primary.hits == {CHAT_ROUTE: 1}
    assert backup.hits == {}
    assert all(b.state.phase == "closed" for b in router.breakers)  # no breaker was asked


def test_the_answer_that_stops_the_run_is_the_last_one_sent(primary):
    """A model the budget's price table does not price stops a run with a max_cost (its
    cost is unknown): that answer is the caller's, the next call is never sent."""
    guard = RunGuard("t-1", budget=Budget(max_cost="1", prices={"other*": ModelPrice("1", "1")}))
    router = make_router(primary, registry=Registry(), guard=guard)
    assert router.completion(model="primary", messages=HI).model == "gpt-a"
    assert guard.stopped is not None
    with pytest.raises(RunStopped) as caught:
        router.completion(model="primary", messages=HI)
    assert caught.value.packet.condition == "max-cost"
    assert primary.hits == {CHAT_ROUTE: 1}


def test_a_stop_during_a_call_keeps_its_fallback_from_being_sent(primary, backup):
    """The run stops while the primary's attempt is out (here as its breaker is looked
    up, so the moment is exact) and the primary fails: LiteLLM's fallback attempt is
    refused, the backup is never asked, and the caller gets the stop, not the 503."""
    import litellm

    from toolbreaker.integrations.litellm import deployment_key

    primary.outage(CHAT_ROUTE, 503)
    guard = RunGuard("t-1")

    def key(params: Any) -> str:
        if params.get("model") == "openai/gpt-a":
            guard.stop("a required dependency went down")
        return deployment_key(params)

    router = make_router(primary, backup, registry=Registry(), guard=guard, key=key)
    with pytest.raises(RunStopped) as caught:
        router.completion(model="primary", messages=HI)
    assert caught.value.packet.detail == "a required dependency went down"
    assert isinstance(caught.value.__cause__, litellm.ServiceUnavailableError)
    assert primary.hits == {CHAT_ROUTE: 1}
    assert backup.hits == {}


def test_a_router_built_on_the_breaker_host_refuses_a_stopped_run_too(primary, backup):
    """LiteLLM's own Router.from_config with a BreakerHost: every attempt of a stopped
    run is refused (the fallback's too), and LiteLLM hands the caller the stop."""
    import litellm
    from litellm.router import router_arguments
    from litellm.router_config import build_router_config

    from toolbreaker.integrations.litellm import BreakerHost

    guard = RunGuard("t-1")
    models = [deployment("primary", "gpt-a", primary), deployment("backup", "gpt-b", backup)]
    arguments = router_arguments(
        model_list=models, fallbacks=[{"primary": ["backup"]}], num_retries=0
    )
    router = litellm.Router.from_config(
        build_router_config(arguments), host=BreakerHost(Registry(), guard=guard)
    )
    guard.stop("the operator ended the task")
    with pytest.raises(RunStopped):
        router.completion(model="primary", messages=HI)
    assert (primary.hits, backup.hits) == ({}, {})


def test_each_answer_begins_a_model_turn(primary):
    """Budget.max_calls_per_turn counts the calls one answer starts: the call deferred
    past the limit ("call it again in your next turn") runs after the next answer."""
    guard = RunGuard("t-1", budget=Budget(max_calls_per_turn=1))
    looked: list[str] = []

    @guard.tool("lookup")
    def lookup(query: str) -> dict[str, Any]:
        looked.append(query)
        return {"ok": True, "query": query}

    router = make_router(primary, registry=Registry(), guard=guard)
    router.completion(model="primary", messages=HI)
    assert lookup(query="a") == {"ok": True, "query": "a"}
    deferred = lookup(query="b")
    assert deferred["deferred"] is True
    assert deferred["resubmit"] == "next-turn"
    router.completion(model="primary", messages=HI)
    assert lookup(query="b") == {"ok": True, "query": "b"}
    assert looked == ["a", "b"]


def test_usage_of_reads_the_model_and_tokens_of_a_litellm_response():
    """The one extraction: the answering model, prompt and completion tokens."""
    import litellm

    from toolbreaker.integrations.litellm import usage_of

    response = litellm.ModelResponse(
        model="gpt-x", usage={"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    )
    assert usage_of(response, "openai/gpt-x") == ("gpt-x", 7, 5)
    assert usage_of(object(), "m") is None


def test_deployment_keys_name_the_model_and_host_or_the_given_id():
    """Keys never carry credentials; an id the model list gives wins."""
    from toolbreaker.integrations.litellm import deployment_key

    params = {
        "model": "openai/gpt-a",
        "api_base": "https://user:secret@eu.example.com:8443/v1",
        "api_key": "sk-secret",
        "model_info": {"id": "eu-1"},
    }
    assert deployment_key(params) == "openai/gpt-a@eu.example.com:8443"
    assert deployment_key(params, named=frozenset({"eu-1"})) == "eu-1"
    assert deployment_key({"model": "anthropic/claude"}) == "anthropic/claude"
    assert deployment_key({"model": "m", "api_base": "http://h:port/v1"}) == "m@h"


def test_a_deployment_named_in_the_model_list_keys_its_breaker(primary):
    from toolbreaker.integrations.litellm import GuardedRouter

    models = [deployment("primary", "gpt-a", primary)]
    models[0]["model_info"] = {"id": "primary-eu"}
    router = GuardedRouter(registry=Registry(), model_list=models, num_retries=0)
    router.completion(model="primary", messages=HI)
    assert [b.key for b in router.breakers] == ["primary-eu:completion"]


def test_other_router_members_are_litellms_own(primary):
    """The guarded router is LiteLLM's router: its registry, its settings, its endpoints."""
    import litellm

    breakers = Registry()
    router = make_router(primary, registry=breakers)
    assert isinstance(router.router, litellm.Router)
    assert router.breakers is breakers
    assert [d["model_name"] for d in router.registry().all()] == ["primary"]
