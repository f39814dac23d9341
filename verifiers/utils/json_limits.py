"""Bounds on hostile JSON values, shared by every part that stores or forwards one (the hub's API,
the interception proxy): how deeply a value nests, and whether it holds a number JSON cannot."""

from __future__ import annotations

import math
from typing import Any


def json_depth(value: Any, limit: int) -> int:
    """How deeply ``value``'s containers nest (a scalar is 0, ``[]`` is 1); without recursion, and
    it stops counting once past ``limit`` (so a hostile value costs at most its size)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d)
            if d > limit:
                return d
            stack.extend((x, d + 1) for x in v)
    return deepest


def first_non_finite(value: Any) -> float | None:
    """The first NaN or infinity in ``value`` (which JSON cannot carry), or None."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return v
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None
