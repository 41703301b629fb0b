"""The httpx transports against the real local tool service over 127.0.0.1.

Every status and every broken connection below crosses a real socket: the service
answers 503, 429 with ``Retry-After``, 404, resets the connection or stalls.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from toolbreaker import Policy, Registry, TraceRecorder
from toolbreaker.core import read_trace, replay
from toolbreaker.core._breaker.state import CLOSED, OPEN
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.integrations.httpx import (
    REJECTED_HEADER,
    AsyncBreakerTransport,
    BreakerTransport,
    host_key,
)
from toolbreaker.testing import FakeClock, Fault, ToolService


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000)


def make_registry(clock: FakeClock, **policy: int) -> Registry:
    policy = {"failure_threshold": 3, "cooldown_ms": 10_000, **policy}
    return Registry(Policy(**policy), clock=clock)


def guarded(registry: Registry, url: str, **options: Any) -> httpx.Client:
    """A sync client whose requests go through a breaker transport."""
    return httpx.Client(transport=BreakerTransport(registry=registry), base_url=url, **options)


def test_503s_open_the_breaker_and_the_next_request_is_not_sent(service, clock):
    """Requirement 1 (sync): three real 503s open the host's breaker; the fourth request
    raises CircuitOpen carrying the tool-unavailable result and never reaches the service."""
    registry = make_registry(clock)
    service.outage("GET /search")
    with guarded(registry, service.url) as client:
        statuses = [client.get("/search", params={"q": "cable"}).status_code for _ in range(3)]
        with pytest.raises(CircuitOpen) as info:
            client.get("/search", params={"q": "cable"})
    assert statuses == [503, 503, 503]
    assert service.hits["GET /search"] == 3
    assert info.value.result["tool_unavailable"] is True
    assert info.value.retry_after == 10
    assert registry.get(host_key(httpx.Request("GET", service.url))).state.phase == OPEN


def test_503s_open_the_breaker_async(service, clock):
    """Requirement 1 (async): the same through AsyncClient and the async transport."""
    registry = make_registry(clock)
    service.outage("GET /search")

    async def main() -> CircuitOpen:
        transport = AsyncBreakerTransport(registry=registry)
        async with httpx.AsyncClient(transport=transport, base_url=service.url) as client:
            for _ in range(3):
                assert (await client.get("/search", params={"q": "x"})).status_code == 503
            with pytest.raises(CircuitOpen) as info:
                await client.get("/search", params={"q": "x"})
            return info.value

    rejected = anyio.run(main)
    assert service.hits["GET /search"] == 3
    assert rejected.result["tool_unavailable"] is True


def test_async_transport_records_resets_and_can_respond_with_a_503(service, clock):
    """The async transport records a connection reset as a network failure and, with
    on_reject="respond", answers the next request with a local 503."""
    registry = make_registry(clock, failure_threshold=1)
    service.inject("GET /search", Fault(reset=True))

    async def main() -> httpx.Response:
        transport = AsyncBreakerTransport(registry=registry, on_reject="respond")
        async with httpx.AsyncClient(transport=transport, base_url=service.url) as client:
            with pytest.raises(httpx.TransportError):
                await client.get("/search", params={"q": "x"})
            return await client.get("/search", params={"q": "x"})

    rejected = anyio.run(main)
    assert rejected.status_code == 503
    assert rejected.headers[REJECTED_HEADER] == "cooldown"
    assert service.hits["GET /search"] == 1


def test_404_does_not_open_the_breaker(service, clock):
    """Requirement 2: ten real 404s are ignored; every request is still sent."""
    registry = make_registry(clock, failure_threshold=1)
    with guarded(registry, service.url) as client:
        statuses = {client.get(f"/orders/NOPE-{n}").status_code for n in range(10)}
    assert statuses == {404}
    assert service.hits["GET /orders"] == 10
    (breaker,) = registry
    assert breaker.state.phase == CLOSED
    assert breaker.stats.failures == {"http-404": 10}


def test_429_retry_after_sets_the_cooldown(service, clock):
    """A 429 with Retry-After: 120 opens the breaker for 120 s, not the 10 s cooldown:
    the wait travels from the header into the core with the failure."""
    registry = make_registry(clock, failure_threshold=1)
    service.inject("GET /search", Fault(status=429, retry_after=120))
    with guarded(registry, service.url) as client:
        assert client.get("/search", params={"q": "x"}).status_code == 429
        clock.advance(seconds=60)  # past the policy's cooldown, not past Retry-After
        with pytest.raises(CircuitOpen) as info:
            client.get("/search", params={"q": "x"})
    assert info.value.retry_after == 60
    assert service.hits["GET /search"] == 1


def test_respond_mode_returns_a_synthesized_503(service, clock):
    """on_reject="respond": a rejection is a local 503 with Retry-After, the reason header
    and the tool-unavailable result as JSON; the service is not contacted."""
    registry = make_registry(clock, failure_threshold=1)
    service.outage("GET /search", status=502)
    transport = BreakerTransport(registry=registry, on_reject="respond")
    with httpx.Client(transport=transport, base_url=service.url) as client:
        assert client.get("/search", params={"q": "x"}).status_code == 502
        rejected = client.get("/search", params={"q": "x"})
    assert rejected.status_code == 503
    assert rejected.headers["Retry-After"] == "10"
    assert rejected.headers[REJECTED_HEADER] == "cooldown"
    assert rejected.json()["tool_unavailable"] is True
    assert service.hits["GET /search"] == 1


def test_two_clients_sharing_a_registry_share_the_breaker(service, clock):
    """Requirement 5: a sync client's failures open the breaker an async client then
    meets: one Registry, one breaker per host."""
    registry = make_registry(clock)
    service.outage("GET /search")
    with guarded(registry, service.url) as a:
        for _ in range(3):
            a.get("/search", params={"q": "x"})

    async def other_client() -> None:
        transport = AsyncBreakerTransport(registry=registry)
        async with httpx.AsyncClient(transport=transport, base_url=service.url) as b:
            with pytest.raises(CircuitOpen):
                await b.get("/health")  # another route, the same host

    anyio.run(other_client)
    assert service.hits == {"GET /search": 3}
    assert len(registry) == 1


def test_connection_resets_count_and_open_the_breaker(service, clock):
    """A connection reset without an answer is a network failure: three open the breaker."""
    registry = make_registry(clock)
    service.inject("GET /search", *[Fault(reset=True)] * 3)
    with guarded(registry, service.url) as client:
        for _ in range(3):
            with pytest.raises(httpx.TransportError):
                client.get("/search", params={"q": "x"})
        with pytest.raises(CircuitOpen):
            client.get("/search", params={"q": "x"})
    (breaker,) = registry
    network = [n for detail, n in breaker.stats.failures.items() if detail.startswith("network")]
    assert sum(network) == 3
    assert service.hits["GET /search"] == 3


def test_refused_connection_and_read_timeout_are_failures(service, clock):
    """A refused connection (nothing listens) and httpx's read timeout both count."""
    registry = make_registry(clock, failure_threshold=5)
    service.inject("GET /search", Fault(delay=0.3))
    with guarded(registry, service.url, timeout=0.05) as client, pytest.raises(httpx.ReadTimeout):
        client.get("/search", params={"q": "x"})
    dead = ToolService().start()
    dead_url = dead.url
    dead.stop()
    with guarded(registry, dead_url) as client, pytest.raises(httpx.ConnectError):
        client.get("/health")
    live = registry.get(host_key(httpx.Request("GET", service.url)))
    gone = registry.get(host_key(httpx.Request("GET", dead_url)))
    assert live.stats.failures == {"timeout": 1}
    assert list(gone.stats.failures) == ["network:ConnectError"]


def test_recovered_host_closes_the_breaker_through_probes(service, clock):
    """After the cooldown, probes reach the recovered host and their 200s close the breaker."""
    registry = make_registry(clock, failure_threshold=1, success_threshold=2)
    service.inject("GET /search", Fault(status=503))
    with guarded(registry, service.url) as client:
        assert client.get("/search", params={"q": "x"}).status_code == 503
        clock.advance(seconds=11)
        probes = [client.get("/search", params={"q": "x"}) for _ in range(2)]
    assert [probe.status_code for probe in probes] == [200, 200]
    (breaker,) = registry
    assert breaker.state.phase == CLOSED


def test_key_function_gives_each_route_its_own_breaker(service, clock):
    """A key function returning (dependency, operation) keeps an outage of one route from
    sidelining another route of the same host."""
    registry = make_registry(clock, failure_threshold=1)
    service.outage("GET /search")

    def per_route(request: httpx.Request) -> tuple[str, str]:
        return host_key(request), request.url.path.split("/")[1]

    transport = BreakerTransport(registry=registry, key=per_route)
    with httpx.Client(transport=transport, base_url=service.url) as client:
        client.get("/search", params={"q": "x"})
        with pytest.raises(CircuitOpen):
            client.get("/search", params={"q": "x"})
        assert client.get("/orders/A-1001").status_code == 200
    assert sorted(b.key.rsplit(":", 1)[1] for b in registry) == ["orders", "search"]


def test_close_closes_the_inner_transport_and_bad_options_fail():
    """close()/aclose() reach the wrapped transport; an unknown on_reject is refused."""
    closed: list[str] = []

    class Inner(httpx.MockTransport):
        def close(self) -> None:
            closed.append("sync")

        async def aclose(self) -> None:
            closed.append("async")

    def ok(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    with httpx.Client(transport=BreakerTransport(Inner(ok))) as client:
        assert client.get("http://example.test/").status_code == 200

    async def main() -> None:
        async with httpx.AsyncClient(transport=AsyncBreakerTransport(Inner(ok))) as client:
            assert (await client.get("http://example.test/")).status_code == 200

    anyio.run(main)
    assert closed == ["sync", "async"]
    with pytest.raises(PolicyError):
        BreakerTransport(on_reject="ignore")  # type: ignore[arg-type]


def test_the_request_that_opens_a_transport_breaker_is_unavailable_to_the_model(service, clock):
    """A tool under a RunGuard whose httpx client opens its host's breaker: the model hears
    tool_unavailable on that very call (not a retryable error), and on the next one too."""
    from toolbreaker import RunGuard

    registry = make_registry(clock, failure_threshold=2)
    service.outage("GET /search")
    guard = RunGuard("t-1")
    client = guarded(registry, service.url)

    @guard.tool()
    def search(q: str) -> dict[str, Any]:
        response = client.get("/search", params={"q": q})
        response.raise_for_status()
        return dict(response.json())

    first = search(q="a")
    opened = search(q="b")
    rejected = search(q="c")
    client.close()
    assert first["retryable"] is True
    assert opened["tool_unavailable"] is True
    assert opened["tool"] == "search"
    assert rejected["tool_unavailable"] is True
    assert service.hits["GET /search"] == 2


def test_a_recorder_on_the_registry_records_the_transports_breaker_from_its_first_request(
    service, clock, tmp_path
):
    """The transport makes the host's breaker on its first request, after the recorder
    attached to the registry: the trace holds every request from that first one and
    replays to the breaker's own transitions (the opening included)."""
    registry = make_registry(clock)
    path = tmp_path / "trace.jsonl"
    service.outage("GET /search")
    with TraceRecorder(path) as recorder, guarded(registry, service.url) as client:
        recorder.attach(registry)
        assert len(registry) == 0
        for _ in range(3):
            assert client.get("/search", params={"q": "cable"}).status_code == 503
        with pytest.raises(CircuitOpen):
            client.get("/search", params={"q": "cable"})
    key = host_key(httpx.Request("GET", service.url))
    receipt = replay([event for _, event in read_trace(path)], registry.get(key).policy)
    recorded = receipt["dependencies"][key]
    assert recorded["remote_attempts"] == 3
    assert recorded["local_rejections"] == 1
    assert recorded["opens"] == 1
