"""Helpers for testing code that uses toolbreaker: part of the product.

Test your own agent against the outages it will meet, with real sockets and no mocks:

- :class:`ToolService`: a real HTTP tool service on 127.0.0.1 (search, orders, tickets,
  e-mails) whose faults you script from Python: outages with ``Retry-After``, slow
  responses, connection resets, commit-then-timeout, malformed payloads (:class:`Fault`).
  It also answers OpenAI chat completions (``POST /v1/chat/completions``, route key
  :data:`CHAT_ROUTE`), so an LLM client can be pointed at it as a model provider;
  :func:`openai_error` builds the error body of a scripted 4xx.
- :func:`request_json`: a small standard-library JSON client for it.
- :class:`SlowProxy`: a TCP proxy that holds every request, making any real server (Redis,
  PostgreSQL, your own service) slow on demand.
- :class:`FakeClock`: a monotonic millisecond clock you move by hand; no sleeps.
- :func:`capture_transitions`: collect every transition of some breakers.
- :func:`force_state`: put a breaker in a given phase for a test.

Standard library only, like the core.
"""

from toolbreaker.testing._chat import CHAT_ROUTE, openai_error
from toolbreaker.testing._helpers import FakeClock, capture_transitions, force_state
from toolbreaker.testing._proxy import SlowProxy
from toolbreaker.testing._service import (
    MALFORMED_SHAPE,
    MALFORMED_TRUNCATED,
    ORDER_IDS,
    SNAPSHOT_AS_OF,
    Fault,
    ToolService,
    request_json,
)

__all__ = [
    "CHAT_ROUTE",
    "MALFORMED_SHAPE",
    "MALFORMED_TRUNCATED",
    "ORDER_IDS",
    "SNAPSHOT_AS_OF",
    "FakeClock",
    "Fault",
    "SlowProxy",
    "ToolService",
    "capture_transitions",
    "force_state",
    "openai_error",
    "request_json",
]
