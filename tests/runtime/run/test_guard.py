"""Run guards against a real local ticket/e-mail service with injected faults.

Each adversarial scenario asserts three things: the guard stopped before material damage
(zero duplicate side effects), the stop packet explains the state, and resuming repeats
no completed work.
"""

from __future__ import annotations

import json
import urllib.parse
from decimal import Decimal
from typing import Any

import pytest

from toolbreaker import Breaker, Policy
from toolbreaker.core._run.budget import Budget, ClassLimits
from toolbreaker.errors import PolicyError
from toolbreaker.runtime._run._guard import RunGuard
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import Fault, ToolService, request_json


def make_guard(
    service: ToolService,
    *,
    task: str = "task-1",
    journal: MemoryStore | None = None,
    budget: Budget | None = None,
    write_timeout: float = 0.3,
) -> RunGuard:
    """A guard with the service's tools: tickets and e-mails (writes), search/refine (reads)."""
    guard = RunGuard(task, budget=budget or Budget(), journal=journal or MemoryStore())
    base = service.url
    tickets = Breaker(
        "tickets",
        operation="write",
        timeout=write_timeout,
        enforce="cooperative",
        policy=Policy(failure_threshold=3),
    )
    emails = Breaker(
        "emails",
        operation="write",
        timeout=write_timeout,
        enforce="cooperative",
        policy=Policy(failure_threshold=3),
    )
    search = Breaker("search", operation="read", timeout=1.0, enforce="cooperative")

    def post(kind: str, body: dict[str, Any], key: str) -> dict[str, Any]:
        return request_json(
            "POST",
            f"{base}/{kind}",
            body=body,
            headers={"Idempotency-Key": key},
            timeout=write_timeout,
        )

    def find(kind: str):
        def reconcile(key: str, _args: Any) -> dict[str, Any] | None:
            found = request_json("GET", f"{base}/{kind}?idempotency_key={key}", timeout=1.0)
            return found[kind][0] if found[kind] else None

        return reconcile

    @guard.tool(
        risk="reversible_write",
        breaker=tickets,
        business_key=["customer", "title"],
        verify=lambda r: isinstance(r, dict) and str(r.get("id", "")).startswith("T-"),
        reconcile=find("tickets"),
        external_id=lambda r: r["id"],
    )
    def create_ticket(customer: str, title: str, idempotency_key: str, **_noise: Any) -> dict:
        return post("tickets", {"title": title, "body": f"for {customer}"}, idempotency_key)

    @guard.tool(
        risk="reversible_write",
        breaker=emails,
        required=True,
        business_key=["to", "template", "period"],
        verify=lambda r: isinstance(r, dict) and "id" in r,
        reconcile=find("emails"),
        external_id=lambda r: r["id"],
    )
    def send_email(to: str, template: str, period: str, idempotency_key: str) -> dict:
        return post("emails", {"to": to, "template": template, "period": period}, idempotency_key)

    @guard.tool(breaker=search)
    def search_catalog(q: str) -> dict:
        return request_json("GET", f"{base}/search?q={urllib.parse.quote(q)}", timeout=1.0)

    @guard.tool(breaker=search)
    def refine(q: str) -> dict:
        return request_json("GET", f"{base}/search?q={urllib.parse.quote(q)}", timeout=1.0)

    @guard.tool(recovery=True)
    def ticket_status(idempotency_key: str) -> dict:
        return find("tickets")(idempotency_key, {}) or {}

    return guard


def test_commit_then_timeout_creates_no_duplicate(service):
    """Scenario 1: the server commits, the response times out: the outcome is unknown,
    reconciliation finds the record, and the retry creates nothing."""
    guard = make_guard(service)
    service.inject("POST /tickets", Fault(commit_then_delay=1.0))
    args = {"customer": "c-1842", "title": "Refund order A-1001"}
    first = guard.call("create_ticket", args)
    assert first["outcome_unknown"] is True
    assert first["reconciled"]["id"] == "T-1"
    assert "Do not repeat this action" in first["instruction"]
    again = guard.call("create_ticket", args)  # the model insists
    assert again["id"] == "T-1"  # answered from the journal, not the server
    assert len(service.created("tickets")) == 1
    assert service.hits["POST /tickets"] == 1
    # The status check found the write, so its outcome is known: other writes may run.
    assert guard.writes_blocked is None
    other = guard.call("create_ticket", {"customer": "c-9", "title": "Another"})
    assert other["id"] == "T-2"
    packet = guard.stop_packet().to_dict()
    assert packet["confirmed"][0]["external_id"] == "T-1"


def test_unreconciled_unknown_write_blocks_writes_until_an_operator_resolves_it(service):
    """An unknown write whose status check cannot be made blocks every write; reads go on;
    RunGuard.resolve() is the operator's answer that lifts the block."""
    guard = make_guard(service)
    service.inject("POST /tickets", Fault(commit_then_delay=1.0))
    service.outage("GET /tickets")
    first = guard.call("create_ticket", {"customer": "c-1", "title": "Refund"})
    assert first["outcome_unknown"] is True
    assert first["reconciled"] is None
    other = guard.call("create_ticket", {"customer": "c-9", "title": "Another"})
    assert other["writes_blocked"] is True
    assert service.hits["POST /tickets"] == 1
    assert guard.call("search_catalog", {"q": "cable"})["results"]
    packet = guard.stop_packet().to_dict()
    assert packet["condition"] == "uncertain-side-effect"
    assert "reconcile" in packet["next_safe_action"]
    service.recover("GET /tickets")
    guard.resolve(first["idempotency_key"], committed=True)
    assert guard.writes_blocked is None
    assert guard.call("create_ticket", {"customer": "c-9", "title": "Another"})["id"] == "T-2"


def test_malformed_success_opens_the_write_breaker(service):
    """Scenario 2: a malformed success payload fails verification: unknown, never repeated."""
    guard = make_guard(service)
    service.inject("POST /emails", Fault(malformed="shape"))
    service.outage("GET /emails")  # the status check cannot be made either
    args = {"to": "customer-1842", "template": "renewal_notice", "period": "2026-08"}
    first = guard.call("send_email", args)
    assert first["outcome_unknown"] is True
    second = guard.call("send_email", {**args, "period": "2026-09"})
    assert second["writes_blocked"] is True
    assert service.hits["POST /emails"] == 1
    # Safe work still runs: a read-only status check.
    assert guard.call("ticket_status", {"idempotency_key": "x"}) == {}
    assert guard.stop_packet().condition == "uncertain-side-effect"


def test_alternating_tools_are_stopped_as_a_loop(service):
    """Scenario 3: search, refine, search, refine ... is detected and stopped."""
    guard = make_guard(service)
    results = [guard.call(tool, {"q": "usb cable"}) for tool in ["search_catalog", "refine"] * 4]
    stopped = [r for r in results if isinstance(r, dict) and r.get("run_stopped")]
    assert stopped
    assert guard.stopped is not None
    assert guard.stopped.condition == "loop"
    assert service.hits["GET /search"] < 8
    packet = guard.stop_packet()
    assert "looping" in packet.next_safe_action
    assert packet.attempted is not None


def test_reworded_arguments_collide_and_are_deduplicated(service):
    """Scenario 4: reordered keys, a reworded reason and a fresh timestamp are the same
    business action: the second write is answered from the journal."""
    guard = make_guard(service)
    first = guard.call(
        "create_ticket",
        {
            "customer": "c-1",
            "title": "Broken cable",
            "reason": "user asked",
            "requested_at": "10:00",
        },
    )
    second = guard.call(
        "create_ticket",
        {
            "requested_at": "10:05",
            "title": "  broken  CABLE ",
            "reason": "the user asked again, politely",
            "customer": "C-1",
        },
    )
    assert first["id"] == second["id"]
    assert len(service.created("tickets")) == 1
    assert service.hits["POST /tickets"] == 1


def send_twelve(guard: RunGuard) -> list[Any]:
    return [
        guard.call(
            "send_email", {"to": f"customer-{n}", "template": "renewal_notice", "period": "2026-08"}
        )
        for n in range(12)
    ]


def test_outage_after_nine_steps_stops_and_resumes_without_repeats(service):
    """Scenario 5: after nine good steps the provider fails; the breaker opens, the run
    stops with a packet listing the nine confirmed steps, and a resumed run repeats none."""
    journal = MemoryStore()
    budget = Budget(classes={"reversible_write": ClassLimits(max_calls=20, max_repeats=1)})
    guard = make_guard(service, journal=journal, budget=budget)
    service.inject("POST /emails", *([Fault()] * 9), *([Fault(status=503)] * 10))
    results = send_twelve(guard)
    assert all("id" in r for r in results[:9])
    assert guard.stopped is not None
    assert guard.stopped.condition == "dependency-open"
    packet = guard.stop_packet().to_dict()
    assert len(packet["confirmed"]) == 9
    assert all(step["idempotency_key"].startswith("tb1-") for step in packet["confirmed"])
    assert service.hits["POST /emails"] == 12  # 9 good + 3 failures that opened the breaker
    json.dumps(packet)  # JSON-serialisable

    service.reset()  # provider back; the journal is what carries over
    resumed = make_guard(service, journal=journal, budget=budget)
    again = send_twelve(resumed)
    assert [r["id"] for r in again[:9]] == [r["id"] for r in results[:9]]
    assert service.hits["POST /emails"] == 3  # only the three that never happened
    assert len(service.created("emails")) == 3


def test_write_retry_carries_the_same_idempotency_key(service):
    """A failed write retried later carries the same idempotency key."""
    guard = make_guard(
        service,
        budget=Budget(classes={"reversible_write": ClassLimits(max_calls=5, max_repeats=3)}),
    )
    service.inject("POST /tickets", Fault(status=503))  # refused: certainly not made
    args = {"customer": "c-5", "title": "Late delivery"}
    failed = guard.call("create_ticket", args)
    assert failed["ok"] is False
    assert failed["retryable"] is True
    ok = guard.call("create_ticket", args)
    assert ok["id"] == "T-1"
    entry = guard.stop_packet().confirmed[0]
    assert entry["idempotency_key"] == ok["idempotency_key"]


def test_irreversible_tools_need_an_authority_check():
    """Declaring an irreversible tool without an authorize callback fails at configuration."""
    guard = RunGuard("t")
    with pytest.raises(PolicyError, match="authorize"):
        guard.tool(risk="irreversible")(lambda **_: None)


def test_irreversible_call_refused_by_authority_never_runs():
    """An irreversible action the authority check refuses is not executed."""
    guard = RunGuard("t")
    ran = []
    seen = []

    def deny(request) -> bool:
        seen.append(request)
        return False

    @guard.tool(risk="irreversible", authorize=deny, idempotency_arg=None)
    def refund(order: str, api_key: str) -> dict:
        ran.append(order)
        return {"ok": True}

    result = refund(order="A-1", api_key="sk-" + "x" * 40)
    assert result["denied"] is True
    assert ran == []
    assert seen[0].args["api_key"] == "[REDACTED]"


def test_budget_stop_packet_counts_and_masks(service):
    """A crossed call budget stops the run with exact counters and no secrets."""
    guard = make_guard(service, budget=Budget(max_tool_calls=2))
    guard.call("search_catalog", {"q": "a"})
    guard.call("search_catalog", {"q": "b"})
    third = guard.call("search_catalog", {"q": "Bearer abcdefghijklmnopqrstuvwxyz012345"})
    assert third["run_stopped"] is True
    packet = guard.stop_packet().to_dict()
    assert packet["condition"] == "max-tool-calls"
    assert packet["counters"]["calls"] == 2
    assert "abcdefghijklmnopqrstuvwxyz012345" not in json.dumps(packet)


def test_cost_budget(service):
    """Costs reported per model step stop the run at the limit."""
    guard = make_guard(service, budget=Budget(max_cost=Decimal("0.10")))
    guard.add_cost("0.06")
    assert "results" in guard.call("search_catalog", {"q": "a"})
    guard.add_cost("0.05")
    assert guard.call("search_catalog", {"q": "b"})["condition"] == "max-cost"


def test_two_step_begin_for_framework_hooks(service):
    """begin() gives hooks the injected idempotency key; succeeded()/failed() settle once."""
    from toolbreaker.errors import PermitError

    guard = make_guard(service)
    step = guard.begin("create_ticket", {"customer": "c-7", "title": "Hook"})
    assert step.answer is None
    assert step.args["idempotency_key"] == step.idempotency_key
    result = request_json(
        "POST",
        f"{service.url}/tickets",
        body={"title": "Hook", "body": "x"},
        headers={"Idempotency-Key": step.idempotency_key},
        timeout=1.0,
    )
    assert step.succeeded(result)["id"] == "T-1"
    with pytest.raises(PermitError):
        step.succeeded(result)
    again = guard.begin("create_ticket", {"title": "hook", "customer": "C-7"})
    assert again.answer["id"] == "T-1"  # answered from the journal; the tool must not run


def test_two_step_unknown_tool_registered_as_read():
    """ensure_tool registers framework tools the user did not declare, as reads."""
    guard = RunGuard("t")
    spec = guard.ensure_tool("lookup")
    assert spec.risk == "read"
    step = guard.begin("lookup", {"id": 1})
    assert step.failed(ValueError("bad id"))["retryable"] is False


def test_rejection_names_the_tool_that_was_called():
    """Two tools sharing one dependency's breaker: the rejection names the one called."""
    breaker = Breaker(
        "catalog",
        policy=Policy(failure_threshold=1),
        timeout=1.0,
        enforce="cooperative",
        tool="search",
    )
    guard = RunGuard("t")

    @guard.tool(breaker=breaker)
    def search(q: str) -> dict:
        raise OSError(111, "refused")

    @guard.tool(breaker=breaker)
    def browse(category: str) -> dict:
        return {}

    search(q="x")
    result = browse(category="cables")
    assert result["tool_unavailable"] is True
    assert result["tool"] == "browse"
    assert '"browse"' in result["instruction"]


class DownJournal(MemoryStore):
    """A journal whose store is unreachable."""

    def journal_get(self, *_args, **_kwargs):
        from toolbreaker.errors import StoreUnavailable

        raise StoreUnavailable("down")

    journal_put = journal_entries = journal_get


def test_a_write_is_not_made_when_its_journal_is_down():
    """Fail closed: without a journal a write could be neither skipped nor reconciled."""
    guard = RunGuard("t", journal=DownJournal())
    ran = []

    @guard.tool(risk="reversible_write", idempotency_arg=None)
    def create(title: str) -> dict:
        ran.append(title)
        return {"id": 1}

    @guard.tool()
    def lookup(q: str) -> dict:
        return {"q": q}

    answer = create(title="x")
    assert answer["reason"] == "store-unavailable"
    assert ran == []
    assert lookup(q="still fine") == {"q": "still fine"}
    assert guard.stop_packet().to_dict()["condition"] == "running"


def test_a_raising_stop_listener_is_counted_and_the_decision_stands(caplog):
    """Stop listeners watch: one that raises is counted and logged, the run still stops,
    and the others still see the masked packet."""

    guard = RunGuard("t-listen", budget=Budget(max_tool_calls=1))
    guard.tool("read")(lambda: "ok")
    seen = []

    def broken(packet, g):
        raise RuntimeError("dashboard down")

    guard.add_stop_listener(broken)
    remove = guard.add_stop_listener(lambda packet, g: seen.append(packet.condition))
    guard.call("read")
    guard.call("read")
    guard.call("read")
    assert guard.stopped is not None
    assert seen == [guard.stopped.condition]
    assert guard.listener_errors == 1
    remove()


def test_a_write_the_status_check_did_not_find_is_never_replayed(service):
    """A write whose verification fails and whose status check finds nothing stays
    unresolved: the next identical call is not made again (the key reaches the service
    once), although one uncertain write is within ``max_uncertain_side_effects``."""
    guard = make_guard(service, budget=Budget(max_uncertain_side_effects=1))
    # A 2xx answer of the wrong shape, and nothing committed: the check finds nothing.
    service.inject("POST /tickets", Fault(malformed="shape", commit=False))
    args = {"customer": "c-77", "title": "Replace router"}
    first = guard.call("create_ticket", args)
    assert first["outcome_unknown"] is True
    assert first["reconciled"] is None
    assert "Do not repeat this action" in first["instruction"]
    assert guard.writes_blocked is None  # one uncertain write is allowed
    again = guard.call("create_ticket", args)  # the model repeats it anyway
    assert again["outcome_unknown"] is True
    assert again["idempotency_key"] == first["idempotency_key"]
    assert service.hits["POST /tickets"] == 1  # the key reached the service once
    assert service.created("tickets") == []
    [uncertain] = guard.stop_packet().uncertain
    assert uncertain["idempotency_key"] == first["idempotency_key"]


class LateJournal(MemoryStore):
    """A journal whose next writes are made but answered late (the answer is lost)."""

    def __init__(self) -> None:
        super().__init__()
        self.late = 0

    def journal_put(self, task, key, entry, *, only_new=False):
        from toolbreaker.errors import StoreWriteUnknown

        written = super().journal_put(task, key, entry, only_new=only_new)
        if self.late:
            self.late -= 1
            raise StoreWriteUnknown("the journal's answer was lost")
        return written


def test_a_pending_entry_whose_answer_was_lost_does_not_strand_the_write():
    """The pending entry may have been written although the journal did not say so: the
    write is not made (fail closed), the entry is set to "not made", and the next call
    makes it, instead of reconciling a write that never ran."""
    journal = LateJournal()
    guard = RunGuard("t-late", journal=journal)
    made = []

    @guard.tool(risk="reversible_write", idempotency_arg=None)
    def create(title: str) -> dict:
        made.append(title)
        return {"id": len(made)}

    journal.late = 1
    first = create(title="x")
    assert first["reason"] == "store-unavailable"
    assert made == []
    [entry] = journal.journal_entries("t-late")
    assert entry["status"] == "failed"
    assert create(title="x") == {"id": 1}
    assert guard.writes_blocked is None


def test_an_operators_word_whose_answer_was_lost_counts_once_on_the_retry(service):
    """resolve() raises when the journal's answer is lost (the word may be recorded): the
    operator calls again, and the write stops counting then, once."""
    from toolbreaker.errors import StoreWriteUnknown

    journal = LateJournal()
    guard = make_guard(service, journal=journal)
    service.inject("POST /tickets", Fault(commit_then_delay=1.0))
    service.outage("GET /tickets")
    first = guard.call("create_ticket", {"customer": "c-1", "title": "Refund"})
    assert guard.writes_blocked is not None
    journal.late = 1
    with pytest.raises(StoreWriteUnknown):
        guard.resolve(first["idempotency_key"], committed=True)
    assert guard.writes_blocked is not None  # not known to be recorded yet
    guard.resolve(first["idempotency_key"], committed=True)
    assert guard.writes_blocked is None
    assert guard.state.uncertain == 0
    guard.resolve(first["idempotency_key"], committed=True)  # said again: nothing changes
    assert guard.state.uncertain == 0


def test_an_operator_cannot_say_a_confirmed_write_was_not_made(service):
    """The protocol refuses to call a proven write not made; the journal is left as is."""
    from toolbreaker.errors import WriteTransitionError

    journal = MemoryStore()
    guard = make_guard(service, journal=journal)
    made = guard.call("create_ticket", {"customer": "c-2", "title": "Invoice"})
    with pytest.raises(WriteTransitionError) as caught:
        guard.resolve(made["idempotency_key"], committed=False)
    assert (caught.value.status, caught.value.move) == ("confirmed", "operator-not-made")
    assert journal.journal_get("task-1", made["idempotency_key"])["status"] == "confirmed"


def test_a_key_argument_the_caller_gives_is_the_guards_to_fill():
    """The write's idempotency argument is the guard's: a value given for it is dropped
    before the action is fingerprinted (the same write, the same key, whatever was made
    up) and replaced by the guard's key; a read's argument of that name is left alone."""
    from toolbreaker import GuardedTool

    def guard() -> RunGuard:
        made = RunGuard("keys")
        made.add_tool(
            GuardedTool("pay", lambda **_: None, risk="reversible_write", idempotency_arg="op")
        )
        made.add_tool(GuardedTool("look", lambda **_: None, idempotency_arg="op"))
        return made

    plain = guard().begin("pay", {"amount": 5})
    made_up = guard().begin("pay", {"amount": 5, "op": "model-1"})
    assert made_up.answer is None
    assert made_up.fingerprint == plain.fingerprint
    assert made_up.idempotency_key == plain.idempotency_key
    assert made_up.args == {"amount": 5, "op": plain.idempotency_key}
    read = guard().begin("look", {"q": "x", "op": "kept"})
    assert read.args == {"q": "x", "op": "kept"}


# -- a tool's options are GuardedTool's fields, listed once -----------------------------------


def test_a_tools_options_are_guarded_tools_fields():
    """GuardedTool's fields are the one list of a tool's options: the typed keyword view
    that RunGuard.tool() and ensure_tool() take holds exactly them (but the name and the
    function), and the adapters' part of it all of them but the breaker."""
    import dataclasses

    from toolbreaker import GuardedTool
    from toolbreaker.runtime._run._guard import GuardedToolOptions
    from toolbreaker.runtime._run._tools import GUARDED_TOOL_OPTIONS, GuardToolOptions

    fields = {f.name for f in dataclasses.fields(GuardedTool)} - {"name", "fn"}
    assert fields == GUARDED_TOOL_OPTIONS
    assert GuardedToolOptions.__optional_keys__ == fields
    assert GuardedToolOptions.__required_keys__ == frozenset()
    assert GuardToolOptions.__optional_keys__ == fields - {"breaker"}


def test_the_decorator_builds_the_tool_from_its_options():
    """``RunGuard.tool(...)`` makes the GuardedTool its options describe, every option left
    out at GuardedTool's own default; a business key given as a list is a tuple."""
    from toolbreaker import GuardedTool

    guard = RunGuard("decorated")
    breaker = Breaker("mail", timeout=1.0)

    def send(to: str, idempotency_key: str = "") -> str:
        return to

    def search(q: str) -> str:
        return q

    guard.tool(risk="reversible_write", breaker=breaker, business_key=["to"], required=True)(send)
    guarded = guard.tool("look")(search)

    sent = guard.ensure_tool("send")
    assert (sent.fn, sent.risk, sent.breaker) == (send, "reversible_write", breaker)
    assert (sent.business_key, sent.required) == (("to",), True)
    assert guard.ensure_tool("look") == GuardedTool("look", search)
    assert guarded(q="x") == "x"


@pytest.mark.parametrize("how", ["tool", "ensure_tool"])
def test_a_misspelt_tool_option_is_refused_by_name(how):
    """An option that is no GuardedTool field is a PolicyError naming it and the tool
    (and its field), whether given to the decorator or to ensure_tool; nothing is added."""
    guard = RunGuard("typo")
    options: dict[str, Any] = {"risk": "reversible_write", "requried": True}

    def register() -> None:
        if how == "tool":
            guard.tool("pay", **options)(lambda **_: None)
        else:
            guard.ensure_tool("pay", **options)

    with pytest.raises(PolicyError) as refused:
        register()
    assert "'requried'" in str(refused.value)
    assert "'pay'" in str(refused.value)
    assert refused.value.field == "pay.requried"
    assert guard.breakers() == ()
    assert guard.ensure_tool("pay").risk == "read"  # never registered by the failed call
