"""``toolbreaker verify``: the receipt a file holds against the replay, line by line."""

from __future__ import annotations

import json
import re
import tempfile
from typing import Final, TextIO

from toolbreaker._replaying._stream import StreamingReplay
from toolbreaker._replaying._text import RECORD_INDENT, string
from toolbreaker.core._breaker.trace import parse_line
from toolbreaker.core._files import MAX_LINE_BYTES, printable
from toolbreaker.errors import ReceiptError, TraceError

__all__ = ["check_files", "verify"]

_DEPENDENCY_LINE: Final = re.compile(r'^    ("(?:[^"\\]|\\.)*"): \{$')


#: Bytes of a file read to tell a receipt from a trace.
_HEAD: Final = 64 * 1024


def _looks_like(path: str) -> str | None:
    """``"receipt"``, ``"trace"`` or ``None``, from the first line that is not blank.

    A receipt is printed JSON: its first line is ``{`` alone. A trace's first line is an
    event. Anything else (or a file that cannot be read) is left to the command to say.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD)
    except OSError:
        return None
    for raw in head.splitlines():
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            continue
        if line == "{":
            return "receipt"
        try:
            return "trace" if parse_line(line) is not None else None
        except TraceError:
            return None
    return None


def check_files(receipt: str, trace: str) -> None:
    """Refuse a receipt given where the trace goes, or a trace where the receipt goes.

    ``verify RECEIPT TRACE`` takes them in that order; swapped, the replay of a receipt
    would fail on its first line as "malformed JSON", which says nothing of the order.

    Raises:
        ReceiptError: naming which file looks like what, and the order.
    """
    as_receipt, as_trace = _looks_like(receipt), _looks_like(trace)
    order = "verify takes RECEIPT TRACE, in that order"
    if as_receipt == "trace" and as_trace == "receipt":
        raise ReceiptError(
            f"{printable(receipt)} looks like a trace and {printable(trace)} like a receipt: "
            f"{order} (swap them)"
        )
    if as_trace == "receipt":
        raise ReceiptError(f"looks like a receipt, not a trace: {order}", file=trace)
    if as_receipt == "trace":
        raise ReceiptError(f"looks like a trace, not a receipt: {order}", file=receipt)


def verify(receipt: str, driver: StreamingReplay, trace: str, out: TextIO) -> int:
    """Compare the receipt file with the replay, line by line; one line of verdict.

    Exit 0 when the file is byte for byte the receipt ``replay`` prints, 1 at the first
    line that differs (named with its dependency and transition).
    """
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as expected:
        receipt_hash = driver.write(expected)
        expected.seek(0)
        try:
            handle = open(receipt, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ReceiptError(f"cannot read: {exc.strerror or exc}", file=receipt) from None
        with handle:
            dependency, transition, number = None, 0, 0
            while True:
                want = expected.readline().encode("utf-8")
                try:
                    got = handle.readline(MAX_LINE_BYTES + 1)
                except OSError as exc:
                    raise ReceiptError(
                        f"cannot read: {exc.strerror or exc}", file=receipt
                    ) from None
                number += 1
                if want != got:
                    break
                if not want:
                    out.write(
                        f"verified: {printable(receipt)} is exactly the receipt of "
                        f"{printable(trace)} under policy {driver.policy.version}{_rows(driver)} "
                        f"(receipt_hash {receipt_hash})\n"
                    )
                    return 0
                line = want.decode("utf-8")
                found = _DEPENDENCY_LINE.match(line.rstrip("\n"))
                if found:
                    dependency, transition = json.loads(found.group(1)), 0
                elif line == RECORD_INDENT + "{\n":
                    transition += 1
    where = ""
    if dependency is not None:
        where = f" in dependency {string(dependency)}"
        if transition or want.startswith(RECORD_INDENT.encode() + b"{"):
            where += f" transition #{transition + want.startswith(RECORD_INDENT.encode() + b'{')}"
    if not got or (not got.endswith(b"\n") and want.startswith(got)):
        detail = f"the file ends early; the replay has {_shown_line(want)}"
    elif not want:
        detail = f"the replay ends here; the file goes on with {_shown_line(got)}"
    else:
        detail = f"the replay has {_shown_line(want)}, the file {_shown_line(got)}"
    out.write(
        f"{printable(receipt)}:{number}: differs from the replay of {printable(trace)}"
        f"{printable(where)}: {detail}\n"
    )
    return 1


def _rows(driver: StreamingReplay) -> str:
    rows = len(driver.sheet.rows)
    if not rows:
        return ""
    return f" and the {rows} row{'s' if rows > 1 else ''} of its boundary sheet"


def _shown_line(data: bytes, width: int = 80) -> str:
    text = data.decode("utf-8", "replace").strip()
    text = text[:width] + ("…" if len(text) > width else "")
    return printable(repr(text))
