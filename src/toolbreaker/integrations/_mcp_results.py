"""What an MCP tool's result says about the server's health, for the MCP proxy.

- An ``is_error`` result is the server's answer of failure, as text:
  :func:`result_error` reads the HTTP status and ``Retry-After`` it reports
  (:class:`ToolResultError`, never raised).
- A *malformed success*: a result that is not an error but does not match the tool's
  declared output schema (``outputSchema``: the structured result is missing, or does not
  validate). The SDK (``mcp`` 2.3) checks every result of a listed tool against its schema
  and raises ``RuntimeError`` for one that fails; :func:`malformed_result` recognises
  that refusal as :class:`MalformedResult`, a bad gateway (502): a failure of the tool
  that counts against its breaker, and, for a write, an unknown outcome (the server
  answered, so it may have made the write; see
  ``may_have_committed``). A tool that declares no output schema
  is never judged so; pass ``classify_result`` to judge its results yourself.

Imported by :mod:`toolbreaker.integrations.mcp` after it checked the ``mcp`` extra.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from mcp.types import CallToolResult, TextContent

from toolbreaker.errors import ToolReportedError

__all__ = ["MalformedResult", "ToolResultError", "malformed_result", "result_error"]

_STATUS_TEXT: Final = re.compile(
    r"\b(?:HTTP(?:/\d(?:\.\d)?)?(?:\s+error)?|status(?:[\s_-]*code)?)\s*[:=]?\s*([1-5]\d\d)\b",
    re.IGNORECASE,
)
_RETRY_AFTER_TEXT: Final = re.compile(r"\bretry[\s_-]*after\s*[:=]?\s*(\d+(?:\.\d+)?)", re.I)
_STATUS_FIELDS: Final = ("status_code", "status", "statusCode", "http_status")
_RETRY_AFTER_FIELDS: Final = ("retry_after", "retryAfter", "retry_after_seconds")


class ToolResultError(ToolReportedError):
    """An ``is_error`` tool result, as the breaker and the run guard judge it.

    It is never raised to the caller: it carries the result's evidence to the
    classifier, which reads ``status_code`` and ``headers`` as it does for an HTTP error.

    Attributes:
        result: the tool result.
        status_code: the HTTP status the result reports, if any.
        headers: ``Retry-After`` as the result reported it, header-style.
    """

    def __init__(
        self,
        result: CallToolResult,
        *,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        message = _text_of(result)[:300] or "the tool reported an error"
        super().__init__(message, status_code=status_code, headers=headers)
        self.result = result


def result_error(result: CallToolResult) -> ToolResultError | None:
    """The default result classifier: ``None`` for a success, else the error's evidence.

    The status comes from ``structured_content`` (``status_code``, ``status``,
    ``statusCode``, ``http_status``) or from the text (``HTTP 503``, ``HTTP/1.1 503``,
    ``HTTP Error 429``, ``status code: 502``); ``Retry-After`` likewise
    (``retry_after``, ``Retry-After: 30``).
    """
    if not result.is_error:
        return None
    status: int | None = None
    wait: str | None = None
    data = result.structured_content
    if isinstance(data, Mapping):
        for field in _STATUS_FIELDS:
            value = data.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                status = value
                break
        for field in _RETRY_AFTER_FIELDS:
            value = data.get(field)
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                wait = str(value)
                break
    text = _text_of(result)
    if status is None and (found := _STATUS_TEXT.search(text)):
        status = int(found.group(1))
    if wait is None and (found := _RETRY_AFTER_TEXT.search(text)):
        wait = found.group(1)
    headers = {"retry-after": wait} if wait is not None else None
    return ToolResultError(result, status_code=status, headers=headers)


class MalformedResult(ToolReportedError):
    """A tool's success that does not match its declared output schema: a bad gateway.

    Never raised to the caller: the breaker counts it as a failure of the tool (status
    502) and the model is told the call failed.

    Attributes:
        tool: the tool's name.
        status_code: 502.
    """

    def __init__(self, tool: str, why: str) -> None:
        super().__init__(
            f"the result of {tool} does not match its declared output schema: {why}"[:300],
            status_code=502,
        )
        self.tool = tool


def malformed_result(tool: str, exc: BaseException) -> MalformedResult | None:
    """``exc`` as a :class:`MalformedResult` if it is the SDK refusing ``tool``'s result.

    The SDK refuses a result that does not match the tool's output schema; any other
    exception is ``None``.

    The SDK raises a plain ``RuntimeError`` for both cases: caused by the schema's
    ``ValidationError``, or, for a result without its structured content, with the text
    :data:`MISSING_STRUCTURED` names (the tests pin both against the real SDK).
    """
    if type(exc) is not RuntimeError:
        return None
    from jsonschema import ValidationError  # type: ignore[import-untyped]  # the SDK's own

    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        why = cause.message
    elif str(exc) == MISSING_STRUCTURED.format(tool=tool):
        why = "no structured result"
    else:
        return None
    found = MalformedResult(tool, why)
    found.__cause__ = exc
    return found


#: The SDK's words for a result of a tool with an output schema but no structured result.
MISSING_STRUCTURED: Final = "Tool {tool} has an output schema but did not return structured content"


def _text_of(result: CallToolResult) -> str:
    """The text blocks of ``result``, joined by spaces."""
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))
