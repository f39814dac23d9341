"""The original's module path ``verifiers.v1.agent``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.agents``."""

from __future__ import annotations

from verifiers.v1.agents import Agent, AgentConfig, Agents, TimeoutConfig, make_agent

__all__ = ["Agent", "AgentConfig", "Agents", "TimeoutConfig", "make_agent"]
