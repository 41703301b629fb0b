"""How long the dashboard takes to show 1,000 breakers, in real headless Chromium.

Run ``python benchmarks/bench_dashboard.py`` (under a minute; needs the ``dashboard``
extra, Playwright and Debian's ``chromium``; ``--breakers N``, ``--runs N``). It publishes
an incident on ``--breakers`` real breakers (memory store and stream: long names, a tenth
open with 40 local rejections each, some isolated with an operator's reason), serves the
dashboard on a free loopback port and loads the page ``--runs`` times, each in a fresh
1440x900 browser context.

Rows, each the median (and the slowest) over the runs:

- ``first render``: ``performance.now()`` around the page's first render of the
  snapshot it was served (every row built and laid out: the page forces layout before
  it stops the clock), as the page records it in ``data-render-ms``;
- ``navigation to table shown``: from navigation start to the end of that first render
  (``data-rendered-at``), which adds the page's download, its scripts and the snapshot's
  parsing.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

from toolbreaker import Policy, Registry
from toolbreaker.cli._dashboard import build_app
from toolbreaker.instrumentation.stream import MemoryStream, StreamPublisher

LONG = "eu-west-1-primary-cluster-with-a-long-name"


def incident(breakers: int) -> MemoryStream:
    """``breakers`` real breakers published to a memory stream, a tenth of them open."""
    stream = MemoryStream()
    publisher = StreamPublisher(stream)
    policy = Policy(failure_threshold=2, cooldown_ms=600_000, cooldown_max_ms=600_000)
    registry = Registry(
        policy, default_timeout=1.0, default_enforce="cooperative", max_breakers=breakers + 10
    )
    for n in range(breakers):
        breaker = registry.get(
            f"payments-{LONG}-{n:04d}", "read" if n % 2 else "write", tool=f"lookup_invoice_{n}"
        )
        publisher.attach(breaker)
        breaker.call(int)
        if n % 10 == 0:
            for _ in range(2):
                with contextlib.suppress(Unavailable):
                    breaker.call(_fail)
            for _ in range(40):
                breaker.guard(int)()
        elif n % 37 == 0:
            breaker.isolate(f"provider incident {n}: {LONG} is being failed over by on-call")
    return stream


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """uvicorn serving ``app`` on a free loopback port, in a thread."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)


class Unavailable(Exception):
    """A failure the classifier counts (HTTP 503)."""

    status_code = 503


def _fail() -> None:
    raise Unavailable


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--breakers", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    stream = incident(args.breakers)
    renders: list[float] = []
    fulls: list[float] = []
    with serving(build_app(stream)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for _ in range(args.runs + 1):  # the first load warms the server and the browser
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            page: Any = context.new_page()
            page.goto(url)
            page.wait_for_selector("body[data-rendered-at]", state="attached", timeout=60_000)
            renders.append(float(page.get_attribute("body", "data-render-ms") or "nan"))
            fulls.append(float(page.get_attribute("body", "data-rendered-at") or "nan"))
            context.close()
        browser.close()
    print(f"{args.breakers:,} breakers, {args.runs} runs (median, slowest)")
    for name, values in (("first render", renders[1:]), ("navigation to table shown", fulls[1:])):
        print(f"{name:<26} {statistics.median(values):>7.0f} ms {max(values):>7.0f} ms")


if __name__ == "__main__":
    main()
