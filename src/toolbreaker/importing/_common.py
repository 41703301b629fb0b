"""What every importer shares: the run it builds, the warnings it keeps, how it trims.

An importer turns a decoded file into :class:`ImportedRun` values through a
:class:`RunBuilder`: one call a tool step, one call a model step. The builder keeps the
clock monotonic (a step that would go back in time is put at the step before it, with a
warning), writes each line in the recorded-run format and checks it against that format
(:func:`~toolbreaker.runtime._run._recorded_step.parse_step`), so an importer cannot write
a line ``check-run`` would refuse. What a source holds that the format cannot say is a
warning, counted once per kind.

Trimming (``trim``): a string in a result longer than ``trim`` characters becomes
``{"digest", "length", "head", "tail"}``: the core's
:func:`~toolbreaker.core._run.fingerprint.evidence` of the whole string, its length and
its first and last ``trim // 2`` characters. Two results of a run are the same evidence
after trimming exactly when they were before: within a run, every string with one digest
takes the form of its first occurrence (a later one equal to it only after the
fingerprint's normalisation, case or runs of whitespace, is not trimmed differently), and
strings with different digests keep different digests.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Final, Literal

from toolbreaker.core._files import shown
from toolbreaker.core._run.budget import WRITES, RiskClass
from toolbreaker.core._run.fingerprint import evidence
from toolbreaker.errors import TraceError
from toolbreaker.runtime._run._recorded_step import outcome_for, parse_step

__all__ = [
    "UNNAMED",
    "ImportedRun",
    "Outcome",
    "RunBuilder",
    "as_cost",
    "decoded",
    "field",
    "malformed",
    "obj",
]

#: The class of a failed call whose exception an export does not name.
UNNAMED: Final = "unknown-exception:Exception"

#: What the source says of the run as a whole: it did its task, or it did not.
Outcome = Literal["success", "failure"]

#: How many characters of a trimmed string's head and tail are kept, at most.
_MAX_KEEP: Final = 4096
_PLACES: Final = Decimal(1).scaleb(-18)
_WIDE: Final = Context(prec=80)


@dataclasses.dataclass(frozen=True, slots=True)
class ImportedRun:
    """One run, converted into the recorded-run format.

    Attributes:
        name: a name for the run, unique within its file (a task and trial, a trace id).
        source: the file it came from.
        steps: the run's lines, JSON-ready, in the recorded-run format.
        outcome: what the source says of the run (``None``: it says nothing).
        detail: what the source says of it beside the steps (a reward, an exit status).
        warnings: what the source holds that could not be mapped, one line each.
    """

    name: str
    source: str
    steps: tuple[dict[str, Any], ...]
    outcome: Outcome | None = None
    detail: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_jsonl(self) -> str:
        """The run as a recorded-run file: JSON Lines, one step a line."""
        return "".join(json.dumps(step, ensure_ascii=False) + "\n" for step in self.steps)


class RunBuilder:
    """Builds one run, a step at a time, in the recorded-run format.

    Args:
        name: the run's name.
        source: the file it comes from.
        risks: the risk class of tools the source does not describe itself, by name.
        trim: trim result strings longer than this (``None``: keep them whole).
    """

    def __init__(
        self,
        name: str,
        source: str,
        *,
        risks: Mapping[str, RiskClass] | None = None,
        trim: int | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.risks = dict(risks or {})
        self.trim = trim
        self._steps: list[dict[str, Any]] = []
        self._at: int | None = None
        self._warnings: dict[str, int] = {}
        self._trimmed: dict[str, Any] = {}

    def warn(self, what: str) -> None:
        """Note something the format cannot say; each kind is reported once, counted."""
        self._warnings[what] = self._warnings.get(what, 0) + 1

    def tool(
        self,
        at: int,
        tool: str,
        args: Mapping[str, Any],
        *,
        result: Any = None,
        error: str | None = None,
        result_error: str | None = None,
        changes_state: bool | None = None,
        risk: RiskClass | None = None,
        unknown: bool = False,
    ) -> None:
        """A tool call, as it ended.

        ``error`` (the classifier's class) when it failed: its outcome is the one that
        class has (:func:`~toolbreaker.runtime._run._recorded_step.outcome_for`);
        ``unknown``: a write whose outcome is unknown for no class (its verification
        failed); else it returned ``result`` (``result_error``: what failure the result
        reports).
        """
        chosen = risk or self.risks.get(tool, "read")
        line: dict[str, Any] = {"at": self._clock(at), "tool": tool, "args": dict(args)}
        if chosen != "read":
            line["risk"] = chosen
        if error is not None:
            line["outcome"] = outcome_for(error, write=chosen in WRITES)
            line["error"] = error
        elif unknown:
            line["outcome"] = "unknown"
        elif result is not None:
            line["result"] = self._trimmed_value(result)
        if result_error is not None:
            line["result_error"] = result_error
        if changes_state is not None:
            line["changes_state"] = changes_state
        self._add(line)

    def model(
        self,
        at: int,
        model: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost: Decimal | None = None,
    ) -> None:
        """A model step: a turn of the model, with its usage and cost when known."""
        line: dict[str, Any] = {"at": self._clock(at)}
        if model is not None:
            line["model"] = model
        if input_tokens is not None or output_tokens is not None:
            if model is None:
                self.warn("a model step's usage without the model's name is not kept")
            else:
                line["input_tokens"] = input_tokens or 0
                line["output_tokens"] = output_tokens or 0
        if cost is not None:
            line["cost"] = format(cost, "f")
        self._add(line)

    def build(
        self, outcome: Outcome | None = None, detail: Mapping[str, Any] | None = None
    ) -> ImportedRun:
        """The run, with what the source says of it."""
        warnings = tuple(
            f"{what} ({count} time{'s' if count > 1 else ''})" if count > 1 else what
            for what, count in self._warnings.items()
        )
        return ImportedRun(
            self.name, self.source, tuple(self._steps), outcome, dict(detail or {}), warnings
        )

    def _clock(self, at: int) -> int:
        at = max(0, at)
        if self._at is not None and at < self._at:
            self.warn("a step recorded before the step it follows is put at that step's time")
            at = self._at
        self._at = at
        return at

    def _add(self, line: dict[str, Any]) -> None:
        try:
            parse_step(line)
        except (TypeError, ValueError) as exc:  # pragma: no cover - the builder writes valid lines
            raise malformed(self.source, f"{self.name}: {exc}") from None
        self._steps.append(line)

    def _trimmed_value(self, value: Any) -> Any:
        if self.trim is None:
            return value
        if isinstance(value, str):
            if len(value) <= self.trim:
                return value
            digest = evidence(value)
            kept = self._trimmed.get(digest)
            if kept is None:
                keep = min(self.trim // 2, _MAX_KEEP)
                kept = {
                    "digest": digest,
                    "length": len(value),
                    "head": value[:keep],
                    "tail": value[-keep:] if keep else "",
                }
                self._trimmed[digest] = kept
            return kept
        if isinstance(value, Mapping):
            return {key: self._trimmed_value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._trimmed_value(item) for item in value]
        return value


def decoded(value: Any) -> Any:
    """A JSON string as the value it encodes (an object or array); anything else as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def as_cost(value: Any) -> Decimal | None:
    """A source's cost (a float or a decimal string) as an exact amount; ``None`` if none."""
    if value is None or isinstance(value, bool):
        return None
    try:
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
        if not amount.is_finite() or not 0 <= amount < 10**18:
            return None
        text = format(amount.quantize(_PLACES, context=_WIDE), "f")
    except InvalidOperation:
        return None
    return Decimal(text.rstrip("0").rstrip(".") if "." in text else text)


def malformed(source: str, message: str, line: int | None = None) -> TraceError:
    """The error for a file its importer cannot read: the file, the line when known."""
    return TraceError(message, file=source, line=line)


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (an optional part left out)."""
    return value if isinstance(value, dict) else {}


def field(data: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``data[name]``, which must be of ``kind``; a message naming ``where`` otherwise."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{where} must be an object, got {shown(data)}")
    value = data.get(name)
    if not isinstance(value, kind):
        raise TypeError(f"{where}: {name} is missing or not {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "text", int: "an integer", float: "a number"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)
