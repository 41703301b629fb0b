"""The fleet: what many breakers and many processes share.

The registry (the one list of breakers), the one way observers attach to it, to a run
guard or to a breaker and see every breaker it holds now and later (``_attach``), the
trace recorder, published policy and its followers, health checks and draining queued
work. It sits above the breaker and run shells and may use both.
"""
