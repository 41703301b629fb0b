"""tau-bench's trajectories: customer-service agents with tool calls and a reward a run.

A file is a JSON list of runs, as tau-bench's ``historical_trajectories/*.json`` and its
``results/*.json`` keep them: each run has a ``task_id``, a ``trial``, a ``reward`` and
``traj``, the conversation in OpenAI's chat format (``assistant`` messages with
``tool_calls``, ``tool`` messages with each call's answer). One file may also hold one
run (an object).

- every ``assistant`` message is a model step (tau-bench keeps no usage or clock: every
  step is at 0 and no model step has a cost), followed by its tool calls;
- a tool call's arguments are its JSON ``arguments``; its result the ``tool`` message
  that answers it (by position in the turn, its id and name checked);
- tau-bench's tools answer a refused action with text, ``Error: ...`` (its environment
  turns an exception into the same text): a result that reports a failure
  (``result_error`` ``tool-error``), never a failure of the dependency;
- the run's outcome is ``success`` when its reward is 1, ``failure`` otherwise.

Risk classes (:data:`RISKS`): the tools that change a booking or an order are writes,
cancellations, refunds, returns, exchanges and certificates irreversible, the rest reads.
A run's ``--risk`` overrides them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.core._run.budget import RiskClass
from toolbreaker.importing._common import ImportedRun, RunBuilder, field

__all__ = ["RISKS", "read_tau_bench"]

#: The risk class of tau-bench's airline and retail tools (every other tool is a read).
RISKS: Final[Mapping[str, RiskClass]] = {
    # airline
    "book_reservation": "reversible_write",
    "update_reservation_baggages": "reversible_write",
    "update_reservation_flights": "reversible_write",
    "update_reservation_passengers": "reversible_write",
    "cancel_reservation": "irreversible",
    "send_certificate": "irreversible",
    # retail
    "modify_pending_order_address": "reversible_write",
    "modify_pending_order_items": "reversible_write",
    "modify_pending_order_payment": "reversible_write",
    "modify_user_address": "reversible_write",
    "cancel_pending_order": "irreversible",
    "return_delivered_order_items": "irreversible",
    "exchange_delivered_order_items": "irreversible",
}


def read_tau_bench(
    data: Any, source: str, *, risks: Mapping[str, RiskClass], trim: int | None
) -> list[ImportedRun]:
    """The runs of a decoded tau-bench file.

    Raises:
        ValueError: naming the run and what is wrong with it.
    """
    runs = data if isinstance(data, list) else [data]
    out = []
    names: set[str] = set()
    for index, run in enumerate(runs, 1):
        where = f"run {index}"
        traj = field(run, "traj", list, where)
        task = run.get("task_id")
        name = f"task-{task}-trial-{run.get('trial', 0)}"
        if name in names:
            name = f"{name}-{index}"
        names.add(name)
        builder = RunBuilder(name, source, risks={**RISKS, **risks}, trim=trim)
        _steps(builder, traj, where)
        reward = run.get("reward")
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise TypeError(f"{where}: reward is missing or not a number")
        detail = {"task_id": task, "trial": run.get("trial"), "reward": reward}
        out.append(builder.build("success" if reward >= 1 else "failure", detail))
    return out


def _steps(builder: RunBuilder, traj: list[Any], where: str) -> None:
    pending: list[dict[str, Any]] = []
    for position, message in enumerate(traj):
        at = f"{where}, message {position + 1}"
        role = field(message, "role", str, at)
        if role == "assistant":
            _flush(builder, pending)
            builder.model(0)
            for call in message.get("tool_calls") or []:
                function = field(call, "function", dict, at)
                name = field(function, "name", str, at)
                arguments = function.get("arguments") or "{}"
                try:
                    args = json.loads(arguments) if isinstance(arguments, str) else arguments
                except ValueError:
                    raise ValueError(f"{at}: the arguments of {name} are not JSON") from None
                if not isinstance(args, dict):
                    raise TypeError(f"{at}: the arguments of {name} are not an object")
                pending.append({"id": call.get("id"), "name": name, "args": args})
        elif role == "tool":
            if not pending:
                raise ValueError(f"{at}: a tool answer without a call before it")
            call = pending.pop(0)
            if message.get("name") not in (None, call["name"]):
                raise ValueError(f"{at}: the answer of {message.get('name')} for {call['name']}")
            content = message.get("content")
            reported = isinstance(content, str) and content.startswith("Error")
            builder.tool(
                0,
                call["name"],
                call["args"],
                result=content,
                result_error="tool-error" if reported else None,
            )
    _flush(builder, pending)


def _flush(builder: RunBuilder, pending: list[dict[str, Any]]) -> None:
    """Calls a turn made whose answers the file does not hold: left out, with a warning."""
    if pending:
        for _ in pending:
            builder.warn("a tool call without an answer in the file is left out")
        pending.clear()
