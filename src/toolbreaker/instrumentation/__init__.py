"""Instrumentation: breaker counters and states as metrics, read at scrape time.

Nothing here touches a hot path: exporters read ``BreakerStats`` and
each breaker's current state when they are collected. Every exporter sits behind its own
extra and is imported only from its own module.
"""

__all__ = []
