"""Calibration signals: is the policy right, the classifier right, the model obedient?

Pure functions of transition records (from a receipt, a replayed trace or the event
stream); no clock is read, ``until`` closes the last interval. Per breaker key:

- the openings over the observed span, said as a person reads them (:func:`opens_rate`:
  ``3 opens in the last 96 s``; per hour only once an hour has been observed, never
  extrapolated from a few seconds) and the share of time open (above ~20 % the provider
  is the problem, not the thresholds);
- the half-open reopen ratio: probes that failed over half-open episodes (above ~70 %
  the cooldown is shorter than the provider's recovery, so the breaker flaps);
- qualifying failures by class, when the caller knows the classes: a breaker that trips
  on ``http-4xx`` has a classifier problem, not a threshold problem;
- unclassified exceptions by type, when the caller knows the classes: an exception the
  classifier does not know (class ``unknown-exception:<Type>``) never counts toward
  opening, so ten ``MyAPIError`` leave the breaker closed; the finding says to classify
  it;
- model compliance: how often a tool was called again while the cooldown the model had
  been given (``retry_after_seconds``) had not passed. While a breaker is open every
  rejection with reason ``cooldown`` is such a re-call: the model was told "unavailable,
  retry after N s" when the breaker opened and on every rejection since, and the deadline
  it was told does not move during one open episode. Several agents sharing a breaker
  each count: a re-call may come from a run that had not been told yet.

:func:`findings` turns the signals into the rules of thumb, each with its numbers. Its
advice knows what the model already has instead of the tool (:func:`covered_by`: the
sheet row's fallback or degradation chain, or degraded answers it was served), and never
tells the user to give it a fallback it has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from toolbreaker.core._breaker.predicates import unclassified_type
from toolbreaker.core._breaker.state import (
    Transition,
    changed_phase,
    half_opened,
    opened,
    reopened,
    was_open,
)

__all__ = [
    "CLIENT_ERROR_SHARE",
    "FLAPPING_RATIO",
    "MIN_SPAN_MS",
    "OPEN_SHARE",
    "RATE_SPAN_MS",
    "Compliance",
    "Finding",
    "Signals",
    "calibrate",
    "compliance",
    "count_class",
    "covered_by",
    "findings",
    "is_client_error",
    "opens_rate",
]

#: Above this half-open reopen ratio the cooldown is too short.
FLAPPING_RATIO: Final = 0.7
#: Above this share of time open the provider is the problem.
OPEN_SHARE: Final = 0.2
#: Above this share of qualifying failures being client errors, the classifier is wrong.
CLIENT_ERROR_SHARE: Final = 0.2
#: Rates and shares over less than a minute of observation say nothing; no finding.
MIN_SPAN_MS: Final = 60_000
_HOUR_MS: Final = 3_600_000
#: Openings are said per hour only over at least this much observation (an hour); over
#: less they are said as counted, with the span (:func:`opens_rate`).
RATE_SPAN_MS: Final = _HOUR_MS


def _duration(ms: int) -> str:
    seconds = max(0, ms) // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def opens_rate(opens: int, span_ms: int) -> str:
    """Openings over an observed span, as a person reads them (the one rule for it).

    Under :data:`RATE_SPAN_MS` the count and the span: ``3 opens in the last 96 s``
    (a rate per hour from a few seconds would say 112/h of a breaker seen for a minute and
    a half); from an hour on, the rate too: ``14 opens in the last 3.5 h (4.0/h)``.
    """
    noun = "open" if opens == 1 else "opens"
    said = f"{opens} {noun} in the last {_duration(span_ms)}"
    if span_ms >= RATE_SPAN_MS:
        said += f" ({opens * _HOUR_MS / span_ms:.1f}/h)"
    return said


def covered_by(
    fallback: str | None = None,
    degrade: Iterable[str] = (),
    degraded: Mapping[str, int] | None = None,
) -> str | None:
    """What the model already has instead of an unavailable tool, in words; ``None``: nothing.

    Args:
        fallback: the tool the model is offered instead (the sheet row's ``fallback``).
        degrade: the row's degradation chain (``["stale", "omit"]``).
        degraded: degraded answers the model was served, by mode (from the stream).
    """
    parts = []
    if fallback:
        parts.append(f"fallback {fallback}")
    chain = list(degrade)
    if chain:
        parts.append("degrade " + " > ".join(chain))
    served = {mode: n for mode, n in (degraded or {}).items() if n > 0}
    if served:
        total = sum(served.values())
        modes = ", ".join(f"{mode} {n}" for mode, n in sorted(served.items()))
        answers = "answer" if total == 1 else "answers"
        parts.append(f"{total} degraded {answers} served ({modes})")
    return "; ".join(parts) or None


def is_client_error(failure_class: str) -> bool:
    """Whether a failure class is a 4xx other than 408 and 429 (the caller's mistake)."""
    if not failure_class.startswith("http-"):
        return False
    code = failure_class[5:]
    return len(code) == 3 and code.startswith("4") and code not in ("408", "429")


def count_class(
    failures: dict[str, dict[str, int]],
    unclassified: dict[str, dict[str, int]],
    record: Transition,
    failure_class: str | None,
) -> None:
    """Count one record's class, from an event stream entry, for :func:`calibrate`.

    A qualifying failure counts by class in ``failures``; an outcome the classifier did
    not know (``ignored``, class ``unknown-exception:<Type>``) by type in
    ``unclassified``; both per breaker key. Anything else counts nothing.
    """
    if failure_class is None:
        return
    kind = record.event.type
    if kind == "failure":
        per = failures.setdefault(record.dependency, {})
        per[failure_class] = per.get(failure_class, 0) + 1
        return
    name = unclassified_type(failure_class) if kind == "ignored" else None
    if name is not None:
        per = unclassified.setdefault(record.dependency, {})
        per[name] = per.get(name, 0) + 1


@dataclasses.dataclass(frozen=True, slots=True)
class Signals:
    """The calibration numbers of one breaker key over ``span_ms``.

    Attributes:
        key: the breaker key.
        span_ms: from the first record to ``until`` (or the last record).
        opens: transitions into open from another phase.
        time_open_ms: time spent open (isolated time included).
        half_opens: half-open episodes.
        reopens: half-open episodes that ended open again.
        admitted: calls that reached the dependency.
        rejected: calls rejected locally.
        early_recalls: calls rejected with ``cooldown``: made before the retry time the
            model had been told.
        early_recall_episodes: open episodes with at least one early re-call.
        failures_by_class: qualifying failures by class (empty when classes are unknown).
        unclassified: outcomes the classifier did not know, by exception type: they
            never counted toward opening (empty when classes are unknown).
    """

    key: str
    span_ms: int
    opens: int
    time_open_ms: int
    half_opens: int
    reopens: int
    admitted: int
    rejected: int
    early_recalls: int
    early_recall_episodes: int
    failures_by_class: Mapping[str, int]
    unclassified: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def opens_per_hour(self) -> float:
        """Openings per hour of the span (0 for an empty span)."""
        return self.opens * _HOUR_MS / self.span_ms if self.span_ms else 0.0

    @property
    def open_share(self) -> float:
        """Share of the span spent open."""
        return self.time_open_ms / self.span_ms if self.span_ms else 0.0

    @property
    def reopen_ratio(self) -> float:
        """Share of half-open episodes that reopened."""
        return self.reopens / self.half_opens if self.half_opens else 0.0

    @property
    def client_errors(self) -> int:
        """Qualifying failures that were client errors (4xx other than 408, 429)."""
        return sum(n for name, n in self.failures_by_class.items() if is_client_error(name))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the derived ratios."""
        return {
            "key": self.key,
            "span_ms": self.span_ms,
            "opens": self.opens,
            "opens_per_hour": round(self.opens_per_hour, 3),
            "opens_rate": opens_rate(self.opens, self.span_ms),
            "time_open_ms": self.time_open_ms,
            "open_share": round(self.open_share, 4),
            "half_opens": self.half_opens,
            "reopens": self.reopens,
            "reopen_ratio": round(self.reopen_ratio, 4),
            "admitted": self.admitted,
            "rejected": self.rejected,
            "early_recalls": self.early_recalls,
            "early_recall_episodes": self.early_recall_episodes,
            "failures_by_class": dict(sorted(self.failures_by_class.items())),
            "unclassified": dict(sorted(self.unclassified.items())),
        }


@dataclasses.dataclass(slots=True)
class _Tally:
    first: int
    last: int
    open_since: int | None  # when the breaker last opened, while it is open
    opens: int = 0
    time_open: int = 0
    half_opens: int = 0
    reopens: int = 0
    admitted: int = 0
    rejected: int = 0
    recalls: int = 0
    recall_episodes: int = 0
    recalled_this_episode: bool = False


def calibrate(
    records: Iterable[Transition],
    failure_classes: Mapping[str, Mapping[str, int]] | None = None,
    *,
    until: int | None = None,
    unclassified: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Signals]:
    """The signals of every breaker key in ``records`` (in order per key).

    Args:
        records: transition records; their ``at`` never decreases per key.
        failure_classes: per key, qualifying failures by class, when known.
        until: the instant the observation ends (default: each key's last record).
        unclassified: per key, outcomes the classifier did not know by exception type,
            when known (:func:`count_class` counts both from a stream).
    """
    tallies: dict[str, _Tally] = {}
    for record in records:
        at = record.event.at
        tally = tallies.get(record.dependency)
        if tally is None:
            since = at if was_open(record) else None
            tally = tallies[record.dependency] = _Tally(at, at, since)
        tally.last = max(tally.last, at)
        tally.admitted += record.attempted
        tally.rejected += record.rejected
        if record.reason == "cooldown":
            tally.recalls += 1
            if not tally.recalled_this_episode:
                tally.recalled_this_episode = True
                tally.recall_episodes += 1
        if not changed_phase(record):
            continue
        if tally.open_since is not None:  # a change of phase while open: it left open
            tally.time_open += max(0, at - tally.open_since)
            tally.open_since = None
        if opened(record):
            tally.opens += 1
            tally.open_since = at
            tally.recalled_this_episode = False
            if reopened(record):
                tally.reopens += 1
        elif half_opened(record):
            tally.half_opens += 1
    classes = failure_classes or {}
    unknown = unclassified or {}
    out: dict[str, Signals] = {}
    for key, tally in tallies.items():
        end = max(tally.last, until if until is not None else tally.last)
        still_open = 0 if tally.open_since is None else max(0, end - tally.open_since)
        time_open = tally.time_open + still_open
        out[key] = Signals(
            key=key,
            span_ms=end - tally.first,
            opens=tally.opens,
            time_open_ms=time_open,
            half_opens=tally.half_opens,
            reopens=tally.reopens,
            admitted=tally.admitted,
            rejected=tally.rejected,
            early_recalls=tally.recalls,
            early_recall_episodes=tally.recall_episodes,
            failures_by_class=dict(classes.get(key, {})),
            unclassified=dict(unknown.get(key, {})),
        )
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One rule of thumb that fired, with the numbers behind it.

    Attributes:
        key: the breaker key.
        rule: ``flapping``, ``mostly-open``, ``client-errors``, ``unclassified`` or
            ``model-recalls``.
        message: the finding in words, with its numbers.
        advice: what to change.
    """

    key: str
    rule: str
    message: str
    advice: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready."""
        return dataclasses.asdict(self)


def findings(
    signals: Mapping[str, Signals], covered: Mapping[str, str] | None = None
) -> list[Finding]:
    """The seed's rules of thumb over ``signals``, by key then rule.

    ``covered`` says, per key, what the model already has instead of the tool
    (:func:`covered_by`): its advice then names that instead of asking for a fallback.
    """
    out: list[Finding] = []
    for key in sorted(signals):
        s = signals[key]
        has = (covered or {}).get(key)
        if s.half_opens and s.reopen_ratio > FLAPPING_RATIO:
            out.append(
                Finding(
                    key,
                    "flapping",
                    f"{s.reopens} of {s.half_opens} half-open probes reopened "
                    f"({s.reopen_ratio:.0%} > {FLAPPING_RATIO:.0%})",
                    "grow the cooldown (cooldown_ms or its backoff): the provider needs "
                    "longer to recover than the breaker waits",
                )
            )
        if s.span_ms >= MIN_SPAN_MS and s.open_share > OPEN_SHARE:
            out.append(
                Finding(
                    key,
                    "mostly-open",
                    f"open {s.open_share:.0%} of {s.span_ms / 1000:.0f} s "
                    f"({opens_rate(s.opens, s.span_ms)})",
                    "the provider is the problem, not the thresholds: escalate to its owner"
                    + (
                        f" (the model already has {has})"
                        if has
                        else ", or give the model a fallback"
                    ),
                )
            )
        qualifying = sum(s.failures_by_class.values())
        if qualifying and s.opens and s.client_errors / qualifying > CLIENT_ERROR_SHARE:
            worst = sorted(
                ((n, c) for c, n in s.failures_by_class.items() if is_client_error(c)),
                reverse=True,
            )
            named = ", ".join(f"{c}: {n}" for n, c in worst[:3])
            out.append(
                Finding(
                    key,
                    "client-errors",
                    f"{s.client_errors} of {qualifying} qualifying failures were client "
                    f"errors ({named}) and the breaker opened {s.opens} times",
                    "fix the classifier: a 4xx is the caller's mistake, not the provider's "
                    "health; make it non-qualifying",
                )
            )
        for name, count in sorted(s.unclassified.items(), key=lambda item: (-item[1], item[0])):
            out.append(
                Finding(
                    key,
                    "unclassified",
                    f"`{name}` was raised {count} {'time' if count == 1 else 'times'} by {key} "
                    "and never counted",
                    f"classify it: a classifier that says whether {name} means {key} is "
                    "unhealthy (a failure that counts) or not (ignored on purpose); unknown "
                    "exceptions never count toward opening",
                )
            )
        if s.early_recalls:
            times = "time" if s.early_recalls == 1 else "times"
            episodes = max(s.opens, s.early_recall_episodes)
            out.append(
                Finding(
                    key,
                    "model-recalls",
                    f"the tool was called {s.early_recalls} {times} before the retry time "
                    f"the model was told, in {s.early_recall_episodes} of {episodes} "
                    "open episodes",
                    (
                        "reword the unavailable instruction: the model did not take "
                        f"'unavailable' for an answer (it already has {has})"
                    )
                    if has
                    else "reword the unavailable instruction (or name a fallback): the model "
                    "did not take 'unavailable' for an answer",
                )
            )
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Compliance:
    """Whether models obeyed "unavailable" for one tool and one instruction wording.

    Attributes:
        tool: the tool name the model saw.
        instructions_version: which instruction templates it was shown.
        open_episodes: times a breaker of this tool opened (the model was told to wait).
        early_recalls: calls made before the retry time the model was told.
        episodes_with_recalls: open episodes with at least one early re-call.
    """

    tool: str
    instructions_version: str
    open_episodes: int
    early_recalls: int
    episodes_with_recalls: int

    @property
    def recall_share(self) -> float:
        """Share of open episodes in which the model called again too soon."""
        episodes = max(self.open_episodes, self.episodes_with_recalls)
        return self.episodes_with_recalls / episodes if episodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the share."""
        return {**dataclasses.asdict(self), "recall_share": round(self.recall_share, 4)}


def compliance(observations: Iterable[tuple[str, str, Transition]]) -> list[Compliance]:
    """Model compliance per ``(tool, instructions_version)``, from labelled records.

    ``observations`` are ``(tool, instructions_version, record)`` in order per breaker
    key; compare rows of one tool to see which wording models obey.
    """
    tallies: dict[tuple[str, str], list[int]] = {}
    recalled: dict[str, bool] = {}
    for tool, version, record in observations:
        tally = tallies.setdefault((tool, version), [0, 0, 0])
        key = record.dependency
        if opened(record):
            tally[0] += 1
            recalled[key] = False
        if record.reason == "cooldown":
            tally[1] += 1
            if not recalled.get(key, False):
                recalled[key] = True
                tally[2] += 1
    return [
        Compliance(tool, version, *counts) for (tool, version), counts in sorted(tallies.items())
    ]
