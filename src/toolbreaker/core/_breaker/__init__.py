"""The breaker machine: policies, states, ``apply()``, receipts and traces.

Pure: time arrives inside events; nothing here reads a clock, takes a lock or does I/O
beyond reading a file it is asked to read.
"""
