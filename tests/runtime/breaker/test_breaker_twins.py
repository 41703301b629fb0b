"""The breaker's sync and async twins decide alike: the same calls, the same answers.

``call``/``acall``, ``begin``/``abegin``, ``admit``/``aadmit`` and a guarded sync tool
against a guarded coroutine are twins: each pair shares every decision (the fast paths'
tests, admission, the outcome, the retry plan, the model's retry ledger) and differs only
in how it waits. Random runs drive both twins of one path on two breakers with the same
row and clock, and require the same answer at every step, the same counters and, when
something listens (no fast path then), the same records.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from toolbreaker import Breaker, Policy, RetryPolicy, Verdict, classify_exception
from toolbreaker.errors import CircuitOpen
from toolbreaker.runtime._breaker._admission import UNSET
from toolbreaker.runtime._breaker._steps import _binder, _ToolCall
from toolbreaker.runtime._flow import adrive, drive
from toolbreaker.testing import FakeClock, capture_transitions


class Unavailable(Exception):
    """A dependency's 503: transient, qualifying."""

    status_code = 503


class NotFound(Exception):
    """A dependency's 404: the caller's mistake, not the dependency's health."""

    status_code = 404


OUTCOMES = ["ok", "ok", "unavailable", "unavailable", "not-found"]
steps = st.lists(
    st.tuples(st.sampled_from([*OUTCOMES, "wait"]), st.integers(0, 1_500), st.integers(0, 2)),
    max_size=30,
)


def breaker(clock: FakeClock, *, retries: bool, enforce: str) -> Breaker:
    return Breaker(
        "search",
        clock=clock,
        policy=Policy(failure_threshold=2, cooldown_ms=1_000, success_threshold=1),
        timeout=5.0,
        enforce=enforce,  # type: ignore[arg-type]
        retry=RetryPolicy(max_attempts=2, base_ms=10, budget=2) if retries else None,
        retry_seed=7,
        sleep=(lambda seconds: clock.advance(seconds=seconds)) if retries else None,
    )


def outcome(kind: str) -> Any:
    if kind == "unavailable":
        raise Unavailable("503")
    if kind == "not-found":
        raise NotFound("404")
    return {"ok": True}


def answer(value: Any) -> Any:
    """What the caller got, without object identities."""
    if isinstance(value, CircuitOpen):
        return ("open", value.reason, value.retry_after_ms, value.result)
    if isinstance(value, BaseException):
        return ("raised", type(value).__name__)
    return value


def run_sync(b: Breaker, clock: FakeClock, path: str, plan: list[tuple[str, int, int]]) -> list:
    def lookup(kind: str) -> Any:
        return outcome(kind)

    seen: list[Any] = []
    tool = b.guard(lookup)
    for kind, gap, arg in plan:
        clock.advance(gap)
        if kind == "wait":
            continue
        args = {"q": kind, "n": arg}
        if path == "call":
            try:
                seen.append(b.call(outcome, kind))
            except Exception as exc:  # noqa: BLE001 - the answer is what is compared
                seen.append(answer(exc))
        elif path == "begin":
            step = b.begin("search", args)
            if step.answer is not None:
                seen.append(step.answer)
                continue
            try:
                result = outcome(kind)
            except Exception as exc:  # noqa: BLE001 - settled as a failure
                seen.append(step.failed(exc))
            else:
                seen.append(step.succeeded(result))
        elif path == "admit":
            permit = b.admit(retry=arg == 0)
            if not permit.admitted:
                seen.append(("rejected", permit.reason, permit.retry_after_ms, permit.result))
                continue
            try:
                outcome(kind)
            except Exception as exc:  # noqa: BLE001 - recorded as the outcome
                seen.append(answer(permit.record(exc)))
            else:
                seen.append(answer(permit.record("success")))
        else:
            seen.append(tool(kind))
    return seen


async def run_async(
    b: Breaker, clock: FakeClock, path: str, plan: list[tuple[str, int, int]]
) -> list:
    async def lookup(kind: str) -> Any:
        return outcome(kind)

    seen: list[Any] = []
    tool = b.guard(lookup)
    for kind, gap, arg in plan:
        clock.advance(gap)
        if kind == "wait":
            continue
        args = {"q": kind, "n": arg}
        if path == "call":
            try:
                seen.append(await b.acall(lookup, kind))
            except Exception as exc:  # noqa: BLE001 - the answer is what is compared
                seen.append(answer(exc))
        elif path == "begin":
            step = await b.abegin("search", args)
            if step.answer is not None:
                seen.append(step.answer)
                continue
            try:
                result = outcome(kind)
            except Exception as exc:  # noqa: BLE001 - settled as a failure
                seen.append(await step.afailed(exc))
            else:
                seen.append(await step.asucceeded(result))
        elif path == "admit":
            permit = await b.aadmit(retry=arg == 0)
            if not permit.admitted:
                seen.append(("rejected", permit.reason, permit.retry_after_ms, permit.result))
                continue
            try:
                outcome(kind)
            except Exception as exc:  # noqa: BLE001 - recorded as the outcome
                seen.append(answer(await permit.arecord(exc)))
            else:
                seen.append(answer(await permit.arecord("success")))
        else:
            seen.append(await tool(kind))
    return seen


def plain(records: list) -> list[dict[str, Any]]:
    """Records without the call ids, which name the process and the breaker's counter."""
    out = []
    for record in records:
        data = record.to_dict()
        data.pop("call", None)
        data.get("event", {}).pop("call", None)
        out.append(data)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps,
    path=st.sampled_from(["call", "begin", "admit", "guard"]),
    retries=st.booleans(),
    listening=st.booleans(),
    enforce=st.sampled_from(["cooperative", "thread"]),
)
def test_the_sync_and_the_async_breaker_decide_alike(plan, path, retries, listening, enforce):
    """Every answer, every counter and every record of a sync path and its async twin."""
    results = []
    for twin in ("sync", "async"):
        clock = FakeClock()
        b = breaker(clock, retries=retries, enforce=enforce)
        listen = capture_transitions(b) if listening else contextlib.nullcontext([])
        with listen as records:
            if twin == "sync":
                seen = run_sync(b, clock, path, plan)
            else:
                seen = asyncio.run(run_async(b, clock, path, plan))
        results.append((seen, b.stats.to_dict(), plain(records), clock()))
        b.close()
    assert results[1] == results[0]


def own_timeout_classifier(exc: BaseException) -> Verdict:
    """A classifier that judges a tool's own TimeoutError otherwise than a timeout."""
    if isinstance(exc, TimeoutError):
        return Verdict("ignored", "own-timeout")
    return classify_exception(exc)


@pytest.mark.parametrize("enforce", ["cooperative", "thread"])
@pytest.mark.parametrize("listening", [False, True])
@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_tools_own_timeout_is_the_classifiers_on_every_path(enforce, listening, twin):
    """A ``TimeoutError`` the tool raises itself is judged by the classifier on every path
    (sync and async, inline and in a worker, the quiet fast path and the general one):
    only the breaker's own deadline is a ``timeout`` whatever the classifier says."""

    def tool() -> None:
        raise TimeoutError("the tool's own")

    async def atool() -> None:
        raise TimeoutError("the tool's own")

    def attempt() -> None:
        if twin == "sync":
            b.call(tool)
        else:
            asyncio.run(b.acall(atool))

    b = Breaker("search", timeout=5.0, enforce=enforce, classifier=own_timeout_classifier)
    listen = capture_transitions(b) if listening else contextlib.nullcontext([])
    with listen:
        for _ in range(3):  # the first through the core, the next ones quiet when they may
            with pytest.raises(TimeoutError, match="the tool's own"):
                attempt()
    b.close()
    assert b.stats.failures == {"own-timeout": 3}


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_the_deadline_is_a_timeout_whatever_the_classifier_says(twin):
    """The breaker's own deadline passing is recorded as ``timeout``, sync and async."""
    release = threading.Event()

    def slow() -> None:
        release.wait(10)

    async def aslow() -> None:
        await asyncio.sleep(10)

    def attempt() -> None:
        if twin == "sync":
            b.call(slow)
        else:
            asyncio.run(b.acall(aslow))

    b = Breaker("search", timeout=0.05, enforce="thread", classifier=own_timeout_classifier)
    try:
        with pytest.raises(TimeoutError):
            attempt()
    finally:
        release.set()
        b.close()
    assert b.stats.failures == {"timeout": 1}


def run_guarded(b: Breaker, clock: FakeClock, plan: list[tuple[str, int, int]], direct: bool):
    """A guarded tool through its direct path, or the same calls through its general flow."""

    def lookup(kind: str) -> Any:
        return outcome(kind)

    tool = b.guard(lookup)
    # What the wrapper drives when the row keeps a ledger or a chain: its general flow.
    flow = _ToolCall(lookup, "lookup", _binder(lookup), UNSET)
    seen: list[Any] = []
    for kind, gap, _ in plan:
        clock.advance(gap)
        if kind == "wait":
            continue
        if direct:
            seen.append(tool(kind))
        else:
            seen.append(drive(b._steps._tool_calling(flow, (kind,), {})))
    return seen


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps, listening=st.booleans(), enforce=st.sampled_from(["cooperative", "thread"]))
def test_a_guarded_tools_direct_path_is_its_general_flow(plan, listening, enforce):
    """A guarded tool of a row with no retry ledger and no degradation chain skips its
    general flow (and answers an open breaker without raising): every answer, counter and
    record is the flow's."""
    results = []
    for direct in (True, False):
        clock = FakeClock()
        b = breaker(clock, retries=False, enforce=enforce)
        listen = capture_transitions(b) if listening else contextlib.nullcontext([])
        with listen as records:
            seen = run_guarded(b, clock, plan, direct)
        results.append((seen, b.stats.to_dict(), plain(records), clock()))
        b.close()
    assert results[1] == results[0]


def run_called(
    b: Breaker, clock: FakeClock, plan: list[tuple[str, int, int]], direct: bool, twin: str
) -> list[Any]:
    """Calls through ``call``/``acall`` (their quiet fast path when quiet, their open hot
    path while cooling down), or one attempt each through admission in the store (the
    runner's general path, with a listener attached: no fast path of any kind)."""

    async def acalled(kind: str) -> Any:
        if direct:
            return await b.acall(aoutcome, kind)
        return await b._runner.acall_once(aoutcome, (kind,), {}, UNSET)

    async def go() -> list[Any]:
        seen: list[Any] = []
        for kind, gap, _ in plan:
            clock.advance(gap)
            if kind == "wait":
                continue
            try:
                if twin == "async":
                    seen.append(await acalled(kind))
                elif direct:
                    seen.append(b.call(outcome, kind))
                else:
                    seen.append(b._runner.call_once(outcome, (kind,), {}, UNSET))
            except Exception as exc:  # noqa: BLE001 - the answer is what is compared
                seen.append(answer(exc))
        return seen

    with contextlib.nullcontext([]) if direct else capture_transitions(b):
        return asyncio.run(go())


async def aoutcome(kind: str) -> Any:
    return outcome(kind)


OPEN_TWICE = [("unavailable", 0, 0), ("unavailable", 1, 0), ("ok", 10, 0), ("ok", 10, 0)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps,
    enforce=st.sampled_from(["cooperative", "thread"]),
    twin=st.sampled_from(["sync", "async"]),
)
# Opened, then rejected twice while cooling down: the second from the kept idle window.
@example(plan=OPEN_TWICE, enforce="cooperative", twin="sync")
@example(plan=OPEN_TWICE, enforce="thread", twin="async")
def test_the_quiet_fast_path_is_the_general_path(plan, enforce, twin):
    """``call``/``acall`` skip admission while the state is quiet (no permit, no store
    round trip) and answer an open breaker from the idle window: every answer, counter
    and the state it leaves are those of the same calls admitted and settled through the
    store, where no fast path answers."""
    results = []
    for direct in (True, False):
        clock = FakeClock()
        b = breaker(clock, retries=False, enforce=enforce)
        seen = run_called(b, clock, plan, direct, twin)
        state = b.state
        stats = b.stats.to_dict()
        # Time in a phase is counted from the first record the breaker sees; with a
        # listener every request is one, so the general path starts that clock earlier.
        del stats["time_in_state_ms"]
        results.append((seen, stats, state.phase, state.generation, clock()))
        b.close()
    assert results[1] == results[0]


def run_entered(
    b: Breaker, clock: FakeClock, plan: list[tuple[str, int, int]], direct: bool, twin: str
) -> list[Any]:
    """Two-step calls admitted by the runner's ``enter``/``aenter`` (their inline copy of
    the flow's first line when the row has no bulkhead), or by driving its one flow,
    ``entering``; each settled with its outcome, some past their deadline."""
    runner = b._runner

    async def admitted(now: int, deadline: int | None) -> Any:
        if twin == "sync":
            return runner.enter(now, deadline) if direct else drive(runner.entering(now, deadline))
        if direct:
            return await runner.aenter(now, deadline)
        return await adrive(runner.entering(now, deadline))

    async def go() -> list[Any]:
        seen: list[Any] = []
        for kind, gap, arg in plan:
            clock.advance(gap)
            if kind == "wait":
                continue
            permit = await admitted(clock(), runner.default_deadline)
            if not permit.admitted:
                seen.append(("rejected", permit.reason, permit.retry_after_ms, permit.result))
                continue
            clock.advance(arg * 3_000)  # the call takes time: 6 s is past the row's deadline
            try:
                outcome(kind)
            except Exception as exc:  # noqa: BLE001 - recorded as the outcome
                seen.append(answer(permit.record(exc)))
            else:
                seen.append(answer(permit.record("success")))
        return seen

    return asyncio.run(go())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps, twin=st.sampled_from(["sync", "async"]), listening=st.booleans())
@example(plan=OPEN_TWICE, twin="sync", listening=False)
def test_enter_without_a_bulkhead_is_its_flow(plan, twin, listening):
    """``enter``/``aenter`` of a row without a bulkhead answer inline (from the view, else
    by a round trip) instead of driving ``entering``: every answer, counter and record is
    the flow's."""
    results = []
    for direct in (True, False):
        clock = FakeClock()
        b = breaker(clock, retries=False, enforce="cooperative")
        listen = capture_transitions(b) if listening else contextlib.nullcontext([])
        with listen as records:
            seen = run_entered(b, clock, plan, direct, twin)
        results.append((seen, b.stats.to_dict(), plain(records), clock()))
        b.close()
    assert results[1] == results[0]
