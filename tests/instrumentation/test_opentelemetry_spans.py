"""Tool-call spans by the OpenTelemetry GenAI conventions, against the real SDK.

Each test reads what the SDK's in-memory exporter received: the span a breaker's or a run
guard's step makes, its attributes, status and events.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toolbreaker import Breaker, Budget, GuardedTool, Policy, Registry, RunGuard, scope

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from toolbreaker.instrumentation.opentelemetry import REJECTED, instrument
from toolbreaker.runtime._run._siblings import CancelledByPolicy


class Unavailable(Exception):
    status_code = 503


class Traced:
    """A tracer provider whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def tools(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith("execute_tool ")]


@pytest.fixture
def traced() -> Iterator[Traced]:
    tracing = Traced()
    yield tracing
    tracing.provider.shutdown()


def breaker(threshold: int = 1) -> Breaker:
    return Breaker(
        "search",
        operation="read",
        policy=Policy(failure_threshold=threshold),
        timeout=1.0,
        enforce="cooperative",
    )


def test_a_breaker_step_is_an_execute_tool_span(traced):
    """begin(call_id=...) and a success: one INTERNAL span named for the tool, with the
    GenAI attributes, the breaker's own beside them, and no error."""
    search = breaker()
    undo = instrument(search, tracer_provider=traced.provider)
    step = search.begin("search_catalog", {"q": "cable"}, call_id="call-7")
    assert step.succeeded({"items": 3}) == {"items": 3}
    undo()

    (span,) = traced.spans()
    assert span.name == "execute_tool search_catalog"
    assert span.kind is SpanKind.INTERNAL
    assert span.status.status_code is StatusCode.UNSET
    attributes = dict(span.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search_catalog",
        "gen_ai.tool.call.id": "call-7",
        "toolbreaker.dependency": "search",
        "toolbreaker.operation": "read",
        "toolbreaker.policy_version": search.policy.version,
        "toolbreaker.breaker.state": "closed",
        "toolbreaker.reason": attributes["toolbreaker.reason"],
        "toolbreaker.outcome": "success",
    }
    assert "error.type" not in attributes


def test_a_remote_failure_and_a_local_rejection_have_different_error_types(traced):
    """The failure the tool raised is named by its exception type; the next call, which
    the now open breaker rejects without running the tool, by toolbreaker.rejected and
    its reason. The opening transition is an event on the failing call's own span."""
    search = breaker(threshold=1)
    undo = instrument(search, tracer_provider=traced.provider)
    step = search.begin("search_catalog", call_id="call-1")
    answer = step.failed(Unavailable("503"))
    assert answer["tool_unavailable"] is True  # this failure opened it
    rejected = search.begin("search_catalog", call_id="call-2")
    assert rejected.answer is not None
    undo()

    failed, refused = traced.spans()
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == f"{__name__}.Unavailable"
    assert failed.attributes["toolbreaker.outcome"] == "failure"
    assert failed.attributes["toolbreaker.breaker.state"] == "open"
    assert failed.attributes["toolbreaker.reason"] == "qualifying-failure"
    opened = [e for e in failed.events if e.name == "toolbreaker.transition"]
    assert [e.attributes["toolbreaker.to"] for e in opened][-1] == "open"

    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes["error.type"] == REJECTED == "toolbreaker.rejected"
    assert refused.attributes["toolbreaker.outcome"] == "rejected"
    assert refused.attributes["toolbreaker.reason"] == rejected.reason
    assert refused.attributes["toolbreaker.breaker.state"] == "open"
    assert refused.attributes["gen_ai.tool.call.id"] == "call-2"


def test_a_cancelled_call_ends_its_span_with_the_cancellation(traced):
    """A cancellation settles the step and is raised again; the span ends, named by it."""
    search = breaker()
    undo = instrument(search, tracer_provider=traced.provider)
    step = search.begin("search_catalog")
    with pytest.raises(KeyboardInterrupt):
        step.failed(KeyboardInterrupt())
    undo()
    (span,) = traced.spans()
    assert span.attributes["error.type"] == "KeyboardInterrupt"
    assert span.attributes["toolbreaker.outcome"] == "cancelled"


def test_a_run_guard_call_is_one_span_through_an_instrumented_breaker_too(traced):
    """instrument(registry, guard): a guard's call through a registry breaker is one span,
    not two; a call the run's budget refuses is a local rejection named by its condition;
    the spans made inside the tool while the guard runs it are the tool span's children."""
    registry = Registry(Policy(), default_timeout=1.0, default_enforce="cooperative")
    tracer = traced.provider.get_tracer("tool")

    def lookup(order: str) -> dict[str, str]:
        with tracer.start_as_current_span("GET /orders"):
            return {"order": order, "status": "shipped"}

    guard = RunGuard("task-1", budget=Budget(max_tool_calls=1))
    guard.add_tool(GuardedTool("lookup", lookup, breaker=registry.get("orders")))
    undo = instrument(registry, guard, tracer_provider=traced.provider)
    assert guard.call("lookup", {"order": "A-1"}) == {"order": "A-1", "status": "shipped"}
    refused = guard.call("lookup", {"order": "A-2"})
    undo()

    http, ran, stopped = traced.spans()
    assert ran.name == "execute_tool lookup"
    assert http.name == "GET /orders"
    assert http.parent is not None
    assert http.parent.span_id == ran.context.span_id
    assert ran.attributes["toolbreaker.outcome"] == "success"
    assert ran.attributes["toolbreaker.dependency"] == "orders"
    assert stopped.attributes["error.type"] == REJECTED
    assert stopped.attributes["toolbreaker.reason"] == guard.stopped.condition
    assert refused["ok"] is False


def test_a_tool_without_a_breaker_is_traced_through_its_run_guard(traced):
    """A guard's tool with no breaker still makes its span (no breaker attributes)."""
    guard = RunGuard("task-2")
    guard.add_tool(GuardedTool("echo", lambda text: text))
    undo = instrument(guard, tracer_provider=traced.provider)
    step = guard.begin("echo", {"text": "hi"}, call_id="c-1")
    assert step.succeeded("hi") == "hi"
    undo()
    (span,) = traced.spans()
    assert span.attributes["gen_ai.tool.call.id"] == "c-1"
    assert span.attributes["toolbreaker.outcome"] == "success"
    assert "toolbreaker.dependency" not in span.attributes


def test_a_write_answered_from_the_journal_is_not_an_error(traced):
    """A confirmed write called again is answered from the journal: the answer stands for
    the result, so the span is no error (outcome answered, reason journal)."""

    def ticket(title: str, idempotency_key: str = "") -> dict[str, str]:
        return {"id": "T-1"}

    guard = RunGuard("task-3")
    guard.add_tool(GuardedTool("ticket", ticket, risk="reversible_write"))
    undo = instrument(guard, tracer_provider=traced.provider)
    guard.call("ticket", {"title": "broken"})
    guard.call("ticket", {"title": "broken"})
    undo()
    first, again = traced.spans()
    assert first.attributes["toolbreaker.outcome"] == "success"
    assert again.status.status_code is StatusCode.UNSET
    assert again.attributes["toolbreaker.outcome"] == "answered"
    assert again.attributes["toolbreaker.reason"] == "journal"
    assert "error.type" not in again.attributes


def test_an_observer_that_raises_never_changes_the_call():
    """A step observer that raises is counted and logged; the call goes on as it would."""

    def broken(start):
        raise RuntimeError("exporter down")

    search = breaker()
    search.add_step_observer(broken)
    step = search.begin("search_catalog")
    assert step.succeeded("ok") == "ok"
    assert search.stats.listener_errors == 1


def test_undo_stops_the_spans_and_spans_false_makes_none(traced):
    """After undo() no span is made; instrument(spans=False) keeps only events and counts."""
    search = breaker()
    instrument(search, tracer_provider=traced.provider)()
    search.begin("search_catalog").succeeded("ok")
    undo = instrument(search, tracer_provider=traced.provider, spans=False)
    search.begin("search_catalog").succeeded("ok")
    undo()
    assert traced.spans() == []


@pytest.mark.anyio
async def test_async_steps_make_the_same_spans(traced):
    """abegin/afailed: the same span as the sync twins."""
    search = breaker(threshold=1)
    undo = instrument(search, tracer_provider=traced.provider)
    step = await search.abegin("search_catalog", call_id="a-1")
    await step.afailed(TimeoutError())
    rejected = await search.abegin("search_catalog", call_id="a-2")
    undo()
    failed, refused = traced.spans()
    assert failed.attributes["error.type"] == "TimeoutError"
    assert refused.attributes["error.type"] == REJECTED
    assert refused.attributes["toolbreaker.reason"] == rejected.reason


def test_a_tenant_call_through_a_scoped_row_reads_its_tenants_breaker(traced):
    """A run guard's tool on a tenant-scoped row: the span names the row and reads the
    state the tenant's own breaker was left in (its transitions are the call's)."""
    registry = Registry.from_dict(
        {
            "defaults": {"timeout_ms": 1000, "enforce": "cooperative", "failure_threshold": 1},
            "orders": {"read": {"scope": "tenant"}},
        }
    )

    def lookup(order: str) -> dict[str, str]:
        raise Unavailable(order)

    guard = RunGuard("task-4")
    guard.add_tool(GuardedTool("lookup", lookup, breaker=registry.get("orders", "read")))
    undo = instrument(registry, tracer_provider=traced.provider)
    with scope(tenant="acme"):
        guard.call("lookup", {"order": "A-1"})
    undo()
    (span,) = traced.spans()
    assert span.attributes["toolbreaker.dependency"] == "orders"
    assert span.attributes["toolbreaker.breaker.state"] == "open"
    assert span.attributes["error.type"] == f"{__name__}.Unavailable"


def test_a_result_counted_as_a_failure_and_an_unproven_write_are_errors(traced):
    """The tool returned, but its breaker's result_is_failure counts the result as a
    failure (tool_error), or a write's result does not prove it happened (its outcome is
    unknown: toolbreaker.unverified)."""
    search = Breaker(
        "search",
        timeout=1.0,
        enforce="cooperative",
        result_is_failure=lambda result: "error" in result,
    )

    def ticket(title: str, idempotency_key: str = "") -> dict[str, str]:
        return {"status": "maybe"}

    guard = RunGuard("task-5")
    guard.add_tool(
        GuardedTool("ticket", ticket, risk="reversible_write", verify=lambda r: "id" in r)
    )
    undo = instrument(search, guard, tracer_provider=traced.provider)
    search.begin("search_catalog").succeeded({"error": "quota"})
    guard.call("ticket", {"title": "broken"})
    undo()
    returned_error, unproven = traced.spans()
    assert returned_error.attributes["error.type"] == "tool_error"
    assert returned_error.attributes["toolbreaker.outcome"] == "failure"
    assert returned_error.status.status_code is StatusCode.ERROR
    assert unproven.attributes["error.type"] == "toolbreaker.unverified"
    assert unproven.attributes["toolbreaker.outcome"] == "unknown"


def test_a_call_its_turn_cancels_by_policy_is_a_cancelled_span(traced):
    """A model turn's sibling needs a required dependency that opened before it started:
    the guard cancels it by policy, and its span says so (toolbreaker.cancelled)."""
    inventory = breaker(threshold=1)
    guard = RunGuard("task-6")
    guard.add_tool(GuardedTool("stock", lambda sku: None, breaker=inventory, required=True))
    guard.add_tool(GuardedTool("price", lambda sku: None, breaker=inventory))
    undo = instrument(guard, tracer_provider=traced.provider)
    guard.mark_turn(1)
    steps = {name: guard.begin(name, {"sku": "A-1"}) for name in ("stock", "price")}

    def down() -> None:
        raise Unavailable("503")

    with pytest.raises(Unavailable) as failed:
        guard.run_step(steps["stock"], down)
    steps["stock"].failed(failed.value)
    price = guard.run_step(steps["price"], lambda: {"price": 3})
    undo()

    assert isinstance(price, CancelledByPolicy)
    spans = {s.name: s for s in traced.spans()}
    assert spans["execute_tool stock"].attributes["error.type"] == f"{__name__}.Unavailable"
    cancelled = spans["execute_tool price"]
    assert cancelled.attributes["error.type"] == "toolbreaker.cancelled"
    assert cancelled.attributes["toolbreaker.outcome"] == "cancelled"


def test_a_tool_type_nobody_knows_is_refused_where_the_call_begins(traced):
    """begin(tool_type=...) takes the GenAI conventions' values only: a misspelt one is a
    PolicyError naming ``tool_type`` (from a breaker and a run guard alike), never a span
    that quietly carries it; a known one and the description reach the span."""
    from toolbreaker.errors import PolicyError
    from toolbreaker.runtime._step import TOOL_TYPES

    assert TOOL_TYPES == ("function", "extension", "datastore")
    search = breaker()
    guard = RunGuard("t")
    guard.add_tool(GuardedTool(name="lookup", fn=lambda: {"ok": True}, breaker=search))
    for begin in (search.begin, guard.begin):
        with pytest.raises(PolicyError, match="tool_type") as refused:
            begin("lookup", {}, tool_type="functions")
        assert refused.value.field == "tool_type"
    undo = instrument(search, tracer_provider=traced.provider)
    step = search.begin("lookup", {}, tool_type="datastore", description="Find orders.")
    step.succeeded({"ok": True})
    undo()
    (span,) = traced.tools()
    assert span.attributes["gen_ai.tool.type"] == "datastore"
    assert span.attributes["gen_ai.tool.description"] == "Find orders."
