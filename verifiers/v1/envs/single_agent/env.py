"""The original's module path ``verifiers.v1.envs.single_agent.env``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.envs.single_agent``."""

from __future__ import annotations

from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

__all__ = ["SingleAgentEnv", "SingleAgentEnvConfig"]
