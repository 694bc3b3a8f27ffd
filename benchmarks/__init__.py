"""Benchmarks of the short-term memory against what a bot author would use instead.

Run on demand with ``python -m benchmarks.run``; never part of the test suite.
"""
