"""Benchmarks, run as scripts (python benchmarks/x.py) or imported by the tests and research (from benchmarks import x)."""
