"""The values command-line options take, checked where the command line is read.

Every option that takes a number, a port, a duration or a time gets its type here, so a
bad value is refused before anything is opened or run, the same way for every command:
one line naming the option and the value, exit 2 (:class:`Parser` makes argparse's
errors that one line). Nothing a command reads is ignored quietly or replaced by a
default: a value out of range is an error, not clamped.

Durations have one grammar, :func:`parse_duration`: a whole or decimal number and a unit
``s``, ``m``, ``h`` or ``d`` (``90s``, ``15m``, ``1.5h``, ``7d``), up to ten years; a bare
number of seconds only where the option says so (``--prune-done``), since ``--since
1700000000`` reads like a Unix time and would be taken as an age of 54 years.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Final, NoReturn

from toolbreaker.core._files import printable
from toolbreaker.errors import ToolbreakerError

__all__ = [
    "MAX_COUNT",
    "MAX_DURATION_MS",
    "MAX_DURATION_S",
    "Duration",
    "Parser",
    "Since",
    "UsageError",
    "duration",
    "parse_duration",
    "parse_since",
    "port",
    "since",
    "whole",
]

#: The longest duration any option takes: ten years, in seconds.
MAX_DURATION_S: Final = 10 * 366 * 86_400
#: The same in milliseconds, for the options given in ms.
MAX_DURATION_MS: Final = MAX_DURATION_S * 1000
#: The largest count an option takes: the largest integer every JSON reader keeps exact.
MAX_COUNT: Final = 2**53 - 1
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION: Final = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)([smhd]?)")


class UsageError(ToolbreakerError):
    """The command line itself is wrong: an unknown option, a missing argument, a bad value.

    ``main`` prints it as one line, exit 2.
    """


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``toolbreaker CMD: what is wrong``.

    argparse prints a usage block and exits; a user mistake here is one line like every
    other (``--help`` still prints the usage), raised as :class:`UsageError` for ``main``.
    """

    def error(self, message: str) -> NoReturn:
        """Raise the mistake as one line; the value it quotes is made printable."""
        raise UsageError(f"{self.prog}: {printable(message)} (see {self.prog} --help)")


def whole(low: int, high: int, *, unit: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (``unit`` names it)."""
    what = f"a whole number of {unit}" if unit else "a whole number"

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {what} from {low} to {high}, got {text!r}")
        return value

    parse.__name__ = "whole number"
    return parse


def port(text: str) -> int:
    """An argparse type: a TCP port to listen on, 1 to 65535.

    0 ("any free port") is refused too: the command would print a URL that is wrong.
    """
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 1 to 65535, got {text!r}")
    return value


def parse_duration(text: str, *, bare_seconds: bool = False) -> float | None:
    """Seconds of ``90s``, ``15m``, ``1.5h`` or ``7d``; ``None`` when it is no duration.

    ``bare_seconds``: a number without a unit is seconds (``3600``). At most
    :data:`MAX_DURATION_S`.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None or (not match[2] and not bare_seconds):
        return None
    seconds = float(match[1]) * _UNITS[match[2] or "s"]
    return seconds if math.isfinite(seconds) and seconds <= MAX_DURATION_S else None


class Duration(float):
    """A duration in seconds that remembers how it was written (``7d``), for messages."""

    text: str

    def __new__(cls, seconds: float, text: str) -> Duration:
        made = super().__new__(cls, seconds)
        made.text = text
        return made


def duration(*, bare_seconds: bool = False) -> Callable[[str], Duration]:
    """An argparse type: a duration (:func:`parse_duration`), in seconds."""
    examples = "7d, 12h, 30m, 90s" + (" or 3600 (seconds)" if bare_seconds else "")

    def parse(text: str) -> Duration:
        seconds = parse_duration(text, bare_seconds=bare_seconds)
        if seconds is None:
            raise argparse.ArgumentTypeError(
                f"must be a duration such as {examples}, up to ten years, got {text!r}"
            )
        return Duration(seconds, text.strip())

    parse.__name__ = "duration"
    return parse


class Since:
    """``--since``: an age (``15m``: that long before now) or an ISO time.

    Attributes:
        text: what the user wrote (for messages).
        age: seconds before now, for an age; ``None`` for a time.
        at: Unix seconds, for a time (UTC unless it says); ``None`` for an age.
    """

    __slots__ = ("age", "at", "text")

    def __init__(self, text: str, *, age: float | None = None, at: float | None = None) -> None:
        self.text = text
        self.age = age
        self.at = at

    def cutoff(self, now: float) -> float:
        """Unix seconds: entries at or after this are "since"."""
        return now - self.age if self.age is not None else float(self.at or 0.0)

    def __str__(self) -> str:
        return self.text


def parse_since(text: str) -> Since | None:
    """``--since``'s value: an age or an ISO time; ``None`` when it is neither."""
    seconds = parse_duration(text)
    if seconds is not None:
        return Since(text.strip(), age=seconds)
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return Since(text.strip(), at=when.timestamp())


def since(text: str) -> Since:
    """An argparse type: :func:`parse_since`, or the error naming what it takes."""
    found = parse_since(text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"must be an age such as 30s, 15m, 2h, 1d or an ISO time such as "
            f"2026-01-02T03:04:05 (UTC unless it says), got {text!r}"
        )
    return found
