"""The retry cascade, measured: remote attempts per logical operation during an outage.

Fifty scripted agents run at once against a real local service (``ToolService``) while
one dependency (``GET /search``) is down (every request answers 503). Each agent makes
logical operations (one question that needs the tool) one after another, and each stacks
the usual retry layers:

- the HTTP client inside the tool retries 2 times (3 attempts);
- the agent framework retries a failed tool call 2 times (3 tries);
- the model re-issues a failed call, 3 calls in all.

That is up to 3 x 3 x 3 = 27 remote attempts for one logical operation. Three setups:

- ``none``: no protection;
- ``breaker``: a breaker around the tool, every other layer unchanged (the framework and
  the model treat a rejection like any other error);
- ``breaker+budget``: retries at one chosen layer: the client's and the framework's
  retries off, the breaker retries (max_attempts=3) within its retry budget, the model's
  re-calls spend the same budget, and the model stops when told the tool is unavailable.

It prints remote attempts per logical operation over the whole run, and over the
operations that began once the breaker had opened (the steady state of an outage, probes
included). Not a test: numbers vary a little with scheduling.

    python benchmarks/bench_cascade.py [--agents 50] [--ops 20]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

from toolbreaker import Breaker, Policy
from toolbreaker.core._retry import RetryPolicy
from toolbreaker.testing import Fault, ToolService, request_json

CLIENT_RETRIES = 2
FRAMEWORK_RETRIES = 2
MODEL_CALLS = 3
THINK_SECONDS = 0.05


class Counter:
    """Remote attempts, counted where the request is sent: in all, and by this thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value = 0
        self.local = threading.local()

    def add(self) -> None:
        with self.lock:
            self.value += 1
        self.local.value = self.mine() + 1

    def mine(self) -> int:
        """Attempts this thread (one agent) made."""
        value: int = getattr(self.local, "value", 0)
        return value


def client(url: str, counter: Counter, retries: int) -> Callable[[str], dict[str, Any]]:
    """The tool's HTTP client, with its own retries (like ``max_retries`` of an SDK)."""

    def search(q: str) -> dict[str, Any]:
        for attempt in range(retries + 1):
            counter.add()
            try:
                return request_json("GET", f"{url}/search?q={q}", timeout=2)
            except Exception:
                if attempt == retries:
                    raise
                time.sleep(0.005)
        raise AssertionError("unreachable")

    return search


def framework(tool: Callable[[str], Any], retries: int) -> Callable[[str], Any]:
    """The agent framework's tool retries: any exception is retried."""

    def run(q: str) -> Any:
        for attempt in range(retries + 1):
            try:
                return tool(q)
            except Exception as exc:
                if attempt == retries:
                    return {"ok": False, "error": str(exc), "retryable": True}
        raise AssertionError("unreachable")

    return run


def model(run: Callable[[str], Any], calls: int, *, obeys: bool) -> Callable[[str], bool]:
    """The model re-issues a failed call; ``obeys``: it stops when told it is pointless.

    Returns whether the operation got its data.
    """

    def ask(q: str) -> bool:
        for _ in range(calls):
            try:
                result = run(q)
            except Exception:
                continue
            if not isinstance(result, dict) or result.get("ok", True):
                return True
            if obeys and (result.get("tool_unavailable") or not result.get("retryable")):
                return False
        return False

    return ask


def scenario(name: str, url: str, agents: int, ops: int) -> dict[str, float]:
    counter = Counter()
    policy = Policy(failure_threshold=3, cooldown_ms=200, cooldown_max_ms=200)
    breaker: Breaker | None = None
    if name == "none":
        ask = model(
            framework(client(url, counter, CLIENT_RETRIES), FRAMEWORK_RETRIES),
            MODEL_CALLS,
            obeys=False,
        )
    elif name == "breaker":
        breaker = Breaker("search", policy=policy, timeout=2, enforce="cooperative")
        inner = client(url, counter, CLIENT_RETRIES)

        def tool(q: str) -> Any:
            assert breaker is not None
            return breaker.call(inner, q)

        ask = model(framework(tool, FRAMEWORK_RETRIES), MODEL_CALLS, obeys=False)
    else:
        breaker = Breaker(
            "search",
            operation="read",
            policy=policy,
            timeout=2,
            enforce="cooperative",
            retry=RetryPolicy(max_attempts=3, base_ms=5, max_backoff_ms=50, budget=10),
        )
        # One chosen layer: the client's and the framework's retries are off.
        tool = breaker.guard(client(url, counter, 0), tool="search")
        ask = model(framework(tool, 0), MODEL_CALLS, obeys=True)

    after_open = {"ops": 0, "attempts": 0, "answered": 0}
    lock = threading.Lock()
    start = threading.Barrier(agents)

    def agent(n: int) -> None:
        start.wait()
        for i in range(ops):
            opened = breaker is not None and sum(breaker.stats.opens.values()) > 0
            before = counter.mine()
            answered = ask(f"agent{n}-op{i}")
            with lock:
                after_open["answered"] += answered
            if opened:
                with lock:
                    after_open["ops"] += 1
                    after_open["attempts"] += counter.mine() - before
            time.sleep(THINK_SECONDS)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(agents)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    total_ops = agents * ops
    steady = after_open["attempts"] / after_open["ops"] if after_open["ops"] else float("nan")
    return {
        "ops": total_ops,
        "attempts": counter.value,
        "per_op": counter.value / total_ops,
        "ops_after_open": after_open["ops"],
        "per_op_after_open": steady,
        "seconds": elapsed,
        "answered": after_open["answered"] / total_ops,
        "retries": dict(breaker.stats.retries) if breaker is not None else {},  # type: ignore[dict-item]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--ops", type=int, default=20)
    parser.add_argument(
        "--brownout",
        action="store_true",
        help="two requests in three fail (503) instead of every one: the breaker rarely opens",
    )
    args = parser.parse_args()
    what = "2 of 3 requests fail (503)" if args.brownout else "down (every request 503)"
    print(
        f"{args.agents} agents x {args.ops} operations, GET /search {what}; layers: client "
        f"retries {CLIENT_RETRIES}, framework retries {FRAMEWORK_RETRIES}, model calls "
        f"{MODEL_CALLS}"
    )
    print(
        f"{'setup':<16}{'attempts':>10}{'per op':>10}{'ops after open':>16}"
        f"{'per op once open':>18}{'answered':>10}{'s':>7}"
    )
    for name in ("none", "breaker", "breaker+budget"):
        with ToolService() as service:
            if args.brownout:
                faults = [Fault(status=503) if i % 3 else Fault() for i in range(60_000)]
                service.inject("GET /search", *faults)
            else:
                service.outage("GET /search", status=503)
            row = scenario(name, service.url, args.agents, args.ops)
            hits = service.hits.get("GET /search", 0)
        assert hits == row["attempts"], (hits, row["attempts"])
        after = "-" if name == "none" else f"{row['per_op_after_open']:.2f}"
        opened = "-" if name == "none" else str(row["ops_after_open"])
        print(
            f"{name:<16}{row['attempts']:>10}{row['per_op']:>10.2f}{opened:>16}{after:>18}"
            f"{row['answered']:>10.0%}{row['seconds']:>7.1f}"
        )
        if row["retries"]:
            print(f"{'':<16}retry decisions: {row['retries']}")


if __name__ == "__main__":
    main()
