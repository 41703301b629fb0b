"""The dashboard end to end: a real server, real stores and Debian's headless Chromium.

Chromium comes from the Debian package (installed here when missing, as root, like
redis-server for the store tests); Playwright only drives it and never downloads a
browser. Waits are bounded (a broken page fails rather than hangs) but nothing asserts a
duration. Screenshots go to the test's directory, or to ``$TOOLBREAKER_SCREENSHOTS``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dashboard_api import defaults_and_unknown, incident

from chromium import CHROMIUM_ARGS, chromium
from stream_helpers import (  # noqa: F401 - close_opened is an autouse fixture
    Server,
    Unavailable,
    close_opened,
    closing,
    eventually,
    fail,
    opened,
)
from toolbreaker import Breaker, Budget, GuardedTool, Policy, Registry, RunGuard
from toolbreaker.cli._board import Board
from toolbreaker.cli._dashboard import store_actor
from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher
from toolbreaker.stores import SQLiteStore

pytestmark = pytest.mark.slow
uvicorn = pytest.importorskip("uvicorn")
playwright_api = pytest.importorskip("playwright.sync_api")

WAIT_MS = 20_000
SECRET = "sk-live-abcdefghijklmnopqrstuvwx"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium()
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    yield opened
    context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("TOOLBREAKER_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "api/action", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_the_page_loads_1000_breakers(page, shots):
    """A thousand breakers of a running process (memory stream) are all on the page."""
    stream = MemoryStream()
    publisher = StreamPublisher(stream)
    breakers = Registry(default_timeout=1.0, default_enforce="cooperative", max_breakers=2000)
    for n in range(1_000):
        breaker = breakers.get(f"service-{n:04d}", "read" if n % 2 else "write")
        publisher.attach(breaker)
        breaker.call(lambda: "ok")
    with Server(stream) as server:
        page.goto(server.url)
        page.wait_for_selector("#breakers tbody tr:nth-child(1000)")
        # Measured in the page (navigation start to the first full table), not asserted.
        loaded = int(page.get_attribute("body", "data-first-full") or 0)
        print(f"\n1,000 breakers on the page {loaded} ms after navigation started")
        assert "1000 breakers" in page.inner_text("#summary")
        page.screenshot(path=str(shots / "dashboard-1000.png"))


def test_a_breaker_opens_and_closes_live(page, shots, tmp_path):
    """Real failures through a real SQLite store show as open, then a probe closes it;
    the page updates by itself, and the last transitions carry their receipt fields."""
    path = tmp_path / "breakers.db"
    url = f"sqlite://{path}"
    policy = Policy(failure_threshold=2, cooldown_ms=400, cooldown_max_ms=400, success_threshold=1)
    breakers = Registry(
        policy, store=closing(SQLiteStore(path)), default_timeout=5.0, default_enforce="cooperative"
    )
    publisher = StreamPublisher(opened(url))
    search = breakers.get("search", "read", tool="search_catalog")
    orders = breakers.get("orders", "write", tool="create_order")
    publisher.attach(search, orders)
    orders.call(lambda: "ok")
    for name, operation in (("billing", "read"), ("billing", "write"), ("crm", "read")):
        other = breakers.get(name, operation)
        publisher.attach(other)
        other.call(lambda: "ok")
    guard = RunGuard("refund-42")
    publisher.attach(guard)
    guard.stop(f"operator stop: the agent pasted api_key={SECRET} into a ticket")
    with Server(opened(url)) as server:
        page.goto(server.url)
        page.wait_for_selector('tr[data-key="orders:write"][data-phase="closed"]')
        for _ in range(2):
            with pytest.raises(Unavailable):
                search.call(fail)
        assert search.guard(lambda: "ok")()["tool_unavailable"]
        row = page.wait_for_selector('tr[data-key="search:read"][data-phase="open"]')
        row.click()
        page.wait_for_selector("#transitions tbody tr")
        signals = page.wait_for_selector("#detail-signals:has-text('re-calls')").inner_text()
        assert "failures by class http-503: 2" in signals
        detail = page.inner_text("#transitions")
        assert "qualifying-failure" in detail
        assert "http-503" in detail
        assert "2 failures · 0.4 s" in detail  # the policy by what it does
        titles = page.eval_on_selector_all("#transitions td[title]", "els => els.map(e => e.title)")
        assert f"policy version {policy.version}" in titles  # its version: the tooltip
        assert "cooldown" in detail
        page.wait_for_selector("#findings [data-rule='model-recalls']")
        page.wait_for_selector('.stop[data-task="refund-42"]')
        assert SECRET not in page.content()
        page.screenshot(path=str(shots / "dashboard.png"), full_page=True)
        while search.retry_after_ms():  # the cooldown passes on the store's clock
            time.sleep(0.05)
        assert search.call(lambda: "ok") == "ok"
        page.wait_for_selector('tr[data-key="search:read"][data-phase="closed"]')
        assert "half_open → closed" in page.inner_text("#transitions")
        page.screenshot(path=str(shots / "dashboard-closed.png"), full_page=True)


def test_a_stop_packet_shows_masked(page):
    """A run guard's stop reaches the page with its packet; the secret never does."""
    stream = MemoryStream()
    guard = RunGuard("refund-42")
    StreamPublisher(stream).attach(guard)
    guard.stop(f"operator stop: the agent pasted api_key={SECRET} into a note")
    with Server(stream) as server:
        page.goto(server.url)
        stop = page.wait_for_selector('.stop[data-task="refund-42"]')
        text = stop.inner_text()
        assert "[REDACTED]" in text
        assert SECRET not in page.content()


def test_actions_need_the_token_and_this_origin(page, tmp_path):
    """Isolate without the token is refused on the page and changes nothing; from
    another origin it is refused too; with the token it isolates through the store."""
    path = tmp_path / "breakers.db"
    url = f"sqlite://{path}"
    store = closing(SQLiteStore(path))
    breakers = Registry(store=store, default_timeout=5.0, default_enforce="cooperative")
    search = breakers.get("search", "read")
    StreamPublisher(opened(url)).attach(search)
    search.call(lambda: "ok")
    stream, board = opened(url), Board()
    actor = closing(store_actor(url, board, stream))
    with Server(stream, actor=actor, token="t0ken", board=board) as server:
        page.goto(server.url)
        page.click('tr[data-key="search:read"]')
        page.fill("#reason", "provider incident 123")
        page.click("#isolate")
        page.wait_for_selector("#action-result.refused")
        assert "token" in page.inner_text("#action-result")
        assert search.state.phase == "closed"

        body = {"key": "search:read", "action": "isolate", "reason": "x"}
        evil = {"Origin": "http://evil.example", "Content-Type": "application/json"}
        status, answer = post(server.url, body, {**evil, "X-Toolbreaker-Token": "t0ken"})
        assert status == 403
        assert "cross-site" in answer["error"]
        own = {"Origin": server.url.rstrip("/"), "Content-Type": "text/plain"}
        assert post(server.url, body, {**own, "X-Toolbreaker-Token": "t0ken"})[0] == 415
        assert search.state.phase == "closed"

        page.fill("#token", "t0ken")
        page.click("#isolate")
        page.wait_for_selector("#action-result.done")
        page.wait_for_selector('tr[data-key="search:read"][data-phase="open"]')
        assert eventually(lambda: search.state.isolated)
        assert "operator:provider incident 123" in page.inner_text("#transitions")


def test_read_only_by_default(tmp_path):
    """Without --allow-actions every action is refused, whatever it carries."""
    with Server(MemoryStream()) as server:
        headers = {
            "Origin": server.url.rstrip("/"),
            "Content-Type": "application/json",
            "X-Toolbreaker-Token": "anything",
        }
        status, answer = post(server.url, {"key": "a", "action": "isolate", "reason": "r"}, headers)
        assert status == 403
        assert "read-only" in answer["error"]
        request = urllib.request.Request(server.url, headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
        refused.value.close()


def snapshot_of(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "api/snapshot", timeout=10) as response:
        doc: dict[str, Any] = json.loads(response.read())
        return doc


def test_degradation_choices_and_limit_notices_show_live(page, shots):
    """A saturated bulkhead (real concurrent calls), an isolated ``degrade = ["omit"]``
    row, a stale answer and a run guard's per-turn deferral reach the page through the
    real stream and server: counts beside each breaker's state, the newest in the list
    with time, tool, mode or kind and reason, the stale one with its age; a new choice
    is pushed live; the API has the same counts."""
    stream = MemoryStream()
    publisher = StreamPublisher(stream)
    catalog, _, _ = incident(stream, publisher=publisher)
    notes = RunGuard("triage-7", budget=Budget(max_calls_per_turn=1))
    notes.add_tool(GuardedTool(name="take_note", fn=lambda text: {"kept": text}))  # no breaker
    publisher.attach(notes)
    notes.mark_turn(1)
    notes.call("take_note", {"text": "a"})
    assert notes.call("take_note", {"text": "b"})["deferred"] is True
    with Server(stream) as server:
        page.goto(server.url)
        catalog_row = 'tr[data-key="catalog:read"]'
        page.wait_for_selector(f'{catalog_row}[data-phase="open"] td.degrade:has-text("omit 1")')
        assert page.inner_text(f"{catalog_row} td.limit") == "saturated 1"
        assert page.inner_text('tr[data-key="prices:read"] td.degrade') == "stale 1"
        assert page.inner_text('tr[data-key="orders:read"] td.limit') == "deferred 1"
        assert page.inner_text('tr[data-key="orders:read"] td.degrade') == "\u2013"  # none

        (stale_cells,) = cells(page, '#notices tr[data-name="stale"]')
        stale = "\t".join(stale_cells)
        assert stale_cells[1:6] == ["prices", "get_price", "degradation", "stale", "isolated"]
        assert re.search(r"\bage 1 min \d+ s\b", stale), stale
        assert re.match(r"\d{1,2}:\d{2}:\d{2}", stale)  # its time
        saturated = page.inner_text('#notices tr[data-name="saturated"]')
        assert "search_catalog" in saturated
        assert "bulkhead full (limit 2)" in saturated
        assert "retry after 10 s" in saturated
        deferred = page.inner_text('#notices tr[data-name="deferred"]:has-text("lookup_order")')
        assert "max_calls_per_turn 1 reached" in deferred
        assert "task refund-42" in deferred
        assert "last 10 min" in page.inner_text("#notices-window")
        unbound = page.inner_text("#notices-unbound")
        assert unbound == "run guard limits on tools without a breaker: deferred 1"
        assert "task triage-7" in page.inner_text(
            '#notices tr[data-name="deferred"]:has-text("take_note")'
        )

        assert catalog.guard(lambda: 1, tool="search_catalog")()["degradation"] == "omit"
        page.wait_for_selector(f'{catalog_row} td.degrade:has-text("omit 2")')
        # The same choice again is the same line, counted (identical notices are grouped).
        again = page.wait_for_selector('#notices tr[data-name="omit"][data-count="2"]')
        assert "\u00d72" in again.inner_text()  # x2
        assert len(page.query_selector_all('#notices tr[data-name="omit"]')) == 1
        page.screenshot(path=str(shots / "dashboard-notices.png"), full_page=True)

        rows = {row["key"]: row["notices"] for row in snapshot_of(server.url)["breakers"]}
        assert rows["catalog:read"] == {"degrade": {"omit": 2}, "limit": {"saturated": 1}}
        assert rows["prices:read"] == {"degrade": {"stale": 1}, "limit": {}}
        assert rows["orders:read"] == {"degrade": {}, "limit": {"deferred": 1}}


def test_counts_leave_the_page_when_the_window_passes_without_new_entries(page, shots):
    """No entry arrives after the incident; the server's clock (moved by the test, no
    real wait) passes the 600 s window: the page is pushed the change, the counts beside
    each breaker go, the list keeps the notices, and the page says the window's end."""
    stream = MemoryStream()
    incident(stream)
    newest = max(entry["wall"] for _, entry in stream.read())
    clock = {"now": newest + 1}
    with Server(stream, clock=lambda: clock["now"]) as server:
        page.goto(server.url)
        catalog_row = 'tr[data-key="catalog:read"]'
        page.wait_for_selector(f'{catalog_row} td.limit:has-text("saturated 1")')
        page.wait_for_selector("body[data-as-of]")
        assert page.get_attribute("body", "data-as-of") == str(int(newest + 1))
        assert "up to" in page.inner_text("#notices-window")
        assert "up to" in page.inner_text("#series-window")
        before = page.get_attribute("body", "data-revision")

        clock["now"] = newest + 601
        page.wait_for_selector(f'{catalog_row} td.limit:not(.hot):has-text("\u2013")')
        page.wait_for_selector(f'{catalog_row} td.degrade:not(.hot):has-text("\u2013")')
        assert page.inner_text('tr[data-key="prices:read"] td.degrade') == "\u2013"
        assert page.inner_text('tr[data-key="orders:read"] td.limit') == "\u2013"
        assert page.get_attribute("body", "data-as-of") == str(int(newest + 601))
        assert page.get_attribute("body", "data-revision") != before
        assert page.query_selector('#notices tr[data-name="saturated"]') is not None  # listed
        end = page.evaluate(f"new Date({int(newest + 601)} * 1000).toLocaleTimeString()")
        assert end in page.inner_text("#notices-window")
        page.screenshot(path=str(shots / "dashboard-window-passed.png"), full_page=True)


HOSTILE = "<img src=x onerror=alert(1)>\x1b[31m\u202e\x00"


def test_hostile_names_in_notices_are_shown_inert(page):
    """A dependency and tool named with markup, ESC, a right-to-left override and NUL are
    shown as text, the control characters as visible escapes: no element is made from
    them, no script runs."""
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    stream = MemoryStream()
    breaker = Breaker(HOSTILE, tool=HOSTILE, timeout=5, enforce="cooperative", degrade=["omit"])
    StreamPublisher(stream).attach(breaker)
    breaker.isolate(HOSTILE)
    assert breaker.guard(lambda: 1, tool=HOSTILE)()["degradation"] == "omit"
    shown = "<img src=x onerror=alert(1)>\\x1b[31m\\u202e\\x00"
    with Server(stream) as server:
        page.goto(server.url)
        page.wait_for_selector('#notices tr[data-name="omit"]')
        (omit,) = cells(page, '#notices tr[data-name="omit"]')
        assert omit[1:5] == [shown, shown, "degradation", "omit"]
        assert shown in page.inner_text("#breakers tbody tr")
        # The operator's reason (the same text) is on the row, inert, with who isolated.
        operator = page.inner_text("#breakers tbody tr .operator")
        assert operator == shown
        assert "by " in page.inner_text("#breakers tbody tr .operator.muted")
        page.click("#breakers tbody tr")
        assert shown in page.wait_for_selector("#detail-operator").inner_text()
        assert shown in page.wait_for_selector(f"#detail-key:has-text('{shown[:12]}')").inner_text()
        assert page.evaluate("/[\\u0000\\u001b\\u202e]/.test(document.body.textContent)") is False
        assert page.evaluate("document.images.length") == 0
        assert page.evaluate("/[\\u0000\\u001b\\u202e]/.test(document.body.textContent)") is False
        page.reload()  # the embedded first snapshot renders the same way
        page.wait_for_selector('#notices tr[data-name="omit"]')
        assert page.evaluate("document.images.length") == 0
    assert dialogs == []


def test_an_empty_stream_is_not_shown_as_all_clear(page):
    """A stream nothing was published to: the page says there are no breakers yet and
    that there is nothing to judge, never "nothing crosses a rule of thumb"."""
    with Server(MemoryStream()) as server:
        page.goto(server.url)
        page.wait_for_selector("#no-breakers")
        assert "no breakers in the stream yet" in page.inner_text("#summary")
        assert "nothing crosses" not in page.inner_text("#findings")
        assert "StreamPublisher" in page.inner_text("#findings")


LONG = "payments-gateway-eu-west-1-primary-cluster"
REASON = (
    "provider incident 4411: card network degraded in eu-west-1, failing over to the "
    "secondary processor; on-call payments, see the status page before releasing"
)


def busy(stream: MemoryStream, breakers: int = 150) -> str:
    """A realistic board: the notices incident, many breakers with long names, some open
    with many local rejections, some isolated with a long reason, a run stop; returns the
    key of an open breaker."""
    publisher = StreamPublisher(stream)
    incident(stream, publisher=publisher)
    registry = Registry(
        Policy(failure_threshold=2, cooldown_ms=600_000, cooldown_max_ms=600_000),
        default_timeout=5.0,
        default_enforce="cooperative",
        max_breakers=breakers + 10,
    )
    opened_key = ""
    for n in range(breakers):
        tool = f"lookup_customer_invoice_history_{n}"
        breaker = registry.get(f"{LONG}-{n:03d}", "read" if n % 2 else "write", tool=tool)
        publisher.attach(breaker)
        breaker.call(lambda: "ok")
        if n % 15 == 3:
            for _ in range(2):
                with pytest.raises(Unavailable):
                    breaker.call(fail)
            for _ in range(60):
                breaker.guard(lambda: "ok")()  # re-called while open: rejected locally
            opened_key = opened_key or breaker.key
        elif n % 25 == 11:
            breaker.isolate(REASON)
    guard = RunGuard("refund-4411-a-long-task-name-for-the-eu-west-1-payments-run")
    publisher.attach(guard)
    guard.stop(f"operator stop: {REASON}")
    return opened_key


def cells(page: Any, selector: str) -> list[list[str]]:
    """The text of each cell of each row `selector` matches, read in one go (the page may
    re-render a table between two reads). A row's innerText separates its cells with tabs
    only while the row is laid out, so a loaded machine can read one without them."""
    rows: list[list[str]] = page.eval_on_selector_all(
        selector, "rows => rows.map((r) => [...r.cells].map((c) => c.textContent))"
    )
    return rows


def inside(page: Any, selector: str) -> dict[str, float]:
    box: dict[str, float] = page.evaluate(
        "(s) => { const r = document.querySelector(s).getBoundingClientRect();"
        " return {left: r.left, right: r.right, width: r.width}; }",
        selector,
    )
    return box


#: Every cell of the page's tables, and every element in one, whose text is wider than
#: its box (cut, or drawn past it): as "table: text".
CUT_CELLS = """
() => [...document.querySelectorAll(
    "#breakers th, #breakers td, #breakers td *, #transitions th, #transitions td,"
    + " #notices th, #notices td")]
  .filter((el) => el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1)
  .map((el) => el.closest("table").id + ": " + el.textContent.slice(0, 80))
"""


def sheet_breaker(stream: MemoryStream, tmp_path: Path) -> None:
    """A breaker whose row comes from a boundary sheet file, published to ``stream``."""
    sheet = tmp_path / "boundaries.toml"
    sheet.write_text(
        "[defaults]\ntimeout_ms = 5000\nenforce = 'cooperative'\n"
        "[inventory.read]\nfailure_threshold = 4\n",
        encoding="utf-8",
    )
    registry = Registry.from_toml(sheet)
    StreamPublisher(stream).attach(registry)
    registry.get("inventory", "read").call(lambda: "ok")


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (1440, 900), (1920, 1080)])
def test_the_page_fits_its_window(browser, shots, width, height, tmp_path):
    """In real headless Chromium at 1280, 1440 and 1920 px with a realistic board (long
    names and reasons, open and isolated breakers, notices, a stop): the page is no
    wider than the window, and the header bar, the findings card and the rightmost
    column of every table are inside it. The transition that opened a breaker stays in
    view beside its counted rejections, and times are wall-clock times. No time-axis
    label overlaps another, no cell is cut ("qualifyi…", "3 rejected loc…"), and a
    policy is named by its sheet or what it does, its version hash only a tooltip."""
    stream = MemoryStream()
    key = busy(stream)
    sheet_breaker(stream, tmp_path)
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        with Server(stream) as server:
            page.goto(server.url)
            page.wait_for_selector("#findings [data-rule='model-recalls']")
            page.click(f'tr[data-key="{key}"]')
            page.wait_for_selector('#transitions tr[data-group="rejected"]')
            page.wait_for_selector('.stop[data-task^="refund-4411"]')
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert page.evaluate("window.innerWidth") == width
            header = inside(page, "header")
            assert header["left"] == 0
            assert header["right"] == width  # the bar spans the whole window
            for selector in (
                ".top .card:last-child",  # the findings card
                "#breakers thead th:last-child",
                "#breakers tbody tr:first-child td:last-child",
                "#transitions thead th:last-child",
                "#notices thead th:last-child",
                "#stops",
            ):
                box = inside(page, selector)
                assert box["left"] >= 0, (selector, box)
                assert box["right"] <= width, (selector, box)
                assert box["width"] > 0, selector

            assert page.is_visible("#transitions")
            rows = cells(page, "#transitions tbody tr")
            texts = ["\t".join(row) for row in rows]
            assert all(len(row) == 9 for row in rows), rows
            assert "60 rejected locally" in texts[0]
            assert "cooldown 60" in texts[0]
            assert "closed → open" in texts[1]
            assert "qualifying-failure" in texts[1]
            doc = json.loads(page.evaluate(f"fetch('/api/breaker?key={key}').then(r => r.text())"))
            opening = doc["last"][1]
            shown = page.evaluate(
                f"new Date({opening['open_until_wall']} * 1000).toLocaleTimeString()"
            )
            assert rows[1][6] == shown  # open until, on the wall clock
            assert str(opening["open_until"]) not in page.inner_text("#transitions")
            signals = page.inner_text("#detail-signals")
            assert re.match(r"1 open in the last \d+ s · ", signals), signals
            assert "/h" not in signals

            # Issue 34, item 11: nothing on the board is cut or drawn over something else.
            labels = json.loads(page.get_attribute("#chart", "data-time-labels") or "[]")
            assert len(labels) >= 3, labels
            for left, right in itertools.pairwise(labels):
                gap = (right["x"] - right["width"] / 2) - (left["x"] + left["width"] / 2)
                assert gap >= 4, (left, right)  # the time axis labels do not overlap
            cut = page.evaluate(CUT_CELLS)
            assert cut == [], cut
            policies = [row[11] for row in cells(page, "#breakers tbody tr")]
            assert "2 failures · 600 s" in policies
            assert "boundaries.toml" in policies
            assert not any(re.fullmatch(r"[0-9a-f]{12}", p) for p in policies), policies
            title = page.get_attribute("#breakers tbody tr:first-child td.policy", "title")
            assert re.fullmatch(r"policy version [0-9a-f]{12}", title or ""), title

            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shots / f"dashboard-{width}.png"))
            if width == 1440:
                page.locator("#detail").scroll_into_view_if_needed()
                page.screenshot(path=str(shots / "dashboard-detail.png"))
    finally:
        context.close()


def test_rows_look_and_act_clickable(page):
    """A row shows a pointer and a hover; it takes the focus, and Enter (or Space) on
    it opens its detail, as a click does."""
    stream = MemoryStream()
    busy(stream, breakers=20)
    with Server(stream) as server:
        page.goto(server.url)
        row = f'tr[data-key="{LONG}-005:read"]'
        page.wait_for_selector(row)
        assert page.eval_on_selector(row, "el => getComputedStyle(el).cursor") == "pointer"
        before = page.eval_on_selector(row, "el => getComputedStyle(el).backgroundColor")
        page.hover(row)
        hovered = page.eval_on_selector(row, "el => getComputedStyle(el).backgroundColor")
        assert hovered != before
        assert page.get_attribute(row, "tabindex") == "0"
        page.focus(row)
        page.keyboard.press("Enter")
        page.wait_for_selector(f"#detail-key:has-text('{LONG}-005:read')")
        page.wait_for_selector(f'{row}[aria-selected="true"]')
        other = f'tr[data-key="{LONG}-007:read"]'
        page.focus(other)
        page.keyboard.press(" ")
        page.wait_for_selector(f"#detail-key:has-text('{LONG}-007:read')")
        page.wait_for_selector(f'{other}[aria-selected="true"]')
        # The table was rebuilt with the selection: the focus stayed on the chosen row.
        assert page.evaluate("document.activeElement.dataset.key") == f"{LONG}-007:read"


def test_a_breaker_on_the_defaults_and_its_unclassified_exceptions_show(page, shots):
    """The page marks a breaker that runs on the sheet's defaults and names the exception
    types its classifier never counted, with how often."""
    stream = defaults_and_unknown(4)
    with Server(stream) as server:
        page.goto(server.url)
        row = page.wait_for_selector('#breakers tbody tr[data-key="weather"]')
        text = row.inner_text()
        assert "defaults" in text
        assert "MyAPIError" in text
        assert "4" in row.inner_text()
        other = page.wait_for_selector('#breakers tbody tr[data-key="search:read"]')
        assert "defaults" not in other.inner_text()
        assert "unclassified" not in other.inner_text()
        page.screenshot(path=str(shots / "dashboard-defaults-unclassified.png"))
