"""Repository tools, run as scripts (python tools/x.py) or imported by the tests (from tools import x)."""
