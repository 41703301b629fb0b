"""The fault proxy in front of the real local tool service, and the plain tool wrapper.

Every request crosses two real sockets (client -> proxy -> service); what the service
saw is read from the service itself (its hits and created records), what the proxy
counted from its ledger.
"""

from __future__ import annotations

import urllib.error

import pytest

from toolbreaker import Breaker, Policy, classify_exception
from toolbreaker.testing import ToolService, force_state, request_json
from toolbreaker.testing._fault_proxy import FaultProxy, InjectedFault, Ledger, wrap_tool
from toolbreaker.testing._scenario import parse_scenario

TIMEOUT = 0.3
TICKET = {"title": "Broken cable", "body": "for c-1842"}


def scenario(faults: str, extra: str = ""):
    return parse_scenario(f"timeout = {TIMEOUT}\n{extra}\n{faults}", "test.toml")


#: A fault on a route the tests never call: a scenario scripts at least one.
ELSEWHERE = '[faults.elsewhere]\nroute = "GET /elsewhere"\nkind = "outage"\n'


def proxied(service: ToolService, faults: str, extra: str = ""):
    ledger = Ledger(scenario(faults, extra))
    return ledger, FaultProxy(ledger, service.url)


def status_of(url: str, method: str = "GET", **kwargs) -> urllib.error.HTTPError:
    """The error status a request is answered with (a generous timeout: the answer is
    what is tested, and a loaded machine can take longer than the scenario's deadline)."""
    with pytest.raises(urllib.error.HTTPError) as info:
        request_json(method, url, timeout=5, **kwargs)
    return info.value


def test_requests_without_a_fault_reach_the_service_unchanged(service):
    """No fault on these routes: answers are the service's, status, headers and body."""
    ledger, proxy = proxied(service, ELSEWHERE)
    with proxy:
        found = request_json("GET", f"{proxy.url}/orders/A-1001", timeout=5)
        created = request_json("POST", f"{proxy.url}/tickets", body=TICKET, timeout=5)
        missing = status_of(f"{proxy.url}/orders/Z-9")
    assert found["carrier"] == "UPS"
    assert created["id"] == "T-1"
    assert missing.code == 404
    assert service.hits == {"GET /orders": 2, "POST /tickets": 1}
    (elsewhere, orders, tickets) = sorted(ledger.counts(), key=lambda t: t.target)
    assert elsewhere.attempts == 0
    assert (orders.attempts, orders.failed) == (2, 0)
    assert (tickets.commits, tickets.duplicates) == (1, 0)


def test_outage_rate_limit_and_credential_never_reach_the_service(service):
    """503, 429 with Retry-After and 401 are answered by the proxy; the service sees none."""
    faults = """
[faults.down]
route = "GET /search"
kind = "outage"
[faults.throttled]
route = "GET /orders"
kind = "rate-limit"
retry_after = 30
[faults.denied]
route = "POST /emails"
kind = "credential"
status = 403
"""
    ledger, proxy = proxied(service, faults)
    with proxy:
        down = status_of(f"{proxy.url}/search?q=cable")
        throttled = status_of(f"{proxy.url}/orders/A-1001")
        denied = status_of(f"{proxy.url}/emails", "POST", body={"to": "a@b.c", "template": "t"})
    assert (down.code, throttled.code, denied.code) == (503, 429, 403)
    assert throttled.headers["Retry-After"] == "30"
    assert service.hits == {}
    assert [t.failed for t in ledger.counts()] == [1, 1, 1]


def test_an_outage_after_n_good_steps(service):
    """``after = 2``: two searches pass, the third and later fail."""
    ledger, proxy = proxied(
        service, '[faults.late]\nroute = "GET /search"\nkind = "outage"\nafter = 2\n'
    )
    with proxy:
        for _ in range(2):
            request_json("GET", f"{proxy.url}/search?q=cable", timeout=5)
        assert status_of(f"{proxy.url}/search?q=cable").code == 503
    assert service.hits["GET /search"] == 2
    (search,) = ledger.counts()
    assert (search.attempts, search.failed) == (3, 1)


def test_slow_holds_past_the_deadline_and_never_forwards(service):
    """A slow request times the client out and never reaches the service."""
    ledger, proxy = proxied(service, '[faults.hang]\nroute = "GET /search"\nkind = "slow"\n')
    with proxy, pytest.raises(TimeoutError):
        request_json("GET", f"{proxy.url}/search?q=cable", timeout=TIMEOUT)
    assert service.hits == {}
    assert ledger.counts()[0].failed == 1


@pytest.mark.parametrize("kind", ["commit-then-timeout", "late-success"])
def test_a_write_hidden_behind_a_timeout_is_committed_once(service, kind):
    """The write is carried out, the client times out; a retry with the same key is the
    service's replay, not a second commit; a retry without a key is a duplicate."""
    faults = f'[faults.lost]\nroute = "POST /tickets"\nkind = "{kind}"\nsteps = [1, 3]\n'
    ledger, proxy = proxied(service, faults)
    key = {"Idempotency-Key": "k-1"}
    with proxy:
        with pytest.raises(TimeoutError):
            request_json("POST", f"{proxy.url}/tickets", body=TICKET, headers=key, timeout=TIMEOUT)
        replay = request_json("POST", f"{proxy.url}/tickets", body=TICKET, headers=key, timeout=5)
        with pytest.raises(TimeoutError):  # no key: a new ticket, behind a timeout again
            request_json("POST", f"{proxy.url}/tickets", body=TICKET, timeout=TIMEOUT)
    assert replay["id"] == "T-1"
    assert [t["id"] for t in service.created("tickets")] == ["T-1", "T-2"]
    (tickets,) = ledger.counts()
    assert (tickets.attempts, tickets.failed, tickets.commits) == (3, 2, 2)
    assert tickets.duplicates == 1
    assert ledger.committed_keys == ["k-1"]


@pytest.mark.parametrize(("how", "decodes"), [("shape", True), ("truncated", False)])
def test_malformed_success(service, how, decodes):
    """200 with the wrong shape, or cut-off JSON; the request was carried out."""
    faults = f'[faults.bad]\nroute = "GET /search"\nkind = "malformed"\nmalformed = "{how}"\n'
    _ledger, proxy = proxied(service, faults)
    with proxy:
        if decodes:
            assert request_json("GET", f"{proxy.url}/search?q=x", timeout=5) == {"unexpected": True}
        else:
            with pytest.raises(ValueError, match=r"Expecting|Unterminated|delimiter"):
                request_json("GET", f"{proxy.url}/search?q=x", timeout=5)
    assert service.hits["GET /search"] == 1


def test_attempts_while_a_fed_breaker_is_open_are_counted(service):
    """Once a breaker opened after the route failed, each request that still reaches the
    route while it rejects callers is counted as an attempt after the opening."""
    ledger, proxy = proxied(service, '[faults.down]\nroute = "GET /search"\nkind = "outage"\n')
    breaker = Breaker("catalog", policy=Policy(failure_threshold=1))
    with proxy:
        status_of(f"{proxy.url}/search?q=a")
        force_state(breaker, "open")
        ledger.opened(breaker)
        status_of(f"{proxy.url}/search?q=b")  # a second tool over the same route
        request_json("GET", f"{proxy.url}/orders/A-1001", timeout=5)  # another route
        force_state(breaker, "half_open")
        status_of(f"{proxy.url}/search?q=c")  # a probe is not a leak
    counts = {t.target: t for t in ledger.counts()}
    assert counts["GET /search"].after_open == 1
    assert counts["GET /orders"].after_open == 0


def test_the_resumed_run_gets_no_fault_and_records_its_writes(service):
    """After resume(), faults are off and commits are the resumed run's."""
    ledger, proxy = proxied(service, '[faults.down]\nroute = "POST /tickets"\nkind = "outage"\n')
    with proxy:
        assert status_of(f"{proxy.url}/tickets", "POST", body=TICKET).code == 503
        ledger.resume()
        request_json("POST", f"{proxy.url}/tickets", body=TICKET, timeout=5)
    assert ledger.committed_actions == []
    assert len(ledger.resumed_actions) == 1


def test_the_proxy_answers_502_when_the_service_is_gone(service):
    """An upstream that refuses connections is a 502, not a hang."""
    ledger = Ledger(scenario(ELSEWHERE))
    url = service.url
    service.stop()
    with FaultProxy(ledger, url) as proxy:
        assert status_of(f"{proxy.url}/search?q=x").code == 502


def test_the_proxy_needs_an_http_upstream():
    with pytest.raises(ValueError, match="http://"):
        FaultProxy(Ledger(scenario(ELSEWHERE)), "ftp://example")


# -- plain Python tools ---------------------------------------------------------------------


def test_wrapped_tool_faults_are_classified_like_http_ones():
    """An outage and a 429 raise InjectedFault with a status the classifier reads (the
    429's Retry-After included); a credential failure is not the dependency's fault."""
    faults = """
[faults.down]
tool = "lookup"
kind = "outage"
steps = [1]
[faults.throttled]
tool = "lookup"
kind = "rate-limit"
retry_after = 7
steps = [2]
[faults.denied]
tool = "lookup"
kind = "credential"
steps = [3]
"""
    ledger = Ledger(scenario(faults))
    calls = []
    lookup = wrap_tool(ledger, "lookup", lambda sku: calls.append(sku) or {"sku": sku})
    verdicts = []
    for _ in range(3):
        with pytest.raises(InjectedFault) as info:
            lookup(sku="S-1")
        verdicts.append(classify_exception(info.value))
    assert lookup(sku="S-1") == {"sku": "S-1"}
    assert calls == ["S-1"]
    assert [v.kind for v in verdicts] == ["failure", "failure", "ignored"]
    assert verdicts[1].retry_after_ms == 7000
    assert ledger.counts()[0].failed == 3


def test_wrapped_write_commits_then_times_out_and_duplicates_are_counted():
    """commit-then-timeout runs the write, then raises TimeoutError; the same business
    action again is a duplicate, whatever its wording."""
    faults = (
        '[faults.lost]\ntool = "refund"\nkind = "commit-then-timeout"\nsteps = [1]\ndelay = 0.31\n'
    )
    ledger = Ledger(scenario(faults, '[business_key]\nrefund = ["order"]'))
    done = []
    refund = wrap_tool(ledger, "refund", lambda order, note: done.append(order), write=True)
    with pytest.raises(TimeoutError):
        refund(order="A-1", note="first")
    refund(order="a-1 ", note="reworded")
    assert done == ["A-1", "a-1 "]
    (counted,) = ledger.counts()
    assert (counted.commits, counted.duplicates) == (2, 1)


def test_wrapped_malformed_and_slow():
    """malformed returns the wrong shape after running; slow raises without running."""
    faults = """
[faults.bad]
tool = "quote"
kind = "malformed"
steps = [1]
[faults.hang]
tool = "quote"
kind = "slow"
delay = 0.31
steps = [2]
"""
    ledger = Ledger(scenario(faults))
    ran = []
    quote = wrap_tool(ledger, "quote", lambda: ran.append(1) or {"price": 1})
    assert quote() == {"unexpected": True}
    with pytest.raises(TimeoutError):
        quote()
    assert ran == [1]
