"""The local tool service: real sockets on 127.0.0.1, faults scripted from Python."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
from collections.abc import Callable
from typing import Any

import pytest

from toolbreaker.testing import CHAT_ROUTE, Fault, ToolService, request_json
from toolbreaker.testing._chat import openai_error
from toolbreaker.testing._service import ORDER_IDS, SNAPSHOT_AS_OF, _Handler

#: Seconds after which a wait is taken to hang: a guard, never a claim about speed (the
#: suite runs twice at once on two shared cores).
HANG_GUARD = 60.0

TICKET = {"title": "Refund order A-1001", "body": "The cable arrived broken."}
EMAIL = {"to": "ops@example.com", "template": "monthly-report", "period": "2024-04"}


def _get(service: ToolService, path: str, timeout: float = HANG_GUARD) -> dict[str, Any]:
    return request_json("GET", service.url + path, timeout=timeout)


def _post(
    service: ToolService, path: str, body: Any, key: str | None = None, timeout: float = HANG_GUARD
) -> dict[str, Any]:
    headers = {} if key is None else {"Idempotency-Key": key}
    return request_json("POST", service.url + path, body=body, headers=headers, timeout=timeout)


def _raw(
    service: ToolService,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request through http.client, for the status codes request_json hides."""
    port = int(service.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def _http_error(call: Callable[[], object]) -> urllib.error.HTTPError:
    with pytest.raises(urllib.error.HTTPError) as info:
        call()
    return info.value


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.005)


# Normal routes


def test_health_is_ok(service: ToolService) -> None:
    """GET /health answers {"ok": true}."""
    assert _get(service, "/health") == {"ok": True}


def test_search_is_deterministic_with_price_and_stock(service: ToolService) -> None:
    """The same query gives the same items, each with a price and a stock level."""
    first = _get(service, "/search?q=usb-c%20cable")
    assert first == _get(service, "/search?q=usb-c%20cable")
    assert first["query"] == "usb-c cable"
    assert first["results"]
    for item in first["results"]:
        assert isinstance(item["price"], float)
        assert item["price"] > 0
        assert isinstance(item["stock"], int)
    assert _get(service, "/search?q=hdmi")["results"] != first["results"]


def test_search_without_query_is_unprocessable(service: ToolService) -> None:
    """A search without q answers 422."""
    assert _http_error(lambda: _get(service, "/search")).code == 422


def test_snapshot_is_the_search_marked_stale(service: ToolService) -> None:
    """The snapshot carries the live results plus a fixed as_of and stale: true."""
    live = _get(service, "/search?q=cable")
    snapshot = _get(service, "/search_snapshot?q=cable")
    assert snapshot == {**live, "as_of": SNAPSHOT_AS_OF, "stale": True}


def test_known_order_is_shipped(service: ToolService) -> None:
    """A seeded order answers with its id and status shipped."""
    order = _get(service, f"/orders/{ORDER_IDS[0]}")
    assert order["id"] == ORDER_IDS[0]
    assert order["status"] == "shipped"


def test_unknown_order_is_not_found(service: ToolService) -> None:
    """An order id that was never seeded answers 404."""
    assert _http_error(lambda: _get(service, "/orders/Z-9")).code == 404


def test_unknown_path_is_not_found(service: ToolService) -> None:
    """A path no route serves answers 404."""
    assert _http_error(lambda: _get(service, "/nowhere")).code == 404


def test_wrong_method_is_not_allowed(service: ToolService) -> None:
    """A known path with the wrong method answers 405 and names the allowed methods."""
    status, headers, _ = _raw(service, "DELETE", "/tickets")
    assert status == 405
    assert headers["Allow"] == "GET, POST"


def test_ticket_is_created_listed_and_fetched(service: ToolService) -> None:
    """POST /tickets answers 201 with T-1, which GET lists and fetches by id."""
    status, headers, raw = _raw(
        service, "POST", "/tickets", json.dumps(TICKET).encode(), {"Idempotency-Key": "k1"}
    )
    ticket = json.loads(raw)
    assert status == 201
    assert headers["Location"] == "/tickets/T-1"
    assert ticket == {**TICKET, "id": "T-1", "status": "open", "idempotency_key": "k1"}
    assert _get(service, "/tickets") == {"tickets": [ticket]}
    assert _get(service, "/tickets/T-1") == ticket
    assert _http_error(lambda: _get(service, "/tickets/T-2")).code == 404


def test_repeated_idempotency_key_returns_the_same_ticket(service: ToolService) -> None:
    """A repeated Idempotency-Key answers 200 with the first ticket and creates nothing."""
    body, key = json.dumps(TICKET).encode(), {"Idempotency-Key": "same"}
    first_status, _, first = _raw(service, "POST", "/tickets", body, key)
    again_status, headers, again = _raw(service, "POST", "/tickets", body, key)
    assert (first_status, again_status) == (201, 200)
    assert headers["Idempotent-Replayed"] == "true"
    assert json.loads(again) == json.loads(first)
    assert len(service.created("tickets")) == 1


def test_posts_without_a_key_create_separate_tickets(service: ToolService) -> None:
    """Without an Idempotency-Key every POST is a new write: T-1, then T-2."""
    assert _post(service, "/tickets", TICKET)["id"] == "T-1"
    assert _post(service, "/tickets", TICKET)["id"] == "T-2"


def test_key_reused_with_another_body_conflicts(service: ToolService) -> None:
    """Reusing an Idempotency-Key with a different body answers 409 and writes nothing."""
    _post(service, "/tickets", TICKET, key="k")
    changed = {**TICKET, "title": "something else"}
    assert _http_error(lambda: _post(service, "/tickets", changed, key="k")).code == 409
    assert len(service.created("tickets")) == 1


def test_concurrent_retries_with_one_key_create_one_ticket(service: ToolService) -> None:
    """Eight simultaneous POSTs with the same key all get the same ticket; one is written."""
    barrier = threading.Barrier(8)
    ids: list[str] = []

    def post() -> None:
        barrier.wait()
        ids.append(_post(service, "/tickets", TICKET, key="race")["id"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ids == ["T-1"] * 8
    assert len(service.created("tickets")) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        json.dumps({"title": "no body"}).encode(),
        json.dumps({"title": "", "body": "empty title"}).encode(),
        json.dumps({**TICKET, "id": "T-99"}).encode(),
    ],
    ids=["empty", "not-json", "array", "missing-field", "blank-field", "reserved-field"],
)
def test_invalid_ticket_body_is_unprocessable(service: ToolService, body: bytes) -> None:
    """A body that is not a valid ticket answers 422 and writes nothing."""
    status, _, _ = _raw(service, "POST", "/tickets", body)
    assert status == 422
    assert service.created("tickets") == []


def test_email_is_idempotent_and_reconcilable(service: ToolService) -> None:
    """POST /emails honours Idempotency-Key; GET /emails?idempotency_key= finds the email."""
    email = _post(service, "/emails", EMAIL, key="report-2024-04")
    assert email["id"] == "E-1"
    assert email["status"] == "queued"
    assert _post(service, "/emails", EMAIL, key="report-2024-04") == email
    assert _get(service, "/emails?idempotency_key=report-2024-04") == {"emails": [email]}
    assert len(service.created("emails")) == 1


def test_reconcile_check_for_an_unknown_key_is_empty(service: ToolService) -> None:
    """The reconcile check answers an empty list, not 404, for a key never seen."""
    assert _get(service, "/tickets?idempotency_key=never") == {"tickets": []}


# Faults


def test_injected_503_carries_retry_after(service: ToolService) -> None:
    """An injected 503 reaches the client as an HTTPError with its Retry-After header."""
    service.inject("GET /search", Fault(status=503, retry_after=7))
    error = _http_error(lambda: _get(service, "/search?q=x"))
    assert error.code == 503
    assert error.headers["Retry-After"] == "7"
    assert json.loads(error.read())["status"] == 503


def test_injected_429_sends_fractional_retry_after(service: ToolService) -> None:
    """A fractional retry_after is sent as written, so tests need not wait whole seconds."""
    service.inject("GET /search", Fault(status=429, retry_after=0.25))
    error = _http_error(lambda: _get(service, "/search?q=x"))
    assert (error.code, error.headers["Retry-After"]) == (429, "0.25")


def test_text_retry_after_is_sent_verbatim(service: ToolService) -> None:
    """A text retry_after (an HTTP-date, or garbage) is sent unchanged."""
    service.inject("GET /search", Fault(status=503, retry_after="soon-ish"))
    assert _http_error(lambda: _get(service, "/search?q=x")).headers["Retry-After"] == "soon-ish"


def test_faults_are_consumed_in_order_then_the_route_recovers(service: ToolService) -> None:
    """Queued faults meet requests first in first out; an empty queue means normal service."""
    service.inject("GET /orders", Fault(status=500), Fault(), Fault(status=404))
    order = f"/orders/{ORDER_IDS[0]}"
    assert _http_error(lambda: _get(service, order)).code == 500
    assert _get(service, order)["status"] == "shipped"
    assert _http_error(lambda: _get(service, order)).code == 404
    assert _get(service, order)["status"] == "shipped"


def test_faults_stay_on_their_route(service: ToolService) -> None:
    """A fault queued for one route key leaves other routes alone."""
    service.inject("GET /search_snapshot", Fault(status=503))
    assert _get(service, "/search?q=x")["query"] == "x"
    assert _http_error(lambda: _get(service, "/search_snapshot?q=x")).code == 503


def test_outage_fails_everything_until_recover(service: ToolService) -> None:
    """An outage fails every request; queued faults wait and apply after recover()."""
    service.inject("GET /health", Fault(status=429))
    service.outage("GET /health", status=503, retry_after=2)
    for _ in range(3):
        error = _http_error(lambda: _get(service, "/health"))
        assert (error.code, error.headers["Retry-After"]) == (503, "2")
    service.recover("GET /health")
    assert _http_error(lambda: _get(service, "/health")).code == 429
    assert _get(service, "/health") == {"ok": True}


def test_delay_stalls_the_answer(service: ToolService) -> None:
    """A delay fault holds the answer back for at least its delay."""
    service.inject("GET /health", Fault(delay=0.2))
    started = time.monotonic()
    assert _get(service, "/health") == {"ok": True}
    assert time.monotonic() - started >= 0.2


def test_commit_then_delay_hides_a_success_behind_a_timeout(service: ToolService) -> None:
    """The client times out, yet the ticket was written and the reconcile check finds it."""
    # The stall ends when the service stops: long enough that no loaded machine's client,
    # waiting 0.2 s, is scheduled late enough to find the answer already there.
    service.inject("POST /tickets", Fault(commit_then_delay=60))
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        _post(service, "/tickets", TICKET, key="hidden", timeout=0.2)
    found = _get(service, "/tickets?idempotency_key=hidden")["tickets"]
    assert [ticket["id"] for ticket in found] == ["T-1"]


def test_status_fault_on_a_post_writes_nothing_by_default(service: ToolService) -> None:
    """An injected error status rejects a POST before its write."""
    service.inject("POST /tickets", Fault(status=500))
    assert _http_error(lambda: _post(service, "/tickets", TICKET)).code == 500
    assert service.created("tickets") == []


def test_status_fault_with_commit_hides_a_write_behind_an_error(service: ToolService) -> None:
    """commit=True with a status writes the ticket and still answers the error."""
    service.inject("POST /tickets", Fault(status=500, commit=True))
    assert _http_error(lambda: _post(service, "/tickets", TICKET, key="k")).code == 500
    assert [ticket["id"] for ticket in service.created("tickets")] == ["T-1"]


def test_malformed_shape_answers_2xx_with_the_wrong_shape(service: ToolService) -> None:
    """A "shape" fault answers valid JSON that is not what the route promises."""
    service.inject("GET /search", Fault(malformed="shape"))
    assert _get(service, "/search?q=x") == {"unexpected": True}


def test_malformed_truncated_raises_a_decode_error(service: ToolService) -> None:
    """A "truncated" fault answers cut-off JSON; request_json raises JSONDecodeError."""
    service.inject("GET /search", Fault(malformed="truncated"))
    with pytest.raises(json.JSONDecodeError):
        _get(service, "/search?q=x")


def test_malformed_post_commits_unless_told_not_to(service: ToolService) -> None:
    """A malformed answer to a POST still writes by default; commit=False writes nothing."""
    service.inject(
        "POST /tickets", Fault(malformed="shape"), Fault(malformed="shape", commit=False)
    )
    status, _, raw = _raw(service, "POST", "/tickets", json.dumps(TICKET).encode())
    assert (status, json.loads(raw)) == (201, {"unexpected": True})
    assert _post(service, "/tickets", TICKET) == {"unexpected": True}
    assert len(service.created("tickets")) == 1


def test_reset_closes_the_connection_without_an_answer(service: ToolService) -> None:
    """A reset fault drops the connection: the client sees a reset, not an HTTP answer."""
    service.inject("GET /search", Fault(reset=True))
    with pytest.raises((ConnectionError, http.client.HTTPException, urllib.error.URLError)):
        _get(service, "/search?q=x")
    assert _get(service, "/search?q=x")["query"] == "x"


def test_reset_with_commit_hides_a_write(service: ToolService) -> None:
    """reset with commit=True writes the ticket, then drops the connection."""
    service.inject("POST /tickets", Fault(reset=True, commit=True))
    with pytest.raises((ConnectionError, http.client.HTTPException, urllib.error.URLError)):
        _post(service, "/tickets", TICKET, key="k")
    assert _get(service, "/tickets?idempotency_key=k")["tickets"][0]["id"] == "T-1"


@pytest.mark.parametrize(
    "options",
    [
        {"status": 200},
        {"status": 600},
        {"status": True},
        {"delay": -1},
        {"delay": float("nan")},
        {"commit_then_delay": float("inf")},
        {"retry_after": 1},
        {"status": 503, "retry_after": -1},
        {"status": 503, "retry_after": "1\r\nX-Injected: yes"},
        {"malformed": "sideways"},
        {"status": 503, "reset": True},
        {"malformed": "shape", "reset": True},
        {"commit_then_delay": 1, "commit": False},
    ],
)
def test_invalid_faults_are_refused(options: dict[str, Any]) -> None:
    """A Fault that cannot mean anything raises ValueError when it is made."""
    with pytest.raises(ValueError, match=r"Fault"):
        Fault(**options)


@pytest.mark.parametrize("route", ["search", "GET search", "get /search", "GET /orders/A-1001"])
def test_malformed_route_keys_are_refused(service: ToolService, route: str) -> None:
    """Route keys are 'METHOD /first-segment'; anything else raises ValueError."""
    with pytest.raises(ValueError, match="route key"):
        service.inject(route, Fault(status=503))


def test_inject_refuses_what_is_not_a_fault(service: ToolService) -> None:
    """inject() takes Fault instances only."""
    with pytest.raises(TypeError):
        service.inject("GET /search", 503)  # type: ignore[arg-type]


# Observability


def test_hits_count_every_remote_attempt(service: ToolService) -> None:
    """hits counts each request that reached a handler, faulted or not, per route key."""
    service.inject("GET /search", Fault(status=503))
    with pytest.raises(urllib.error.HTTPError):
        _get(service, "/search?q=x")
    _get(service, "/search?q=x")
    _get(service, f"/orders/{ORDER_IDS[1]}")
    _get(service, "/tickets?idempotency_key=k")
    assert service.hits == {"GET /search": 2, "GET /orders": 1, "GET /tickets": 1}


def test_hits_is_a_snapshot(service: ToolService) -> None:
    """Changing the returned dict changes nothing in the service."""
    service.hits["GET /health"] = 99
    assert service.hits == {}


def test_reset_forgets_faults_counters_and_data(service: ToolService) -> None:
    """reset() clears queued faults, outages, hits and every record."""
    _post(service, "/tickets", TICKET, key="k")
    _post(service, "/emails", EMAIL)
    service.inject("GET /health", Fault(status=500))
    service.outage("GET /search")
    service.reset()
    assert service.hits == {}
    assert service.created("tickets") == service.created("emails") == []
    assert _get(service, "/health") == {"ok": True}
    assert _get(service, "/search?q=x")["query"] == "x"
    assert _post(service, "/tickets", TICKET, key="k")["id"] == "T-1"


def test_created_refuses_unknown_kinds(service: ToolService) -> None:
    """created() knows tickets and emails only."""
    with pytest.raises(ValueError, match="kind"):
        service.created("orders")


# Lifecycle


def test_url_needs_a_running_service() -> None:
    """url raises before start() and after stop()."""
    service = ToolService()
    with pytest.raises(RuntimeError):
        _ = service.url
    with service:
        assert service.url.startswith("http://127.0.0.1:")
    with pytest.raises(RuntimeError):
        _ = service.url


def test_start_twice_is_refused_and_stop_twice_is_harmless() -> None:
    """A running service cannot start again; stopping a stopped one does nothing."""
    service = ToolService().start()
    try:
        with pytest.raises(RuntimeError):
            service.start()
    finally:
        service.stop()
    service.stop()


def _stop_without_hanging(service: ToolService) -> None:
    """Call ``service.stop()``; fail if it has not returned within the hang guard."""
    stopper = threading.Thread(target=service.stop, daemon=True)
    stopper.start()
    stopper.join(HANG_GUARD)
    assert not stopper.is_alive(), "stop() hung"


def test_stop_is_prompt_while_a_handler_is_delayed() -> None:
    """stop() wakes a handler stalled by a delay and returns without waiting it out.

    No clock: the delay is longer than the hang guard, so a stop() that waited for it
    would fail the guard; the stalled client sees its connection dropped, unanswered.
    """
    service = ToolService().start()
    url = f"{service.url}/search?q=x"
    service.inject("GET /search", Fault(delay=100 * HANG_GUARD))
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            request_json("GET", url, timeout=2 * HANG_GUARD)
        except Exception as exc:  # noqa: BLE001 - the test inspects whatever the client saw
            outcome.append(exc)

    client = threading.Thread(target=call)
    client.start()
    _wait_for(lambda: service.hits.get("GET /search") == 1)
    _stop_without_hanging(service)
    client.join(HANG_GUARD)
    assert not client.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], ConnectionError | http.client.HTTPException)
    assert service.errors == ()


def test_stop_leaves_no_threads_behind(service: ToolService) -> None:
    """After stop() neither the server thread nor any handler thread is alive."""
    service.inject("POST /tickets", Fault(commit_then_delay=30))
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        _post(service, "/tickets", TICKET, timeout=0.1)
    service.stop()
    assert [t.name for t in threading.enumerate() if t.name.startswith("toolservice")] == []


def test_stop_does_not_wait_for_a_silent_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that connects and never sends a request does not hold stop() up.

    No clock: the handler's own read timeout is made longer than the hang guard, so while
    the silent client stays connected only stop() can end its handler thread.
    """
    monkeypatch.setattr(_Handler, "timeout", 100 * HANG_GUARD)
    service = ToolService().start()
    port = int(service.url.rsplit(":", 1)[1])

    def handlers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("toolservice")]

    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD):
        _wait_for(lambda: any(t.name.startswith("toolservice-handler") for t in handlers()))
        _stop_without_hanging(service)
        _wait_for(lambda: not handlers())  # ended by stop(), the client still connected
    assert not handlers()


def test_a_handler_bug_answers_500_quietly(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """An exception inside a handler becomes a 500 and an entry in errors, never a traceback."""

    def broken(self: ToolService, request: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(ToolService, "_dispatch", broken)
    with ToolService() as service:
        assert _http_error(lambda: _get(service, "/health")).code == 500
        assert service.errors == ("RuntimeError: boom",)
    assert capfd.readouterr().err == ""


def test_a_stopped_service_starts_again_with_its_data() -> None:
    """start() after stop() serves again, on a new port, with the records kept."""
    with ToolService() as service:
        _post(service, "/tickets", TICKET)
    with service:
        assert [ticket["id"] for ticket in _get(service, "/tickets")["tickets"]] == ["T-1"]


def test_request_json_refuses_non_http_urls() -> None:
    """request_json only speaks http and https."""
    with pytest.raises(ValueError, match="http"):
        request_json("GET", "file:///etc/passwd", timeout=1)


def test_slow_proxy_holds_every_request_and_forwards_the_answer():
    """SlowProxy makes a real server slow: the answer comes back whole, after the delay."""
    from toolbreaker.testing._proxy import SlowProxy

    with ToolService() as service, SlowProxy(int(service.url.rsplit(":", 1)[1]), 0.2) as proxy:
        started = time.monotonic()
        answer = request_json("GET", proxy.url("http", "/health"), timeout=5)
        waited = time.monotonic() - started
    assert answer == {"ok": True}
    assert waited >= 0.2  # held at least once: a lower bound, never a timing upper bound


# -- the model route: OpenAI chat completions ----------------------------------------------


def test_chat_completions_echo_the_last_user_message_with_word_count_usage(service):
    """``POST /v1/chat/completions`` answers a chat.completion: the model asked, the last
    user message echoed, tokens counted as words."""
    body = {
        "model": "gpt-local",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ],
    }
    answer = request_json(
        "POST", f"{service.url}/v1/chat/completions", body=body, timeout=HANG_GUARD
    )
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "gpt-local"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "echo: hello there"}
    assert answer["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert service.hits == {CHAT_ROUTE: 1}


def test_a_chat_body_without_messages_is_a_400_with_an_openai_error(service):
    with pytest.raises(urllib.error.HTTPError) as caught:
        request_json("POST", f"{service.url}/v1/chat/completions", body={}, timeout=HANG_GUARD)
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["error"]["type"] == "invalid_request_error"


def test_chat_faults_are_scripted_on_the_chat_route(service):
    """A scripted 400 carries the OpenAI error body it was given."""
    service.inject(CHAT_ROUTE, Fault(status=400, body=openai_error("context length exceeded")))
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(urllib.error.HTTPError) as caught:
        request_json("POST", f"{service.url}/v1/chat/completions", body=body, timeout=HANG_GUARD)
    assert json.loads(caught.value.read())["error"]["message"] == "context length exceeded"
