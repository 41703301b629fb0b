"""``toolbreaker demo``: the bundled example trace, replayed and explained."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._breaker.receipt import Replay
from toolbreaker.core._breaker.trace import parse_lines

if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
    import tomllib
else:  # pragma: no cover - version dependent
    import tomli as tomllib

__all__ = ["run_fixture"]


def run_fixture(policy_text: str, trace_text: str, out: TextIO) -> tuple[int, dict[str, Any]]:
    """Replay the bundled fixture, print its transitions and receipt hash.

    Returns the exit code and the receipt.
    """
    policy = Policy.from_dict(tomllib.loads(policy_text))
    driver = Replay(policy)
    rows = [
        record for _, event in parse_lines(trace_text.splitlines()) for record in driver.feed(event)
    ]
    receipt = driver.receipt()

    out.write(
        f"toolbreaker demo: the bundled example trace (threshold {policy.failure_threshold}, "
        f"cooldown {policy.cooldown_ms} ms, {policy.success_threshold} probe successes "
        f"to close, probe limit {policy.probe_limit}); policy {policy.version}\n\n"
    )
    header = ("dependency", "at ms", "event", "call", "from", "to", "reason", "remote?")
    table = [header] + [
        (
            r.dependency,
            str(r.event.at),
            r.event.type,
            r.event.call or "",
            r.from_phase,
            r.to_phase,
            r.reason,
            "attempted" if r.attempted else ("REJECTED locally" if r.rejected else ""),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
    out.write("\n")
    for name, dep in sorted(receipt["dependencies"].items()):
        out.write(
            f"{name}: {dep['remote_attempts']} remote attempts, "
            f"{dep['local_rejections']} local rejections, {dep['opens']} opening(s), "
            f"final state {dep['final_state']['state']}\n"
        )
    out.write(
        f"\nreceipt_hash {receipt['receipt_hash']} (a fixed trace: the same every run, on "
        "every machine)\n"
    )
    out.write("replay it yourself: toolbreaker replay TRACE.jsonl --policy POLICY.toml\n")
    return 0, receipt
