"""What the dashboard lists of a breaker's history and of its notices, collapsed for a person.

Pure functions over the board's plain items (no I/O, no clock): the board folds each
new item in with :func:`add_line` or :func:`add_notice`, the page renders the lines it is
given and decides nothing.

- A breaker's history, newest first: a transition that changed the phase, or an
  operator's action, is a line of its own; a run of local rejections in one phase
  collapses into one line with its count, its first and last wall times and the count
  per reason (``466 rejected locally, 7:36:12-7:37:23``), and so does a run of calls that
  changed nothing (admitted, settled). Anything else ends the run, so the transition that
  opened the breaker stays between the runs before and after it, in view.
- Notices (degradation choices, limit answers), newest first: identical ones (same
  breaker, kind, mode, tool, reason, source) are one line with a count and the span of
  their wall times (``wall`` is the newest); the latest one's details (an age, a retry
  time) are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolbreaker.core._breaker.machine import OPERATOR_TYPES

__all__ = ["NOTICE_IDENTITY", "add_line", "add_notice", "group_of"]

#: The fields that make two notices the same line; the rest is the newest one's detail.
NOTICE_IDENTITY: Final = (
    "kind",
    "name",
    "key",
    "dependency",
    "tool",
    "reason",
    "source",
    "task",
    "by",
    "limit",
)


def group_of(item: Mapping[str, Any]) -> str | None:
    """The run a transition item joins: ``rejected``, ``calls`` or ``None`` (its own line).

    ``item`` is a record's dict (:meth:`~toolbreaker.core._breaker.state.Transition.to_dict`)
    with its ``wall``. A change of phase and an operator's action are never grouped.
    """
    if item["from"] != item["to"] or item["event"]["type"] in OPERATOR_TYPES:
        return None
    return "rejected" if item["rejected"] else "calls"


def add_line(lines: list[dict[str, Any]], item: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """``lines`` (newest first) with the transition ``item`` folded in, at most ``limit``.

    An item of the same run as the newest line (same group, same phase) joins it;
    otherwise it starts a line: a group of one, or the transition itself. ``lines`` and
    its dicts are not changed.
    """
    group = group_of(item)
    if group is None:
        return [item, *lines[: limit - 1]]
    head = lines[0] if lines else None
    if head is not None and head.get("group") == group and head["phase"] == item["from"]:
        return [_joined(head, item), *lines[1:]]
    line = {
        "group": group,
        "phase": item["from"],
        "count": 0,
        "first_wall": item["wall"],
        "reasons": {},
        "events": {},
    }
    return [_joined(line, item), *lines[: limit - 1]]


def _joined(line: Mapping[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    reasons = dict(line["reasons"])
    reasons[item["reason"]] = reasons.get(item["reason"], 0) + 1
    events = dict(line["events"])
    kind = item["event"]["type"]
    events[kind] = events.get(kind, 0) + 1
    joined = {
        **line,
        "count": line["count"] + 1,
        # Processes' entries may arrive a little out of order: the span holds both.
        "first_wall": min(line["first_wall"], item["wall"]),
        "last_wall": max(line.get("last_wall", item["wall"]), item["wall"]),
        "reasons": reasons,
        "events": events,
        "generation": item["generation"],
        "policy_version": item.get("policy_version", ""),
        "policy": item.get("policy", ""),
        "open_until": item["open_until"],
        "open_until_wall": item.get("open_until_wall"),
    }
    failure_class = item.get("class")
    if failure_class is not None:
        classes = dict(line.get("classes", {}))
        classes[failure_class] = classes.get(failure_class, 0) + 1
        joined["classes"] = classes
    return joined


def add_notice(
    groups: list[dict[str, Any]], item: Mapping[str, Any], limit: int
) -> list[dict[str, Any]]:
    """``groups`` (newest first) with the notice ``item`` folded in, at most ``limit``.

    An identical notice's line (:data:`NOTICE_IDENTITY`) moves to the front with its
    count raised, its span to this notice's wall time and this notice's details; a new
    one is a line with count 1. ``groups`` and its dicts are not changed.
    """
    identity = tuple(item.get(name) for name in NOTICE_IDENTITY)
    for n, group in enumerate(groups):
        if tuple(group.get(name) for name in NOTICE_IDENTITY) == identity:
            merged = {
                **item,
                "count": group["count"] + 1,
                # Processes' entries may arrive a little out of order: the span holds both.
                "first_wall": min(group["first_wall"], item["wall"]),
                "wall": max(group["wall"], item["wall"]),
            }
            return [merged, *groups[:n], *groups[n + 1 :]]
    return [{**item, "count": 1, "first_wall": item["wall"]}, *groups[: limit - 1]]
