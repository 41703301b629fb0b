"""Coding agents' trajectories: SWE-agent's ``.traj`` and mini-swe-agent's ``.traj.json``.

**mini-swe-agent** (``trajectory_format`` ``mini-swe-agent-1`` and ``-1.1``): the
``messages``, in OpenAI's chat format.

- every ``assistant`` message is a model step: its model, usage and cost from the raw
  response in ``extra`` (``usage.prompt_tokens``, ``completion_tokens``, ``cost``) or
  ``extra.cost``; its time from ``extra.timestamp`` or the response's ``created``;
- its command (one ```` ```bash ```` or ```` ```mswea_bash_command ```` block, the
  parsed ``extra.actions``, or a ``tool_calls`` entry) is one call of the tool
  ``bash``, ``{"command": ...}``; a reply without exactly one command is a model turn
  without a tool call (the agent answers it with a format error);
- the observation that follows is its result: ``{"returncode": N, "output": text}`` with
  the text the model read; a non-zero exit status is a result that reports a failure
  (``result_error`` ``exit-N``), never a failure of the dependency; a command the
  environment killed after its timeout is a ``timeout``; v2's final ``exit`` message
  carries what the submission command printed;
- without a per-step cost the run's ``model_stats.instance_cost`` is one model step at
  the end, with a warning.

**SWE-agent** (``.traj``): ``trajectory`` steps with the ``action`` run and the
``observation`` it gave; with function calling the ``history`` keeps each step's
``tool_calls`` (the tool's name and arguments), else the action is one call of
``bash`` with the action as its command. SWE-agent keeps no exit status, no clock and
its usage only in total (``info.model_stats``: one model step at the end). Its editing
commands (``create``, ``edit``, ``insert``, ``str_replace_editor`` ``create`` and
``str_replace`` ...) are marked as changing state, its viewing and searching ones not;
other shell commands are left unmarked.

Neither says whether the run solved its task: that is SWE-bench's report
(:func:`resolved_ids` reads it). The run's detail keeps the instance id and exit status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.core._run.budget import RiskClass
from toolbreaker.importing._common import ImportedRun, RunBuilder, as_cost, field, obj

__all__ = ["read_mini_swe_agent", "read_swe_agent", "resolved_ids"]

_BLOCK: Final = re.compile(r"```(?:bash|mswea_bash_command)[ \t]*\n(.*?)\n```", re.S)
_RETURNCODE: Final = re.compile(r"\A\s*<returncode>(-?\d+)</returncode>\n?")
_TIMED_OUT: Final = "timed out and has been killed"
#: SWE-agent's commands that change files, and the ones that only look.
_EDITS: Final = frozenset({"create", "edit", "insert", "append", "str_replace", "undo_edit"})
_LOOKS: Final = frozenset(
    {"open", "goto", "scroll_up", "scroll_down", "search_file", "search_dir", "find_file", "view"}
)


def read_mini_swe_agent(
    data: Any, source: str, *, risks: Mapping[str, RiskClass], trim: int | None
) -> list[ImportedRun]:
    """The run of a decoded mini-swe-agent trajectory.

    Raises:
        ValueError: naming what is wrong with the file.
    """
    messages = field(data, "messages", list, "the trajectory")
    info = obj(data.get("info"))
    name = str(data.get("instance_id") or source.rsplit("/", 1)[-1].split(".", 1)[0])
    builder = RunBuilder(name, source, risks=risks, trim=trim)
    model_name = _config_model(info)
    start: float | None = None
    costed = False
    pending: list[dict[str, Any]] = []
    at = 0
    for position, message in enumerate(messages):
        where = f"message {position + 1}"
        role = field(message, "role", str, where)
        extra = obj(message.get("extra"))
        moment = _moment(extra)
        if moment is not None:
            start = moment if start is None else start
            at = int((moment - start) * 1000)
        if role == "assistant":
            _unanswered(builder, pending)
            costed |= _model_step(builder, at, extra, model_name)
            pending.extend(_commands(message, extra, where))
        elif role in ("user", "tool") and position > 1 and pending:
            _observation(builder, at, pending.pop(0), message)
        elif role == "exit" and pending:
            # v2 ends on the submission command: the exit message carries what it printed.
            builder.tool(
                at, pending[0]["tool"], pending.pop(0)["args"], result=extra.get("submission")
            )
    _unanswered(builder, pending)
    stats = obj(info.get("model_stats"))
    total = as_cost(stats.get("instance_cost"))
    if not costed and total:
        builder.warn("the trajectory keeps its cost only in total: one model step at the end")
        builder.model(at, cost=total)
    detail = {"instance_id": data.get("instance_id"), "exit_status": info.get("exit_status")}
    return [builder.build(None, detail)]


def _config_model(info: Mapping[str, Any]) -> str | None:
    config = info.get("config")
    model = config.get("model") if isinstance(config, dict) else None
    name = model.get("model_name") if isinstance(model, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def _moment(extra: Mapping[str, Any]) -> float | None:
    """When a message was made, in epoch seconds, if the trajectory says."""
    value = extra.get("timestamp")
    if value is None:
        response = extra.get("response")
        value = response.get("created") if isinstance(response, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _model_step(
    builder: RunBuilder, at: int, extra: Mapping[str, Any], model_name: str | None
) -> bool:
    """The model step of an assistant message; whether it carried its cost."""
    response = obj(extra.get("response"))
    usage = obj(response.get("usage"))
    model = response.get("model") if isinstance(response.get("model"), str) else model_name
    cost = as_cost(extra.get("cost", usage.get("cost")))
    tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
    counted = all(isinstance(t, int) and not isinstance(t, bool) for t in tokens)
    builder.model(
        at,
        model,
        input_tokens=tokens[0] if counted else None,
        output_tokens=tokens[1] if counted else None,
        cost=cost,
    )
    return cost is not None


def _commands(message: Mapping[str, Any], extra: Mapping[str, Any], where: str) -> list[Any]:
    """The commands an assistant message issues: tool calls, parsed actions, or its block."""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        found = []
        for call in calls:
            function = field(call, "function", dict, where)
            arguments = function.get("arguments") or "{}"
            try:
                args = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError:
                raise ValueError(f"{where}: a tool call's arguments are not JSON") from None
            if not isinstance(args, dict):
                raise TypeError(f"{where}: a tool call's arguments are not an object")
            found.append({"tool": function.get("name") or "bash", "args": args})
        return found
    actions = extra.get("actions")
    if isinstance(actions, list):
        return [
            {"tool": "bash", "args": {"command": a["command"]}}
            for a in actions
            if isinstance(a, dict) and isinstance(a.get("command"), str)
        ]
    content = message.get("content")
    blocks = _BLOCK.findall(content) if isinstance(content, str) else []
    # Exactly one command runs; any other reply is answered with a format error.
    return [{"tool": "bash", "args": {"command": blocks[0]}}] if len(blocks) == 1 else []


def _observation(
    builder: RunBuilder, at: int, call: Mapping[str, Any], message: Mapping[str, Any]
) -> None:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    extra = obj(message.get("extra"))
    code = extra.get("returncode")
    found = _RETURNCODE.match(text)
    if found is not None:
        code = int(found.group(1))
        text = text[found.end() :]
    exception = extra.get("exception_info")
    timed_out = isinstance(exception, str) and "timed out" in exception
    if timed_out or (_TIMED_OUT in text[:400] and code is None):
        builder.tool(at, call["tool"], call["args"], error="timeout")
        return
    if not isinstance(code, int) or isinstance(code, bool):
        # The submission (or an answer without an exit status): what the command printed.
        builder.tool(at, call["tool"], call["args"], result=text)
        return
    builder.tool(
        at,
        call["tool"],
        call["args"],
        result={"returncode": code, "output": text},
        result_error=f"exit-{code}" if code else None,
    )


def _unanswered(builder: RunBuilder, pending: list[Any]) -> None:
    for _ in pending:
        builder.warn("a command without an observation after it is left out")
    pending.clear()


def read_swe_agent(
    data: Any, source: str, *, risks: Mapping[str, RiskClass], trim: int | None
) -> list[ImportedRun]:
    """The run of a decoded SWE-agent trajectory.

    Raises:
        ValueError: naming what is wrong with the file.
    """
    steps = field(data, "trajectory", list, "the trajectory")
    info = obj(data.get("info"))
    name = source.rsplit("/", 1)[-1].removesuffix(".traj")
    builder = RunBuilder(name, source, risks=risks, trim=trim)
    history = data.get("history") if isinstance(data.get("history"), list) else []
    turns = [
        m
        for m in history
        if isinstance(m, dict) and m.get("role") == "assistant" and not m.get("is_demo")
    ]
    calls_of = turns if len(turns) == len(steps) else None
    if calls_of is None and any(m.get("tool_calls") for m in turns):
        builder.warn("the history does not match the steps: each action is read as bash")
    for index, step in enumerate(steps):
        where = f"step {index + 1}"
        action = field(step, "action", str, where)
        observation = step.get("observation")
        builder.model(0)
        turn = calls_of[index] if calls_of is not None else {}
        calls = _commands(turn, {}, where) if turn.get("tool_calls") else []
        if not calls:
            calls = [{"tool": "bash", "args": {"command": action.strip()}}]
        for call in calls:
            builder.tool(
                0,
                call["tool"],
                call["args"],
                result=observation,
                changes_state=_changes_state(call["tool"], call["args"]),
            )
    stats = obj(info.get("model_stats"))
    sent, received = stats.get("tokens_sent"), stats.get("tokens_received")
    cost = as_cost(stats.get("instance_cost"))
    if cost or sent or received:
        builder.warn("the trajectory keeps its usage only in total: one model step at the end")
        builder.model(0, None, input_tokens=sent or 0, output_tokens=received or 0, cost=cost)
    detail = {"exit_status": info.get("exit_status")}
    return [builder.build(None, detail)]


def _changes_state(tool: str, args: Mapping[str, Any]) -> bool | None:
    """Whether one of SWE-agent's own commands changes files; ``None`` for a shell command."""
    if tool == "str_replace_editor":
        command = args.get("command")
        return None if not isinstance(command, str) else command in _EDITS
    if tool == "bash":
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return None
        word = command.split(None, 1)[0]
        return True if word in _EDITS else False if word in _LOOKS else None
    return True if tool in _EDITS else False if tool in _LOOKS else None


def resolved_ids(data: Any) -> tuple[set[str], set[str] | None]:
    """The instances a SWE-bench report says were resolved, and those it says were not.

    Reads the evaluation report's ``resolved_ids`` (and ``unresolved_ids``), an older
    ``resolved`` list, a per-instance report (``{instance: {"resolved": bool}}``) or a
    summary's ``instances`` (``[{"instance_id", "resolved"}]``). The second set is
    ``None`` when the report names only the resolved ones.

    Raises:
        ValueError: none of those shapes.
    """
    if isinstance(data, dict):
        for key in ("resolved_ids", "resolved"):
            found = data.get(key)
            if isinstance(found, list) and all(isinstance(i, str) for i in found):
                others = data.get("unresolved_ids")
                unresolved = set(others) if isinstance(others, list) else None
                return set(found), unresolved
        rows = data.get("instances")
        if isinstance(rows, list):
            data = {r.get("instance_id"): r for r in rows if isinstance(r, dict)}
        if data and all(isinstance(v, dict) and "resolved" in v for v in data.values()):
            yes = {str(k) for k, v in data.items() if v["resolved"] is True}
            return yes, {str(k) for k in data} - yes
    raise ValueError("no SWE-bench report: it names no resolved instances")
