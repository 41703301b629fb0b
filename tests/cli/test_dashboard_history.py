"""The dashboard's collapsed history and grouped notices, as pure functions of their items."""

from __future__ import annotations

import copy

from toolbreaker import Policy
from toolbreaker.cli._history import add_line, add_notice
from toolbreaker.core._breaker.receipt import Replay
from toolbreaker.core._breaker.state import Event

POLICY = Policy(
    failure_threshold=1,
    cooldown_ms=60_000,
    cooldown_max_ms=60_000,
    probe_limit=1,
    success_threshold=1,
)
WALL = 1_796_000_000.0  # the entries' wall clock when the breaker's clock read 0


def items(script: list[tuple[int, str, str]]) -> list[dict]:
    """Records of ``(at, type, call)`` events as the board's items (a wall time each)."""
    driver = Replay(POLICY)
    out = []
    for at, kind, call in script:
        for record in driver.feed(Event(kind, at, "search", call)):
            out.append({"wall": WALL + at / 1000, **record.to_dict()})
    return out


def fold(script: list[tuple[int, str, str]], limit: int = 20) -> list[dict]:
    lines: list[dict] = []
    for item in items(script):
        lines = add_line(lines, item, limit)
    return lines


def summary(lines: list[dict]) -> list[tuple]:
    """Each line as (group or reason, phase or from -> to, count)."""
    return [
        (line["group"], line["phase"], line["count"])
        if "group" in line
        else (line["reason"], f"{line['from']}->{line['to']}", 1)
        for line in lines
    ]


def test_one_rejection_is_a_line_of_one_with_its_time():
    """A single local rejection is a group of one whose span is its own time."""
    lines = fold([(0, "request", "a"), (0, "failure", "a"), (300, "request", "b")])
    head = lines[0]
    assert (head["group"], head["count"], head["reasons"]) == ("rejected", 1, {"cooldown": 1})
    assert head["first_wall"] == head["last_wall"] == WALL + 0.3


def test_rejections_across_open_half_open_open_keep_each_transition_in_view():
    """Rejections while open, a probe, rejections while it runs, the probe fails,
    rejections again: each run is one line, counted and spanned, and the transitions
    that opened, half-opened and reopened the breaker stay between them."""
    script = [(0, "request", "a"), (0, "failure", "a")]
    script += [(100 * n, "request", f"r{n}") for n in range(1, 467)]  # 466 rejections
    script += [(60_000, "request", "p"), (60_100, "request", "x"), (60_200, "request", "y")]
    script += [(60_300, "failure", "p"), (60_400, "request", "z")]
    lines = fold(script)
    assert summary(lines) == [
        ("rejected", "open", 1),
        ("probe-failed", "half_open->open", 1),
        ("rejected", "half_open", 2),
        ("probe-admitted", "open->half_open", 1),
        ("rejected", "open", 466),
        ("qualifying-failure", "closed->open", 1),
        ("calls", "closed", 1),
    ]
    run = lines[4]
    assert run["reasons"] == {"cooldown": 466}
    assert (run["first_wall"], run["last_wall"]) == (WALL + 0.1, WALL + 46.6)
    assert lines[2]["reasons"] == {"probe-limit": 2}


def test_interleaved_transitions_end_each_run():
    """Calls that change nothing are a run of their own, counted by event type; each
    change of phase ends the run before it and the rejection between is its own line."""
    script = [(0, "request", "a"), (0, "success", "a"), (10, "request", "b")]
    script += [(20, "success", "b"), (30, "request", "c"), (40, "failure", "c")]
    script += [(50, "request", "d"), (61_100, "request", "e"), (61_200, "success", "e")]
    script += [(61_300, "request", "f")]
    lines = fold(script)
    assert summary(lines) == [
        ("calls", "closed", 1),
        ("probe-quorum", "half_open->closed", 1),
        ("probe-admitted", "open->half_open", 1),
        ("rejected", "open", 1),
        ("qualifying-failure", "closed->open", 1),
        ("calls", "closed", 5),
    ]
    assert lines[-1]["events"] == {"request": 3, "success": 2}


def test_the_limit_counts_lines_and_nothing_is_changed_in_place():
    """At most ``limit`` lines, the oldest go; the lines given are left as they were."""
    script = []
    for n in range(10):  # ten open episodes, each: admitted, failure opens, one rejection
        t = n * 200_000
        script += [(t, "request", f"a{n}"), (t, "failure", f"a{n}"), (t + 1, "request", f"b{n}")]
    lines = fold(script, limit=5)
    assert len(lines) == 5
    frozen = copy.deepcopy(lines)
    (extra,) = items(script)[-1:]
    add_line(lines, {**extra, "wall": WALL + 99}, 5)
    assert lines == frozen


def notice(wall: float, **fields: object) -> dict:
    base = {"wall": wall, "kind": "limit", "name": "saturated", "key": "search:read"}
    return {**base, "dependency": "search", "tool": "search", "source": "h:1", **fields}


def test_identical_notices_are_one_line_with_a_count_and_a_span():
    """The same notice again moves its line to the front, counted, spanning both times,
    with the newest details; a different reason or tool is another line."""
    groups: list[dict] = []
    for n in range(3):
        groups = add_notice(groups, notice(10.0 + n, reason="bulkhead full", retry_after_ms=n), 50)
    groups = add_notice(groups, notice(20.0, reason="other"), 50)
    groups = add_notice(groups, notice(21.0, reason="bulkhead full", retry_after_ms=9), 50)
    assert [(g["reason"], g["count"]) for g in groups] == [("bulkhead full", 4), ("other", 1)]
    head = groups[0]
    assert (head["first_wall"], head["wall"], head["retry_after_ms"]) == (10.0, 21.0, 9)
    late = add_notice(groups, notice(5.0, reason="other"), 50)  # arrived out of order
    assert (late[0]["first_wall"], late[0]["wall"], late[0]["count"]) == (5.0, 20.0, 2)
    assert [g["count"] for g in groups] == [4, 1]  # unchanged
    assert len(add_notice(groups, notice(1.0, reason="new"), 2)) == 2
