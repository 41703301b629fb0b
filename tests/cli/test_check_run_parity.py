"""check-run and a live RunGuard are one driver: fed the same run, they give the same answers.

A recorded run is generated (reads after a refused write, unknown writes, costs on refused
steps, reworded repeats, alternations, deadlines, model steps); a live :class:`RunGuard`
runs it with real tool functions that behave as each step recorded (return its result,
time out, refuse the connection, fail their own argument check, spend its cost while
they run), and ``toolbreaker check-run`` replays the file. Both must stop at the same
step, for the same condition, with the same counters and the same packet.
"""

from __future__ import annotations

import copy
import io
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolbreaker import GuardedTool, RunGuard
from toolbreaker.cli._run import check_run
from toolbreaker.core.run.budget import WRITES, Budget, ClassLimits
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
            steps.append({"at": at, "cost": draw(costs)})  # a model step
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


# -- the live side: a run guard whose tools behave as the steps recorded ------------------


def live_tools(guard: RunGuard, script: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """Real tool functions: each does what the step it is called for recorded."""

    def make(risk: str) -> Callable[..., Any]:
        def tool(**_kwargs: Any) -> Any:
            step = script["step"]
            if "cost" in step:
                guard.add_cost(step["cost"], risk=risk)  # a call spends while it runs
            outcome = step.get("outcome", "success")
            if outcome == "failure":
                raise ConnectionRefusedError(111, "connection refused")
            if outcome == "unknown":
                raise TimeoutError("the service did not answer in time")
            if outcome == "ignored":
                raise ValueError("the tool's own argument check refused it")
            return copy.deepcopy(step.get("result"))

        return tool

    made = {}
    for name, (risk, business_key, recovery) in TOOLS.items():
        made[name] = make(risk)
        guard.add_tool(
            GuardedTool(
                name=name,
                fn=made[name],
                risk=risk,  # type: ignore[arg-type]
                business_key=business_key,
                verify=(lambda r: isinstance(r, Mapping) and "id" in r) if risk in WRITES else None,
                authorize=(lambda _request: True) if risk == "irreversible" else None,
                recovery=recovery,
            )
        )
    return made


def live(records: list[dict[str, Any]], budget: Budget, *, settle: bool) -> dict[str, Any]:
    """Run the records through a live guard; what an operator would see.

    ``settle``: drive each call as an adapter does (begin, run, settle) and note each
    decision; else with ``guard.call`` (only the end state and packet are compared).
    """
    clock = FakeClock(records[0]["at"])
    guard = RunGuard(TASK, budget=budget, clock=clock)
    script: dict[str, Any] = {}
    tools = live_tools(guard, script)
    decisions: list[tuple[int, str, str | None]] = []
    lines: dict[int, int] = {}
    stopped_packet = None
    for number, record in enumerate(records, 1):
        clock.set(record["at"])
        if "tool" not in record:
            guard.add_cost(record["cost"])  # a model step
            continue
        script["step"] = record
        if settle:
            step = guard.begin(record["tool"], record["args"])
            assert step.decision is not None
            stop = step.decision.stop
            decisions.append((number, step.decision.verdict, stop and stop.condition))
            lines[step.decision.step] = number
            if step.answer is None:
                try:
                    result = tools[record["tool"]](**step.args)
                except Exception as exc:  # noqa: BLE001 - settled as a failure
                    step.failed(exc)
                else:
                    step.succeeded(result)
        else:
            lines[guard.state.steps + 1] = number
            guard.call(record["tool"], record["args"])
        if stopped_packet is None and guard.stopped is not None:
            stopped_packet = guard.stop_packet()
    packet = stopped_packet or guard.stop_packet()
    return {
        "decisions": decisions,
        "lines": lines,
        "counters": json.loads(json.dumps(guard.state.counters(), default=str)),
        "packet": json.loads(packet.to_json()),
        "stops": bool(packet.history),
    }


# -- the recorded side: check-run on the file ------------------------------------------


_WORDS = {"allowed": "run", "STOP": "stopped", "BLOCKED": "writes-blocked"}


def recorded(records: list[dict[str, Any]], budget: Budget) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        out = io.StringIO()
        code = check_run(str(path), budget, TASK, out)
    text = out.getvalue()
    table, _, tail = text.partition("\n\n")
    decisions = []
    for row in table.splitlines()[1:]:
        number, _at, _tool, word, *rest = row.split()
        if word in _WORDS:
            condition = rest[0].rstrip(":") if word != "allowed" else None
            decisions.append((int(number), _WORDS[word], condition))
        elif word == "answered":
            decisions.append((int(number), "journal", None))
        else:
            assert word == "reconcile", row
            decisions.append((int(number), "reconcile", None))
    found: dict[str, Any] = {"code": code, "decisions": decisions}
    if code == 0:
        found["counters"] = json.loads(tail.split(": ", 1)[1])
    else:
        where, _, packet = tail.partition("\n")
        found["where"] = int(where.rsplit(":", 1)[1])
        found["packet"] = json.loads(packet)
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=recorded_runs(), budget=budgets, settle=st.booleans())
def test_check_run_and_a_live_guard_decide_alike(records, budget, settle):
    """The same steps decided the same way, the same stop (or block) at the same step,
    the same counters and the same packet, history included."""
    seen = live(records, budget, settle=settle)
    replayed = recorded(records, budget)
    if settle:
        assert replayed["decisions"] == seen["decisions"]
    assert replayed["code"] == (1 if seen["stops"] else 0)
    if replayed["code"] == 0:
        assert replayed["counters"] == seen["counters"]
        return
    assert replayed["packet"] == seen["packet"]
    history = seen["packet"]["history"]
    stops = [c for c in history if c["effect"] == "stopped"]
    first = (stops or history)[0]
    assert replayed["where"] == seen["lines"][first["step"]]
