"""The original's module path ``verifiers.v1.envs.user_sim.env``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.envs.user_sim``."""

from __future__ import annotations

from verifiers.v1.envs.user_sim import DONE, PERSONA, UserSimEnv, UserSimEnvConfig

__all__ = ["DONE", "PERSONA", "UserSimEnv", "UserSimEnvConfig"]
