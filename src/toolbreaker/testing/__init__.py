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
- :class:`Scenario` (:func:`load_scenario`, :func:`parse_scenario`): a fault scenario, the
  faults each target meets and what the run must hold to; judged by the exercise judge
  (pure, like the core).
- :func:`exercise`: run your own agent (``agent(ctx)``, see :class:`ExerciseContext`)
  against fault scenarios (TOML; :func:`shipped_scenarios`) through a real fault proxy
  or wrapped Python tools, and measure whether its breakers held
  (:class:`ExerciseReport`); :func:`scripted_agent` and :func:`unprotected_agent` are
  the demo's scripted model with and without toolbreaker. ``toolbreaker exercise`` is
  the same from the command line.
- :class:`FakeClock`: a monotonic millisecond clock you move by hand; no sleeps.
- :func:`capture_transitions`: collect every transition of some breakers.
- :func:`force_state`: put a breaker in a given phase for a test.

Standard library only, like the core.
"""

from toolbreaker.testing._agents import (
    model_plan,
    next_call,
    scripted_agent,
    service_tools,
    unprotected_agent,
)
from toolbreaker.testing._chat import CHAT_ROUTE
from toolbreaker.testing._exercise import (
    ExerciseContext,
    ExerciseReport,
    exercise,
    shipped_scenarios,
)
from toolbreaker.testing._helpers import FakeClock, capture_transitions, force_state
from toolbreaker.testing._service import (
    Fault,
    ToolService,
    request_json,
)

__all__ = [
    "CHAT_ROUTE",
    "ExerciseContext",
    "ExerciseReport",
    "FakeClock",
    "Fault",
    "ToolService",
    "capture_transitions",
    "exercise",
    "force_state",
    "model_plan",
    "next_call",
    "request_json",
    "scripted_agent",
    "service_tools",
    "shipped_scenarios",
    "unprotected_agent",
]
