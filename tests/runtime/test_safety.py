"""Issue 9: what broke a promise under a hostile user, each reproduced against real parts.

A fault around a call never changes its outcome; a write that may have committed is
unknown whatever the transport says; a resumed run refuses writes while an earlier one is
unresolved; what people and models read is masked where it is built.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolbreaker import Breaker, Budget, Policy, RunGuard, Transition, Verdict
from toolbreaker.cli import main
from toolbreaker.errors import NotSent
from toolbreaker.runtime import StopPacket
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json

BEARER = "Bearer sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def ticket_guard(
    service: ToolService, breaker: Breaker, *, task: str = "task-1", journal: Any = None
) -> RunGuard:
    guard = RunGuard(task, journal=journal if journal is not None else MemoryStore())

    def find(key: str, _args: Any) -> dict[str, Any] | None:
        found = request_json("GET", f"{service.url}/tickets?idempotency_key={key}", timeout=1)
        return found["tickets"][0] if found["tickets"] else None

    @guard.tool(risk="reversible_write", breaker=breaker, business_key=["title"], reconcile=find)
    def create_ticket(title: str, idempotency_key: str) -> dict[str, Any]:
        if not title.strip():
            raise ValueError("title must not be blank")  # an argument check: nothing left
        return request_json(
            "POST",
            f"{service.url}/tickets",
            body={"title": title, "body": "b"},
            headers={"Idempotency-Key": idempotency_key},
            timeout=0.5,
        )

    @guard.tool(breaker=Breaker("search", timeout=1.0, enforce="cooperative"))
    def search(q: str) -> dict[str, Any]:
        return request_json("GET", f"{service.url}/search?q={q}", timeout=1)

    return guard


# -- 2. a listener (or any hook) never changes an outcome -----------------------------------


def test_a_raising_listener_never_turns_a_committed_write_into_an_error_or_a_replay(service):
    """The issue's reproduction: a metrics listener that raises on success."""
    seen: list[str] = []

    def metrics(record: Transition, _breaker: Breaker) -> None:
        if record.reason == "success":
            raise RuntimeError("metrics backend down")

    tickets = Breaker("tickets", timeout=1.0, enforce="cooperative")
    tickets.add_listener(metrics)
    tickets.add_listener(lambda record, _b: seen.append(record.reason))
    guard = ticket_guard(service, tickets)
    first = guard.call("create_ticket", {"title": "refund"})
    second = guard.call("create_ticket", {"title": "refund"})
    assert first["id"] == "T-1"
    assert second["id"] == "T-1"  # answered from the journal
    assert service.hits["POST /tickets"] == 1
    assert len(service.created("tickets")) == 1
    assert "success" in seen  # the listener after the raising one saw every record
    assert tickets.stats.listener_errors == 1


def test_a_listener_raising_on_probe_admission_leaks_no_lease():
    """The probe's outcome still settles its lease: the breaker closes on time."""

    def angry(record: Transition, _breaker: Breaker) -> None:
        if record.reason == "probe-admitted":
            raise RuntimeError("boom")

    clock = [0]
    breaker = Breaker(
        "s",
        timeout=1.0,
        enforce="cooperative",
        clock=lambda: clock[0],
        policy=Policy(failure_threshold=1, cooldown_ms=10, success_threshold=1),
    )
    breaker.add_listener(angry)
    with pytest.raises(OSError, match="down"):
        breaker.call(_raise(ConnectionResetError("down")))
    clock[0] = 20
    assert breaker.call(lambda: "ok") == "ok"
    assert breaker.state.phase == "closed"
    assert breaker.state.leases == ()


def test_a_raising_classifier_is_ambiguous_and_a_write_is_unknown(service):
    """A classifier that raises proves nothing: the write is never replayed."""

    def broken(_exc: BaseException) -> Verdict:
        raise RuntimeError("classifier bug")

    tickets = Breaker("tickets", timeout=1.0, enforce="cooperative", classifier=broken)
    guard = ticket_guard(service, tickets)
    service.inject("POST /tickets", Fault(status=503))
    answer = guard.call("create_ticket", {"title": "refund"})
    assert answer["outcome_unknown"] is True
    assert tickets.stats.hook_errors >= 1


# -- 3. a write that may have committed is unknown, whatever the transport says -------------


@pytest.mark.parametrize("fault", [Fault(status=504, commit=True), Fault(reset=True, commit=True)])
def test_a_gateway_timeout_or_a_reset_after_sending_is_unknown_never_retried(service, fault):
    """504 and a reset after the request went out: stop and reconcile, never a duplicate."""
    tickets = Breaker("tickets", timeout=1.0, enforce="cooperative")
    guard = ticket_guard(service, tickets)
    service.inject("POST /tickets", fault)
    first = guard.call("create_ticket", {"title": "refund"})
    assert first["outcome_unknown"] is True
    assert first["reconciled"]["id"] == "T-1"  # it had committed
    again = guard.call("create_ticket", {"title": "refund"})
    assert again["id"] == "T-1"
    assert service.hits["POST /tickets"] == 1
    assert len(service.created("tickets")) == 1


def test_an_argument_check_before_anything_left_is_a_certain_failure(service):
    """A ValueError raised by the tool's own check does not block the run's writes."""
    tickets = Breaker("tickets", timeout=1.0, enforce="cooperative")
    guard = ticket_guard(service, tickets)
    bad = guard.call("create_ticket", {"title": "  "})
    assert bad["ok"] is False
    assert "outcome_unknown" not in bad
    assert guard.writes_blocked is None
    assert guard.call("create_ticket", {"title": "refund"})["id"] == "T-1"


def test_not_sent_marks_a_certain_failure():
    """A tool that raises NotSent (from anything) declares that nothing left."""
    guard = RunGuard("t")

    @guard.tool(risk="reversible_write")
    def write(x: int, idempotency_key: str) -> dict[str, Any]:
        try:
            raise TimeoutError("credential service timed out")
        except TimeoutError as exc:
            raise NotSent("no credential, nothing was sent") from exc

    assert "outcome_unknown" not in write(x=1)
    assert guard.writes_blocked is None


def test_a_resumed_run_refuses_writes_while_an_earlier_write_is_unknown(service):
    """The journal's unresolved write blocks the resumed run's writes until resolved."""
    journal = MemoryStore()
    tickets = Breaker("tickets", timeout=1.0, enforce="cooperative")
    service.inject("POST /tickets", Fault(commit_then_delay=1.0))
    service.outage("GET /tickets")  # the status check cannot be made
    first = ticket_guard(service, tickets, journal=journal)
    assert first.call("create_ticket", {"title": "refund"})["outcome_unknown"] is True

    resumed = ticket_guard(service, tickets, journal=journal)
    other = resumed.call("create_ticket", {"title": "another"})
    assert other["writes_blocked"] is True
    assert resumed.call("search", {"q": "cable"})["results"]  # reads go on
    assert service.hits["POST /tickets"] == 1
    assert resumed.stop_packet().condition == "uncertain-side-effect"


# -- 5. no secret in anything a person or a model reads -------------------------------------


def test_a_stop_packet_is_masked_where_it_is_built():
    """Fields, str() and to_json() of a packet all show the masked text."""
    packet = StopPacket(
        task="t",
        condition="operator",
        detail=f"called with {BEARER}",
        confirmed=({"external_id": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx"},),
        uncertain=(),
        attempted={"tool": "x", "password": "hunter2hunter2"},
        counters={},
        next_safe_action="wait",
    )
    for text in (packet.detail, str(packet), repr(packet), packet.to_json()):
        assert "sk-proj-AbCd" not in text
        assert "sk-ant-api03" not in text
        assert "hunter2" not in text


def test_a_model_facing_error_result_is_masked():
    """An exception text with a bearer token never reaches the model raw."""
    breaker = Breaker("s", timeout=1.0, enforce="cooperative")

    @breaker.guard
    def tool() -> None:
        raise PermissionError(f"401 for header Authorization: {BEARER}")

    result = tool()
    assert result["ok"] is False
    assert "sk-proj" not in json.dumps(result)


# -- 6. the numbers a model reads agree with the words --------------------------------------


def test_an_isolated_breaker_gives_no_retry_seconds():
    """'Do not call it again in this run' comes with no number that says otherwise."""
    breaker = Breaker("s", timeout=1.0, enforce="cooperative")
    breaker.isolate("maintenance")
    step = breaker.begin("search")
    assert step.answer["retry_after_seconds"] is None
    assert "in this run" in step.answer["instruction"]


# -- one machine: RunGuard and check-run cannot disagree ------------------------------------


def test_run_guard_and_check_run_make_identical_decisions(tmp_path, capsys):
    """A recorded run, reads after a blocked write included, through both drivers."""
    records = [
        {"at": 0, "tool": "search", "args": {"q": "a"}, "outcome": "success", "result": {"n": 1}},
        {
            "at": 1,
            "tool": "send",
            "risk": "reversible_write",
            "args": {"to": "x"},
            "outcome": "unknown",
        },
        {"at": 2, "tool": "send", "risk": "reversible_write", "args": {"to": "y"}},
        {"at": 3, "tool": "search", "args": {"q": "b"}, "outcome": "success", "result": {"n": 2}},
        {"at": 4, "tool": "search", "args": {"q": "b"}, "outcome": "success", "result": {"n": 2}},
        {"at": 5, "tool": "search", "args": {"q": "b"}, "outcome": "success", "result": {"n": 2}},
        {"at": 6, "tool": "search", "args": {"q": "b"}, "outcome": "success", "result": {"n": 2}},
        {"at": 7, "tool": "search", "args": {"q": "b"}, "outcome": "success", "result": {"n": 2}},
        {"at": 8, "tool": "search", "args": {"q": "c"}, "outcome": "success", "result": {"n": 3}},
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    main(["check-run", str(path), "--task", "t-1"])
    out = capsys.readouterr().out
    from_cli = []
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4 or not parts[0].isdigit():
            break
        word = parts[3]
        from_cli.append({"allowed": "run", "BLOCKED": "writes-blocked", "STOP": "stopped"}[word])

    clock = [0]
    guard = RunGuard("t-1", budget=Budget(), clock=lambda: clock[0])
    outcomes = iter(records)
    live = []
    for record in records:
        guard.ensure_tool(record["tool"], risk=record.get("risk", "read"))
        clock[0] = record["at"]
        step = guard.begin(record["tool"], record["args"])
        live.append(step.decision.verdict)
        current = next(outcomes)
        if step.answer is None:
            if current.get("outcome") == "unknown":
                step.failed(TimeoutError("no answer"))
            else:
                step.succeeded(current.get("result", {"ok": True}))
    assert live == from_cli, (live, from_cli)
    assert "writes-blocked" in live
    assert live[3] == "run"  # a read after the blocked write still runs
    assert live[-1] == "stopped", live


def _raise(exc: BaseException) -> Any:
    def fail() -> Any:
        raise exc

    return fail


# -- 4. repeats are caught even when responses carry noise ----------------------------------


def test_an_identical_search_with_a_fresh_request_id_is_a_repeat():
    """The issue's reproduction: max_repeats=1, results differing only in request_id and
    timestamp: the third identical search is stopped, not run 10 of 10 times."""
    ran = []
    guard = RunGuard("t", budget=Budget(max_repeats=1))

    @guard.tool()
    def search(q: str) -> dict[str, Any]:
        ran.append(q)
        n = len(ran)
        return {"results": ["cable"], "request_id": f"req-{n}", "meta": {"timestamp": n}}

    answers = [search(q="usb cable") for _ in range(10)]
    assert len(ran) < 10
    assert any(a.get("run_stopped") for a in answers)
    assert guard.stopped is not None
    assert guard.stopped.condition == "repeated-action"
