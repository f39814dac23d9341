"""The original's module path ``verifiers.v1.configs.agent``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.agents``."""

from __future__ import annotations

from verifiers.v1.agents import AgentConfig, TimeoutConfig, agent_config_fields
from verifiers.v1.configs import WireAgentConfig

__all__ = ["AgentConfig", "TimeoutConfig", "WireAgentConfig", "agent_config_fields"]
