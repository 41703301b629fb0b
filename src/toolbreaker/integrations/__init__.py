"""Adapters for agent frameworks: thin translations into breaker and run-guard calls.

Each adapter lives in its own module and imports its framework when that module is
imported, never from ``import toolbreaker``. A missing framework produces an error that
says which extra to install (``pip install '.[langchain]'``).

Every adapter reports each model response's usage to the run guard with
:func:`count_usage`, from the framework's own usage object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbreaker.integrations._kit import hook_failed

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import RunGuard

__all__ = []


def count_usage(
    guard: RunGuard, model: object, input_tokens: object, output_tokens: object
) -> None:
    """Report one model response's usage to ``guard`` (``RunGuard.add_usage``).

    What a framework reports is taken as it comes: a missing count is 0, a missing model
    name ``"unknown"``. Reporting never changes the response: a count that is no whole
    number, or a guard that fails, is logged and the response goes on to the framework.
    """
    name = str(model) if model else "unknown"
    try:
        guard.add_usage(
            name,
            input_tokens=int(input_tokens or 0),  # type: ignore[call-overload]
            output_tokens=int(output_tokens or 0),  # type: ignore[call-overload]
        )
    except Exception as exc:  # noqa: BLE001 - usage never changes a response
        hook_failed(f"the usage of model {name!r} could not be counted; the response stands", exc)
