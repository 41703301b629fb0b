"""A quiet view is a lease on the state: a dead store goes unnoticed for a bounded time.

A process admits a quiet call from its view of a breaker without a round trip. The view
is trusted only until ``view_lease`` seconds after the store last answered the feed's
heartbeat (a ping on Redis, a query on PostgreSQL), whatever the feed has or has not
noticed since. So once a store is killed (SIGKILL) or frozen (SIGSTOP: the connections
stay open and nothing answers), every call from ``view_lease`` seconds on asks the store
and is denied (``store-unavailable``): none is admitted on the view. Many tries each,
against real servers, and through LiteLLM's real Router (issue 34: a router called right
after its Redis was SIGKILLed let calls through).

The bound is checked by the clock of the call itself (no call that began past it was
admitted): how soon the feed notices is never asserted.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conformance import wait_for

from toolbreaker import Breaker, Policy, Registry
from toolbreaker.errors import CircuitOpen
from toolbreaker.stores import PostgresStore, RedisStore, SQLiteStore

pytestmark = pytest.mark.slow

LEASE = 0.5  # seconds: short, so that many tries stay quick
PAST = 0.5  # how long past the bound the calls go on, all of them denied
TRIES = 12


def quiet_call(breaker: Breaker) -> bool:
    """One call through the breaker's two-step quiet path; whether it was admitted."""
    permit = breaker.allow()
    if permit.admitted:
        permit.record("success")
    return permit.admitted


def guarded_call(breaker: Breaker) -> bool:
    """One call through ``Breaker.call``'s own quiet path; whether it ran."""
    ran: list[bool] = []
    with contextlib.suppress(CircuitOpen):
        breaker.call(lambda: ran.append(True))
    return bool(ran)


#: Both ways in, turn about: admission (allow, begin, a run guard) and Breaker.call.
WAYS = (quiet_call, guarded_call)


def admitted_past_the_bound(
    breaker: Breaker, lease: float, stop: Callable[[], None], call: Callable[[], bool]
) -> list[float]:
    """Trust the view, stop the store, call until ``PAST`` after the bound: how long after
    the stop each admitted call that began past the bound began (none, when it holds)."""
    wait_for(lambda: quiet_call(breaker) and breaker._view.state is not None)
    stop()
    stopped = time.monotonic()  # the store died before this instant
    late: list[float] = []
    while (began := time.monotonic()) < stopped + lease + PAST:
        if call() and began > stopped + lease:
            late.append(round(began - stopped, 3))
        time.sleep(0.002)
    return late


def test_the_default_lease_is_a_second_on_every_shared_store(tmp_path):
    """The bound the docs give: one second, unless the store is built with another."""
    with SQLiteStore(tmp_path / "b.db") as store:
        assert store.view_lease == 1.0


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_no_quiet_call_is_admitted_past_the_lease_once_redis_is_gone(private_redis, how):
    """redis-server SIGKILLed (its connections close) or SIGSTOPped (they stay open, and
    nothing answers a ping), twelve times: from ``view_lease`` seconds on, every call
    is denied."""
    late: dict[int, list[float]] = {}
    for attempt in range(TRIES if how == "kill" else TRIES // 3):
        with RedisStore(private_redis.url, view_lease=LEASE, backoff=0) as store:
            breaker = Breaker(f"dep-{uuid.uuid4().hex[:8]}", store=store, timeout=1)
            stop = private_redis.kill if how == "kill" else private_redis.freeze
            try:
                found = admitted_past_the_bound(
                    breaker, LEASE, stop, functools.partial(WAYS[attempt % 2], breaker)
                )
            finally:
                if how == "freeze":
                    private_redis.thaw()
                    private_redis.kill()
            if found:
                late[attempt] = found
        private_redis.start()
    assert late == {}


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_no_quiet_call_is_admitted_past_the_lease_once_postgres_is_gone(private_postgres, how):
    """PostgreSQL SIGKILLed or frozen, several times: from ``view_lease`` seconds on,
    every call is denied."""
    late: dict[int, list[float]] = {}
    for attempt in range(4):
        with PostgresStore(private_postgres.url, view_lease=LEASE, timeout=0.5, backoff=0) as store:
            breaker = Breaker(f"dep-{uuid.uuid4().hex[:8]}", store=store, timeout=1)
            stop = private_postgres.kill if how == "kill" else private_postgres.freeze
            try:
                found = admitted_past_the_bound(
                    breaker, LEASE, stop, functools.partial(WAYS[attempt % 2], breaker)
                )
            finally:
                if how == "freeze":
                    private_postgres.thaw()
                    private_postgres.kill()
            if found:
                late[attempt] = found
        private_postgres.start()
    assert late == {}


@pytest.fixture
def model() -> Iterator[Any]:
    """A local OpenAI-style chat service for LiteLLM's own OpenAI provider."""
    from toolbreaker.testing import ToolService

    with ToolService() as running:
        yield running


@pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_litellm_router_sends_nothing_past_the_lease_once_its_redis_is_killed(
    private_redis, model
):
    """Issue 34: a LiteLLM Router whose deployments' breakers share a Redis store, called
    right after redis-server is SIGKILLed, twelve times: no completion that began past
    ``view_lease`` reaches the model (each is denied, ``store-unavailable``)."""
    pytest.importorskip("litellm", reason="the litellm extra is not installed")
    from toolbreaker.errors import DeploymentsUnavailable
    from toolbreaker.integrations.litellm import GuardedRouter

    messages = [{"role": "user", "content": "hello"}]
    params = {"model": "openai/gpt-a", "api_base": f"{model.url}/v1", "api_key": "sk-local"}
    late: dict[int, list[float]] = {}
    for attempt in range(TRIES):
        with RedisStore(private_redis.url, view_lease=LEASE, backoff=0) as store:
            registry = Registry(Policy(failure_threshold=2), store=store)
            router = GuardedRouter(
                registry=registry,
                model_list=[{"model_name": "primary", "litellm_params": params}],
                num_retries=0,
            )
            breaker = router.breaker_for({"model_name": "primary", "litellm_params": params})

            def complete(router: GuardedRouter = router) -> bool:
                with contextlib.suppress(DeploymentsUnavailable):
                    router.completion(model="primary", messages=messages)
                    return True
                return False

            found = admitted_past_the_bound(breaker, LEASE, private_redis.kill, complete)
            if found:
                late[attempt] = found
        private_redis.start()
    assert late == {}
