"""How the runs beside this file were made from tau-bench's airline trajectories (MIT).

    python convert.py gpt-4o-airline.json OUT task-000-trial-3 ...

See README.md for the source and what the conversion keeps.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

RISK = {
    "book_reservation": "reversible_write",
    "update_reservation_flights": "reversible_write",
    "update_reservation_passengers": "reversible_write",
    "update_reservation_baggages": "reversible_write",
    "cancel_reservation": "irreversible",
    "send_certificate": "irreversible",
}


def convert(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One trajectory as recorded steps: model turns and tool calls, in order."""
    outputs = {m["tool_call_id"]: m["content"] for m in run["traj"] if m.get("role") == "tool"}
    lines: list[dict[str, Any]] = []
    for message in run["traj"]:
        if message.get("role") == "assistant":
            lines.append({"at": 0})  # a model turn (tau-bench records no usage or cost)
        for call in message.get("tool_calls") or ():
            name = call["function"]["name"]
            output = outputs.get(call["id"], "")
            step: dict[str, Any] = {
                "at": 0,
                "tool": name,
                "args": json.loads(call["function"]["arguments"]),
            }
            risk = RISK.get(name, "read")
            if risk != "read":
                step["risk"] = risk
            if risk != "read" and output.startswith("Error"):
                step["outcome"] = "ignored"  # the tool refused: nothing was made
            else:
                step["result"] = {"sha256": hashlib.sha256(output.encode()).hexdigest()}
            lines.append(step)
    return lines


def main(source: str, out: str, picks: set[str]) -> None:
    """Write the picked runs (all without names) and their outcomes (runs.jsonl)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    index = []
    for run in json.loads(Path(source).read_text()):
        name = f"task-{run['task_id']:03d}-trial-{run['trial']}"
        if picks and name not in picks:
            continue
        steps = "".join(json.dumps(s, sort_keys=True) + "\n" for s in convert(run))
        (folder / f"{name}.jsonl").write_text(steps)
        outcome = "success" if run["reward"] == 1.0 else "failure"
        index.append({"file": f"{name}.jsonl", "outcome": outcome, "reward": run["reward"]})
    (folder / "runs.jsonl").write_text("".join(json.dumps(i) + "\n" for i in index))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], set(sys.argv[3:]))
