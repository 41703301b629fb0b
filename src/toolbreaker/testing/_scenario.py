"""Exercise scenarios: the faults an agent's tools meet, and whether its promises held.

Theory of operation. A *scenario* (a TOML file) scripts what the tools of a user's agent
meet: per *target* (an HTTP route key ``"METHOD /first-segment"``, or a plain Python
tool's name) and per attempt, a fault. The fault proxy and the tool wrapper of
:mod:`toolbreaker.testing` ask :func:`fault_at` which fault the n-th attempt gets and
carry it out; they count what reached the service. :func:`judge` turns those counts into
the three outcomes a resilient agent owes, measured:

- **before material damage**: no remote attempt on a failing target while a breaker fed
  by it was open, no business action committed twice, and no more failed attempts on a
  target than the scenario tolerates (an agent without a breaker fails here);
- **understandable**: the run's stop packet is valid (its schema, a known condition, a
  next safe action, counters) and accounts for every write the service committed;
- **resumption**: a second run of the same task against the same journal, with the
  faults gone, commits no business action the first run committed.

Pure and standard library only: the shells measure, this module decides.

A scenario file::

    name = "search-outage"
    description = "The search provider answers 503 to everything."
    timeout = 0.5              # seconds: the deadline the agent's tools must use
    behaviour = "insist"       # what a scripted model does: plain, alternate, reword, insist

    [faults.search-down]
    route = "GET /search"      # or: tool = "search_catalog" for a plain Python tool
    kind = "outage"            # see FAULT_KINDS
    after = 0                  # the first N attempts pass (an outage after N good steps)
    # steps = [1, 2]           # or: only these attempts (1-based)

    [expect]
    max_failed_attempts = 3    # failed attempts tolerated per target
    conditions = ["loop"]      # the stop conditions accepted (default: any valid one)

    [business_key]
    "POST /tickets" = ["title"]  # what makes two writes one business action
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, get_args

from toolbreaker.core._breaker.policy import Policy
from toolbreaker.core._config import build_toml, load_toml, seconds
from toolbreaker.core._files import shown
from toolbreaker.core._run.fingerprint import fingerprint
from toolbreaker.core._run.state import RUNNING, STOP_CONDITIONS
from toolbreaker.errors import PolicyError

__all__ = [
    "BEHAVIOURS",
    "DEADLINE_FACTOR",
    "FAULT_KINDS",
    "MALFORMED",
    "PROMISES",
    "STOP_SCHEMA",
    "FaultRule",
    "Judgement",
    "Malformed",
    "Measured",
    "Promise",
    "Scenario",
    "TargetCount",
    "action_of",
    "fault_at",
    "is_write",
    "judge",
    "load_scenario",
    "normal_route",
    "packet_problems",
    "parse_scenario",
    "route_key",
    "scenario_from_dict",
]

#: What a fault does to one attempt.
#:
#: - ``outage``: an error status (default 503) without reaching the service;
#: - ``slow``: held past the deadline, then dropped; never reaches the service;
#: - ``rate-limit``: 429 with ``Retry-After`` (``retry_after`` seconds);
#: - ``commit-then-timeout``: carried out (a write commits), then held past the deadline
#:   and dropped: a success hidden behind a timeout;
#: - ``malformed``: carried out, answered 200 with a body of the wrong shape
#:   (``malformed = "shape"``) or cut-off JSON (``"truncated"``);
#: - ``credential``: 401 (or ``status = 403``) without reaching the service;
#: - ``late-success``: carried out and answered normally, after the deadline.
FAULT_KINDS: Final = (
    "outage",
    "slow",
    "rate-limit",
    "commit-then-timeout",
    "malformed",
    "credential",
    "late-success",
)
#: The kinds that carry the attempt out (a write commits) before misbehaving.
_CARRIED_OUT: Final = frozenset({"commit-then-timeout", "malformed", "late-success"})
#: The kinds that hold the attempt past the deadline.
_DELAYED: Final = frozenset({"slow", "commit-then-timeout", "late-success"})
_DEFAULT_STATUS: Final = {"outage": 503, "rate-limit": 429, "credential": 401}
#: How a ``malformed`` answer is wrong: its JSON parses but has the wrong shape
#: (``"shape"``), or it is cut off and does not parse (``"truncated"``). The first is the
#: default. The fault proxy, the bundled service and the MCP wrapper read these names.
Malformed = Literal["shape", "truncated"]
MALFORMED: Final[tuple[Malformed, ...]] = get_args(Malformed)
_STATUSES: Final = {
    "outage": range(500, 600),
    "rate-limit": (429, 503),
    "credential": (401, 403),
}

#: What a scripted model does in a scenario (a real model is given the ``prompt``):
#: ``plain`` (uses the tools as asked), ``alternate`` (two tools in turn, so an
#: identical-call detector misses the loop), ``reword`` (one business action with its
#: arguments reworded each time), ``insist`` (calls a tool again after being told it is
#: unavailable).
BEHAVIOURS: Final = ("plain", "alternate", "reword", "insist")
#: The three outcomes a report gives, in order.
PROMISES: Final = ("before-damage", "understandable", "resumption")
#: The schema tag a valid stop packet carries.
STOP_SCHEMA: Final = "toolbreaker.stop/v1"

_ROUTE: Final = re.compile(r"([A-Z]+) (/[^/?#\s]*)/?")
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_MAX_STEP: Final = 1_000_000
#: The longest delay or ``Retry-After`` a scenario scripts.
_MAX_SECONDS: Final = 600.0
#: The exercise's breakers take this many times the scenario's ``timeout`` as their
#: deadline (cooperative: the tools' own timeout fires first).
DEADLINE_FACTOR: Final = 2
#: The longest scenario ``timeout``: the breakers' deadline it becomes must be one a probe's
#: lease under the default policy outlives, as every breaker's deadline must.
_MAX_TIMEOUT: Final = Policy().lease_ttl_ms / 1000 / DEADLINE_FACTOR


def route_key(method: str, path: str) -> str:
    """The route key of a request: ``"METHOD /first-segment"`` (``"GET /orders"``)."""
    first = path.split("?", 1)[0].split("#", 1)[0].strip("/").split("/", 1)[0]
    return f"{method.upper()} /{first}"


def normal_route(text: object) -> str | None:
    """``text`` as a route key, or ``None`` when it is not one.

    ``"GET /search"``; blanks around it and a trailing ``/`` are dropped. The one
    spelling of route keys: scenarios and the tool service's faults both take it.
    """
    match = _ROUTE.fullmatch(text.strip()) if isinstance(text, str) else None
    return None if match is None else f"{match[1]} {match[2]}"


def is_write(target: str) -> bool:
    """Whether a route key is a write (any method but GET, HEAD and OPTIONS).

    A tool name (no method) is a write only when declared so to the wrapper.
    """
    match = _ROUTE.fullmatch(target)
    return match is not None and match[1] not in _SAFE_METHODS


@dataclasses.dataclass(frozen=True, slots=True)
class FaultRule:
    """One scripted fault of a scenario: which attempts of a target get what.

    Attributes:
        name: the table's name in the file (``[faults.NAME]``).
        target: a route key (``"POST /tickets"``) or a plain tool's name.
        kind: one of :data:`FAULT_KINDS`.
        steps: the attempts (1-based, counted per target) that get the fault; ``()``
            means every attempt after ``after``.
        after: the attempts that pass untouched first (an outage after N good steps).
        status: the error status of ``outage``, ``rate-limit`` and ``credential``.
        retry_after: seconds for ``Retry-After`` (``rate-limit``).
        delay: seconds an attempt is held (``slow``, ``commit-then-timeout``,
            ``late-success``); always past the scenario's ``timeout``.
        malformed: ``"shape"`` or ``"truncated"`` (``malformed``).
    """

    name: str
    target: str
    kind: str
    steps: tuple[int, ...] = ()
    after: int = 0
    status: int | None = None
    retry_after: float | None = None
    delay: float = 0.0
    malformed: str = MALFORMED[0]

    @property
    def carried_out(self) -> bool:
        """Whether the attempt reaches the service (a write commits) under this fault."""
        return self.kind in _CARRIED_OUT

    @property
    def answers_status(self) -> bool:
        """Whether the fault answers with an error status instead of the service."""
        return self.status is not None

    def applies(self, attempt: int) -> bool:
        """Whether the ``attempt``-th attempt (1-based) of the target gets this fault."""
        if self.steps:
            return attempt in self.steps
        return attempt > self.after


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """A parsed, validated scenario (see the module docstring for the file).

    Attributes:
        name: the scenario's name (default: the file's stem).
        description: what it does, in words.
        task: the task id both runs use (default ``exercise-<name>``).
        timeout: seconds: the deadline the agent's tools must use.
        behaviour: what a scripted model does (:data:`BEHAVIOURS`).
        prompt: what a real model is asked.
        faults: the fault rules, in the file's order.
        max_failed_attempts: failed attempts tolerated per target.
        conditions: the stop conditions accepted; ``()`` accepts any valid one.
        business_key: target to the fields of a write that make it one business action
            (a target left out: all of its arguments).
        source: the file it was read from, if any.
    """

    name: str
    description: str = ""
    task: str = ""
    timeout: float = 0.5
    behaviour: str = "plain"
    prompt: str = ""
    faults: tuple[FaultRule, ...] = ()
    max_failed_attempts: int = 3
    conditions: tuple[str, ...] = ()
    business_key: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    source: str | None = None

    @property
    def targets(self) -> tuple[str, ...]:
        """Every target a fault names, each once, in the file's order."""
        return tuple(dict.fromkeys(rule.target for rule in self.faults))

    def to_dict(self) -> dict[str, Any]:
        """The scenario as a JSON-ready dict (what a report shows of it)."""
        return {
            "name": self.name,
            "description": self.description,
            "task": self.task,
            "timeout": self.timeout,
            "behaviour": self.behaviour,
            "faults": [{"name": r.name, "target": r.target, "kind": r.kind} for r in self.faults],
            "source": self.source,
        }


def fault_at(scenario: Scenario, target: str, attempt: int) -> FaultRule | None:
    """The fault the ``attempt``-th attempt (1-based) of ``target`` gets, if any.

    The first rule of the file that applies wins.
    """
    for rule in scenario.faults:
        if rule.target == target and rule.applies(attempt):
            return rule
    return None


def action_of(target: str, args: Mapping[str, Any], fields: Sequence[str] = ()) -> str:
    """The business action a write carries out, as a semantic fingerprint.

    Of ``fields`` of its arguments, or of all of them when ``fields`` is empty.

    Two reworded requests for one action (``"Broken  Cable"``, ``"broken cable"``) have
    the same action; an argument that cannot be fingerprinted makes the action its text.
    """
    chosen = {name: args.get(name) for name in fields} if fields else dict(args)
    try:
        return fingerprint(target, chosen)
    except (ValueError, TypeError):
        return fingerprint(target, {"text": repr(sorted(chosen.items(), key=str))})


# -- reading a scenario ------------------------------------------------------------------


_TOP: Final = frozenset(
    {"name", "description", "task", "timeout", "behaviour", "prompt", "faults", "expect"}
    | {"business_key"}
)
_FAULT_FIELDS: Final = frozenset(
    {"route", "tool", "kind", "steps", "after", "status", "retry_after", "delay", "malformed"}
)
_EXPECT_FIELDS: Final = frozenset({"max_failed_attempts", "conditions"})


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file.

    Raises:
        PolicyError: located at the file and the line of the offending key.
    """
    scenario: Scenario = load_toml(path, lambda data: scenario_from_dict(data, Path(path).stem))
    return dataclasses.replace(scenario, source=str(path))


def parse_scenario(text: str, name: str) -> Scenario:
    """:func:`load_scenario` for text already read; ``name`` is the file errors point at."""
    scenario: Scenario = build_toml(text, name, lambda data: scenario_from_dict(data, name))
    return dataclasses.replace(scenario, source=name)


def _unknown(data: Mapping[str, Any], known: Collection[str], where: str) -> None:
    for key in data:
        if key not in known:
            dotted = f"{where}.{key}" if where else str(key)
            raise PolicyError(
                f"unknown scenario field {dotted!r} (known: {', '.join(sorted(known))})",
                field=dotted,
            )


def _text(data: Mapping[str, Any], key: str, default: str, field: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise PolicyError(f"{field} must be a string, got {shown(value)}", field=field)
    return value


def _int(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _MAX_STEP:
        raise PolicyError(
            f"{field} must be a whole number from {minimum} to {_MAX_STEP:,}, got {shown(value)}",
            field=field,
        )
    return value


def scenario_from_dict(data: Mapping[str, Any], default_name: str) -> Scenario:
    """Build a :class:`Scenario` from a parsed TOML table.

    Raises:
        PolicyError: naming the offending field (dotted: ``faults.search-down.kind``);
            a scenario without a fault (it would judge nothing) is refused too.
    """
    _unknown(data, _TOP, "")
    name = _text(data, "name", default_name, "name").strip() or default_name
    timeout = seconds(data.get("timeout", 0.5), "timeout", _MAX_TIMEOUT)
    behaviour = _text(data, "behaviour", "plain", "behaviour")
    if behaviour not in BEHAVIOURS:
        raise PolicyError(
            f"behaviour must be one of {', '.join(BEHAVIOURS)}, got {shown(behaviour)}",
            field="behaviour",
        )
    faults_table = data.get("faults", {})
    if not isinstance(faults_table, Mapping):
        raise PolicyError("faults must be tables: [faults.NAME]", field="faults")
    faults = tuple(
        _fault(str(fault_name), table, timeout) for fault_name, table in faults_table.items()
    )
    expect = data.get("expect", {})
    if not isinstance(expect, Mapping):
        raise PolicyError("expect must be a table: [expect]", field="expect")
    _unknown(expect, _EXPECT_FIELDS, "expect")
    conditions = expect.get("conditions", [])
    if not isinstance(conditions, list) or not all(isinstance(c, str) for c in conditions):
        raise PolicyError("expect.conditions must be a list of strings", field="expect.conditions")
    for condition in conditions:
        if condition not in (*STOP_CONDITIONS, RUNNING):
            raise PolicyError(
                f"expect.conditions: unknown stop condition {shown(condition)} "
                f"(known: {', '.join((*STOP_CONDITIONS, RUNNING))})",
                field="expect.conditions",
            )
    business_key = _business_key(data.get("business_key", {}))
    if not faults:
        # Nothing met a fault, so every promise "holds": a green report of nothing.
        raise PolicyError(
            "the scenario scripts no fault, so there is nothing to exercise: add a "
            f"[faults.NAME] table with a route or a tool and a kind ({', '.join(FAULT_KINDS)})",
            field="faults",
        )
    return Scenario(
        name=name,
        description=_text(data, "description", "", "description"),
        task=_text(data, "task", f"exercise-{name}", "task").strip() or f"exercise-{name}",
        timeout=timeout,
        behaviour=behaviour,
        prompt=_text(data, "prompt", "", "prompt"),
        faults=faults,
        max_failed_attempts=_int(
            expect.get("max_failed_attempts", 3), "expect.max_failed_attempts", 0
        ),
        conditions=tuple(conditions),
        business_key=business_key,
    )


def _business_key(table: object) -> dict[str, tuple[str, ...]]:
    if not isinstance(table, Mapping):
        raise PolicyError("business_key must be a table: target = [fields]", field="business_key")
    out: dict[str, tuple[str, ...]] = {}
    for target, fields in table.items():
        field = f"business_key.{target}"
        if (
            not isinstance(fields, list)
            or not fields
            or not all(isinstance(f, str) and f for f in fields)
        ):
            raise PolicyError(f"{field} must be a non-empty list of field names", field=field)
        out[str(target)] = tuple(fields)
    return out


def _fault(name: str, table: object, timeout: float) -> FaultRule:
    where = f"faults.{name}"
    if not isinstance(table, Mapping):
        raise PolicyError(f"{where} must be a table", field=where)
    _unknown(table, _FAULT_FIELDS, where)
    route, tool = table.get("route"), table.get("tool")
    if (route is None) == (tool is None):
        raise PolicyError(f"{where} needs exactly one of route and tool", field=where)
    if route is not None:
        normal = normal_route(route)
        if normal is None:
            raise PolicyError(
                f"{where}.route is 'METHOD /first-segment', such as 'GET /search': {shown(route)}",
                field=f"{where}.route",
            )
        target = normal
    else:
        if not isinstance(tool, str) or not tool.strip():
            raise PolicyError(f"{where}.tool must be a tool name", field=f"{where}.tool")
        target = tool.strip()
    kind = table.get("kind")
    if kind not in FAULT_KINDS:
        raise PolicyError(
            f"{where}.kind must be one of {', '.join(FAULT_KINDS)}, got {shown(kind)}",
            field=f"{where}.kind",
        )
    assert isinstance(kind, str)
    steps_value = table.get("steps", [])
    if not isinstance(steps_value, list):
        raise PolicyError(f"{where}.steps must be a list of attempts", field=f"{where}.steps")
    steps = tuple(sorted({_int(s, f"{where}.steps", 1) for s in steps_value}))
    after = _int(table.get("after", 0), f"{where}.after", 0)
    if steps and "after" in table:
        raise PolicyError(f"{where} takes steps or after, not both", field=f"{where}.after")
    return FaultRule(
        name=name,
        target=target,
        kind=kind,
        steps=steps,
        after=after,
        status=_status(table, kind, where),
        retry_after=_retry_after(table, kind, where),
        delay=_delay(table, kind, where, timeout),
        malformed=_malformed(table, kind, where),
    )


def _only_for(
    table: Mapping[str, Any], key: str, kinds: Collection[str], kind: str, where: str
) -> None:
    if key in table and kind not in kinds:
        raise PolicyError(
            f"{where}.{key} does not apply to kind {kind!r} (only {', '.join(sorted(kinds))})",
            field=f"{where}.{key}",
        )


def _status(table: Mapping[str, Any], kind: str, where: str) -> int | None:
    _only_for(table, "status", _STATUSES, kind, where)
    if kind not in _STATUSES:
        return None
    status = table.get("status", _DEFAULT_STATUS[kind])
    allowed = _STATUSES[kind]
    if isinstance(status, bool) or not isinstance(status, int) or status not in allowed:
        shown_allowed = "500-599" if kind == "outage" else " or ".join(map(str, allowed))
        raise PolicyError(
            f"{where}.status for {kind!r} must be {shown_allowed}, got {shown(status)}",
            field=f"{where}.status",
        )
    return status


def _retry_after(table: Mapping[str, Any], kind: str, where: str) -> float | None:
    _only_for(table, "retry_after", ("rate-limit",), kind, where)
    if kind != "rate-limit":
        return None
    return seconds(table.get("retry_after", 1), f"{where}.retry_after", _MAX_SECONDS)


def _delay(table: Mapping[str, Any], kind: str, where: str, timeout: float) -> float:
    _only_for(table, "delay", _DELAYED, kind, where)
    if kind not in _DELAYED:
        return 0.0
    delay = seconds(table.get("delay", round(timeout * 3, 3)), f"{where}.delay", _MAX_SECONDS)
    if delay <= timeout:
        raise PolicyError(
            f"{where}.delay must be past the scenario's timeout ({timeout:g} s), got {delay:g}",
            field=f"{where}.delay",
        )
    return delay


def _malformed(table: Mapping[str, Any], kind: str, where: str) -> str:
    _only_for(table, "malformed", ("malformed",), kind, where)
    value = table.get("malformed", MALFORMED[0])
    if value not in MALFORMED:
        raise PolicyError(
            f"{where}.malformed must be one of {', '.join(MALFORMED)}, got {shown(value)}",
            field=f"{where}.malformed",
        )
    return str(value)


# -- judging what was measured -----------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TargetCount:
    """What one target (a route or a wrapped tool) saw in the first run.

    Attributes:
        target: the route key or tool name.
        attempts: attempts that reached the fault layer (the remote attempts).
        failed: attempts that got a fault.
        after_open: attempts made while a breaker that this target's failures fed was
            open: each one is an attempt the breaker should have stopped.
        commits: writes carried out by the service.
        duplicates: commits of a business action already committed (after the first).
    """

    target: str
    attempts: int = 0
    failed: int = 0
    after_open: int = 0
    commits: int = 0
    duplicates: int = 0

    def to_dict(self) -> dict[str, Any]:
        """As a JSON-ready dict."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """Everything the shells counted for one scenario.

    Attributes:
        targets: per target, the first run's counts.
        packet: the first run's stop packet as a dict (``None``: the agent gave none).
        committed_keys: idempotency keys of the writes the service committed.
        committed_actions: the business actions the first run committed.
        resumed_actions: the business actions the resumed run committed, in order.
        resume_error: why the resumed run could not be measured, if it could not.
        opened: breakers that opened in the first run.
        refused_locally: calls the breakers refused without reaching the service.
        called_again: tool calls the model made through a breaker after it opened (what
            the model did once told the tool was unavailable).
        faults_met: the names of the scenario's faults that at least one attempt got.
        agent_error: the exception the agent raised, as text (it is a finding).
    """

    targets: tuple[TargetCount, ...]
    packet: Mapping[str, Any] | None
    committed_keys: tuple[str, ...] = ()
    committed_actions: tuple[str, ...] = ()
    resumed_actions: tuple[str, ...] = ()
    resume_error: str | None = None
    opened: tuple[str, ...] = ()
    refused_locally: int = 0
    called_again: int = 0
    faults_met: tuple[str, ...] = ()
    agent_error: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Promise:
    """One of the three outcomes: whether it held, and the numbers that say so."""

    name: str
    held: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """As a JSON-ready dict."""
        return {"name": self.name, "held": self.held, "detail": self.detail}


@dataclasses.dataclass(frozen=True, slots=True)
class Judgement:
    """The three promises of one scenario, and what the model did once told.

    ``unmet`` names the scenario's faults no attempt got: the promises say nothing about
    them (the agent never reached the target, or the target is misspelt).
    """

    promises: tuple[Promise, ...]
    after_unavailable: str
    unmet: tuple[str, ...] = ()

    @property
    def held(self) -> bool:
        """Whether every promise held."""
        return all(p.held for p in self.promises)


def packet_problems(
    packet: Mapping[str, Any] | None,
    committed_keys: Collection[str],
    conditions: Collection[str] = (),
) -> list[str]:
    """What is wrong with a stop packet; empty when there is nothing.

    A valid packet has the stop schema, a known condition (one of ``conditions`` when
    given) that its history of conditions holds (each of them known), a next safe action
    and counters, and accounts for every write the service committed: its idempotency
    key is in ``confirmed`` or ``uncertain``.
    """
    if packet is None:
        return ["no stop packet: the agent ran without a run guard"]
    problems = []
    if packet.get("schema") != STOP_SCHEMA:
        problems.append(f"schema is {shown(packet.get('schema'))}, not {STOP_SCHEMA!r}")
    condition = packet.get("condition")
    if condition not in (*STOP_CONDITIONS, RUNNING):
        problems.append(f"unknown condition {shown(condition)}")
    elif conditions and condition not in conditions:
        problems.append(f"condition {condition!r}, expected one of {', '.join(conditions)}")
    if not isinstance(packet.get("next_safe_action"), str) or not packet["next_safe_action"]:
        problems.append("no next safe action")
    if not isinstance(packet.get("counters"), Mapping):
        problems.append("no counters")
    history = packet.get("history", [])
    if not isinstance(history, list) or not all(isinstance(h, Mapping) for h in history):
        problems.append("the history is not a list of conditions")
    else:
        fired = [h.get("condition") for h in history]
        strange = [c for c in fired if c not in STOP_CONDITIONS]
        if strange:
            problems.append(f"the history names an unknown condition {shown(strange[0])}")
        if condition in STOP_CONDITIONS and condition not in fired:
            problems.append(f"condition {condition!r} is missing from the history")
    steps = [*packet.get("confirmed", ()), *packet.get("uncertain", ())]
    known = {s.get("idempotency_key") for s in steps if isinstance(s, Mapping)}
    missing = [key for key in committed_keys if key not in known]
    if missing:
        problems.append(f"{len(missing)} committed write(s) missing from the packet")
    return problems


def judge(scenario: Scenario, measured: Measured) -> Judgement:
    """The three promises of ``scenario``, decided from what was ``measured``."""
    after_open = sum(t.after_open for t in measured.targets)
    duplicates = sum(t.duplicates for t in measured.targets)
    over = [t for t in measured.targets if t.failed > scenario.max_failed_attempts]
    damage = [f"{after_open} attempt(s) after a breaker opened", f"{duplicates} duplicate(s)"]
    if over:
        damage.append(
            ", ".join(f"{t.target}: {t.failed} failed attempts" for t in over)
            + f" (at most {scenario.max_failed_attempts})"
        )
    before = Promise(
        "before-damage", after_open == 0 and duplicates == 0 and not over, "; ".join(damage)
    )
    problems = packet_problems(measured.packet, measured.committed_keys, scenario.conditions)
    if measured.agent_error is not None:
        problems.insert(0, f"the agent raised {measured.agent_error}")
    condition = None if measured.packet is None else measured.packet.get("condition")
    understandable = Promise(
        "understandable",
        not problems,
        "; ".join(problems) if problems else f"valid stop packet, condition {condition}",
    )
    first = set(measured.committed_actions)
    repeated = sum(1 for action in measured.resumed_actions if action in first)
    if measured.resume_error is not None:
        resumption = Promise("resumption", False, f"the resumed run raised {measured.resume_error}")
    else:
        resumption = Promise(
            "resumption",
            repeated == 0,
            f"{repeated} completed write(s) repeated of {len(first)} committed",
        )
    if measured.opened:
        told = (
            f"told {', '.join(measured.opened)} unavailable; called again "
            f"{measured.called_again} time(s): {measured.refused_locally} refused by a "
            f"breaker, {after_open} reached the service"
        )
    else:
        told = "never told a tool was unavailable"
    if condition not in (None, RUNNING):
        told += f"; the run stopped ({condition})"
    unmet = tuple(r.name for r in scenario.faults if r.name not in measured.faults_met)
    return Judgement((before, understandable, resumption), told, unmet)
