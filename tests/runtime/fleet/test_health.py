"""Active health checks against the real fault-injecting ToolService (one process).

Two processes sharing a key, and a checker's process killed, are in
``tests/stores/test_fleet.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from toolbreaker import Breaker, Policy, Registry
from toolbreaker.core._breaker.state import CLOSED, OPEN
from toolbreaker.errors import CircuitOpen, PolicyError
from toolbreaker.runtime._breaker._boundary import HealthCheck
from toolbreaker.runtime._fleet._health import HealthChecker
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import ToolService, request_json


def wait_for(predicate, *, seconds: float = 20.0) -> None:
    """Bounded polling: never a timed assertion."""
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def sheet(tmp_path: Path, service: ToolService, **extra: str) -> Path:
    check = extra.get("check", f'url = "{service.url}/health", ')
    text = f"""\
[defaults]
timeout_ms = 1000
enforce = "cooperative"

[search.read]
failure_threshold = 2
cooldown_ms = 50
success_threshold = 2
health_check = {{ {check}interval_ms = 20, timeout_ms = 500 }}
"""
    path = tmp_path / "sheet.toml"
    path.write_text(text)
    return path


def search(service: ToolService):
    return lambda: request_json("GET", f"{service.url}/search?q=cable", timeout=1.0)


def open_it(breaker: Breaker, service: ToolService) -> None:
    for _ in range(2):
        with pytest.raises(Exception):  # noqa: B017 - the 503 as the client raises it
            breaker.call(search(service))
    assert breaker.state.phase == OPEN


def test_the_checker_closes_a_healed_breaker_with_zero_user_calls(tmp_path, service):
    """Open, heal, and the checker's probes close it: no user call reached the service."""
    service.outage("GET /search")
    service.outage("GET /health")
    registry = Registry.from_toml(sheet(tmp_path, service))
    breaker = registry.get("search", "read")
    assert breaker.policy.probes == "health-check"
    checker = registry.health_checker
    assert checker is not None  # started by get() for a row with a health check
    open_it(breaker, service)
    user_calls = service.hits["GET /search"]
    wait_for(lambda: checker.stats.failed >= 2)  # the dead service keeps it open
    assert breaker.state.phase != CLOSED
    service.recover("GET /search")
    service.recover("GET /health")
    wait_for(lambda: breaker.state.phase == CLOSED)
    assert service.hits["GET /search"] == user_calls
    assert checker.stats.passed >= 2
    assert breaker.call(search(service))["query"] == "cable"
    registry.close()


def test_a_dead_service_stays_open_and_no_user_call_reaches_it(tmp_path, service):
    """Past the cooldown, user calls are rejected locally while the checks fail."""
    service.outage("GET /search")
    service.outage("GET /health")
    registry = Registry.from_toml(sheet(tmp_path, service))
    breaker = registry.get("search", "read")
    open_it(breaker, service)
    user_calls = service.hits["GET /search"]
    checker = registry.health_checker
    assert checker is not None
    for _ in range(5):
        wait_for(lambda: checker.stats.failed >= 1)
        with pytest.raises(CircuitOpen) as info:
            breaker.call(search(service))
        assert info.value.reason in ("cooldown", "probe-limit")
    wait_for(lambda: checker.stats.failed >= 4)
    assert service.hits["GET /search"] == user_calls
    assert service.hits["GET /health"] >= 4
    assert breaker.state.phase != CLOSED
    registry.close()


def test_a_check_registered_in_code_runs_and_its_faults_are_failed_probes(tmp_path, service):
    """Raising, returning False and hanging checks are failed probes; the checker lives on."""
    registry = Registry.from_toml(sheet(tmp_path, service, check=""))
    registry.start_health_checks()
    mode = {"now": "raise"}
    release = threading.Event()

    def check() -> bool:
        if mode["now"] == "raise":
            raise RuntimeError("boom sk-live-abcdefabcdef0123")
        if mode["now"] == "hang":
            release.wait(30)
        return mode["now"] != "false"

    registry.health_check("search", check, operation="read")
    breaker = registry.get("search", "read")
    service.outage("GET /search")
    open_it(breaker, service)
    checker = registry.health_checker
    assert checker is not None
    wait_for(lambda: checker.stats.failed >= 1)
    mode["now"] = "false"
    failed = checker.stats.failed
    wait_for(lambda: checker.stats.failed > failed)
    mode["now"] = "hang"
    wait_for(lambda: checker.stats.timeouts >= 1 and checker.stats.hung >= 1)
    assert breaker.state.phase != CLOSED
    mode["now"] = "ok"
    release.set()
    wait_for(lambda: breaker.state.phase == CLOSED)
    assert checker.stats.errors == 0
    registry.close()


def test_the_async_flavour_runs_on_the_loop(tmp_path, service):
    """start_health_checks(on_loop=True): an async check awaited on the running loop."""
    healthy = {"now": False}
    loops = []

    async def check() -> bool:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return healthy["now"]

    async def main() -> None:
        registry = Registry.from_toml(sheet(tmp_path, service, check=""))
        checker = registry.start_health_checks(on_loop=True)
        registry.health_check("search", check, operation="read")
        breaker = registry.get("search", "read")
        service.outage("GET /search")
        for _ in range(2):
            with pytest.raises(Exception):  # noqa: B017
                await breaker.acall(asyncio.to_thread, search(service))
        while checker.stats.failed < 1:
            await asyncio.sleep(0.01)
        healthy["now"] = True
        while breaker.state.phase != CLOSED:
            await asyncio.sleep(0.01)
        assert set(loops) == {asyncio.get_running_loop()}
        registry.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_transitions_of_a_health_probe_say_so(tmp_path, service):
    """The checker's request is a probe like any other, marked health_check in receipts."""
    registry = Registry.from_toml(sheet(tmp_path, service))
    breaker = registry.get("search", "read")
    seen = []
    breaker.add_listener(lambda record, _: seen.append(record))
    service.outage("GET /search")
    open_it(breaker, service)
    wait_for(lambda: breaker.state.phase == CLOSED)
    probes = [r for r in seen if r.reason == "probe-admitted"]
    assert probes
    assert all(r.event.health_check for r in probes)
    assert all(r.event.to_dict()["health_check"] is True for r in probes)
    assert [r.reason for r in seen].count("probe-quorum") == 1
    registry.close()


def test_without_a_checker_the_breaker_waits_fail_closed():
    """A row whose check never runs never lets a user call probe: it stays open."""
    clock_ms = [0]
    breaker = Breaker(
        "d",
        policy=Policy(failure_threshold=1, cooldown_ms=10),
        health_check=HealthCheck(check=lambda: True),
        timeout=1.0,
        enforce="cooperative",
        clock=lambda: clock_ms[0],
    )
    with pytest.raises(ConnectionError):
        breaker.call(lambda: (_ for _ in ()).throw(ConnectionError("down")))
    clock_ms[0] = 1000
    with pytest.raises(CircuitOpen) as info:
        breaker.call(lambda: 1)
    assert info.value.reason == "cooldown"
    assert info.value.retry_after_ms is None
    checker = HealthChecker(lambda: [breaker])
    assert checker.check_once() == 1  # the first check is a probe
    assert checker.check_once() == 0  # the next one waits for its interval
    checker.stop()


def test_a_store_without_records_checks_without_a_lease():
    """MemoryStore keeps records; a plain Store is one process's: the check just runs."""
    store = MemoryStore()
    breaker = Breaker(
        "d",
        policy=Policy(failure_threshold=1, cooldown_ms=1, success_threshold=1),
        health_check=lambda: True,
        store=store,
        timeout=1.0,
        enforce="cooperative",
    )
    with pytest.raises(ConnectionError):
        breaker.call(lambda: (_ for _ in ()).throw(ConnectionError("down")))
    checker = HealthChecker(lambda: [breaker])
    wait_for(lambda: checker.check_once() == 1)
    assert breaker.state.phase == CLOSED
    assert store.record_get("toolbreaker.health", "d") is not None  # the lease, held
    checker.stop()
    assert store.record_get("toolbreaker.health", "d") is None  # and given up


@pytest.mark.parametrize(
    ("table", "field", "line"),
    [
        ("{ interval_ms = 0, timeout_ms = 500 }", "search.read.health_check.interval_ms", 8),
        ('{ url = "ftp://x", timeout_ms = 500 }', "search.read.health_check.url", 8),
        ("{ interval = 5 }", "search.read.health_check.interval", 8),
        ("{ timeout_ms = 99000 }", "search.read.health_check.timeout_ms", 8),
        ('"http://x"', "search.read.health_check", 8),
    ],
)
def test_sheet_errors_name_the_field_and_line(tmp_path, table, field, line):
    """A bad health_check table is a located PolicyError."""
    path = tmp_path / "s.toml"
    path.write_text(
        "[defaults]\ntimeout_ms = 1000\n\n[search.read]\nfailure_threshold = 2\n"
        "lease_ttl_ms = 30000\n\nhealth_check = " + table + "\n"
    )
    with pytest.raises(PolicyError) as info:
        Registry.from_toml(path)
    assert info.value.field == field
    assert info.value.line == line


def test_probes_health_check_needs_a_health_check():
    """The policy flag alone would leave nothing to probe: refused."""
    with pytest.raises(PolicyError) as info:
        Breaker("d", policy=Policy(probes="health-check"), timeout=1.0)
    assert info.value.field == "probes"


def test_a_probe_orphaned_by_a_dead_checker_does_not_stall_the_checks():
    """A probe lease nobody settles expires through the checker's next request."""
    clock_ms = [0]
    breaker = Breaker(
        "d",
        policy=Policy(failure_threshold=1, cooldown_ms=10, lease_ttl_ms=1000, success_threshold=1),
        health_check=HealthCheck(check=lambda: True, interval_ms=10),
        timeout=0.5,
        enforce="cooperative",
        clock=lambda: clock_ms[0],
    )
    with pytest.raises(ConnectionError):
        breaker.call(lambda: (_ for _ in ()).throw(ConnectionError("down")))
    clock_ms[0] = 100
    orphan = breaker.health_probe()  # its process "dies": never settled
    assert orphan.admitted
    checker = HealthChecker(lambda: [breaker])
    assert checker.check_once() == 0  # the one probe slot is taken
    clock_ms[0] = 1100  # the orphan's lease is due
    wait_for(lambda: (checker.check_once(), breaker.state.phase == OPEN)[1])
    clock_ms[0] = 60_000  # past the longer cooldown
    wait_for(lambda: checker.check_once() == 1)
    assert breaker.state.phase == CLOSED
    checker.stop()
