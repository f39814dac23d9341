"""The original's module path ``verifiers.v1.envs.best_of_n.env``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.envs.best_of_n``."""

from __future__ import annotations

from verifiers.v1.envs.best_of_n import BestOfNEnv, BestOfNEnvConfig

__all__ = ["BestOfNEnv", "BestOfNEnvConfig"]
