"""Helpers used across the SDK: calling user functions, tool schemas, datasets, decorators, results I/O.

Every module here imports only the standard library at import time (``import verifiers`` must stay
light); heavy optional dependencies (datasets, math-verify) are imported inside the functions that
need them.
"""
