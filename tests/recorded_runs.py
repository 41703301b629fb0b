"""Generated recorded runs, and a live RunGuard that runs one with real tool functions.

A recorded run (the ``toolbreaker check-run`` format) has reads after a refused write,
unknown writes, costs on refused steps, reworded repeats, alternations, deadlines,
failures of named error classes, results that report a failure, and model steps with
their usage. :func:`live` runs it through a live :class:`RunGuard` whose tools behave as
each step recorded: return its result, time out, refuse the connection, fail with an
HTTP status, a reset connection, a pydantic validation error, answer with an error (as
an adapter settles one), fail their own argument check, spend its cost while they run
(sync or coroutine tools); its model steps report their usage as an adapter does.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
from hypothesis import strategies as st

from toolbreaker import Breaker, GuardedTool, Policy, RetryPolicy, RunGuard
from toolbreaker.core._run.budget import WRITES, Budget, ClassLimits, ModelPrice
from toolbreaker.errors import ToolReportedError
from toolbreaker.runtime._flow import drive
from toolbreaker.testing import FakeClock

TASK = "t-parity"

#: name -> (risk, business key, recovery)
TOOLS: dict[str, tuple[str, tuple[str, ...] | None, bool]] = {
    "search": ("read", None, False),
    "refine": ("read", None, False),
    "status": ("read", None, True),
    "send": ("reversible_write", ("to",), False),
    "refund": ("irreversible", ("order",), False),
}

# Reworded variants of one intention: case, spacing, a prose reason, a volatile field.
queries = st.sampled_from(["usb cable", "USB  cable", " usb cable", "hdmi"])
extras = st.fixed_dictionaries(
    {},
    optional={
        "reason": st.sampled_from(["the user asked", "again, politely"]),
        "requested_at": st.sampled_from(["10:00", "10:05"]),
    },
)
ARGS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "search": st.builds(lambda q, e: {"q": q, **e}, queries, extras),
    "refine": st.builds(lambda q, e: {"q": q, **e}, queries, extras),
    "status": st.fixed_dictionaries({"id": st.sampled_from([1, 2])}),
    "send": st.builds(
        lambda to, body, e: {"to": to, "body": body, **e},
        st.sampled_from(["c-1", "C-1 ", "c-2"]),
        st.sampled_from(["hi", "hello"]),
        extras,
    ),
    "refund": st.fixed_dictionaries(
        {"order": st.sampled_from(["A-1", "A-2"]), "amount": st.sampled_from([5, 7])}
    ),
}
read_results = st.sampled_from(
    [{"n": 1}, {"n": 2}, {"n": 1, "request_id": "r-7"}, {"items": ["cable"], "n": 3}]
)
write_results = st.builds(lambda n: {"id": f"m-{n}"}, st.integers(1, 3))
costs = st.sampled_from(["0", "0.01", "0.25"])

#: Error classes that agree with each (outcome, is a write): a read's failure is any
#: failure of the dependency; a write's failure certainly sent nothing, its unknown may
#: have been made, its ignored is the tool's own refusal.
ERRORS: dict[tuple[str, bool], list[str]] = {
    ("failure", False): [
        "timeout",
        "network:ECONNRESET",
        "http-503",
        "http-429",
        "network:ENOTFOUND",
    ],
    ("unknown", False): ["timeout", "http-500"],
    ("ignored", False): ["http-404", "validation", "unknown-exception:KeyError", "http-422"],
    ("failure", True): ["http-503", "http-429", "network:ENOTFOUND"],
    ("unknown", True): [
        "timeout",
        "network:ECONNRESET",
        "http-502",
        "unknown-exception:RuntimeError",
    ],
    ("ignored", True): ["http-404", "validation", "unknown-exception:ValueError", "http-409"],
}
result_errors = st.sampled_from(["exit-1", "exit-2", "http-404", "tool-error"])
MODELS = ("gpt-x", "small-y")


@st.composite
def model_step(draw: st.DrawFn, at: int) -> dict[str, Any]:
    step: dict[str, Any] = {"at": at, "cost": draw(costs)}
    if draw(st.booleans()):
        step["model"] = draw(st.sampled_from(MODELS))
        step["input_tokens"] = draw(st.sampled_from([0, 900, 40_000]))
        step["output_tokens"] = draw(st.sampled_from([0, 60, 3_000]))
    return step


@st.composite
def tool_step(draw: st.DrawFn, at: int) -> dict[str, Any]:
    tool = draw(st.sampled_from(sorted(TOOLS)))
    risk, business_key, recovery = TOOLS[tool]
    step: dict[str, Any] = {"at": at, "tool": tool, "args": draw(ARGS[tool])}
    if risk != "read":
        step["risk"] = risk
    if business_key is not None:
        step["business_key"] = list(business_key)
    if recovery:
        step["recovery"] = True
    outcome = draw(
        st.sampled_from(["success", "success", "success", "failure", "unknown", "ignored"])
    )
    if outcome != "success" or draw(st.booleans()):
        step["outcome"] = outcome
    if outcome != "success" and draw(st.booleans()):
        step["error"] = draw(st.sampled_from(ERRORS[outcome, risk in WRITES]))
    if outcome == "success" and draw(st.integers(0, 4)) == 0:
        step["result_error"] = draw(result_errors)
    if outcome == "success":
        if risk in WRITES:
            step["result"] = draw(write_results)  # a write's success carries its proof
        elif draw(st.booleans()):
            step["result"] = draw(read_results)
    if draw(st.booleans()):
        step["cost"] = draw(costs)
    return step


@st.composite
def recorded_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    at = draw(st.integers(0, 50))
    length = draw(st.integers(1, 24))
    while len(steps) < length:
        at += draw(st.sampled_from([0, 1, 40, 250]))
        kind = draw(st.integers(0, 9))
        if kind == 0:
            steps.append(draw(model_step(at)))
        elif kind == 1:
            # An alternation: two reads taking turns, each maybe reworded.
            q = draw(queries)
            for n in range(draw(st.integers(4, 8))):
                tool = ("search", "refine")[n % 2]
                step = {"at": at + n, "tool": tool, "args": {"q": q, **draw(extras)}}
                if draw(st.booleans()):
                    step["result"] = draw(read_results)
                steps.append(step)
            at += 8
        else:
            steps.append(draw(tool_step(at)))
    return steps


budgets = st.builds(
    Budget,
    max_tool_calls=st.integers(3, 14),
    max_repeats=st.integers(0, 3),
    max_cost=st.one_of(st.none(), st.sampled_from(["0.3", "1"])),
    deadline_ms=st.one_of(st.none(), st.integers(300, 3000)),
    max_uncertain_side_effects=st.integers(0, 2),
    loop_cycles=st.integers(2, 4),
    max_recovery_calls=st.integers(0, 2),
    prices=st.one_of(
        st.just({}),
        st.just({"gpt-x": ModelPrice("2", "8")}),  # small-y is then a model it does not price
    ),
    classes=st.fixed_dictionaries(
        {},
        optional={
            "reversible_write": st.builds(
                ClassLimits, max_calls=st.integers(1, 4), max_repeats=st.integers(0, 2)
            ),
            "read": st.builds(ClassLimits, max_cost=st.sampled_from([None, "0.2"])),
        },
    ),
)


# -- a run guard whose tools behave as the steps recorded --------------------------------


def live_tools(
    guard: RunGuard,
    script: dict[str, Any],
    *,
    coroutines: bool = False,
    breakers: Callable[[str], Breaker] | None = None,
) -> dict[str, Callable[..., Any]]:
    """Real tool functions (coroutine functions with ``coroutines``): each does what the
    step it is called for recorded; with ``breakers``, each goes through the breaker it
    makes for the tool's name."""

    def make(risk: str) -> Callable[..., Any]:
        def tool(**_kwargs: Any) -> Any:
            step = script["step"]
            if "cost" in step:
                guard.add_cost(step["cost"], risk=risk)  # a call spends while it runs
            outcome = step.get("outcome", "success")
            if "error" in step:
                raise live_error(step["error"])
            if outcome == "failure":
                raise ConnectionRefusedError(111, "connection refused")
            if outcome == "unknown":
                raise TimeoutError("the service did not answer in time")
            if outcome == "ignored":
                raise ValueError("the tool's own argument check refused it")
            if "result_error" in step and risk in WRITES:
                # A write that answered with an error made nothing: an adapter settles
                # such an answer as the tool's own refusal.
                raise ToolReportedError(f"the tool answered {step['result_error']}")
            return copy.deepcopy(step.get("result"))

        async def atool(**kwargs: Any) -> Any:
            await asyncio.sleep(0)  # a coroutine that yields to the loop, as real ones do
            return tool(**kwargs)

        return atool if coroutines else tool

    made = {}
    for name, (risk, business_key, recovery) in TOOLS.items():
        made[name] = make(risk)
        guard.add_tool(
            GuardedTool(
                name=name,
                fn=made[name],
                breaker=None if breakers is None else breakers(name),
                risk=risk,  # type: ignore[arg-type]
                business_key=business_key,
                verify=(lambda r: isinstance(r, Mapping) and "id" in r) if risk in WRITES else None,
                authorize=(lambda _request: True) if risk == "irreversible" else None,
                recovery=recovery,
            )
        )
    return made


class HTTPStatusError(Exception):
    """An HTTP client's error for a status (as httpx's and openai's carry it)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status


class NetworkError(Exception):
    """A network error with a Node-style code and no errno."""

    code = "ENOTFOUND"


def live_error(error: str) -> Exception:
    """A real exception of the kind a tool raises for ``error``."""
    if error == "timeout":
        return TimeoutError("the service did not answer in time")
    if error == "network:ECONNRESET":
        return ConnectionResetError("the connection was reset")
    if error == "network:ENOTFOUND":
        return NetworkError("getaddrinfo ENOTFOUND")
    if error.startswith("http-"):
        return HTTPStatusError(int(error[5:]))
    if error == "validation":
        try:
            pydantic.TypeAdapter(int).validate_python("not a number")
        except pydantic.ValidationError as exc:
            return exc
    name = error.removeprefix("unknown-exception:")
    return {"KeyError": KeyError, "RuntimeError": RuntimeError, "ValueError": ValueError}[name](
        "the tool raised"
    )


def live(
    records: list[dict[str, Any]],
    budget: Budget,
    *,
    settle: bool,
    coroutines: bool = False,
    breakers: bool = False,
    general: bool = False,
) -> dict[str, Any]:
    """Run the records through a live guard; what an operator would see.

    ``settle``: drive each call as an adapter does (begin, run, settle) and note each
    decision; else with ``guard.call`` (only the end state and packet are compared).
    ``coroutines``: the tools are coroutine functions and the guard's async twins
    (``abegin``, ``asucceeded``, ``afailed``, ``acall``) drive them, on an event loop.
    ``breakers``: every tool goes through a dependency breaker of its own (opening after
    two failures, on the run's clock, with a retry budget the model's re-calls spend).
    ``general``: a sync ``guard.call`` drives the guard's general flow, the one a tool
    with a breaker takes, where a tool without one takes the direct path.
    """
    return asyncio.run(
        _live(
            records,
            budget,
            settle=settle,
            coroutines=coroutines,
            breakers=breakers,
            general=general,
        )
    )


async def _live(
    records: list[dict[str, Any]],
    budget: Budget,
    *,
    settle: bool,
    coroutines: bool,
    breakers: bool,
    general: bool = False,
) -> dict[str, Any]:
    clock = FakeClock(records[0]["at"])
    guard = RunGuard(TASK, budget=budget, clock=clock)
    script: dict[str, Any] = {}

    def breaker(name: str) -> Breaker:
        return Breaker(
            f"svc-{name}",
            policy=Policy(failure_threshold=2, cooldown_ms=300),
            clock=clock,
            timeout=30.0,
            enforce="cooperative",
            retry=RetryPolicy(max_attempts=1, budget=2),
        )

    tools = live_tools(guard, script, coroutines=coroutines, breakers=breaker if breakers else None)
    decisions: list[tuple[int, str, str | None]] = []
    answers: list[Any] = []
    lines: dict[int, int] = {}
    model_stop: int | None = None
    stopped_packet = None
    for number, record in enumerate(records, 1):
        clock.set(record["at"])
        if "tool" not in record:
            # A model step, as an adapter reports it: its usage, priced by the budget's
            # table; a cost the table does not give is reported as the step's own.
            if "model" in record:
                guard.add_usage(
                    record["model"],
                    input_tokens=record["input_tokens"],
                    output_tokens=record["output_tokens"],
                )
            if record.get("model") not in budget.prices:
                guard.add_cost(record["cost"])
            if model_stop is None and (guard.state.stopped or guard.state.writes_blocked):
                model_stop = number  # this model step's usage or cost stopped the run
            continue
        script["step"] = record
        tool, args = record["tool"], record["args"]
        if settle:
            step = await guard.abegin(tool, args) if coroutines else guard.begin(tool, args)
            assert step.decision is not None
            stop = step.decision.stop
            decisions.append((number, step.decision.verdict, stop and stop.condition))
            lines[step.decision.step] = number
            answer = step.answer
            if answer is None:
                try:
                    result = tools[tool](**step.args)
                    if coroutines:
                        result = await result
                except Exception as exc:  # noqa: BLE001 - settled as a failure
                    answer = await step.afailed(exc) if coroutines else step.failed(exc)
                else:
                    answer = await step.asucceeded(result) if coroutines else step.succeeded(result)
        else:
            lines[guard.state.steps + 1] = number
            if coroutines:
                answer = await guard.acall(tool, args)
            elif general:
                answer = drive(guard._calling(tool, dict(args)))  # its general flow
            else:
                answer = guard.call(tool, args)
        answers.append(answer)
        if stopped_packet is None and guard.stopped is not None:
            stopped_packet = guard.stop_packet()
    packet = stopped_packet or guard.stop_packet()
    return {
        "decisions": decisions,
        "answers": json.loads(json.dumps(answers, default=str)),
        "lines": lines,
        "model_stop": model_stop,
        "counters": json.loads(json.dumps(guard.state.counters(), default=str)),
        "packet": json.loads(packet.to_json()),
        "stops": bool(packet.history),
    }
