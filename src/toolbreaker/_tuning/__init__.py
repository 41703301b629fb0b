"""The tuners: pure functions that read what happened and say what to change.

- ``_signals``: a breaker's calibration signals and findings, from its transition records
  (openings per span, share of time open, half-open reopens, failures by class, the
  model's compliance with the cooldown it was told), as ``toolbreaker advise``, ``tune``
  and the dashboard show them;
- ``_budgets``: the tightest run budget that stops at most a given rate of the
  successful recorded runs, from each run's profile (``toolbreaker calibrate``; the
  profiles are measured by ``runtime/_run/_calibrate.py``, through the one run driver).

Pure like the core, and on it alone: no clock, no I/O, no lock (the layering test holds
this package to the core, ``tests/test_quality.py::test_pure_modules_read_no_clock_and_do_no_io``
to the standard library's pure parts). The machines decide what a breaker or a run does;
these only advise a person.
"""
