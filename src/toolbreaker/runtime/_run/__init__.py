"""The run shell: may this run take its next action?

:class:`~toolbreaker.RunGuard` feeds the run machine (:mod:`toolbreaker.core._run`) and
carries out its verdicts: the journal, writes that plan, authorize, execute, verify and
record, turns and their sibling calls, stop packets; ``_recorded`` replays a recorded run
through a live guard (what ``toolbreaker check-run`` runs: one driver, so the two never
disagree). It drives dependency breakers through :mod:`toolbreaker.runtime._breaker`; it
never imports the fleet.
"""
