"""Group-relative advantages (GRPO-style, as in the seed's trainer).

For a group of G rollouts of the same prompt with rewards r_1..r_G:

    A_i = r_i - mean(r)                       (default: no std division, like the seed)
    A_i = (r_i - mean(r)) / (std(r) + eps)    (``normalize_std=True``, as in the GRPO paper)

A group whose rewards are all equal carries no learning signal (every A_i == 0); with
``drop_no_signal=True`` such groups are removed before training (online difficulty filtering).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def group_advantages(rewards: Sequence[float], *, normalize_std: bool = False, eps: float = 1e-6) -> list[float]:
    """Advantages of one group. ``std`` is the population standard deviation of the group.

    >>> group_advantages([1.0, 0.0, 0.0, 1.0])
    [0.5, -0.5, -0.5, 0.5]
    """
    if not rewards:
        return []
    n = len(rewards)
    mean = sum(rewards) / n
    adv = [float(r) - mean for r in rewards]
    if normalize_std:
        std = math.sqrt(sum(a * a for a in adv) / n)
        adv = [a / (std + eps) for a in adv]
    return adv


def has_signal(rewards: Sequence[float], tol: float = 1e-9) -> bool:
    """False when all rewards of the group are equal (within ``tol``)."""
    return bool(rewards) and (max(rewards) - min(rewards)) > tol
