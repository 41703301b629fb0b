"""The run machine: budgets, fingerprints, secret masking and the run's decisions.

Pure like the breaker machine: every function takes ``now`` and returns new values.
"""
