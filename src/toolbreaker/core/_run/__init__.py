"""The run machine: budgets, fingerprints, secret masking and the run's decisions.

``machine`` decides a run's requests and events; ``protocol`` is the write protocol (a
write's journal statuses, their lifecycle, and what every reader does with each);
``rounds`` what an answer that is not a call's outcome is (an input-required round, a
task) and how a task's final status settles the call; ``budget`` is how far a run may
go, ``state`` what a run has done, ``limits`` the limit decisions (``budget`` re-exports
both).
Pure like the breaker machine: every function takes ``now`` and returns new values.
"""
