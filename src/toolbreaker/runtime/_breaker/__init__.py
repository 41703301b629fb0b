"""The breaker shell: may this dependency be called now, and how did the call end?

Admission and settling through the store, calls with deadlines (the worker pool and the
async watchdog), bulkheads, retries and their budget, the classifier and degradation. Every
decision comes from :mod:`toolbreaker.core._breaker`, :mod:`toolbreaker.core._retry` and
:mod:`toolbreaker.core._degrade`; this package carries them out. It never imports the run
shell or the fleet.
"""
