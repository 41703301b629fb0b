"""The fleet: what many breakers and many processes share.

The registry (the one list of breakers that listeners, recorders and exporters attach to),
published policy and its followers, health checks, draining queued work and the trace
recorder. It sits above the breaker and run shells and may use both.
"""
