"""The degradation matrix's core: chain validation, the choice of mode, labels, the queue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolbreaker.core._degrade import (
    MODES,
    QUEUE_STATUSES,
    QUEUE_TRANSITIONS,
    Choice,
    Offer,
    attempt_move,
    check_chain,
    choose,
    is_done,
    owner,
    passing,
    prunable,
    queue_action,
    queue_after,
    refuses_stale,
    settled,
    stale_label,
    stale_write_due,
    walks_past,
)
from toolbreaker.errors import PolicyError, WriteTransitionError

MINUTE = 60_000
NOON = 1_796_040_000_000 - 1_796_040_000_000 % 86_400_000 + 12 * 3_600_000  # 12:00 UTC


def test_a_single_mode_is_a_chain_of_one():
    """``degrade = "omit"`` is the chain ``("omit",)``."""
    assert check_chain("omit", operation="read", fallback=None, max_stale_ms=None) == ("omit",)


@pytest.mark.parametrize(
    ("chain", "operation", "fallback", "max_stale", "field", "words"),
    [
        (["stale"], "write", None, 60_000, "degrade", "never falls back to 'stale'"),
        (["stale", "omit"], "default", None, 60_000, "degrade", "never falls back to 'stale'"),
        (["stale"], "read", None, None, "degrade", "needs max_stale"),
        (["omit"], "read", None, 60_000, "max_stale", "no 'stale'"),
        (["degraded"], "read", None, None, "degrade", "needs fallback"),
        (["omit", "stale"], "read", None, 60_000, "degrade", "never reached"),
        (["queue", "queue"], "write", None, None, "degrade", "twice"),
        (["later"], "write", None, None, "degrade", "unknown degrade mode"),
        (3, "write", None, None, "degrade", "a mode or a list"),
    ],
)
def test_bad_chains_are_refused_naming_the_field(
    chain, operation, fallback, max_stale, field, words
):
    """Every mistake in a chain is a PolicyError naming ``degrade`` or ``max_stale``."""
    with pytest.raises(PolicyError) as caught:
        check_chain(chain, operation=operation, fallback=fallback, max_stale_ms=max_stale)
    assert caught.value.field == field
    assert words in caught.value.message


def test_the_first_servable_mode_wins_and_skipped_ones_say_why():
    """A stale answer too old passes to the next mode, and the choice says why."""
    offer = Offer(stale_at_ms=NOON - 20 * MINUTE)
    choice = choose(("stale", "omit"), offer, now_ms=NOON, max_stale_ms=10 * MINUTE)
    assert choice == Choice("omit", (("stale", "the last good answer is older than max_stale"),))
    fresh = choose(("stale", "omit"), offer, now_ms=NOON, max_stale_ms=30 * MINUTE)
    assert fresh == Choice("stale", (), 20 * MINUTE)


def test_the_max_stale_edge_is_inclusive():
    """An answer exactly ``max_stale`` old is served; one millisecond more is not."""
    offer = Offer(stale_at_ms=NOON - MINUTE)
    assert choose(("stale",), offer, now_ms=NOON, max_stale_ms=MINUTE).mode == "stale"
    assert choose(("stale",), offer, now_ms=NOON + 1, max_stale_ms=MINUTE).mode is None


def test_nothing_servable_is_the_plain_result():
    """No kept answer, no degraded tool, no queue: mode ``None``."""
    choice = choose(("stale", "degraded", "queue"), Offer(), now_ms=NOON, max_stale_ms=MINUTE)
    assert choice.mode is None
    assert [mode for mode, _ in choice.skipped] == ["stale", "degraded", "queue"]


def test_a_failed_mode_is_taken_out_of_the_offer():
    """``Offer.without`` lets the chain go on past a mode that failed to serve."""
    offer = Offer(stale_at_ms=NOON, degraded=True, queue=True)
    for mode in ("stale", "degraded", "queue"):
        assert choose((mode,), offer.without(mode), now_ms=NOON, max_stale_ms=MINUTE).mode is None
    assert offer.without("omit") is offer


def test_choice_to_dict_omits_unused_fields():
    """A plain choice is ``{"mode": ...}`` and nothing more."""
    assert Choice("omit").to_dict() == {"mode": "omit"}
    assert Choice("stale", (("queue", "x"),), 5).to_dict() == {
        "mode": "stale",
        "skipped": [["queue", "x"]],
        "stale_age_ms": 5,
    }


@pytest.mark.parametrize(
    ("age_ms", "label"),
    [
        (0, "as of 12:00 UTC, 0 seconds old"),
        (1_000, "as of 11:59 UTC, 1 second old"),
        (7 * MINUTE, "as of 11:53 UTC, 7 minutes old"),
        (MINUTE, "as of 11:59 UTC, 1 minute old"),
        (3 * 3_600_000, "as of 09:00 UTC, 3 hours old"),
    ],
)
def test_stale_labels(age_ms, label):
    """The label gives the time of day in UTC and the age in words."""
    assert stale_label(NOON - age_ms, NOON) == label


def test_a_label_from_another_day_carries_the_date():
    """An answer from yesterday shows its date, and its age in hours."""
    assert stale_label(NOON - 86_400_000, NOON).endswith("UTC, 24 hours old")
    assert "-" in stale_label(NOON - 86_400_000, NOON)


def test_stale_writes_are_throttled():
    """A kept answer is refreshed at most once per ``every_ms`` (and after a clock jump)."""
    assert stale_write_due(None, NOON, 5_000)
    assert not stale_write_due(NOON, NOON + 4_999, 5_000)
    assert stale_write_due(NOON, NOON + 5_000, 5_000)
    assert stale_write_due(NOON, NOON - 1, 5_000)


@pytest.mark.parametrize(
    ("status", "until", "action"),
    [
        ("queued", None, "claim"),
        ("claimed", NOON + 1, "skip"),
        ("claimed", NOON, "claim"),
        ("running", NOON + 1, "skip"),
        ("running", NOON, "reconcile"),
        ("unknown", None, "reconcile"),
        ("done", None, "skip"),
        ("failed", None, "skip"),
        ("garbage", None, "skip"),
    ],
)
def test_queue_actions(status, until, action):
    """What a drainer does with an item: started work whose lease ran out is reconciled."""
    assert queue_action({"status": status, "until": until}, NOON) == action


@given(
    status=st.sampled_from((*QUEUE_STATUSES, "other")),
    until=st.one_of(st.none(), st.integers(0, 2 * NOON), st.booleans(), st.text(max_size=3)),
    now=st.integers(0, 2 * NOON),
)
def test_started_work_is_never_claimed_again(status, until, now):
    """Property: an item that may have started is never ``claim``ed (never replayed)."""
    action = queue_action({"status": status, "until": until}, now)
    if status in ("running", "unknown", "done", "failed"):
        assert action != "claim"


@given(
    chain=st.lists(st.sampled_from(MODES), unique=True, max_size=6),
    stale_at=st.one_of(st.none(), st.integers(0, NOON)),
    degraded=st.booleans(),
    queue=st.booleans(),
    max_stale=st.integers(0, NOON),
)
def test_choose_serves_only_what_is_offered(chain, stale_at, degraded, queue, max_stale):
    """Property: the chosen mode is in the chain, servable, and every earlier one skipped."""
    offer = Offer(stale_at_ms=stale_at, degraded=degraded, queue=queue)
    choice = choose(chain, offer, now_ms=NOON, max_stale_ms=max_stale)
    if choice.mode is None:
        assert len(choice.skipped) == len(chain)
        return
    index = chain.index(choice.mode)
    assert [mode for mode, _ in choice.skipped] == chain[:index]
    if choice.mode == "stale":
        assert stale_at is not None
        assert NOON - stale_at <= max_stale
    assert choice.mode != "degraded" or degraded
    assert choice.mode != "queue" or queue


@given(
    status=st.sampled_from([*QUEUE_STATUSES, "odd", None]),
    finished=st.one_of(st.none(), st.booleans(), st.integers(0, 2 * NOON), st.text(max_size=3)),
    now=st.integers(0, 2 * NOON),
    older_than=st.integers(0, 10 * MINUTE),
)
def test_only_done_work_older_than_the_bound_is_prunable(status, finished, now, older_than):
    """Pending, claimed, running, failed and unknown items are never pruned; a done item
    only once its finish time (a whole number) is at least ``older_than`` in the past."""
    item = {"status": status, "finished_at": finished}
    expected = status == "done" and type(finished) is int and finished <= now - older_than
    assert prunable(item, now, older_than) is expected


def test_the_queued_items_lifecycle_is_the_table():
    """Every move of a queued item, and only those; each lands on a queue status."""
    assert dict(QUEUE_TRANSITIONS) == {
        (None, "enqueue"): "queued",
        (None, "hand-off"): "handed-off",
        ("queued", "claim"): "claimed",
        ("claimed", "claim"): "claimed",
        ("claimed", "release"): "queued",
        ("claimed", "start"): "running",
        ("running", "finish"): "done",
        ("running", "release"): "queued",
        ("running", "requeue"): "queued",
        ("running", "fail"): "failed",
        ("running", "lose"): "unknown",
        ("running", "found"): "done",
        ("unknown", "found"): "done",
        ("running", "not-found"): "unknown",
        ("unknown", "not-found"): "unknown",
    }
    assert set(QUEUE_TRANSITIONS.values()) <= set(QUEUE_STATUSES)


@pytest.mark.parametrize(
    ("status", "move"),
    [
        ("handed-off", "claim"),
        ("done", "start"),
        ("unknown", "start"),
        (None, "claim"),
        (7, "claim"),
    ],
)
def test_an_illegal_queue_move_raises(status, move):
    """A handed-off, done or unknown item is never started; a bad status is refused."""
    with pytest.raises(WriteTransitionError):
        queue_after(status, move)


def test_who_owns_and_what_settles_an_item():
    """A handed-off item is a person's; done, failed and handed-off items are settled."""
    assert owner({"status": "handed-off"}) == "person"
    assert owner({"status": "queued"}) == "queue"
    assert [settled({"status": s}) for s in QUEUE_STATUSES] == [
        False,
        False,
        False,
        True,
        True,
        False,
        True,
    ]
    assert is_done({"status": "done"})
    assert not is_done({"status": "handed-off"})
    assert queue_action({"status": "handed-off"}, NOON) == "skip"


def test_how_a_failed_attempt_ends_and_what_the_chain_walks_past():
    """A failed attempt that may have committed is lost (never replayed); a queue write that
    may have been made is never walked past; a saturated rejection is not degraded."""
    assert attempt_move(may_have_committed=True, retryable=True) == "lose"
    assert attempt_move(may_have_committed=False, retryable=True) == "requeue"
    assert attempt_move(may_have_committed=False, retryable=False) == "fail"
    assert not walks_past("queue", maybe_written=True)
    assert walks_past("queue", maybe_written=False)
    assert walks_past("degraded", maybe_written=True)
    assert passing("saturated")
    assert not passing("opened")


def test_only_a_read_is_ever_answered_stale():
    """One rule for sheet rows (operation classes) and run-guard tools (risk classes): a
    chain with ``stale`` serves a read only; any write, by either name, is refused."""
    for kind in ("write", "default", "search", "reversible_write", "irreversible"):
        assert refuses_stale(kind, ("stale", "omit"))
        assert not refuses_stale(kind, ("omit",))
    assert not refuses_stale("read", ("stale", "omit"))
