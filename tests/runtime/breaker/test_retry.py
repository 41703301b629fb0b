"""Retries at the breaker layer, against the real local tool service (no real sleeps)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from toolbreaker import Breaker, Policy
from toolbreaker.core._retry import RetryPolicy, RetryRecord, replay
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.runtime._breaker._boundary import Boundary
from toolbreaker.testing import FakeClock, Fault, ToolService, request_json


def make(
    clock: FakeClock,
    *,
    operation: str = "read",
    failure_threshold: int = 5,
    **retry: Any,
) -> Breaker:
    """A breaker whose waits advance the fake clock instead of sleeping."""
    options = {"max_attempts": 3, "base_ms": 100, "deadline_ms": 60_000, **retry}
    cap = options.pop("max_retry_after_ms", None)
    return Breaker(
        "search",
        operation=operation,
        policy=Policy(failure_threshold=failure_threshold),
        clock=clock,
        timeout=2,
        retry=RetryPolicy(**options),
        max_retry_after_ms=cap,
        sleep=lambda seconds: clock.advance(seconds=seconds),
        retry_seed=42,
    )


def search(service: ToolService, q: str = "cable") -> dict[str, Any]:
    return request_json("GET", f"{service.url}/search?q={q}", timeout=2)


def test_transient_failures_are_retried_until_success(service: ToolService) -> None:
    """Two 503s, then a success: one logical operation, three remote attempts."""
    service.inject("GET /search", Fault(status=503), Fault(status=503))
    breaker = make(FakeClock())
    assert breaker.call(search, service)["query"] == "cable"
    assert service.hits["GET /search"] == 3
    assert breaker.stats.retries == {"retry": 2}


def test_attempts_never_exceed_the_maximum(service: ToolService) -> None:
    """max_attempts counts the first attempt; the last failure is raised."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock())
    with pytest.raises(Exception, match="503"):
        breaker.call(search, service)
    assert service.hits["GET /search"] == 3
    assert breaker.stats.retries == {"retry": 2, "max-attempts": 1}


def test_a_4xx_is_never_retried(service: ToolService) -> None:
    """A 404 is the caller's mistake: retrying cannot fix it."""
    breaker = make(FakeClock())
    with pytest.raises(Exception, match="404"):
        breaker.call(lambda: request_json("GET", f"{service.url}/orders/nope", timeout=2))
    assert service.hits["GET /orders"] == 1
    assert breaker.stats.retries == {"not-retryable": 1}


def test_no_retry_once_the_breaker_is_open(service: ToolService) -> None:
    """The failure that opens the breaker ends the retries: nothing reaches the service."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock(), failure_threshold=2, max_attempts=10)
    with pytest.raises(Exception, match="503"):
        breaker.call(search, service)
    assert service.hits["GET /search"] == 2
    assert breaker.stats.retries == {"retry": 1, "breaker-open": 1}
    with pytest.raises(CircuitOpen):
        breaker.call(search, service)
    assert service.hits["GET /search"] == 2


def test_a_forced_close_keeps_retrying_after_the_phase_opens(service: ToolService) -> None:
    """An operator's forced close admits every attempt, so the failure that moves the
    phase to open does not end the retries: they go on as without a breaker (the core's
    ``rejects_callers``, not the phase, says whether the next attempt would be refused)."""
    service.inject("GET /search", Fault(status=503), Fault(status=503))
    breaker = make(FakeClock(), failure_threshold=2, max_attempts=3)
    breaker.force_close("incident 7")
    assert breaker.call(search, service)["query"] == "cable"
    assert service.hits["GET /search"] == 3
    assert breaker.stats.retries == {"retry": 2}


def test_an_unknown_write_outcome_is_never_replayed(service: ToolService) -> None:
    """A write reset after it committed may have happened: it is not retried."""
    service.inject("POST /tickets", Fault(reset=True, commit=True))
    breaker = make(FakeClock(), operation="write")
    with pytest.raises(ConnectionError):
        breaker.call(
            lambda: request_json(
                "POST", f"{service.url}/tickets", body={"title": "t", "body": "b"}, timeout=2
            )
        )
    assert service.hits["POST /tickets"] == 1
    assert len(service.created("tickets")) == 1
    assert breaker.stats.retries == {"outcome-unknown": 1}


def test_a_refused_write_is_retried(service: ToolService) -> None:
    """A 503 means the server refused the write: it did not happen, so retrying is safe."""
    service.inject("POST /tickets", Fault(status=503))
    breaker = make(FakeClock(), operation="write")
    body = {"title": "t", "body": "b"}
    created = breaker.call(
        lambda: request_json("POST", f"{service.url}/tickets", body=body, timeout=2)
    )
    assert created["title"] == "t"
    assert len(service.created("tickets")) == 1


def test_a_hint_beyond_the_cap_makes_the_tool_unavailable_for_the_run(
    service: ToolService,
) -> None:
    """Retry-After: 120 against max_retry_after_ms=5000 is not waited out, and the model
    reads that the tool is unavailable for this run, with nothing to count down."""
    service.inject("GET /search", Fault(status=429, retry_after=120))
    clock = FakeClock()
    breaker = make(clock, max_retry_after_ms=5_000)
    tool = breaker.guard(lambda q: search(service, q), tool="search")
    result = tool("cable")
    assert result["tool_unavailable"] is True
    assert result["reason"] == "rate-limited"
    assert result["retryable"] is False
    assert result["retry_after_seconds"] is None
    assert service.hits["GET /search"] == 1
    assert clock() == 0
    assert breaker.stats.retries == {"hint-too-long": 1}


def test_a_short_hint_is_waited_out(service: ToolService) -> None:
    """Retry-After: 3 within the cap: the next attempt comes at least 3 s later."""
    service.inject("GET /search", Fault(status=503, retry_after=3))
    clock = FakeClock()
    breaker = make(clock, max_retry_after_ms=5_000)
    assert breaker.call(search, service)["query"] == "cable"
    assert clock() >= 3_000


def test_the_retry_budget_is_shared_by_operations_and_exhaustion_is_told(
    service: ToolService,
) -> None:
    """With a budget of one retry, the second failing operation gets no retry, and the
    model reads that the tool is unavailable for the run instead of "retryable"."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock(), budget=1)
    tool = breaker.guard(lambda q: search(service, q), tool="search")
    first = tool("a")
    assert first["retryable"] is False  # the first operation spent the only token
    assert first["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    second = tool("b")
    assert second["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 3
    assert breaker.stats.retries == {"retry": 1, "budget-exhausted": 2}
    assert breaker.retry_budget is not None
    assert breaker.retry_budget.retries == 0


def test_successes_refill_the_budget(service: ToolService) -> None:
    """Ten successes (at the default 10 %) give one retry back."""
    breaker = make(FakeClock(), budget=1)
    service.inject("GET /search", Fault(status=503))
    breaker.call(search, service)
    assert breaker.retry_budget is not None
    assert breaker.retry_budget.retries == 0
    for _ in range(10):
        breaker.call(search, service)
    assert breaker.retry_budget.retries == 1


def test_the_model_re_calling_a_failed_tool_spends_the_same_budget(
    service: ToolService,
) -> None:
    """No retries in the library (max_attempts=1), a budget of one: the model's first
    re-call spends it, its second is answered locally without reaching the service."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock(), max_attempts=1, budget=1)
    tool = breaker.guard(lambda q: search(service, q), tool="search")
    assert tool("cable")["retryable"] is True
    again = tool("cable")
    assert again["retryable"] is False
    assert again["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    refused = tool("cable")
    assert refused["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    assert breaker.stats.retries["model-retry"] == 1
    assert breaker.stats.retries["model-retry-refused"] == 1


def test_begin_counts_the_model_as_a_retry_layer(service: ToolService) -> None:
    """The step API (what adapters use) sees the model's re-call as a retry too."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock(), max_attempts=1, budget=0)
    step = breaker.begin("search", {"q": "cable"})
    try:
        search(service)
    except Exception as exc:  # noqa: BLE001 - settled below
        answer = step.failed(exc)
    assert answer["reason"] == "retry-budget"
    step = breaker.begin("search", {"q": "cable"})
    assert step.answer is not None
    assert step.answer["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 1


def _begun_failure(breaker: Breaker, service: ToolService, args: dict[str, Any]) -> Any:
    """One call through the step API that fails on the real service; the model's answer."""
    step = breaker.begin("search", args)
    if step.answer is not None:
        return step.answer
    try:
        search(service, str(args.get("q", "cable")).strip())
    except Exception as exc:  # noqa: BLE001 - settled here
        return step.failed(exc)
    raise AssertionError("the service was meant to fail")


def test_a_reworded_re_call_is_the_same_action_for_the_breaker_as_for_a_run_guard(
    service: ToolService,
) -> None:
    """One identity of "the same call": the semantic fingerprint a run guard uses. Keys
    reordered, case and spacing changed: the model re-issuing a failed call reworded is
    still retrying, and spends the budget; once it is spent the call is not made."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock(), max_attempts=1, budget=1)
    first = _begun_failure(breaker, service, {"q": "cable", "page": 1})
    assert first["retryable"] is True
    second = _begun_failure(breaker, service, {"page": 1.0, "q": "  Cable "})
    assert second["reason"] == "retry-budget"
    assert breaker.stats.retries == {"model-retry": 1}
    third = _begun_failure(breaker, service, {"q": "CABLE", "page": 1})
    assert third["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    assert breaker.stats.retries == {"model-retry": 1, "model-retry-refused": 1}


def test_a_decorated_tool_called_by_keyword_or_by_position_is_one_action(
    service: ToolService,
) -> None:
    """``tool("cable")`` and ``tool(q="cable")`` are the same call of the tool: the second,
    after the first failed, is the model retrying."""
    service.outage("GET /search", status=503)
    breaker = make(FakeClock(), max_attempts=1, budget=0)
    tool = breaker.guard(lambda q: search(service, q), tool="search")
    assert tool("cable")["reason"] == "retry-budget"  # the budget is empty already
    refused = tool(q="cable")
    assert refused["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 1
    assert breaker.stats.retries["model-retry-refused"] == 1


def test_the_ledger_forgets_its_oldest_failed_calls_first(service: ToolService) -> None:
    """After more than 1,024 failed calls, the re-issue of one that failed just before
    the last is still a retry: the ledger forgets its oldest entries first (one cleared
    whole when full forgot it)."""
    breaker = make(FakeClock(), max_attempts=1, budget=0, failure_threshold=5_000)

    def flaky(q: str) -> None:
        raise ConnectionError(f"refused {q}")

    tool = breaker.guard(flaky, tool="search")
    for n in range(1_025):
        tool(f"q{n}")
    assert "model-retry-refused" not in breaker.stats.retries
    assert tool("q1023")["reason"] == "retry-budget"
    assert breaker.stats.retries["model-retry-refused"] == 1
    assert "model-retry" not in breaker.stats.retries


def test_a_success_ends_the_retrying(service: ToolService) -> None:
    """A call that failed, was re-issued and then succeeded is done: issuing it again
    later is a new call, not a retry (nothing is spent)."""
    service.inject("GET /search", Fault(status=503))
    breaker = make(FakeClock(), max_attempts=1, budget=1)
    tool = breaker.guard(lambda q: search(service, q), tool="search")
    assert tool("cable")["retryable"] is True
    assert tool("cable")["query"] == "cable"  # the model's retry: spends the one retry
    assert tool("cable")["query"] == "cable"  # a new call: nothing to spend, still made
    assert service.hits["GET /search"] == 3
    assert breaker.stats.retries["model-retry"] == 1
    assert "model-retry-refused" not in breaker.stats.retries


def test_async_calls_retry_without_blocking_the_loop(service: ToolService) -> None:
    """acall() retries as call() does; waits are the given sleep (here the fake clock)."""
    service.inject("GET /search", Fault(status=503))
    breaker = make(FakeClock())

    async def fetch() -> dict[str, Any]:
        return await asyncio.to_thread(search, service)

    assert asyncio.run(breaker.acall(fetch))["query"] == "cable"
    assert service.hits["GET /search"] == 2


def test_retries_replay_exactly_from_their_trace(service: ToolService) -> None:
    """Every retry decision is a trace line with its seed: replaying the lines with the
    same policy gives the same decisions, waits included."""
    service.inject(
        "GET /search", Fault(status=503), Fault(status=502), Fault(status=429, retry_after=1)
    )
    clock = FakeClock()
    breaker = make(clock, max_attempts=4, jitter="decorrelated")
    lines: list[str] = []
    breaker.add_retry_listener(lambda record: lines.append(json.dumps(record.to_dict())))
    breaker.call(search, service)
    records = [RetryRecord.from_dict(json.loads(line)) for line in lines]
    assert [r.decision.reason for r in records] == ["retry", "retry", "retry"]
    assert records[2].decision.wait_ms >= 1_000
    assert breaker.boundary.retry is not None
    assert replay(records, breaker.boundary.retry) == [r.decision for r in records]


def test_sheet_rows_carry_a_retry_table() -> None:
    """A sheet row's nested retry table is validated with the row, errors named by field."""
    row = Boundary.from_row(
        "search", "read", {"timeout": 2, "retry": {"max_attempts": 2}, "max_retry_after_ms": 0}
    )
    assert row.retry == RetryPolicy(max_attempts=2)
    assert row.idempotent
    with pytest.raises(PolicyError) as err:
        Boundary.from_row("search", "read", {"timeout": 2, "retry": {"jitter": "none"}})
    assert err.value.field == "search.read.retry.jitter"


# ---------------------------------------------------------------------------
# Server hints, read by the classifier from real responses


def _verdict_of(service: ToolService, fault: Fault) -> Any:
    from toolbreaker.runtime._breaker._classify import classify_exception

    service.inject("GET /search", fault)
    with pytest.raises(Exception) as err:
        search(service)
    return classify_exception(err.value, now=1_700_000_000.0)


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after-ms": "1500"}, 1_500),
        ({"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms"}, 360_000),
        ({"x-ratelimit-reset-tokens": "1.5s"}, 1_500),
        ({"RateLimit-Reset": "7"}, 7_000),
        ({"RateLimit-Reset": "1700000030"}, 30_000),
    ],
)
def test_rate_limit_headers_become_the_wait(
    service: ToolService, headers: dict[str, str], wait: int
) -> None:
    """retry-after-ms, OpenAI's x-ratelimit-reset-* durations and RateLimit-Reset (delay
    seconds, or an epoch time) on a real 429 become the verdict's retry_after_ms."""
    verdict = _verdict_of(service, Fault(status=429, headers=headers))
    assert verdict.retry_after_ms == wait


def test_a_google_retry_delay_in_the_body_becomes_the_wait(service: ToolService) -> None:
    """Google's RetryInfo retryDelay ("30s") in a JSON error body is a hint too."""
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "message": "Quota exceeded for metric: requests per minute",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}],
        }
    }
    verdict = _verdict_of(service, Fault(status=429, body=body))
    assert verdict.retry_after_ms == 30_000
    assert verdict.detail == "http-429"


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "x"}},
        {"error": {"status": "RESOURCE_EXHAUSTED", "message": "Daily quota exceeded"}},
    ],
)
def test_a_spent_quota_is_not_transient(service: ToolService, body: dict[str, Any]) -> None:
    """A 429 that means the quota is spent is quota-exhausted: never retried, and the model
    reads that the tool is unavailable for this run."""
    assert _verdict_of(service, Fault(status=429, body=body)).detail == "quota-exhausted"
    service.inject("GET /search", Fault(status=429, body=body))
    breaker = make(FakeClock())
    result = breaker.guard(lambda q: search(service, q), tool="search")("cable")
    assert result["reason"] == "quota-exhausted"
    assert result["retryable"] is False
    assert breaker.stats.retries == {"quota-exhausted": 1}


def test_classify_status_reads_a_body_too() -> None:
    """A result carrying a status is classified with its body as well."""
    from toolbreaker.runtime._breaker._classify import classify_status

    quota = classify_status(429, {}, body='{"error": {"code": "insufficient_quota"}}')
    assert quota.detail == "quota-exhausted"
    delay = classify_status(503, {}, body={"error": {"details": [{"retryDelay": "2s"}]}})
    assert delay.retry_after_ms == 2_000
    assert classify_status(429, {}, body="not json").detail == "http-429"


def test_durations_parse_like_openai_and_google_write_them() -> None:
    """1s, 6m0s, 20ms, 1h2m3.5s; garbage is None."""
    from toolbreaker.runtime._breaker._classify import parse_duration

    assert [parse_duration(x) for x in ("1s", "6m0s", "20ms", "1h2m3.5s", "0.5s")] == [
        1_000,
        360_000,
        20,
        3_723_500,
        500,
    ]
    assert [parse_duration(x) for x in ("", "abc", "m", None, "5")] == [None] * 5


# ---------------------------------------------------------------------------
# The model as a retry layer under a run guard


def _guarded_search(service: ToolService, *, required: bool = False, budget: int = 1) -> Any:
    from toolbreaker import GuardedTool, RunGuard

    breaker = make(FakeClock(), max_attempts=1, budget=budget)
    guard = RunGuard("task-retry")
    guard.add_tool(
        GuardedTool(
            "search",
            lambda q: search(service, q),
            risk="read",
            breaker=breaker,
            required=required,
        )
    )
    return guard, breaker


def test_a_run_guard_counts_the_models_re_calls_against_the_budget(
    service: ToolService,
) -> None:
    """The model re-issuing the same failed action spends the dependency's retry budget;
    once it is spent the model reads that the tool is unavailable for this run, and the
    call never reaches the service."""
    service.outage("GET /search", status=503)
    guard, breaker = _guarded_search(service)
    assert guard.call("search", {"q": "cable"})["retryable"] is True
    second = guard.call("search", {"q": "cable"})
    assert second["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    third = guard.call("search", {"q": "cable"})
    assert third["tool_unavailable"] is True
    assert third["reason"] == "retry-budget"
    assert service.hits["GET /search"] == 2
    assert breaker.stats.retries == {"model-retry": 1, "model-retry-refused": 1}


def test_a_different_action_is_not_a_retry(service: ToolService) -> None:
    """Another query is a new action, not a retry: it spends nothing."""
    service.outage("GET /search", status=503)
    guard, breaker = _guarded_search(service, budget=0)
    guard.call("search", {"q": "a"})
    guard.call("search", {"q": "b"})
    assert service.hits["GET /search"] == 2
    assert "model-retry-refused" not in breaker.stats.retries


def test_a_required_tool_whose_budget_is_spent_stops_the_run(service: ToolService) -> None:
    """A required dependency that is unavailable for the run stops the run."""
    service.outage("GET /search", status=503)
    guard, _ = _guarded_search(service, required=True, budget=0)
    first = guard.call("search", {"q": "cable"})
    assert first["reason"] == "retry-budget"
    assert first["run_stopped"] is True
    assert guard.stopped is not None


# ---------------------------------------------------------------------------
# Nested retry layers, found at setup


def test_a_retrying_http_client_inside_a_tool_is_reported_with_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An httpx client whose transport retries, reached through the tool's closure, is
    reported when the breaker that guards the tool retries too."""
    import httpx

    from toolbreaker.runtime._breaker._layers import nested_retries

    client = httpx.Client(transport=httpx.HTTPTransport(retries=2))
    try:

        def fetch(q: str) -> Any:
            return client.get(f"http://127.0.0.1:9/search?q={q}")

        found = nested_retries(fetch)
        assert [(x.layer, x.retries, x.where) for x in found] == [
            ("httpx.Client", 2, "closure 'client'")
        ]
        assert "retries=0" in found[0].fix
        with caplog.at_level("WARNING", logger="toolbreaker"):
            make(FakeClock()).guard(fetch)
        assert "httpx.Client" in caplog.text
        assert "HTTPTransport(retries=0)" in caplog.text
    finally:
        client.close()


def test_an_sdk_client_with_max_retries_is_reported() -> None:
    """An OpenAI client keeps its default max_retries=2 unless told otherwise."""
    openai = pytest.importorskip("openai")
    from toolbreaker.runtime._breaker._layers import nested_retries

    retrying = openai.OpenAI(api_key="sk-test")
    quiet = openai.OpenAI(api_key="sk-test", max_retries=0)

    class Tool:
        def __init__(self, client: Any) -> None:
            self.client = client

        def run(self, q: str) -> Any:
            return self.client.models.list()

    assert [x.layer for x in nested_retries(Tool(retrying).run)] == ["openai.OpenAI"]
    assert nested_retries(Tool(quiet).run) == []
    assert nested_retries(search) == []


def test_a_trace_recorder_writes_the_retry_trace_beside_the_breaker_trace(
    service: ToolService,
) -> None:
    """TraceRecorder(retries=...) keeps retry records (seeds included) in their own JSON
    Lines, which replay exactly; the breaker trace stays in its own format."""
    import io

    from toolbreaker import TraceRecorder
    from toolbreaker.core._breaker.trace import parse_lines

    service.inject("GET /search", Fault(status=503), Fault(status=503))
    trace, retries = io.StringIO(), io.StringIO()
    breaker = make(FakeClock())
    with TraceRecorder(trace, retries=retries) as recorder:
        recorder.attach(breaker)
        breaker.call(search, service)
    records = [RetryRecord.from_dict(json.loads(x)) for x in retries.getvalue().splitlines()]
    assert [r.decision.reason for r in records] == ["retry", "retry"]
    assert len({r.seed for r in records}) == 1
    assert breaker.boundary.retry is not None
    assert replay(records, breaker.boundary.retry) == [r.decision for r in records]
    assert len(list(parse_lines(trace.getvalue().splitlines()))) == 6


def test_a_boundary_sheet_row_configures_retries() -> None:
    """[dep.op.retry] in a sheet reaches the breaker the registry builds for that row."""
    from toolbreaker import Registry

    sheet = {
        "search": {
            "read": {
                "timeout_ms": 2000,
                "max_retry_after_ms": 30_000,
                "retry": {"max_attempts": 4, "jitter": "decorrelated", "budget": 5},
            }
        }
    }
    breaker = Registry.from_dict(sheet).get("search", "read")
    assert breaker.boundary.retry == RetryPolicy(max_attempts=4, jitter="decorrelated", budget=5)
    assert breaker.boundary.max_retry_after_ms == 30_000
    assert breaker.retry_budget is not None
    assert breaker.retry_budget.retries == 5
    with pytest.raises(PolicyError) as err:
        Registry.from_dict({"search": {"read": {"timeout_ms": 2000, "retry": {"max_attempts": 0}}}})
    assert err.value.field == "search.read.retry.max_attempts"
