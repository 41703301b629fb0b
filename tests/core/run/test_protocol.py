"""The write protocol's lifecycle, pinned as a table, and what every reader does with it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._degrade import QUEUE_STATUSES
from toolbreaker.core._run import protocol
from toolbreaker.core._run.budget import Action, Budget, RunState
from toolbreaker.core._run.machine import JOURNAL_STATUSES, RunEvent, apply
from toolbreaker.errors import RunStateError, WriteTransitionError

# One row per move (protocol.MOVES, in order); one column per status before it ("-": no
# entry). A cell is the status after the move, by its letter below, or "." (illegal).
CODES = {
    "P": "pending",
    "C": "confirmed",
    "F": "failed",
    "U": "unknown",
    "A": "reconciled-absent",
    "Q": "queued",
    "M": "maybe-queued",
    "H": "handed-off",
}
LIFECYCLE = """
before:            -  P  C  F  U  A  Q  M  H
attempt            P  .  .  P  .  .  .  .  .
proven             .  C  .  .  .  .  .  .  .
not-made           .  F  .  .  .  .  .  .  .
maybe-made         .  U  .  .  .  .  .  .  .
found              .  C  .  .  C  C  .  C  .
not-found          .  A  .  .  A  A  .  .  .
queued             Q  Q  .  Q  .  .  .  .  .
queue-unknown      M  M  .  M  .  .  .  .  .
handed-off         H  H  .  H  .  .  .  .  .
drained            C  C  C  C  C  C  C  C  C
operator-made      C  C  C  C  C  C  C  C  C
operator-not-made  F  F  .  F  F  F  .  F  F
"""


# status: unresolved, uncertain (counts against max_uncertain_side_effects), a request's answer
READERS = {
    None: (False, False, "run"),
    "pending": (True, True, "reconcile"),
    "confirmed": (False, False, "journal"),
    "failed": (False, False, "run"),
    "unknown": (True, True, "reconcile"),
    "reconciled-absent": (True, True, "reconcile"),
    "queued": (True, False, "queued"),
    "maybe-queued": (True, True, "queued"),
    "handed-off": (True, False, "handed-off"),
}


def parse(table: str) -> dict[tuple[str | None, str], str]:
    header, *rows = (line.split() for line in table.strip().splitlines())
    befores = [None if code == "-" else CODES[code] for code in header[1:]]
    out: dict[tuple[str | None, str], str] = {}
    for move, *cells in rows:
        assert len(cells) == len(befores)
        for before, cell in zip(befores, cells, strict=True):
            if cell != ".":
                out[(before, move)] = CODES[cell]
    return out


def test_the_lifecycle_is_the_table():
    """Every legal move, and only those, as the table above says (moves in their order)."""
    moves = [line.split()[0] for line in LIFECYCLE.strip().splitlines()[1:]]
    assert tuple(moves) == protocol.MOVES
    assert tuple(CODES.values()) == protocol.STATUSES
    assert dict(protocol.TRANSITIONS) == parse(LIFECYCLE)
    assert {b for b, _ in protocol.TRANSITIONS} == {None, *protocol.STATUSES}


def test_what_each_reader_does_with_each_status():
    """Unresolved, uncertain and a request's answer, status by status."""
    assert set(READERS) == {None, *protocol.STATUSES}
    for status, (unresolved, uncertain, answer) in READERS.items():
        assert protocol.unresolved(status) is unresolved, status
        assert protocol.uncertain(status) is uncertain, status
        assert protocol.on_request(status) == answer, status
        assert protocol.made(status) is (status == "confirmed")


@pytest.mark.parametrize(
    ("before", "move"),
    [
        ("confirmed", "operator-not-made"),
        ("unknown", "attempt"),
        ("queued", "operator-not-made"),
        (None, "proven"),
    ],
)
def test_an_illegal_move_raises_a_typed_error(before, move):
    """A move the table does not hold raises, naming the status and the move."""
    with pytest.raises(WriteTransitionError) as caught:
        protocol.after(before, move)
    assert (caught.value.status, caught.value.move) == (before, move)
    assert isinstance(caught.value, RunStateError)


def test_only_an_operator_lets_a_write_that_may_have_happened_run_again():
    """No fact moves an uncertain write to a status whose request runs it, but the certain
    failure its own attempt reports (``pending``, ``not-made``) and an operator's word."""
    for (before, move), status in protocol.TRANSITIONS.items():
        if protocol.uncertain(before) and protocol.on_request(status) == "run":
            assert move == "operator-not-made" or (before, move) == ("pending", "not-made")


@given(st.lists(st.sampled_from(protocol.MOVES), max_size=12))
def test_a_written_or_owned_write_is_never_made_by_a_run(moves):
    """Property: along any legal path, once a write may have been made, or a drainer or a
    person owns it, a request runs it again only after an operator's ``not made``."""
    status: protocol.Status | None = None
    owned = False
    for move in moves:
        try:
            status = protocol.after(status, move)
        except WriteTransitionError:
            continue
        if move == "operator-not-made":
            owned = False
        elif move in ("maybe-made", "queued", "queue-unknown", "handed-off", "attempt"):
            owned = owned or move != "attempt"
        if owned:
            assert protocol.on_request(status) != "run"


@pytest.mark.parametrize(
    ("entry", "status"),
    [
        (None, None),
        ({"status": "confirmed"}, "confirmed"),
        ({"status": "reconciled-absent"}, "reconciled-absent"),
        # How a queued write was journaled before the protocol had ``queued``.
        ({"status": "pending", "result": {"queue_id": "q-1"}}, "queued"),
        ({"status": "pending"}, "pending"),
        ({"status": "something-newer"}, "unknown"),  # fail closed: it may have happened
        ({}, "unknown"),
    ],
)
def test_old_and_foreign_entries_read_safely(entry, status):
    """Entries are read as stored; what this version does not know may have happened."""
    assert protocol.read(entry) == status


def test_ids_are_read_from_the_entry_or_its_result():
    """Queue and reconciliation ids live in the entry (or, in old entries, its result)."""
    assert protocol.queue_id({"queue_id": "q-2"}) == "q-2"
    assert protocol.queue_id({"result": {"queue_id": "q-3"}}) == "q-3"
    assert protocol.queue_id({"result": "text"}) is None
    assert protocol.reconciliation_id({"reconciliation_id": "rc-1"}) == "rc-1"
    assert protocol.reconciliation_id(None) is None


def test_what_proves_a_write():
    """The verify answer when the tool has one; else any result but None."""
    assert protocol.proves({"id": 1}, None)
    assert not protocol.proves(None, None)
    assert not protocol.proves({"id": 1}, False)
    assert protocol.proves(None, True)


def test_recorded_and_degraded_outcomes_map_to_moves():
    """A run's outcome of a write and a degradation answer each make one move (or none)."""
    assert [protocol.settled_move(o) for o in ("success", "unknown", "failure", "ignored")] == [
        "proven",
        "maybe-made",
        "not-made",
        None,
    ]
    assert protocol.degraded_move("queue") == "queued"
    assert protocol.degraded_move("queue", maybe=True) == "queue-unknown"
    assert protocol.degraded_move("handoff") == "handed-off"
    assert protocol.degraded_move("stop") == "handed-off"
    assert protocol.degraded_move("omit") is None
    assert protocol.degraded_move(None) is None


def test_resolves_only_an_uncertain_write():
    """A move settles a write when it takes it from uncertain to certain."""
    assert protocol.resolves("unknown", "confirmed")
    assert protocol.resolves("maybe-queued", "failed")
    assert not protocol.resolves("queued", "confirmed")
    assert not protocol.resolves("unknown", "reconciled-absent")


WRITE = Action(tool="create", fingerprint="f" * 64, risk="reversible_write")


@pytest.mark.parametrize("status", [None, *JOURNAL_STATUSES])
def test_the_run_machine_answers_a_request_as_the_protocol_says(status):
    """Every journal status gets the protocol's answer from the run machine, and only a
    ``run`` is counted as a call."""
    run = RunState.start("t", 0)
    run, decision = apply(run, RunEvent("request", 1, WRITE, journal=status), Budget())
    assert decision.verdict == protocol.on_request(status)
    assert run.calls == (1 if decision.verdict in ("run", "journal") else 0)


def test_the_run_machine_refuses_a_status_the_protocol_does_not_know():
    """A shell must read entries through the protocol: a raw status it does not know is
    an impossible event."""
    with pytest.raises(RunStateError):
        RunEvent("request", 1, WRITE, journal="reconciled-present")


# -- one home: no shell keeps a list of statuses or compares one -------------------------

SRC = Path(__file__).resolve().parents[3] / "src" / "toolbreaker"
#: Journal statuses and queued-item statuses: the words only the core may compare.
STATUS_WORDS = frozenset(protocol.STATUSES) | frozenset(QUEUE_STATUSES)


def _shell_modules() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] != "core"
    ]


def _statusish(node: ast.expr) -> bool:
    """``status``, ``x.status``, ``x.get("status")``, ``x["status"]``."""
    if isinstance(node, ast.Name):
        return "status" in node.id
    if isinstance(node, ast.Attribute):
        return "status" in node.attr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return (
            node.func.attr == "get" and isinstance(first, ast.Constant) and first.value == "status"
        )
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
    return False


def _words(node: ast.expr) -> set[str]:
    """The string constants of ``node``, or of the tuple, list or set it is."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def test_no_status_is_compared_outside_the_core():
    """No shell compares a journal or queue status with a status word: ``status ==
    "unknown"``, ``entry.get("status") in ("pending", ...)``. They ask the protocol."""
    found = []
    for path, tree in _shell_modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if any(map(_statusish, operands)) and any(_words(o) & STATUS_WORDS for o in operands):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_no_shell_keeps_a_list_of_statuses():
    """No tuple, list or set outside the core names two statuses or more: the lists live
    in the write protocol and the queue's lifecycle, once."""
    found = []
    for path, tree in _shell_modules():
        for node in ast.walk(tree):
            listed = isinstance(node, (ast.Tuple, ast.List, ast.Set))
            if listed and len(_words(node) & STATUS_WORDS) >= 2:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_the_scan_sees_the_comparisons_it_forbids():
    """The two scans above find what they look for (so an empty answer means something)."""
    tree = ast.parse(
        'a = entry.get("status") == "unknown"\n'
        'b = status in ("pending", "unknown")\n'
        'c = item["status"] != "done"\n'
        'd = self.status is not "queued"\n'
        '_UNRESOLVED = ("unknown", "pending")\n'
    )
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert all(
        any(map(_statusish, [c.left, *c.comparators]))
        and any(_words(o) & STATUS_WORDS for o in [c.left, *c.comparators])
        for c in compares
    )
    assert len(compares) == 4
    lists = [n for n in ast.walk(tree) if isinstance(n, ast.Tuple)]
    assert [len(_words(t) & STATUS_WORDS) for t in lists] == [2, 2]
